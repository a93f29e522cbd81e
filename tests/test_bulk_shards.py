"""Sharded bulk embedding without Ray: the shard writer run in this process, the index, resume.

The oracle is the single-process `elmokit embed` output of the same file: every vector must be
the same bit for bit (ELMo starts each sentence from zero, so sharding cannot change a value)."""

import json

import h5py
import numpy as np
import pytest
from testkit import write_lines

from elmokit import Embedder
from elmokit.bulk import JobSettings, local_runner, plan_shards, read_index, read_job, run_job
from elmokit.bulk.shards import BulkIndexError
from elmokit.cli.main import main
from elmokit.formats.embedding_hdf5 import InputFileError

WORDS = ["the", "bank", "river", "über", "naïve", ".", ",", "Chico", "2018", "grounder", "🙂"]


def sentences(n, seed=3):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 9)))) for _ in range(n)]


def single_process(tmp_path, source, model_dir, flag="--all"):
    out = tmp_path / "single.h5"
    assert main(["embed", str(source), str(out), flag, "--model", str(model_dir), "--batch-size", "3"]) == 0
    with h5py.File(out, "r") as f:
        return {int(k): f[k][...] for k in f if k != "sentence_to_index"}, json.loads(f["sentence_to_index"][0])


class Counting:
    """A runner around ``local_runner`` that records which shards it was asked to write."""

    def __init__(self, embedder, source, outdir, settings, fail_after=None):
        self.inner = local_runner(embedder, source, outdir, settings)
        self.asked: list[int] = []
        self.fail_after = fail_after

    def __call__(self, pending):
        self.asked = [s.number for s in pending]
        for count, record in enumerate(self.inner(pending)):
            if self.fail_after is not None and count == self.fail_after:
                raise KeyboardInterrupt  # the job stopped with shards still to do
            yield record


def job(source, outdir, embedder, *, shard_lines=3, fail_after=None, **settings):
    settings = JobSettings(fingerprint=embedder.fingerprint, **settings)
    runner = Counting(embedder, source, outdir, settings, fail_after)
    return run_job(source, outdir, settings=settings, shard_lines=shard_lines, runner=runner), runner


@pytest.fixture
def embedder(model_dir):
    return Embedder.load(str(model_dir), batch_size=2)


def test_plan_covers_every_line_once_with_byte_ranges_that_read_back(tmp_path):
    lines = sentences(8)
    source = write_lines(tmp_path / "in.txt", lines)
    plan = plan_shards(source, 3)
    assert [(s.first_line, s.stop_line) for s in plan] == [(0, 3), (3, 6), (6, 8)]
    data = source.read_bytes()
    for shard in plan:
        assert data[shard.offset:shard.offset + shard.size].decode().splitlines() == lines[shard.first_line:shard.stop_line]
    assert plan_shards(write_lines(tmp_path / "one.txt", ["a b"]), 5)[0].stop_line == 1


@pytest.mark.parametrize("file_format,flag", [("hdf5", "--all"), ("parquet", "--top"), ("hdf5", "--average")])
def test_shards_hold_the_single_process_vectors_bit_for_bit(tmp_path, model_dir, embedder, file_format, flag):
    lines = sentences(8)
    source = write_lines(tmp_path / "in.txt", lines)
    expected, _ = single_process(tmp_path, source, model_dir, flag)
    index, _ = job(source, tmp_path / "out", embedder, output_format=flag[2:], file_format=file_format)
    assert index["complete"] and index["input_lines"] == 8
    assert [(r["first_line"], r["stop_line"], r["file"]) for r in index["shards"]] == [
        (0, 3, f"shard-00000.{'h5' if file_format == 'hdf5' else 'parquet'}"),
        (3, 6, f"shard-00001.{'h5' if file_format == 'hdf5' else 'parquet'}"),
        (6, 8, f"shard-00002.{'h5' if file_format == 'hdf5' else 'parquet'}")]
    got = dict(read_job(tmp_path / "out"))
    assert sorted(got) == list(range(8))
    for line, array in got.items():
        assert array.dtype == np.float32
        np.testing.assert_array_equal(array, expected[line])


def test_hdf5_shards_keep_the_embed_layout_with_global_line_numbers(tmp_path, model_dir, embedder):
    lines = sentences(5)
    source = write_lines(tmp_path / "in.txt", lines)
    job(source, tmp_path / "out", embedder, shard_lines=2)
    with h5py.File(tmp_path / "out" / "shard-00001.h5", "r") as f:
        assert sorted(f) == ["2", "3", "sentence_to_index"]
        assert json.loads(f["sentence_to_index"][0]) == {lines[3]: "3", lines[2]: "2"} | (
            {lines[2]: "3"} if lines[2] == lines[3] else {})


def test_rerun_skips_verified_shards_and_redoes_missing_damaged_and_unfinished_ones(tmp_path, model_dir, embedder):
    source = write_lines(tmp_path / "in.txt", sentences(11))
    expected, _ = single_process(tmp_path, source, model_dir)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):  # stopped after two of four shards
        job(source, out, embedder, fail_after=2)
    index = read_index(out)
    assert not index["complete"] and [r["file_sha256"] is not None for r in index["shards"]] == [True, True, False, False]
    _, runner = job(source, out, embedder)
    assert runner.asked == [2, 3]  # the unfinished ones only

    _, runner = job(source, out, embedder)
    assert runner.asked == []  # all complete and verified

    (out / "shard-00001.h5").write_bytes(b"not hdf5")  # damaged
    (out / "shard-00003.h5").unlink()  # lost
    index, runner = job(source, out, embedder)
    assert runner.asked == [1, 3] and index["complete"]
    for line, array in read_job(out):
        np.testing.assert_array_equal(array, expected[line])


def test_an_edited_input_redoes_only_its_shard_and_other_settings_redo_all(tmp_path, embedder):
    lines = sentences(9)
    source = write_lines(tmp_path / "in.txt", lines)
    out = tmp_path / "out"
    job(source, out, embedder)
    write_lines(source, lines[:4] + ["a changed line"] + lines[5:])
    _, runner = job(source, out, embedder)
    assert runner.asked == [1]
    _, runner = job(source, out, embedder, output_format="top")
    assert runner.asked == [0, 1, 2]


def test_a_shorter_plan_removes_the_shards_it_no_longer_has(tmp_path, embedder):
    source = write_lines(tmp_path / "in.txt", sentences(9))
    job(source, tmp_path / "out", embedder)
    write_lines(source, sentences(4))
    index, _ = job(source, tmp_path / "out", embedder)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["index.json", "shard-00000.h5", "shard-00001.h5"]
    assert len(index["shards"]) == 2


def test_bad_lines_are_named_with_file_and_line_before_any_shard_is_written(tmp_path, embedder):
    source = tmp_path / "in.txt"
    source.write_bytes(b"good line\nbad \xff byte\n")
    with pytest.raises(InputFileError, match=r"in\.txt:2: not valid UTF-8"):
        job(source, tmp_path / "out", embedder)
    write_lines(source, ["one", "", "three"])
    with pytest.raises(InputFileError, match=r"in\.txt: 1 empty line at line 2"):
        job(source, tmp_path / "out", embedder)
    assert not list((tmp_path / "out").glob("shard-*"))
    index, _ = job(source, tmp_path / "out", embedder, allow_empty_lines=True)
    assert dict(read_job(tmp_path / "out"))[1].shape == (embedder.num_layers, 0, embedder.dim)


def test_a_foreign_or_unreadable_index_is_a_clear_error(tmp_path, embedder):
    source = write_lines(tmp_path / "in.txt", sentences(2))
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "index.json").write_text("{not json")
    with pytest.raises(BulkIndexError, match=r"index\.json: not a readable index"):
        job(source, tmp_path / "out", embedder)
    (tmp_path / "out" / "index.json").write_text('{"kind": "something else"}')
    with pytest.raises(BulkIndexError, match="not an elmokit bulk-embedding index"):
        job(source, tmp_path / "out", embedder)


def test_cli_refuses_what_sharding_cannot_do_before_loading_a_model(tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", sentences(2))
    (tmp_path / "file").write_text("x")
    cases = [
        (["--stateful"], "--stateful carries states"),
        (["--format", "parquet", "--use-sentence-keys"], "--use-sentence-keys applies to --format hdf5"),
    ]
    for extra, message in cases:
        assert main(["embed", str(source), str(tmp_path / "out"), "--all", "--ray", "--model", "nowhere", *extra]) == 2
        assert message in capsys.readouterr().err
    assert main(["embed", str(source), str(tmp_path / "file"), "--all", "--ray", "--model", "nowhere"]) == 2
    assert "is a file; with --ray the output is a folder" in capsys.readouterr().err
    assert main(["embed", "-", str(tmp_path / "out"), "--all", "--ray", "--model", "nowhere"]) == 2
    assert "give a file, not '-'" in capsys.readouterr().err


def test_shards_cut_lines_with_the_embedders_tokenizer_as_embed_does(tmp_path, model_dir, embedder):
    from elmokit.text.corpus import Tokenizer

    lines = ["the bank's river.", "naïve,über"]
    source = write_lines(tmp_path / "in.txt", lines)
    single = tmp_path / "single.h5"
    assert main(["embed", str(source), str(single), "--all", "--model", str(model_dir), "--tokenizer", "regex"]) == 0
    embedder.tokenizer = Tokenizer(kind="regex")
    job(source, tmp_path / "out", embedder, tokenizer="regex")
    got = dict(read_job(tmp_path / "out"))
    with h5py.File(single, "r") as f:
        assert got[0].shape[1] == 6 and got[1].shape[1] == 3  # the bank ' s river . / naïve , über
        for line in range(2):
            np.testing.assert_array_equal(got[line], f[str(line)][...])
