"""SST-5 and SST-2 sentence classification with and without ELMo (Peters et al. 2018, Table 1 row SST-5).

Trains the classifier of :mod:`elmokit.tasks.classifier` on the root labels of the SST train
trees (sentence level only; the phrase labels are not used), keeps the epoch with the best dev
accuracy, and reports test accuracy and the learned layer weights. The frozen layers of every
sentence are computed once into a ``FeatureCache``; SST-2 reuses the SST-5 caches (its sentences
are a subset).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Sequence

from elmokit.tasks.classifier import PAPER_SST5, FeatureSubset, read_sst, sst_task, train_classifier


def sst_dir(data_dir: str | os.PathLike | None = None) -> Path:
    from elmokit.evaluation.word_similarity import shared_dir

    folder = Path(data_dir) if data_dir is not None else shared_dir() / "data" / "sst" / "trees"
    for split in ("train", "dev", "test"):
        if not (folder / f"{split}.txt").is_file():
            raise FileNotFoundError(f"{folder / (split + '.txt')}: no such file; fix: pass --data-dir (the SST trees "
                                    f"folder) or set ELMOKIT_SHARED")
    return folder


def evaluate_sst(
    rep, *, data_dir=None, tasks: Sequence[str] = ("sst5", "sst2"), variants: Sequence[str] = ("baseline", "elmo"),
    cache_dir: str | os.PathLike | None = None, max_train: int | None = None, log=None, **train_options,
) -> dict:
    """{"tasks": {task: {variant: {"dev_accuracy", "test_accuracy", "layer_weights", "history"}}}}."""
    from elmokit.tasks.features import FeatureCache

    folder = sst_dir(data_dir)
    splits = {split: read_sst(folder / f"{split}.txt") for split in ("train", "dev", "test")}
    if max_train is not None:
        splits["train"] = (splits["train"][0][:max_train], splits["train"][1][:max_train])
    with tempfile.TemporaryDirectory(prefix="elmokit-sst-") as scratch:
        caches = {}
        if "elmo" in variants:
            root = Path(cache_dir) if cache_dir is not None else Path(scratch)
            caches = {split: FeatureCache.for_dataset(rep, splits[split][0], root) for split in splits}
        results: dict = {}
        for task in tasks:
            data, features = {}, {}
            for split, (sentences, labels) in splits.items():
                kept, names = sst_task(sentences, labels, binary=task == "sst2")
                data[split] = ([sentences[i] for i in kept], names)
                features[split] = FeatureSubset(caches[split], kept) if caches else None
            results[task] = {}
            for variant in variants:
                use_elmo = variant == "elmo"
                if log:
                    log(f"{task} {variant}: {len(data['train'][0])} train sentences")
                classifier, history = train_classifier(
                    data["train"], data["dev"], train_features=features["train"], dev_features=features["dev"],
                    use_elmo=use_elmo, elmo_layers=rep.num_layers, elmo_dim=rep.dim, log=log, **train_options)
                results[task][variant] = {
                    "dev_accuracy": max(h["dev_accuracy"] for h in history),
                    "test_accuracy": classifier.accuracy(*data["test"], features["test"]),
                    "layer_weights": classifier.model.layer_weights(),
                    "sizes": {split: len(d[0]) for split, d in data.items()},
                    "history": history,
                }
    return {"representation": rep.name, "num_layers": rep.num_layers, "dim": rep.dim,
            "training": "sentence-level roots only", "train_options": train_options, "max_train": max_train,
            "tasks": results}


def format_sst_table(result: dict) -> str:
    lines = [f"SST sentence classification ({result['representation']}; BiLSTM + max/mean pooling; "
             f"trained on root labels only)",
             f"{'task':<6} {'variant':<9} {'dev acc':>8} {'test acc':>8}  layer weights (softmax w), gamma"]
    for task, variants in result["tasks"].items():
        for variant, row in variants.items():
            weights = row["layer_weights"]
            shown = "" if weights is None else (", ".join(f"{w:.3f}" for w in weights["weights"])
                                                + f"; gamma {weights['gamma']:.3f}")
            lines.append(f"{task:<6} {variant:<9} {row['dev_accuracy']:>8.2f} {row['test_accuracy']:>8.2f}  {shown}")
    lines.append(f"paper (Table 1, SST-5 test, BCN): baseline {PAPER_SST5['baseline']}, +ELMo {PAPER_SST5['elmo']}")
    return "\n".join(lines)
