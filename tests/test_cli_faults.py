"""Faults a user meets on the command line: bad numbers, bad paths, signals, stdin, messages.

Each error is one line naming the option or the file (exit 2), checked before anything is loaded
or embedded, and an existing output is left byte-identical.
"""

import argparse
import io
import logging
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
from testkit import write_lines

from elmokit import __version__
from elmokit.cli.main import build_parser, main
from elmokit.io import temporary_path

OLD = b"previous results, not HDF5"


def run_cli(capsys, *args):
    """(exit status, stderr) of `elmokit ARGS`, whether it returns or argparse exits."""
    try:
        status = main([str(a) for a in args])
    except SystemExit as stop:
        status = stop.code
    return status, capsys.readouterr().err


def error_lines(err):
    return [line for line in err.splitlines() if "error:" in line]


# ---- 1. every numeric option is checked at parse time ---------------------------------------

EMBED = ["embed", "in.txt", "out.h5", "--top"]
STATIC = ["static", "train", "--algo", "skipgram", "--corpus", "c.txt", "--out", "run"]
TAG = ["tag", "train", "--train", "a", "--dev", "b", "--out", "c", "--format", "conll"]
SST = ["eval", "sst"]
BAD_NUMBERS = [
    (EMBED, "--batch-size", "-5"), (EMBED, "--batch-size", "0"), (EMBED, "--threads", "-1"), (EMBED, "--threads", "0"),
    (EMBED, "--token-cache", "-1"), (EMBED, "--batch-size", "2.5"),
    (["demo"], "--threads", "0"),
    (STATIC, "--limit-lines", "0"), (STATIC, "--dim", "0"), (STATIC, "--window", "0"), (STATIC, "--min-count", "-1"),
    (STATIC, "--max-vocab", "0"), (STATIC, "--epochs", "0"), (STATIC, "--alpha", "0"), (STATIC, "--seed", "-1"),
    (STATIC, "--workers", "0"), (STATIC, "--negative", "-1"), (STATIC, "--sample", "-0.1"), (STATIC, "--min-n", "0"),
    (STATIC, "--max-n", "-1"), (STATIC, "--bucket", "0"), (STATIC, "--x-max", "0"), (STATIC, "--weight-alpha", "-1"),
    (STATIC, "--batch-size", "0"), (STATIC, "--cds", "0"), (STATIC, "--eig-power", "nan"),
    (STATIC, "--max-pairs-in-memory", "0"), (STATIC, "--chunk-tokens", "0"),
    (["static", "neighbors", "--vectors", "v", "w"], "--topn", "0"),
    (TAG, "--mix-l2", "-1"), (TAG, "--word-dim", "0"), (TAG, "--hidden-dim", "0"), (TAG, "--dropout", "1.5"),
    (TAG, "--elmo-dropout", "-0.1"), (TAG, "--min-word-count", "-1"), (TAG, "--epochs", "0"), (TAG, "--patience", "0"),
    (TAG, "--batch-size", "0"), (TAG, "--lr", "0"), (TAG, "--fine-tune-lr", "-1"), (TAG, "--seed", "-1"),
    (TAG, "--max-train-sentences", "0"), (TAG, "--threads", "0"), (TAG, "--lr", "inf"),
    (["tag", "predict", "--tagger", "t", "--input", "i", "--out", "o"], "--batch-size", "0"),
    (["tag", "predict", "--tagger", "t", "--input", "i", "--out", "o"], "--threads", "-1"),
    (["eval", "similarity"], "--layer", "-1"), (["eval", "similarity"], "--top-n", "0"),
    (["eval", "pos"], "--max-eval-sentences", "0"), (["eval", "ner"], "--dropout", "2"),
    (["eval", "probe"], "--batch-size", "0"), (["eval", "probe"], "--threads", "0"),
    (["eval", "probe"], "--max-sentences", "0"), (["eval", "probe"], "--weight-decays", "0,-1e-3"),
    (["eval", "probe"], "--layers", "0,x"), (["eval", "probe"], "--max-iter", "0"),
    (["eval", "wsd"], "--max-semcor-sentences", "0"),
    (SST, "--max-train", "0"), (SST, "--epochs", "0"), (SST, "--train-batch-size", "0"), (SST, "--lr", "-1"),
    (SST, "--word-dim", "0"), (SST, "--hidden-dim", "0"), (SST, "--dropout", "-0.5"), (SST, "--mix-l2", "-1"),
    (SST, "--seed", "-1"),
    (["classify", "train", "--train", "a", "--dev", "b", "--out", "c"], "--batch-size", "0"),
    (["classify", "train", "--train", "a", "--dev", "b", "--out", "c"], "--threads", "0"),
    (["classify", "predict"], "--batch-size", "0"), (["classify", "predict"], "--threads", "0"),
    (["neighbors"], "--max-sentences", "0"), (["neighbors"], "--max-tokens", "0"), (["neighbors"], "--batch-size", "0"),
    (["neighbors"], "--top", "0"), (["neighbors"], "--context", "-1"), (["neighbors"], "--layers", "1,-2"),
    (["neighbors"], "--token-cache", "-1"),
]


@pytest.mark.parametrize(("command", "flag", "value"), BAD_NUMBERS, ids=lambda x: x if isinstance(x, str) else x[0])
def test_bad_numbers_are_one_line_errors_at_parse_time(capsys, command, flag, value):
    status, err = run_cli(capsys, *command, f"{flag}={value}")
    assert status == 2
    assert "Traceback" not in err
    [line] = error_lines(err)
    assert f"argument {flag}" in line and value in line


def _subparsers(parser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from _subparsers(sub, path + (name,))


MINE = {"embed", "convert", "demo", "static", "tag", "eval", "classify", "neighbors"}


def test_no_numeric_option_of_these_commands_takes_an_unchecked_int_or_float():
    unchecked = [f"elmokit {' '.join(path)} {action.option_strings[0]}"
                 for path, sub in _subparsers(build_parser()) if path[0] in MINE
                 for action in sub._actions if action.option_strings and action.type in (int, float)]
    assert unchecked == []


def test_boundary_values_are_accepted():
    parser = build_parser()
    args = parser.parse_args([*EMBED, "--token-cache", "0", "--batch-size", "1", "--threads", "1"])
    assert (args.token_cache, args.batch_size, args.threads) == (0, 1, 1)
    args = parser.parse_args([*TAG, "--dropout", "0", "--elmo-dropout", "1", "--mix-l2", "0", "--seed", "0"])
    assert (args.dropout, args.elmo_dropout, args.mix_l2, args.seed) == (0.0, 1.0, 0.0, 0)
    args = parser.parse_args(["eval", "probe", "--weight-decays", "0, 1e-4", "--layers", "0,2"])
    assert (args.weight_decays, args.layers) == ([0.0, 1e-4], [0, 2])
    assert parser.parse_args(["eval", "probe"]).weight_decays == [0.0, 1e-5, 1e-4, 1e-3]  # the default, parsed


def test_negative_batch_size_no_longer_overwrites_the_output_with_nothing(tmp_path, capsys):
    source, output = write_lines(tmp_path / "s.txt", ["a b", "c"]), tmp_path / "o.h5"
    output.write_bytes(OLD)
    status, err = run_cli(capsys, "embed", source, output, "--top", "--batch-size", "-5")
    assert status == 2 and "argument --batch-size: must be an integer >= 1, got -5" in err
    assert output.read_bytes() == OLD


# ---- 2. the output is never the input ----------------------------------------------------------


@pytest.mark.parametrize("how", ["same path", "symlink", "hard link", "other spelling"])
def test_output_that_is_the_input_is_refused_before_anything_is_loaded(tmp_path, capsys, how):
    source = write_lines(tmp_path / "s.txt", ["a b", "c"])
    before = source.read_bytes()
    output = {"same path": source, "symlink": tmp_path / "link.txt", "hard link": tmp_path / "hard.txt",
              "other spelling": tmp_path / "." / ".." / tmp_path.name / "s.txt"}[how]
    if how == "symlink":
        output.symlink_to(source)
    elif how == "hard link":
        os.link(source, output)
    # --model names nothing: the path check comes first, so the model is never loaded
    status, err = run_cli(capsys, "embed", source, output, "--top", "--model", tmp_path / "no-model")
    assert status == 2
    [line] = error_lines(err)
    assert line == (f"elmokit embed: error: {output}: is the input file {source}; writing it would destroy the input; "
                    "give another output path")
    assert source.read_bytes() == before and output.read_bytes() == before


# ---- 3. SIGTERM and killed runs ----------------------------------------------------------------


@pytest.mark.slow  # a fresh process loads torch and the model: ~5 s
def test_sigterm_during_embed_removes_the_temporary_and_keeps_the_output(tmp_path, model_dir):
    source = write_lines(tmp_path / "s.txt", [" ".join(["the", "cat", "sat", "on", "a", "mat"] * 2)] * 3000)
    output = tmp_path / "out.h5"
    output.write_bytes(OLD)
    process = subprocess.Popen(
        [sys.executable, "-m", "elmokit.cli.main", "embed", str(source), str(output), "--all", "--model", str(model_dir),
         "--batch-size", "1", "--token-cache", "0", "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    temporary = temporary_path(output, pid=process.pid)
    deadline = time.monotonic() + 60
    while not temporary.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert temporary.exists(), "the run writes under its own temporary name"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in err
    assert "elmokit embed: stopped by SIGTERM; nothing was written to the output" in err.splitlines()
    assert output.read_bytes() == OLD
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model", "orig", "out.h5", "s.txt"], "no temporary left"


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_temporary_of_a_killed_run_is_removed_by_the_next_run(tmp_path, model_dir, caplog):
    source, output = write_lines(tmp_path / "s.txt", ["a b", "c"]), tmp_path / "out.h5"
    output.write_bytes(OLD)
    killed = temporary_path(output, pid=_dead_pid())  # as `kill -9` leaves it
    killed.write_bytes(b"\0" * 100_000)
    running = temporary_path(output, pid=os.getppid())  # a writer still running: kept
    other_host = temporary_path(output, pid=_dead_pid(), host="another-machine")  # cannot be checked: kept
    not_ours = tmp_path / ".out.h5.tmp"
    for path in (running, other_host, not_ours):
        path.write_bytes(b"x")
    with caplog.at_level(logging.INFO):
        assert main(["embed", str(source), str(output), "--top", "--model", str(model_dir)]) == 0
    assert not killed.exists()
    assert running.exists() and other_host.exists() and not_ours.exists()
    assert f"removed {killed}: a temporary left by an interrupted run" in caplog.text
    with h5py.File(output, "r") as f:
        assert sorted(f) == ["0", "1", "sentence_to_index"]


# ---- 4. path errors: one line, before anything is embedded ------------------------------------


def test_output_that_is_a_directory_is_refused_before_the_model_loads(tmp_path, capsys):
    source, folder = write_lines(tmp_path / "s.txt", ["a"]), tmp_path / "out"
    folder.mkdir()
    status, err = run_cli(capsys, "embed", source, folder, "--top", "--model", tmp_path / "no-model")
    assert status == 2
    assert error_lines(err) == [f"elmokit embed: error: {folder}: is a directory; give the path of the HDF5 file to write, "
                                f"e.g. {folder / 'embeddings.h5'}"]
    assert list(folder.iterdir()) == []


def test_output_in_a_missing_folder_or_under_a_file_is_one_line(tmp_path, capsys):
    source = write_lines(tmp_path / "s.txt", ["a"])
    status, err = run_cli(capsys, "embed", source, tmp_path / "nowhere" / "o.h5", "--top", "--model", tmp_path / "no-model")
    assert status == 2 and error_lines(err) == [
        f"elmokit embed: error: {tmp_path / 'nowhere'}: output directory does not exist; create it first "
        f"(mkdir -p {tmp_path / 'nowhere'}), or give an output path in an existing directory"]
    status, err = run_cli(capsys, "embed", source, source / "o.h5", "--top")
    assert status == 2 and error_lines(err) == [
        f"elmokit embed: error: {source}: is a file, not a directory; give an output path in an existing directory"]


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nobody can create files in: mode 0555, and for root (who ignores modes) immutable."""
    folder = tmp_path / "ro"
    folder.mkdir()
    (folder / "o.h5").write_bytes(OLD)
    folder.chmod(0o555)
    immutable = False
    try:
        try:
            (folder / "probe").touch()
        except PermissionError:
            pass
        else:
            (folder / "probe").unlink()
            immutable = subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode == 0
            if not immutable:
                pytest.skip("cannot make a read-only folder here (root without chattr)")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def test_read_only_output_folder_is_one_line_and_the_output_is_kept(tmp_path, read_only_dir, capsys):
    source, output = write_lines(tmp_path / "s.txt", ["a"]), read_only_dir / "o.h5"
    status, err = run_cli(capsys, "embed", source, output, "--top", "--model", tmp_path / "no-model")
    assert status == 2 and "Traceback" not in err
    [line] = error_lines(err)
    assert line.startswith(f"elmokit embed: error: {output}: cannot write in {read_only_dir} (")
    assert line.endswith("); give an output path in a directory you can write to")
    assert output.read_bytes() == OLD


def test_input_that_is_a_directory_is_named_as_one(tmp_path, capsys):
    status, err = run_cli(capsys, "embed", tmp_path, tmp_path / "o.h5", "--top")
    assert status == 2
    assert error_lines(err) == [f"elmokit embed: error: {tmp_path}: is a directory, not a text file; "
                                "give the file of sentences to embed"]


def test_missing_input_is_still_named(tmp_path, capsys):
    status, err = run_cli(capsys, "embed", tmp_path / "nope.txt", tmp_path / "o.h5", "--top")
    assert status == 2 and error_lines(err) == [f"elmokit embed: error: {tmp_path / 'nope.txt'}: input file not found"]


# ---- 5. "-" is standard input ------------------------------------------------------------------


def test_dash_reads_standard_input_like_a_file(tmp_path, model_dir, monkeypatch, capsys):
    lines = ["The cat sat .", "A dog .", "Ünïcödé 🙂"]
    source = write_lines(tmp_path / "s.txt", lines)
    assert main(["embed", str(source), str(tmp_path / "file.h5"), "--all", "--model", str(model_dir)]) == 0
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes()), encoding="utf-8"))
    assert main(["embed", "-", str(tmp_path / "stdin.h5"), "--all", "--model", str(model_dir)]) == 0
    with h5py.File(tmp_path / "file.h5", "r") as a, h5py.File(tmp_path / "stdin.h5", "r") as b:
        assert sorted(a) == sorted(b) == ["0", "1", "2", "sentence_to_index"]
        for key in ("0", "1", "2"):
            np.testing.assert_array_equal(a[key][...], b[key][...])
        assert a["sentence_to_index"][0] == b["sentence_to_index"][0]
    capsys.readouterr()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"fine\nbad \xff\n")))
    status, err = run_cli(capsys, "embed", "-", tmp_path / "bad.h5", "--all", "--model", model_dir)
    assert status == 2 and "elmokit embed: error: <stdin>:2: not valid UTF-8" in err
    assert not (tmp_path / "bad.h5").exists()


def test_help_says_dash_is_standard_input(capsys):
    with pytest.raises(SystemExit):
        main(["embed", "--help"])
    assert "'-' reads standard input" in " ".join(capsys.readouterr().out.split())


# ---- 6. version, help, counted messages ------------------------------------------------------


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out == f"elmokit {__version__}\n"


def test_demo_help_has_a_description(capsys):
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    assert "cosine similarity of the same word" in " ".join(capsys.readouterr().out.split())


def test_counts_are_singular_for_one(tmp_path, model_dir, caplog, capsys):
    with caplog.at_level(logging.INFO):
        main(["embed", str(write_lines(tmp_path / "one.txt", ["a"])), str(tmp_path / "1.h5"), "--top", "--model", str(model_dir)])
        main(["embed", str(write_lines(tmp_path / "two.txt", ["a b", "c"])), str(tmp_path / "2.h5"), "--top",
              "--model", str(model_dir)])
    assert "embedded 1 sentence (1 token) into" in caplog.text
    assert "embedded 2 sentences (3 tokens) into" in caplog.text
    status, err = run_cli(capsys, "embed", write_lines(tmp_path / "e.txt", ["a", "", "b"]), tmp_path / "e.h5", "--top",
                          "--model", model_dir)
    assert status == 2 and "e.txt: 1 empty line at line 2;" in err


def test_corpus_that_is_a_directory_is_named_as_one(tmp_path, capsys):
    (tmp_path / "texts").mkdir()  # beside the output: an output inside an input folder is refused first
    status, err = run_cli(capsys, "neighbors", "index", "--corpus", tmp_path / "texts", "--out", tmp_path / "index",
                          "--model", tmp_path / "no-model")
    assert status == 2
    assert error_lines(err) == [f"elmokit neighbors: error: corpus '{tmp_path / 'texts'}' is a directory, not a file; fix: "
                                f"give the files in it, e.g. '{tmp_path / 'texts' / '*.txt'}' (quoted)"]
