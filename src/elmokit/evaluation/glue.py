"""The small GLUE tasks and SICK, each with its official metric, for any representation.

Tasks (GLUE: Wang et al. 2019; SICK: Marelli et al. 2014, the SemEval-2014 files SentEval uses):

    task    sentences  target          metrics (x100)         GPT input (Radford et al. 2018, §3.3)
    cola    one        acceptable?     Matthews               single
    sst2    one        sentiment       accuracy               single
    mrpc    pair       paraphrase?     accuracy, F1           similarity
    stsb    pair       0-5 score       Pearson, Spearman      similarity
    rte     pair       entailment?     accuracy               entailment
    wnli    pair       entailment?     accuracy               entailment
    sick-e  pair       3-way label     accuracy               entailment
    sick-r  pair       1-5 score       Pearson, Spearman      similarity

A task's score is the mean of its metrics (GLUE's rule); the table's average is the mean of the
task scores.

Splits. GLUE's test labels are not public, so **GLUE's dev set is the test set** here, and the dev set
(for early stopping) is a slice held out of the training file: 10% of it (at least one example),
chosen by a permutation with the fixed seed ``DEV_SLICE_SEED`` -- the same examples every run, whatever
``--seeds`` says; the rest stays in file order. SST-2 is built from the SST trees (sentence roots only,
neutral dropped: 6,920 training sentences, not GLUE's 67k phrases); its test set is the SST dev
sentences (872, GLUE's SST-2 dev set). MRPC's training file is MSR's minus GLUE's dev pairs
(``dev_ids.tsv``). SICK has public test labels: train, trial (dev) and test of SemEval-2014.
MRPC's and STS-B's labelled test files are not used, so every GLUE column is a GLUE-dev number.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmokit.data_paths import need_file, shared_data
from elmokit.evaluation.sst import read_sst, sst_task
from elmokit.features import feature_source
from elmokit.tasks import metrics as M
from elmokit.tasks.data import DataFileError
from elmokit.tasks.pair_data import (
    PairData,
    read_cola,
    read_id_pairs,
    read_mrpc,
    read_nli_tsv,
    read_sick,
    read_stsb,
)
from elmokit.tasks.pair_model import PairFeatures, train_pair_model
from elmokit.transfer.finetune import FineTuneOptions
from elmokit.transfer.finetune_pairs import finetune_pairs

DEV_SLICE_SEED = 0
DEV_FRACTION = 0.1


@dataclass(frozen=True)
class GlueTask:
    name: str
    pair: bool
    regression: bool
    metrics: tuple[str, ...]
    gpt_input: str  # "single", "entailment" or "similarity"
    positive: str | None = None  # the class F1 is of


TASKS = {t.name: t for t in (
    GlueTask("cola", False, False, ("matthews",), "single"),
    GlueTask("sst2", False, False, ("accuracy",), "single"),
    GlueTask("mrpc", True, False, ("accuracy", "f1"), "similarity", positive="1"),
    GlueTask("stsb", True, True, ("pearson", "spearman"), "similarity"),
    GlueTask("rte", True, False, ("accuracy",), "entailment"),
    GlueTask("wnli", True, False, ("accuracy",), "entailment"),
    GlueTask("sick-e", True, False, ("accuracy",), "entailment"),
    GlueTask("sick-r", True, True, ("pearson", "spearman"), "similarity"),
)}
DEFAULT_TASKS = tuple(TASKS)


def task_metrics(task: GlueTask, predicted: Sequence, gold: Sequence) -> dict[str, float]:
    """Every metric of ``task``, x100, and ``score`` (their mean)."""
    functions: dict[str, Callable] = {"matthews": M.matthews, "accuracy": M.accuracy, "pearson": M.pearson,
                                      "spearman": M.spearman,
                                      "f1": lambda p, g: M.f1_positive(p, g, task.positive)}
    values = {name: functions[name](list(predicted), list(gold)) for name in task.metrics}
    values["score"] = float(np.mean(list(values.values())))
    return values


def dev_slice(count: int) -> tuple[list[int], list[int]]:
    """(train indices, dev indices) of a training file of ``count`` examples, both in file order."""
    size = max(1, int(round(DEV_FRACTION * count)))
    held = set(np.random.default_rng(DEV_SLICE_SEED).permutation(count)[:size].tolist())
    return [i for i in range(count) if i not in held], sorted(held)


def _folder(data_dir, *parts) -> Path:
    return Path(data_dir).joinpath(*parts) if data_dir is not None else shared_data(*parts)


def _need(path: Path) -> Path:
    return need_file(path, "the folder holding glue/, sick/ and sst/")


def _sst2(folder: Path, split: str) -> PairData:
    path = _need(folder / f"{split}.txt")
    sentences, labels = read_sst(path)
    kept, names = sst_task(sentences, labels, binary=True)
    return PairData([sentences[i] for i in kept], None, names, str(path))


def read_task(name: str, data_dir: str | os.PathLike | None = None) -> dict[str, PairData]:
    """{"train", "dev", "test"} of a task by the rules of the module docstring. ``data_dir``: the folder
    holding ``glue/``, ``sick/`` and ``sst/`` (default: the shared data folder)."""
    if name not in TASKS:
        raise DataFileError(f"unknown task {name!r}; known: {', '.join(TASKS)}")
    if name.startswith("sick"):
        folder = _folder(data_dir, "sick", "semeval2014")
        task = "entailment" if name == "sick-e" else "relatedness"
        return {split: read_sick(_need(folder / file), task) for split, file in
                (("train", "SICK_train.txt"), ("dev", "SICK_trial.txt"), ("test", "SICK_test_annotated.txt"))}
    if name == "sst2":
        folder = _folder(data_dir, "sst", "trees")
        train, test = _sst2(folder, "train"), _sst2(folder, "dev")
    else:
        folder = _folder(data_dir, "glue", name)
        if name == "cola":
            train, test = read_cola(_need(folder / "train.tsv")), read_cola(_need(folder / "dev.tsv"))
        elif name == "mrpc":
            exclude = read_id_pairs(_need(folder / "dev_ids.tsv"))
            train = read_mrpc(_need(folder / "msr_paraphrase_train.txt"), exclude=exclude)
            test = read_mrpc(_need(folder / "dev.tsv"))
        elif name == "stsb":
            train, test = read_stsb(_need(folder / "train.tsv")), read_stsb(_need(folder / "dev.tsv"))
        else:
            labels = ("entailment", "not_entailment") if name == "rte" else ("0", "1")
            train = read_nli_tsv(_need(folder / "train.tsv"), labels)
            test = read_nli_tsv(_need(folder / "dev.tsv"), labels)
    kept, held = dev_slice(len(train))
    return {"train": train.select(kept), "dev": train.select(held), "test": test}


def limit(splits: dict[str, PairData], max_train: int | None, max_eval: int | None) -> dict[str, PairData]:
    """The first ``max_train`` training examples and the first ``max_eval`` of dev and test (None: all)."""
    out = dict(splits)
    if max_train is not None:
        out["train"] = splits["train"].select(range(min(max_train, len(splits["train"]))))
    if max_eval is not None:
        for split in ("dev", "test"):
            out[split] = splits[split].select(range(min(max_eval, len(splits[split]))))
    return out


# ---------------------------------------------------------------------- runs and the table
def run_feature_task(rep, task: GlueTask, splits: dict[str, PairData], *, seed: int, cache_dir, log=None,
                     architecture: str = "infersent", **train_options) -> dict:
    """Frozen features of ``rep`` into the pair model (``elmokit.tasks.pair_model``); one seed.
    ``architecture="esim"`` applies to the pair tasks; single-sentence tasks always use InferSent's encoder."""

    features = {}
    for split, data in splits.items():
        first = feature_source(rep, data.first, cache_dir)
        second = feature_source(rep, data.second, cache_dir) if task.pair else None
        features[split] = PairFeatures(first, second)
    predictor, result = train_pair_model(
        (features["train"], splits["train"].targets), (features["dev"], splits["dev"].targets), pair=task.pair,
        regression=task.regression, num_layers=rep.num_layers, dim=rep.dim, seed=seed, log=log,
        architecture=architecture if task.pair else "infersent",
        metric=lambda p, g: task_metrics(task, p, g)["score"], **train_options)
    predicted = {split: predictor.predict(features[split], len(splits[split])) for split in ("dev", "test")}
    return {"dev": task_metrics(task, predicted["dev"], splits["dev"].targets),
            "test": task_metrics(task, predicted["test"], splits["test"].targets),
            "best_epoch": result.best_epoch, "epochs_run": len(result.history), "stopped_early": result.stopped_early,
            "layer_weights": predictor.model.layer_weights(), "model": predictor.model.config.to_dict(),
            "history": result.history}


def run_finetune_task(folder, task: GlueTask, splits: dict[str, PairData], *, seed: int, options=None,
                      patience: int | None = None, log=None) -> dict:
    """Fine-tune the transformer ``folder`` with BERT's or GPT's input for the task
    (``elmokit.transfer.finetune_pairs``); one seed. ``options``: a ``FineTuneOptions`` (its seed is replaced)."""


    options = dataclasses.replace(options or FineTuneOptions(), seed=seed)
    kind = task.gpt_input

    def columns(data: PairData):
        return data.first, data.second, data.targets

    tuned, result = finetune_pairs(folder, columns(splits["train"]), columns(splits["dev"]), kind=kind,
                                   regression=task.regression, options=options, patience=patience, log=log,
                                   metric=lambda p, g: task_metrics(task, p, g)["score"])
    predicted = {split: tuned.predict(splits[split].first, splits[split].second) for split in ("dev", "test")}
    return {"dev": task_metrics(task, predicted["dev"], splits["dev"].targets),
            "test": task_metrics(task, predicted["test"], splits["test"].targets),
            "best_epoch": result.best_epoch, "epochs_run": len(result.history), "stopped_early": result.stopped_early,
            "input": "gpt" if tuned.model.causal else "bert", "input_kind": kind,
            "options": dataclasses.asdict(options), "history": result.history}


def summarize(runs: Sequence[dict]) -> dict:
    """Mean and spread (sample standard deviation; 0 for one run) of every test metric over seeds."""
    names = list(runs[0]["test"])
    values = {name: [run["test"][name] for run in runs] for name in names}
    return {"mean": {n: float(np.mean(v)) for n, v in values.items()},
            "std": {n: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for n, v in values.items()},
            "seeds": len(runs)}


def format_table(rows: Sequence[dict], tasks: Sequence[str]) -> str:
    """rows: {"representation", "tasks": {task: summarize(...)}} -> a GLUE-style text table.

    A cell shows the task's metrics joined by '/' (MRPC acc/F1, STS-B Pearson/Spearman), then
    '±' the spread of the task score over seeds when there are several; avg is the mean task score."""
    width = max([len("representation")] + [len(r["representation"]) for r in rows])
    cells = []
    for row in rows:
        line, scores = [], []
        for name in tasks:
            summary = row["tasks"].get(name)
            if summary is None:
                line.append("-")
                continue
            mean = summary["mean"]
            text = "/".join(f"{mean[m]:.1f}" for m in TASKS[name].metrics)
            if summary["seeds"] > 1:
                text += f"±{summary['std']['score']:.1f}"
            line.append(text)
            scores.append(mean["score"])
        line.append(f"{np.mean(scores):.1f}" if len(scores) == len(tasks) else "-")
        cells.append(line)
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate([*tasks, "avg"])]
    header = f"{'representation':<{width}}  " + "  ".join(f"{h:>{w}}" for h, w in zip([*tasks, "avg"], widths))
    lines = [header]
    for row, line in zip(rows, cells):
        lines.append(f"{row['representation']:<{width}}  " + "  ".join(f"{c:>{w}}" for c, w in zip(line, widths)))
    return "\n".join(lines)
