"""ULMFiT Table 4 and Figure 3 shapes on TREC-6 and SST-2, at our scale: docs/results.md "Transfer recipes: ULMFiT".

    python benchmarks/ulmfit_trec.py                                  # table 4 rows, seed 0, one thread
    python benchmarks/ulmfit_trec.py --task sst2                      # the same rows on binary SST
    python benchmarks/ulmfit_trec.py --rows finetuned --out docs/results/ulmfit_trec_bidirectional.json
                                                                      # forward, backward and their average
    python benchmarks/ulmfit_trec.py --seeds 0,1 --curve 100,500,1000  # + Figure 3's learning curve
    python benchmarks/ulmfit_trec.py --ablation --merge                # + the Table 6/7-style ablation

``--ablation`` replaces the Table 4 rows by the ablation of the three fine-tuning tricks, all on the
pretrained default model with target LM fine-tuning: the full recipe; without discriminative rates
(decay 1 in both the LM fine-tuning and the classifier); without slanted triangular rates (every group
at its peak rate throughout, both stages); without gradual unfreezing (every classifier group trains
from the first epoch). ``--curve`` then uses the full recipe's fine-tuned LM. ``--merge`` keeps the
rows already in ``--out`` and adds the new ones (and the command) to them.

Rows (same classifier, same options, only the LM differs): from scratch (a randomly initialised LM
of the default model's shape), the pretrained shipped default model, and the default model after
target-task LM fine-tuning on the training questions. Validation = a fixed 10% of train_5500
(the paper reports validation error for its ablations); test = TREC_10's 500 questions. The
learning curve trains on the first N questions of a fixed shuffle of the 90% training part, with
the LM fine-tuned on all training questions (the paper's semi-supervised setting).

``--task sst2``: binary SST (Socher et al. 2013) at the sentence level, its standard split: the roots
of ``shared/data/sst/trees`` with neutral dropped, 0-1 negative, 3-4 positive (train 6,920, validation
= dev 872, test 1,821; ``elmokit.evaluation.sst``). ``--rows`` picks Table 4 rows (scratch, pretrained,
finetuned). Every row also records each direction's own validation and test error, so a
``--directions forward,backward`` run gives the forward, backward and averaged (§3.3) classifiers.

Howard & Ruder (2018) Table 4, TREC-6 validation error: without pretraining 10.67, with 5.69 (the paper
has no SST-2 number). Writes ``--out`` (JSON, default docs/results/ulmfit_TASK.json) and prints a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

from elmokit.evaluation.sst import read_sst, sst_dir, sst_task
from elmokit.evaluation.trec import read_trec, validation_split
from elmokit.lm import LanguageModel, init_like_bilm_tf
from elmokit.transfer.ulmfit import ClassifierOptions, LMFineTuneOptions, ULMFiTClassifier, language_model_loss, train_ulmfit

REPO = Path(__file__).resolve().parents[1]
PAPER_TABLE4 = {"trec": {"from scratch": 10.67, "pretrained + LM fine-tuning": 5.69}, "sst2": {}}
# --rows name -> (Table 4 row, LM kind, whether the LM is fine-tuned on the task text first)
TABLE4_ROWS = {"scratch": ("from scratch", "scratch", False), "pretrained": ("pretrained", "default", False),
               "finetuned": ("pretrained + LM fine-tuning", "default", True)}
# name -> (LM fine-tuning options, classifier options) changed from the full recipe. Howard & Ruder
# ablate discr and stlr in the LM fine-tuning (Table 6) and with gradual unfreezing in the classifier
# (Table 7); here each trick is removed wherever the recipe uses it.
ABLATIONS = {
    "full recipe": ({}, {}),
    "without discriminative rates (decay 1)": ({"decay": 1.0}, {"decay": 1.0}),
    "without STLR (constant rates)": ({"schedule": "constant"}, {"schedule": "constant"}),
    "without gradual unfreezing (all layers from epoch 1)": ({}, {"unfreeze": "all"}),
}


def error(classifier, data) -> float:
    return 100.0 - classifier.accuracy(*data)


def repo_relative(path: str) -> str:
    """``path`` relative to the repository when it is inside it (no machine's absolute paths in the JSON)."""
    resolved = Path(path).resolve()
    return resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else path


def per_direction_error(classifier: ULMFiTClassifier, data) -> dict[str, float]:
    """Each direction's classifier on its own (its softmax alone instead of the average)."""
    return {d: error(ULMFiTClassifier(classifier.config, {d: model}, classifier.labels), data)
            for d, model in classifier.models.items()}


def load_task(task: str):
    """(train, validation, test) as (sentences, label names) pairs, and a one-line description."""
    if task == "sst2":
        folder = sst_dir()
        splits = []
        for split in ("train", "dev", "test"):
            sentences, labels = read_sst(folder / f"{split}.txt")
            kept, names = sst_task(sentences, labels, binary=True)
            splits.append(([sentences[i] for i in kept], names))
        train, valid, test = splits
        return train, valid, test, f"SST-2: train {len(train[0])}, validation (dev) {len(valid[0])}, test {len(test[0])}"
    questions, labels = read_trec(split="train")
    test = read_trec(split="test")
    train_idx, valid_idx = validation_split(len(questions))
    train = ([questions[i] for i in train_idx], [labels[i] for i in train_idx])
    valid = ([questions[i] for i in valid_idx], [labels[i] for i in valid_idx])
    return train, valid, test, f"TREC-6: train {len(train[0])}, validation {len(valid[0])}, test {len(test[0])}"


def fresh_lm(kind: str, seed: int):
    lm, vocabulary, _ = LanguageModel.load("default")
    if kind == "scratch":
        scratch = LanguageModel(lm.bilm.config, len(vocabulary), bos_id=vocabulary.bos, eos_id=vocabulary.eos)
        init_like_bilm_tf(scratch, torch.Generator().manual_seed(seed))
        lm = scratch.eval()
    return lm, vocabulary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=("trec", "sst2"), default="trec", help="data set (default: %(default)s)")
    parser.add_argument("--rows", default=",".join(TABLE4_ROWS),
                        help=f"comma-separated Table 4 rows from {', '.join(TABLE4_ROWS)} (default: %(default)s)")
    parser.add_argument("--seeds", default="0", help="comma-separated seeds (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=5, help="classifier epochs (default: %(default)s)")
    parser.add_argument("--lm-epochs", type=int, default=2, help="target LM fine-tuning epochs (default: %(default)s)")
    parser.add_argument("--directions", default="forward,backward", help="default: %(default)s")
    parser.add_argument("--curve", default="", help="label counts for Figure 3, e.g. 100,500,1000 (default: none)")
    parser.add_argument("--curve-epochs", type=int, default=10, help="classifier epochs on the small sets (default: %(default)s)")
    parser.add_argument("--ablation", action="store_true",
                        help="run the ablation of discr, STLR and gradual unfreezing instead of the Table 4 rows")
    parser.add_argument("--merge", action="store_true", help="add to the rows already in --out instead of replacing them")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=None, help="JSON output (default: docs/results/ulmfit_TASK.json)")
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = str(REPO / "docs" / "results" / f"ulmfit_{args.task}.json")
    table4_rows = args.rows.split(",")
    unknown = sorted(set(table4_rows) - set(TABLE4_ROWS))
    if unknown:
        parser.error(f"--rows: unknown {unknown}; choose from {', '.join(TABLE4_ROWS)}")
    if args.curve and "finetuned" not in table4_rows and not args.ablation:
        parser.error("--curve needs the finetuned row (its LM) or --ablation")
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    directions = tuple(args.directions.split(","))
    train, valid, test, description = load_task(args.task)
    print(description, flush=True)
    command = "python benchmarks/ulmfit_trec.py " + " ".join(sys.argv[1:] if argv is None else argv)
    results = {"command": command, "task": args.task, "date": date.today().isoformat(),
               "machine": f"{platform.machine()} CPU, {args.threads} thread(s)",
               "options": {**vars(args), "out": repo_relative(args.out)}, "rows": [], "curve": []}
    if args.merge and Path(args.out).is_file():
        results = json.loads(Path(args.out).read_text(encoding="utf-8"))
        results.setdefault("commands", [results.get("command", "")]).append(command)
    results.setdefault("ablation", [])

    def save():
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = out.with_name(out.name + f".{os.getpid()}.tmp")
        staging.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
        os.replace(staging, out)  # after every row, so an interrupted run keeps what it measured

    def run(name, kind, lm_epochs, seed, data, epochs, lm=None, vocabulary=None, table="rows",
            lm_changes=None, classifier_changes=None):
        start = time.time()
        if lm is None:
            lm, vocabulary = fresh_lm(kind, seed)
        clf, history = train_ulmfit(data, valid, lm, vocabulary,
                                    lm_options=LMFineTuneOptions(epochs=lm_epochs, seed=seed, **(lm_changes or {})),
                                    classifier_options=ClassifierOptions(epochs=epochs, seed=seed,
                                                                         **(classifier_changes or {})),
                                    directions=directions, log=lambda m: print("   ", m, flush=True))
        row = {"row": name, "seed": seed, "train_size": len(data[0]), "validation_error": error(clf, valid),
               "test_error": error(clf, test), "seconds": round(time.time() - start, 1),
               "per_direction_validation_error": per_direction_error(clf, valid),
               "per_direction_test_error": per_direction_error(clf, test),
               "lm_valid_loss": language_model_loss(lm, vocabulary, valid[0])}
        if table == "ablation":
            row.update(lm_epochs=lm_epochs, classifier_epochs=epochs, lm_changes=lm_changes or {},
                       classifier_changes=classifier_changes or {},
                       history=[{k: round(v, 4) if isinstance(v, float) else v for k, v in h.items()}
                                for hs in history["classifiers"].values() for h in hs])
        print(json.dumps(row), flush=True)
        results[table if data is train else "curve"].append(row)
        save()
        return row, lm, vocabulary

    finetuned = {}
    for seed in seeds:
        torch.manual_seed(seed)
        if args.ablation:
            tuned_lms = {}  # the LM fine-tuning options -> the LM they gave (variants with the same ones share it)
            for name, (lm_changes, classifier_changes) in ABLATIONS.items():
                key = json.dumps(lm_changes, sort_keys=True)
                if key in tuned_lms:  # already fine-tuned this way: no second LM fine-tuning
                    lm, vocabulary = fresh_lm("default", seed)
                    lm.load_state_dict(tuned_lms[key])
                    run(name, "default", 0, seed, train, args.epochs, lm=lm, vocabulary=vocabulary, table="ablation",
                        classifier_changes=classifier_changes)
                    results["ablation"][-1].update(lm_epochs=args.lm_epochs, lm_changes=lm_changes)
                    save()
                    continue
                lm, vocabulary = fresh_lm("default", seed)
                run(name, "default", args.lm_epochs, seed, train, args.epochs, lm=lm, vocabulary=vocabulary,
                    table="ablation", lm_changes=lm_changes, classifier_changes=classifier_changes)
                tuned_lms[key] = {k: v.detach().clone() for k, v in lm.state_dict().items()}
            lm, vocabulary = fresh_lm("default", seed)
            lm.load_state_dict(tuned_lms[json.dumps({})])
            finetuned[seed] = (lm, vocabulary)
        else:
            for name, kind, finetune in (TABLE4_ROWS[r] for r in table4_rows):
                lm_epochs = args.lm_epochs if finetune else 0
                row, lm, vocabulary = run(name, kind, lm_epochs, seed, train, args.epochs)
                if lm_epochs:
                    finetuned[seed] = (lm, vocabulary)
        if args.curve:
            order = np.random.default_rng(seed).permutation(len(train[0]))
            for count in [int(c) for c in args.curve.split(",")]:
                subset = ([train[0][i] for i in order[:count]], [train[1][i] for i in order[:count]])
                run("from scratch", "scratch", 0, seed, subset, args.curve_epochs)
                lm, vocabulary = finetuned[seed]
                run("pretrained + LM fine-tuning (all text)", "default", 0, seed, subset,
                    args.curve_epochs, lm=lm, vocabulary=vocabulary)
    print_table(results, PAPER_TABLE4[results.get("task", "trec")])
    return 0


def summary(values):
    mean = float(np.mean(values))
    half = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return f"{mean:.2f}" + (f" ± {half:.2f}" if len(values) > 1 else "")


def print_table(results, paper_table4: dict) -> None:
    print("\n| row | validation error | test error | paper (validation) |\n|---|---|---|---|")
    for name in dict.fromkeys(r["row"] for r in results["rows"]):
        rows = [r for r in results["rows"] if r["row"] == name]
        paper = paper_table4.get(name, "")
        print(f"| {name} | {summary([r['validation_error'] for r in rows])} | "
              f"{summary([r['test_error'] for r in rows])} | {paper} |")
    if any(len(r.get("per_direction_test_error", {})) > 1 for r in results["rows"]):
        print("\n| row | seed | direction | validation error | test error |\n|---|---|---|---|---|")
        for r in results["rows"]:
            for d, test_error in r.get("per_direction_test_error", {}).items():
                print(f"| {r['row']} | {r['seed']} | {d} | {r['per_direction_validation_error'][d]:.2f} | {test_error:.2f} |")
            print(f"| {r['row']} | {r['seed']} | average | {r['validation_error']:.2f} | {r['test_error']:.2f} |")
    if results.get("ablation"):
        print("\n| ablation | validation error | test error | per seed (validation) |\n|---|---|---|---|")
        for name in dict.fromkeys(r["row"] for r in results["ablation"]):
            rows = [r for r in results["ablation"] if r["row"] == name]
            print(f"| {name} | {summary([r['validation_error'] for r in rows])} | "
                  f"{summary([r['test_error'] for r in rows])} | "
                  f"{', '.join(format(r['validation_error'], '.2f') for r in rows)} |")
    if results["curve"]:
        print("\n| labels | row | validation error | test error |\n|---|---|---|---|")
        for r in results["curve"]:
            print(f"| {r['train_size']} | {r['row']} | {r['validation_error']:.2f} | {r['test_error']:.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())
