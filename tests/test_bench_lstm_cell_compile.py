"""benchmarks/bench_lstm_cell_compile.py runs (inductor + g++ on this machine) and its record holds what
docs/benchmarks.md concludes from it: inductor's code for products and differences gives eager's floats."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # compiles four small graphs with inductor: tens of seconds of g++
def test_the_cell_compile_benchmark_runs_in_smoke_mode(tmp_path):
    record = tmp_path / "record.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_lstm_cell_compile.py"), "--smoke",
                           "--json", str(record)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(record.read_text())
    assert result["shapes"] == {"rows": 5, "cell": 8, "tokens": 20}
    for part in ("cell_forward", "backward_coefficients", "call_overhead"):
        assert result[part]["eager_us"] > 0 and result[part]["compiled_us"] > 0, part
    assert result["cell_forward"]["compile_s"] > 0
    # products and differences only: the compiled kernel rounds as eager does (no contraction into FMA)
    assert result["backward_coefficients"]["bit_identical"] is True
    for function in ("exp", "tanh"):
        assert result[function]["eager_max_ulp"] <= 1.0 and result[function]["compiled_max_ulp"] <= 1.0
