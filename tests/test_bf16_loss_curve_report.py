"""benchmarks/bf16_loss_curve.py's part says what its JSON says: window means and ratios by hand."""

from __future__ import annotations

from testkit import load_benchmark


def test_the_report_averages_each_quarter_and_compares_the_validation():
    script = load_benchmark("bf16_loss_curve")
    fp32 = {"loss": [[s, 5.0] for s in range(1, 9)], "valid_ppl": [[2, 400.0], [4, 300.0], [6, 250.0], [8, 200.0]],
            "median_tokens_per_s": 1500.0, "wall_s": 120.0, "skipped_nonfinite": 0}
    bf16 = {"loss": [[s, 5.0 + (0.1 if s in (7, 8) else 0.0)] for s in range(1, 9)],
            "valid_ppl": [[2, 400.0], [4, 303.0], [6, 250.0], [8, 210.0]],
            "median_tokens_per_s": 1800.0, "wall_s": 100.0, "skipped_nonfinite": 1}
    part = script.report({"date": "2026-11-26", "machine": "x86_64, 2 cores", "steps": 8,
                          "runs": {"fp32": fp32, "bf16": bf16}})
    assert "| 1-2 | 5.0000 | 5.0000 | +0.0000 |" in part
    assert "| 7-8 | 5.0000 | 5.1000 | +0.1000 |" in part  # steps 7 and 8 only: the last quarter
    assert "| 4 | 300.0 | 303.0 | 1.010 |" in part and "| 8 | 200.0 | 210.0 | 1.050 |" in part
    assert "fp32 1,500, bf16 1,800" in part and "non-finite loss: 0 and 1" in part
    assert "`python benchmarks/bf16_loss_curve.py --steps 8`" in part
    assert "-11-26" not in part and "x86_64" not in part  # the machine and the date stay in the record
