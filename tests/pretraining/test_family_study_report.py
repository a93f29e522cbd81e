"""benchmarks/family_study.py's report logic on hand-made records: margins per seed, the verdict (within
noise when the seeds disagree in sign), replicate folders, and the reuse guard (a measurement is kept only
for the run it was made on)."""

from __future__ import annotations

import json

import pytest
from testkit import load_benchmark


@pytest.fixture(scope="module")
def study():
    return load_benchmark("family_study", "family_study_report")


def record(name: str, pos: list[float], seed: int = 0, curve=((1, 100, 9.0),)) -> dict:
    return {"name": name, "probe": {"layers": [{"test_accuracy": v} for v in pos]},
            "pretraining": {"command": f"elmokit pretrain --objective {name} --seed {seed}",
                            "loss_curve": [list(c) for c in curve]}}


def test_margins_are_per_seed_and_the_verdict_needs_every_seed_to_agree(study):
    seeds = {"a": [record("a", [60.0, 66.0]), record("a", [61.0, 62.5], 1)],
             "b": [record("b", [64.0, 63.0]), record("b", [63.0, 60.0], 1)]}
    assert study.best_per_seed(seeds, "a") == [66.0, 62.5]
    assert study.seed_margins(seeds, "a", "b") == [2.0, -0.5]
    assert study.margin_text([2.0, -0.5]) == "+0.8 (seeds +2.0, -0.5)"
    assert study.verdict([2.0, -0.5], 1.0) == "within noise (the seeds disagree)"
    assert study.verdict([2.0, 1.5], 1.0) == "holds"
    assert study.verdict([-2.0, -1.5], 1.0) == "reversed"
    assert study.verdict([0.4, 0.2], 1.0) == "within noise"
    assert study.verdict(-1.2, 1.0) == "reversed"  # one seed: a plain number
    assert study.run_seed(seeds["a"][1]) == "1"


def test_replicates_are_read_from_the_seed_folders(study, tmp_path):
    (tmp_path / "seed1").mkdir()
    (tmp_path / "seed1" / "a.json").write_text(json.dumps(record("a", [1.0], 1)))
    (tmp_path / "seed1" / "study.json").write_text("{}")
    (tmp_path / "a.json").write_text(json.dumps(record("a", [2.0])))
    replicates = study.load_replicates(tmp_path, ["a", "b"])
    assert list(replicates) == ["a"] and study.run_seed(replicates["a"][0]) == "1"


def test_a_measurement_is_kept_only_for_the_run_it_was_made_on(study, tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    (run / "training.json").write_text("{}")
    monkeypatch.setattr(study, "read_run", lambda _: {"loss_curve": [(1, 100, 9.0), (2, 200, 8.5)]})
    assert study.same_run(record("a", [1.0], curve=[(1, 100, 9.0), (2, 200, 8.5)]), run)
    assert not study.same_run(record("a", [1.0], curve=[(1, 100, 9.0), (2, 200, 8.4)]), run)
    assert not study.same_run({"name": "a"}, run)


def test_the_noise_floor_is_measured_from_the_seed_spread(study, tmp_path):
    # best layers: a 66.0 / 62.5, b 64.0 / 63.0; within-model variances (n=2, ddof 1): 6.125 and 0.5
    seeds = {"a": [record("a", [60.0, 66.0]), record("a", [61.0, 62.5], 1)],
             "b": [record("b", [64.0, 63.0]), record("b", [63.0, 60.0], 1)],
             "c": [record("c", [50.0])]}  # one seed: no variance to pool
    floor, s, n = study.measured_noise_floor(seeds)
    pooled = (6.125 + 0.5) / 2
    assert n == 2 and s == pytest.approx(pooled ** 0.5)
    assert floor == pytest.approx(2 * (2 * pooled / 2) ** 0.5)
    assert study.measured_noise_floor({"c": seeds["c"]}) is None
    # the same floor from the records on disk (another record without a study model is ignored)
    for name in ("a", "b"):
        (tmp_path / f"{name}.json").write_text(json.dumps(seeds[name][0]))
        (tmp_path / "seed1").mkdir(exist_ok=True)
        (tmp_path / "seed1" / f"{name}.json").write_text(json.dumps(seeds[name][1]))
    (tmp_path / "distill.json").write_text(json.dumps({"teacher": {}}))
    assert study.study_noise_floor(tmp_path) == pytest.approx((floor, s, n))


def test_the_faster_step_rows_compare_tokens_and_probe_with_the_seed_mean(study, tmp_path):
    def run(name, pos, tokens, seed):
        r = record(name, pos, seed)
        r["pretraining"]["tokens"] = tokens
        return r

    seeds = {"a": [run("a", [60.0, 66.0], 100, 0), run("a", [61.0, 62.0], 300, 1)],
             "untrained": [run("untrained", [50.0], 1, 0)]}
    (tmp_path / "a.json").write_text(json.dumps(run("a", [70.0, 61.0], 800, 2)))
    (tmp_path / "untrained.json").write_text(json.dumps(run("untrained", [50.0], 1, 2)))  # the control: no row
    lines = study.faster_step_lines(seeds, tmp_path)
    rows = [line for line in lines if line.startswith("| a |")]
    # tokens: mean 200 -> 800 (4.00x); best layer: mean(66, 62) = 64.0 -> 70.0
    assert rows == ["| a | 200 | 800 | 4.00x | 64.0 | 70.0 | +6.0 |"]
    assert not any(line.startswith("| untrained") for line in lines)
    assert study.faster_step_lines(seeds, tmp_path / "absent") == []
