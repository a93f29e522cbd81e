"""Every example in the README and the guide pages runs as written.

A page's fenced ``python`` and ``bash`` blocks run in order in one fresh folder, so a block may use the
files an earlier block of the same page made, and nothing else: an example makes or names its data.
Python blocks run in the default suite (in this process: seconds); a whole page, shell blocks
included, runs under ``-m slow`` (every shell command starts a process that imports torch).

An HTML comment on the line before a block says how the tests treat it:
``<!-- test: ci -->``: install and test commands, run by CI in a fresh environment (each line must
be in ``.ci/run``); ``<!-- test: shared -->``: needs the shared data (``../shared`` or
``ELMOKIT_SHARED``), skipped without it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from testkit import SHARED

ROOT = Path(__file__).resolve().parents[1]
CI = ROOT / ".ci" / "run"
PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
RUNNABLE = ("python", "bash")
FENCE = re.compile(r"^```(\w*)\s*$")
MARK = re.compile(r"^<!-- test: ([\w ]+) -->$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    tags: frozenset

    def __str__(self):
        return f"{self.page.relative_to(ROOT)}:{self.line} ({self.language})"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, with the tags of a ``<!-- test: ... -->`` line right before each."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        mark = MARK.match(lines[i - 1].strip()) if i else None
        found.append(Block(page, i + 1, opening.group(1), "\n".join(lines[i + 1 : end]) + "\n",
                           frozenset(mark.group(1).split()) if mark else frozenset()))
        i = end + 1
    return found


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def run_block(block: Block, folder: Path) -> None:
    if block.language == "python":
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            exec(compile(block.code, str(block), "exec"), {"__name__": "__doc_example__"})
        finally:
            os.chdir(cwd)
        return
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
           **({"ELMOKIT_SHARED": str(SHARED)} if SHARED.exists() else {})}
    log = folder / f".block-{block.line}.log"
    # Output to a file and a session of its own: a server an example starts in the background cannot
    # hold the test's pipes open, and whatever the block leaves running is stopped below.
    with open(log, "wb") as out:
        proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", block.code], cwd=folder, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=600)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    assert rc == 0, f"{block} exited {rc}:\n{block.code}\n--- output ---\n{log.read_text(errors='replace')[-4000:]}"


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.language in RUNNABLE and "ci" not in b.tags]


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_python_examples_run(page, tmp_path, capsys):
    for block in runnable(page):
        if block.language == "python" and "shared" not in block.tags:
            run_block(block, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_example_of_the_page_runs_in_order(page, tmp_path):
    ran = 0
    for block in runnable(page):
        if "shared" in block.tags and not SHARED.exists():
            continue
        run_block(block, tmp_path)
        ran += 1
    if ran == 0:
        pytest.skip(f"{page_id(page)} has no example that runs here")


def test_ci_runs_the_install_and_test_commands():
    ci = CI.read_text(encoding="utf-8")
    marked = [b for page in PAGES for b in blocks(page) if "ci" in b.tags]
    assert marked, "the README's install and test commands are marked for CI"
    for block in marked:
        for line in block.code.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                assert line.strip() in ci, f"{block}: `{line.strip()}` is not run by .ci/run"


def test_the_parser_reads_tags_order_and_languages(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("text\n\n```bash\necho one\n```\n<!-- test: shared -->\n```python\nx = 1\n```\n```text\nno\n```\n")
    found = blocks(page)
    assert [(b.line, b.language, b.code, b.tags) for b in found] == [
        (3, "bash", "echo one\n", frozenset()),
        (7, "python", "x = 1\n", frozenset({"shared"})),
        (10, "text", "no\n", frozenset()),
    ]


def test_a_failing_shell_example_fails_with_its_output(tmp_path):
    block = Block(ROOT / "README.md", 1, "bash", "echo made-it\nfalse\necho never\n", frozenset())
    with pytest.raises(AssertionError, match=r"(?s)exited 1.*made-it") as failure:
        run_block(block, tmp_path)
    assert "never\n--- output" not in str(failure.value) and not str(failure.value).rstrip().endswith("never")


def test_every_page_is_in_the_site():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES[1:]:
        assert str(page.relative_to(ROOT / "docs")) in nav, f"{page_id(page)} is not in mkdocs.yml's nav"
