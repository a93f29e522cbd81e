"""Helpers for the static-vector tests: where ../shared is, a tiny synthetic corpus."""

from __future__ import annotations

import gzip
import lzma
import os
import random
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO / ".." / "shared"))


def need_shared(*parts: str) -> Path:
    """The path under ../shared, or skip the test saying what is missing."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs {path} (the shared data folder beside the checkout, or set ELMOKIT_SHARED)")
    return path


ANIMALS = ["cat", "dog", "horse", "cow", "sheep", "goat", "mouse"]
VERBS = ["runs", "eats", "sleeps", "jumps", "walks"]
PLACES = ["field", "barn", "house", "garden", "river"]


def tiny_lines(n_lines: int = 211, seed: int = 3) -> list[str]:
    """Oddly sized, deterministic, a little structured: 'the <animal> <verb> in the <place> .'"""
    rng = random.Random(seed)
    lines = []
    for i in range(n_lines):
        words = ["The", rng.choice(ANIMALS), rng.choice(VERBS), "in", "the", rng.choice(PLACES) + "."]
        if i % 7 == 0:
            words += ["And", "the", rng.choice(ANIMALS), rng.choice(VERBS), "!"]
        lines.append(" ".join(words))
        if i % 13 == 0:
            lines.append("")  # blank lines are skipped
    return lines


@pytest.fixture
def tiny_corpus(tmp_path: Path) -> str:
    """The tiny corpus split over an .xz and a .gz file; returns a glob matching both."""
    lines = tiny_lines()
    half = len(lines) // 2
    folder = tmp_path / "corpus"
    folder.mkdir()
    with lzma.open(folder / "part.00.txt.xz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines[:half]) + "\n")
    with gzip.open(folder / "part.01.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines[half:]) + "\n")
    return str(folder / "part.*")
