"""StaticVectors queries against brute-force numpy; fastText n-grams against gensim."""

import numpy as np
import pytest

from elmokit import Representation
from elmokit.static.subwords import SubwordTable, char_ngrams, fasttext_hash, ngram_buckets
from elmokit.static.vectors import StaticVectors

WORDS = ["a", "b", "c", "d", "e", "f", "g"]


def table():
    rng = np.random.default_rng(5)
    return StaticVectors(WORDS, rng.standard_normal((7, 3)).astype(np.float32), name="toy")


def test_most_similar_matches_brute_force_cosine():
    t = table()
    V = t.vectors.astype(np.float64)
    q = V[2]
    cos = {w: float(V[i] @ q / np.linalg.norm(V[i]) / np.linalg.norm(q)) for i, w in enumerate(WORDS) if w != "c"}
    expected = sorted(cos.items(), key=lambda kv: -kv[1])[:4]
    got = t.most_similar("c", topn=4)
    assert [w for w, _ in got] == [w for w, _ in expected]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in expected], rtol=1e-5)
    # restricted to the 3 most frequent (first) words
    assert {w for w, _ in t.most_similar("c", topn=10, restrict=3)} == {"a", "b"}
    assert t.similarity("a", "b") == pytest.approx(float(V[0] @ V[1] / np.linalg.norm(V[0]) / np.linalg.norm(V[1])), rel=1e-5)


def test_lookup_oov_and_embed():
    t = table()
    assert isinstance(t, Representation)
    assert (t.num_layers, t.dim) == (1, 3)
    assert "a" in t and "zz" not in t
    np.testing.assert_array_equal(t["d"], t.vectors[3])
    with pytest.raises(KeyError, match="'zz' is not in the vocabulary of toy"):
        t["zz"]
    out = t.embed([["a", "zz", "g"], [], ["b"]])
    assert [o.shape for o in out] == [(1, 3, 3), (1, 0, 3), (1, 1, 3)]
    assert all(o.dtype == np.float32 for o in out)
    np.testing.assert_array_equal(out[0][0], np.stack([t.vectors[0], np.zeros(3), t.vectors[6]]))


def test_folder_round_trip(tmp_path):
    t = table()
    sub = SubwordTable(min_n=2, max_n=3, bucket=11, bucket_ids=np.array([1, 4, 7]), vectors=np.eye(3, dtype=np.float32))
    t = StaticVectors(t.words, t.vectors, name="toy", lowercase=True, subwords=sub)
    t.save_folder(tmp_path / "run")
    back = StaticVectors.load(tmp_path / "run")
    assert back.words == t.words and back.name == "toy" and back.lowercase
    np.testing.assert_array_equal(back.vectors, t.vectors)
    np.testing.assert_array_equal(back.subwords.bucket_ids, [1, 4, 7])
    # the text file alone loads too (header detected), as does the binary file
    np.testing.assert_array_equal(StaticVectors.load(tmp_path / "run" / "vectors.txt").vectors, t.vectors)
    np.testing.assert_array_equal(StaticVectors.load(tmp_path / "run" / "vectors.bin").vectors, t.vectors)


def test_fasttext_hash_and_ngrams_match_gensim():
    ft = pytest.importorskip("gensim.models.fasttext")
    for word in ["cat", "naïve", "日本語", "Dupin's", "a"]:
        assert char_ngrams(word, 3, 6) == ft.compute_ngrams(word, 3, 6)
        assert sorted(ngram_buckets(word, 3, 6, 2_000_000)) == sorted(ft.ft_ngram_hashes(word, 3, 6, 2_000_000))
    # FNV-1a reference value for the empty string and a one-byte string (offset basis, one round)
    assert fasttext_hash("") == 2166136261
    assert fasttext_hash("a") == ((2166136261 ^ 97) * 16777619) & 0xFFFFFFFF


def test_subword_vector_is_mean_of_stored_rows():
    grams = char_ngrams("cat", 3, 3)
    assert grams == ["<ca", "cat", "at>"]
    ids = sorted({fasttext_hash(g) % 101 for g in grams})
    rows = np.arange(len(ids) * 2, dtype=np.float32).reshape(len(ids), 2)
    sub = SubwordTable(min_n=3, max_n=3, bucket=101, bucket_ids=np.array(ids), vectors=rows)
    expected = np.mean([rows[ids.index(fasttext_hash(g) % 101)] for g in grams], axis=0)
    np.testing.assert_allclose(sub.vector("cat"), expected)
    t = StaticVectors(["dog"], np.ones((1, 2), np.float32), subwords=sub, name="ft")
    assert "cat" not in t and t.has_vector("cat")
    np.testing.assert_allclose(t["cat"], expected)
    np.testing.assert_allclose(t.embed([["cat"]])[0][0, 0], expected)
    from elmokit.evaluation.word_similarity import evaluate_similarity

    pairs = [("dog", "cat", 1.0), ("cat", "dog", 2.0), ("dog", "dog", 3.0)]
    assert evaluate_similarity(t, pairs)["n_covered"] == 3
    assert evaluate_similarity(t, pairs, lowercase=False)["n_covered"] == 3
    from elmokit.evaluation.word_similarity import WordVectors

    assert evaluate_similarity(WordVectors(t, in_vocab_only=True), pairs)["n_covered"] == 1
    assert not t.has_vector("q")  # "<q>" is one 3-gram, whose bucket is (almost surely) not stored


@pytest.mark.parametrize("dim", [37, 129])
def test_identical_rows_tie_exactly_in_table_order(dim):
    """Ranking must not depend on the CPU's BLAS kernels: identical rows, far apart, score exactly
    the same and rank in table order; a restricted search scores a word as the full one does."""
    rng = np.random.default_rng(dim)
    vectors = rng.standard_normal((3001, dim)).astype(np.float32)
    twins = [7, 1501, 2998]
    for row in twins[1:]:
        vectors[row] = vectors[twins[0]]
    words = [f"w{i}" for i in range(len(vectors))]
    t = StaticVectors(words, vectors, name="twins")
    query = vectors[twins[0]] + 0.3 * rng.standard_normal(dim).astype(np.float32)
    hits = t.most_similar(query, topn=3)
    assert [w for w, _ in hits] == [words[r] for r in twins]
    assert len({s for _, s in hits}) == 1
    full = dict(t.most_similar(query, topn=len(words)))
    for restrict in (2000, 1502, 17):
        for word, score in t.most_similar(query, topn=restrict, restrict=restrict):
            assert score == full[word], (restrict, word)
    V = vectors.astype(np.float64)
    cos = V @ query / np.linalg.norm(V, axis=1) / np.linalg.norm(query)
    np.testing.assert_allclose([full[w] for w in words], cos, atol=1e-6)
