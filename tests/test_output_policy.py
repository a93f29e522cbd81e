"""The one output policy (``elmokit.io.check_output`` / ``output_directory``) and the atomic folder swap."""

from __future__ import annotations

import json
import os

import pytest

from elmokit.errors import UserError
from elmokit.io import OUTPUT_RECORD, OutputRefused, atomic_directory, check_output, output_directory


def _write(folder, **files):
    for name, text in files.items():
        (folder / name).write_text(text)


def test_a_new_or_empty_folder_is_accepted(tmp_path):
    assert check_output(tmp_path / "new", command="tag train") == (tmp_path / "new").resolve()
    (tmp_path / "empty").mkdir()
    assert check_output(tmp_path / "empty", command="tag train") == (tmp_path / "empty").resolve()


def test_an_earlier_output_of_the_same_command_is_replaced_whole(tmp_path):
    out = tmp_path / "out"
    with output_directory(out, command="tag train", artifact="tagger") as tmp:
        _write(tmp, **{"model.safetensors": "first", "old.json": "{}"})
    record = json.loads((out / OUTPUT_RECORD).read_text())
    assert record == {"command": "tag train", "files": ["model.safetensors", "old.json"], "artifact": "tagger"}
    with output_directory(out, command="tag train") as tmp:
        _write(tmp, **{"model.safetensors": "second"})
    assert sorted(os.listdir(out)) == [OUTPUT_RECORD, "model.safetensors"]
    assert (out / "model.safetensors").read_text() == "second"
    assert [name for name in os.listdir(tmp_path) if name != "out"] == []  # no temporary or old folder left


@pytest.mark.parametrize("case", ["file", "foreign folder", "other command", "user file inside", "no replace"])
def test_everything_else_is_refused_and_left_untouched(tmp_path, case):
    out = tmp_path / "out"
    if case == "file":
        out.write_text("keep me")
    else:
        out.mkdir()
        if case == "foreign folder":
            _write(out, **{"notes.txt": "keep me"})
        else:
            _write(out, **{"model.safetensors": "keep me",
                           OUTPUT_RECORD: json.dumps({"command": "classify train" if case == "other command" else "tag train",
                                                      "files": ["model.safetensors"]})})
            if case == "user file inside":
                _write(out, **{"notes.txt": "keep me"})
    before = {p.name: p.read_bytes() for p in ([out] if out.is_file() else out.iterdir())}
    with pytest.raises(OutputRefused) as caught:
        with output_directory(out, command="tag train", replace=case != "no replace") as tmp:
            _write(tmp, **{"model.safetensors": "new"})
    assert isinstance(caught.value, UserError)
    assert str(out) in str(caught.value)
    after = {p.name: p.read_bytes() for p in ([out] if out.is_file() else out.iterdir())}
    assert after == before


def test_an_input_inside_or_around_the_output_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("a b\n")
    for target in (data, data / "train.txt", tmp_path):
        with pytest.raises(OutputRefused, match="input"):
            check_output(target, command="tag train", inputs=[data / "train.txt", None])
    with pytest.raises(OutputRefused, match="input"):  # inside an input folder (a model given as --model)
        check_output(data / "sub", command="tag train", inputs=[data])
    assert check_output(data / "sub", command="tag train", inputs=[data / "train.txt"]) == (data / "sub").resolve()


def test_a_failure_inside_the_block_leaves_nothing_that_blocks_the_retry(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with output_directory(out, command="tag train") as tmp:
            _write(tmp, **{"model.safetensors": "half"})
            raise RuntimeError("disk full")
    assert not out.exists() and os.listdir(tmp_path) == []
    with output_directory(out, command="tag train") as tmp:
        _write(tmp, **{"model.safetensors": "whole"})
    assert (out / "model.safetensors").read_text() == "whole"


def test_the_folder_swap_never_removes_the_old_folder_before_the_new_one_is_in(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    _write(out, old="1")
    seen = []
    real_replace = os.replace

    def watching_replace(src, dst):  # the fallback path: each rename must leave one complete folder at `out` or aside
        seen.append((os.path.basename(src), os.path.basename(dst)))
        return real_replace(src, dst)

    monkeypatch.setattr("elmokit.io._exchange", lambda first, second: False)
    monkeypatch.setattr(os, "replace", watching_replace)
    with atomic_directory(out) as tmp:
        _write(tmp, new="2")
    assert sorted(os.listdir(out)) == ["new"]
    assert seen[0][0] == "out" and seen[1][1] == "out"  # moved aside first, then the new one renamed in
