"""GloVe: global vectors from a weighted least-squares fit of log co-occurrence counts.

Pennington, Socher & Manning (2014), "GloVe: Global Vectors for Word Representation", eq. (8):

    J = sum_{i,j: X_ij > 0} f(X_ij) (w_i . w~_j + b_i + b~_j - log X_ij)^2,
    f(x) = (x / x_max)^alpha if x < x_max else 1          (x_max = 100, alpha = 0.75)

Reference implementation: stanfordnlp/GloVe ``glove.c``. Like it we minimise ``J / 2`` (its
``cost += 0.5 * fdiff * diff``), so the gradient w.r.t. ``w_i`` is ``f * diff * w~_j``; we
initialise every parameter uniformly in ``[-0.5, 0.5) / dim``, use learning rate 0.05 and 25
epochs, and output ``W + W~`` (``glove.c``'s default ``-model 2``).

AdaGrad exactly as ``glove.c`` does it (quirk kept, it matters): the gradient is multiplied by the
learning rate *before* it is clipped to ``[-100, 100]`` and squared into the accumulator (which
starts at 1), and each step divides by the accumulator as it stood before the step:

    u = clip(lr * g);   param -= u / sqrt(G);   G += u^2

so the effective step is ``lr * g / sqrt(1 + lr^2 * sum g^2)`` — it decays 1/lr^2 = 400 times
more slowly than textbook AdaGrad's. (Our first version squared the unscaled gradient and trained
to WS-353 0.17 on the benchmark corpus; see docs/results.md.)

One deliberate deviation, for speed with one CPU thread: ``glove.c`` runs Hogwild SGD, one nonzero
at a time; we take shuffled minibatches of ``batch_size`` nonzeros and apply every pair's update at
once (``index_add``), each divided by the accumulator as it stood before the batch. Within a
batch this is the staleness Hogwild threads see; across batches it is glove.c's update. On the
benchmark corpus batches of 4,096 and 32,768 give the same scores; on a tiny vocabulary, where
one word fills a large share of a batch, the summed stale steps can diverge (use a small
``batch_size`` there).

Legend: N nonzeros in a batch, V vocabulary, D dimension.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm import tqdm

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class GloveConfig:
    """GloVe training options (defaults: glove.c, except dim which glove.c sets to 50)."""

    dim: int = 100
    x_max: float = 100.0
    alpha: float = 0.75
    lr: float = 0.05
    epochs: int = 25
    grad_clip: float = 100.0
    batch_size: int = 32768
    seed: int = 1


def weighting(x: np.ndarray | torch.Tensor, x_max: float, alpha: float):
    """f(x) = min(1, (x / x_max)^alpha), the GloVe weighting function (paper eq. 9)."""
    if isinstance(x, torch.Tensor):
        return torch.clamp(x / x_max, max=1.0) ** alpha
    return np.minimum(x / x_max, 1.0) ** alpha


def batch_loss_and_grads(W, C, bw, bc, rows, cols, logx, fx):
    """Loss J/2 and per-pair gradients of a batch, before clipping and aggregation.

    Args:
        W, C: (V, D) word and context vectors; bw, bc: (V,) biases.
        rows, cols: (N,) int64 indices of the nonzeros; logx, fx: (N,) log X_ij and f(X_ij).
    Returns:
        loss (scalar tensor), fdiff (N,) = f * diff, grad_w (N, D) = fdiff * C[cols],
        grad_c (N, D) = fdiff * W[rows]. The bias gradients are fdiff itself.
    """
    wi = W[rows]                                                   # (N, D)
    cj = C[cols]                                                   # (N, D)
    diff = (wi * cj).sum(dim=1) + bw[rows] + bc[cols] - logx       # (N,)
    fdiff = fx * diff                                              # (N,)
    loss = 0.5 * (fdiff * diff).sum()
    return loss, fdiff, fdiff[:, None] * cj, fdiff[:, None] * wi


def full_loss_and_grads(W, C, bw, bc, rows, cols, x, *, x_max=100.0, alpha=0.75):
    """Exact J/2 over all given nonzeros and its dense gradients (dW, dC, dbw, dbc): for tests/checks."""
    W, C, bw, bc = (torch.as_tensor(a, dtype=torch.float64) for a in (W, C, bw, bc))
    rows = torch.as_tensor(rows, dtype=torch.int64)
    cols = torch.as_tensor(cols, dtype=torch.int64)
    x = torch.as_tensor(x, dtype=torch.float64)
    loss, fdiff, gw, gc = batch_loss_and_grads(W, C, bw, bc, rows, cols, torch.log(x), weighting(x, x_max, alpha))
    dW = torch.zeros_like(W).index_add_(0, rows, gw)
    dC = torch.zeros_like(C).index_add_(0, cols, gc)
    dbw = torch.zeros_like(bw).index_add_(0, rows, fdiff)
    dbc = torch.zeros_like(bc).index_add_(0, cols, fdiff)
    return float(loss), dW.numpy(), dC.numpy(), dbw.numpy(), dbc.numpy()


class GloveModel:
    """Parameters and AdaGrad state; :meth:`train_epoch` runs one shuffled pass over the nonzeros."""

    def __init__(self, n_words: int, config: GloveConfig) -> None:
        self.config = config
        g = torch.Generator().manual_seed(config.seed)
        D = config.dim

        def init(*shape):
            return (torch.rand(*shape, generator=g, dtype=torch.float32) - 0.5) / D

        self.W, self.C = init(n_words, D), init(n_words, D)          # (V, D)
        self.bw, self.bc = init(n_words), init(n_words)              # (V,)
        self.gW, self.gC = torch.ones(n_words, D), torch.ones(n_words, D)
        self.gbw, self.gbc = torch.ones(n_words), torch.ones(n_words)
        self.generator = g

    def _adagrad(self, param, accum, index, grad_pairs):
        """glove.c's AdaGrad for every pair of the batch: u = clip(lr g); param -= u / sqrt(G); G += u^2."""
        clip = self.config.grad_clip
        update = (self.config.lr * grad_pairs).clamp_(-clip, clip)
        param.index_add_(0, index, -update / torch.sqrt(accum[index]))
        accum.index_add_(0, index, update * update)

    def train_epoch(self, rows: torch.Tensor, cols: torch.Tensor, logx: torch.Tensor, fx: torch.Tensor,
                    *, progress: bool = False, desc: str = "") -> float:
        """One pass over all nonzeros in a fresh random order; returns the mean J/2 per nonzero."""
        n = rows.numel()
        order = torch.randperm(n, generator=self.generator)
        total = 0.0
        bs = self.config.batch_size
        bar = tqdm(total=n, desc=desc, unit="pair", unit_scale=True, mininterval=1.0, leave=False,
                   disable=not (progress and sys.stderr.isatty()))
        with torch.no_grad():
            for start in range(0, n, bs):
                idx = order[start : start + bs]
                r, c = rows[idx], cols[idx]
                loss, fdiff, gw, gc = batch_loss_and_grads(self.W, self.C, self.bw, self.bc, r, c, logx[idx], fx[idx])
                total += float(loss)
                self._adagrad(self.W, self.gW, r, gw)
                self._adagrad(self.C, self.gC, c, gc)
                self._adagrad(self.bw, self.gbw, r, fdiff)
                self._adagrad(self.bc, self.gbc, c, fdiff)
                bar.update(idx.numel())
        bar.close()
        return total / max(n, 1)

    def word_vectors(self) -> np.ndarray:
        """W + W~ (V, D) float32: glove.c's default output."""
        return (self.W + self.C).numpy().astype(np.float32)


def train_glove(matrix, config: GloveConfig, *, progress: bool = True) -> tuple[GloveModel, list[float]]:
    """Fit GloVe to a (V, V) scipy sparse co-occurrence matrix; returns the model and per-epoch losses."""
    coo = matrix.tocoo()
    keep = coo.data > 0
    rows = torch.from_numpy(coo.row[keep].astype(np.int64))
    cols = torch.from_numpy(coo.col[keep].astype(np.int64))
    x = torch.from_numpy(coo.data[keep].astype(np.float32))
    logx = torch.log(x)
    fx = weighting(x, config.x_max, config.alpha)
    del x, coo
    model = GloveModel(matrix.shape[0], config)
    losses = []
    for epoch in range(1, config.epochs + 1):
        t0 = time.time()
        loss = model.train_epoch(rows, cols, logx, fx, progress=progress, desc=f"GloVe epoch {epoch}/{config.epochs}")
        losses.append(loss)
        log.info("GloVe epoch %d/%d: mean cost %.6f (%.1f s, %d nonzeros)", epoch, config.epochs, loss,
                 time.time() - t0, rows.numel())
    return model, losses
