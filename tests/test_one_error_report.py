"""One error type, one report: what the user must fix is a ``UserError``, reported as one line with exit 2,
including a full disk and a missing file met deep inside the standard library."""

from __future__ import annotations

import errno
import os

import h5py
import pytest

from elmokit.cli.main import main
from elmokit.errors import InputNotFound, NoSpaceLeft, UserError, as_user_error


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    lines = [line for line in err.splitlines() if line.startswith("elmokit ") and ": error: " in line]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize("raised", [
    OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
    # h5py's form: the errno only inside the message of an OSError without one
    OSError("Can't write data (file write failed: errno = 28, error message = 'No space left on device')"),
])
def test_a_full_disk_during_embed_is_one_line_and_the_earlier_output_is_kept(model_dir, tmp_path, capsys, monkeypatch,
                                                                           raised):
    (tmp_path / "in.txt").write_text("the cat sat\na dog\n")
    out = tmp_path / "out.h5"
    out.write_bytes(b"an earlier output")
    real = h5py.Group.create_dataset
    calls = []

    def create_dataset(self, name, *args, **kwargs):
        calls.append(name)
        if len(calls) == 2:  # the disk fills up half-way through the file
            raise raised
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.Group, "create_dataset", create_dataset)
    assert main(["embed", "--model", str(model_dir), str(tmp_path / "in.txt"), str(out)]) == 2
    line = _one_line_error(capsys)
    assert line.startswith(f"elmokit embed: error: {out}: the disk filled up while it was written; it was left as it was")
    assert "free some space, or write to another disk" in line
    assert out.read_bytes() == b"an earlier output"
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_a_bogus_activation_in_a_config_is_one_line(model_dir, tmp_path, capsys):
    config = (model_dir / "config.json").read_text().replace('"activation": "relu"', '"activation": "gelu"')
    (model_dir / "config.json").write_text(config)
    (tmp_path / "in.txt").write_text("a b\n")
    assert main(["embed", "--model", str(model_dir), str(tmp_path / "in.txt"), str(tmp_path / "out.h5")]) == 2
    assert _one_line_error(capsys) == (f"elmokit embed: error: {model_dir / 'config.json'}: field activation must be "
                                       "'relu' or 'tanh', got 'gelu'")


def test_a_missing_input_is_a_user_error_that_is_still_a_file_not_found_error(tmp_path, capsys):
    from elmokit.tasks.data import read_conll

    with pytest.raises(InputNotFound) as caught:
        read_conll(tmp_path / "nope.conll")
    assert isinstance(caught.value, UserError) and isinstance(caught.value, FileNotFoundError)  # old callers still catch it
    assert main(["tag", "predict", "--tagger", str(tmp_path), "--input", str(tmp_path / "nope.txt"),
                 "--out", str(tmp_path / "x")]) == 2
    assert _one_line_error(capsys).startswith(f"elmokit tag predict: error: {tmp_path}: not a tagger folder")


def test_standard_library_errors_that_are_the_users_become_user_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as caught:
        open(tmp_path / "nope.txt")
    assert str(as_user_error(caught.value)) == f"{tmp_path / 'nope.txt'}: no such file or folder"
    full = as_user_error(OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "out.h5")))
    assert isinstance(full, NoSpaceLeft) and str(full).startswith(f"{tmp_path / 'out.h5'}: no space left")
    assert as_user_error(OSError(errno.EACCES, "Permission denied")) is None  # not recognised: keeps its traceback
    assert as_user_error(RuntimeError("a bug")) is None
    error = UserError("x")
    assert as_user_error(error) is error


def test_no_command_module_keeps_its_own_list_of_user_errors():
    import elmokit.cli.common as common

    assert not hasattr(common, "USER_ERRORS")


def test_every_command_reports_a_user_error_through_the_one_wrapper(tmp_path):
    """Three commands that once had three reporters (main's, cli.common's, serve's own prints) give the same
    line for their bad input, from a real ``elmokit`` process: ``elmokit CMD: error: MSG``, exit 2."""
    import subprocess
    import sys

    missing = tmp_path / "nope.txt"
    runs = {
        "static train": ["static", "train", "--algo", "lsa", "--corpus", str(missing), "--out", str(tmp_path / "static")],
        "vocab": ["vocab", "--corpus", str(missing), "--out", str(tmp_path / "vocab.txt")],
    }
    same = f"corpus pattern '{missing}' matches no file (fix: check the path, and quote the glob so the shell does not expand it)"
    for command, argv in runs.items():
        done = subprocess.run([sys.executable, "-m", "elmokit.cli.main", *argv], capture_output=True, text=True, timeout=120)
        assert (done.returncode, done.stderr, done.stdout) == (2, f"elmokit {command}: error: {same}\n", ""), command
    assert not list(tmp_path.iterdir())  # neither wrote anything
    done = subprocess.run([sys.executable, "-m", "elmokit.cli.main", "serve", "--port", "70000"], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stderr) == (2, "elmokit serve: error: --port 70000 is not a port (0..65535)\n")


def test_no_command_module_reports_errors_itself():
    """The wrapper in ``cli.main`` is the only code that prints ``error:`` or turns an exception into an exit status."""
    from pathlib import Path

    import elmokit.cli as cli
    import elmokit.cli.common as common

    assert not hasattr(common, "run_reporting_errors")
    printers = [path.name for path in Path(cli.__file__).parent.glob("*.py")
                if path.name != "main.py" and ": error:" in path.read_text(encoding="utf-8")]
    assert printers == []
