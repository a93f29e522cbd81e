"""Synthetic Representations for the probe, WSD and classifier tests."""

from __future__ import annotations

import numpy as np


class OneLayerSignal:
    """Only layer ``signal_layer`` carries the tag: there it is 3 * one_hot(tag) + noise; every
    other layer is fresh Gaussian noise on each call (no information about the word at all)."""

    name = "synthetic:one-layer-signal"

    def __init__(self, tag_of: dict[str, int], *, num_layers=3, dim=7, signal_layer=1, seed=0):
        self.tag_of, self.num_layers, self.dim, self.signal_layer = tag_of, num_layers, dim, signal_layer
        self.rng = np.random.default_rng(seed)

    def embed(self, sentences):
        out = []
        for sentence in sentences:
            array = self.rng.normal(size=(self.num_layers, len(sentence), self.dim)).astype(np.float32)
            for t, word in enumerate(sentence):
                array[self.signal_layer, t] *= 0.3
                array[self.signal_layer, t, self.tag_of[word]] += 3.0
            out.append(array)
        return out


class TableRepresentation:
    """Fixed vectors: ``vectors[word]`` is (num_layers, dim) and does not depend on context."""

    name = "synthetic:table"

    def __init__(self, vectors: dict[str, np.ndarray], default=None):
        first = next(iter(vectors.values()))
        self.num_layers, self.dim = first.shape
        self.vectors = vectors
        self.default = np.zeros_like(first) if default is None else default

    def embed(self, sentences):
        return [np.stack([self.vectors.get(w, self.default) for w in s], axis=1).astype(np.float32)
                if s else np.zeros((self.num_layers, 0, self.dim), np.float32) for s in sentences]


class BagOfContext:
    """Two layers, hand-computable: layer 0 is the word's own table vector (zeros if unknown),
    layer 1 is the sum of the table vectors of the *other* words of the sentence."""

    name = "synthetic:bag-of-context"
    num_layers = 2

    def __init__(self, table: dict[str, tuple[float, ...]]):
        self.table = {w: np.asarray(v, dtype=np.float32) for w, v in table.items()}
        self.dim = len(next(iter(self.table.values())))

    def embed(self, sentences):
        out = []
        for sentence in sentences:
            own = np.stack([self.table.get(w, np.zeros(self.dim, np.float32)) for w in sentence])  # (T, D)
            out.append(np.stack([own, own.sum(axis=0, keepdims=True) - own]).astype(np.float32))
        return out
