"""Co-occurrence counts against hand-computed values and a brute-force loop."""

import random
from collections import defaultdict

import numpy as np
import pytest

pytest.importorskip("scipy")

from elmokit.static.cooccurrence import CooccurrenceConfig, build_vocab, count_cooccurrences


def dense(matrix):
    return matrix.toarray()


def test_hand_computed_counts_with_1_over_d():
    # vocab a b c (z is out of vocabulary); window 2, symmetric, 1/d
    corpus = [["a", "b", "c"], ["b", "a"], ["a", "z", "c"]]
    index = {"a": 0, "b": 1, "c": 2}
    X = dense(count_cooccurrences(corpus, index, CooccurrenceConfig(window=2), progress=False))
    expected = np.zeros((3, 3))
    # line 1: a-b at 1, b-c at 1, a-c at 2 (1/2)
    # line 2: b-a at 1
    # line 3: z is dropped first, so a-c are at distance 1
    # lines never share a window
    expected[0, 1] = expected[1, 0] = 1 + 1
    expected[1, 2] = expected[2, 1] = 1
    expected[0, 2] = expected[2, 0] = 0.5 + 1
    np.testing.assert_allclose(X, expected)


def test_asymmetric_and_unweighted():
    corpus = [["a", "b", "c"]]
    index = {"a": 0, "b": 1, "c": 2}
    X = dense(count_cooccurrences(corpus, index, CooccurrenceConfig(window=1, symmetric=False), progress=False))
    np.testing.assert_allclose(X, [[0, 1, 0], [0, 0, 1], [0, 0, 0]])  # row: left word, column: right word
    X = dense(count_cooccurrences(corpus, index, CooccurrenceConfig(window=5, distance_weighting=False), progress=False))
    np.testing.assert_allclose(X, [[0, 1, 1], [1, 0, 1], [1, 1, 0]])


def brute_force(corpus, index, window):
    counts = defaultdict(float)
    for line in corpus:
        ids = [index[t] for t in line if t in index]
        for i in range(len(ids)):
            for j in range(i + 1, min(len(ids), i + window + 1)):
                counts[ids[i], ids[j]] += 1.0 / (j - i)
                counts[ids[j], ids[i]] += 1.0 / (j - i)
    return counts


def test_spilling_and_merging_give_the_brute_force_counts(tmp_path):
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(13)]
    corpus = [[rng.choice(vocab + ["oov"]) for _ in range(rng.randint(0, 9))] for _ in range(37)]
    words, counts = build_vocab(corpus, min_count=1)
    assert "oov" in words  # min_count 1 keeps it; now drop it to test OOV removal
    index = {w: i for i, w in enumerate(w for w in words if w != "oov")}
    expected = np.zeros((len(index), len(index)))
    for (i, j), v in brute_force(corpus, index, 3).items():
        expected[i, j] = v
    small = CooccurrenceConfig(window=3, chunk_tokens=5, max_pairs_in_memory=4, merge_rows=2)
    spill = tmp_path / "spill"
    spill.mkdir()
    X = count_cooccurrences(corpus, index, small, spill_dir=spill, progress=False)
    np.testing.assert_allclose(dense(X), expected, rtol=1e-12)
    assert list(spill.iterdir()) == []  # spills are removed
    big = count_cooccurrences(corpus, index, CooccurrenceConfig(window=3), progress=False)
    np.testing.assert_allclose(dense(big), expected, rtol=1e-12)


def test_build_vocab_orders_by_count_then_word():
    words, counts = build_vocab([["b", "a", "c", "b"], ["c", "d"]], min_count=2)
    assert words == ["b", "c"] and counts.tolist() == [2, 2]
    words, _ = build_vocab([["b", "a", "c", "b"], ["c", "d"]], min_count=1, max_size=3)
    assert words == ["b", "c", "a"]
