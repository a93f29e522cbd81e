"""docs/reliability.md is kept true: every row of its table names the tests that check it, and they exist."""

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "reliability.md"
TEST_REF = re.compile(r"`?(tests/[\w/]+\.py)::(\w+)`?")


def table_rows():
    rows = []
    for number, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 4 and not set(cells[0]) <= set("-: ") and cells[0] != "input or fault":
            rows.append((number, cells))
    return rows


@functools.cache  # a file is named by many rows: parse it once
def defined_tests(path: Path) -> frozenset[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))


def test_the_table_has_rows_and_every_row_names_an_outcome_and_a_test():
    rows = table_rows()
    assert len(rows) >= 30, f"docs/reliability.md lists {len(rows)} cases"
    for number, cells in rows:
        outcome, tests = cells[-2], cells[-1]
        assert re.search(r"clear error|handled|data kept", outcome), f"docs/reliability.md:{number}: outcome {outcome!r}"
        assert TEST_REF.search(tests), f"docs/reliability.md:{number}: no test named in {tests!r}"


def test_every_named_test_exists():
    missing = []
    for number, cells in table_rows():
        for file, name in TEST_REF.findall(cells[-1]):
            path = ROOT / file
            if not path.is_file() or name not in defined_tests(path):
                missing.append(f"docs/reliability.md:{number}: {file}::{name}")
    assert not missing, "\n".join(missing)
