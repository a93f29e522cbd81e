"""The similarity/analogy evaluator against hand-computed numbers on tiny data."""

import numpy as np
import pytest
from static_testkit import need_shared

from elmokit.evaluation.word_similarity import (
    Question,
    evaluate_analogy,
    evaluate_similarity,
    load_analogy,
    load_similarity,
    read_google,
    read_pairs,
    spearman,
)
from elmokit.static.vectors import StaticVectors
from elmokit.tasks.metrics import average_ranks as rankdata


def test_spearman_hand_computed_with_ties():
    # ranks x: 1 2 3 4 5; ranks y (7 appears twice -> 3.5): 1 2 3.5 5 3.5
    # centred: x -2 -1 0 1 2, y -2 -1 .5 2 .5; cov 4+1+0+2+1 = 8; |x|^2 = 10, |y|^2 = 9.5
    assert rankdata([5, 6, 7, 8, 7]).tolist() == [1, 2, 3.5, 5, 3.5]
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / np.sqrt(95))
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def toy_table():
    words = ["a", "b", "c", "e"]
    vectors = np.array([[1, 0], [0, 1], [1, 1], [-1, 0]], dtype=np.float32)
    return StaticVectors(words, vectors, name="toy", lowercase=True)


def test_similarity_over_covered_pairs_hand_computed(tmp_path):
    path = tmp_path / "pairs.txt"
    # CRLF line ends and an upper-case word, as in the real files
    path.write_bytes(b"a\tc\t8\r\nA\tb\t5\r\na\te\t1\r\nb\tc\t9\r\na\tzzz\t3\r\n")
    pairs = read_pairs(path)
    assert pairs[1] == ("A", "b", 5.0)
    result = evaluate_similarity(toy_table(), pairs, name="toy")
    # cosines: a-c .707, a-b 0, a-e -1, b-c .707 -> ranks 3.5 2 1 3.5; human ranks 3 2 1 4
    # centred: 1 -.5 -1.5 1 and .5 -.5 -1.5 1.5; cov 4.5; |x|^2 4.5, |y|^2 5
    assert result["n_covered"] == 4 and result["n_pairs"] == 5 and result["coverage"] == pytest.approx(0.8)
    assert result["spearman"] == pytest.approx(4.5 / np.sqrt(22.5))
    assert result["oov"] == ["zzz"]
    # without lowercasing "A" is unknown: pairs a-c, a-e, b-c; cosine ranks 2.5 1 2.5, human 2 1 3
    # centred .5 -1 .5 and 0 -1 1: cov 1.5, |x|^2 1.5, |y|^2 2 -> 1.5 / sqrt(3)
    cased = evaluate_similarity(toy_table(), pairs, lowercase=False)
    assert cased["n_covered"] == 3 and cased["spearman"] == pytest.approx(1.5 / np.sqrt(3))


class TwoLayerToy:
    """A non-table Representation: layer 0 = the toy table, layer 1 = its negation on axis 0."""

    name = "toy2"
    num_layers = 2
    dim = 2

    def __init__(self):
        self.table = toy_table()

    def embed(self, sentences):
        out = []
        for s in sentences:
            base = self.table.embed([s])[0][0]
            flipped = base * np.array([-1, 1], dtype=np.float32)
            out.append(np.stack([base, flipped + np.array([0, 2], dtype=np.float32)]))
        return out


def test_any_representation_by_layer():
    pairs = [("a", "c", 8.0), ("a", "b", 5.0), ("a", "e", 1.0), ("b", "c", 9.0)]
    rep = TwoLayerToy()
    r0 = evaluate_similarity(rep, pairs)
    assert r0["coverage"] == 1.0 and r0["spearman"] == pytest.approx(4.5 / np.sqrt(22.5))
    # layer 1 vectors: a (-1,2) b (0,3) c (-1,3) e (1,2): cosines a-c .992, a-b .894, a-e .6, b-c .949
    # -> ranks 4 2 1 3 vs human 3 2 1 4: centred 1.5 -.5 -1.5 .5 / .5 -.5 -1.5 1.5: cov 4, |x|^2=|y|^2=5
    r1 = evaluate_similarity(rep, pairs, layer=1)
    assert r1["spearman"] == pytest.approx(4 / 5)
    with pytest.raises(ValueError, match="out of range"):
        evaluate_similarity(rep, pairs, layer=2)


def test_analogy_3cosadd_excludes_question_words_and_reports_coverage():
    # 2-d: b is a turned slightly towards c, so b - a + c points almost exactly at c (excluded);
    # the best remaining word is d.
    words = ["a", "b", "c", "d", "x", "far"]
    vectors = np.array([[1, 0], [1, 0.1], [0, 1], [0.3, 1], [-1, 0], [0.3, 1]], dtype=np.float32)
    table = StaticVectors(words, vectors, name="toy")
    qs = [Question("family", "a", "b", "c", "d"),           # correct only because c is excluded
          Question("gram3-comparative", "a", "b", "c", "x"),  # predicted d: wrong
          Question("family", "a", "b", "c", "far")]         # "far" is word 6, beyond top_n = 5: not covered
    # hand check of the first: unit(b) = (.995, .0995); target = (-.005, 1.0995);
    # cos with c .99999 (excluded), d .957, b .095, x .005, a -.005
    res = evaluate_analogy(table, qs, top_n=5, name="google")
    assert res["n_covered"] == 2 and res["coverage"] == pytest.approx(2 / 3)
    assert res["accuracy"] == pytest.approx(0.5) and res["accuracy_all"] == pytest.approx(1 / 3)
    assert res["sections"]["semantic"] == {"n": 2, "covered": 1, "correct": 1, "accuracy": 1.0}
    assert res["sections"]["syntactic"] == {"n": 1, "covered": 1, "correct": 0, "accuracy": 0.0}
    # all six words: "far" duplicates d's vector; d comes first in the table and wins the tie -> wrong
    res6 = evaluate_analogy(table, qs, top_n=6)
    assert res6["n_covered"] == 3 and res6["accuracy"] == pytest.approx(1 / 3)


def test_google_reader(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text(": capital-common-countries\nAthens Greece Baghdad Iraq\n"
                    ": gram1-adjective-to-adverb\ncalm calmly quick quickly\n")
    assert read_google(path) == [Question("capital-common-countries", "Athens", "Greece", "Baghdad", "Iraq"),
                                 Question("gram1-adjective-to-adverb", "calm", "calmly", "quick", "quickly")]


@pytest.mark.parametrize("name,count", [("ws353", 353), ("ws353-sim", 203), ("ws353-rel", 252), ("simlex999", 999),
                                        ("men", 3000), ("rw", 2034), ("simverb3500", 3500)])
def test_shared_similarity_sets_have_their_published_sizes(name, count):
    folder = need_shared("data", "wordsim")
    assert len(load_similarity(name, folder)) == count


def test_shared_analogy_sets_have_their_published_sizes():
    folder = need_shared("data", "wordsim")
    google = load_analogy("google", folder)
    assert len(google) == 19544
    assert sum(not q.section.startswith("gram") for q in google) == 8869
    assert len(load_analogy("msr", folder)) == 8000


def test_analogy_ties_go_to_the_first_word_on_any_cpu():
    """Two words with identical vectors, far apart in a 3000-word table of an odd dim: the answer is
    always the first (more frequent) one, whatever BLAS kernel scores which row."""
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((3000, 37)).astype(np.float32)
    vectors[2900] = vectors[101]  # "w2900" twins "w101"
    vectors[11] = vectors[10]  # a == b: the target is c's direction
    vectors[12] = vectors[101] + 0.2 * rng.standard_normal(37).astype(np.float32)
    table = StaticVectors([f"w{i}" for i in range(3000)], vectors, name="twins")
    qs = [Question("family", "w10", "w11", "w12", "w101"), Question("family", "w10", "w11", "w12", "w2900")]
    res = evaluate_analogy(table, qs, top_n=3000)
    assert res["n_covered"] == 2 and res["accuracy"] == pytest.approx(0.5)
    assert evaluate_analogy(table, qs[:1], top_n=3000, batch_size=1)["accuracy"] == 1.0
