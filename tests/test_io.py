"""Atomic writers: a result is either the old one or the complete new one, never half of each."""

import pytest

from elmokit.io import atomic_directory


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
