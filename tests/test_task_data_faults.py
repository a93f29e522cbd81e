"""Task data and task folders under faults: non-UTF-8 input names file and line; saved folders
honour the umask (they were 0700 with 0600 files)."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
import torch

from elmokit.cli.main import main
from elmokit.evaluation.sst import TreeError, read_sst
from elmokit.io import atomic_directory
from elmokit.tasks.data import (
    DataFileError,
    TaggingDataError,
    read_conll,
    read_conllu,
    read_labelled_tsv,
    read_text,
)

torch.set_num_threads(1)

LATIN1 = "café".encode("latin-1")  # b"caf\xe9": not UTF-8
CONLL = b"John\tB-PER\nlives\tO\n\n" + LATIN1 + b"\tO\n"
CONLLU = b"1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n\n1\t" + LATIN1 + b"\tcafe\tNOUN\tNN\t_\t0\troot\t_\t_\n"
TSV = b"pos\tgreat fun\nneg\tawful\npos\t" + LATIN1 + b" fine\n"
TEXT = b"John saw York\nMary lives\n" + LATIN1 + b" is open\n"
SST = b"(3 (2 It) (4 works))\n(1 (1 bad))\n(2 (2 " + LATIN1 + b"))\n"


@pytest.mark.parametrize("reader, data, error, line, byte", [  # line and byte counted by hand, from 1
    (read_conll, CONLL, TaggingDataError, 4, 4), (read_conllu, CONLLU, TaggingDataError, 3, 6),
    (read_labelled_tsv, TSV, DataFileError, 3, 8), (read_text, TEXT, TaggingDataError, 3, 4),
    (read_sst, SST, TreeError, 3, 10),
])
def test_readers_name_file_and_line_of_bytes_that_are_not_utf8(tmp_path, reader, data, error, line, byte):
    path = tmp_path / "data.txt"
    path.write_bytes(data)
    with pytest.raises(error) as caught:
        reader(path)
    assert str(caught.value) == (f"{path}:{line}: not valid UTF-8 (byte {byte} of the line: b'\\xe9'); re-encode "
                                 "the file as UTF-8, e.g. iconv -f latin1 -t utf-8")


def test_readers_take_the_same_text_in_utf8(tmp_path):
    path = tmp_path / "data.txt"
    path.write_bytes(CONLL.replace(LATIN1, "café".encode()))
    assert read_conll(path).sentences == [["John", "lives"], ["café"]]
    path.write_bytes(TSV.replace(LATIN1, "café".encode()))
    assert read_labelled_tsv(path) == ([["great", "fun"], ["awful"], ["café", "fine"]], ["pos", "neg", "pos"])


def _train_both(folder):
    """Write ``folder/tagger`` and ``folder/classifier``, both without ELMo (fast)."""
    small = ["--no-elmo", "--epochs", "1", "--word-dim", "3", "--hidden-dim", "2"]
    assert main(["tag", "train", "--train", str(folder / "t.conll"), "--dev", str(folder / "t.conll"),
                 "--format", "conll", *small, "--out", str(folder / "tagger")]) == 0
    assert main(["classify", "train", "--train", str(folder / "t.tsv"), "--dev", str(folder / "t.tsv"), *small,
                 "--out", str(folder / "classifier")]) == 0


@pytest.fixture
def trained(tmp_path):
    """A tagger and a classifier folder, and a non-UTF-8 input."""
    (tmp_path / "t.conll").write_bytes(CONLL.replace(LATIN1, b"cafe"))
    (tmp_path / "t.tsv").write_bytes(TSV.replace(LATIN1, b"cafe"))
    (tmp_path / "bad.txt").write_bytes(TEXT)
    _train_both(tmp_path)
    return tmp_path


def test_cli_reports_non_utf8_input_as_one_line(trained, capsys):
    capsys.readouterr()
    (trained / "bad.conll").write_bytes(CONLL)
    (trained / "bad.tsv").write_bytes(TSV)
    bad, conll, tsv = (str(trained / name) for name in ("bad.txt", "bad.conll", "bad.tsv"))
    commands = {  # command: (argv, the file and line named, byte)
        "tag predict": (["tag", "predict", "--tagger", str(trained / "tagger"), "--input", bad,
                         "--out", str(trained / "o.conll")], f"{bad}:3", 4),
        "classify predict": (["classify", "predict", "--classifier", str(trained / "classifier"), "--input", bad,
                              "--out", str(trained / "o.tsv")], f"{bad}:3", 4),
        "classify train": (["classify", "train", "--train", tsv, "--dev", tsv, "--no-elmo",
                            "--out", str(trained / "c2")], f"{tsv}:3", 8),
        "tag train": (["tag", "train", "--train", conll, "--dev", conll, "--format", "conll", "--no-elmo",
                       "--out", str(trained / "t2")], f"{conll}:4", 4),
    }
    for command, (argv, where, byte) in commands.items():
        assert main(argv) == 2, command
        assert capsys.readouterr().err == (f"elmokit {command}: error: {where}: not valid UTF-8 (byte {byte} of the "
                                           "line: b'\\xe9'); re-encode the file as UTF-8, e.g. iconv -f latin1 -t "
                                           "utf-8\n"), command
    assert not [p for p in ("o.conll", "o.tsv", "c2", "t2") if (trained / p).exists()]


def test_classify_predict_takes_the_flags_of_tag_predict_and_the_older_positional_form(trained, capsys):
    good = trained / "good.txt"
    good.write_text("great fun\nawful\n", encoding="utf-8")
    assert main(["classify", "predict", "--classifier", str(trained / "classifier"), "--input", str(good),
                 "--out", str(trained / "a.tsv")]) == 0
    assert main(["classify", "predict", str(trained / "classifier"), str(good), "--out", str(trained / "b.tsv")]) == 0
    rows = (trained / "a.tsv").read_text().splitlines()
    assert len(rows) == 2 and (trained / "b.tsv").read_text().splitlines() == rows
    capsys.readouterr()
    assert main(["classify", "predict", "--input", str(good)]) == 2
    assert "give --classifier DIR" in capsys.readouterr().err


def test_classify_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["classify", "train", "--help"])
    text = " ".join(capsys.readouterr().out.split("options:", 1)[1].split())
    for flag, default in (("--epochs EPOCHS", 10), ("--train-batch-size TRAIN_BATCH_SIZE", 32), ("--lr LR", 0.001),
                          ("--word-dim WORD_DIM", 50), ("--hidden-dim HIDDEN_DIM", 64), ("--dropout DROPOUT", 0.5),
                          ("--mix-l2 MIX_L2", 0.001), ("--seed SEED", 0), ("--batch-size BATCH_SIZE", 64),
                          ("--format {tsv,sst5,sst2}", "tsv")):
        after = text.split(flag, 1)[1]
        assert f"(default: {default})" in after.split(" --", 1)[0], flag


@pytest.fixture
def umask_022():
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def _modes(folder):
    return {str(p.relative_to(folder)): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}


def test_atomic_directory_gives_folders_and_files_the_umask_permissions(tmp_path, umask_022):
    from safetensors.numpy import save_file

    with atomic_directory(tmp_path / "out") as staging:
        save_file({"a": np.zeros(2, np.float32)}, str(staging / "w.safetensors"))  # safetensors writes 0600
        (staging / "sub").mkdir(mode=0o700)
        (staging / "sub" / "n.json").write_text("{}")
    assert _modes(tmp_path / "out") == {".": 0o755, "w.safetensors": 0o644, "sub": 0o755, "sub/n.json": 0o644}
    os.umask(0o077)  # a stricter umask is honoured just the same
    with atomic_directory(tmp_path / "private") as staging:
        (staging / "n.json").write_text("{}")
    assert _modes(tmp_path / "private") == {".": 0o700, "n.json": 0o600}


def test_saved_tagger_and_classifier_folders_honour_the_umask(trained, umask_022):
    _train_both(trained)  # again, now under umask 022 (replacing the folders)
    for folder in ("tagger", "classifier"):
        modes = _modes(trained / folder)
        assert modes.pop(".") == 0o755 and len(modes) >= 4 and set(modes.values()) == {0o644}, (folder, modes)
