"""word2vec text/binary files, with gensim's KeyedVectors as the independent oracle."""

import numpy as np
import pytest

from elmokit.formats.word2vec import VectorFileError, read_word2vec, write_word2vec

gensim_models = pytest.importorskip("gensim.models")
KeyedVectors = gensim_models.KeyedVectors

WORDS = ["the", "naïve", "日本", "x", "Dupin", "--"]


def table(dim=7, seed=0):
    rng = np.random.default_rng(seed)
    return WORDS, (rng.standard_normal((len(WORDS), dim)) * 3).astype(np.float32)


def gensim_kv(words, vectors):
    kv = KeyedVectors(vectors.shape[1])
    kv.add_vectors(words, vectors)
    return kv


@pytest.mark.parametrize("binary,header", [(False, True), (False, False), (True, True)])
def test_we_read_what_gensim_writes(tmp_path, binary, header):
    words, vectors = table()
    path = tmp_path / "g.vec"
    gensim_kv(words, vectors).save_word2vec_format(str(path), binary=binary, write_header=header)
    got_words, got = read_word2vec(path)  # binary and header detected
    assert got_words == words
    np.testing.assert_allclose(got, vectors, rtol=1e-6 if not binary else 0, atol=1e-6 if not binary else 0)


@pytest.mark.parametrize("binary,header", [(False, True), (False, False), (True, True)])
def test_gensim_reads_what_we_write(tmp_path, binary, header):
    words, vectors = table(dim=5, seed=1)
    path = tmp_path / "ours.vec"
    write_word2vec(path, words, vectors, binary=binary, header=header)
    kv = KeyedVectors.load_word2vec_format(str(path), binary=binary, no_header=not header)
    assert list(kv.index_to_key) == words
    np.testing.assert_array_equal(kv.vectors, vectors)  # %.9g and raw float32 both round-trip exactly


def test_round_trip_is_exact_and_header_is_right(tmp_path):
    words, vectors = table(dim=3, seed=2)
    write_word2vec(tmp_path / "a.txt", words, vectors)
    assert (tmp_path / "a.txt").read_text(encoding="utf-8").splitlines()[0] == f"{len(words)} 3"
    got_words, got = read_word2vec(tmp_path / "a.txt", limit=4)
    assert got_words == words[:4]
    np.testing.assert_array_equal(got, vectors[:4])


def test_errors_name_file_and_line(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("2 3\nfoo 1 2 3\nbar 1 2\n", encoding="utf-8")
    with pytest.raises(VectorFileError, match=r"bad\.txt:3: expected a word and 3 numbers, found 2"):
        read_word2vec(bad)
    short = tmp_path / "short.txt"
    short.write_text("3 2\nfoo 1 2\nbar 1 2\n", encoding="utf-8")
    with pytest.raises(VectorFileError, match="promises 3 words, file holds 2"):
        read_word2vec(short)
    words, vectors = table(dim=4)
    write_word2vec(tmp_path / "t.bin", words, vectors, binary=True)
    data = (tmp_path / "t.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-20])
    with pytest.raises(VectorFileError, match="cut short"):
        read_word2vec(tmp_path / "cut.bin", binary=True)
    with pytest.raises(ValueError, match="contains a space"):
        write_word2vec(tmp_path / "x.txt", ["new york"], np.zeros((1, 2)))


def test_failed_write_leaves_old_file(tmp_path):
    path = tmp_path / "keep.txt"
    path.write_text("old content\n")
    with pytest.raises(ValueError):
        write_word2vec(path, ["a", "b"], np.zeros((3, 2)))
    assert path.read_text() == "old content\n"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]
