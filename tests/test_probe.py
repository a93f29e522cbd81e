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


