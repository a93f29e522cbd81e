"""SST-5 and SST-2 sentence classification with and without ELMo (Peters et al. 2018, Table 1 row SST-5).

SST (Socher et al. 2013): PTB-style trees ``(3 (2 It) (4 ...))``, one per line; the sentence is
the leaves, its label the root's. Only whole sentences (roots) are used for training, not the
phrase labels. SST-5 keeps labels 0-4; SST-2 drops neutral (2) and maps 0, 1 -> negative,
3, 4 -> positive.

Trains the classifier of :mod:`elmokit.tasks.classifier` on the root labels of the SST train
trees, keeps the epoch with the best dev accuracy, and reports test accuracy and the learned
layer weights. The frozen layers of every sentence are computed once into a ``FeatureCache``;
SST-2 reuses the SST-5 caches (its sentences are a subset).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from elmokit.data_paths import need_file, shared_data
from elmokit.features import FeatureCache, FeatureSubset
from elmokit.tasks.classifier import train_classifier
from elmokit.tasks.data import DataFileError, read_lines

# Table 1 of Peters et al. (2018), SST-5 test accuracy: BCN baseline and BCN + ELMo.
PAPER_SST5 = {"baseline": 51.4, "elmo": 54.7}


class TreeError(DataFileError):
    """A malformed SST tree; the message names the file and line."""


# ---------------------------------------------------------------------- SST
_TREE_TOKEN = re.compile(r"\(|\)|[^\s()]+")
_PTB_BRACKETS = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


def _unescape(word: str) -> str:
    """PTB escapes back to text: -LRB- -> (, 1\\/2 -> 1/2, \\* -> *."""
    return _PTB_BRACKETS.get(word, word.replace("\\/", "/").replace("\\*", "*"))


def parse_tree(text: str) -> tuple[int, list[str]]:
    """``(3 (2 It) (4 works))`` -> (3, ["It", "works"]). Raises ValueError saying what is wrong."""
    tokens = _TREE_TOKEN.findall(text)
    position = 0
    leaves: list[str] = []

    def node() -> int:
        nonlocal position
        if position >= len(tokens) or tokens[position] != "(":
            raise ValueError(f"expected '(' at token {position + 1}")
        label_text = tokens[position + 1] if position + 1 < len(tokens) else ""
        if not label_text.isdigit():
            raise ValueError(f"expected a numeric label after '(' at token {position + 1}, found {label_text!r}")
        position += 2
        if position < len(tokens) and tokens[position] not in ("(", ")"):
            # a leaf; a few SST leaves hold several words ("8 1\/2"): each becomes a token
            while position < len(tokens) and tokens[position] not in ("(", ")"):
                leaves.append(_unescape(tokens[position]))
                position += 1
        else:
            children = 0
            while position < len(tokens) and tokens[position] == "(":
                node()
                children += 1
            if children == 0:
                raise ValueError(f"node with label {label_text} has neither a word nor children")
        if position >= len(tokens) or tokens[position] != ")":
            raise ValueError(f"missing ')' at token {position + 1}")
        position += 1
        return int(label_text)

    label = node()
    if position != len(tokens):
        raise ValueError(f"text after the tree's closing ')' at token {position + 1}")
    return label, leaves


def read_sst(path: str | os.PathLike) -> tuple[list[list[str]], list[int]]:
    """One tree per line -> (sentences, root labels 0-4)."""
    sentences, labels = [], []
    for line_number, line in read_lines(path, TreeError):
        if not line.strip():
            continue
        try:
            label, leaves = parse_tree(line)
        except ValueError as error:
            raise TreeError(f"{path}:{line_number}: malformed tree: {error}") from None
        if not 0 <= label <= 4:
            raise TreeError(f"{path}:{line_number}: root label {label} is not a sentiment 0-4")
        sentences.append(leaves)
        labels.append(label)
    return sentences, labels


SST5_LABELS = ("very negative", "negative", "neutral", "positive", "very positive")
SST2_LABELS = ("negative", "positive")


def sst_task(sentences: list[list[str]], labels: list[int], *, binary: bool) -> tuple[list[int], list[str]]:
    """(indices kept, label names) for SST-5 (all) or SST-2 (neutral dropped, 0-1 neg, 3-4 pos)."""
    if not binary:
        return list(range(len(sentences))), [SST5_LABELS[y] for y in labels]
    kept = [i for i, y in enumerate(labels) if y != 2]
    return kept, [SST2_LABELS[int(labels[i] > 2)] for i in kept]


def sst_dir(data_dir: str | os.PathLike | None = None) -> Path:
    folder = Path(data_dir) if data_dir is not None else shared_data("sst", "trees")
    for split in ("train", "dev", "test"):
        need_file(folder / f"{split}.txt", "the SST trees folder")
    return folder


def evaluate_sst(
    rep, *, data_dir=None, tasks: Sequence[str] = ("sst5", "sst2"), variants: Sequence[str] = ("baseline", "elmo"),
    cache_dir: str | os.PathLike | None = None, max_train: int | None = None, log=None, word_table=None,
    **train_options,
) -> dict:
    """{"tasks": {task: {variant: {"dev_accuracy", "test_accuracy", "layer_weights", "history"}}}}."""
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
                    use_elmo=use_elmo, elmo_layers=rep.num_layers, elmo_dim=rep.dim, log=log, word_table=word_table,
                    **train_options)
                best = max(range(len(history)), key=lambda e: history[e]["dev_accuracy"])  # the first best, as kept
                results[task][variant] = {
                    "dev_accuracy": history[best]["dev_accuracy"],
                    "best_epoch": best + 1, "epochs_run": len(history),
                    "test_accuracy": classifier.accuracy(*data["test"], features["test"]),
                    "layer_weights": classifier.model.layer_weights(),
                    "model_config": classifier.model.config.to_dict(),  # as trained (a table sets word_dim)
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
