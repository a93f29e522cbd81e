"""benchmarks/elmo_results.py sets a previous default's numbers beside the new one's: the labels both
results folders have, with the change computed by hand."""

from __future__ import annotations

import json

from testkit import load_benchmark


def _write(folder, probe_layers, wsd_layers, similarity):
    folder.mkdir(parents=True)
    (folder / "probe.json").write_text(json.dumps({"representation": "elmo:default", "layers": [
        {"layer": j, "test_accuracy": a} for j, a in enumerate(probe_layers)]}))
    (folder / "wsd.json").write_text(json.dumps({"layers": [{"layer": j, "f1": f} for j, f in enumerate(wsd_layers)]}))
    (folder / "similarity.json").write_text(json.dumps({"similarity": [{"dataset": "ws353", "spearman": similarity}]}))


def test_the_comparison_lists_shared_measures_with_their_change(tmp_path, monkeypatch):
    script = load_benchmark("elmo_results")
    monkeypatch.setattr(script, "REPO", tmp_path)
    old, new = tmp_path / "previous", tmp_path / "now"
    _write(old, [85.0, 91.0, 91.5], [46.0, 57.0], 0.04)
    _write(new, [85.5, 92.25, 91.5], [47.0, 58.5], 0.10)
    (new / "wsd.json").write_text(json.dumps({"layers": [{"layer": 0, "f1": 47.0}]}))  # layer 1 missing now
    (old / "model.json").write_text(json.dumps({"sha256": "ab" * 32, "description": "10M tokens"}))
    lines = script.comparison(old, new, "`default`, weights sha256 `cd`")
    text = "\n".join(lines)
    assert "| POS probe, layer 1 | 91.00 | 92.25 | +1.25 |" in text
    assert "| POS probe, layer 2 | 91.50 | 91.50 | +0.00 |" in text
    assert "| WSD F1, layer 0 | 46.00 | 47.00 | +1.00 |" in text and "WSD F1, layer 1" not in text
    assert "| ws353 Spearman x 100, layer 0 | 4.00 | 10.00 | +6.00 |" in text
    assert "10M tokens; weights sha256 `abababababababab`" in text and "`previous/`" in text
    assert script.comparison(old, tmp_path / "empty") == []  # nothing shared: no table at all
