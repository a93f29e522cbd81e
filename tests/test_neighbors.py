"""`elmokit neighbors`: nearest occurrences in context, checked against brute-force cosines."""

import zlib

import numpy as np
import pytest

from elmokit.evaluation.neighbors import NeighborIndex, NeighborIndexError, nearest_occurrences

CORPUS = [
    "the actors rehearsed the play on stage".split(),  # theatre "play" first: ties go to corpus order
    "the striker made a fine play near the goal".split(),  # sports "play"
    "a child sat quietly".split(),
    "the audience loved the new play".split(),  # theatre
]
QUERY = "the team made a great play on the field".split()  # sports; "play" at 5
SPORTS, THEATRE = {"striker", "goal", "team", "field"}, {"actors", "stage", "audience"}


class ContextRep:
    """A fake biLM with hand-set vectors (dim 3). Layer 0: the word's own vector (context-free).
    Layer 1: the word's vector plus 2 x a topic vector, sports (0, 1, 0) or theatre (0, 0, 1),
    when the sentence holds a word of that topic. Counts every embed call."""

    name = "context-fake"
    num_layers = 2
    dim = 3

    def __init__(self, fail_after: int | None = None):
        self.calls: list[int] = []
        self.fail_after = fail_after

    @staticmethod
    def word(token: str) -> np.ndarray:
        if token == "play":
            return np.array([1.0, 0.0, 0.0])
        rng = np.random.default_rng(zlib.crc32(token.encode()))
        return rng.standard_normal(3)

    def embed(self, sentences):
        self.calls.append(len(sentences))
        if self.fail_after is not None and len(self.calls) > self.fail_after:
            raise RuntimeError("interrupted")
        out = []
        for sentence in sentences:
            topic = np.zeros(3)
            if SPORTS & set(sentence):
                topic = np.array([0.0, 2.0, 0.0])
            elif THEATRE & set(sentence):
                topic = np.array([0.0, 0.0, 2.0])
            words = np.array([self.word(t) for t in sentence]).reshape(len(sentence), 3)
            out.append(np.stack([words, words + topic]).astype(np.float32))  # (2, n, 3)
        return out


def brute_force(rep, sentence, word_index, layer, corpus, only_form=None):
    """(score, sentence, token) of every corpus occurrence, best first: float64 cosines, ties by corpus order."""
    query = rep.embed([sentence])[0][layer, word_index].astype(np.float64)
    rows = []
    for s, array in enumerate(rep.embed(corpus)):
        for t in range(len(corpus[s])):
            if only_form is not None and corpus[s][t] != only_form:
                continue
            v = array[layer, t].astype(np.float64)
            rows.append((float(v @ query / (np.linalg.norm(v) * np.linalg.norm(query))), s, t))
    return sorted(rows, key=lambda r: (-r[0], r[1], r[2]))


@pytest.fixture
def index(tmp_path):
    return NeighborIndex.build(ContextRep(), CORPUS, tmp_path / "index", dtype="float32", batch_sentences=3)


def test_nearest_occurrence_sees_the_sense(index):
    rep = ContextRep()
    results = nearest_occurrences(rep, index, QUERY, 5, top=3)
    # layer 0 is context-free: every "play" scores 1, in corpus order (theatre first)
    assert [(h.sentence, h.token, h.word) for h in results[0]] == [(0, 4, "play"), (1, 5, "play"), (3, 5, "play")]
    assert all(h.score == pytest.approx(1.0, abs=1e-6) for h in results[0])
    # layer 1 sees the topic: the sports "play" alone is identical to the query
    top = results[1][0]
    assert (top.sentence, top.token, top.score) == (1, 5, pytest.approx(1.0, abs=1e-6))
    assert top.marked() == "the striker made a fine [[play]] near the goal"
    assert top.marked(window=2) == "... a fine [[play]] near the ..."
    assert top.marked(window=8) == top.marked()
    theatre = [h for h in results[1] if h.sentence in (0, 3)]
    assert all(h.score < 0.5 for h in theatre), "the theatre sense is far on the contextual layer"


@pytest.mark.parametrize("layer", [0, 1])
@pytest.mark.parametrize("same_form", [False, True])
def test_every_score_and_rank_match_brute_force(index, layer, same_form):
    rep = ContextRep()
    for word_index in (5, 0, 8):
        expected = brute_force(rep, QUERY, word_index, layer, CORPUS, QUERY[word_index] if same_form else None)
        hits = nearest_occurrences(rep, index, QUERY, word_index, layers=[layer], top=50, same_form=same_form)[layer]
        assert [(h.sentence, h.token) for h in hits] == [(s, t) for _, s, t in expected]
        np.testing.assert_allclose([h.score for h in hits], [score for score, _, _ in expected], atol=1e-6)


def test_index_round_trip_and_float16(tmp_path, index):
    reopened = NeighborIndex(index.directory)
    assert reopened.sentences == [tuple(s) for s in CORPUS]
    np.testing.assert_array_equal(reopened.offsets, [0, 7, 16, 20, 26])
    assert (reopened.num_layers, reopened.dim, len(reopened)) == (2, 3, 26)
    embedded = ContextRep().embed(CORPUS)
    for layer in (0, 1):
        assert isinstance(reopened.layers[layer], np.memmap)
        expected = np.concatenate([a[layer].astype(np.float64) for a in embedded])
        expected /= np.linalg.norm(expected, axis=1, keepdims=True)
        np.testing.assert_allclose(reopened.layers[layer], expected, atol=1e-7)
    half = NeighborIndex.build(ContextRep(), CORPUS, tmp_path / "half", dtype="float16")
    assert half.layers[1].dtype == np.float16
    np.testing.assert_allclose(half.layers[1].astype(np.float64), reopened.layers[1], atol=1e-3)
    assert [(h.sentence, h.token) for h in nearest_occurrences(ContextRep(), half, QUERY, 5, top=1)[1]] == [(1, 5)]


def test_queries_never_re_embed_the_corpus(index):
    """Each query is one embed call of the query sentence alone, then one product per layer."""
    rep = ContextRep()
    products = []
    original = index.scores

    def counting_scores(layer, vector, rows=None):
        products.append(layer)
        return original(layer, vector, rows)

    index.scores = counting_scores
    for _ in range(3):
        nearest_occurrences(rep, index, QUERY, 5, top=2)
    assert rep.calls == [1, 1, 1]
    assert products == [0, 1] * 3


def test_build_is_atomic(tmp_path, index):
    before = sorted(p.name for p in index.directory.iterdir())
    with pytest.raises(RuntimeError, match="interrupted"):
        NeighborIndex.build(ContextRep(fail_after=1), CORPUS, index.directory, batch_sentences=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"], "no staging folder left behind"
    assert sorted(p.name for p in index.directory.iterdir()) == before
    assert NeighborIndex(index.directory).sentences == [tuple(s) for s in CORPUS]


def test_the_query_itself_is_left_out_unless_asked(tmp_path):
    corpus = CORPUS + [QUERY]
    index = NeighborIndex.build(ContextRep(), corpus, tmp_path / "i", dtype="float32")
    hits = nearest_occurrences(ContextRep(), index, QUERY, 5, layers=[1], top=2, same_form=True)[1]
    assert (4, 5) not in [(h.sentence, h.token) for h in hits] and len(hits) == 2
    hits = nearest_occurrences(ContextRep(), index, QUERY, 5, layers=[1], top=2, same_form=True, exclude_self=False)[1]
    assert [(h.sentence, h.token) for h in hits] == [(1, 5), (4, 5)]  # both score 1; corpus order


def test_clear_errors(tmp_path, index):
    with pytest.raises(ValueError, match="word index 9 is outside the query sentence .*5:play"):
        nearest_occurrences(ContextRep(), index, QUERY, 9)
    with pytest.raises(ValueError, match="layer 2 out of range"):
        nearest_occurrences(ContextRep(), index, QUERY, 5, layers=[2])
    other = ContextRep()
    other.dim = 4
    with pytest.raises(NeighborIndexError, match="built with context-fake"):
        nearest_occurrences(other, index, QUERY, 5)
    with pytest.raises(NeighborIndexError, match="not a neighbour index"):
        NeighborIndex(tmp_path)


def test_cli_index_then_query_and_temporary_index(tmp_path, tiny_original, capsys):
    from elmokit import load_original, save_native
    from elmokit.cli.main import main
    from elmokit.static.vectors import StaticVectors

    save_native(load_original(*tiny_original[:2]), tmp_path / "m")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(s) for s in CORPUS) + "\n\nignored beyond max sentences\n")
    StaticVectors(["play", "game", "stage"], np.array([[1, 0], [0.9, 0.1], [0, 1]], dtype=np.float32)).save(tmp_path / "v.txt")
    model = ["--model", str(tmp_path / "m")]
    assert main(["neighbors", "index", *model, "--corpus", str(corpus), "--out", str(tmp_path / "idx"),
                 "--max-sentences", "4", "--dtype", "float32"]) == 0
    assert "indexed 4 sentences, 26 occurrences, 3 layers of 10" in capsys.readouterr().err
    query = [" ".join(QUERY), "5", "--top", "2", "--layers", "0,2"]
    assert main(["neighbors", *model, "--index", str(tmp_path / "idx"), *query, "--vectors", str(tmp_path / "v.txt")]) == 0
    indexed = capsys.readouterr().out
    lines = indexed.splitlines()
    assert lines[0] == "query: the team made a great [[play]] on the field"
    assert lines[1].startswith("v nearest types: game (0.994)")
    assert lines[2] == "elmo:m layer 0:" and "[[play]]" in lines[3] and "  1.000  " in lines[3]
    assert "elmo:m layer 2:" in lines and len(lines) == 8
    assert main(["neighbors", *model, "--corpus", str(corpus), "--max-sentences", "4", *query,
                 "--vectors", str(tmp_path / "v.txt")]) == 0
    assert capsys.readouterr().out == indexed, "a temporary index gives the same answer"
    assert main(["neighbors", "--index", str(tmp_path / "idx"), *query]) == 2  # the default model is another one
    assert "built with elmo:m" in capsys.readouterr().err
    assert main(["neighbors", *model, "--index", str(tmp_path / "idx"), "a b", "x"]) == 2
    assert "WORD_INDEX must be an integer" in capsys.readouterr().err


class TableRep:
    """A context-free fake: each word its own random vector of an odd dim, so a repeated word gives
    identical rows wherever it occurs."""

    name = "table-fake"
    num_layers = 1

    def __init__(self, dim):
        self.dim = dim

    def vector(self, token):
        return np.random.default_rng(zlib.crc32(token.encode())).standard_normal(self.dim)

    def embed(self, sentences):
        return [np.array([self.vector(t) for t in s], dtype=np.float32).reshape(1, len(s), self.dim) for s in sentences]


@pytest.mark.parametrize("dim", [37, 129])
def test_identical_rows_tie_exactly_and_in_corpus_order(tmp_path, monkeypatch, dim):
    """Bug 5: BLAS rounds a row by its position and by how many rows are scored (OpenBLAS's
    AVX-512 kernel split two identical rows in the last bit), so ties by corpus order broke on
    some CPUs. A row's score must depend only on the row: identical rows, far apart and in
    different scoring chunks, get exactly equal scores whichever rows are scored."""
    import elmokit.evaluation.neighbors as neighbors

    monkeypatch.setattr(neighbors, "CHUNK_ELEMENTS", 1000, raising=False)  # several chunks of about 1000 / dim rows
    rng = np.random.default_rng(dim)
    corpus = [[f"w{int(i)}" for i in rng.integers(0, 3000, size=int(rng.integers(3, 20)))] for _ in range(400)]
    where = [(0, 0), (57, 1), (211, 2), (399, len(corpus[399]) - 1)]
    for s, t in where:
        corpus[s][t] = "dup"
    rep = TableRep(dim)
    index = NeighborIndex.build(rep, corpus, tmp_path / "i", dtype="float32", batch_sentences=64)
    rows = [int(index.offsets[s]) + t for s, t in where]
    query = rep.vector("dup") + 0.3 * rng.standard_normal(dim)
    full = index.scores(0, query)
    assert len(full) > 3000 and len({full[r] for r in rows}) == 1, "identical rows, identical scores"
    assert [float(full[r]) for r in rows] == [float(x) for x in index.scores(0, query, np.array(rows))]
    for r in (rows[1], rows[3], 1, len(full) - 2):
        assert index.scores(0, query, np.array([r]))[0] == full[r], "a row's score does not depend on the others"
    # against float64 brute force of the stored unit rows
    stored = np.asarray(index.layers[0], dtype=np.float64)
    np.testing.assert_allclose(full, stored @ (query / np.linalg.norm(query)), rtol=0, atol=1e-12)
    # ties by corpus order, whether all rows or only the word's form are scored
    for same_form in (None, "dup"):
        hits = index.query(0, query, top=len(where), same_form=same_form)
        assert [(h.sentence, h.token) for h in hits] == where
        assert len({h.score for h in hits}) == 1
