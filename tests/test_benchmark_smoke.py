"""The pretraining benchmarks still run against the library as it is (a changed signature broke one before): each
script's --smoke mode end to end, in a subprocess, printing its table and writing its record."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from elmokit.data_paths import shared_data

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # each a few seconds of tokenizer training and steps
@pytest.mark.parametrize("script", ["pretrain_speed.py", "pretrain_vs_trainer.py"])
def test_the_pretraining_benchmark_runs_in_smoke_mode_and_writes_its_record(script, tmp_path):
    if not shared_data("gutenberg_en").is_dir():
        pytest.skip("needs the shared data's gutenberg_en (the benchmark's corpus): ../shared or ELMOKIT_SHARED")
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), "--smoke"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    output = done.stdout + done.stderr
    assert " wrote " in output, output[-2000:]  # its record (a temporary one in smoke mode)
    table_rows = [line for line in output.splitlines() if line.startswith("| ")]
    expected = "| trainer |" if script == "pretrain_vs_trainer.py" else "| bert |"
    assert any(row.startswith(expected) for row in table_rows), output[-2000:]
