"""The repository's size rule: no tracked file of 5 MB or more except the English default's weights
(the shipped ``zh`` model was made compact to fit it). Read from git's index, so it sees what a commit holds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LIMIT = 5_000_000
EXEMPT = {"src/elmokit/models/default/model.safetensors", "src/elmokit/models/default/lm.safetensors"}


def tracked_files() -> list[str]:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the rule is about what the repository tracks")
    listing = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    return [name for name in listing.decode("utf-8").split("\0") if name]


def test_no_tracked_file_reaches_5_mb_but_the_english_defaults_weights():
    files = tracked_files()
    assert "src/elmokit/models/default/model.safetensors" in files  # the listing is real, not empty
    too_large = {name: size for name in files if (REPO / name).is_file()
                 and (size := (REPO / name).stat().st_size) >= LIMIT and name not in EXEMPT}
    assert not too_large, f"files of 5 MB or more (only the English default's weights may be): {too_large}"
