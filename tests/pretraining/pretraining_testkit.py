"""Helpers for the pretraining tests: a hand-built WordPiece vocabulary, binomial tolerances."""

from __future__ import annotations

import math

import numpy as np
import pytest

# A vocabulary small enough to tokenise by hand: the specials at BERT's ids 0-4, then words and pieces.
HAND_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
              "the", "cat", "##s", "un", "##believ", "##able", "sat", "on", "mat", ".", "!", "a", "dog", "##gy", "x"]

# Z for the statistical checks: with fixed seeds they are deterministic; 4.5 sigma means a correct
# implementation under another seed would fail a given check with probability < 1e-5.
Z = 4.5


def binomial_tolerance(p: float, n: int, z: float = Z) -> float:
    """Half-width of the band a proportion of n Bernoulli(p) draws stays in (normal approximation)."""
    return z * math.sqrt(p * (1 - p) / n)


def assert_proportion(successes: int, n: int, p: float, what: str = "") -> None:
    observed = successes / n
    tolerance = binomial_tolerance(p, n)
    assert abs(observed - p) <= tolerance, f"{what}: {observed:.4f} vs {p} (tolerance {tolerance:.4f}, n={n})"


def synthetic_sequence(rng: np.random.Generator, n_words: int, *, vocab_low: int = 5, vocab_high: int = 200,
                       max_pieces: int = 3, cls_id: int = 2, sep_id: int = 3):
    """[CLS] + n_words words of 1..max_pieces pieces each + [SEP]: (ids, word_ids)."""
    ids, word_ids = [cls_id], [None]
    for w in range(n_words):
        for _ in range(int(rng.integers(1, max_pieces + 1))):
            ids.append(int(rng.integers(vocab_low, vocab_high)))
            word_ids.append(w)
    ids.append(sep_id)
    word_ids.append(None)
    return np.array(ids), word_ids


def need_transformers() -> None:
    """Skip unless the 'transformers' extra (transformers + tokenizers) is installed."""
    for name in ("transformers", "tokenizers"):
        pytest.importorskip(name, reason="needs the 'transformers' extra: pip install -e '.[transformers]'")
