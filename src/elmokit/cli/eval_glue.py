"""`elmokit eval glue` and `elmokit eval squad`: any representation on the small GLUE tasks and SICK, and on
SQuAD span extraction, one table row per representation.

    elmokit eval glue --model default --tasks rte,mrpc,stsb --seeds 0,1 --out runs/glue-elmo
    elmokit eval glue --vectors runs/static/sgns --vectors glove.txt --max-train 500 --epochs 2
    elmokit eval glue --recipe finetune --model runs/bert/model --tasks cola,rte
    elmokit eval squad --model default --max-train 2000 --out runs/squad-elmo

glue: the feature recipe trains InferSent's pair model on the frozen layers of each representation
(``elmokit.tasks.pair_model``); the fine-tune recipe fine-tunes each transformer folder with BERT's
or GPT's input (``elmokit.transfer.finetune_pairs``). Splits and metrics: ``elmokit.evaluation.glue``.
squad: a DrQA-style reader (``elmokit.tasks.span_reader``) or BERT's span head
(``elmokit.transfer.finetune_span``); splits: ``elmokit.evaluation.squad``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import re
import tempfile
from pathlib import Path

from elmokit.cli.common import (
    add_threads_argument,
    apply_threads,
    non_negative_int,
    number_list,
    positive_float,
    positive_int,
    probability,
)
from elmokit.errors import UserError
from elmokit.evaluation.datasets import GLUE_TASKS

RECIPE_DEFAULTS = {"feature": {"epochs": 10, "patience": 3, "lr": 1e-3},
                   "finetune": {"epochs": 3, "patience": None, "lr": 5e-5}}


def _add_common(p, *, recipe_help: str, data_help: str, out_name: str) -> None:
    what = p.add_argument_group("what to evaluate (one table row each; default: --model default)")
    what.add_argument("--model", action="append", default=[], metavar="MODEL",
                      help="'default', an ELMo model folder, or a transformers folder; repeatable")
    what.add_argument("--vectors", action="append", default=[], metavar="DIR|FILE",
                      help="a static table (run folder of `elmokit static train` or a word2vec/GloVe file); repeatable")
    p.add_argument("--recipe", choices=tuple(RECIPE_DEFAULTS), default="feature", help=recipe_help)
    p.add_argument("--seeds", type=number_list(non_negative_int), default="0",
                   help="comma-separated training seeds; several give the mean and spread (default: 0)")
    p.add_argument("--max-train", type=positive_int, default=None, help="use only the first N training examples "
                   "(a quick run)")
    p.add_argument("--max-eval", type=positive_int, default=None, help="use only the first N dev and test examples")
    train = p.add_argument_group("training")
    train.add_argument("--epochs", type=positive_int, default=None,
                       help="most epochs (default: feature 10, finetune 3 as BERT)")
    train.add_argument("--patience", type=positive_int, default=None,
                       help="stop after this many epochs without a better dev score (default: feature 3, finetune never)")
    train.add_argument("--batch-size", type=positive_int, default=32, help="examples per step (default: %(default)s)")
    train.add_argument("--lr", type=positive_float, default=None,
                       help="learning rate (default: feature 1e-3 Adam, finetune 5e-5 AdamW as BERT)")
    train.add_argument("--hidden-dim", type=positive_int, default=None,
                       help="feature: BiLSTM size per direction (default: 64 glue, 32 squad)")
    train.add_argument("--dropout", type=probability, default=0.1, help="dropout (default: %(default)s)")
    p.add_argument("--data-dir", default=None, help=data_help)
    p.add_argument("--cache-dir", default=None, help="keep the frozen features here (default: a temporary folder)")
    p.add_argument("--out", default=None, metavar="DIR", help="write results.json, table.txt and one JSON per run "
                   f"(runs/ROW/{out_name}.seedN.json) to this folder (replaced atomically)")
    add_threads_argument(p)


def register_glue(sub) -> None:
    p = sub.add_parser(
        "glue", help="GLUE (CoLA, SST-2, MRPC, STS-B, RTE, WNLI) and SICK: one row per representation",
        description="Each task with its official metric (CoLA Matthews; SST-2, RTE, WNLI, SICK-E accuracy; MRPC "
        "accuracy/F1; STS-B, SICK-R Pearson/Spearman), x100. GLUE's test labels are not public: GLUE's dev set "
        "is the test set and a fixed 10% slice of the training file (the same every run) is the dev set for early "
        "stopping; SST-2 is built from the SST trees (its test set: the SST dev sentences); SICK uses its "
        "SemEval-2014 train/trial/test files. A cell is the mean over --seeds, with the spread (sample standard "
        "deviation) of the task score when there are several; avg is the mean task score.")
    _add_common(p, recipe_help="feature: frozen layers into the [u; v; |u-v|; u*v] BiLSTM-max model (default); "
                "finetune: fine-tune each --model transformer folder with BERT's or GPT's pair input",
                data_help="the folder holding glue/, sick/ and sst/ (default: $ELMOKIT_SHARED/data or ../shared/data)",
                out_name="TASK")
    p.add_argument("--tasks", default=",".join(GLUE_TASKS), help=f"comma-separated, from: {', '.join(GLUE_TASKS)} "
                   "(default: all)")
    p.add_argument("--architecture", choices=("infersent", "esim"), default="infersent",
                   help="feature: the pair model, InferSent's [u; v; |u-v|; u*v] of max-pooled BiLSTM states (default) "
                   "or ESIM's soft alignment of the two sentences' words (pair tasks; single sentences use InferSent's)")
    p.add_argument("--mlp-dim", type=positive_int, default=128, help="feature: hidden layer of the classifier "
                   "(default: %(default)s)")
    p.add_argument("--aux-lm", action="store_true", help="finetune, GPT-type models: add GPT's auxiliary LM loss "
                   "(eq. 5, lambda 0.5)")
    p.set_defaults(func=run_glue)


def register_squad(sub) -> None:
    p = sub.add_parser(
        "squad", help="SQuAD v1.1 span extraction (official EM/F1): one row per representation",
        description="The official SQuAD v1.1 dev set split by article (its train set is not public here): every 4th "
        "of the 48 articles is the test set (12), of the other 36 every 6th is the dev set for early stopping (6), "
        "the rest train (30). The feature recipe trains a DrQA-style reader (aligned question attention, BiLSTMs, "
        "bilinear start/end) on the frozen layers; the finetune recipe trains BERT's start/end vectors with the "
        "encoder, long passages in overlapping windows scored by the maximum-context rule. EM and F1 by the "
        "official script's rules, on the test articles, mean over --seeds (± the spread of F1).")
    _add_common(p, recipe_help="feature: a DrQA-style reader on the frozen layers (default); finetune: BERT's span "
                "head on each --model transformer encoder folder",
                data_help="the folder with dev-v1.1.json[.xz] (default: $ELMOKIT_SHARED/data/squad_v1.1)",
                out_name="squad")
    p.add_argument("--max-answer-words", type=positive_int, default=None,
                   help="longest answer considered, in words (default: feature 15 as DrQA, finetune 30 as BERT)")
    p.set_defaults(func=run_squad)


def _settings(args) -> tuple[int, int | None, float]:
    """(epochs, patience, learning rate) of the flags, the recipe's defaults where not given."""
    if len(set(args.seeds)) != len(args.seeds):
        raise UserError(f"--seeds {','.join(map(str, args.seeds))}: a seed is repeated; give each seed once")
    defaults = RECIPE_DEFAULTS[args.recipe]
    patience = args.patience if args.patience is not None else defaults["patience"]
    return args.epochs or defaults["epochs"], patience, args.lr or defaults["lr"]


def _write(out, command_name: str, runs: list[dict], run_file, summary: dict, text: str, args) -> None:
    """results.json, table.txt and one JSON per run into ``out`` by the one output policy."""
    from elmokit.io import output_directory

    command = ["elmokit"] + list(getattr(args, "argv", []))
    with output_directory(out, command=command_name) as folder:
        for run in runs:
            path = folder / "runs" / _slug(run["representation"]) / run_file(run)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(_clean({**run, "command": command}), indent=1, default=_jsonable) + "\n",
                            encoding="utf-8")
        (folder / "results.json").write_text(json.dumps(_clean({"command": command, **summary}), indent=1,
                                                        default=_jsonable) + "\n", encoding="utf-8")
        (folder / "table.txt").write_text(text + "\n", encoding="utf-8")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "row"


def _rows(args) -> list[tuple[str, object]]:
    """(row name, what to run): a loaded representation (feature) or a transformers folder (finetune)."""
    from elmokit.representation import is_transformer_folder, load_representation, spec_from_flags

    models = args.model or ([] if args.vectors else ["default"])
    if args.recipe == "finetune":
        if args.vectors:
            raise UserError("--recipe finetune fine-tunes transformer folders: give them with --model, not --vectors")
        for folder in models:
            if not is_transformer_folder(folder):
                raise UserError(f"--model {folder}: not a transformers model folder (config.json with model_type); "
                                "--recipe finetune needs one (or use --recipe feature)")
        paths = [Path(folder).resolve() for folder in models]
        # `elmokit pretrain` writes RUN/model/: name such a folder by its run
        names = [f"finetune:{p.parent.name}/{p.name}" if p.name == "model" else f"finetune:{p.name}" for p in paths]
        return list(zip(_distinct(names), map(str, paths)))
    specs = [spec_from_flags(model=m) for m in models] + [spec_from_flags(vectors=v) for v in args.vectors]
    reps = [load_representation(spec) for spec in specs]
    return list(zip(_distinct([rep.name for rep in reps]), reps))


def _distinct(names: list[str]) -> list[str]:
    """Row names as given, a repeated one numbered (#2, #3, ...) so that rows and their run files stay apart."""
    seen: dict[str, int] = {}
    out = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return out


def run_glue(args: argparse.Namespace) -> int:
    from elmokit.evaluation.glue import TASKS, format_table, limit, read_task, run_feature_task, run_finetune_task, summarize
    from elmokit.io import check_output
    from elmokit.transfer.finetune import FineTuneOptions

    apply_threads(args)
    log = logging.getLogger("elmokit.glue").info
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in TASKS]
    if not tasks or unknown:
        raise UserError(f"--tasks {args.tasks!r}: unknown {', '.join(unknown) or '(none given)'}; known: {', '.join(TASKS)}")
    if args.aux_lm and args.recipe != "finetune":
        raise UserError("--aux-lm applies to --recipe finetune")
    if args.architecture != "infersent" and args.recipe != "feature":
        raise UserError("--architecture applies to --recipe feature")
    if args.out:
        check_output(args.out, command="eval glue")  # refuse a bad --out before hours of training
    epochs, patience, lr = _settings(args)
    rows = _rows(args)
    splits = {name: limit(read_task(name, args.data_dir), args.max_train, args.max_eval) for name in tasks}
    table, runs = [], []
    with tempfile.TemporaryDirectory(prefix="elmokit-glue-") as scratch:
        cache_dir = args.cache_dir or scratch
        for row_name, target in rows:
            summaries = {}
            for name in tasks:
                task, per_seed = TASKS[name], []
                for seed in args.seeds:
                    log(f"{row_name} {name} seed {seed}: {len(splits[name]['train'])} train, "
                        f"{len(splits[name]['dev'])} dev, {len(splits[name]['test'])} test")
                    if args.recipe == "feature":
                        run = run_feature_task(target, task, splits[name], seed=seed, cache_dir=cache_dir, log=log,
                                               max_epochs=epochs, patience=patience, batch_size=args.batch_size,
                                               learning_rate=lr, hidden_dim=args.hidden_dim or 64, mlp_dim=args.mlp_dim,
                                               dropout=args.dropout, architecture=args.architecture)
                    else:
                        options = FineTuneOptions(epochs=epochs, batch_size=args.batch_size, learning_rate=lr,
                                                  dropout=args.dropout, aux_lm=args.aux_lm)
                        run = run_finetune_task(target, task, splits[name], seed=seed, options=options,
                                                patience=patience, log=log)
                    run.update({"representation": row_name, "task": name, "seed": seed, "recipe": args.recipe,
                                "sizes": {k: len(v) for k, v in splits[name].items()}})
                    per_seed.append(run)
                    runs.append(run)
                summaries[name] = summarize(per_seed)
            table.append({"representation": row_name, "tasks": summaries})
    text = format_table(table, tasks)
    how = f"feature recipe, {args.architecture}" if args.recipe == "feature" else "finetune recipe"
    print(f"GLUE-style table ({how}; test = GLUE dev, SICK test; x100; seeds {args.seeds})")
    print(text)
    if args.out:
        summary = {"recipe": args.recipe, "architecture": args.architecture if args.recipe == "feature" else None,
                   "tasks": tasks, "seeds": args.seeds, "max_train": args.max_train,
                   "max_eval": args.max_eval, "rows": table}
        _write(args.out, "eval glue", runs, lambda run: f"{run['task']}.seed{run['seed']}.json", summary, text, args)
    return 0


def run_squad(args: argparse.Namespace) -> int:
    from elmokit.evaluation.glue import summarize
    from elmokit.evaluation.squad import format_squad_table, run_feature_squad, run_finetune_squad, squad_splits
    from elmokit.io import check_output
    from elmokit.transfer.finetune import FineTuneOptions

    apply_threads(args)
    log = logging.getLogger("elmokit.squad").info
    if args.out:
        check_output(args.out, command="eval squad")
    epochs, patience, lr = _settings(args)
    if args.recipe == "feature" and args.lr is None:
        lr = 2e-3  # the reader's Adamax (DrQA), at Adamax's own default rate
    rows = _rows(args)
    splits = squad_splits(args.data_dir, max_train=args.max_train, max_eval=args.max_eval)
    table, runs = [], []
    with tempfile.TemporaryDirectory(prefix="elmokit-squad-") as scratch:
        for row_name, target in rows:
            per_seed = []
            for seed in args.seeds:
                log(f"{row_name} squad seed {seed}: {len(splits['train'])} train, {len(splits['dev'])} dev, "
                    f"{len(splits['test'])} test questions")
                if args.recipe == "feature":
                    run = run_feature_squad(target, splits, seed=seed, cache_dir=args.cache_dir or scratch, log=log,
                                            max_epochs=epochs, patience=patience, batch_size=args.batch_size,
                                            learning_rate=lr, hidden_dim=args.hidden_dim or 32, dropout=args.dropout,
                                            max_answer_words=args.max_answer_words or 15)
                else:
                    options = FineTuneOptions(epochs=epochs, batch_size=args.batch_size, learning_rate=lr,
                                              dropout=args.dropout)
                    run = run_finetune_squad(target, splits, seed=seed, options=options, patience=patience, log=log,
                                             max_answer_words=args.max_answer_words or 30)
                run.update({"representation": row_name, "task": "squad", "seed": seed, "recipe": args.recipe,
                            "sizes": {k: len(v) for k, v in splits.items()}})
                per_seed.append(run)
                runs.append(run)
            table.append({"representation": row_name, "summary": summarize(per_seed)})
    text = format_squad_table(table)
    print(f"SQuAD v1.1 ({args.recipe} recipe; test = every 4th article; x100; seeds {args.seeds})")
    print(text)
    if args.out:
        summary = {"recipe": args.recipe, "seeds": args.seeds, "max_train": args.max_train, "max_eval": args.max_eval,
                   "rows": table}
        _write(args.out, "eval squad", runs, lambda run: f"squad.seed{run['seed']}.json", summary, text, args)
    return 0


def _jsonable(value):
    return float(value) if hasattr(value, "__float__") else str(value)


def _clean(value):
    """nan (a correlation of constant predictions) -> null: the files stay valid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value
