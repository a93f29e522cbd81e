"""Every `elmokit` command the README and the guide pages show names a real subcommand, only options it
has, and every option it requires.

The walkthroughs' examples run in tests/test_docs_examples.py; the reference pages show real runs on
large data that a test cannot repeat, so their commands are checked against the command line's own
``--help`` instead (one process per subcommand: slow). The results and benchmarks pages are records of
past runs and are not checked.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.stem not in ("results", "benchmarks")),
         *sorted((ROOT / "docs" / "guide").glob("*.md"))]
BLOCK = re.compile(r"^```(?:bash|sh)\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`(elmokit [^`]+)`")


def commands(page: Path) -> list[tuple[str, list[str], bool]]:
    """(where, argv after `elmokit`, complete) for each command of a page; inline spans are not complete
    when they elide with `...` or name a placeholder option list."""
    text = page.read_text(encoding="utf-8")
    found = []
    for block in BLOCK.finditer(text):
        line_no = text[: block.start()].count("\n") + 2
        for line in block.group(1).replace("\\\n", " ").splitlines():
            argv = _argv(line)
            if argv:
                found.append((f"{page.relative_to(ROOT)}:{line_no}", argv, "..." not in argv))
    for span in INLINE.finditer(text):
        argv = _argv(span.group(1))
        if argv:
            line_no = text[: span.start()].count("\n") + 1
            found.append((f"{page.relative_to(ROOT)}:{line_no}", argv, False))  # prose names a command in part
    return found


def _argv(line: str) -> list[str] | None:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:
        return None
    for i, word in enumerate(words):
        if word == "elmokit" or (word == "elmokit.cli.main" and i and words[i - 1] == "-m"):
            rest = words[i + 1 :]
            # a subcommand name (not `elmokit serve: ...`, a line the command prints)
            return rest if rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]) else None
    return None


@functools.cache
def help_text(*path: str) -> str | None:
    """``elmokit PATH --help`` on one long line per entry; None when PATH is not a command."""
    done = subprocess.run([sys.executable, "-m", "elmokit.cli.main", *path, "--help"], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "10000",
                               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")]))},
                          timeout=120)
    return done.stdout if done.returncode == 0 else None


def required_options(help_out: str) -> set[str]:
    usage = help_out.split("\n\n", 1)[0].splitlines()[0]  # a second usage line is another form (`neighbors index`)
    for _ in range(5):  # drop optional [..] and alternative (..) groups, innermost first
        usage = re.sub(r"\[[^\[\]]*\]|\([^()]*\)", "", usage)
    return set(re.findall(r"(?<![\w-])--[\w-]+", usage))


def subcommand_of(argv: list[str]) -> bool:
    """Whether argv[1] is a subcommand of argv[0]: its parent's help lists it (``{train,predict}``, an entry)."""
    parent = help_text(argv[0])
    return (len(argv) > 1 and parent is not None and re.fullmatch(r"[a-z][a-z-]*", argv[1]) is not None
            and re.search(rf"(?m)^ +{argv[1]}(?: |$)|[{{,]{argv[1]}[,}}]|elmokit {argv[0]} {argv[1]} ", parent) is not None)


def check(where: str, argv: list[str], complete: bool) -> list[str]:
    sub = [argv[0]]
    if help_text(*sub) is None:
        return [f"{where}: `elmokit {argv[0]}` is not a command"]
    if subcommand_of(argv) and help_text(argv[0], argv[1]) is not None:
        sub.append(argv[1])
    shown = help_text(*sub)
    flags = {word.split("=", 1)[0] for word in argv[len(sub):] if word.startswith("--")}
    problems = [f"{where}: `elmokit {' '.join(sub)}` has no option {flag}" for flag in sorted(flags)
                if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown)]
    if complete and "--resume" not in flags and "--help" not in flags:
        problems += [f"{where}: `elmokit {' '.join(sub)}` needs {flag}" for flag in sorted(required_options(shown) - flags)]
    return problems


def test_commands_are_found_in_blocks_and_inline(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("run `elmokit embed ... --top` or\n\n```bash\nOMP_NUM_THREADS=1 elmokit train --out r \\\n"
                    "    --resume   # a comment\ntorchrun -m elmokit.cli.main train --corpus x\n```\n", encoding="utf-8")
    page = page.resolve()
    found = [(argv, complete) for _, argv, complete in commands_relative(page)]
    assert found == [(["train", "--out", "r", "--resume"], True), (["train", "--corpus", "x"], True),
                     (["embed", "...", "--top"], False)]


def commands_relative(page: Path):
    global ROOT
    saved, ROOT = ROOT, page.parent
    try:
        return commands(page)
    finally:
        ROOT = saved


def test_required_options_come_from_the_usage_line():
    usage = ("usage: elmokit distill [-h] --teacher TEACHER --out OUT (--a | --b) [--steps [N]]\n"
             "       elmokit distill other --form\n\nmore --not-this")
    assert required_options(usage) == {"--teacher", "--out"}


@pytest.mark.slow
def test_documented_commands_match_the_command_line():
    found = [c for page in PAGES for c in commands(page)]
    # every --help this needs, a few processes at a time (each imports the command line)
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda path: help_text(*path), sorted({(argv[0],) for _, argv, _ in found})))
        list(pool.map(lambda path: help_text(*path), sorted({tuple(argv[:2]) for _, argv, _ in found if subcommand_of(argv)})))
    problems = [problem for where, argv, complete in found for problem in check(where, argv, complete)]
    assert problems == []
