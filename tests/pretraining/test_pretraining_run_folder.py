"""`elmokit pretrain`'s run folder (the engine's): resume is exact or refused, a failed start blocks nothing,
bad --out and an emptied corpus are one-line errors."""

from __future__ import annotations

import json

from pretraining_testkit import need_transformers, write_document_corpus

need_transformers()

from elmokit.cli.main import main  # noqa: E402

BASE = ["pretrain", "--objective", "bert", "--preset", "tiny", "--batch-size", "4", "--vocab-size", "300", "--max-tokens", "32",
        "--threads", "1"]


def _errors(capsys) -> list[str]:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("elmokit pretrain:")]


def test_resume_over_changed_text_of_the_same_size_is_refused_naming_the_file(tmp_path, capsys):
    corpus = tmp_path / "docs.txt"
    write_document_corpus(corpus)
    assert main(BASE + ["--corpus", str(corpus), "--out", str(tmp_path / "r"), "--max-steps", "2"]) == 0
    text = corpus.read_text(encoding="utf-8")
    corpus.write_text(text.replace("the", "thE", 1), encoding="utf-8")  # same path, same size
    capsys.readouterr()
    assert main(["pretrain", "--out", str(tmp_path / "r"), "--resume", "--max-steps", "4", "--threads", "1"]) == 2
    [error] = _errors(capsys)
    assert f"corpus file {corpus}: its content changed since the run read it" in error
    corpus.write_text("\n\n", encoding="utf-8")  # emptied: the same one line
    assert main(["pretrain", "--out", str(tmp_path / "r"), "--resume", "--max-steps", "4", "--threads", "1"]) == 2
    [error] = _errors(capsys)
    assert str(corpus) in error


def test_a_failed_start_blocks_neither_the_retry_nor_resume(tmp_path, capsys):
    good, bad = tmp_path / "a.txt", tmp_path / "b.txt"
    write_document_corpus(good)

    def start(out, max_steps):  # the tokenizer reads the first lines only; a later batch meets b.txt
        return main(BASE + ["--corpus", str(tmp_path / "*.txt"), "--out", str(tmp_path / out), "--max-steps", str(max_steps),
                            "--tokenizer-lines", "5", "--checkpoint-every", "1000"])

    for out in ("r", "s"):
        bad.write_bytes(b"Some text here.\n\nMore.\n\xff\xfe not UTF-8\n")
        assert start(out, 30) == 2
        [error] = _errors(capsys)
        assert "b.txt" in error and not list((tmp_path / out / "checkpoints").glob("step_*"))
    bad.write_text("Some text here.\n\nAnd more text.\n", encoding="utf-8")  # fixed
    assert start("r", 2) == 0  # the same command again
    assert json.loads((tmp_path / "r" / "checkpoints" / "step_00000002" / "state.json").read_text())["step"] == 2
    assert main(["pretrain", "--out", str(tmp_path / "s"), "--resume", "--max-steps", "2", "--threads", "1"]) == 0
    assert (tmp_path / "s" / "model" / "config.json").is_file()


def test_out_naming_a_file_is_one_line_and_the_file_is_kept(tmp_path, capsys):
    corpus = tmp_path / "docs.txt"
    write_document_corpus(corpus)
    out = tmp_path / "out.txt"
    out.write_text("keep me")
    assert main(BASE + ["--corpus", str(corpus), "--out", str(out), "--max-steps", "1"]) == 2
    [error] = _errors(capsys)
    assert f"{out}: is a file" in error and out.read_text() == "keep me"
