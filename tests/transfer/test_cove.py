"""CoVe (transfer/cove.py, cove_train.py): the MT model's shapes and attention, the encoder's batch
invariance against torch's nn.LSTM, training, exact resume, BLEU against a hand re-statement and
sacrebleu, the Representation contract, the CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from elmokit.engine.run_folder import RunError
from elmokit.transfer.cove import (
    PRESETS,
    CoveConfig,
    CoveModel,
    CoveRepresentation,
    load_cove_model,
    reverse_padded,
)
from elmokit.transfer.cove_train import (
    CoveTrainingConfig,
    ParallelDataError,
    corpus_bleu,
    read_parallel,
    train_cove,
)

WORDS = ["the", "a", "god", "light", "was", "and", "said", "let", "there", "be", "earth", "made", "saw", "good", "."]
SOURCE = ["god said let there be light .", "and there was light .", "god saw the light .", "the light was good .",
          "and god made the earth .", "let the earth be good .", "there was a light .", "god made a light ."]
TARGET = ["gott sprach es werde licht .", "und es ward licht .", "gott sah das licht .", "das licht war gut .",
          "und gott machte die erde .", "die erde sei gut .", "es war ein licht .", "gott machte ein licht ."]
TINY = CoveConfig(input_dim=5, target_vocab_size=11, **PRESETS["tiny"])  # E 5, H 8, D 12, z 6


def tiny_model(config: CoveConfig = TINY, seed: int = 0) -> CoveModel:
    torch.manual_seed(seed)
    vectors = torch.randn(len(WORDS), config.input_dim)
    return CoveModel(config, vectors).eval()


def write_vectors(path: Path, dim: int = 5, seed: int = 3) -> Path:
    rng = np.random.default_rng(seed)
    rows = rng.normal(size=(len(WORDS), dim)).round(4)
    path.write_text(f"{len(WORDS)} {dim}\n" + "".join(w + " " + " ".join(map(str, r)) + "\n" for w, r in zip(WORDS, rows)),
                    encoding="utf-8")
    return path


def write_parallel(folder: Path, *, verses: bool = False) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    books = ["01", "01", "01", "44", "01", "45", "01", "45"]
    ids = [f"{b}.001.{i:03d}" for i, b in enumerate(books, 1)]
    src, tgt = folder / "en.txt", folder / "de.txt"
    for path, lines in ((src, SOURCE), (tgt, TARGET)):
        path.write_text("".join((f"{i}\t" if verses else "") + line + "\n" for i, line in zip(ids, lines)), encoding="utf-8")
    return src, tgt


def batch(lengths, vocab=15, seed=1):
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(0, vocab, (len(lengths), width), generator=generator)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return ids.masked_fill(~mask, -1), mask


# ---------------------------------------------------------------------------------------- the model


def test_teacher_forced_decoder_gives_one_distribution_per_target_step_with_odd_sizes():
    model = tiny_model()
    source_ids, source_mask = batch([7, 4, 1])
    targets = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(2))
    out = model(source_ids, source_mask, targets)
    assert out.logits.shape == (3, 5, 11)
    assert out.attention.shape == (3, 5, 7)
    # step t's distribution depends on y_<t only: changing the last input leaves earlier steps alone
    changed = targets.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 11
    again = model(source_ids, source_mask, changed)
    assert torch.equal(again.logits[:, :-1], out.logits[:, :-1])
    assert not torch.equal(again.logits[:, -1], out.logits[:, -1])


def test_attention_sums_to_one_over_real_tokens_and_is_exactly_zero_on_padding():
    model = tiny_model()
    source_ids, source_mask = batch([7, 4, 1])
    attention = model(source_ids, source_mask, torch.ones(3, 4, dtype=torch.long)).attention  # (B, T, S)
    np.testing.assert_allclose(attention.sum(-1).detach().numpy(), np.ones((3, 4)), rtol=0, atol=1e-6)
    padding = ~source_mask.unsqueeze(1).expand_as(attention)
    assert torch.all(attention[padding] == 0)
    assert torch.all(attention[~padding] > 0)
    assert torch.all(attention[2, :, 0] == 1)  # a one-token source gets all the attention


def test_attention_is_the_papers_softmax_of_H_times_W1_h():
    """alpha_t = softmax(H (W_1 h_t^dec + b_1)) re-stated in numpy from the first decoder step."""
    model = tiny_model()
    source_ids, source_mask = batch([7, 4, 1])
    encoded = model.encoder(model.lookup(source_ids), source_mask)
    decoder = model.decoder
    state = decoder.initial_state(encoded)
    _, alpha, new_state = decoder.step(torch.full((3,), 2), state, encoded, source_mask)
    h = new_state[-2][0].detach().numpy()  # top layer's h_t^dec
    W1, b1 = decoder.attention_query.weight.detach().numpy(), decoder.attention_query.bias.detach().numpy()
    H = encoded.detach().numpy()
    for b, length in enumerate([7, 4, 1]):
        scores = H[b, :length] @ (W1 @ h[b] + b1)
        expected = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        np.testing.assert_allclose(alpha[b, :length].detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_reverse_padded_reverses_only_the_real_steps():
    x = torch.arange(12.0).view(2, 6, 1)
    out = reverse_padded(x, torch.tensor([4, 6]))[..., 0]
    assert out.tolist() == [[3, 2, 1, 0, 4, 5], [11, 10, 9, 8, 7, 6]]


def test_batch_invariant_encoder_matches_torch_lstm_on_each_sentence_alone():
    """Oracle: torch's nn.LSTM on each unpadded sentence alone (no packing, no masking)."""
    model = tiny_model()
    source_ids, source_mask = batch([7, 4, 1, 6])
    vectors = model.lookup(source_ids)
    invariant = model.encoder.encode(vectors, source_mask)
    packed = model.encoder(vectors, source_mask).detach()
    for b, length in enumerate([7, 4, 1, 6]):
        alone, _ = model.encoder.lstm(vectors[b : b + 1, :length])
        np.testing.assert_allclose(invariant[b, :length].numpy(), alone[0].detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(packed[b, :length].numpy(), alone[0].detach().numpy(), rtol=1e-5, atol=1e-6)
        assert torch.all(invariant[b, length:] == 0) and torch.all(packed[b, length:] == 0)


def test_greedy_decoding_is_the_argmax_of_the_teacher_forced_model_fed_its_own_output():
    model = tiny_model(seed=4)
    source_ids, source_mask = batch([7, 4, 1])
    decoded = model.greedy_decode(source_ids, source_mask, max_length=6)
    for b, ids in enumerate(decoded):
        inputs = torch.tensor([[2, *ids]])
        logits = model(source_ids[b : b + 1, : int(source_mask[b].sum())], source_mask[b : b + 1, : int(source_mask[b].sum())],
                       inputs).logits[0]
        logits[:, 0] = float("-inf")
        best = logits.argmax(-1).tolist()
        assert best[: len(ids)] == ids
        assert len(ids) == 6 or best[len(ids)] == 3  # stopped at </s> or at max_length


# ---------------------------------------------------------------------------------------- representation


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cove")
    src, tgt = write_parallel(folder / "data")
    vectors = write_vectors(folder / "vectors.txt")
    config = CoveConfig(**PRESETS["tiny"])
    training = CoveTrainingConfig(batch_size=3, max_steps=4, checkpoint_every=2, log_every=1, seed=5, lr=0.01)
    torch.set_num_threads(1)
    train_cove(folder / "run", src=src, tgt=tgt, vectors=vectors, config=config, training=training, progress=False)
    return folder / "run"


def test_cove_vectors_are_bit_identical_in_any_batch_order_and_chunking(trained_run):
    sentences = [s.split() for s in SOURCE] + [["unknown", "God", "light"], ["."]]
    whole = CoveRepresentation.load(trained_run, batch_size=64).embed(sentences)
    alone = [CoveRepresentation.load(trained_run, batch_size=1).embed([s])[0] for s in sentences]
    order = np.random.default_rng(0).permutation(len(sentences))
    shuffled = CoveRepresentation.load(trained_run, batch_size=3).embed([sentences[i] for i in order])
    for i in range(len(sentences)):
        assert np.array_equal(whole[i], alone[i])
        assert np.array_equal(shuffled[list(order).index(i)], alone[i])


def test_representation_contract_and_the_glove_cove_mode(trained_run):
    from elmokit.features import embed_in_chunks
    from elmokit.representation import Representation, fingerprint, load_representation

    model, source_words, _ = load_cove_model(trained_run)
    cove = load_representation({"kind": "cove", "path": str(trained_run)})
    both = load_representation({"kind": "cove", "path": str(trained_run), "mode": "glove_cove"})
    assert isinstance(cove, Representation) and isinstance(both, Representation)
    assert (cove.name, cove.num_layers, cove.dim) == ("CoVe", 1, 2 * model.config.hidden_dim)
    assert (both.name, both.num_layers, both.dim) == ("GloVe+CoVe", 1, 5 + 2 * model.config.hidden_dim)
    assert fingerprint(cove) != fingerprint(both)
    sentences = [["god", "made", "zebras", "."], ["light"]]  # a plain vector file: case kept
    list(embed_in_chunks(cove, sentences, progress=False))  # checks (L, n, D) for every sentence
    c, g = cove.embed(sentences), both.embed(sentences)
    assert [a.shape for a in c] == [(1, 4, cove.dim), (1, 1, cove.dim)] and all(a.dtype == np.float32 for a in c)
    table = model.source_vectors.numpy()
    index = {w: i for i, w in enumerate(source_words)}
    assert np.array_equal(g[0][0, :, :5], np.stack([table[index["god"]], table[index["made"]], np.zeros(5), table[index["."]]]))
    assert np.array_equal(g[0][0, :, 5:], c[0][0])
    with pytest.raises(ValueError, match="mode"):
        load_representation({"kind": "cove", "path": str(trained_run), "mode": "elmo"})


def test_a_cove_classifier_trains_on_the_frozen_features(trained_run):
    from elmokit.features import InMemoryFeatures
    from elmokit.tasks.classifier import train_classifier

    rep = CoveRepresentation.load(trained_run, mode="glove_cove")
    sentences = [s.split() for s in SOURCE]
    labels = ["god" if "god" in s else "other" for s in sentences]
    features = InMemoryFeatures(rep.embed(sentences))
    classifier, history = train_classifier((sentences, labels), (sentences, labels), train_features=features,
                                           dev_features=features, elmo_layers=1, elmo_dim=rep.dim, epochs=2,
                                           representation={"kind": "cove", "path": str(trained_run)}, word_dim=4, hidden_dim=5)
    assert classifier.model.config.elmo_dim == rep.dim and len(history) == 2


# ---------------------------------------------------------------------------------------- training


def test_a_few_steps_lower_the_loss_and_every_parameter_gets_a_gradient(tmp_path):
    from elmokit.transfer.cove_train import EncodedPairs, make_batch, validation_loss

    src, tgt = write_parallel(tmp_path / "data")
    vectors = write_vectors(tmp_path / "vectors.txt")
    training = CoveTrainingConfig(batch_size=4, max_steps=40, checkpoint_every=40, log_every=5, seed=2, lr=0.02)
    result = train_cove(tmp_path / "run", src=src, tgt=tgt, vectors=vectors, config=CoveConfig(**PRESETS["tiny"]),
                        training=training, progress=False)
    model, source_words, target_words = load_cove_model(result.model_dir)
    split = read_parallel(src, tgt)["train"]
    pairs = EncodedPairs.encode(split, {w: i for i, w in enumerate(source_words)}, {w: i for i, w in enumerate(target_words)})
    torch.manual_seed(2)
    fresh = CoveModel(model.config, model.source_vectors)
    assert validation_loss(model, pairs, 8) < 0.5 * validation_loss(fresh, pairs, 8)
    logged = [e["loss"] for e in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())]
    assert logged[-1] < logged[0]
    fresh.train()
    total, n = fresh.loss(**make_batch(pairs, [0, 1, 2]))
    (total / n).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for name, p in fresh.named_parameters()
               if name != "decoder.embedding.weight") and fresh.decoder.embedding.weight.grad[1:].abs().sum() > 0


def test_resume_is_exact_n_steps_equal_half_stop_resume_half(tmp_path):
    from safetensors.torch import load_file

    src, tgt = write_parallel(tmp_path / "data")
    vectors = write_vectors(tmp_path / "vectors.txt")
    config = CoveConfig(**{**PRESETS["tiny"], "dropout": 0.3})  # dropout: the RNG state must be restored too
    common = dict(src=src, tgt=tgt, vectors=vectors, config=config, progress=False)
    full = CoveTrainingConfig(batch_size=3, max_steps=8, checkpoint_every=4, log_every=1, seed=7)
    train_cove(tmp_path / "straight", training=full, **common)
    train_cove(tmp_path / "resumed", training=dataclasses.replace(full, max_steps=4), **common)
    train_cove(tmp_path / "resumed", training=full, resume=True, **common)
    a = load_file(str(tmp_path / "straight" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    losses = [[e["loss"] for e in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())]
              for run in ("straight", "resumed")]
    assert losses[0] == losses[1] and len(losses[0]) == 8  # batches cross an epoch boundary (6 pairs, batch 3)
    assert (tmp_path / "resumed" / "command.txt").read_text().count("\n") == 2


def test_resume_with_other_settings_is_refused_and_the_run_is_kept(tmp_path):
    src, tgt = write_parallel(tmp_path / "data")
    vectors = write_vectors(tmp_path / "vectors.txt")
    common = dict(src=src, tgt=tgt, vectors=vectors, progress=False, config=CoveConfig(**PRESETS["tiny"]))
    training = CoveTrainingConfig(batch_size=3, max_steps=2)
    train_cove(tmp_path / "run", training=training, **common)
    before = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    with pytest.raises(RunError, match="training.lr: saved 0.001, requested 0.5"):
        train_cove(tmp_path / "run", training=dataclasses.replace(training, lr=0.5), resume=True, **common)
    with pytest.raises(RunError, match="already holds a run"):
        train_cove(tmp_path / "run", training=training, **common)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == before


# ---------------------------------------------------------------------------------------- data


def test_verse_files_are_split_by_whole_books(tmp_path):
    src, tgt = write_parallel(tmp_path, verses=True)
    splits = read_parallel(src, tgt)
    assert {k: len(v) for k, v in splits.items()} == {"train": 5, "valid": 2, "test": 1}
    assert all(i.startswith("45.") for i in splits["valid"].ids) and splits["test"].ids == ["44.001.004"]
    assert splits["test"].target == [["das", "licht", "war", "gut", "."]]


def test_parallel_files_that_do_not_line_up_are_named_with_file_and_line(tmp_path):
    src, tgt = write_parallel(tmp_path, verses=True)
    lines = tgt.read_text().splitlines()
    tgt.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(ParallelDataError, match=r"has 8 lines but .*de.txt has 7"):
        read_parallel(src, tgt)
    lines[2] = lines[2].replace("01.001.003", "01.001.009")
    tgt.write_text("\n".join(lines) + "\n")
    with pytest.raises(ParallelDataError, match=r"en.txt:3 is verse 01.001.003 but .*de.txt:3 is 01.001.009"):
        read_parallel(src, tgt)
    plain_src, plain_tgt = write_parallel(tmp_path / "plain")
    with pytest.raises(ParallelDataError, match="verse format"):
        read_parallel(src, plain_tgt)
    plain_tgt.write_text(plain_tgt.read_text().replace("und es ward licht .", " "))
    with pytest.raises(ParallelDataError, match=r"de.txt:2: empty line"):
        read_parallel(plain_src, plain_tgt)


# ---------------------------------------------------------------------------------------- BLEU


def reference_bleu(hypotheses, references, max_n=4):
    """BLEU (Papineni et al. 2002) re-stated: clipped n-gram precisions pooled over the corpus,
    their geometric mean, brevity penalty exp(1 - r/c) when c < r."""
    matches, totals = [0] * max_n, [0] * max_n
    for h, r in zip(hypotheses, references):
        for n in range(1, max_n + 1):
            hyp = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
            ref = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            matches[n - 1] += sum(min(c, ref[g]) for g, c in hyp.items())
            totals[n - 1] += max(len(h) - n + 1, 0)
    c, r = sum(map(len, hypotheses)), sum(map(len, references))
    bp = 1.0 if c >= r else math.exp(1 - r / c)
    return 100 * bp * math.exp(sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n)


def test_bleu_glue_agrees_with_sacrebleu_and_a_hand_restatement():
    import sacrebleu

    hypotheses = [["gott", "sprach", "es", "werde", "licht", "."], ["und", "es", "war", "licht", "da", "."],
                  ["die", "erde", "war", "gut"]]
    references = [["gott", "sprach", ":", "es", "werde", "licht", "."], ["und", "es", "ward", "licht", "."],
                  ["die", "erde", "war", "gut", "."]]
    ours = corpus_bleu(hypotheses, references)
    assert ours.score == pytest.approx(reference_bleu(hypotheses, references), abs=1e-9)
    direct = sacrebleu.corpus_bleu([" ".join(h) for h in hypotheses], [[" ".join(r) for r in references]])
    assert ours.score == pytest.approx(direct.score, abs=1e-9)  # 13a would not re-cut this text
    assert corpus_bleu(references, references).score == pytest.approx(100.0)
    with pytest.raises(ValueError, match="2 hypotheses for 3 references"):
        corpus_bleu(hypotheses[:2], references)


# ---------------------------------------------------------------------------------------- CLI


def test_cli_trains_on_verse_files_scores_bleu_and_reports_bad_input_in_one_line(tmp_path, capsys):
    from elmokit.cli.main import main

    src, tgt = write_parallel(tmp_path / "data", verses=True)
    vectors = write_vectors(tmp_path / "vectors.txt")
    out = tmp_path / "run"
    code = main(["cove", "train", "--src", str(src), "--tgt", str(tgt), "--vectors", str(vectors), "--out", str(out),
                 "--preset", "tiny", "--max-steps", "3", "--batch-size", "2", "--threads", "1"])
    assert code == 0
    bleu = json.loads((out / "bleu.json").read_text())
    assert set(bleu["splits"]) == {"valid", "test"} and bleu["splits"]["test"]["sentences"] == 1
    assert (out / "test.hyp.txt").read_text().startswith("44.001.004\t")
    assert "cove train" in (out / "command.txt").read_text() and (out / "model" / "README.md").is_file()
    assert main(["cove", "bleu", "--model", str(out), "--split", "test", "--out", str(tmp_path / "b.json")]) == 0
    assert json.loads((tmp_path / "b.json").read_text())["test"]["bleu"] == bleu["splits"]["test"]["bleu"]
    capsys.readouterr()
    lines = tgt.read_text().splitlines()
    tgt.write_text("\n".join(lines[:-2]) + "\n")
    code = main(["cove", "train", "--src", str(src), "--tgt", str(tgt), "--vectors", str(vectors), "--out",
                 str(tmp_path / "other"), "--max-steps", "3"])
    err = capsys.readouterr().err
    assert code == 2 and "has 8 lines but" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "other").exists()
    with pytest.raises(SystemExit) as stop:  # argparse: one line naming the option
        main(["cove", "train", "--src", str(src), "--tgt", str(tgt), "--vectors", str(vectors), "--out",
              str(tmp_path / "other"), "--max-steps", "0"])
    assert stop.value.code == 2 and "--max-steps: must be an integer >= 1" in capsys.readouterr().err


@pytest.mark.parametrize("allowed", [0, 1])
def test_a_non_finite_step_stops_naming_it_or_is_skipped_and_counted_when_asked(tmp_path, monkeypatch, allowed):
    """The engine's one non-finite policy, in CoVe's loop as in every other: step 3's loss is NaN."""
    from elmokit.engine.run_folder import read_metrics
    from elmokit.engine.steps import NonFiniteError

    src, tgt = write_parallel(tmp_path / "data")
    vectors = write_vectors(tmp_path / "vectors.txt")
    calls = []
    original = CoveModel.loss

    def nan_at_third(self, *args, **kwargs):
        total, n = original(self, *args, **kwargs)
        calls.append(1)
        return (total * float("nan"), n) if len(calls) == 3 else (total, n)

    monkeypatch.setattr(CoveModel, "loss", nan_at_third)
    training = CoveTrainingConfig(batch_size=3, max_steps=5, checkpoint_every=2, log_every=1, seed=7,
                                  skip_nonfinite_steps=allowed)
    common = dict(src=src, tgt=tgt, vectors=vectors, config=CoveConfig(**PRESETS["tiny"]), training=training, progress=False,
                  bleu=False)
    if not allowed:
        with pytest.raises(NonFiniteError, match=r"step 3: non-finite loss .*/step_00000002, holds finite weights"):
            train_cove(tmp_path / "run", **common)
        return
    result = train_cove(tmp_path / "run", **common)
    metrics = read_metrics(tmp_path / "run")
    assert result.step == 5 and [e["step"] for e in metrics if "loss" in e] == [1, 2, 4, 5]
    [skipped] = [e for e in metrics if "skipped" in e]
    assert skipped["step"] == 3 and skipped["skipped"].startswith("non-finite loss") and skipped["skipped_nonfinite"] == 1
    assert metrics[-1]["skipped_nonfinite"] == 1


@pytest.mark.parametrize("file", ["model.safetensors", "vectors.safetensors"])
def test_a_cove_folder_holding_one_nan_is_refused_at_load_naming_file_and_tensor(tmp_path, file):
    from safetensors.torch import load_file, save_file

    from elmokit.cli.main import main
    from elmokit.formats.checks import NonFiniteFile
    from elmokit.transfer.cove import save_cove_model

    folder = save_cove_model(tmp_path / "cove", tiny_model(), WORDS, [f"t{i}" for i in range(TINY.target_vocab_size)])
    load_cove_model(folder)  # finite: loads
    tensors = load_file(str(folder / file))
    name = sorted(tensors)[-1]
    tensors[name].view(-1)[1] = float("nan")
    save_file(tensors, str(folder / file))
    expected = f"{folder / file}: tensor '{name}' holds 1 non-finite value (first: nan at "
    with pytest.raises(NonFiniteFile) as caught:
        CoveRepresentation.load(folder)
    assert str(caught.value).startswith(expected)
    (tmp_path / "in.txt").write_text("god said let there be light .\n", encoding="utf-8")
    assert main(["embed", "--model", str(folder), str(tmp_path / "in.txt"), str(tmp_path / "out.h5")]) == 2
    assert not (tmp_path / "out.h5").exists()
