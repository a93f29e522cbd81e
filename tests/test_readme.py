"""The README's promises: the first example prints what it says, and CI runs the test command.

Every example of the README runs in tests/test_docs_examples.py."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
CI = Path(__file__).resolve().parents[1] / ".ci" / "run"


def code_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_first_python_example_prints_the_shapes(capsys):
    from elmokit import load_bilm

    exec(code_blocks("python")[0], {})
    shipped = load_bilm("default")  # the shipped default model decides layers and dim
    layers, dim = shipped.num_layers, shipped.output_dim
    assert capsys.readouterr().out.strip() == f"[({layers}, 4, {dim}), ({layers}, 2, {dim})]"


def test_ci_runs_the_readme_test_command():
    commands = [line for block in code_blocks("bash") for line in block.splitlines() if "pytest" in line]
    assert commands, "the README names a test command"
    assert commands[0].strip() in CI.read_text()
