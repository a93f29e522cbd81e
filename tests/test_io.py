"""Atomic writers: a result is either the old one or the complete new one, never half of each."""

import logging
import os
import socket
import subprocess
from pathlib import Path

import pytest

from elmokit.io import atomic_directory, atomic_path, remove_stale_temporaries, temporary_path, write_marked_block


def test_atomic_directory_replaces_on_success_and_keeps_the_old_folder_on_failure(tmp_path):
    target = tmp_path / "model"
    with atomic_directory(target) as staging:
        (staging / "a.txt").write_text("first")
    assert (target / "a.txt").read_text() == "first"

    with pytest.raises(RuntimeError):
        with atomic_directory(target) as staging:
            (staging / "a.txt").write_text("second, half written")
            raise RuntimeError("interrupted")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"] and (target / "a.txt").read_text() == "first"

    with atomic_directory(target) as staging:
        (staging / "b.txt").write_text("replacement")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["model"], "no staging or old folder left behind"


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_atomic_path_writes_under_a_name_tied_to_the_output_and_the_process(tmp_path):
    target = tmp_path / "out.h5"
    with atomic_path(target) as tmp:
        assert Path(tmp) == temporary_path(target) == tmp_path / f".out.h5.elmokit-tmp-{socket.gethostname()}-{os.getpid()}"
        assert Path(tmp).exists()
        with atomic_path(target) as second:  # the same process writing the same output twice: its own name
            assert second != tmp
        Path(tmp).write_bytes(b"new")
    assert target.read_bytes() == b"new" and [p.name for p in tmp_path.iterdir()] == ["out.h5"]


def test_only_temporaries_of_finished_local_processes_are_removed(tmp_path, caplog):
    target = tmp_path / "out.h5"
    dead = temporary_path(target, pid=_dead_pid())
    reused_own_pid = temporary_path(target)  # left by an earlier process that had this pid
    live = temporary_path(target, pid=os.getppid())
    remote = temporary_path(target, pid=_dead_pid(), host="elsewhere")
    other_output = temporary_path(tmp_path / "other.h5", pid=_dead_pid())
    not_ours = tmp_path / ".out.h5.abc123.tmp"
    stale_folder = temporary_path(target, pid=_dead_pid())
    stale_folder = stale_folder.with_name(stale_folder.name + ".1")
    stale_folder.mkdir()
    (stale_folder / "part").write_text("x")
    for path in (dead, reused_own_pid, live, remote, other_output, not_ours):
        path.write_text("x")
    with caplog.at_level(logging.WARNING, logger="elmokit.io"):
        removed = remove_stale_temporaries(target)
    assert sorted(removed) == sorted([dead, reused_own_pid, stale_folder])
    assert all(p.exists() for p in (live, remote, other_output, not_ours))
    assert caplog.text.count("a temporary left by an interrupted run") == 3


def test_atomic_directory_removes_stale_staging_folders_of_its_target(tmp_path):
    target = tmp_path / "index"
    stale = temporary_path(target, pid=_dead_pid())
    stale.mkdir()
    (stale / "layer_0.npy").write_bytes(b"\0" * 1000)
    with atomic_directory(target) as staging:
        assert staging == temporary_path(target)
        (staging / "a.txt").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_write_marked_block_replaces_inserts_after_under_heading_or_appends(tmp_path):
    begin, end = "<!-- part:begin -->", "<!-- part:end -->"
    doc = tmp_path / "doc.md"
    doc.write_text("# Results\n\nintro\n<!-- other:end -->\n\n## Later\n", encoding="utf-8")
    write_marked_block(doc, begin, end, "one", after="<!-- other:end -->")
    first = doc.read_text(encoding="utf-8")
    assert first == f"# Results\n\nintro\n<!-- other:end -->\n\n{begin}\none\n{end}\n\n\n## Later\n"
    write_marked_block(doc, begin, end, "two", after="<!-- other:end -->")  # replaced, never a second block
    assert doc.read_text(encoding="utf-8") == first.replace("\none\n", "\ntwo\n")
    doc.write_text("# Results\n", encoding="utf-8")
    write_marked_block(doc, begin, end, "body", heading="## Section")  # heading added, block under it
    assert doc.read_text(encoding="utf-8") == f"# Results\n\n## Section\n\n{begin}\nbody\n{end}\n"
    doc.write_text("text\n\n\n", encoding="utf-8")
    write_marked_block(doc, begin, end, "body", after="<!-- absent -->")  # neither: appended
    assert doc.read_text(encoding="utf-8") == f"text\n\n{begin}\nbody\n{end}\n"
