"""Linear POS probe: the layer that carries the tag is found, the others sit at chance; CoNLL-U reading."""

import numpy as np
import torch
from probe_testkit import OneLayerSignal

from elmokit.evaluation.probe import fit_softmax_regression, probe_layers

NUM_TAGS = 4
WORDS = [f"w{i}" for i in range(24)]
TAG_OF = {w: i % NUM_TAGS for i, w in enumerate(WORDS)}


def _split(rng, n_sentences):
    sentences = [[WORDS[i] for i in rng.integers(0, len(WORDS), size=rng.integers(3, 9))] for _ in range(n_sentences)]
    return sentences, [[f"T{TAG_OF[w]}" for w in s] for s in sentences]


def test_only_the_signal_layer_predicts_the_tag():
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    train, dev, test = _split(rng, 150), _split(rng, 40), _split(rng, 60)
    rep = OneLayerSignal(TAG_OF, num_layers=3, dim=7, signal_layer=1)
    result = probe_layers(rep, train, dev, test, weight_decays=(0.0, 1e-3), progress=False)
    accuracy = {row["layer"]: row["test_accuracy"] for row in result["layers"]}
    assert accuracy[1] > 99.0
    chance = 100 / NUM_TAGS
    for layer in (0, 2):
        assert abs(accuracy[layer] - chance) < 12, accuracy  # noise layers: chance (25%) up to sampling
    assert result["tags"] == ["T0", "T1", "T2", "T3"]
    assert result["tokens"]["test"] == sum(len(s) for s in test[0])
    assert set(result["layers"][0]["dev_by_weight_decay"]) == {"0.0", "0.001"}


def test_softmax_regression_matches_sklearn_on_separable_data():
    # Oracle: sklearn's multinomial logistic regression with the same L2 on standardised features.
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(3)
    x = rng.normal(size=(200, 5)).astype(np.float32)
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype(np.int64) + 2 * (x[:, 2] > 0.8)
    decay = 0.01
    model = fit_softmax_regression(torch.from_numpy(x), torch.from_numpy(y), 4, weight_decay=decay)
    z = (x - x.mean(0)) / x.std(0, ddof=1)
    reference = LogisticRegression(C=1 / (decay * len(x)), tol=1e-10, max_iter=5000).fit(z, y)
    ours = (torch.from_numpy(z) @ model.weight.T + model.bias).numpy()
    theirs = reference.decision_function(z)
    # softmax is shift-invariant: compare logits centred per row
    np.testing.assert_allclose(ours - ours.mean(1, keepdims=True), theirs - theirs.mean(1, keepdims=True), atol=2e-3)




def test_ner_probe_scores_spans_and_finds_the_layer():
    """Entity tags are a function of the word (b* begin, i* continue, o* outside), sentences are
    well-formed IOB2 chunk sequences: the signal layer gives span F1 100, noise layers far less."""
    from elmokit.evaluation.probe import ner_probe_layers

    tag_of = {**{f"b{i}": 0 for i in range(4)}, **{f"i{i}": 1 for i in range(4)}, **{f"o{i}": 2 for i in range(8)}}
    names = {0: "B-PER", 1: "I-PER", 2: "O"}
    rng = np.random.default_rng(5)

    def split(n):
        sentences = []
        for _ in range(n):
            words = []
            for _ in range(rng.integers(2, 6)):
                if rng.random() < 0.4:
                    words += [f"b{rng.integers(4)}"] + [f"i{rng.integers(4)}" for _ in range(rng.integers(0, 3))]
                else:
                    words.append(f"o{rng.integers(8)}")
            sentences.append(words)
        return sentences, [[names[tag_of[w]] for w in s] for s in sentences]

    torch.manual_seed(0)
    rep = OneLayerSignal(tag_of, num_layers=3, dim=5, signal_layer=2)
    result = ner_probe_layers(rep, split(150), split(40), split(60), weight_decays=(0.0,), progress=False)
    f1 = {row["layer"]: row["test_f1"] for row in result["layers"]}
    assert f1[2] == 100.0
    assert max(f1[0], f1[1]) < 60, f1
    assert result["tags"] == ["B-PER", "I-PER", "O"]


def test_sentence_probe_reads_the_mean_of_a_layer():
    """Label 'p' when a sentence has more 'good' than 'bad': linear in the mean of layer 1 (good ->
    e0, bad -> e1, others 0), invisible in layer 0 (every word the same vector)."""
    from probe_testkit import TableRepresentation

    from elmokit.evaluation.probe import mean_pooled_features, sentence_probe_layers

    words = ["good", "bad", "the", "a", "film"]
    vectors = {w: np.zeros((2, 3), dtype=np.float32) for w in words}
    for w in words:
        vectors[w][0] = 1.0
    vectors["good"][1, 0] = vectors["bad"][1, 1] = 1.0
    rep = TableRepresentation(vectors)
    rng = np.random.default_rng(2)

    def split(n):
        sentences = []
        while len(sentences) < n:
            s = [words[i] for i in rng.integers(0, len(words), size=rng.integers(1, 8))]
            if s.count("good") != s.count("bad"):
                sentences.append(s)
        return sentences, ["p" if s.count("good") > s.count("bad") else "n" for s in sentences]

    train, dev, test = split(200), split(50), split(80)
    pooled = mean_pooled_features(rep, test[0][:3]).numpy()
    for i, s in enumerate(test[0][:3]):  # numpy re-statement of the mean
        np.testing.assert_allclose(pooled[:, i], np.mean([vectors[w] for w in s], axis=0), rtol=1e-6)
    result = sentence_probe_layers(rep, train, dev, test, weight_decays=(0.0, 1e-3), progress=False)
    accuracy = [row["test_accuracy"] for row in result["layers"]]
    majority = 100 * max(test[1].count("p"), test[1].count("n")) / len(test[1])
    assert accuracy[1] == 100.0
    assert accuracy[0] <= majority + 1e-4  # a constant feature can do no better than the majority class
    assert result["labels"] == ["n", "p"]
