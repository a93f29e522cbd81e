"""Readers of the sentence and sentence-pair task files: GLUE (CoLA, MRPC, STS-B, RTE, WNLI) and SICK.

Each reader gives a ``PairData``: the tokenised first sentences, the second ones (``None`` for a
single-sentence task) and the targets (label names, or float scores for similarity). Errors name
``file:line`` (``DataFileError``). The files are read as they are distributed:

* CoLA (``train.tsv``, ``dev.tsv``): no header; source, label 0/1, the author's mark, sentence.
* RTE, WNLI (``train.tsv``, ``dev.tsv``): header ``index sentence1 sentence2 label``.
* STS-B (``train.tsv``, ``dev.tsv``): header; 10 columns, sentence1 and sentence2 the 8th and 9th,
  the 0-5 score the 10th.
* MRPC (``msr_paraphrase_train.txt``, ``dev.tsv``, ``dev_ids.tsv``): header ``Quality #1 ID #2 ID
  #1 String #2 String``, UTF-8 with a byte-order mark. GLUE's train set is the rows of the MSR train
  file whose id pair is not in ``dev_ids.tsv`` (``read_mrpc(..., exclude=read_id_pairs(...))``).
* SICK, SemEval-2014 files (``SICK_train.txt``, ``SICK_trial.txt``, ``SICK_test_annotated.txt``):
  header ``pair_ID sentence_A sentence_B relatedness_score entailment_judgment``; the relatedness task
  takes the score, the entailment task the judgment.

The text is untokenised (MRPC's is tokenised already); ``tokenize`` cuts it into words the way the
Penn Treebank does for the cases that matter to a word-level model: punctuation split off, clitics
``n't 's 're 've 'll 'd 'm`` their own tokens, decimal numbers kept whole.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from elmokit.tasks.data import DataFileError, read_lines

_TOKEN = re.compile(r"\d+(?:[.,]\d+)+|\w+(?=n't\b)|n't\b|'(?:s|re|ve|ll|d|m)\b|\w+|[^\w\s]", re.IGNORECASE)


def tokenize(text: str) -> list[str]:
    """``"It won't cost $2.50."`` -> ``["It", "wo", "n't", "cost", "$", "2.50", "."]``."""
    return _TOKEN.findall(text)


@dataclass
class PairData:
    """Sentences (and their partners, for a pair task) with a target each."""

    first: list[list[str]]
    second: list[list[str]] | None
    targets: list  # label names (str) or scores (float)
    path: str = ""

    def __len__(self) -> int:
        return len(self.first)

    def select(self, indices: Sequence[int]) -> PairData:
        indices = list(indices)
        return PairData([self.first[i] for i in indices],
                        None if self.second is None else [self.second[i] for i in indices],
                        [self.targets[i] for i in indices], self.path)


def _rows(path, columns: int, *, header: str | None, at_least: bool = False):
    """(line number, fields) of a tab-separated file; the header (its first field) checked and skipped."""
    for number, line in read_lines(path):
        line = line.lstrip("\ufeff") if number == 1 else line
        if number == 1 and header is not None:
            if line.split("\t")[0] != header:
                raise DataFileError(f"{path}:1: expected a header starting with {header!r}, got {line[:60]!r}; "
                                    "is this the right file?")
            continue
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < columns or (len(fields) > columns and not at_least):
            raise DataFileError(f"{path}:{number}: expected {columns} tab-separated columns, got {len(fields)}: "
                                f"{line[:80]!r}")
        yield number, fields


def _label(value: str, allowed: Sequence[str], where: str) -> str:
    if value not in allowed:
        raise DataFileError(f"{where}: label {value!r} is not one of {', '.join(allowed)}")
    return value


def _score(value: str, low: float, high: float, where: str) -> float:
    try:
        score = float(value)
    except ValueError:
        raise DataFileError(f"{where}: score {value!r} is not a number") from None
    if not math.isfinite(score) or not low <= score <= high:
        raise DataFileError(f"{where}: score {value!r} is outside [{low:g}, {high:g}]")
    return score


def _text(value: str, where: str, cut: Callable[[str], list[str]]) -> list[str]:
    tokens = cut(value)
    if not tokens:
        raise DataFileError(f"{where}: empty sentence")
    return tokens


def _finish(data: PairData, path) -> PairData:
    if not len(data):
        raise DataFileError(f"{path}: no examples found")
    return data


def read_cola(path: str | os.PathLike, tokenizer: Callable[[str], list[str]] = tokenize) -> PairData:
    """CoLA: labels "0" (unacceptable) / "1" (acceptable)."""
    data = PairData([], None, [], str(path))
    for number, (_, label, _, sentence) in _rows(path, 4, header=None):
        where = f"{path}:{number}"
        data.targets.append(_label(label, ("0", "1"), where))
        data.first.append(_text(sentence, where, tokenizer))
    return _finish(data, path)


def read_nli_tsv(path: str | os.PathLike, labels: Sequence[str],
                 tokenizer: Callable[[str], list[str]] = tokenize) -> PairData:
    """RTE (labels entailment / not_entailment) and WNLI (1 / 0): ``index sentence1 sentence2 label``."""
    data = PairData([], [], [], str(path))
    for number, (_, first, second, label) in _rows(path, 4, header="index"):
        where = f"{path}:{number}"
        data.targets.append(_label(label, labels, where))
        data.first.append(_text(first, where, tokenizer))
        data.second.append(_text(second, where, tokenizer))
    return _finish(data, path)


def read_stsb(path: str | os.PathLike, tokenizer: Callable[[str], list[str]] = tokenize) -> PairData:
    """STS-B (GLUE's train.tsv / dev.tsv): scores in [0, 5]."""
    data = PairData([], [], [], str(path))
    for number, fields in _rows(path, 10, header="index"):
        where = f"{path}:{number}"
        data.targets.append(_score(fields[9], 0.0, 5.0, where))
        data.first.append(_text(fields[7], where, tokenizer))
        data.second.append(_text(fields[8], where, tokenizer))
    return _finish(data, path)


def read_id_pairs(path: str | os.PathLike) -> set[tuple[str, str]]:
    """MRPC's ``dev_ids.tsv``: one ``#1 ID <TAB> #2 ID`` pair per line."""
    pairs = set()
    for number, line in read_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 2:
            raise DataFileError(f"{path}:{number}: expected two ids, got {line[:60]!r}")
        pairs.add((fields[0], fields[1]))
    if not pairs:
        raise DataFileError(f"{path}: no id pairs found")
    return pairs


def read_mrpc(path: str | os.PathLike, *, exclude: set[tuple[str, str]] = frozenset(),
              tokenizer: Callable[[str], list[str]] = str.split) -> PairData:
    """MRPC (MSR's files and GLUE's dev.tsv): labels "0" / "1"; rows whose id pair is in ``exclude`` left out.
    The text is tokenised already, so whitespace splits it."""
    data = PairData([], [], [], str(path))
    for number, (label, id1, id2, first, second) in _rows(path, 5, header="Quality"):
        if (id1, id2) in exclude:
            continue
        where = f"{path}:{number}"
        data.targets.append(_label(label, ("0", "1"), where))
        data.first.append(_text(first, where, tokenizer))
        data.second.append(_text(second, where, tokenizer))
    return _finish(data, path)


SICK_LABELS = ("CONTRADICTION", "ENTAILMENT", "NEUTRAL")


def read_sick(path: str | os.PathLike, task: str, tokenizer: Callable[[str], list[str]] = tokenize) -> PairData:
    """SICK's SemEval-2014 files: ``task`` "entailment" (the judgment) or "relatedness" (the score, 1-5)."""
    if task not in ("entailment", "relatedness"):
        raise ValueError(f"SICK task is entailment or relatedness, not {task!r}")
    data = PairData([], [], [], str(path))
    for number, (_, first, second, score, label) in _rows(path, 5, header="pair_ID"):
        where = f"{path}:{number}"
        data.targets.append(_label(label, SICK_LABELS, where) if task == "entailment" else _score(score, 1.0, 5.0, where))
        data.first.append(_text(first, where, tokenizer))
        data.second.append(_text(second, where, tokenizer))
    return _finish(data, path)
