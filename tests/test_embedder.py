"""Embedder as the Representation every evaluation uses."""

import numpy as np

from elmokit import BiLM, Embedder, Representation


def test_embedder_is_a_representation(tiny_original):
    embedder = Embedder(BiLM.from_original(*tiny_original[:2]))
    assert isinstance(embedder, Representation)
    assert (embedder.num_layers, embedder.dim) == (3, 10)
    out = embedder.embed([["a", "b", "c"], [], ["d"]])
    assert [o.shape for o in out] == [(3, 3, 10), (3, 0, 10), (3, 1, 10)]
    assert all(o.dtype == np.float32 for o in out)
    np.testing.assert_array_equal(embedder.embed_sentence(["d"]), out[2])


def test_layer_zero_is_context_independent(tiny_original):
    embedder = Embedder(BiLM.from_original(*tiny_original[:2]))
    a, b = embedder.embed([["the", "bank", "of", "the", "river"], ["a", "bank", "loan"]])
    np.testing.assert_array_equal(a[0, 1], b[0, 1])
    assert not np.allclose(a[1, 1], b[1, 1]) and not np.allclose(a[2, 1], b[2, 1])
