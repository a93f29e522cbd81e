"""The code and the user guide speak to users: no issue numbers, no dates, no files that are not there.

Scanned: the sources (``src/**/*.py`` and the model cards), the README and the guide pages. Not
scanned: the results and benchmarks pages and their JSON records, where each measurement keeps its
machine and date.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "elmokit"
RECORD_PAGES = {ROOT / "docs" / "results.md", ROOT / "docs" / "benchmarks.md"}
SCANNED = sorted(
    {*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.md"), ROOT / "README.md", ROOT / "mkdocs.yml",
     *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "guide").glob("*.md")} - RECORD_PAGES
)

ISSUE = re.compile(r"\bissues? ?#?\d+", re.I)
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
# Notes of the development tree that are not in the repository.
ABSENT = re.compile(r"DESIGN(\.md| convention| rule)|performance_notes|spec §|\bspec/")
# A path with a folder and a file name: checked when its first folder is one of the repository's.
PATH = re.compile(r"(?<![\w./~-])((?:[\w.-]+/)+[\w.{},*-]+\.(?:md|py|json|txt|toml|ya?ml|png|svg|safetensors|hdf5|sh))\b")
BASES = (ROOT, ROOT / "src", PACKAGE, ROOT / "docs")
# Folders a user's own runs create in a checkout (ignored by git): a docs path into them names the user's files
USER_FOLDERS = {"runs", "site", "build", "dist", ".venv"}

# Lines another room of the project still has to reword (the file's owner edits it); remove once gone.
PENDING: dict[str, list[str]] = {}


def pending(path: Path, line: str) -> bool:
    return any(text in line for text in PENDING.get(str(path.relative_to(ROOT)), []))


def exists(reference: str) -> bool | None:
    """True/False for a reference into the repository's own folders; None for anything else."""
    first = reference.split("/", 1)[0]
    for base in BASES:
        if first in USER_FOLDERS and base == ROOT:
            return None
        if first not in ("..", ".") and (base / first).is_dir():
            pattern = str(base / reference)
            for part in re.findall(r"\{([^}]*)\}", reference):  # tests/x_{a,b}.py: each must exist
                return all(exists(reference.replace("{" + part + "}", alt, 1)) for alt in part.split(","))
            return bool(glob.glob(pattern))
    return None


def findings(path: Path) -> list[str]:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if pending(path, line):
            continue
        where = f"{path.relative_to(ROOT)}:{number}"
        found += [f"{where}: issue number {m.group(0)!r}" for m in ISSUE.finditer(line)]
        found += [f"{where}: date {m.group(0)!r}" for m in DATE.finditer(line)]
        found += [f"{where}: {m.group(0)!r} is not in the repository" for m in ABSENT.finditer(line)]
        found += [f"{where}: {m.group(1)!r} does not exist" for m in PATH.finditer(line) if exists(m.group(1)) is False]
    return found


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_issue_numbers_dates_or_missing_files(path):
    assert findings(path) == []


def test_the_scan_covers_sources_cards_readme_and_guides():
    names = {str(p.relative_to(ROOT)) for p in SCANNED}
    assert {"README.md", "src/elmokit/elmo.py", "src/elmokit/models/default/README.md", "docs/training.md",
            "docs/guide/embed.md"} <= names
    assert not names & {"docs/results.md", "docs/benchmarks.md"}


def test_the_patterns_catch_what_they_are_for(tmp_path):
    page = ROOT / "docs" / "guide" / "_hygiene_probe.md"  # inside the repository, for relative paths
    issue, day = "issue" + " 12", "-".join(["2026", "11", "27"])  # built here, so this file passes its own scan
    page.write_text(f"fixed in {issue}\nmeasured {day}\nsee DESIGN.md\nspec §3.8\n"
                    "`src/elmokit/nope.py` and `docs/training.md` and `tests/test_{readme,nope}.py`\n"
                    "`runs/my_bilm/model/config.json` is the user's\n", encoding="utf-8")
    try:
        found = findings(page)
    finally:
        page.unlink()
    assert [f.split(": ", 1)[1] for f in found] == [
        f"issue number {issue!r}", f"date {day!r}", "'DESIGN.md' is not in the repository",
        "'spec §' is not in the repository", "'src/elmokit/nope.py' does not exist",
        "'tests/test_{readme,nope}.py' does not exist"]
    # a path into the user's own runs is never checked, whether or not this checkout has a runs/ folder
    assert exists("runs/my_bilm/model/config.json") is None
