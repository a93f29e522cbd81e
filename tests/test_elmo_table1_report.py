"""benchmarks/elmo_table1.py rebuilds its section from the records alone: per-seed pairs, mean ± sd and the
margin to the paper's gain computed by hand, both record shapes (eval ner, eval sst), and an arm still at its
last epoch named."""

from __future__ import annotations

import json

from testkit import load_benchmark


def _ner(seed, base, elmo, epochs=((3, 7), (5, 9))):
    runs = [{"elmo": mode, "test_score": score / 100, "dev_score": 0.5, "best_epoch": best, "epochs_run": run,
             "train_sentences": 100, "dev_sentences": 20, "test_sentences": 30}
            for mode, score, (best, run) in (("none", base, epochs[0]), ("mix", elmo, epochs[1]))]
    return {"task": "ner_wikiann", "seed": seed, "results": runs, "command": f"elmokit eval ner --seed {seed}",
            "machine": "m", "date": "d", "wall_seconds": 60.0}


def _sst(seed, base, elmo, best_elmo):
    variant = lambda acc, best: {"test_accuracy": acc, "dev_accuracy": 40.0, "best_epoch": best, "epochs_run": 6,  # noqa: E731
                                 "sizes": {"train": 10, "dev": 5, "test": 7}}
    return {"task": "sst5", "seed": seed, "tasks": {"sst5": {"baseline": variant(base, 2), "elmo": variant(elmo, best_elmo)}},
            "command": "elmokit eval sst", "machine": "m", "date": "d", "wall_seconds": 120.0}


def test_rows_from_records_with_spread_margin_and_epochs(tmp_path):
    script = load_benchmark("elmo_table1")
    records = [_ner(0, 60.0, 65.0), _ner(1, 62.0, 66.0), _ner(2, 61.0, 67.0),
               _sst(0, 30.0, 33.0, 3), _sst(1, 32.0, 33.0, 6)]
    for r in records:
        (tmp_path / f"{r['task']}_seed{r['seed']}.json").write_text(json.dumps(r))
    text = "\n".join(script.table1_lines(tmp_path, {"ner_wikiann": 12.1}))
    # NER: baseline 61 ± 1, ELMo 66 ± 1, gains 5, 4, 6 -> 5 ± 1; the paper's gain 92.22 - 90.15 = 2.07
    assert ("| ner_wikiann | NER, CoNLL-2003 (span F1) | 90.15 | 92.22 | +2.07 | 61.00 ± 1.00 | 66.00 ± 1.00 "
            "| +5.00 ± 1.00 | +2.93 | 12.8%; 21.0% | +12.10 | 0, 1, 2 | s0: 3/7; 5/9; s1: 3/7; 5/9; s2: 3/7; 5/9 |") in text
    # SST-5: gains 3 and 1 -> 2 ± 1.41; the paper's 3.3; seed 1's ELMo arm ended on its last epoch
    assert ("| sst5 | SST-5 (accuracy) | 51.40 | 54.70 | +3.30 | 31.00 ± 1.41 | 33.00 ± 0.00 | +2.00 ± 1.41 | -1.30 "
            "| 2.9%; 6.8% | — |") in text
    assert "still at their last epoch: sst5: 1 arm(s)" in text
    assert "ner_wikiann: 100 train / 20 dev / 30 test sentences, 3 min for 3 seeds" in text
    # gains 5, 4, 6: standard error 1/sqrt(3), so 5 - 1.15 > 2.07; gains 3, 1: 2 ± 2 holds 3.3
    assert "ner_wikiann: larger than the paper's, +5.00 ± 1.15 (twice the standard error) against +2.07" in text
    assert "sst5: the paper's gain within the seeds' noise, +2.00 ± 2.00" in text
    assert "Not measured this way: SNLI (accuracy) (88.0 → 88.7): the pair model" in text
    assert "one seed: no spread" in script.verdict([2.0], 1.0)
    assert "Where ours is larger, the scale is why" in text and "Where ours is smaller" not in text
    assert "smaller than the paper's, and not told from no gain at all" in script.verdict([-1.0, 1.0, 0.0], 3.0)
    assert script.verdict([-3.0, -2.0, -4.0], 1.0).startswith("reversed")
    assert script.table1_lines(tmp_path / "none") == []


def test_restricted_data_records_stay_in_the_ignored_runs_folder(tmp_path):
    script = load_benchmark("elmo_table1")
    # CoNLL-2003 is restricted: with the docs' folder as the target its records go to runs/, never into docs/
    assert script.record_dir("ner_conll2003", script.OUT) == script.LOCAL_OUT
    assert script.LOCAL_OUT.relative_to(script.REPO).parts[0] == "runs"
    assert script.record_dir("ner_wikiann", script.OUT) == script.OUT
    assert script.record_dir("ner_conll2003", tmp_path) == tmp_path  # an explicit --out-dir is the user's
    ignored = (script.REPO / ".gitignore").read_text().splitlines()
    assert "/runs/" in ignored
