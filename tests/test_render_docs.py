"""benchmarks/render_docs.py: the committed tables are what the records say, and a row says what its record says."""

from __future__ import annotations

import json

from testkit import load_benchmark


def test_the_committed_page_matches_its_records():
    script = load_benchmark("render_docs")
    text = script.PAGE.read_text(encoding="utf-8")
    assert script.render(text) == text, "docs/benchmarks.md differs from its records: run python benchmarks/render_docs.py"


def test_a_soak_row_and_a_load_table_from_hand_made_records(tmp_path, monkeypatch):
    script = load_benchmark("render_docs")
    monkeypatch.setattr(script, "RECORDS", tmp_path)
    soak = {"command": "python benchmarks/serve_soak.py --out x.json", "environment": {"MALLOC_ARENA_MAX": "2"},
            "requests": 10000, "wrong": 0, "seconds": 151.66, "rss_after_first_10pct_mb": 720.6,
            "rss_last_10pct_mb": 862.2, "rss_growth_pct": 19.654, "rss_by_tenth_mb": [720.4, 858.5]}
    for name in script.SOAK_RUNS:
        (tmp_path / f"{name}.json").write_text(json.dumps(soak))
    row = script.serve_soak()[2]
    assert row == ("| `MALLOC_ARENA_MAX=2 python benchmarks/serve_soak.py --out x.json` | `serve_soak.json` | 10,000 | 0 | "
                   "151.7 | 721 MB | 862 MB | 19.7% | 720.4, 858.5 |")
    load = {"command": "python benchmarks/serve_load.py", "library_sentences_per_s": 200.0, "library_tokens_per_s": 3000.4,
            "levels": [{"users": 8, "requests": 1472, "failures": 1, "sentences_per_s": 50.04, "tokens_per_s": 1234.5,
                        "p50_ms": 210.0, "p99_ms": 330.0}]}
    (tmp_path / "serve_load.json").write_text(json.dumps(load))
    lines = script.serve_load()
    assert lines[0] == "Record `docs/benchmarks/serve_load.json`, command `python benchmarks/serve_load.py`:"
    assert lines[4] == "| 8 | 1,472 | 1 | 50.0 | 1,234 | 210 | 330 | 25% |"  # 50.04 / 200 = 25%; 1234.5 rounds to even
    assert lines[5] == "| library (`Embedder.embed`, batches of 64) | | | 200.0 | 3,000 | | | 100% |"


def test_a_page_without_its_markers_is_refused():
    script = load_benchmark("render_docs")
    try:
        script.render("no markers here")
    except SystemExit as refusal:
        assert "the markers of" in str(refusal) and "must appear once each" in str(refusal)
    else:
        raise AssertionError("a page without markers was rendered")
