"""`elmokit embed`: the old `allennlp elmo` HDF5 layout, streaming, and input errors."""

import json

import h5py
import numpy as np
import pytest
from numpy_elmo import NumpyELMo
from testkit import write_lines

from elmokit import Embedder
from elmokit.cli.main import main

LINES = ["The cat sat on the mat .", "A dog .", "The cat sat on the mat .", "Ünïcödé words 🙂 here"]


def embed(*args):
    return main(["embed", *map(str, args)])


def test_all_layout_and_values(tmp_path, model_dir, tiny_original):
    _, _, options, weights = tiny_original
    source = write_lines(tmp_path / "in.txt", LINES)
    assert embed(source, tmp_path / "out.h5", "--all", "--model", model_dir, "--batch-size", 3) == 0
    oracle = NumpyELMo(options, weights)
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert sorted(f.keys()) == ["0", "1", "2", "3", "sentence_to_index"]
        for i, line in enumerate(LINES):
            data = f[str(i)][...]
            assert data.dtype == np.float32 and data.shape == (3, len(line.split()), 10)
            np.testing.assert_allclose(data, oracle.sentence(line.split())[:, 1:-1], atol=2e-5, rtol=1e-4)
        index = json.loads(f["sentence_to_index"][0])
    # a repeated sentence maps to its last line, as the old command did
    assert index == {"The cat sat on the mat .": "2", "A dog .": "1", "Ünïcödé words 🙂 here": "3"}


@pytest.mark.parametrize("flag", ["--top", "--average"])
def test_top_and_average(tmp_path, model_dir, flag):
    source = write_lines(tmp_path / "in.txt", LINES)
    embed(source, tmp_path / "all.h5", "--all", "--model", model_dir)
    embed(source, tmp_path / "one.h5", flag, "--model", model_dir)
    with h5py.File(tmp_path / "all.h5", "r") as every, h5py.File(tmp_path / "one.h5", "r") as one:
        for i in range(len(LINES)):
            expected = every[str(i)][...][-1] if flag == "--top" else every[str(i)][...].mean(0)
            np.testing.assert_allclose(one[str(i)][...], expected, atol=1e-6)


def test_without_a_layer_flag_every_layer_is_written(tmp_path, model_dir):
    """`allennlp elmo` required --all, --top or --average; here leaving them out means --all."""
    source = write_lines(tmp_path / "in.txt", LINES)
    assert embed(source, tmp_path / "all.h5", "--all", "--model", model_dir) == 0
    assert embed(source, tmp_path / "plain.h5", "--model", model_dir) == 0
    with h5py.File(tmp_path / "all.h5", "r") as every, h5py.File(tmp_path / "plain.h5", "r") as plain:
        for i in range(len(LINES)):
            np.testing.assert_array_equal(plain[str(i)][...], every[str(i)][...])


def test_batch_size_does_not_change_a_single_bit(tmp_path, model_dir):
    source = write_lines(tmp_path / "in.txt", LINES * 3)
    embed(source, tmp_path / "a.h5", "--all", "--model", model_dir, "--batch-size", 1)
    embed(source, tmp_path / "b.h5", "--all", "--model", model_dir, "--batch-size", 5)
    with h5py.File(tmp_path / "a.h5", "r") as a, h5py.File(tmp_path / "b.h5", "r") as b:
        for key in a:
            if key != "sentence_to_index":
                np.testing.assert_array_equal(a[key][...], b[key][...])


def test_stateful_flag_reproduces_the_reference_sequence(tmp_path, model_dir):
    source = write_lines(tmp_path / "in.txt", LINES)
    embed(source, tmp_path / "s.h5", "--all", "--model", model_dir, "--batch-size", 2, "--stateful")
    reference = Embedder.load(model_dir, stateful=True)
    expected = reference.embed_batch([l.split() for l in LINES[:2]]) + reference.embed_batch([l.split() for l in LINES[2:]])
    with h5py.File(tmp_path / "s.h5", "r") as f:
        for i, array in enumerate(expected):
            np.testing.assert_array_equal(f[str(i)][...], array)
        # line 2 repeats line 0 in the same row after state was carried: its vectors differ
        assert not np.allclose(f["0"][...][1:], f["2"][...][1:])


def test_sentence_keys_and_forget_sentences(tmp_path, model_dir):
    unique = write_lines(tmp_path / "in.txt", LINES[:2])
    embed(unique, tmp_path / "k.h5", "--top", "--model", model_dir, "--use-sentence-keys")
    with h5py.File(tmp_path / "k.h5", "r") as f:
        assert sorted(f.keys()) == sorted(LINES[:2])
    embed(unique, tmp_path / "f.h5", "--top", "--model", model_dir, "--forget-sentences")
    with h5py.File(tmp_path / "f.h5", "r") as f:
        assert sorted(f.keys()) == ["0", "1"]


def test_repeated_sentence_keys_fail_before_writing(tmp_path, model_dir, capsys):
    source = write_lines(tmp_path / "in.txt", LINES)
    assert embed(source, tmp_path / "k.h5", "--top", "--model", model_dir, "--use-sentence-keys") == 2
    assert "in.txt:3: repeats the sentence of line 1" in capsys.readouterr().err
    assert not (tmp_path / "k.h5").exists()


def test_empty_lines_are_named_and_nothing_is_overwritten(tmp_path, model_dir, capsys):
    source = write_lines(tmp_path / "in.txt", ["a b", "", "c", "   ", "d"])
    output = tmp_path / "out.h5"
    output.write_bytes(b"previous results")
    assert embed(source, output, "--all", "--model", model_dir) == 2
    assert "2 empty lines at lines 2, 4;" in capsys.readouterr().err
    assert output.read_bytes() == b"previous results"

    assert embed(source, output, "--all", "--model", model_dir, "--allow-empty-lines") == 0
    with h5py.File(output, "r") as f:
        assert f["1"].shape == (3, 0, 10) and f["3"].shape == (3, 0, 10) and f["4"].shape == (3, 1, 10)


def test_undecodable_line_is_named(tmp_path, model_dir, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(b"fine line\nbad \xff byte\n")
    assert embed(source, tmp_path / "o.h5", "--all", "--model", model_dir) == 2
    assert "in.txt:2: not valid UTF-8" in capsys.readouterr().err


def test_interrupted_run_leaves_no_partial_output(tmp_path, model_dir, monkeypatch):
    source = write_lines(tmp_path / "in.txt", LINES * 5)
    output = tmp_path / "out.h5"
    output.write_bytes(b"previous results")
    embedder = Embedder.load(model_dir, batch_size=2)
    calls = []

    def interrupt_on_third_batch(sentences):
        calls.append(len(sentences))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return Embedder.embed_batch(embedder, sentences)

    monkeypatch.setattr(embedder, "embed_batch", interrupt_on_third_batch)
    with pytest.raises(KeyboardInterrupt):
        embedder.embed_file(source, output)
    assert calls == [2, 2, 2], "the file is streamed in batches"
    assert output.read_bytes() == b"previous results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "model", "orig", "out.h5"], "no temporary file left behind"


def test_missing_input_and_model_errors(tmp_path, capsys):
    assert embed(tmp_path / "nope.txt", tmp_path / "o.h5", "--all") == 2
    assert "nope.txt: input file not found" in capsys.readouterr().err
    source = write_lines(tmp_path / "in.txt", ["a"])
    assert embed(source, tmp_path / "o.h5", "--all", "--model", tmp_path / "nowhere") == 2
    assert "not a model folder" in capsys.readouterr().err


def test_original_files_on_the_command_line(tmp_path, tiny_original):
    options_path, weights_path, options, weights = tiny_original
    source = write_lines(tmp_path / "in.txt", ["hello there"])
    assert embed(source, tmp_path / "o.h5", "--top", "--options-file", options_path, "--weight-file", weights_path) == 0
    with h5py.File(tmp_path / "o.h5", "r") as f:
        np.testing.assert_allclose(f["0"][...], NumpyELMo(options, weights).sentence(["hello", "there"])[2, 1:-1], atol=2e-5)


def test_length_bucketing_groups_similar_lengths_and_keeps_keys(tmp_path, model_dir, monkeypatch):
    lines = [" ".join(["w"] * n) for n in (1, 9, 2, 8, 3, 7, 4, 6, 5, 10)]
    source = write_lines(tmp_path / "in.txt", lines)
    embedder = Embedder.load(model_dir, batch_size=2)
    seen = []
    original = embedder.embed_batch
    monkeypatch.setattr(embedder, "embed_batch",
                        lambda sentences: seen.append([len(s) for s in sentences]) or original(sentences))
    embedder.embed_file(source, tmp_path / "out.h5", output_format="top")
    assert seen == [[10, 9], [8, 7], [6, 5], [4, 3], [2, 1]]
    with h5py.File(tmp_path / "out.h5", "r") as f:
        assert [f[str(i)].shape[0] for i in range(len(lines))] == [1, 9, 2, 8, 3, 7, 4, 6, 5, 10]
