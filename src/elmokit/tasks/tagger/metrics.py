"""Scores of a tagger: token accuracy (POS) and strict span F1 by seqeval, IOB2 (NER)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def score(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], task: str) -> dict[str, Any]:
    """POS: token accuracy. NER: span precision/recall/F1 by seqeval in strict mode (IOB2)."""
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ValueError("gold and predicted label sequences differ in shape")
    tokens = sum(len(g) for g in gold)
    correct = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    result: dict[str, Any] = {"tokens": tokens, "accuracy": correct / max(tokens, 1)}
    if task == "ner":
        from seqeval.metrics import f1_score, precision_score, recall_score
        from seqeval.scheme import IOB2

        gold, predicted = [list(g) for g in gold], [list(p) for p in predicted]
        kwargs = {"mode": "strict", "scheme": IOB2, "zero_division": 0}
        result.update(
            precision=float(precision_score(gold, predicted, **kwargs)),
            recall=float(recall_score(gold, predicted, **kwargs)),
            f1=float(f1_score(gold, predicted, **kwargs)),
            metric="span F1, seqeval strict mode, IOB2",
        )
    else:
        result["metric"] = "token accuracy"
    return result


def main_metric(result: dict[str, Any], task: str) -> float:
    return result["f1"] if task == "ner" else result["accuracy"]
