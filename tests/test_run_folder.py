"""The engine's run folder (``elmokit.engine.run_folder``) as `elmokit train` users meet it: a resume over
changed text is refused naming the file, a run that failed before its first checkpoint blocks neither the
retry nor --resume, a file or a foreign folder as --out is refused in one line and left untouched; and the
folder's pieces on their own (resumable fields, command records, the policy's table of cases)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from train_helpers import TINY_CORPUS, tiny_vocab

from elmokit.cli.main import main
from elmokit.engine.run_folder import (
    RunError,
    RunFolder,
    corpus_differences,
    corpus_files_record,
    read_commands,
    record_command,
    resumable,
    resumable_fields,
    resume_differences,
)


def _train(tmp_path, out, corpus, *extra):
    return main(["train", "--corpus", str(corpus), "--vocab", str(tiny_vocab(tmp_path)), "--preset", "tiny", "--out", str(out),
                 "--batch-size", "6", "--threads", "1", *extra])


def _copy_corpus(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(TINY_CORPUS.read_bytes())
    return corpus


def test_resume_over_a_corpus_with_one_byte_changed_is_refused_naming_the_file(tmp_path, capsys):
    corpus = _copy_corpus(tmp_path)
    assert _train(tmp_path, tmp_path / "r", corpus, "--max-steps", "2") == 0
    data = bytearray(corpus.read_bytes())
    data[0] = ord("X") if data[0] != ord("X") else ord("Y")  # same path, same size, one byte
    corpus.write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["train", "--out", str(tmp_path / "r"), "--resume", "--max-steps", "4", "--threads", "1"]) == 2
    [error] = [line for line in capsys.readouterr().err.splitlines() if line.startswith("elmokit train:")]
    assert f"corpus file {corpus}: its content changed since the run read it" in error
    assert not (tmp_path / "r" / "checkpoints" / "step_00000004").exists()


def test_a_run_that_failed_before_its_first_checkpoint_blocks_neither_the_retry_nor_resume(tmp_path, capsys):
    good = _copy_corpus(tmp_path)
    bad = tmp_path / "more.txt"
    bad.write_bytes(b"a b c\n\xff\xfe not UTF-8\n")  # the first line passes the start's check; the loop then fails
    corpus = str(tmp_path / "*.txt")
    assert _train(tmp_path, tmp_path / "r", corpus, "--max-steps", "40", "--checkpoint-every", "100") == 2
    assert "more.txt" in capsys.readouterr().err
    assert not list((tmp_path / "r" / "checkpoints").glob("step_*"))
    bad.write_text("a b c\nthe cat sat\n", encoding="utf-8")  # fixed
    assert _train(tmp_path, tmp_path / "r", corpus, "--max-steps", "3") == 0  # the same command again
    assert json.loads((tmp_path / "r" / "checkpoints" / "step_00000003" / "state.json").read_text())["step"] == 3
    assert [json.loads(line)["step"] for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()] == [3]
    # and --resume of a run that failed the same way starts it again from step 0
    bad.write_bytes(b"a b c\n\xff\xfe not UTF-8\n")
    assert _train(tmp_path, tmp_path / "s", corpus, "--max-steps", "40", "--checkpoint-every", "100") == 2
    bad.write_text("a b c\nthe cat sat\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "--out", str(tmp_path / "s"), "--resume", "--max-steps", "2", "--threads", "1"]) == 0
    assert (tmp_path / "s" / "model" / "model.safetensors").is_file()
    assert good.read_bytes() == TINY_CORPUS.read_bytes()


@pytest.mark.parametrize("case", ["file", "foreign folder"])
def test_out_naming_a_file_or_a_foreign_folder_is_refused_in_one_line_and_left_untouched(tmp_path, capsys, case):
    out = tmp_path / "out"
    if case == "file":
        out.write_text("keep me")
    else:
        out.mkdir()
        (out / "notes.txt").write_text("keep me")
    assert _train(tmp_path, out, TINY_CORPUS, "--max-steps", "1") == 2
    err = capsys.readouterr().err
    [error] = [line for line in err.splitlines() if line.startswith("elmokit train:")]
    assert str(out) in error and "Traceback" not in err
    assert (out.read_text() if case == "file" else sorted(p.name for p in out.iterdir())) == (
        "keep me" if case == "file" else ["notes.txt"])


def test_a_run_of_another_command_is_refused(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "training.json").write_text(json.dumps({"kind": "pretrain", "pretraining": {}}))
    with pytest.raises(RunError, match="holds a run of `elmokit pretrain`, not of `elmokit train`"):
        RunFolder.open(tmp_path / "run", kind="train", resume=True)


def test_the_policy_case_by_case(tmp_path):
    """New, empty, unstarted (our files only, no record), a run without checkpoints, a run with one."""
    assert RunFolder.open(tmp_path / "new", kind="train", resume=False).record is None
    with pytest.raises(RunError, match="no such run folder"):
        RunFolder.open(tmp_path / "new", kind="train", resume=True)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.json").write_text("{}")  # a name a run writes too, but without a record it is the user's
    with pytest.raises(RunError, match="holds no elmokit run .'config.json' is in it"):
        RunFolder.open(mine, kind="train", resume=False)
    run = tmp_path / "run"
    run.mkdir()
    (run / "command.txt").write_text("")
    assert not RunFolder.open(run, kind="train", resume=True).resuming  # what a start leaves before its record
    (run / "training.json").write_text(json.dumps({"kind": "train", "training": {}}))
    unstarted = RunFolder.open(run, kind="train", resume=False)
    assert not unstarted.resuming and unstarted.record["kind"] == "train"  # no checkpoint: nothing to keep
    (run / "checkpoints" / "step_00000002").mkdir(parents=True)
    (run / "checkpoints" / "step_00000002" / "state.json").write_text("{}")
    with pytest.raises(RunError, match="already holds a run; pass --resume"):
        RunFolder.open(run, kind="train", resume=False)
    assert RunFolder.open(run, kind="train", resume=True).resuming


def test_resumable_fields_are_declared_on_the_config_fields():
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Config:
        lr: float = 0.1
        max_steps: int | None = resumable(None)
        log_every: int = resumable(10)

    assert resumable_fields(Config) == {"max_steps", "log_every"}
    saved = Config(max_steps=2)
    assert resume_differences(saved, Config(max_steps=9, log_every=1)) == []
    assert resume_differences(saved, Config(lr=0.5, max_steps=9), "training.") == ["training.lr: saved 0.1, requested 0.5"]


def test_corpus_differences_name_the_changed_file_and_accept_the_same_content(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("one two\n")
    b.write_text("three\n")
    saved = corpus_files_record([a, b])
    assert corpus_differences(saved, corpus_files_record([a, b])) == []
    b.write_text("thrEe\n")
    [problem] = corpus_differences(saved, corpus_files_record([a, b]))
    assert problem.startswith(f"corpus file {b}: its content changed")
    old_record = [{k: v for k, v in f.items() if k != "sha256"} for f in saved]  # written before content hashes
    assert corpus_differences(old_record, corpus_files_record([a, b])) == []


def test_one_command_record_format(tmp_path):
    record_command(tmp_path, "elmokit train --out r  --resume", 2)
    (tmp_path / "command.txt").open("a").write("2025-01-01T00:00:00  elmokit cove train --out r\n")  # an older line
    assert read_commands(tmp_path) == ["elmokit train --out r  --resume", "elmokit cove train --out r"]
    assert "  world_size=2  elmokit train" in (tmp_path / "command.txt").read_text().splitlines()[0]
