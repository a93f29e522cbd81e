"""Fine-tuning a transformer for tagging (elmokit.transfer.finetune_tagger; `tag train --recipe finetune`).

Oracles: first-sub-token positions and windows by hand from a hand-built WordPiece vocabulary; the
label scores against the encoder run by hand on each row and indexed by those positions; gradients
checked tensor by tensor; a separable toy task learnt; a saved tagger predicting as before; the CLI's
refusals by name.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

from elmokit.pretraining.models import ModelPreset, build_model  # noqa: E402
from elmokit.tasks.data import TaggedCorpus  # noqa: E402
from elmokit.text.subword_tokenizers import encode_words, wordpiece_from_vocab  # noqa: E402
from elmokit.transfer.finetune import FineTuneOptions, load_base  # noqa: E402
from elmokit.transfer.finetune_tagger import (  # noqa: E402
    FineTunedTagger,
    FineTunedTaggerModel,
    encode_tagging_batch,
    finetune_tagger,
    first_subtoken_positions,
    word_windows,
)

torch.set_num_threads(1)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "dog", "cat", "sat", "on", "mat", ".",
         "play", "##ing", "##ed", "un", "##der", "far"]
TINY = ModelPreset(hidden=10, layers=2, heads=2, intermediate=7, max_positions=16, dropout=0.0)  # odd sizes


@pytest.fixture(scope="module")
def bert_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bert")
    build_model("bert", TINY, vocab_size=len(VOCAB), seed=3).save_pretrained(str(folder))
    wordpiece_from_vocab(VOCAB).save_pretrained(str(folder))
    return folder


def toy_corpus(count: int) -> TaggedCorpus:
    """The label is which animal a word names (B-DOG / B-CAT), O elsewhere; sentences of 3-7 words."""
    frames = [["the", "{}", "sat", "on", "a", "mat", "."], ["a", "{}", "playing", "far"], ["under", "the", "{}"]]
    sentences, labels = [], []
    for i in range(count):
        animal = ("dog", "cat")[i % 2]
        words = [w.format(animal) for w in frames[i % 3]]
        sentences.append(words)
        labels.append([f"B-{animal.upper()}" if w == animal else "O" for w in words])
    return TaggedCorpus(sentences, labels, "toy")


def test_first_sub_token_positions_by_hand(bert_folder):
    _, tokenizer = load_base(bert_folder)
    encoding = encode_words(tokenizer, ["the", "playing", "dog", "under"])
    # [CLS] the play ##ing dog un ##der [SEP]
    assert encoding.input_ids == [2, 5, 13, 14, 7, 16, 17, 3]
    assert first_subtoken_positions(encoding) == [1, 2, 4, 5]
    batch = encode_tagging_batch(tokenizer, [["the", "playing", "dog", "under"], ["a", "played"]], 16)
    width = batch.input_ids.shape[1]  # 8: the longer row
    assert width == 8 and batch.input_ids[1].tolist() == [2, 6, 13, 15, 3, 0, 0, 0]
    assert batch.attention_mask[1].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    assert batch.word_positions.tolist() == [[1, 2, 4, 5], [width + 1, width + 2, 0, 0]]
    assert batch.mask.tolist() == [[True] * 4, [True, True, False, False]]


def test_long_sentences_are_cut_into_windows_of_whole_words(bert_folder):
    _, tokenizer = load_base(bert_folder)
    words = ["the", "playing", "dog", "under", "a", "mat"]  # 8 pieces + 2 specials
    windows = word_windows(tokenizer, words, 5)  # room for 3 pieces per window
    assert [(start, e.input_ids) for start, e in windows] == [
        (0, [2, 5, 13, 14, 3]),  # [CLS] the play ##ing [SEP]: "dog" would be a 4th piece
        (2, [2, 7, 16, 17, 3]),  # dog un ##der
        (4, [2, 6, 11, 3]),  # a mat
    ]
    assert [start for start, _ in word_windows(tokenizer, words, 10)] == [0]  # fits: one window
    batch = encode_tagging_batch(tokenizer, [words], 5)
    assert batch.input_ids.shape == (3, 5)
    assert batch.word_positions.tolist() == [[1, 2, 5 + 1, 5 + 2, 10 + 1, 10 + 2]]
    with pytest.raises(ValueError, match="'playing' has 2 sub-tokens"):
        word_windows(tokenizer, words, 3)


@pytest.mark.parametrize("output", ["softmax", "crf"])
def test_label_scores_are_a_linear_layer_on_the_first_sub_token(bert_folder, output):
    base, tokenizer = load_base(bert_folder)
    labels = ["O", "B-CAT", "B-DOG"]
    model = FineTunedTaggerModel(base, labels, output=output, scheme="BIO", dropout=0.0).eval()
    sentences = [["the", "playing", "dog", "under", "a", "mat"], ["a", "cat"]]
    batch = encode_tagging_batch(tokenizer, sentences, 5)  # the first sentence in three windows, padded rows
    with torch.no_grad():
        scores = model.emissions(batch)
        hidden = base(input_ids=batch.input_ids, attention_mask=batch.attention_mask).last_hidden_state
        by_hand = [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)], [(3, 1), (3, 2)]
        for b, places in enumerate(by_hand):
            for k, (row, position) in enumerate(places):
                expected = hidden[row, position] @ model.label_scores.weight.T + model.label_scores.bias
                torch.testing.assert_close(scores[b, k], expected, rtol=1e-5, atol=1e-6)
        # a window is run alone: the same as encoding its words as a sentence of their own
        alone = model.emissions(encode_tagging_batch(tokenizer, [["dog", "under"]], 16))
    torch.testing.assert_close(alone[0], scores[0, 2:4], rtol=1e-5, atol=1e-5)


def test_every_transformer_parameter_gets_a_gradient_and_the_pooler_is_dropped(bert_folder):
    base, tokenizer = load_base(bert_folder)
    assert base.pooler is not None
    corpus = toy_corpus(5)
    model = FineTunedTaggerModel(base, ["O", "B-CAT", "B-DOG"], output="crf", scheme="BIO").train()
    tagger = FineTunedTagger(model, tokenizer, ["O", "B-CAT", "B-DOG"])
    batch = tagger.batch(corpus.sentences)
    model.loss(model.emissions(batch), tagger.tags(corpus.labels, batch.mask.shape[1]), batch.mask).backward()
    assert model.base.pooler is None
    without = [name for name, p in model.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert without == []
    assert sum(1 for name, _ in model.named_parameters() if name.startswith("base.")) > 20


def test_the_feature_recipe_trains_no_transformer_parameter(bert_folder):
    from elmokit.pretraining.representation import TransformerRepresentation
    from elmokit.tasks.tagger import TaggerConfig, TrainOptions, train_tagger

    representation = TransformerRepresentation.load(bert_folder, pooling="first")
    before = {k: v.clone() for k, v in representation.model.state_dict().items()}
    corpus = toy_corpus(6)
    config = TaggerConfig(task="ner", elmo="mix", elmo_layers=representation.num_layers, elmo_dim=representation.dim,
                          word_dim=3, hidden_dim=5, min_word_count=1)
    train_tagger(corpus, corpus, config, representation=representation,
                 options=TrainOptions(epochs=1, batch_size=3, progress=False))
    assert all(p.grad is None and not p.requires_grad for p in representation.model.parameters())
    assert all(torch.equal(before[k], v) for k, v in representation.model.state_dict().items())


@pytest.mark.parametrize("output,scheme", [("softmax", "BIO"), ("crf", "BIOES")])
def test_fine_tuning_learns_a_toy_task_and_round_trips(bert_folder, tmp_path, output, scheme):
    train, dev = toy_corpus(24), toy_corpus(6)
    options = FineTuneOptions(epochs=6, batch_size=4, learning_rate=3e-3, seed=1)
    tagger = finetune_tagger(bert_folder, train, dev, output=output, scheme=scheme, options=options)
    losses = [h["train_loss"] for h in tagger.history]
    assert len(losses) == 6 and losses[-1] < 0.5 * losses[0]
    assert tagger.evaluate(dev)["f1"] == 1.0
    if scheme == "BIOES":
        assert set(tagger.labels) == {"O", "S-CAT", "S-DOG"}  # trained in BIOES, predicted in BIO
    assert tagger.predict(dev.sentences) == dev.labels
    tagger.save(tmp_path / "tagger")
    loaded = FineTunedTagger.load(tmp_path / "tagger")
    assert (loaded.labels, loaded.output, loaded.scheme, loaded.options) == (tagger.labels, output, scheme, options)
    assert loaded.model.base.pooler is None
    sentences = dev.sentences + [["under", "a", "playing", "cat", "sat", "far"], []]
    batch = tagger.batch(sentences[:-1])
    with torch.no_grad():
        torch.testing.assert_close(loaded.model.emissions(batch), tagger.model.emissions(batch), rtol=0, atol=0)
    assert loaded.predict(sentences) == tagger.predict(sentences)


def test_tag_cli_recipe_finetune_trains_and_predicts_the_same_tags(bert_folder, tmp_path, capsys):
    from elmokit.cli.main import main

    corpus = toy_corpus(12)
    data = tmp_path / "train.conll"
    data.write_text("".join("".join(f"{w} {l}\n" for w, l in zip(s, y)) + "\n"
                            for s, y in zip(corpus.sentences, corpus.labels)), encoding="utf-8")
    assert main(["tag", "train", "--recipe", "finetune", "--model", str(bert_folder), "--format", "conll",
                 "--train", str(data), "--dev", str(data), "--out", str(tmp_path / "tagger"), "--epochs", "2",
                 "--lr", "3e-3", "--batch-size", "4", "--threads", "1"]) == 0
    assert "dev: span F1" in capsys.readouterr().out
    saved = FineTunedTagger.load(tmp_path / "tagger")
    assert (saved.output, saved.options.epochs, saved.options.learning_rate, saved.options.dropout) == (
        "softmax", 2, 3e-3, 0.1)
    assert saved.results["command"][:4] == ["elmokit", "tag", "train", "--recipe"]
    assert main(["tag", "predict", "--tagger", str(tmp_path / "tagger"), "--input", str(data), "--format", "conll",
                 "--out", str(tmp_path / "pred.conll")]) == 0
    predicted = [[line.split("\t")[1] for line in block.splitlines()]
                 for block in (tmp_path / "pred.conll").read_text(encoding="utf-8").strip().split("\n\n")]
    assert predicted == saved.predict(corpus.sentences)


@pytest.mark.parametrize("flags,named", [
    (["--elmo", "top"], "--elmo"),
    (["--hidden-dim", "7", "--fine-tune"], "--fine-tune, --hidden-dim"),
    (["--cache-dir", "x"], "--cache-dir"),
    (["--vectors", "."], "--vectors"),
    (["--no-elmo"], "--no-elmo"),
])
def test_tag_cli_recipe_finetune_refuses_the_feature_flags_by_name(bert_folder, tmp_path, capsys, flags, named):
    from elmokit.cli.main import main

    data = tmp_path / "t.conll"
    data.write_text("the O\ndog B-DOG\n\n", encoding="utf-8")
    code = main(["tag", "train", "--recipe", "finetune", "--model", str(bert_folder), "--format", "conll",
                 "--train", str(data), "--dev", str(data), "--out", str(tmp_path / "o"), *flags])
    assert code == 2 and named in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_recipe_finetune_needs_a_model_folder(tmp_path, capsys):
    from elmokit.cli.main import main

    data = tmp_path / "t.conll"
    data.write_text("the O\ndog B-DOG\n\n", encoding="utf-8")
    code = main(["tag", "train", "--recipe", "finetune", "--format", "conll", "--train", str(data), "--dev", str(data),
                 "--out", str(tmp_path / "o")])
    assert code == 2 and "given by --model" in capsys.readouterr().err
    code = main(["eval", "ner", "--recipe", "finetune", "--model", str(tmp_path), "--elmo-at-output"])
    assert code == 2 and "--elmo-at-output cannot be used" in capsys.readouterr().err
