"""`elmokit embed --ray` on a local Ray cluster of 2 CPUs (one cluster for the module; its start
and the actors' model loads take ~15-25 s on a small shared CPU, so the module is marked slow;
tests/test_bulk_shards.py checks the sharding, index and resume logic in seconds without Ray).

The oracle is the single-process `elmokit embed` output of the same file, bit for bit."""

import json

import h5py
import numpy as np
import pytest
from testkit import random_tf_weights, tiny_options, write_lines, write_original_files

from elmokit.bulk import read_index, read_job
from elmokit.cli.main import main

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

LINES = ["The cat sat on the mat .", "A dog .", "Ünïcödé words 🙂 here", "x", "the bank of the river",
         "Chico Ruiz made a spectacular play on Alusik 's grounder", "a", "b c"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    from ray.data import DataContext

    DataContext.get_current().execution_no_progress_timeout_s = 120  # a stuck pool fails, not hangs 30 min
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    options = tiny_options()
    return write_original_files(tmp_path_factory.mktemp("bulk") / "tiny", options, random_tf_weights(options, seed=7))[0].parent


def test_ray_shards_equal_the_single_process_command_bit_for_bit_and_a_rerun_resumes(cluster, tiny_model, tmp_path):
    source = write_lines(tmp_path / "in.txt", LINES * 2)
    assert main(["embed", str(source), str(tmp_path / "single.h5"), "--all", "--model", str(tiny_model)]) == 0
    args = ["embed", str(source), str(tmp_path / "out"), "--all", "--model", str(tiny_model), "--ray", "--actors", "2",
            "--shard-lines", "5"]
    assert main(args) == 0
    index = read_index(tmp_path / "out")
    assert index["complete"] and [(r["first_line"], r["stop_line"]) for r in index["shards"]] == [(0, 5), (5, 10),
                                                                                                   (10, 15), (15, 16)]
    with h5py.File(tmp_path / "single.h5", "r") as single:
        got = dict(read_job(tmp_path / "out"))
        assert sorted(got) == list(range(len(LINES) * 2))
        for line, array in got.items():
            np.testing.assert_array_equal(array, single[str(line)][...])

    (tmp_path / "out" / "shard-00002.h5").unlink()
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("shard-*")}
    assert main(args) == 0  # only the lost shard is written again
    after = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "out").glob("shard-*")}
    assert {name for name in after if before.get(name) != after[name]} == {"shard-00002.h5"}
    assert json.loads((tmp_path / "out" / "index.json").read_text())["complete"]


def test_ray_parquet_shards(cluster, tiny_model, tmp_path):
    source = write_lines(tmp_path / "in.txt", LINES)
    assert main(["embed", str(source), str(tmp_path / "single.h5"), "--average", "--model", str(tiny_model)]) == 0
    assert main(["embed", str(source), str(tmp_path / "out"), "--average", "--model", str(tiny_model), "--ray",
                 "--format", "parquet", "--shard-lines", "3"]) == 0
    with h5py.File(tmp_path / "single.h5", "r") as single:
        for line, array in read_job(tmp_path / "out"):
            np.testing.assert_array_equal(array, single[str(line)][...])
