"""ULMFiT (transfer/ulmfit.py) on a tiny, oddly sized biLM: the encoder is the LM's own direction,
concat pooling against numpy over the unpadded rows, discriminative rates per group, gradual
unfreezing by the parameters that actually change, the bidirectional average, LM fine-tuning
lowering the task-text loss, save/load, and `classify train --recipe ulmfit` end to end.

The trainer writes no checkpoints (runs take minutes; an interrupted run starts again), so there
is no resume test."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from elmokit.bilm import PRESETS
from elmokit.cli.main import main
from elmokit.engine.schedules import slanted_triangular_fraction
from elmokit.lm import LanguageModel, init_like_bilm_tf
from elmokit.text.chars import batch_to_ids
from elmokit.text.vocab import Vocabulary
from elmokit.transfer.ulmfit import (
    ClassifierOptions,
    ClassifierTrainer,
    DirectionalClassifier,
    LMFineTuneOptions,
    ULMFiTClassifier,
    ULMFiTConfig,
    ULMFiTError,
    concat_pool,
    finetune_language_model,
    language_model_loss,
    length_batches,
    lm_layer_groups,
    train_ulmfit,
)

# P = 5, D = 7, 2 layers, 3 labels: a swapped axis fails loudly.
CONFIG = PRESETS["tiny"].replace(lstm_dim=7, projection_dim=5, filters=((1, 3), (2, 4)), n_layers=2, dropout=0.1)
VOCAB = Vocabulary(("<S>", "</S>", "<UNK>", "the", "film", "was", "great", "awful", "a", "plot", "dull", "fun"))
SENTENCES = [["the", "film", "was", "great"], ["awful"], ["a", "dull", "plot"], ["great", "fun"],
             ["the", "plot", "was", "dull", "and", "awful"], ["fun", "film"], ["was", "it", "great", "?"]]
LABELS = ["pos", "neg", "neg", "pos", "neg", "pos", "q"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and the shared CPU is not oversubscribed."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_lm(seed=0):
    lm = LanguageModel(CONFIG, len(VOCAB), bos_id=VOCAB.bos, eos_id=VOCAB.eos)
    init_like_bilm_tf(lm, torch.Generator().manual_seed(seed))
    return lm.eval()


def make_classifier(direction="forward", seed=0, lm=None):
    torch.manual_seed(seed)
    lm = lm or make_lm(seed)
    config = ULMFiTConfig(bilm=CONFIG.to_dict(), num_labels=3, head_dim=6, encoder_dropout=0.1)
    return DirectionalClassifier(config, direction).eval(), lm, config


# ---------------------------------------------------------------------- the model
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_encoder_is_the_lms_own_direction(direction):
    """Its top states are the biLM's top layer of that direction (backward: read right to left)."""
    model, lm, _ = make_classifier(direction)
    model.encoder.load_from_bilm(lm.bilm)
    char_ids = batch_to_ids(SENTENCES[:3])
    with torch.no_grad():
        states, lengths = model.encoder(char_ids)  # (B, T2, P) in reading order
        top = lm.bilm(char_ids).layers[-1]  # (B, T2, 2P) = [fwd; bwd] in text order
    P = CONFIG.projection_dim
    assert lengths.tolist() == [len(s) + 2 for s in SENTENCES[:3]]
    for b, n in enumerate(lengths.tolist()):
        expected = top[b, :n, :P] if direction == "forward" else top[b, :n, P:].flip(0)
        torch.testing.assert_close(states[b, :n], expected, rtol=1e-5, atol=1e-6)
        assert torch.all(states[b, n:] == 0)


def test_concat_pooling_on_a_padded_batch_against_numpy_over_the_unpadded_rows():
    generator = torch.Generator().manual_seed(3)
    states = torch.randn(3, 7, 5, generator=generator) - 2.0  # mostly negative: a zero pad would win a max
    lengths = torch.tensor([7, 2, 4])
    for b, n in enumerate(lengths.tolist()):
        states[b, n:] = 50.0  # padding garbage that must be ignored
    pooled = concat_pool(states, lengths).numpy()
    assert pooled.shape == (3, 15)
    for b, n in enumerate(lengths.tolist()):
        rows = states[b, :n].numpy().astype(np.float64)
        expected = np.concatenate([rows[-1], rows.max(axis=0), rows.mean(axis=0)])
        np.testing.assert_allclose(pooled[b], expected, rtol=1e-6, atol=1e-6)


def test_layer_groups_cover_every_parameter_once_in_order():
    model, lm, _ = make_classifier()
    groups = model.layer_groups()
    assert len(groups) == CONFIG.n_layers + 2  # token encoder, each LSTM layer, head
    ids = [id(p) for g in groups for p in g]
    assert sorted(ids) == sorted(id(p) for p in model.parameters()) and len(set(ids)) == len(ids)
    assert {id(p) for p in groups[0]} == {id(p) for p in model.encoder.token_encoder.parameters()}
    assert {id(p) for p in groups[-1]} == {id(p) for p in model.head.parameters()}
    lm_ids = [id(p) for g in lm_layer_groups(lm) for p in g]
    assert sorted(lm_ids) == sorted(id(p) for p in lm.parameters()) and len(set(lm_ids)) == len(lm_ids)


# ---------------------------------------------------------------------- training
def test_discriminative_rates_per_param_group_follow_stlr_step_by_step():
    model, lm, _ = make_classifier()
    options = ClassifierOptions(epochs=3, batch_size=3, learning_rate=0.01)
    trainer = ClassifierTrainer(model, SENTENCES, [0, 1, 1, 0, 1, 0, 2], options)
    peaks = [g["peak_lr"] for g in trainer.optimizer.param_groups]
    assert peaks == pytest.approx([0.01 / 2.6**3, 0.01 / 2.6**2, 0.01 / 2.6, 0.01], rel=1e-12)
    assert trainer.steps_per_epoch == 2  # 7 sentences in batches of 3: 3 + 4 (a batch of one is merged)
    seen = []
    original_step = trainer.optimizer.step

    def recording_step(*args, **kwargs):
        seen.append([g["lr"] for g in trainer.optimizer.param_groups])
        return original_step(*args, **kwargs)

    trainer.optimizer.step = recording_step
    for epoch in (1, 2, 3):
        trainer.run_epoch(epoch)
    assert len(seen) == 6
    for t, rates in enumerate(seen):  # eq. 3 at t of T = 6, times each group's eq. 2 peak
        cut = max(1, int(6 * 0.1))
        p = t / cut if t < cut else max(0.0, 1 - (t - cut) / (cut * (1 / 0.1 - 1)))
        assert rates == pytest.approx([peak * (1 + p * 31) / 32 for peak in peaks], rel=1e-12)
        assert rates[-1] == pytest.approx(0.01 * slanted_triangular_fraction(t, 6), rel=1e-12)


def snapshot(groups):
    return [[p.detach().clone() for p in g] for g in groups]


def changed(before, groups):
    return [any(not torch.equal(a, p.detach()) for a, p in zip(old, g)) for old, g in zip(before, groups)]


def test_gradual_unfreezing_updates_one_more_group_from_the_top_each_epoch():
    model, lm, _ = make_classifier()
    model.encoder.load_from_bilm(lm.bilm)
    trainer = ClassifierTrainer(model, SENTENCES, [0, 1, 1, 0, 1, 0, 2], ClassifierOptions(epochs=5, batch_size=3))
    groups = model.layer_groups()  # token encoder, LSTM 1, LSTM 2, head
    expected = {1: [False, False, False, True], 2: [False, False, True, True], 3: [False, True, True, True],
                4: [True, True, True, True], 5: [True, True, True, True]}
    for epoch in range(1, 6):
        before = snapshot(groups)
        trainer.run_epoch(epoch)
        assert changed(before, groups) == expected[epoch], f"epoch {epoch}"
        assert [all(p.requires_grad for p in g) for g in groups] == expected[epoch]
        assert [any(p.requires_grad for p in g) for g in groups] == expected[epoch]


def test_unfreeze_all_updates_every_group_from_the_first_epoch():
    model, lm, _ = make_classifier()
    trainer = ClassifierTrainer(model, SENTENCES, [0, 1, 1, 0, 1, 0, 2],
                                ClassifierOptions(epochs=2, batch_size=3, unfreeze="all"))
    before = snapshot(model.layer_groups())
    trainer.run_epoch(1)
    assert changed(before, model.layer_groups()) == [True] * 4


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_lm_fine_tuning_lowers_the_task_text_loss():
    lm = make_lm()
    before = language_model_loss(lm, VOCAB, SENTENCES)
    history = finetune_language_model(lm, VOCAB, SENTENCES * 3, LMFineTuneOptions(epochs=6, batch_size=4, samples=5,
                                                                                  learning_rate=0.02))
    after = language_model_loss(lm, VOCAB, SENTENCES)
    assert len(history) == 6 and history[-1]["lm_train_loss"] < history[0]["lm_train_loss"]
    assert after < before - 0.05, (before, after)


def test_lm_fine_tuning_is_the_same_for_the_same_seed_whatever_the_global_generator_held():
    runs = []
    for disturbance in (3, 5):
        torch.rand(disturbance)  # the dropout masks must come from options.seed, not from what ran before
        lm = make_lm()
        history = finetune_language_model(lm, VOCAB, SENTENCES, LMFineTuneOptions(epochs=1, batch_size=4, samples=4, seed=2))
        runs.append(([h["lm_train_loss"] for h in history], lm.state_dict()))
    (losses, weights), (again, same) = runs
    assert losses == again and all(torch.equal(weights[k], same[k]) for k in weights)


def test_length_batches_cover_every_index_once_and_never_leave_a_batch_of_one():
    rng = np.random.default_rng(0)
    for count, size in ((7, 3), (10, 3), (1, 4), (65, 8)):
        batches = length_batches([i % 5 + 1 for i in range(count)], size, rng, bucket=2)
        assert sorted(i for b in batches for i in b) == list(range(count))
        assert count == 1 or all(len(b) > 1 for b in batches)


# ---------------------------------------------------------------------- both directions, files
def test_bidirectional_prediction_is_the_mean_of_the_two_softmaxes():
    forward, lm, config = make_classifier("forward", seed=1)
    backward, _, _ = make_classifier("backward", seed=2, lm=lm)
    for model in (forward, backward):
        model.encoder.load_from_bilm(lm.bilm)
    classifier = ULMFiTClassifier(config, {"forward": forward, "backward": backward}, ["neg", "pos", "q"])
    probabilities = classifier.probabilities(SENTENCES, batch_size=3)
    with torch.no_grad():
        p_f = torch.softmax(forward(batch_to_ids(SENTENCES)), dim=-1)
        p_b = torch.softmax(backward(batch_to_ids(SENTENCES)), dim=-1)
    assert not torch.allclose(p_f, p_b, atol=1e-3)  # two different classifiers, so the mean is not either
    torch.testing.assert_close(probabilities, (p_f + p_b) / 2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(torch.softmax(classifier.logits(SENTENCES), dim=-1), probabilities, rtol=1e-5, atol=1e-6)


def test_train_save_load_gives_the_same_predictions(tmp_path):
    lm = make_lm()
    classifier, history = train_ulmfit((SENTENCES, LABELS), (SENTENCES, LABELS), lm, VOCAB,
                                       lm_options=LMFineTuneOptions(epochs=1, batch_size=4, samples=4),
                                       classifier_options=ClassifierOptions(epochs=4, batch_size=3), head_dim=6)
    assert classifier.labels == ["neg", "pos", "q"] and set(classifier.models) == {"forward", "backward"}
    assert [h["trainable_groups"] for h in history["classifiers"]["forward"]] == [1, 2, 3, 4]
    classifier.save(tmp_path / "clf")
    loaded = ULMFiTClassifier.load(tmp_path / "clf")
    assert torch.equal(loaded.probabilities(SENTENCES), classifier.probabilities(SENTENCES))
    assert loaded.config == classifier.config
    # the LM was fine-tuned in place, and the classifiers started from it
    assert not torch.equal(lm.bilm.token_encoder.char_embedding.weight, make_lm().bilm.token_encoder.char_embedding.weight)


def test_a_damaged_ulmfit_folder_is_a_clear_error(tmp_path):
    model, _, config = make_classifier()
    ULMFiTClassifier(config, {"forward": model}, ["neg", "pos", "q"]).save(tmp_path / "clf")
    (tmp_path / "clf" / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ULMFiTError, match="not a readable ULMFiT classifier folder"):
        ULMFiTClassifier.load(tmp_path / "clf")
    with pytest.raises(ULMFiTError, match="directions"):
        ULMFiTConfig(bilm=CONFIG.to_dict(), num_labels=2, directions=("forward", "sideways"))
    with pytest.raises(ULMFiTError, match="sentence 1 .* is empty"):
        train_ulmfit(([["a"], []], ["x", "y"]), ([["a"]], ["x"]), make_lm(), VOCAB)


def test_ulmfit_folders_holding_one_nan_are_refused_at_load_naming_file_and_tensor(tmp_path):
    """The classifier folder and the language model it starts from: one NaN is a one-line error naming both."""
    from safetensors.torch import load_file, save_file

    from elmokit.formats import ModelFolderError
    from elmokit.formats.checks import NonFiniteFile

    model, _, config = make_classifier()
    ULMFiTClassifier(config, {"forward": model}, ["neg", "pos", "q"]).save(tmp_path / "clf")
    make_lm().save(tmp_path / "lm", VOCAB)
    for folder, file, error in ((tmp_path / "clf", "model.safetensors", NonFiniteFile),
                                (tmp_path / "lm", "lm.safetensors", ModelFolderError)):
        path = folder / file
        tensors = load_file(str(path))
        name = sorted(tensors)[0]
        tensors[name].view(-1)[2] = float("inf")
        save_file(tensors, str(path))
        with pytest.raises(error) as caught:
            (ULMFiTClassifier if folder.name == "clf" else LanguageModel).load(folder)
        assert str(caught.value).startswith(f"{path}: tensor '{name}' holds 1 non-finite value (first: inf at ")


# ---------------------------------------------------------------------- the CLI
@pytest.fixture
def lm_folder(tmp_path):
    folder = tmp_path / "lm"
    make_lm().save(folder, VOCAB)
    return folder


def write_tsv(path, sentences, labels):
    path.write_text("".join(f"{y}\t{' '.join(s)}\n" for s, y in zip(sentences, labels)), encoding="utf-8")
    return path


def test_classify_train_recipe_ulmfit_then_predict(tmp_path, lm_folder, capsys):
    data = write_tsv(tmp_path / "train.tsv", SENTENCES, LABELS)
    (tmp_path / "in.txt").write_text("the film was great\nawful plot\n", encoding="utf-8")
    out = tmp_path / "clf"
    assert main(["classify", "train", "--recipe", "ulmfit", "--model", str(lm_folder), "--train", str(data),
                 "--dev", str(data), "--test", str(data), "--out", str(out), "--epochs", "3", "--lm-finetune-epochs", "1",
                 "--lm-samples", "4", "--train-batch-size", "3", "--head-dim", "4", "--threads", "1"]) == 0
    printed = capsys.readouterr().out
    assert "dev accuracy" in printed and "test accuracy" in printed
    config = json.loads((out / "config.json").read_text())
    assert config["recipe"] == "ulmfit" and config["directions"] == ["forward", "backward"] and config["head_dim"] == 4
    assert main(["classify", "predict", "--classifier", str(out), "--input", str(tmp_path / "in.txt"),
                 "--out", str(tmp_path / "p.tsv")]) == 0
    rows = [line.split("\t") for line in (tmp_path / "p.tsv").read_text().splitlines()]
    probabilities = ULMFiTClassifier.load(out).probabilities([["the", "film", "was", "great"], ["awful", "plot"]])
    best = probabilities.max(dim=1)
    assert [r[0] for r in rows] == [["neg", "pos", "q"][i] for i in best.indices.tolist()]
    assert [float(r[1]) for r in rows] == pytest.approx(best.values.tolist(), abs=1e-4)


def test_classify_train_recipe_ulmfit_one_direction_from_scratch(tmp_path, lm_folder):
    data = write_tsv(tmp_path / "train.tsv", SENTENCES, LABELS)
    assert main(["classify", "train", "--recipe", "ulmfit", "--model", str(lm_folder), "--train", str(data),
                 "--dev", str(data), "--out", str(tmp_path / "clf"), "--epochs", "1", "--lm-finetune-epochs", "0",
                 "--directions", "backward", "--from-scratch", "--train-batch-size", "4", "--threads", "1"]) == 0
    assert set(ULMFiTClassifier.load(tmp_path / "clf").models) == {"backward"}


def test_recipe_ulmfit_rejects_a_non_lm_representation_and_a_folder_without_lm_head(tmp_path, model_dir, capsys):
    data = write_tsv(tmp_path / "train.tsv", SENTENCES, LABELS)
    base = ["classify", "train", "--recipe", "ulmfit", "--train", str(data), "--dev", str(data),
            "--out", str(tmp_path / "clf"), "--threads", "1"]
    assert main([*base, "--no-elmo"]) == 2
    assert "--recipe ulmfit fine-tunes a language model folder" in capsys.readouterr().err
    assert main([*base, "--model", str(model_dir)]) == 2  # a native folder without lm.safetensors
    assert "no lm.safetensors" in capsys.readouterr().err
    assert not (tmp_path / "clf").exists()



def test_classify_eval_scores_a_saved_ulmfit_classifier(tmp_path, lm_folder, capsys):
    data = write_tsv(tmp_path / "train.tsv", SENTENCES, LABELS)
    out = tmp_path / "clf"
    assert main(["classify", "train", "--recipe", "ulmfit", "--model", str(lm_folder), "--train", str(data),
                 "--dev", str(data), "--out", str(out), "--epochs", "2", "--lm-finetune-epochs", "0",
                 "--train-batch-size", "3", "--threads", "1"]) == 0
    capsys.readouterr()
    assert main(["classify", "eval", "--classifier", str(out), "--data", str(data), "--threads", "1"]) == 0
    expected = ULMFiTClassifier.load(out).accuracy(SENTENCES, LABELS)
    assert f"accuracy {expected:.2f}, error {100 - expected:.2f} (7 sentences" in capsys.readouterr().out
