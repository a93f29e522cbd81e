"""The one output policy as users meet it: every command that writes a folder refuses a folder holding
someone else's files, an input given as the output, and replaces only its own earlier output."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from elmokit.cli.main import main
from elmokit.io import OUTPUT_RECORD

torch.set_num_threads(1)

NER = "John\tB-PER\nlives\tO\nin\tO\nNew\tB-LOC\nYork\tI-LOC\n\nMary\tB-PER\nsaw\tO\nParis\tB-LOC\n\n"
TSV = "pos\tthe film is great fun\nneg\ta dull and awful mess\npos\tgreat acting\nneg\tawful\n"
CORPUS = "the cat sat on the mat\na dog saw the cat\n"


@pytest.fixture
def command(request, tmp_path, tiny_original):
    """(argv without --out, the input file a user might give as --out, the command's name)."""
    if request.param == "tag train":
        data = tmp_path / "ner.conll"
        data.write_text(NER)
        argv = ["tag", "train", "--train", str(data), "--dev", str(data), "--format", "conll", "--no-elmo",
                "--epochs", "1", "--word-dim", "3", "--hidden-dim", "2", "--min-word-count", "1"]
    elif request.param == "classify train":
        data = tmp_path / "train.tsv"
        data.write_text(TSV)
        argv = ["classify", "train", "--train", str(data), "--dev", str(data), "--no-elmo", "--epochs", "1",
                "--word-dim", "3", "--hidden-dim", "2", "--threads", "1"]
    else:
        from elmokit import load_original, save_native

        save_native(load_original(*tiny_original[:2]), tmp_path / "model")
        data = tmp_path / "corpus.txt"
        data.write_text(CORPUS)
        argv = ["neighbors", "index", "--model", str(tmp_path / "model"), "--corpus", str(data), "--dtype", "float32"]
    return argv, data, request.param


ALL = ["tag train", "classify train", "neighbors index"]


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("command", ALL, indirect=True)
def test_a_folder_holding_a_users_file_is_refused_and_the_file_kept(command, tmp_path, capsys):
    argv, _, name = command
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    assert main([*argv, "--out", str(out)]) == 2
    err = _one_line_error(capsys)
    assert err.startswith(f"elmokit {name.split()[0]}") and f": error: {out}: holds 'notes.txt'" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"] and (out / "notes.txt").read_text() == "my notes"


@pytest.mark.parametrize("command", ALL, indirect=True)
def test_an_input_file_given_as_the_output_is_refused_and_left_intact(command, tmp_path, capsys):
    argv, data, name = command
    before = data.read_bytes()
    assert main([*argv, "--out", str(data)]) == 2
    err = _one_line_error(capsys)
    assert f"{data}: is a file" in err
    assert data.is_file() and data.read_bytes() == before


@pytest.mark.parametrize("command", ["neighbors index"], indirect=True)  # the one that reads a folder (--model)
def test_an_output_inside_an_input_folder_is_refused(command, tmp_path, capsys):
    argv, data, name = command
    assert main([*argv, "--out", str(tmp_path / "model" / "index")]) == 2
    assert "input" in _one_line_error(capsys)
    assert not (tmp_path / "model" / "index").exists()


@pytest.mark.parametrize("command", ALL, indirect=True)
def test_rerunning_into_its_own_earlier_output_replaces_it_whole(command, tmp_path, capsys):
    argv, _, name = command
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 0
    record = json.loads((out / OUTPUT_RECORD).read_text())
    assert record["command"] == name and set(record["files"]) == {p.name for p in out.iterdir()} - {OUTPUT_RECORD}
    (out / record["files"][0]).write_bytes(b"stale")  # an earlier output, changed since: replaced whole
    assert main([*argv, "--out", str(out)]) == 0
    assert (out / record["files"][0]).read_bytes() != b"stale"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left
    other = {"tag train": "classify train", "classify train": "tag train", "neighbors index": "tag train"}[name]
    capsys.readouterr()
    record["command"] = other  # the folder of another command is not this one's to replace
    (out / OUTPUT_RECORD).write_text(json.dumps(record))
    assert main([*argv, "--out", str(out)]) == 2
    assert f"holds the output of `elmokit {other}`" in _one_line_error(capsys)


def test_convert_refuses_a_users_folder_and_replaces_its_own_output(tmp_path, tiny_original, capsys):
    from elmokit import load_original, save_native

    save_native(load_original(*tiny_original[:2]), tmp_path / "native")
    out = tmp_path / "converted"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["convert", str(tmp_path / "native"), str(out)]) == 2
    assert "holds 'keep.txt'" in _one_line_error(capsys) and (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()
    assert main(["convert", str(tmp_path / "native"), str(out)]) == 0
    assert main(["convert", str(tmp_path / "native"), str(out)]) == 0  # its own earlier output
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_RECORD, "options.json", "weights.hdf5"]
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "native"), str(tmp_path / "native")]) == 2  # the source itself
    assert "input" in _one_line_error(capsys)
    weights = load_original(out / "options.json", out / "weights.hdf5").numpy_state()
    for name, value in load_original(*tiny_original[:2]).numpy_state().items():
        np.testing.assert_array_equal(weights[name], value)


def test_static_train_with_force_still_keeps_a_users_folder(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat\nthe dog sat on the cat\n" * 3)
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    argv = ["static", "train", "--algo", "lsa", "--dim", "2", "--min-count", "1", "--corpus", str(corpus), "--quiet"]
    assert main([*argv, "--out", str(out), "--force"]) == 2
    assert "holds 'notes.txt'" in _one_line_error(capsys) and sorted(p.name for p in out.iterdir()) == ["notes.txt"]
    assert main([*argv, "--out", str(corpus), "--force"]) == 2  # the corpus itself
    assert f"{corpus}: is a file" in _one_line_error(capsys) and corpus.read_text().startswith("the cat sat")


def test_a_file_output_that_is_an_input_or_a_folder_is_refused_before_any_work(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    assert main(["vocab", "--corpus", str(corpus), "--out", str(corpus)]) == 2  # was: the corpus replaced by its vocabulary
    assert f"{corpus}: is the input file {corpus}" in _one_line_error(capsys) and corpus.read_text() == CORPUS
    (tmp_path / "link.txt").symlink_to(corpus)
    assert main(["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "vocab.txt"),
                 "--counts", str(tmp_path / "link.txt")]) == 2  # the input by another name
    assert "is the input" in _one_line_error(capsys) and corpus.read_text() == CORPUS
    assert not (tmp_path / "vocab.txt").exists()

    data = tmp_path / "ner.conll"
    data.write_text(NER)
    assert main(["tag", "train", "--train", str(data), "--dev", str(data), "--format", "conll", "--no-elmo", "--epochs", "1",
                 "--word-dim", "3", "--hidden-dim", "2", "--out", str(tmp_path / "tagger")]) == 0
    capsys.readouterr()
    for out in (data, tmp_path / "tagger"):
        assert main(["tag", "predict", "--tagger", str(tmp_path / "tagger"), "--input", str(data), "--format", "conll",
                     "--out", str(out)]) == 2
        assert f"{out}: is " in _one_line_error(capsys)
    assert data.read_text() == NER


def test_embed_ray_refuses_a_folder_that_is_no_earlier_job(tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a b\n")
    out = tmp_path / "shards"
    out.mkdir()
    (out / "shard-00000.h5").write_text("a file of the user's that a job's rerun would have removed")
    assert main(["embed", "--ray", str(tmp_path / "in.txt"), str(out)]) == 2
    assert "holds 'shard-00000.h5' and is no earlier output of `elmokit embed --ray`" in _one_line_error(capsys)
    assert [p.name for p in out.iterdir()] == ["shard-00000.h5"]


def test_a_cache_folder_inside_the_output_is_refused_before_training(tmp_path, capsys):
    data = tmp_path / "ner.conll"
    data.write_text(NER)
    out = tmp_path / "tagger"
    assert main(["tag", "train", "--train", str(data), "--dev", str(data), "--format", "conll", "--no-elmo", "--epochs", "1",
                 "--out", str(out), "--cache-dir", str(out / "cache")]) == 2
    assert "input" in _one_line_error(capsys) and not out.exists()
