"""benchmarks/ptb_lm.py end to end on a made-up corpus in PTB's layout (the real PTB is LDC's and is
never copied here): the chunked run and its record, the reloaded model's test numbers, the window mode."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "ptb_lm.py"
WORDS = "the a cat dog man woman saw heard likes sees big small old red <unk> N".split()


def fake_ptb(root: Path) -> Path:
    """Mikolov's layout: ptb.{train,valid,test}.txt, one space-separated sentence per line."""
    rng = np.random.default_rng(0)
    folder = root / "data" / "ptb_mikolov"
    folder.mkdir(parents=True)
    for split, lines in (("train", 120), ("valid", 30), ("test", 25)):
        text = "".join(" " + " ".join(rng.choice(WORDS, size=rng.integers(3, 12))) + " \n" for _ in range(lines))
        (folder / f"ptb.{split}.txt").write_text(text, encoding="utf-8")
    return root


def run_script(shared: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ELMOKIT_SHARED": str(shared), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env, check=True)


@pytest.mark.slow  # two short training runs of the PTB model in subprocesses: ~20 s
def test_chunked_run_its_record_and_the_reloaded_models_test_numbers(tmp_path):
    shared = fake_ptb(tmp_path / "shared")
    out = tmp_path / "run"
    run_script(shared, "--out", str(out), "--max-steps", "4", "--chunk-steps", "2", "--valid-sentences", "10")
    result = json.loads((out / "ptb_result.json").read_text())
    assert [e["step"] for e in result["curve"]] == [2, 4] and result["steps"] == 4
    assert result["test_sentences"] == 25 and result["parameters_total"] > result["parameters_bilm"]
    # the model folder the run leaves scores exactly what the run scored in memory
    run_script(shared, "--out", str(out), "--evaluate-only")
    again = json.loads((out / "ptb_eval.json").read_text())
    for key in ("test_forward_ppl", "test_backward_ppl", "test_stream_forward_ppl"):
        assert again[key] == pytest.approx(result[key], rel=1e-6), key
    assert again["steps"] == 4
    # a stream of one sentence starts from the zero state: both protocols give the same number
    (shared / "data" / "ptb_mikolov" / "ptb.test.txt").write_text(" the old man saw a red dog \n")
    run_script(shared, "--out", str(out), "--evaluate-only")
    one = json.loads((out / "ptb_eval.json").read_text())
    assert one["test_sentences"] == 1
    assert one["test_stream_forward_ppl"] == pytest.approx(one["test_forward_ppl"], rel=1e-5)

    # the window mode: rows of running text, and the trainer's stream validation in the curve
    window = tmp_path / "window"
    run_script(shared, "--out", str(window), "--max-steps", "2", "--chunk-steps", "2", "--window", "5",
               "--batch-size", "4", "--valid-sentences", "10")
    record = json.loads((window / "ptb_result.json").read_text())
    assert record["steps"] == 2 and "valid_stream_forward_ppl" in record["curve"][-1]
    training = json.loads((window / "training.json").read_text())
    assert training["training"]["window"] == 5
