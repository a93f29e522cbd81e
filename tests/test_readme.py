"""The README's promises: its Python examples run, and CI runs its test command."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
CI = Path(__file__).resolve().parents[1] / ".ci" / "run"


def code_blocks(language):
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.parametrize("index", range(len(code_blocks("python"))))
def test_python_examples_run(index, capsys):
    exec(compile(code_blocks("python")[index], f"README.md python block {index}", "exec"), {})


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
