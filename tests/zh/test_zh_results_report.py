"""benchmarks/zh_results.py's generated part: the numbers it writes come from the two JSON files, it
replaces only its own markers, and a results file without the segmenters' part is refused."""

from __future__ import annotations

import json

import pytest
from testkit import load_benchmark


@pytest.fixture()
def script(tmp_path, monkeypatch):
    module = load_benchmark("zh_results", "zh_results")
    model = {"name": "zh (shipped, compact)", "command": "elmokit train --out runs/zh_compact", "date": "2026-11-25",
             "tokenizer": {"kind": "jieba"}, "vocabulary_size": 1234, "lstm_dim": 64, "projection_dim": 16,
             "parameters": 98765, "file_bytes": {"model.safetensors": 4_260_000, "lm.safetensors": 4_660_000},
             "steps": 30, "tokens": 4567, "train_seconds": 90.0, "threads": 1,
             "valid": [{"step": 10, "valid_ppl": 900.4}, {"step": 20, "valid_ppl": 500.6}]}
    evaluation = {"model": "zh", "results": [{"set": "PD test", "average": 321.04, "num_tokens": 1000,
                                              "oov_rate": 0.0851}]}
    (tmp_path / "model.json").write_text(json.dumps(model), encoding="utf-8")
    (tmp_path / "eval.json").write_text(json.dumps(evaluation), encoding="utf-8")
    compact = module.Build("zh (shipped, compact)", "runs/zh_compact", "v.txt", (), (), tmp_path / "model.json",
                           tmp_path / "eval.json")
    large = module.Build("512-cell (built, not shipped)", "runs/zh_model", "v.txt", (), (),
                         tmp_path / "large.json", tmp_path / "large_eval.json")
    monkeypatch.setattr(module, "COMPACT", compact)
    monkeypatch.setattr(module, "LARGE", large)
    return module


def test_the_part_says_what_the_json_says(script):
    part = script.model_part()
    assert part.startswith("### The Chinese biLMs' perplexity") and script.BEGIN not in part
    assert "**321.0** on PD test (1,000 tokens, OOV 8.5%)" in part
    assert "98,765 parameters, 4.3 MB of biLM + 4.7 MB of softmax; vocabulary 1,234;" in part
    assert "4,567 tokens in 30 steps, 1.5 min on 1 thread " in part
    assert "900 at step 10, 501 at step 20; still falling" in part
    assert "Model: `zh`; training: `elmokit train --out runs/zh_compact`" in part
    assert "**512-cell (built, not shipped)**: not measured yet" in part  # no record: said, not invented


def test_a_missing_shipped_record_is_said(script, tmp_path):
    (tmp_path / "model.json").unlink()
    assert "Not measured yet" in script.model_part()


def test_only_its_own_markers_are_rewritten(script, tmp_path):
    results = tmp_path / "results.md"
    results.write_text(f"intro\n{script.AFTER}\n\nrest\n", encoding="utf-8")
    script.write_model_part(results)
    first = results.read_text(encoding="utf-8")
    assert first.startswith(f"intro\n{script.AFTER}\n\n{script.BEGIN}") and first.endswith("rest\n")
    script.write_model_part(results)  # a second run replaces the part, never appends another
    assert results.read_text(encoding="utf-8") == first
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="zh-segmenters:end"):
        script.write_model_part(bare)
    assert bare.read_text(encoding="utf-8") == "no markers\n"
