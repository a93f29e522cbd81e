"""The on-disk feature cache gives back exactly what the representation computed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from elmokit import Embedder
from elmokit.features import FeatureCache
from elmokit.representation import fingerprint as representation_fingerprint

SENTENCES = [["The", "cat", "sat", "."], ["A", "b"], [], ["one"], ["Dogs", "bark", "at", "the", "cat", "."]]


class CountingRep:
    """A fake representation whose vectors are a known function of (layer, position, word length)."""

    name, num_layers, dim, fingerprint = "fake", 3, 5, "fake:v1"

    def __init__(self):
        self.calls = 0

    def embed(self, sentences):
        self.calls += 1
        out = []
        for s in sentences:
            a = np.zeros((3, len(s), 5), dtype=np.float32)
            for t, w in enumerate(s):
                a[:, t, :] = np.arange(3)[:, None] * 100 + t * 10 + len(w) + np.arange(5) / 10
            out.append(a)
        return out


def test_cache_round_trips_and_pads(tmp_path):
    rep = CountingRep()
    cache = FeatureCache.build(rep, SENTENCES, tmp_path / "c", chunk_sentences=2)
    expected = CountingRep().embed(SENTENCES)
    assert len(cache) == 5 and (cache.num_layers, cache.dim) == (3, 5)
    for i, e in enumerate(expected):
        np.testing.assert_array_equal(cache[i], e)
    features, mask = cache.batch([4, 2, 1])
    assert features.shape == (3, 3, 6, 5) and mask.tolist()[1] == [False] * 6
    np.testing.assert_array_equal(features[0].numpy(), expected[4])
    np.testing.assert_array_equal(features[2, :, :2].numpy(), expected[1])
    assert torch.all(features[2, :, 2:] == 0) and mask[2].sum() == 2


def test_for_dataset_reuses_and_keys_on_sentences(tmp_path):
    rep = CountingRep()
    first = FeatureCache.for_dataset(rep, SENTENCES, tmp_path)
    calls = rep.calls
    again = FeatureCache.for_dataset(rep, SENTENCES, tmp_path)
    assert rep.calls == calls and again.directory == first.directory, "second use must not re-embed"
    other = FeatureCache.for_dataset(rep, SENTENCES[:2], tmp_path)
    assert other.directory != first.directory and len(other) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging folder left behind"


def test_failed_build_leaves_no_cache(tmp_path):
    class Broken(CountingRep):
        def embed(self, sentences):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        FeatureCache.build(Broken(), SENTENCES, tmp_path / "c")
    assert list(tmp_path.iterdir()) == []


def test_embedder_cache_matches_embed_and_fingerprint_tracks_weights(tmp_path):
    embedder = Embedder.load("default")
    cache = FeatureCache.for_dataset(embedder, SENTENCES, tmp_path)
    for i, array in enumerate(embedder.embed(SENTENCES)):
        np.testing.assert_array_equal(cache[i], array)
    before = representation_fingerprint(embedder)
    other = Embedder.load("default")
    assert representation_fingerprint(other) == before
    with torch.no_grad():
        next(other.bilm.parameters()).add_(1.0)
    other._fingerprint = None
    assert representation_fingerprint(other) != before
