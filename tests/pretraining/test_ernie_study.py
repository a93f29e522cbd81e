"""benchmarks/ernie_study.py: the supersense probe against representations whose answer is known (a vector that
spells the class; a constant vector, which leaves only the training majority), its unseen-word subset counted by
hand, and the report's noise floor (measured from the pooled seed variance), margins and verdicts on hand-made records."""

from __future__ import annotations

import numpy as np
import pytest
from testkit import load_benchmark
from train_helpers import one_thread

CLASSES = ("noun.animal", "noun.artifact", "noun.person")
WORDS = {"dog": 0, "cat": 0, "hammer": 1, "car": 1, "girl": 2, "king": 2, "horse": 0, "spoon": 1, "nurse": 2}


@pytest.fixture(scope="module")
def study():
    return load_benchmark("ernie_study", "ernie_study_report")


class SpellingRep:
    """Layer 0: a constant vector; layer 1: the one-hot of the word's class (zeros for other words)."""

    name, num_layers, dim, stateful, fingerprint = "spelling", 2, 3, False, None

    def embed(self, sentences):
        out = []
        for words in sentences:
            array = np.ones((2, len(words), 3), dtype=np.float32)
            array[1] = 0.0
            for i, w in enumerate(words):
                if w in WORDS:
                    array[1, i, WORDS[w]] = 1.0
            out.append(array)
        return out


def split(sentences):
    """(sentences, {word index: class}) with every known word labelled."""
    return ([s.split() for s in sentences],
            [{i: CLASSES[WORDS[w]] for i, w in enumerate(s.split()) if w in WORDS} for s in sentences])


def test_supersense_probe_reads_the_class_from_the_vector_and_counts_unseen_words(study):
    splits = {"train": split(["the dog saw a hammer", "a girl and a cat", "the king took the car", "a dog"]),
              "dev": split(["the cat and the car", "a king"]),
              "test": split(["the horse hit a spoon", "the nurse saw the dog", "a dog and a dog"])}
    with one_thread():
        result = study.supersense_probe(SpellingRep(), splits, weight_decays=(0.0, 1e-4), max_iter=50)
    # train labels: dog x2, cat, girl, king -> animal 3, person 2; hammer, car -> artifact 2
    assert result["classes"] == 3 and result["nouns"] == {"train": 7, "dev": 3, "test": 6}
    assert result["unseen_test_nouns"] == 3  # horse, spoon, nurse: never labelled in train
    spelled = result["layers"][1]
    assert spelled["test_accuracy"] == 100.0 and spelled["test_accuracy_unseen_words"] == 100.0
    # a constant vector leaves the bias alone: the training majority (noun.animal) for every noun; test holds
    # horse, dog, dog, dog (animal) of 6, and of the unseen words horse only
    constant = result["layers"][0]
    assert constant["test_accuracy"] == pytest.approx(100 * 4 / 6)
    assert constant["test_accuracy_unseen_words"] == pytest.approx(100 / 3)


def rec(pos: float, wsd: float | None = None, ss: float | None = None) -> dict:
    out = {"probe": {"layers": [{"test_accuracy": pos - 5}, {"test_accuracy": pos}]}}
    if wsd is not None:
        out["wsd"] = {"layers": [{"f1": wsd}]}
    if ss is not None:
        out["supersense"] = {"layers": [{"test_accuracy": ss, "test_accuracy_unseen_words": ss - 10}]}
    return out


def test_noise_floor_is_measured_from_the_pooled_seed_variance_and_claims_need_it(study):
    records = {"a": {0: rec(70.0, 50.0), 1: rec(72.0, 50.5)},  # seed differences: POS 2.0, WSD 0.5
               "b": {0: rec(66.0, 49.0), 1: rec(67.0, 50.0)},  # POS 1.0, WSD 1.0
               "c": {0: rec(71.5, ss=30.0)}}  # one seed: no spread
    # two seeds: a row's variance is d^2 / 2; pooled POS s^2 = (2 + 0.5) / 2, WSD (0.125 + 0.5) / 2;
    # the floor 2 * sqrt(2 s^2 / 2) = 2 s
    assert study.noise_floor(records, "pos") == pytest.approx(2 * 1.25 ** 0.5)
    assert study.noise_floor(records, "wsd") == pytest.approx(2 * 0.3125 ** 0.5)
    assert study.noise_floor(records, "supersense") is None
    assert study.best(records["a"][0], "pos") == 70.0 and study.best(records["c"][0], "wsd") is None
    assert study.margins(records, "a", "b", "pos") == [4.0, 5.0]
    assert study.judged(records, "a", "b", "pos") == "+4.5 (seeds +4.0, +5.0) vs noise 2.2 → holds"
    assert study.judged(records, "a", "b", "wsd") == "+0.8 (seeds +1.0, +0.5) vs noise 1.1 → within noise"
    assert study.judged(records, "a", "c", "supersense") == "not measured"
    same = {"a": {0: rec(70.0), 1: rec(71.0)}, "b": {0: rec(70.0), 1: rec(71.0)}}
    assert study.judged(same, "a", "b", "pos").endswith("no difference")
