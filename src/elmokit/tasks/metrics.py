"""The official metrics of the sentence, pair and span tasks, in plain numpy.

GLUE (Wang et al. 2019) scores CoLA by the Matthews correlation, SST-2, RTE, WNLI and SICK-E by
accuracy, MRPC by accuracy and the F1 of the positive class, STS-B and SICK-R by the Pearson and
Spearman correlations. All are reported here x100 (GLUE's convention), so a table can average them.

SQuAD v1.1 (Rajpurkar et al. 2016) scores a predicted answer string against each gold answer after
normalising both -- lower-case; drop every ASCII punctuation character (Python's ``string.punctuation``);
drop the words ``a``, ``an``, ``the``; collapse whitespace -- and keeps the best gold answer: exact
match (the normalised strings are equal) and F1 over the bags of normalised words (0 when they share
none). A question without a prediction scores 0; both are averaged over all questions, x100.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np


def accuracy(predicted: Sequence, gold: Sequence) -> float:
    """100 * share of equal items."""
    _same_length(predicted, gold)
    return 100.0 * float(np.mean([p == g for p, g in zip(predicted, gold)])) if gold else float("nan")


def f1_positive(predicted: Sequence, gold: Sequence, positive) -> float:
    """100 * F1 of the class ``positive`` (MRPC: the paraphrase class); 0 when it is never predicted nor gold."""
    _same_length(predicted, gold)
    tp = sum(p == positive and g == positive for p, g in zip(predicted, gold))
    fp = sum(p == positive and g != positive for p, g in zip(predicted, gold))
    fn = sum(p != positive and g == positive for p, g in zip(predicted, gold))
    return 100.0 * 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews(predicted: Sequence, gold: Sequence) -> float:
    """100 * Matthews correlation of two labelings (any number of classes: Gorodkin's R_K, which for two
    classes is (TP*TN - FP*FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN))); 0 when a labeling is constant."""
    _same_length(predicted, gold)
    classes = sorted(set(predicted) | set(gold), key=str)
    index = {c: i for i, c in enumerate(classes)}
    confusion = np.zeros((len(classes), len(classes)), dtype=np.float64)
    for p, g in zip(predicted, gold):
        confusion[index[g], index[p]] += 1
    n = confusion.sum()
    correct = np.trace(confusion)
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    numerator = correct * n - true_counts @ predicted_counts
    denominator = math.sqrt((n * n - predicted_counts @ predicted_counts) * (n * n - true_counts @ true_counts))
    return 100.0 * numerator / denominator if denominator else 0.0


def pearson(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """100 * Pearson's r; nan when either side is constant."""
    _same_length(predicted, gold)
    x, y = np.asarray(predicted, dtype=np.float64), np.asarray(gold, dtype=np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float(x @ x) * float(y @ y))
    return 100.0 * float(x @ y) / denominator if denominator else float("nan")


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties given the mean of the ranks they span."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values), dtype=np.float64)
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and values[order[end + 1]] == values[order[start]]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(predicted: Sequence[float], gold: Sequence[float]) -> float:
    """100 * Spearman's rho: Pearson's r of the average ranks."""
    _same_length(predicted, gold)
    return pearson(average_ranks(predicted), average_ranks(gold))


def _same_length(predicted, gold) -> None:
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold items")


# ---------------------------------------------------------------------- SQuAD v1.1
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, punctuation removed, articles removed, whitespace collapsed (in that order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def answer_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised words as bags (multisets)."""
    predicted, reference = normalize_answer(prediction).split(), normalize_answer(gold).split()
    shared = sum((Counter(predicted) & Counter(reference)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(reference)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], gold: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """{"exact_match", "f1"} x100 over every question of ``gold`` (id -> its gold answers), each the best
    over the question's answers; a question missing from ``predictions`` scores 0."""
    if not gold:
        raise ValueError("no gold questions to score")
    exact = f1 = 0.0
    for qid, answers in gold.items():
        if qid not in predictions:
            continue
        exact += max(answer_exact_match(predictions[qid], a) for a in answers)
        f1 += max(answer_f1(predictions[qid], a) for a in answers)
    return {"exact_match": 100.0 * exact / len(gold), "f1": 100.0 * f1 / len(gold)}
