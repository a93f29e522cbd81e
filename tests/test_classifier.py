"""Sentence classifier: SST trees, learning a synthetic task through the ELMo features, save/load."""

import json

import numpy as np
import pytest
import torch

from elmokit.evaluation.sst import TreeError, parse_tree, read_sst, sst_task
from elmokit.features import FeatureCache, InMemoryFeatures
from elmokit.tasks.classifier import Classifier, ClassifierConfig, SentenceClassifier, train_classifier


def test_parse_tree_leaves_and_root_label():
    assert parse_tree("(3 (2 It) (4 (3 (2 works) (2 well)) (2 .)))") == (3, ["It", "works", "well", "."])
    assert parse_tree("(1 (2 -LRB-) (0 bad) (2 -RRB-))") == (1, ["(", "bad", ")"])
    assert parse_tree("(4 fine)") == (4, ["fine"])
    # a leaf of two words and the PTB slash escape, as in SST train line 4342
    assert parse_tree(r"(2 (2 like) (2 8 1\/2))") == (2, ["like", "8", "1/2"])


def test_read_sst_and_the_two_tasks(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("(0 (1 Awful) (2 .))\n(2 (2 It) (2 is))\n(4 (3 Great) (2 fun))\n(1 (2 meh) (1 dull))\n"
                    "(3 (2 nice) (2 .))\n", encoding="utf-8")
    sentences, labels = read_sst(path)
    assert sentences == [["Awful", "."], ["It", "is"], ["Great", "fun"], ["meh", "dull"], ["nice", "."]]
    assert labels == [0, 2, 4, 1, 3]
    assert sst_task(sentences, labels, binary=False) == (
        [0, 1, 2, 3, 4], ["very negative", "neutral", "very positive", "negative", "positive"])
    assert sst_task(sentences, labels, binary=True) == ([0, 2, 3, 4], ["negative", "positive", "negative", "positive"])


@pytest.mark.parametrize("bad, problem", [
    ("(3 (2 It) (4 works)", "missing '\\)'"),
    ("(3 (2 It)) (2 extra)", "text after the tree"),
    ("(x (2 It))", "numeric label"),
    ("(3 )", "neither a word nor children"),
])
def test_malformed_tree_names_file_and_line(tmp_path, bad, problem):
    path = tmp_path / "dev.txt"
    path.write_text("(2 (2 fine) (2 .))\n\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(TreeError, match=rf"dev\.txt:3: malformed tree: .*{problem}"):
        read_sst(path)


class SignalInLayer:
    """Layer 2 says the word's class (+1 for 'p*' words, -1 for 'n*'); layers 0, 1 are noise."""

    name, num_layers, dim, fingerprint = "synthetic:signal", 3, 4, "synthetic:signal:v1"

    def embed(self, sentences):
        out = []
        for s in sentences:
            rng = np.random.default_rng(len(s) * 1000 + sum(map(len, s)))
            a = rng.normal(size=(3, len(s), 4)).astype(np.float32)
            a[2, :, 0] = [1.0 if w.startswith("p") else -1.0 for w in s]
            out.append(a)
        return out


def _synthetic_task(rng, words_from, words_to, n):
    """A sentence is positive when all its words but at most one are 'p' words."""
    sentences, labels = [], []
    for _ in range(n):
        positive = rng.random() < 0.5
        length = int(rng.integers(3, 8))
        n_major = length - 1
        kinds = ["p" if positive else "n"] * n_major + ["n" if positive else "p"] * (length - n_major)
        rng.shuffle(kinds)
        sentences.append([f"{k}{rng.integers(words_from, words_to)}" for k in kinds])
        labels.append("pos" if positive else "neg")
    return sentences, labels


@pytest.mark.slow  # trains two classifiers (~4 s): the default suite stays under a minute; CI runs -m slow
def test_classifier_learns_through_elmo_features_and_baseline_cannot(tmp_path):
    rng = np.random.default_rng(0)
    train = _synthetic_task(rng, 0, 40, 240)
    dev = _synthetic_task(rng, 40, 80, 80)  # words never seen in training: only the features can tell
    rep = SignalInLayer()
    train_features = FeatureCache.build(rep, train[0], tmp_path / "train")
    dev_features = FeatureCache.build(rep, dev[0], tmp_path / "dev")
    options = dict(epochs=12, batch_size=16, learning_rate=0.01, word_dim=6, hidden_dim=7, dropout=0.1)
    elmo, history = train_classifier(train, dev, train_features=train_features, dev_features=dev_features,
                                     use_elmo=True, elmo_layers=3, elmo_dim=4, **options)
    baseline, _ = train_classifier(train, dev, use_elmo=False, **options)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert elmo.accuracy(*dev, dev_features) >= 95
    assert 30 <= baseline.accuracy(*dev) <= 70  # all dev words are <unk>: chance
    weights = elmo.model.layer_weights()["weights"]
    assert max(range(3), key=weights.__getitem__) == 2  # the mix moved towards the informative layer
    assert max(h["dev_accuracy"] for h in history) == pytest.approx(elmo.accuracy(*dev, dev_features))


def test_every_parameter_gets_a_gradient_and_padding_does_not_leak():
    torch.manual_seed(0)
    config = ClassifierConfig(num_labels=3, vocab_size=9, use_elmo=True, elmo_layers=2, elmo_dim=5, word_dim=3,
                              hidden_dim=4, dropout=0.0)
    model = SentenceClassifier(config)
    word_ids = torch.tensor([[2, 3, 4], [5, 6, 0]])
    mask = word_ids != 0
    layers = torch.randn(2, 2, 3, 5)
    loss = model(word_ids, mask, layers).sum() + model.penalty() + 0 * model.scalar_mix.gamma
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters()
               if n != "word_embedding.weight"), [n for n, p in model.named_parameters() if p.grad is None]
    # the second sentence alone (no padding) gives the same logits as inside the padded batch
    alone = model(word_ids[1:, :2], mask[1:, :2], layers[1:, :, :2])
    np.testing.assert_allclose(model(word_ids, mask, layers)[1].detach(), alone[0].detach(), atol=1e-6)


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    train = _synthetic_task(rng, 0, 10, 30)
    rep = SignalInLayer()
    features = InMemoryFeatures(rep.embed(train[0]))
    classifier, _ = train_classifier(train, train, train_features=features, dev_features=features, use_elmo=True,
                                     elmo_layers=3, elmo_dim=4, epochs=2, word_dim=3, hidden_dim=5,
                                     representation={"kind": "elmo", "model": "default"})
    classifier.save(tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [
        ".elmokit-output.json", "config.json", "labels.json", "model.safetensors", "vocab.txt"]
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert config["format_version"] == 2 and config["mix_l2"] == 0.001
    assert config["representation"] == {"kind": "elmo", "model": "default"}
    loaded = Classifier.load(tmp_path / "model")
    assert loaded.labels == ["neg", "pos"] and loaded.vocabulary.words == classifier.vocabulary.words
    torch.testing.assert_close(loaded.logits(train[0], features), classifier.logits(train[0], features), rtol=0, atol=0)
    config["format_version"] = 99
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="format_version 99"):
        Classifier.load(tmp_path / "model")
