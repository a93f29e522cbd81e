"""The command line's front door: --version and --help import no subcommand and no torch, one user-error
wrapper, every option's default in its help, and the thread policy."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import elmokit
from elmokit.cli import common
from elmokit.cli.main import COMMANDS, DefaultsHelpFormatter, build_parser, main
from elmokit.pretraining.names import OBJECTIVE_NAMES

HEAVY = ("torch", "transformers", "h5py", "gensim", "fastapi", "ray")


def modules_after(*argv: str) -> dict:
    """Run ``elmokit ARGV`` in a fresh interpreter; its exit status, stdout and which heavy modules it imported."""
    code = textwrap.dedent(f"""
        import contextlib, io, json, sys
        from elmokit.cli.main import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            try:
                status = main({list(argv)!r})
            except SystemExit as stop:
                status = stop.code
        print(json.dumps({{"status": status, "out": out.getvalue(),
                           "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def test_version_is_printed_by_the_installed_command_without_torch():
    result = subprocess.run([sys.executable, "-m", "elmokit.cli.main", "--version"], capture_output=True, text=True)
    assert (result.returncode, result.stdout.strip()) == (0, f"elmokit {elmokit.__version__}")
    assert modules_after("--version")["heavy"] == []


def test_top_level_help_lists_every_command_and_every_objective_without_importing_them():
    found = modules_after("--help")
    assert found["status"] == 0 and found["heavy"] == []
    for name in COMMANDS:
        assert f"\n    {name}" in found["out"]
    assert all(objective in found["out"] for objective in OBJECTIVE_NAMES)


@pytest.mark.parametrize("argv", [*((name, "--help") for name in COMMANDS), ("tag", "train", "--help"),
                                  ("eval", "probe", "--help"), ("static", "train", "--help"), ("cove", "train", "--help"),
                                  ("neighbors", "index", "--help"), ("classify", "train", "--help")])
def test_a_command_s_help_imports_neither_torch_nor_the_libraries(argv):
    found = modules_after(*argv)
    assert found["status"] == 0 and f"elmokit {' '.join(argv[:-1])}" in found["out"]
    assert found["heavy"] == []


def test_the_objectives_named_in_the_help_are_the_registry_s():
    from elmokit.pretraining.registry import OBJECTIVES

    assert sorted(OBJECTIVE_NAMES) == sorted(OBJECTIVES)


def test_pretrain_help_shows_pretrain_config_s_own_defaults():
    """The defaults are read from PretrainConfig's source (no torch); compared here with the dataclass itself."""
    import dataclasses

    from elmokit.cli.pretrain import PRETRAIN_FLAGS
    from elmokit.pretraining.run import PretrainConfig

    read = common.dataclass_defaults("elmokit.pretraining.run", "PretrainConfig")
    real = {f.name: f.default for f in dataclasses.fields(PretrainConfig) if f.default is not dataclasses.MISSING}
    assert read == real and set(PRETRAIN_FLAGS) <= set(read)
    sub = next(sub for path, sub in leaf_parsers(build_parser(["pretrain"])) if path == ("pretrain",))
    assert sub._option_string_actions["--lr"].help.endswith(f"(default: {real['lr']})")


def test_importing_elmokit_imports_no_torch_until_a_name_is_used():
    code = ("import sys, elmokit; print('torch' in sys.modules); from elmokit import Embedder; "
            "print('torch' in sys.modules, Embedder.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "elmokit.elmo"]
    with pytest.raises(AttributeError):
        elmokit.NoSuchName  # noqa: B018


# ---- the one user-error wrapper ---------------------------------------------------------------------------------


@pytest.fixture
def fake_command(tmp_path, monkeypatch):
    (tmp_path / "fake_elmokit_command.py").write_text(textwrap.dedent("""
        from elmokit.errors import UserError

        def register(subparsers):
            p = subparsers.add_parser("fake")
            p.add_argument("what")
            p.set_defaults(func=run)

        def run(args):
            if args.what == "user":
                raise UserError("corpus.txt:3 is empty\\nadd a sentence")
            raise RuntimeError("a bug")
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(COMMANDS, "fake", ("fake_elmokit_command", "a command of this test"))


def test_a_user_error_is_one_line_on_stderr_and_exit_2(fake_command, capsys):
    assert main(["fake", "user"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "elmokit fake: error: corpus.txt:3 is empty add a sentence\n" and captured.out == ""


def test_anything_else_keeps_its_traceback(fake_command):
    with pytest.raises(RuntimeError, match="a bug"):
        main(["fake", "bug"])


# ---- every option's default in its help -------------------------------------------------------------------------


def leaf_parsers(parser: argparse.ArgumentParser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from leaf_parsers(sub, path + (name,))


def test_every_option_shows_its_default_or_is_a_flag_or_required():
    missing = []
    parsers = list(leaf_parsers(build_parser()))
    assert len(parsers) > 30
    for path, sub in parsers:
        formatter = sub._get_formatter()
        for action in sub._actions:
            if not action.option_strings or action.required or action.nargs == 0:
                continue  # positionals, required options and flags (store_true, --help, --version)
            shown = formatter._expand_help(action) if action.help else ""
            if "default" not in shown:
                missing.append(f"elmokit {' '.join(path)} {action.option_strings[0]}")
    assert missing == []


def test_the_formatter_shows_the_value_argparse_would_use():
    parser = argparse.ArgumentParser(formatter_class=DefaultsHelpFormatter)
    parser.add_argument("--n", type=int, default=7, help="how many")
    parser.add_argument("--prefix", default="", help="strip this")
    parser.add_argument("--out", default=None, help="where")
    parser.add_argument("--k", default=3, help="k (default: three)")
    text = " ".join(parser.format_help().split())
    assert "how many (default: 7)" in text and "strip this (default: '')" in text and "where (default: none)" in text
    assert "k (default: three)" in text and "three) (default" not in text


# ---- the thread policy ------------------------------------------------------------------------------------------


def test_default_threads_are_the_cores_this_process_may_run_on():
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from elmokit.cli.common import default_threads; print(default_threads(), default_threads(10**9))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "1"]
    assert common.available_cores() == len(os.sched_getaffinity(0))


def test_a_small_model_gets_one_thread_and_threads_given_win(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3, 5})
    assert common.default_threads() == 3 and common.default_threads(common.SMALL_MODEL_PARAMETERS) == 3
    assert common.default_threads(common.SMALL_MODEL_PARAMETERS - 1) == 1
    before = torch.get_num_threads()
    try:
        small = torch.nn.Linear(5, 3)  # 18 parameters
        assert common.apply_model_threads(argparse.Namespace(threads=None), small) == 1 and torch.get_num_threads() == 1
        assert common.apply_model_threads(argparse.Namespace(threads=2), small) is None and torch.get_num_threads() == 1
        assert common.apply_threads(argparse.Namespace(threads=2)) == 2 and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_biLM_parameter_count_matches_a_real_model():
    from elmokit.bilm import PRESETS, BiLM

    config = PRESETS["tiny"]
    assert common.bilm_parameters(config) == sum(p.numel() for p in BiLM(config).parameters())


def test_every_threads_option_states_the_policy():
    helps = {" ".join(path): sub._option_string_actions["--threads"].help for path, sub in leaf_parsers(build_parser())
             if "--threads" in sub._option_string_actions}
    assert len(helps) >= 10
    assert {path for path, text in helps.items() if "CPU affinity" not in text} == set()


def test_neighbors_index_help_is_its_own(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["neighbors", "index", "--help"])
    text = capsys.readouterr().out
    assert stop.value.code == 0 and text.startswith("usage: elmokit neighbors index --corpus FILE --out DIR")
    assert "--corpus" in text and "--batch-size" in text and "--same-form" not in text and "  --index DIR" not in text
    with pytest.raises(SystemExit):
        main(["neighbors", "--help"])
    assert "--same-form" in capsys.readouterr().out


def test_embed_help_defines_its_shapes(capsys):
    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(L+1, n, 2P)" in text and "L+1 layers (the token layer and the L biLSTM layers), n tokens" in text


def test_a_complete_saved_config_loads_without_a_missing_field_note(caplog):
    from elmokit.tasks.tagger.model import TaggerConfig

    config = TaggerConfig(task="pos", elmo="none")
    with caplog.at_level("INFO", logger="elmokit.configs"):
        assert TaggerConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
        assert caplog.records == []
        data = config.to_dict()
        del data["word_dim"]
        TaggerConfig.from_dict(data)
    assert [r.getMessage() for r in caplog.records] == [
        "tagger config field 'word_dim' missing (format_version 1); using the default 100"]


@pytest.mark.parametrize("verbose", [False, True])
def test_third_party_warnings_are_silenced_unless_verbose(verbose):
    """transformers' load report is a WARNING of its logger: at ERROR it is dropped (set before the import,
    where transformers reads its verbosity); Ray Data reads its level from the environment."""
    code = textwrap.dedent(f"""
        import logging, os
        from elmokit.cli.main import quiet_third_party
        os.environ.pop("TRANSFORMERS_VERBOSITY", None)
        os.environ.pop("RAY_DATA_LOG_LEVEL", None)
        quiet_third_party({verbose})
        import transformers
        report = logging.getLogger("transformers.utils.loading_report")
        print(transformers.logging.get_verbosity(), report.isEnabledFor(logging.WARNING),
              os.environ.get("RAY_DATA_LOG_LEVEL"))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == (["30", "True", "None"] if verbose else ["40", "False", "WARNING"])


@pytest.mark.parametrize("verbose", [False, True])
def test_the_resolved_configuration_is_printed_only_with_verbose(tmp_path, capsys, verbose):
    pytest.importorskip("sklearn")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"the cat {w} sat on a mat {w}\n" for w in ("red", "big", "old", "new", "odd") * 4))
    argv = ["static", "train", "--algo", "lsa", "--corpus", str(corpus), "--out", str(tmp_path / "run"), "--min-count", "1",
            "--dim", "2", "--quiet", *(["--verbose"] if verbose else [])]
    assert main(argv) == 0
    printed = capsys.readouterr().err
    assert ('elmokit static train: {"config"' in printed) == verbose
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["dim"] == 2  # recorded either way
