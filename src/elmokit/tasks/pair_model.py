"""The sentence-pair models on frozen features: InferSent's (Conneau et al. 2017), the default, and ESIM's
(Chen et al. 2017) for pairs.

Legend: B batch, T tokens, L layers, D representation dim, H LSTM hidden size, M MLP size, K outputs.

    ELMo_k = gamma * sum_j softmax(w)_j h_{k,j}        (Peters et al. 2018, eq. 1)   (B, T, D)
    dropout -> BiLSTM                                                                 (B, T, 2H)
    max over the real tokens                            u (first sentence), v          (B, 2H)
    pair:   [u; v; |u - v|; u * v]                      (InferSent §3.2)              (B, 8H)
    single: u                                                                         (B, 2H)
    dropout -> linear -> tanh -> dropout -> linear                                    (B, K)

``architecture="esim"`` (pairs only) replaces the pooled sentence vectors by ESIM's soft alignment:

    a, b = BiLSTM of each sentence's words                                           (B, Ta, 2H), (B, Tb, 2H)
    e_ij = a_i . b_j;  a~_i = sum_j softmax_j(e_ij) b_j,  b~_j = sum_i softmax_i(e_ij) a_i   (eqs. 11-13)
    m_a = [a; a~; a - a~; a * a~] -> linear -> ReLU -> BiLSTM (composition), same for b    (eq. 14-18)
    [mean(m_a); max(m_a); mean(m_b); max(m_b)] -> the classifier above                      (B, 8H)

One encoder reads both sentences (shared weights). Classification tasks are trained with
cross-entropy, similarity scores (STS-B, SICK-R) by regression (K = 1, mean squared error) -- a
deviation from InferSent/SentEval, which predict a distribution over the integer scores (Tai et al.
2015); regression is what BERT does for STS-B. The paper's lambda * ||w||^2 regularises the mix.
Deviation, stated: InferSent's sizes are H = 2048 and M = 512; the defaults here are small for CPU.

The features are frozen and computed once (``elmokit.features``): the table measures the representation,
so there are no word vectors learned beside it. Training runs on the engine's epoch loop
(``elmokit.engine.epochs``): Adam, dev early stopping on the task's metric.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from elmokit.engine.epochs import EpochOptions, EpochResult, seed_everything, shuffled_batches, train_epochs
from elmokit.nn.scalar_mix import ScalarMix

ARCHITECTURES = ("infersent", "esim")


@dataclass(frozen=True, kw_only=True)
class PairModelConfig:
    num_outputs: int  # K: labels, or 1 for a regression
    pair: bool  # two sentences (the InferSent features) or one
    num_layers: int  # L of the representation
    dim: int  # D of the representation
    hidden_dim: int = 64
    mlp_dim: int = 128
    dropout: float = 0.1
    mix_l2: float = 0.001
    architecture: str = "infersent"  # or "esim" (pairs only)

    def __post_init__(self) -> None:
        if self.architecture not in ARCHITECTURES:
            raise ValueError(f"architecture {self.architecture!r}: use one of {', '.join(ARCHITECTURES)}")
        if self.architecture == "esim" and not self.pair:
            raise ValueError("ESIM aligns two sentences: a single-sentence task uses architecture='infersent'")

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class PairModel(nn.Module):
    def __init__(self, config: PairModelConfig) -> None:
        super().__init__()
        self.config = config
        self.scalar_mix = ScalarMix(config.num_layers)
        self.dropout = nn.Dropout(config.dropout)
        self.encoder = nn.LSTM(config.dim, config.hidden_dim, batch_first=True, bidirectional=True)
        features = (8 if config.pair else 2) * config.hidden_dim
        if config.architecture == "esim":
            self.projection = nn.Sequential(nn.Linear(8 * config.hidden_dim, config.hidden_dim), nn.ReLU())
            self.composition = nn.LSTM(config.hidden_dim, config.hidden_dim, batch_first=True, bidirectional=True)
        self.classifier = nn.Sequential(nn.Dropout(config.dropout), nn.Linear(features, config.mlp_dim), nn.Tanh(),
                                        nn.Dropout(config.dropout), nn.Linear(config.mlp_dim, config.num_outputs))

    @staticmethod
    def _run(rnn: nn.LSTM, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        lengths = mask.sum(dim=1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
        encoded, _ = rnn(packed)
        return nn.utils.rnn.pad_packed_sequence(encoded, batch_first=True, total_length=mask.shape[1])[0]

    def words(self, layers: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """layers (B, L, T, D), mask (B, T) bool -> the BiLSTM states of the words (B, T, 2H)."""
        mixed = self.dropout(self.scalar_mix(layers.transpose(0, 1), mask))  # (B, T, D), eq. 1
        return self._run(self.encoder, mixed, mask)

    def encode(self, layers: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """layers (B, L, T, D), mask (B, T) bool -> the max-pooled sentence vector (B, 2H)."""
        return _max(self.words(layers, mask), mask)

    def _esim(self, first, second) -> torch.Tensor:
        (a_layers, a_mask), (b_layers, b_mask) = first, second
        a, b = self.words(a_layers, a_mask), self.words(b_layers, b_mask)  # (B, Ta, 2H), (B, Tb, 2H)
        e = a @ b.transpose(1, 2)  # (B, Ta, Tb)
        a_tilde = torch.softmax(e.masked_fill(~b_mask.unsqueeze(1), float("-inf")), dim=2) @ b  # (B, Ta, 2H)
        b_tilde = torch.softmax(e.masked_fill(~a_mask.unsqueeze(2), float("-inf")), dim=1).transpose(1, 2) @ a
        pooled = []
        for x, x_tilde, mask in ((a, a_tilde, a_mask), (b, b_tilde, b_mask)):
            enhanced = torch.cat([x, x_tilde, x - x_tilde, x * x_tilde], dim=-1)  # (B, T, 8H)
            composed = self._run(self.composition, self.dropout(self.projection(enhanced)), mask)  # (B, T, 2H)
            keep = mask.unsqueeze(-1)
            pooled += [(composed * keep).sum(1) / keep.sum(1).clamp_min(1), _max(composed, mask)]
        return self.classifier(torch.cat(pooled, dim=-1))  # (B, K) from (B, 8H)

    def forward(self, first: tuple[torch.Tensor, torch.Tensor],
                second: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
        """(layers, mask) of the first sentences (and of the second) -> (B, K)."""
        if self.config.architecture == "esim":
            return self._esim(first, second)
        u = self.encode(*first)
        if not self.config.pair:
            return self.classifier(u)
        v = self.encode(*second)
        return self.classifier(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))  # InferSent's [u; v; |u-v|; u*v]

    def penalty(self) -> torch.Tensor:
        return self.scalar_mix.l2_penalty(self.config.mix_l2)

    def layer_weights(self) -> dict:
        return {"weights": [float(w) for w in self.scalar_mix.weights().detach()],
                "gamma": float(self.scalar_mix.gamma.detach())}


def _max(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Max over the real positions: (B, T, F), (B, T) -> (B, F)."""
    return states.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1).values


@dataclass
class PairFeatures:
    """Feature sources (``.batch(indices) -> (layers (B, L, T, D), mask (B, T))``) of the first sentences
    and, for a pair task, of the second ones, row i of each belonging to example i."""

    first: object
    second: object | None = None

    def batch(self, indices: Sequence[int]):
        return self.first.batch(indices), (None if self.second is None else self.second.batch(indices))


@dataclass
class PairPredictor:
    """A trained pair model with its label names (empty for a regression)."""

    model: PairModel
    labels: list[str]

    def outputs(self, features: PairFeatures, count: int, *, batch_size: int = 64) -> torch.Tensor:
        """(N, K) for the ``count`` examples of ``features``."""
        self.model.eval()
        with torch.no_grad():
            chunks = [self.model(*features.batch(range(s, min(s + batch_size, count))))
                      for s in range(0, count, batch_size)]
        return torch.cat(chunks) if chunks else torch.zeros(0, self.model.config.num_outputs)

    def predict(self, features: PairFeatures, count: int) -> list:
        """Label names, or scores for a regression."""
        out = self.outputs(features, count)
        if not self.labels:
            return out[:, 0].tolist()
        return [self.labels[i] for i in out.argmax(dim=1).tolist()]


def train_pair_model(
    train: tuple[PairFeatures, Sequence], dev: tuple[PairFeatures, Sequence], *, pair: bool, num_layers: int, dim: int,
    metric: Callable[[list, list], float], regression: bool = False, max_epochs: int = 10, patience: int | None = 3,
    batch_size: int = 32, learning_rate: float = 1e-3, seed: int = 0, log=None, **model_options,
) -> tuple[PairPredictor, EpochResult]:
    """Train on (features, targets) with dev early stopping on ``metric(predicted, gold)`` (higher is better).

    targets: label names, or float scores when ``regression``."""
    seed_everything(seed)
    order_rng = np.random.default_rng(seed)
    targets = list(train[1])
    labels = [] if regression else sorted(set(targets), key=str)
    if regression:
        target_tensor = torch.tensor([float(t) for t in targets], dtype=torch.float32)
    else:
        index = {y: i for i, y in enumerate(labels)}
        target_tensor = torch.tensor([index[y] for y in targets], dtype=torch.long)
    config = PairModelConfig(num_outputs=1 if regression else len(labels), pair=pair, num_layers=num_layers, dim=dim,
                             **model_options)
    predictor = PairPredictor(PairModel(config), labels)
    model = predictor.model
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)

    def batches(epoch: int):
        return shuffled_batches(len(targets), batch_size, order_rng)

    def loss(indices):
        out = model(*train[0].batch(indices))
        gold = target_tensor[indices]
        task = nn.functional.mse_loss(out[:, 0], gold) if regression else nn.functional.cross_entropy(out, gold)
        return task + model.penalty(), len(indices)

    def evaluate():
        return metric(predictor.predict(dev[0], len(dev[1])), list(dev[1])), {"layer_weights": model.layer_weights()}

    result = train_epochs(model, optimizer, batches=batches, loss=loss, evaluate=evaluate, metric_name="dev_metric",
                          options=EpochOptions(max_epochs=max_epochs, patience=patience), log=log,
                          description="pair model epoch")
    return predictor, result
