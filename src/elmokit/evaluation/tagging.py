"""Downstream tagging benchmarks: UPOS accuracy on UD English-EWT, NER span F1 on WikiANN-en,
WNUT-17 and (when present) CoNLL-2003, each with a representation and without (the baseline).

Peters et al. (2018) report NER on CoNLL-2003 (Table 1) and POS on the PTB (Table 6); these are
the openly licensed sets beside them. NER F1 is seqeval's strict span F1 (IOB2), as the
results say. Each run trains the BiLSTM-CRF of :mod:`elmokit.tasks.tagger`, early-stopped on dev,
and reports dev and test scores plus the learned layer weights (softmax(w), gamma).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elmokit.data_paths import shared_data
from elmokit.tasks.data import TaggedCorpus, read_conll, read_conllu
from elmokit.tasks.tagger import TaggerConfig, TrainOptions, main_metric, train_tagger

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaggingDataset:
    name: str
    task: str  # "pos" or "ner"
    folder: str  # under <shared>/data
    train: str
    dev: str
    test: str
    token_prefix: str = ""
    optional: bool = False  # skipped quietly when absent (licence-restricted sets)


DATASETS = {
    "ewt": TaggingDataset("ewt", "pos", "ud_english_ewt", "en_ewt-ud-train.conllu", "en_ewt-ud-dev.conllu",
                          "en_ewt-ud-test.conllu"),
    "wikiann": TaggingDataset("wikiann", "ner", "wikiann_en", "train.txt", "dev.txt", "test.txt", token_prefix="en:"),
    "wnut17": TaggingDataset("wnut17", "ner", "wnut17", "wnut17train.conll", "emerging.dev.conll",
                             "emerging.test.annotated"),
    "conll2003": TaggingDataset("conll2003", "ner", "conll2003_en", "train.txt", "valid.txt", "test.txt", optional=True),
}
POS_DATASETS = ["ewt"]
NER_DATASETS = ["wikiann", "wnut17", "conll2003"]


class BenchmarkDataError(FileNotFoundError):
    """A benchmark data folder or file is missing; the message says where it was looked for."""


def load_dataset(dataset: TaggingDataset, data_dir: str | os.PathLike | None = None) -> dict[str, TaggedCorpus] | None:
    """train/dev/test corpora; None for an optional set that is absent."""
    folder = Path(data_dir) if data_dir is not None else shared_data()
    folder = folder / dataset.folder
    paths = {split: folder / getattr(dataset, split) for split in ("train", "dev", "test")}
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        if dataset.optional:
            return None
        raise BenchmarkDataError(f"{dataset.name}: missing {', '.join(missing)}; fix: set ELMOKIT_SHARED to the "
                                 "shared folder, or pass --data-dir (the folder holding the data sets)")
    if dataset.task == "pos":
        return {split: read_conllu(path) for split, path in paths.items()}
    return {split: read_conll(path, token_prefix=dataset.token_prefix) for split, path in paths.items()}


def run_benchmark(
    dataset_names: Sequence[str],
    representation=None,
    *,
    representation_spec: dict | None = None,
    baseline: bool = True,
    options: TrainOptions | None = None,
    config_changes: dict | None = None,
    max_train_sentences: int | None = None,
    max_eval_sentences: int | None = None,
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    log=None,
) -> list[dict[str, Any]]:
    """Train and score a tagger per data set, with the representation and (``baseline``) without.

    ``max_train_sentences`` / ``max_eval_sentences`` take the first N sentences of train and of
    dev/test (quick runs; the results record it).
    """
    log = log or logger.info
    options = options or TrainOptions()
    results = []
    for name in dataset_names:
        if name not in DATASETS:
            raise ValueError(f"unknown tagging data set {name!r}; known: {', '.join(DATASETS)}")
        dataset = DATASETS[name]
        corpora = load_dataset(dataset, data_dir)
        if corpora is None:
            log(f"{name}: not present, skipped")
            continue
        train = corpora["train"].subset(max_train_sentences)
        dev = corpora["dev"].subset(max_eval_sentences)
        test = corpora["test"].subset(max_eval_sentences)
        systems = []
        if representation is not None:
            systems.append(("elmo", representation))
        if baseline or representation is None:
            systems.append(("none", None))
        for mode, rep in systems:
            changes = dict(config_changes or {})
            if rep is None:
                changes.update(elmo="none", elmo_at_output=False, fine_tune=False)
            config = TaggerConfig(
                **{**dict(task=dataset.task, scheme="BIO" if dataset.task == "ner" else None,
                          elmo_layers=rep.num_layers if rep is not None else 0,
                          elmo_dim=rep.dim if rep is not None else 0,
                          representation=(representation_spec or {}) if rep is not None else {},
                          representation_name=rep.name if rep is not None else ""),
                   **changes})
            label = rep.name if rep is not None else "no representation (baseline)"
            log(f"{name}: training with {label} on {len(train)} sentences "
                f"({train.num_tokens} tokens), dev {len(dev)}, test {len(test)}")
            started = time.perf_counter()
            tagger = train_tagger(train, dev, config, representation=rep, options=options,
                                  cache_dir=cache_dir, log=lambda m, name=name, mode=mode: log(f"{name} [{mode}] {m}"))
            test_result = tagger.evaluate(test)
            dev_result = tagger.history[tagger.best_epoch - 1]["dev"]
            results.append({
                "dataset": name, "task": dataset.task, "representation": rep.name if rep is not None else "none",
                "elmo": config.elmo, "metric": dev_result["metric"],
                "dev": dev_result, "test": test_result,
                "dev_score": main_metric(dev_result, dataset.task), "test_score": main_metric(test_result, dataset.task),
                "best_epoch": tagger.best_epoch, "epochs_run": len(tagger.history),
                "mixing_weights": tagger.mixing_weights(),
                "train_sentences": len(train), "dev_sentences": len(dev), "test_sentences": len(test),
                "seconds": round(time.perf_counter() - started, 1),
                "config": dataclasses.asdict(config),
                "notes": corpora["train"].notes,
            })
    return results


def format_table(results: Sequence[dict[str, Any]]) -> str:
    """One row per (data set, representation): dev and test score, epochs, layer weights."""
    header = ["dataset", "representation", "metric", "dev", "test", "best epoch", "softmax(w) / gamma"]
    rows = []
    for r in results:
        mix = r["mixing_weights"].get("input")
        weights = f"[{', '.join(f'{w:.2f}' for w in mix['softmax_w'])}] / {mix['gamma']:.2f}" if mix else "-"
        metric = "accuracy" if r["task"] == "pos" else "span F1 (strict)"
        rows.append([r["dataset"], r["representation"], metric, f"{100 * r['dev_score']:.2f}",
                     f"{100 * r['test_score']:.2f}", f"{r['best_epoch']}/{r['epochs_run']}", weights])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
