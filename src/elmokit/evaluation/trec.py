"""TREC question classification (Li & Roth 2002): TREC-6 (coarse labels) and TREC-50 (fine).

The shared copy is nltk_data's ``qc.zip`` (``qc/train.txt``: 5,452 questions, ``qc/test.txt``: 500),
one question per line as ``COARSE:fine token token ...`` (whitespace-tokenised, Latin-1).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from elmokit.data_paths import shared_data
from elmokit.errors import InputNotFound, UserError

SPLITS = {"train": "qc/train.txt", "test": "qc/test.txt"}


class TrecDataError(UserError):
    """A malformed TREC file; the message names the file and line."""


def default_trec_zip() -> Path:
    return shared_data("trec_qc", "qc.zip")


def read_trec(path: str | os.PathLike | None = None, split: str = "train", *,
              fine: bool = False) -> tuple[list[list[str]], list[str]]:
    """(questions as token lists, labels) of ``split`` ("train" or "test") from ``qc.zip`` (or an
    extracted ``.txt`` file); labels are the coarse class (TREC-6) unless ``fine`` (TREC-50)."""
    path = Path(path) if path is not None else default_trec_zip()
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    if not path.is_file():
        raise InputNotFound(f"{path}: no such file (TREC qc.zip, see data/trec_qc/SOURCE.txt)")
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            raw = archive.read(SPLITS[split])
        where = f"{path}!{SPLITS[split]}"
    else:
        raw, where = path.read_bytes(), str(path)
    questions, labels = [], []
    for number, line in enumerate(raw.decode("latin-1").splitlines(), 1):
        if not line.strip():
            continue
        label, *tokens = line.split()
        coarse, colon, fine_label = label.partition(":")
        if not colon or not coarse or not fine_label or not tokens:
            raise TrecDataError(f"{where}:{number}: expected 'COARSE:fine question tokens', got {line[:60]!r}")
        questions.append(tokens)
        labels.append(label if fine else coarse)
    if not questions:
        raise TrecDataError(f"{where}: no questions")
    return questions, labels


def validation_split(count: int, fraction: float = 0.1, seed: int = 0) -> tuple[list[int], list[int]]:
    """(train indices, validation indices): a fixed random ``fraction`` held out (ULMFiT's ablations
    report the error on 10% of the training set)."""
    order = np.random.default_rng(seed).permutation(count)
    held = int(round(count * fraction))
    return sorted(order[held:].tolist()), sorted(order[:held].tolist())
