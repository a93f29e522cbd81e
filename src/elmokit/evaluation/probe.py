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

from elmokit.data_paths import shared_data
from elmokit.features import stack_token_features

# Table 6 of Peters et al. (2018), POS tagging accuracy (PTB WSJ test) of a linear probe per layer.
PAPER_TABLE6_POS = {1: 97.3, 2: 96.8}  # biLM first layer, second layer
DEFAULT_WEIGHT_DECAYS = (0.0, 1e-5, 1e-4, 1e-3)

TaggedSentences = tuple[list[list[str]], list[list[str]]]  # (token lists, tag lists)


def ud_ewt_splits(data_dir: str | os.PathLike | None = None, *, max_sentences: int | None = None):
    """{"train"|"dev"|"test": (sentences, tags)} from UD English-EWT; optionally the first N of each."""
    from elmokit.tasks.data import read_conllu

    folder = Path(data_dir) if data_dir is not None else shared_data("ud_english_ewt")
    splits = {}
    for split in ("train", "dev", "test"):
        path = folder / f"en_ewt-ud-{split}.conllu"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no such file; fix: pass --data-dir (the UD_English-EWT folder) "
                                    f"or set ELMOKIT_SHARED")
        corpus = read_conllu(path)  # UPOS; multiword ranges and empty nodes skipped
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
            raise ValueError(f"layer {layer} out of range: {rep.name} has layers 0..{rep.num_layers - 1}")
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
