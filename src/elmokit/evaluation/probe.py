"""Linear POS probes per layer (Peters et al. 2018, section 5.3 and Table 6).

For each layer j of a frozen Representation, a softmax regression (a linear classifier, no
hidden layer) predicts the UPOS tag of every token from that layer's vector alone. The weight
decay is chosen by dev accuracy; the chosen model's test accuracy is reported. A layer whose
vectors encode syntax well gives a high accuracy.

Deviations from the paper, stated: the paper probes the Penn Treebank WSJ (45 PTB tags); the
data here is UD English-EWT (17 UPOS tags, web text; ``../shared/data/ud_english_ewt``), so its
numbers are a reference point, not a target. Features are standardised with the train mean and
standard deviation (a linear map, so the probe stays linear) to keep L-BFGS well conditioned.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from elmokit.data_paths import need_file, shared_data
from elmokit.errors import UserError
from elmokit.features import stack_token_features
from elmokit.tasks.data import read_conllu

# Table 6 of Peters et al. (2018), POS tagging accuracy (PTB WSJ test) of a linear probe per layer.
PAPER_TABLE6_POS = {1: 97.3, 2: 96.8}  # biLM first layer, second layer
DEFAULT_WEIGHT_DECAYS = (0.0, 1e-5, 1e-4, 1e-3)

TaggedSentences = tuple[list[list[str]], list[list[str]]]  # (token lists, tag lists)


def ud_ewt_splits(data_dir: str | os.PathLike | None = None, *, max_sentences: int | None = None):
    """{"train"|"dev"|"test": (sentences, tags)} from UD English-EWT; optionally the first N of each."""
    folder = Path(data_dir) if data_dir is not None else shared_data("ud_english_ewt")
    splits = {}
    for split in ("train", "dev", "test"):
        # UPOS; multiword ranges and empty nodes skipped
        corpus = read_conllu(need_file(folder / f"en_ewt-ud-{split}.conllu", "the UD_English-EWT folder"))
        sentences, tags = corpus.sentences, corpus.labels
        if max_sentences is not None:
            sentences, tags = sentences[:max_sentences], tags[:max_sentences]
        splits[split] = (sentences, tags)
    return splits


# ---------------------------------------------------------------------- the linear classifier
@dataclass
class SoftmaxRegression:
    """p(y | x) = softmax(W z + b), z = (x - mean) / std. W (K, D), b (K,)."""

    weight: torch.Tensor
    bias: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor

    def predict(self, features: torch.Tensor) -> torch.Tensor:
        """features (N, D) -> class ids (N,)."""
        logits = ((features - self.mean) / self.std) @ self.weight.T + self.bias
        return logits.argmax(dim=1)


def fit_softmax_regression(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int, *, weight_decay: float, max_iter: int = 200,
) -> SoftmaxRegression:
    """Minimise mean cross-entropy + weight_decay/2 * ||W||^2 with full-batch L-BFGS.

    features (N, D) float32, labels (N,) int64 in [0, K). Deterministic (no sampling).
    """
    mean = features.mean(dim=0)
    std = features.std(dim=0).clamp_min(1e-6)
    standardised = (features - mean) / std
    weight = torch.zeros(num_classes, features.shape[1], requires_grad=True)
    bias = torch.zeros(num_classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=max_iter, history_size=20,
                                  tolerance_grad=1e-6, tolerance_change=1e-9, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(standardised @ weight.T + bias, labels)
        loss = loss + 0.5 * weight_decay * (weight**2).sum()
        loss.backward()
        return loss

    optimizer.step(closure)
    return SoftmaxRegression(weight.detach(), bias.detach(), mean, std)


def _accuracy(model: SoftmaxRegression, features: torch.Tensor, labels: torch.Tensor) -> float:
    # labels of -1 (a tag unseen in train) are always wrong
    return float((model.predict(features) == labels).float().mean()) if len(labels) else float("nan")


# ---------------------------------------------------------------------- the probe
def probe_layers(
    rep,
    train: TaggedSentences,
    dev: TaggedSentences,
    test: TaggedSentences,
    *,
    weight_decays: Sequence[float] = DEFAULT_WEIGHT_DECAYS,
    layers: Sequence[int] | None = None,
    max_iter: int = 200,
    progress: bool | None = None,
    log=None,
) -> dict:
    """Train a linear probe on each layer; return a JSON-ready dict.

    ``train``/``dev``/``test`` are (sentences, tags). The tag set is train's; a dev/test tag
    unseen in train counts as an error. Result: ``{"representation", "num_layers", "dim",
    "tags", "tokens": {split: n}, "layers": [{"layer", "weight_decay", "dev_accuracy",
    "test_accuracy", "dev_by_weight_decay"}]}`` with accuracies in percent.
    """
    tag_names = sorted({tag for sentence in train[1] for tag in sentence})
    tag_index = {tag: i for i, tag in enumerate(tag_names)}

    def labels_of(split: TaggedSentences) -> torch.Tensor:
        return torch.tensor([tag_index.get(tag, -1) for sentence in split[1] for tag in sentence], dtype=torch.long)

    features = {name: torch.from_numpy(stack_token_features(rep, split[0], progress=progress,
                                                            description=f"embedding {name}"))
                for name, split in (("train", train), ("dev", dev), ("test", test))}  # each (L, N, D)
    labels = {"train": labels_of(train), "dev": labels_of(dev), "test": labels_of(test)}
    results = []
    for layer in (range(rep.num_layers) if layers is None else layers):
        if not 0 <= layer < rep.num_layers:
            raise UserError(f"layer {layer} out of range: {rep.name} has layers 0..{rep.num_layers - 1}")
        best = None
        dev_by_decay = {}
        for decay in weight_decays:
            model = fit_softmax_regression(features["train"][layer], labels["train"], len(tag_names),
                                           weight_decay=decay, max_iter=max_iter)
            dev_accuracy = 100 * _accuracy(model, features["dev"][layer], labels["dev"])
            dev_by_decay[repr(float(decay))] = dev_accuracy
            if log:
                log(f"layer {layer} weight_decay {decay:g}: dev accuracy {dev_accuracy:.2f}")
            if best is None or dev_accuracy > best[0]:
                best = (dev_accuracy, decay, model)
        dev_accuracy, decay, model = best
        results.append({
            "layer": layer,
            "weight_decay": decay,
            "dev_accuracy": dev_accuracy,
            "test_accuracy": 100 * _accuracy(model, features["test"][layer], labels["test"]),
            "dev_by_weight_decay": dev_by_decay,
        })
    return {
        "representation": rep.name,
        "num_layers": rep.num_layers,
        "dim": rep.dim,
        "tags": tag_names,
        "tokens": {name: int(len(labels[name])) for name in labels},
        "sentences": {"train": len(train[0]), "dev": len(dev[0]), "test": len(test[0])},
        "layers": results,
    }


def format_probe_table(result: dict) -> str:
    """layer | dev | test | paper (Table 6, PTB WSJ)."""
    lines = [f"POS probe (linear) on {result['representation']}: {result['tokens']['train']} train tokens, "
             f"{result['tokens']['test']} test tokens",
             f"{'layer':>5}  {'wd':>7}  {'dev acc':>8}  {'test acc':>8}  {'paper (Table 6, PTB)':>20}"]
    for row in result["layers"]:
        paper = PAPER_TABLE6_POS.get(row["layer"])
        lines.append(f"{row['layer']:>5}  {row['weight_decay']:>7g}  {row['dev_accuracy']:>8.2f}  "
                     f"{row['test_accuracy']:>8.2f}  {'' if paper is None else f'{paper:.1f}':>20}")
    lines.append("paper: biLM first layer 97.3, second layer 96.8 (Peters et al. 2018, Table 6; WSJ, 45 PTB tags)")
    return "\n".join(lines)


# ---------------------------------------------------------------------- the same probe on other tasks
def _select(
    train_x: torch.Tensor, train_y: torch.Tensor, num_classes: int, dev_score, weight_decays: Sequence[float],
    max_iter: int,
) -> tuple[SoftmaxRegression, float, dict]:
    """The weight decay with the best ``dev_score(model)``: (model, decay, {repr(decay): dev score})."""
    best, by_decay = None, {}
    for decay in weight_decays:
        model = fit_softmax_regression(train_x, train_y, num_classes, weight_decay=decay, max_iter=max_iter)
        by_decay[repr(float(decay))] = score = dev_score(model)
        if best is None or score > best[0]:
            best = (score, decay, model)
    return best[2], best[1], by_decay


def ner_probe_layers(
    rep, train: TaggedSentences, dev: TaggedSentences, test: TaggedSentences, *,
    weight_decays: Sequence[float] = DEFAULT_WEIGHT_DECAYS, max_iter: int = 200, progress: bool | None = None,
) -> dict:
    """The linear probe of ``probe_layers`` on IOB2 entity tags: each token's tag from its layer-j vector
    alone, scored as seqeval's strict span F1 (a tag sequence the probe leaves ill-formed loses the span),
    the weight decay chosen by dev F1. ``{"layers": [{"layer", "weight_decay", "dev_f1", "test_f1",
    "dev_by_weight_decay"}], ...}`` with F1 in percent."""
    from seqeval.metrics import f1_score
    from seqeval.scheme import IOB2

    tag_names = sorted({tag for sentence in train[1] for tag in sentence})
    tag_index = {tag: i for i, tag in enumerate(tag_names)}
    features = {name: torch.from_numpy(stack_token_features(rep, split[0], progress=progress))
                for name, split in (("train", train), ("dev", dev), ("test", test))}
    train_y = torch.tensor([tag_index[tag] for sentence in train[1] for tag in sentence], dtype=torch.long)

    def span_f1(model: SoftmaxRegression, x: torch.Tensor, split: TaggedSentences) -> float:
        flat = [tag_names[i] for i in model.predict(x).tolist()]
        predicted, start = [], 0
        for sentence in split[1]:
            predicted.append(flat[start:start + len(sentence)])
            start += len(sentence)
        return 100 * f1_score(split[1], predicted, mode="strict", scheme=IOB2)

    layers = []
    for layer in range(rep.num_layers):
        model, decay, by_decay = _select(features["train"][layer], train_y, len(tag_names),
                                         lambda m, x=features["dev"][layer]: span_f1(m, x, dev), weight_decays, max_iter)
        layers.append({"layer": layer, "weight_decay": decay, "dev_f1": by_decay[repr(float(decay))],
                       "test_f1": span_f1(model, features["test"][layer], test), "dev_by_weight_decay": by_decay})
    return {"representation": rep.name, "num_layers": rep.num_layers, "dim": rep.dim, "tags": tag_names,
            "metric": "span F1, seqeval strict mode, IOB2", "layers": layers,
            "sentences": {"train": len(train[0]), "dev": len(dev[0]), "test": len(test[0])}}


def mean_pooled_features(rep, sentences: Sequence[Sequence[str]], progress: bool | None = None) -> torch.Tensor:
    """(L, S, D): each sentence's average of its token vectors, per layer (an empty sentence: zeros)."""
    tokens = torch.from_numpy(stack_token_features(rep, sentences, progress=progress))
    pooled = torch.zeros(rep.num_layers, len(sentences), rep.dim)
    start = 0
    for i, sentence in enumerate(sentences):
        if sentence:
            pooled[:, i] = tokens[:, start:start + len(sentence)].mean(dim=1)
        start += len(sentence)
    return pooled


def sentence_probe_layers(
    rep, train: tuple[list[list[str]], list[str]], dev: tuple[list[list[str]], list[str]],
    test: tuple[list[list[str]], list[str]], *, weight_decays: Sequence[float] = DEFAULT_WEIGHT_DECAYS,
    max_iter: int = 200, progress: bool | None = None,
) -> dict:
    """A linear probe of a sentence label (e.g. SST-2 polarity) from the mean of one layer's token vectors
    (SentEval's bag-of-vectors baseline, one layer at a time), the weight decay chosen by dev accuracy.
    Splits are (sentences, labels); accuracies in percent."""
    label_names = sorted(set(train[1]))
    index = {label: i for i, label in enumerate(label_names)}
    features = {name: mean_pooled_features(rep, split[0], progress) for name, split in
                (("train", train), ("dev", dev), ("test", test))}
    labels = {name: torch.tensor([index.get(label, -1) for label in split[1]], dtype=torch.long)
              for name, split in (("train", train), ("dev", dev), ("test", test))}
    layers = []
    for layer in range(rep.num_layers):
        model, decay, by_decay = _select(
            features["train"][layer], labels["train"], len(label_names),
            lambda m, x=features["dev"][layer]: 100 * _accuracy(m, x, labels["dev"]), weight_decays, max_iter)
        layers.append({"layer": layer, "weight_decay": decay, "dev_accuracy": by_decay[repr(float(decay))],
                       "test_accuracy": 100 * _accuracy(model, features["test"][layer], labels["test"]),
                       "dev_by_weight_decay": by_decay})
    return {"representation": rep.name, "num_layers": rep.num_layers, "dim": rep.dim, "labels": label_names,
            "layers": layers, "sentences": {"train": len(train[0]), "dev": len(dev[0]), "test": len(test[0])}}
