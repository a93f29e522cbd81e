"""The BiLSTM-CRF tagger: it uses what only the representation carries, saves and loads exactly."""

from __future__ import annotations

import dataclasses
import json
import zlib

import numpy as np
import pytest
import torch

from elmokit.engine.epochs import NonFiniteLoss
from elmokit.tasks.data import TaggedCorpus
from elmokit.tasks.tagger import (
    SequenceTagger,
    TaggerConfig,
    TaggerFolderError,
    TrainOptions,
    score,
    train_tagger,
)

torch.set_num_threads(1)
WORDS = ["a", "b", "c", "d", "e"]


class HiddenBitRepresentation:
    """A fake 3-layer Representation: layer 1 carries each sentence's hidden bit, layers 0 and 2 noise.

    The label of a token is (its hidden sentence bit) XOR (the token is 'a' or 'b'): the words
    alone leave the bit at chance, so a tagger without the representation is stuck near 50%.
    """

    name = "fake:hidden-bit"
    num_layers = 3
    dim = 5

    def __init__(self, bits: dict[tuple[str, ...], int]) -> None:
        self.bits = bits

    def embed(self, sentences):
        out = []
        for tokens in sentences:
            rng = np.random.default_rng(zlib.crc32(" ".join(tokens).encode()))
            layers = rng.standard_normal((3, len(tokens), 5)).astype(np.float32)
            layers[1, :, 0] = 2.0 * self.bits[tuple(tokens)] - 1.0
            out.append(layers)
        return out


def _hidden_bit_task(count: int, seed: int, bits: dict) -> TaggedCorpus:
    rng = np.random.default_rng(seed)
    sentences, labels = [], []
    while len(sentences) < count:
        tokens = tuple(rng.choice(WORDS, size=int(rng.integers(3, 8))).tolist())
        if tokens in bits:
            continue
        bits[tokens] = int(rng.integers(0, 2))
        sentences.append(list(tokens))
        labels.append(["X" if bits[tokens] ^ (t in "ab") else "Y" for t in tokens])
    return TaggedCorpus(sentences, labels)


@pytest.fixture(scope="module")
def hidden_bit():
    bits: dict = {}
    train = _hidden_bit_task(240, seed=1, bits=bits)
    dev = _hidden_bit_task(60, seed=2, bits=bits)
    return train, dev, HiddenBitRepresentation(bits)


def _config(**changes):
    base = dict(task="pos", output="crf", scheme=None, elmo="mix", elmo_layers=3, elmo_dim=5, word_dim=8,
                hidden_dim=12, dropout=0.0, elmo_dropout=0.0, min_word_count=1)
    base.update(changes)
    return TaggerConfig(**base)


OPTIONS = TrainOptions(epochs=12, patience=12, batch_size=16, learning_rate=0.02, seed=0, progress=False)


@pytest.mark.slow  # 12 training epochs of a tagger (~6 s): the default suite stays under a minute; CI runs -m slow
def test_tagger_learns_what_only_the_representation_carries(hidden_bit):
    train, dev, rep = hidden_bit
    with_elmo = train_tagger(train, dev, _config(), representation=rep, options=OPTIONS, log=lambda m: None)
    without = train_tagger(train, dev, _config(elmo="none", elmo_layers=0, elmo_dim=0), options=OPTIONS,
                           log=lambda m: None)
    accuracy_with = with_elmo.evaluate(dev)["accuracy"]
    accuracy_without = without.evaluate(dev)["accuracy"]
    assert accuracy_with > 0.97
    assert 0.35 < accuracy_without < 0.68  # chance: the bit is invisible in the words
    weights = with_elmo.mixing_weights()["input"]["softmax_w"]
    assert weights[1] == max(weights)  # the mix learned which layer carries the answer
    assert sum(weights) == pytest.approx(1.0, abs=1e-5)
    assert len(with_elmo.history) == 12 and with_elmo.best_epoch is not None


def test_top_layer_only_cannot_see_layer_1(hidden_bit):
    train, dev, rep = hidden_bit
    top = train_tagger(train, dev, _config(elmo="top"), representation=rep,
                       options=TrainOptions(epochs=4, patience=4, batch_size=16, learning_rate=0.02, progress=False),
                       log=lambda m: None)
    assert top.evaluate(dev)["accuracy"] < 0.7
    assert top.mixing_weights() == {}


def test_save_load_round_trip_predicts_identically(hidden_bit, tmp_path):
    train, dev, rep = hidden_bit
    config = _config(elmo_at_output=True, output="softmax", dropout=0.3, elmo_dropout=0.3)
    tagger = train_tagger(train, dev, config, representation=rep,
                          options=TrainOptions(epochs=2, batch_size=16, progress=False), log=lambda m: None)
    before = tagger.predict(dev.sentences)
    tagger.save(tmp_path / "tagger")
    assert sorted(p.name for p in (tmp_path / "tagger").iterdir()) == [
        ".elmokit-output.json", "config.json", "metrics.json", "model.safetensors", "vocab.json"]
    assert list(tmp_path.iterdir()) == [tmp_path / "tagger"]  # no temporary folder left behind
    loaded = SequenceTagger.load(tmp_path / "tagger", representation=rep)
    assert loaded.config == config
    assert loaded.predict(dev.sentences) == before
    assert loaded.mixing_weights() == tagger.mixing_weights()
    assert set(loaded.mixing_weights()) == {"input", "output"}
    metrics = json.loads((tmp_path / "tagger" / "metrics.json").read_text())
    assert len(metrics["history"]) == 2


def test_load_refuses_a_representation_of_another_shape(hidden_bit, tmp_path):
    train, dev, rep = hidden_bit
    tagger = train_tagger(train, dev, _config(), representation=rep,
                          options=TrainOptions(epochs=1, progress=False), log=lambda m: None)
    tagger.save(tmp_path / "t")
    other = HiddenBitRepresentation(rep.bits)
    other.dim = 7
    with pytest.raises(TaggerFolderError, match="3 layers of dim 5.*has 3 of dim 7"):
        SequenceTagger.load(tmp_path / "t", representation=other)
    with pytest.raises(TaggerFolderError, match="not a tagger folder"):
        SequenceTagger.load(tmp_path)


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_crf_ner_in_bioes_predicts_valid_bio(hidden_bit):
    """NER labels trained in BIOES come back as BIO; constrained decoding gives strict-valid chunks."""
    train, dev, rep = hidden_bit
    to_ner = {"X": "B-ENT", "Y": "O"}

    def ner(corpus):
        labels = []
        for row in corpus.labels:
            out, previous = [], "O"
            for label in row:
                label = to_ner[label]
                if label == "B-ENT" and previous != "O":
                    label = "I-ENT"  # runs of X are one multi-token entity
                out.append(label)
                previous = label
            labels.append(out)
        return TaggedCorpus(corpus.sentences, labels)

    train_ner, dev_ner = ner(train), ner(dev)
    tagger = train_tagger(train_ner, dev_ner, _config(task="ner", scheme="BIOES"), representation=rep,
                          options=OPTIONS, log=lambda m: None)
    assert set(tagger.labels) == {"O", "B-ENT", "I-ENT", "E-ENT", "S-ENT"}
    predicted = tagger.predict(dev_ner.sentences)
    assert {l for row in predicted for l in row} <= {"O", "B-ENT", "I-ENT"}
    for row in predicted:
        for previous, label in zip(["O"] + row, row):
            assert not (label == "I-ENT" and previous == "O")
    result = tagger.evaluate(dev_ner)
    assert result["f1"] > 0.9 and "strict" in result["metric"]


def test_span_f1_is_strict():
    gold = [["B-PER", "I-PER", "O", "B-LOC"]]
    # a chunk opened by I- counts in conlleval's default mode but not in strict IOB2
    predicted = [["I-PER", "I-PER", "O", "B-LOC"]]
    result = score(gold, predicted, "ner")
    assert result["precision"] == pytest.approx(1.0)  # the one valid predicted chunk (LOC) is right
    assert result["recall"] == pytest.approx(0.5)
    assert result["f1"] == pytest.approx(2 / 3)
    assert result["accuracy"] == pytest.approx(0.75)


def test_fine_tuning_trains_the_bilm_and_round_trips(tmp_path):
    from elmokit.elmo import Embedder

    rep = Embedder.load("default")
    sentences = [["the", "cat", "sat"], ["a", "dog", "ran", "home"], ["cats", "sat"]] * 4
    labels = [["DET", "NOUN", "VERB"], ["DET", "NOUN", "VERB", "NOUN"], ["NOUN", "VERB"]] * 4
    corpus = TaggedCorpus(sentences, labels)
    config = _config(elmo_layers=rep.num_layers, elmo_dim=rep.dim, fine_tune=True,
                     representation={"kind": "elmo", "model": "bilm"})
    tagger = train_tagger(corpus, corpus, config, representation=rep,
                          options=TrainOptions(epochs=2, batch_size=4, fine_tune_learning_rate=1e-2, progress=False),
                          log=lambda m: None)
    original = rep.bilm.state_dict()
    tuned = tagger.model.bilm.state_dict()
    changed = [name for name in original if not torch.equal(original[name], tuned[name])]
    assert changed, "fine-tuning left the biLM unchanged"
    before = tagger.predict(sentences)
    tagger.save(tmp_path / "ft")
    assert (tmp_path / "ft" / "bilm" / "model.safetensors").is_file()
    loaded = SequenceTagger.load(tmp_path / "ft")
    assert loaded.predict(sentences) == before
    for name, value in tuned.items():
        assert torch.equal(loaded.model.bilm.state_dict()[name], value), name


def test_frozen_features_come_from_the_feature_cache_and_runs_repeat_exactly(tmp_path):
    from elmokit.elmo import Embedder

    rep = Embedder.load("default")
    corpus = TaggedCorpus([["the", "cat", "sat"], ["a", "dog", "ran", "home"], ["cats", "sat"]],
                          [["DET", "NOUN", "VERB"], ["DET", "NOUN", "VERB", "NOUN"], ["NOUN", "VERB"]])
    dev = TaggedCorpus(corpus.sentences[:2], corpus.labels[:2])
    config = _config(elmo_layers=rep.num_layers, elmo_dim=rep.dim, dropout=0.2, elmo_dropout=0.2)
    options = TrainOptions(epochs=3, batch_size=2, seed=3, progress=False)
    first = train_tagger(corpus, dev, config, representation=rep, options=options, cache_dir=tmp_path, log=lambda m: None)
    caches = sorted(p.name for p in tmp_path.iterdir())
    assert len(caches) == 2 and all((tmp_path / c / "meta.json").is_file() for c in caches)  # train and dev
    second = train_tagger(corpus, dev, config, representation=rep, options=options, cache_dir=tmp_path, log=lambda m: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == caches  # reused, not rebuilt beside
    assert [h["train_loss"] for h in first.history] == [h["train_loss"] for h in second.history]
    # the cached features training read are the representation's own (predict embeds on the fly)
    from elmokit.features import feature_source, pad_features

    cached, cached_mask = feature_source(rep, corpus.sentences, tmp_path).batch([2, 0, 1])
    direct, direct_mask = pad_features(rep.embed([corpus.sentences[i] for i in (2, 0, 1)]))
    assert torch.equal(cached, direct) and torch.equal(cached_mask, direct_mask)
    assert first.predict(corpus.sentences) == second.predict(corpus.sentences)


class OneNaNFeature(HiddenBitRepresentation):
    """The hidden-bit layers, with one NaN in the features of one sentence."""

    def __init__(self, bits, poisoned: list[str]) -> None:
        super().__init__(bits)
        self.poisoned = poisoned

    def embed(self, sentences):
        out = super().embed(sentences)
        for tokens, layers in zip(sentences, out):
            if list(tokens) == self.poisoned:
                layers[0, 0, 0] = np.nan
        return out


def test_a_nan_feature_stops_training_naming_the_step_or_is_skipped_and_counted():
    bits: dict = {}
    train, dev = _hidden_bit_task(20, seed=1, bits=bits), _hidden_bit_task(5, seed=2, bits=bits)
    representation = OneNaNFeature(bits, train.sentences[7])
    options = TrainOptions(epochs=2, patience=2, batch_size=4, progress=False)
    with pytest.raises(NonFiniteLoss, match=r"loss is nan at epoch 1, step \d"):
        train_tagger(train, dev, _config(), representation=representation, options=options, log=lambda m: None)
    skipping = dataclasses.replace(options, nonfinite="skip")
    tagger = train_tagger(train, dev, _config(), representation=representation, options=skipping, log=lambda m: None)
    assert [h["skipped_steps"] for h in tagger.history] == [1, 1]  # the one batch holding sentence 7, each epoch
    assert all(bool(torch.isfinite(v).all()) for v in tagger.model.state_dict().values())
