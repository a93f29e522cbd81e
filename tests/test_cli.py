"""The command line as a person meets it: help, the demo, every flag documented."""

import subprocess
import sys

import pytest

from elmokit.cli.main import build_parser, main


def test_demo_shows_context_independent_layer_zero(capsys):
    from elmokit import load_bilm

    shipped = load_bilm("default")
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert f"model: elmo:default   layers: {shipped.num_layers}   dim: {shipped.output_dim}" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("play ", "bank "))]
    assert len(rows) == 2
    for row in rows:
        layer0, layer1, layer2 = map(float, row[-3:])
        assert layer0 == 1.0, "the same word has the same context-independent vector"
        assert layer1 < 1.0 and layer2 < 1.0, "contextual layers depend on the sentence"


def test_every_option_has_help():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"elmokit {name} {action.option_strings[0]} has no help"


@pytest.mark.slow  # a fresh interpreter importing torch (~5 s): the default suite stays under a minute; CI runs -m slow
def test_console_entry_point_runs():
    result = subprocess.run([sys.executable, "-m", "elmokit.cli.main", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "embed" in result.stdout and "convert" in result.stdout
