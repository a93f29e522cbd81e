"""The strong baseline's token input (``elmokit.tasks.word_input``): pretrained rows, the character CNN
against numpy, the tagger and the classifier wired to both, and bad vector files refused by the CLI."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elmokit.cli.main import main
from elmokit.static.vectors import StaticVectors
from elmokit.tasks.classifier import train_classifier
from elmokit.tasks.data import TaggedCorpus
from elmokit.tasks.tagger import SequenceTagger, TaggerConfig, TrainOptions, train_tagger
from elmokit.tasks.word_input import char_cnn, encode_chars, extend_vocabulary, initialise_embedding
from elmokit.text.chars import batch_to_ids

torch.set_num_threads(1)


def _table(words=("the", "Paris", "paris", "cat"), dim=4, seed=3) -> StaticVectors:
    rng = np.random.default_rng(seed)
    return StaticVectors(list(words), rng.standard_normal((len(words), dim)).astype(np.float32), name="toy")


def test_pretrained_rows_initialise_the_embedding_cased_then_lowercased():
    table = _table()
    words = extend_vocabulary(["<pad>", "<unk>", "Paris", "THE", "dog"], table, lowercase=False, freeze=False)
    assert words == ["<pad>", "<unk>", "Paris", "THE", "dog", "the", "paris", "cat"]
    embedding = torch.nn.Embedding(len(words), 4, padding_idx=0)
    found = initialise_embedding(embedding, words, table, lowercase=False, freeze=False)
    rows = embedding.weight.detach().numpy()
    assert found == 5  # Paris, THE (as "the"), the, paris, cat; "dog" is not in the table
    np.testing.assert_array_equal(rows[words.index("Paris")], table.vector("Paris"))  # the cased row, not "paris"
    np.testing.assert_array_equal(rows[words.index("paris")], table.vector("paris"))
    np.testing.assert_array_equal(rows[words.index("THE")], table.vector("the"))  # lowercased fallback
    assert not np.isin(rows[words.index("dog")], table.vectors).any() and not rows[0].any()
    assert embedding.weight.requires_grad


def test_lowercasing_model_takes_the_most_frequent_cased_form_and_freezing_keeps_table_words_only():
    table = _table(words=("Paris", "paris", "the"))
    words = extend_vocabulary(["<pad>", "<unk>", "dog"], table, lowercase=True, freeze=True)
    assert words == ["<pad>", "<unk>", "paris", "the"]  # frozen: no random rows; "dog" is UNK
    embedding = torch.nn.Embedding(len(words), 4, padding_idx=0)
    initialise_embedding(embedding, words, table, lowercase=True, freeze=True)
    np.testing.assert_array_equal(embedding.weight[2].detach().numpy(), table.vector("Paris"))  # first = most frequent
    assert not embedding.weight[:2].any() and not embedding.weight.requires_grad


def _numpy_char_cnn(encoder, char_ids: np.ndarray) -> np.ndarray:
    """tanh(max over every window of the full 50 positions of (window . W + b)), one filter width."""
    table = encoder.char_embedding.weight.detach().numpy()
    conv = encoder.convs[0]
    weight, bias = conv.weight.detach().numpy(), conv.bias.detach().numpy()  # (n, E, w), (n,)
    width = weight.shape[2]
    out = np.empty((len(char_ids), weight.shape[0]))
    for t, ids in enumerate(char_ids):
        x = table[ids]  # (50, E)
        windows = [np.einsum("we,new->n", x[s:s + width], weight) + bias for s in range(len(ids) - width + 1)]
        out[t] = np.tanh(np.max(windows, axis=0))
    return out


def test_char_cnn_matches_numpy_with_and_without_gradients():
    torch.manual_seed(0)
    encoder = char_cnn(filters=5, width=3, dim=4)
    char_ids = batch_to_ids([["Paris", "is", "Île-de-France"], ["a"]])  # (2, 3, 50); the second padded
    expected = _numpy_char_cnn(encoder, char_ids.reshape(-1, 50).numpy()).reshape(2, 3, 5)
    trained = encode_chars(encoder, char_ids)  # grad enabled: the differentiable path
    assert trained.shape == (2, 3, 5) and trained.requires_grad
    np.testing.assert_allclose(trained.detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_allclose(encode_chars(encoder, char_ids).numpy(), expected, rtol=1e-5, atol=1e-6)


def _corpus():
    sentences = [["John", "lives", "in", "Paris"], ["Mary", "saw", "the", "cat"], ["the", "cat", "saw", "John"]]
    labels = [["B-PER", "O", "O", "B-LOC"], ["B-PER", "O", "O", "O"], ["O", "O", "O", "B-PER"]]
    return TaggedCorpus(sentences, labels)


@pytest.mark.parametrize("freeze", [False, True])
def test_tagger_with_vectors_and_chars(freeze, tmp_path):
    corpus, table = _corpus(), _table(dim=6)
    config = TaggerConfig(task="ner", elmo="none", word_dim=99, hidden_dim=5, min_word_count=1, lowercase=False,
                          char_filters=7, freeze_word_vectors=freeze, word_vectors="toy.txt")
    options = TrainOptions(epochs=2, patience=2, batch_size=2, learning_rate=0.1, progress=False)
    tagger = train_tagger(corpus, corpus, config, options=options, word_table=table)
    assert tagger.config.word_dim == 6 and tagger.config.word_vectors == "toy.txt"
    batch = tagger._inputs(corpus.sentences, [0, 1], labels=corpus.labels)
    assert batch["char_ids"].shape == (2, 4, 50)
    assert tagger._emissions(batch).shape == (2, 4, len(tagger.labels))
    row = tagger.model.word_embedding.weight[tagger.word_index["Paris"]].detach().numpy()
    # frozen: the table's row after training; fine-tuned at lr 0.1: it moved from it
    assert np.array_equal(row, table.vector("Paris")) == freeze
    tagger.save(tmp_path / "t")
    loaded = SequenceTagger.load(tmp_path / "t")
    assert loaded.predict(corpus.sentences) == tagger.predict(corpus.sentences)


def test_classifier_with_frozen_vectors_and_chars():
    sentences = [["a", "great", "film"], ["awful", "mess"], ["great", "fun"], ["dull"]]
    labels = ["pos", "neg", "pos", "neg"]
    table = _table(words=("great", "awful", "film"), dim=3)
    classifier, history = train_classifier((sentences, labels), (sentences, labels), use_elmo=False, epochs=3,
                                           patience=1, word_table=table, freeze_word_vectors=True, char_filters=4,
                                           hidden_dim=3, learning_rate=0.05)
    model, vocabulary = classifier.model, classifier.vocabulary
    assert vocabulary.words == ["<pad>", "<unk>", "great", "awful", "film"] and model.config.word_dim == 3
    np.testing.assert_array_equal(model.word_embedding.weight[2].detach().numpy(), table.vector("great"))
    assert model.char_encoder is not None and classifier.logits(sentences).shape == (4, 2)
    assert 1 <= len(history) <= 3


@pytest.mark.parametrize("text, problem", [
    ("2 3\nthe 0.1 0.2 0.3\ncat 0.1 nan 0.3\n", ":3:"),
    ("2 3\nthe 0.1 0.2 0.3\ncat 0.1 0.2\n", ":3:"),
])
def test_a_bad_vectors_file_is_one_line_naming_file_and_line(tmp_path, capsys, text, problem):
    (tmp_path / "v.txt").write_text(text, encoding="utf-8")
    (tmp_path / "ner.conll").write_text("John\tB-PER\nsaw\tO\n\n", encoding="utf-8")
    code = main(["tag", "train", "--train", str(tmp_path / "ner.conll"), "--dev", str(tmp_path / "ner.conll"),
                 "--format", "conll", "--no-elmo", "--word-vectors", str(tmp_path / "v.txt"), "--out", str(tmp_path / "t")])
    error = capsys.readouterr().err.strip()
    assert code == 2 and len(error.splitlines()) == 1 and f"v.txt{problem}" in error, error
    assert not (tmp_path / "t").exists()
