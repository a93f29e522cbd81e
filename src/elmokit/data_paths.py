"""Where the benchmark data sets live: one helper for every evaluation and the CLI.

``$ELMOKIT_SHARED`` when set, else the folder ``shared`` beside the repository checkout; the data
sets are under its ``data/`` (``data/wordsim``, ``data/ud_english_ewt``, ``data/sst/trees``, ...).
Every command that reads them also takes ``--data-dir``.
"""

from __future__ import annotations

import os
from pathlib import Path

from elmokit.errors import InputNotFound


def shared_dir() -> Path:
    """``$ELMOKIT_SHARED``, else ``../shared`` beside the repository root."""
    env = os.environ.get("ELMOKIT_SHARED")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".." / "shared"  # src/elmokit/data_paths.py -> repo/..


def shared_data(*parts: str) -> Path:
    """A path under the shared ``data/`` folder, e.g. ``shared_data("sst", "trees")``."""
    return shared_dir().joinpath("data", *parts)


def need_file(path: Path, folder: str) -> Path:
    """``path`` when it is a file, else a one-line error with the fix (``folder``: what ``--data-dir`` names)."""
    if not path.is_file():
        raise InputNotFound(f"{path}: no such file; fix: pass --data-dir ({folder}) or set ELMOKIT_SHARED")
    return path
