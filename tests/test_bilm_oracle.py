"""The biLM against the NumPy oracle on random, oddly shaped architectures."""


import numpy as np
import pytest
import torch
from numpy_elmo import NumpyELMo
from testkit import random_tf_weights, tiny_options, write_original_files

from elmokit import Embedder, batch_to_ids, load_original

SENTENCES = [
    ["The", "cat", "sat", "."],
    ["A"],
    ["Ünïcödé", "tokens", "and", "an", "emoji", "🙂", "here", "!"],
    [],
    ["x" * 60, "short"],
]


def load_both(tmp_path, options, seed=0, *, stateful=False, weights=None):
    weights = weights if weights is not None else random_tf_weights(options, seed=seed)
    options_path, weights_path = write_original_files(tmp_path / f"m{seed}", options, weights)
    return load_original(options_path, weights_path, stateful=stateful), NumpyELMo(options, weights)


ARCHITECTURES = {
    "default-tiny": tiny_options(),
    "tanh-no-highway": tiny_options(activation="tanh", n_highway=0),
    "no-skip-three-layers": tiny_options(skip=False, n_layers=3, n_highway=2),
    "one-layer-no-clips": tiny_options(n_layers=1, cell_clip=0, proj_clip=0),
    "no-token-projection": tiny_options(filters=((1, 2), (3, 3)), projection_dim=5),  # F == P
    "261-characters": tiny_options(n_characters=261),
}


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_all_layers_match_numpy_oracle(tmp_path, name):
    options = ARCHITECTURES[name]
    bilm, oracle = load_both(tmp_path, options)
    with torch.no_grad():
        output = bilm(batch_to_ids(SENTENCES))
    L = options["lstm"]["n_layers"]
    assert output.layers.shape[0] == L + 1
    for b, sentence in enumerate(SENTENCES):
        expected = oracle.sentence(sentence)  # (L+1, n+2, 2P)
        n = len(sentence) + 2
        np.testing.assert_allclose(output.layers[:, b, :n].numpy(), expected, atol=2e-5, rtol=1e-4)
        assert (output.layers[:, b, n:] == 0).all(), "padding positions must be zero"
        assert output.mask[b].sum() == n


def test_token_projection_absent_when_filters_equal_projection(tmp_path):
    bilm, _ = load_both(tmp_path, ARCHITECTURES["no-token-projection"])
    assert bilm.token_encoder.projection is None


def test_cell_clip_is_applied(tmp_path):
    """Weights that drive the memory cell past the clip: the fixtures barely exercise it."""
    options = tiny_options(n_layers=1, lstm_dim=6, projection_dim=4, cell_clip=0.5, proj_clip=0)
    weights = random_tf_weights(options, seed=3, scale=0.1)
    D = 6
    for d in (0, 1):
        weights[f"RNN_{d}/RNN/MultiRNNCell/Cell0/LSTMCell/W_P_0"] *= 10.0
        bias = weights[f"RNN_{d}/RNN/MultiRNNCell/Cell0/LSTMCell/B"]
        bias[0:D] += 6.0  # input gate open
        bias[D : 2 * D] += 2.0  # candidate near +1
        bias[2 * D : 3 * D] += 6.0  # forget gate open: c accumulates about +1 per step
    sentence = "one two three four five six seven".split()
    bilm, oracle = load_both(tmp_path, options, weights=weights)
    unclipped = NumpyELMo(tiny_options(n_layers=1, lstm_dim=6, projection_dim=4, cell_clip=0, proj_clip=0), weights)

    # The oracle confirms the scenario: without the clip the cell runs far past 1.5.
    h, c = np.zeros(4), np.zeros(D)
    for x in [unclipped.token_vector(t) for t in ["<S>", *sentence, "</S>"]]:
        h, c = unclipped.cell(0, 0, x, h, c)
    assert np.abs(c).max() > 5.0

    with torch.no_grad():
        actual = bilm(batch_to_ids([sentence])).layers[1, 0].numpy()
    np.testing.assert_allclose(actual, oracle.sentence(sentence)[1], atol=1e-5)
    assert np.abs(actual - unclipped.sentence(sentence)[1]).max() > 0.1, "clip must change the outputs"


def test_batch_independence_default_mode(tmp_path):
    bilm, _ = load_both(tmp_path, tiny_options())
    embedder = Embedder(bilm, batch_size=2)
    alone = [Embedder(bilm, batch_size=1).embed([s])[0] for s in SENTENCES]
    rng = np.random.default_rng(0)
    for batch_size in (1, 2, 3, 5):
        embedder.batch_size = batch_size
        order = rng.permutation(len(SENTENCES))
        shuffled = embedder.embed([SENTENCES[i] for i in order])
        for position, index in enumerate(order):
            np.testing.assert_array_equal(shuffled[position], alone[index])
    # and again after many calls: nothing is carried
    again = embedder.embed(SENTENCES)
    for a, b in zip(again, alone):
        np.testing.assert_array_equal(a, b)


def test_stateful_rows_follow_reference_semantics(tmp_path):
    """Row b starts from row b's final state of the previous call; rows beyond the batch keep theirs."""
    options = tiny_options()
    bilm, oracle = load_both(tmp_path, options, stateful=True)
    calls = [
        [["a", "b"], ["c"], ["d", "e", "f"]],
        [["g", "h", "i"], ["j"]],  # smaller batch: row 2 keeps its state
        [["k"], ["l", "m"], ["n"], ["o", "p"]],  # larger batch: row 3 starts from zero
    ]
    with torch.no_grad():
        for batch in calls:
            output = bilm(batch_to_ids(batch))
            for row, sentence in enumerate(batch):
                expected = oracle.sentence(sentence, row=row)
                np.testing.assert_allclose(output.layers[:, row, : len(sentence) + 2].numpy(), expected, atol=2e-5, rtol=1e-4)
    bilm.reset_states()
    with torch.no_grad():
        fresh = bilm(batch_to_ids([["a", "b"]])).layers[:, 0, :4].numpy()
    np.testing.assert_allclose(fresh, NumpyELMo(options, oracle.w).sentence(["a", "b"]), atol=2e-5, rtol=1e-4)


def test_stateful_same_batch_twice_differs(tmp_path):
    bilm, _ = load_both(tmp_path, tiny_options(), stateful=True)
    ids = batch_to_ids(SENTENCES[:3])
    with torch.no_grad():
        first, second = bilm(ids).layers, bilm(ids).layers
    assert not torch.allclose(first[1:], second[1:]), "stateful mode must carry state"
    assert torch.equal(first[0], second[0]), "the token layer has no state"
