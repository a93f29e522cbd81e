"""The task metrics (elmokit.tasks.metrics) against scikit-learn, scipy and the official SQuAD v1.1 script.

Oracles: sklearn's matthews_corrcoef, accuracy_score, f1_score; scipy's pearsonr and spearmanr (ties
by average rank); SQuAD: answers worked by hand from the official normalisation, and the official
script itself (imported from the shared data folder, never copied) on random predictions.
"""

from __future__ import annotations

import importlib.util
import math
import random

import numpy as np
import pytest
from testkit import need_shared

from elmokit.tasks.metrics import (
    accuracy,
    answer_exact_match,
    answer_f1,
    average_ranks,
    f1_positive,
    matthews,
    normalize_answer,
    pearson,
    spearman,
    squad_scores,
)

sklearn_metrics = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")

# hand-made labelings: a skewed one, a perfect one, an inverted one, three classes, string labels
LABELINGS = [
    ([1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1], [1, 0, 0, 1, 1, 0, 1, 1, 0, 0, 1]),
    ([0, 1, 1, 0], [0, 1, 1, 0]),
    ([1, 0, 1, 0, 1], [0, 1, 0, 1, 0]),
    ([0, 2, 1, 2, 2, 0, 1], [0, 1, 1, 2, 0, 0, 2]),
    (["entailment", "not", "not", "entailment", "not"], ["not", "not", "entailment", "entailment", "not"]),
]


@pytest.mark.parametrize("predicted, gold", LABELINGS)
def test_matthews_and_accuracy_match_scikit_learn(predicted, gold):
    assert matthews(predicted, gold) == pytest.approx(100 * sklearn_metrics.matthews_corrcoef(gold, predicted), abs=1e-9)
    assert accuracy(predicted, gold) == pytest.approx(100 * sklearn_metrics.accuracy_score(gold, predicted), abs=1e-9)


def test_matthews_of_a_constant_prediction_is_zero_like_scikit_learn():
    gold = [1, 0, 1, 1]
    assert matthews([1, 1, 1, 1], gold) == 0.0 == sklearn_metrics.matthews_corrcoef(gold, [1, 1, 1, 1])


@pytest.mark.parametrize("predicted, gold", LABELINGS[:3] + [([0, 0, 0], [1, 0, 1])])
def test_f1_of_the_positive_class_matches_scikit_learn(predicted, gold):
    expected = sklearn_metrics.f1_score(gold, predicted, pos_label=1, zero_division=0)
    assert f1_positive(predicted, gold, 1) == pytest.approx(100 * expected, abs=1e-9)


def test_f1_by_hand():
    # tp 2, fp 1, fn 1: 2*2 / (4 + 1 + 1)
    assert f1_positive(["1", "1", "1", "0", "0"], ["1", "1", "0", "1", "0"], "1") == pytest.approx(100 * 4 / 6)


def test_pearson_and_spearman_match_scipy_with_ties():
    rng = np.random.default_rng(3)
    gold = rng.integers(0, 6, 40).astype(float)  # STS-like scores with many ties
    predicted = np.round(gold + rng.normal(0, 1.5, 40), 1)
    predicted[:5] = predicted[5]  # ties in the predictions too
    assert pearson(predicted, gold) == pytest.approx(100 * stats.pearsonr(predicted, gold)[0], abs=1e-9)
    assert spearman(predicted, gold) == pytest.approx(100 * stats.spearmanr(predicted, gold)[0], abs=1e-9)
    assert average_ranks([10, 20, 10, 30, 20, 20]).tolist() == [1.5, 4.0, 1.5, 6.0, 4.0, 4.0]
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))


def test_lengths_must_agree():
    with pytest.raises(ValueError, match="2 predictions for 3"):
        accuracy([1, 2], [1, 2, 3])


# ---------------------------------------------------------------------- SQuAD
def test_squad_normalisation_by_hand():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear and THE plum.") == "apple pear and plum"
    assert normalize_answer("theatre") == "theatre"  # whole words only
    assert normalize_answer("1,000-yard") == "1000yard"  # punctuation is deleted, not spaced
    assert normalize_answer("«Paris»") == "«paris»"  # only ASCII punctuation goes


def test_squad_exact_match_and_f1_by_hand():
    assert answer_exact_match("the Broncos", "Broncos.") == 1.0
    assert answer_exact_match("Denver Broncos", "Broncos") == 0.0
    # prediction {denver, broncos, team}, gold {broncos}: P = 1/3, R = 1 -> F1 = 0.5
    assert answer_f1("Denver Broncos team", "the Broncos") == pytest.approx(0.5)
    # bags, not sets: prediction "a b b", gold "b b c": shared 2, P = R = 2/3
    assert answer_f1("x y y", "y y z") == pytest.approx(2 / 3)
    assert answer_f1("", "Broncos") == 0.0 and answer_f1("the", "a") == 0.0
    gold = {"q1": ["Denver Broncos", "the Broncos"], "q2": ["Santa Clara, California"], "q3": ["1990"]}
    scores = squad_scores({"q1": "Broncos", "q2": "Santa Clara"}, gold)  # q3 unanswered: 0
    assert scores["exact_match"] == pytest.approx(100 * 1 / 3)
    assert scores["f1"] == pytest.approx(100 * (1.0 + 0.8) / 3)  # q2: P 1, R 2/3 -> 0.8


def _official_script():
    path = need_shared("data", "squad_v1.1", "evaluate-v1.1.py")
    spec = importlib.util.spec_from_file_location("squad_official_evaluate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_squad_scores_agree_with_the_official_script():
    official = _official_script()
    rng = random.Random(7)
    words = ["The", "the", "a", "An", "Denver", "broncos", "Broncos,", "1990", "(1990)", "team's", "team", "-", "Clara"]
    dataset, predictions = [{"paragraphs": [{"qas": []}]}], {}
    for i in range(300):
        answers = [" ".join(rng.choices(words, k=rng.randint(1, 4))) for _ in range(rng.randint(1, 3))]
        dataset[0]["paragraphs"][0]["qas"].append({"id": f"q{i}", "answers": [{"text": a} for a in answers]})
        if i % 7:  # every seventh question unanswered
            predictions[f"q{i}"] = " ".join(rng.choices(words, k=rng.randint(0, 4)))
    for qa in dataset[0]["paragraphs"][0]["qas"]:
        for answer in [a["text"] for a in qa["answers"]] + [predictions.get(qa["id"], "")]:
            assert normalize_answer(answer) == official.normalize_answer(answer)
    gold = {qa["id"]: [a["text"] for a in qa["answers"]] for qa in dataset[0]["paragraphs"][0]["qas"]}
    ours = squad_scores(predictions, gold)
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):  # it reports each unanswered question
        theirs = official.evaluate(dataset, predictions)
    assert ours["exact_match"] == pytest.approx(theirs["exact_match"], abs=1e-9)
    assert ours["f1"] == pytest.approx(theirs["f1"], abs=1e-9)
    assert 0 < ours["exact_match"] < ours["f1"] < 100  # the random answers are neither all right nor all wrong


def test_on_the_real_dev_set_our_scores_equal_the_official_script():
    """The SOURCE check (each question's first gold answer scores 100/100), and word-aligned predictions of
    every question (some cut a word short of its gold answer) scored alike by both."""
    from elmokit.tasks.squad_data import read_squad, squad_examples

    official = _official_script()
    articles = read_squad(need_shared("data", "squad_v1.1", "dev-v1.1.json.xz"))
    data = squad_examples(articles)
    gold = data.gold()
    assert len(gold) == 10570
    assert squad_scores({qid: answers[0] for qid, answers in gold.items()}, gold) == {"exact_match": 100.0, "f1": 100.0}
    # predictions: the gold span grown by one word on the right for every third question
    predictions = {}
    for i, q in enumerate(data.questions):
        paragraph = data.paragraphs[q.paragraph]
        end = min(q.span[1] + (i % 3 == 0), len(paragraph.words) - 1)
        predictions[q.id] = paragraph.text(q.span[0], end)
    import contextlib
    import io

    with contextlib.redirect_stderr(io.StringIO()):
        theirs = official.evaluate(articles, predictions)
    ours = squad_scores(predictions, gold)
    assert ours["exact_match"] == pytest.approx(theirs["exact_match"], abs=1e-9)
    assert ours["f1"] == pytest.approx(theirs["f1"], abs=1e-9)
    assert 60 < ours["exact_match"] < ours["f1"] < 99  # neither all right nor all wrong
