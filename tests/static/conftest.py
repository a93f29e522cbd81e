"""Fixtures for the static-vector tests; helpers live in static_testkit.py."""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import pytest
from static_testkit import tiny_lines


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
