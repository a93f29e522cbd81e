"""The biLM as a language model: ELMo's training objective (Peters et al. 2018, §3.1, eq. 1).

    sum_k [ log p(t_k | t_1..t_{k-1}; Θ_x, →Θ_LSTM, Θ_s) + log p(t_k | t_{k+1}..t_N; Θ_x, ←Θ_LSTM, Θ_s) ]

Legend: B batch, T tokens, T2 = T + 2 with <S> and </S>, P projection, V vocabulary, S negative
samples, N target positions per direction (= sum over rows of n_b + 1).

    char ids (B, T, C) -> BiLM (bilm.py, the inference model)  top layer (B, T2, 2P) = [fwd; bwd]
      forward  LM: fwd top at position k (k = 0..n)   predicts token k+1  (w_1 .. w_n, </S>)
      backward LM: bwd top at position k (k = 1..n+1) predicts token k-1  (<S>, w_1 .. w_n)
      -> one softmax (V, P) + bias (V) shared by both directions, as is the token encoder

Reference: bilm-tf ``bilm/training.py`` (``LanguageModel._build_loss``), whose choices we keep:
the loss is the mean negative log-likelihood per target over both directions (bilm-tf:
``0.5 * (mean_fwd + mean_bwd)``, equal because both directions have N targets); dropout on the
top LSTM output before the softmax (the biLM drops every LSTM input itself); the initialisers of
``_build_word_char_embeddings`` / ``_build_loss`` (see :func:`init_like_bilm_tf`); training with
TensorFlow's ``sampled_softmax_loss`` (log-uniform candidates, unique, accidental hits removed)
for large vocabularies, evaluation always with the full softmax.

Deliberate deviations: one set of S negatives per step shared by both directions (bilm-tf draws
one per direction); whole sentences from a zero state instead of 20-token windows that carry the
state (so training matches elmokit's stateless inference).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from elmokit.bilm import BiLM, BiLMConfig
from elmokit.formats import ModelFolderError, resolve_model_path
from elmokit.formats.native import read_native, read_weights_file, write_native
from elmokit.io import atomic_path, write_json
from elmokit.text.vocab import Vocabulary

LM_WEIGHTS_NAME = "lm.safetensors"  # softmax weights, beside the inference model's model.safetensors
LM_INFO_NAME = "lm.json"
VOCAB_NAME = "vocab.txt"


def rows(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``table[ids]`` along the first dim, with a deterministic backward.

    ``table[ids]`` differentiates through ``index_put_(accumulate=True)``, which on a CPU with more
    than one thread (and at least 32768 gradient elements) adds the rows of repeated ids with
    atomic float additions in whatever order the threads arrive: the sum of a frequent word's
    softmax gradient then changed from run to run (1e-7), and, since the threads' timing differs
    on the first step after a restart, a resumed run drifted away from an uninterrupted one
    (7e-4 after 20 steps). ``index_select`` differentiates through ``index_add_``, which adds the
    rows in index order on any number of threads: bit-identical to the one-thread result.
    """
    return table.index_select(0, ids)


# ---- the biLM, with a token encoder that runs once per distinct word of the batch ------------


class TrainableBiLM(BiLM):
    """``BiLM`` whose token encoder runs once per *distinct* token of the batch.

    The encoder is a pure function of the 50 char ids, and every matrix product in it is
    batch-invariant (``nn/functional.py``), so the forward values are exactly those of ``BiLM``;
    the gradient is the same sum, accumulated through the gather. Saves ~40% of the encoder on
    English text. Same parameters and names as ``BiLM``.
    """

    def token_vectors(self, char_ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        flat_ids = char_ids[mask]  # (N, C)
        unique, inverse = torch.unique(flat_ids, dim=0, return_inverse=True)  # (U, C), (N,)
        vectors = rows(self.token_encoder(unique), inverse)  # (N, P)
        out = vectors.new_zeros(*mask.shape, vectors.shape[-1])
        out[mask] = vectors
        return out


# ---- initialisation (bilm-tf) -------------------------------------------------------------


@torch.no_grad()
def init_like_bilm_tf(model: LanguageModel, generator: torch.Generator) -> None:
    """bilm-tf's initialisers, in a fixed order, from ``generator``:

    char embedding U(-1, 1) (the padding row stays 0); CNN U(-0.05, 0.05) for relu (Kim et al.),
    N(0, 1/(w E)) for tanh, bias 0; highway W_carry and W_transform N(0, 1/F), b_carry -2 (mostly
    carry at the start), b_transform 0; token projection N(0, 1/F), bias 0; LSTM kernels Glorot
    uniform over TF's combined [input; hidden] x 4D kernel, projection Glorot uniform, bias 0;
    softmax N(0, 1/P), bias 0.
    """
    g = generator
    encoder, config = model.bilm.token_encoder, model.bilm.config
    encoder.char_embedding.weight.uniform_(-1.0, 1.0, generator=g)
    encoder.char_embedding.weight[0] = 0.0
    for conv in encoder.convs:
        _, dim, width = conv.weight.shape
        if config.activation == "relu":
            conv.weight.uniform_(-0.05, 0.05, generator=g)
        else:
            conv.weight.normal_(0.0, math.sqrt(1.0 / (width * dim)), generator=g)
        conv.bias.zero_()
    width = config.n_filters
    for carry, transform in zip(encoder.highway.carry, encoder.highway.transform):
        carry.weight.normal_(0.0, math.sqrt(1.0 / width), generator=g)
        carry.bias.fill_(-2.0)
        transform.weight.normal_(0.0, math.sqrt(1.0 / width), generator=g)
        transform.bias.zero_()
    if encoder.projection is not None:
        encoder.projection.weight.normal_(0.0, math.sqrt(1.0 / width), generator=g)
        encoder.projection.bias.zero_()
    for stack in (model.bilm.forward_lstm, model.bilm.backward_lstm):
        for cell in stack:
            four_d, n_in = cell.input_linear.weight.shape
            n_hidden = cell.hidden_linear.weight.shape[1]
            limit = math.sqrt(6.0 / (n_in + n_hidden + four_d))  # Glorot on the (I + P, 4D) kernel
            cell.input_linear.weight.uniform_(-limit, limit, generator=g)
            cell.hidden_linear.weight.uniform_(-limit, limit, generator=g)
            cell.input_linear.bias.zero_()
            p, d = cell.projection.weight.shape
            limit = math.sqrt(6.0 / (p + d))
            cell.projection.weight.uniform_(-limit, limit, generator=g)
    model.softmax_weight.normal_(0.0, 1.0 / math.sqrt(model.softmax_weight.shape[1]), generator=g)
    model.softmax_bias.zero_()


# ---- candidate sampling (TensorFlow's log_uniform_candidate_sampler, unique=True) -----------


def log_uniform_probabilities(vocab_size: int) -> np.ndarray:
    """P(k) = (log(k + 2) - log(k + 1)) / log(V + 1), k = 0..V-1 (Zipfian over a frequency-sorted
    vocabulary); float64, sums to 1."""
    k = np.arange(vocab_size, dtype=np.float64)
    return (np.log(k + 2.0) - np.log(k + 1.0)) / np.log(vocab_size + 1.0)


def sample_log_uniform(vocab_size: int, num_samples: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """``num_samples`` distinct ids drawn from the log-uniform distribution by drawing with
    replacement until that many distinct ids have appeared (TF's ``unique=True``).

    Returns the ids in order of first appearance and the number of draws it took.
    """
    if not 0 < num_samples <= vocab_size:
        raise ValueError(f"cannot draw {num_samples} distinct ids from a vocabulary of {vocab_size}")
    log_range = math.log(vocab_size + 1.0)
    seen = np.zeros(vocab_size, dtype=bool)
    found: list[np.ndarray] = []
    n_found, tries = 0, 0
    chunk = max(num_samples, 1024)
    while True:
        draws = (np.exp(rng.random(chunk) * log_range)).astype(np.int64) - 1  # TF: int(exp(u log(V+1))) - 1
        np.clip(draws, 0, vocab_size - 1, out=draws)
        values, first = np.unique(draws, return_index=True)
        order = np.argsort(first, kind="stable")
        values, first = values[order], first[order]
        new = ~seen[values]
        values, first = values[new], first[new]
        need = num_samples - n_found
        if len(values) >= need:
            found.append(values[:need])
            tries += int(first[need - 1]) + 1
            return np.concatenate(found), tries
        found.append(values)
        seen[values] = True
        n_found += len(values)
        tries += chunk


def log_expected_count(probabilities: np.ndarray, num_tries: int) -> np.ndarray:
    """log of the expected count of each id in a unique sample that took ``num_tries`` draws:
    ``log(1 - (1 - p)^num_tries)`` (TF's ``-expm1(num_tries * log1p(-p))``); float64."""
    return np.log(-np.expm1(num_tries * np.log1p(-probabilities)))


@dataclass
class Candidates:
    """One step's shared negatives: ids (S,) and the log expected counts of every id (V,)."""

    ids: torch.Tensor
    log_q: torch.Tensor  # (V,) float32: log expected count of each vocabulary id

    @classmethod
    def draw(cls, vocab_size: int, num_samples: int, *, seed: int, step: int, device="cpu") -> Candidates:
        """Deterministic in (seed, step): every rank of a data-parallel run draws the same set."""
        num_samples = min(num_samples, vocab_size)
        rng = np.random.Generator(np.random.PCG64([seed, step, 0x5A3D]))
        ids, tries = sample_log_uniform(vocab_size, num_samples, rng)
        log_q = log_expected_count(log_uniform_probabilities(vocab_size), tries)
        return cls(torch.from_numpy(ids).to(device), torch.from_numpy(log_q.astype(np.float32)).to(device))


# ---- the two softmax losses -----------------------------------------------------------------


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """bf16 activations (autocast) are normalised in float32; float64 stays float64."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


# Rows per chunk: keep a chunk of logits (rows x classes x 4 bytes) near 8 MB, inside the cache.
CHUNK_BYTES = 8 << 20


class _LogSumExpOverClasses(torch.autograd.Function):
    """lse_m = log(exp(true_m) + sum_s exp(h_m . W_s + b_s)), with (row, class) "hits" left out.

    hidden (M, P), weight (S, P), bias (S,), true (M,), hit_rows / hit_cols (K,) -> lse (M,).
    Row chunks of the (M, S) logits are made, reduced and dropped, and remade in backward: one
    extra matrix product instead of keeping M x S floats, and every elementwise pass runs in
    cache (the straightforward version makes ~6 passes over memory per step, this one none).
    """

    @staticmethod
    def forward(ctx, hidden, weight, bias, true, hit_rows, hit_cols):
        rows = hidden.shape[0]
        chunk = max(1, CHUNK_BYTES // (4 * max(weight.shape[0], 1)))
        lse = true.new_empty(rows)
        # The bias as one more input column: [h, 1] [W, b]^T = h W^T + b in one plain product
        # (addmm's broadcast of b into each (m, S) chunk was ~40% of the product's own time).
        hidden1, weight1 = _with_bias_column(hidden, weight, bias)
        for start in range(0, rows, chunk):
            logits = _LogSumExpOverClasses._logits(hidden1, weight1, hit_rows, hit_cols, start, chunk)
            t = true[start : start + chunk]
            top = torch.maximum(logits.amax(dim=1), t)  # (m,)
            total = logits.sub_(top.unsqueeze(1)).exp_().sum(dim=1) + (t - top).exp()
            lse[start : start + chunk] = top + total.log()
        ctx.save_for_backward(hidden1, weight1, true, lse, hit_rows, hit_cols)
        ctx.chunk = chunk
        return lse

    @staticmethod
    def _logits(hidden1, weight1, hit_rows, hit_cols, start, chunk):
        logits = torch.mm(hidden1[start : start + chunk], weight1.t())  # (m, S)
        inside = (hit_rows >= start) & (hit_rows < start + chunk)
        logits[hit_rows[inside] - start, hit_cols[inside]] = float("-inf")
        return logits

    @staticmethod
    def backward(ctx, grad_lse):
        hidden1, weight1, true, lse, hit_rows, hit_cols = ctx.saved_tensors
        weight = weight1[:, :-1]
        grad_hidden = hidden1.new_zeros(hidden1.shape[0], weight.shape[1])
        grad_weight1 = torch.zeros_like(weight1)  # [dW, db]: db_s = sum_m probs_ms, the ones column's share
        for start in range(0, hidden1.shape[0], ctx.chunk):
            logits = _LogSumExpOverClasses._logits(hidden1, weight1, hit_rows, hit_cols, start, ctx.chunk)
            g = grad_lse[start : start + ctx.chunk]
            probs = logits.sub_(lse[start : start + ctx.chunk].unsqueeze(1)).exp_().mul_(g.unsqueeze(1))  # (m, S)
            grad_hidden[start : start + ctx.chunk] = probs @ weight
            grad_weight1.addmm_(probs.t(), hidden1[start : start + ctx.chunk])
        grad_true = grad_lse * (true - lse).exp()
        return grad_hidden, grad_weight1[:, :-1], grad_weight1[:, -1], grad_true, None, None


def _with_bias_column(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """([hidden, 1] (M, P + 1), [weight, bias] (S, P + 1))."""
    return (torch.cat([hidden, hidden.new_ones(hidden.shape[0], 1)], dim=1),
            torch.cat([weight, bias.unsqueeze(1)], dim=1))


def _nll_over(hidden, targets, weight, bias, class_ids, correction):
    """-log of the target's share: the target's logit against the listed classes' logits (each
    minus ``correction`` of its id), a class equal to the row's target left out."""
    hidden = _at_least_float32(hidden)
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        if class_ids is None:  # every class: the full softmax
            w_t, b_t = rows(weight, targets).to(hidden.dtype), rows(bias, targets).to(hidden.dtype)
            w_c, b_c = weight.to(hidden.dtype), bias.to(hidden.dtype)
            hit_rows, hit_cols = torch.arange(len(targets), device=targets.device), targets
        else:  # targets and candidates in one gather: one dense gradient of the table, not two to add
            n, ids = len(targets), torch.cat([targets, class_ids])
            w_all, b_all = rows(weight, ids).to(hidden.dtype), rows(bias, ids).to(hidden.dtype)
            (w_t, w_c), (b_t, b_c) = (w_all[:n], w_all[n:]), (b_all[:n], b_all[n:])
            if correction is not None:
                b_c = b_c - correction[class_ids].to(hidden.dtype)
            column = torch.full((weight.shape[0],), -1, dtype=torch.long, device=targets.device)
            column[class_ids] = torch.arange(len(class_ids), device=targets.device)
            hit_cols = column[targets]
            hit_rows = torch.nonzero(hit_cols >= 0).squeeze(1)
            hit_cols = hit_cols[hit_rows]
        true = (hidden * w_t).sum(-1) + b_t  # (M,)
        if correction is not None:
            true = true - correction[targets].to(hidden.dtype)
        return _LogSumExpOverClasses.apply(hidden, w_c, b_c, true, hit_rows, hit_cols) - true


def full_softmax_nll(hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """-log softmax(h W^T + b)[target]: hidden (M, P), targets (M,), weight (V, P), bias (V,) -> (M,)."""
    return _nll_over(hidden, targets, weight, bias, None, None)


def sampled_softmax_nll(
    hidden: torch.Tensor, targets: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, candidates: Candidates
) -> torch.Tensor:
    """TensorFlow's ``sampled_softmax_loss`` (Jean et al. 2015): hidden (M, P), targets (M,) -> (M,).

    logits of the true class and of the S shared candidates, each minus the log of its expected
    count (so the sampled sum estimates the full partition function); a candidate equal to the
    row's target is removed (an accidental hit); then -log softmax of the true logit.
    """
    return _nll_over(hidden, targets, weight, bias, candidates.ids, candidates.log_q)


@dataclass
class SoftmaxRows:
    """The softmax rows one sampled step touches, as leaves of their own (single-process Adagrad).

    A sampled step reads at most N_f + N_b + S of the V softmax rows (5,505 of 50,000 in
    bench_training.py's batch of the default model's shape), yet the gradient of the (V, P) table is
    dense: a zero fill, and an Adagrad update and a norm over every row. Gathering the touched
    rows into their own leaf tensors
    keeps the gradient (R, P), and :meth:`adagrad_step` updates those rows only. That is exactly
    dense Adagrad (eps 0, no weight decay): a row with a zero gradient keeps its accumulator
    (sum + 0 * 0) and its weights (w - lr * 0 / sqrt(sum)). torch's sparse-gradient Adagrad does
    the same, but ``clip_grad_norm_`` cannot take sparse gradients and DDP averages dense ones.
    """

    ids: torch.Tensor  # (R,) distinct vocabulary ids, ascending
    weight: torch.Tensor  # (R, P) leaf: weight[ids]
    bias: torch.Tensor  # (R,) leaf: bias[ids]

    @classmethod
    def gather(cls, weight: torch.Tensor, bias: torch.Tensor, ids: torch.Tensor) -> SoftmaxRows:
        return cls(ids, weight.detach().index_select(0, ids).requires_grad_(),
                   bias.detach().index_select(0, ids).requires_grad_())

    def adagrad_step(self, optimizer: torch.optim.Adagrad, weight: torch.Tensor, bias: torch.Tensor) -> None:
        """torch's Adagrad update (``_single_tensor_adagrad``), on the touched rows of each table."""
        group = next(g for g in optimizer.param_groups if any(p is weight for p in g["params"]))
        if group["weight_decay"] or group["maximize"]:
            raise ValueError("row-sparse Adagrad supports neither weight decay nor maximize")
        for param, leaf in ((weight, self.weight), (bias, self.bias)):
            state = optimizer.state[param]
            state["step"] += 1
            clr = group["lr"] / (1 + (float(state["step"]) - 1) * group["lr_decay"])
            grad = leaf.grad
            total = state["sum"].index_select(0, self.ids).addcmul_(grad, grad, value=1)
            state["sum"].index_copy_(0, self.ids, total)
            std = total.sqrt().add_(group["eps"])
            with torch.no_grad():
                param.index_copy_(0, self.ids, leaf.detach().addcdiv_(grad, std, value=-clr))


# ---- the language model ---------------------------------------------------------------------


@dataclass
class LMOutput:
    """Summed negative log-likelihoods (nats) and the number of targets per direction."""

    forward_nll: torch.Tensor  # scalar
    backward_nll: torch.Tensor  # scalar
    num_targets: int  # N, the same for both directions

    @property
    def loss(self) -> torch.Tensor:
        """Mean NLL per target over both directions (bilm-tf's ``0.5 * (mean_f + mean_b)``)."""
        return (self.forward_nll + self.backward_nll) / (2 * max(self.num_targets, 1))


@dataclass
class WindowLMOutput:
    """A carried-state window's summed NLLs (nats) and its scored targets per direction (they may
    differ by a sentence boundary or two within a window; over an epoch they are equal)."""

    forward_nll: torch.Tensor
    backward_nll: torch.Tensor
    forward_targets: int
    backward_targets: int


class LanguageModel(nn.Module):
    """biLM + the shared softmax. ``forward(char_ids (B, T, C), word_ids (B, T))`` -> LMOutput.

    ``word_ids`` are vocabulary ids of the tokens (any value at padding); the boundary ids
    ``bos_id``/``eos_id`` are added here. With ``candidates`` the training loss is the sampled
    softmax; without, the full softmax.
    """

    def __init__(self, config: BiLMConfig, vocab_size: int, *, bos_id: int = 0, eos_id: int = 1) -> None:
        super().__init__()
        self.bilm = TrainableBiLM(config)
        P = config.projection_dim
        self.softmax_weight = nn.Parameter(torch.zeros(vocab_size, P))  # (V, P)
        self.softmax_bias = nn.Parameter(torch.zeros(vocab_size))  # (V,)
        self.bos_id, self.eos_id = bos_id, eos_id
        # The trainer sets this for single-process Adagrad: a sampled step with gradients then
        # leaves the softmax's gradient on ``softmax_rows`` (SoftmaxRows), not on the (V, P) table.
        self.row_sparse_softmax = False
        self.softmax_rows: SoftmaxRows | None = None

    @property
    def vocab_size(self) -> int:
        return self.softmax_weight.shape[0]

    def target_hidden(self, char_ids: torch.Tensor, word_ids: torch.Tensor):
        """Top-layer vectors and their targets: (fwd (N, P), bwd (N, P), fwd targets (N,), bwd targets (N,))."""
        P = self.bilm.config.projection_dim
        output = self.bilm(char_ids)  # layers (L+1, B, T2, 2P), mask (B, T2)
        top, mask = output.layers[-1], output.mask
        batch_size, t2 = mask.shape
        lengths = mask.sum(dim=1)  # n_b + 2
        ids = word_ids.new_zeros(batch_size, t2)  # (B, T2): <S> w_1 .. w_n </S> 0 ..
        ids[:, 1 : t2 - 1] = word_ids
        ids[:, 0] = self.bos_id
        ids[torch.arange(batch_size, device=ids.device), lengths - 1] = self.eos_id
        valid = mask[:, 1:]  # (B, T2 - 1): target position k + 1 exists
        fwd = top[:, :-1, :P][valid]  # position k predicts k + 1
        bwd = top[:, 1:, P:][valid]  # position k + 1 predicts k
        return fwd, bwd, ids[:, 1:][valid], ids[:, :-1][valid]

    def forward(self, char_ids: torch.Tensor, word_ids: torch.Tensor, *, candidates: Candidates | None = None) -> LMOutput:
        fwd, bwd, fwd_targets, bwd_targets = self.target_hidden(char_ids, word_ids)
        forward_nll, backward_nll = self._summed_nll(fwd, bwd, fwd_targets, bwd_targets, candidates)
        return LMOutput(forward_nll, backward_nll, fwd.shape[0])

    def _summed_nll(self, fwd, bwd, fwd_targets, bwd_targets, candidates):
        """Both directions' top-layer vectors (N_f, P), (N_b, P) through one softmax: their summed NLLs."""
        dropout = self.bilm.config.dropout
        if self.training and dropout > 0.0:  # bilm-tf drops the LSTM output before the softmax
            fwd, bwd = F.dropout(fwd, dropout, training=True), F.dropout(bwd, dropout, training=True)
        n = fwd.shape[0]
        hidden = torch.cat([fwd, bwd])  # (N_f + N_b, P)
        targets = torch.cat([fwd_targets, bwd_targets])
        if candidates is None:
            nll = full_softmax_nll(hidden, targets, self.softmax_weight, self.softmax_bias)
        elif self.row_sparse_softmax and torch.is_grad_enabled():
            # the same logits from the touched rows alone, their ids renumbered 0 .. R - 1
            touched, renumbered = torch.unique(torch.cat([targets, candidates.ids]), sorted=True, return_inverse=True)
            self.softmax_rows = rows_ = SoftmaxRows.gather(self.softmax_weight, self.softmax_bias, touched)
            m = targets.shape[0]
            nll = _nll_over(hidden, renumbered[:m], rows_.weight, rows_.bias, renumbered[m:], candidates.log_q[touched])
        else:
            nll = sampled_softmax_nll(hidden, targets, self.softmax_weight, self.softmax_bias, candidates)
        return nll[:n].sum(), nll[n:].sum()

    def window_forward(self, unique_chars: torch.Tensor, forward_index: torch.Tensor, backward_index: torch.Tensor,
                       forward_targets: torch.Tensor, backward_targets: torch.Tensor, forward_scored: torch.Tensor,
                       backward_scored: torch.Tensor, state=None, *, candidates: Candidates | None = None):
        """One carried-state window (``training/data.py``): -> (WindowLMOutput, final state, detached).

        ``unique_chars`` (U, C): the char ids of the window's distinct tokens (boundaries included);
        ``forward_index``/``backward_index`` (B, T): each input position's row in it, in the
        direction's reading order; ``*_targets`` (B, T): the next token's vocabulary id in that
        order; ``*_scored`` (B, T) bool: whether that target counts (not the next sentence's start
        marker); ``state``: (h (L, 2, B, P), c (L, 2, B, D)) carried from the previous window, or None.
        """
        batch_size, steps = forward_index.shape
        P = self.bilm.config.projection_dim
        table = self.bilm.token_encoder(unique_chars)  # (U, P): each distinct token once
        forward_in = rows(table, forward_index.reshape(-1)).view(batch_size, steps, P)
        backward_in = rows(table, backward_index.reshape(-1)).view(batch_size, steps, P)
        lengths = torch.full((batch_size,), steps, dtype=torch.long, device=forward_index.device)
        forward_outs, backward_outs, final_h, final_c = self.bilm.run_stacks(forward_in, backward_in, lengths, state)
        fwd, bwd = forward_outs[-1][forward_scored], backward_outs[-1][backward_scored]  # (N_f, P), (N_b, P)
        forward_nll, backward_nll = self._summed_nll(fwd, bwd, forward_targets[forward_scored],
                                                     backward_targets[backward_scored], candidates)
        output = WindowLMOutput(forward_nll, backward_nll, fwd.shape[0], bwd.shape[0])
        return output, (final_h.detach(), final_c.detach())

    # ---- files ---------------------------------------------------------------------------

    def save(self, directory: str | os.PathLike, vocabulary, *, info: dict | None = None, model_card: str | None = None) -> Path:
        """The native model folder (loadable by ``elmokit.formats.load_bilm``) plus the LM head:
        ``lm.safetensors`` (softmax), ``vocab.txt``, ``lm.json`` (vocabulary size, tokenizer...)."""
        directory = Path(directory)
        bilm_state = {k: v.detach().cpu().numpy() for k, v in self.bilm.state_dict().items()}

        write_native(directory, self.bilm.config, bilm_state, model_card=model_card)
        with atomic_path(directory / LM_WEIGHTS_NAME) as tmp:
            save_file(
                {"lm.softmax.weight": self.softmax_weight.detach().cpu().contiguous(),
                 "lm.softmax.bias": self.softmax_bias.detach().cpu().contiguous()},
                tmp, metadata={"format": "elmokit-lm-head"},
            )
        vocabulary.save(directory / VOCAB_NAME)
        data = {"format_version": 1, "vocab_size": self.vocab_size, "vocab_file": VOCAB_NAME, **(info or {})}
        write_json(directory / LM_INFO_NAME, data)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike):
        """(LanguageModel in eval mode, Vocabulary, lm.json dict) from a folder written by ``save``."""
        directory = resolve_model_path(directory)
        for name in (LM_WEIGHTS_NAME, VOCAB_NAME):
            if not (directory / name).exists():
                raise ModelFolderError(
                    f"{directory}: no {name}; language-model evaluation needs a folder written by "
                    "`elmokit train` (the original hdf5 format carries no softmax)"
                )
        config, state = read_native(directory)
        vocabulary = Vocabulary.load(directory / VOCAB_NAME)
        head = read_weights_file(directory / LM_WEIGHTS_NAME)  # damaged or non-finite: refused naming file and tensor
        info_path = directory / LM_INFO_NAME
        info = json.loads(info_path.read_text(encoding="utf-8")) if info_path.exists() else {}
        model = cls(config, len(vocabulary), bos_id=vocabulary.bos, eos_id=vocabulary.eos)
        weight = head["lm.softmax.weight"]
        if tuple(weight.shape) != (len(vocabulary), config.projection_dim):
            raise ModelFolderError(
                f"{directory / LM_WEIGHTS_NAME}: lm.softmax.weight is {tuple(weight.shape)}, expected "
                f"({len(vocabulary)}, {config.projection_dim}) from {VOCAB_NAME} and config.json"
            )
        model.bilm.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
        model.softmax_weight.data.copy_(torch.as_tensor(weight))
        model.softmax_bias.data.copy_(torch.as_tensor(head["lm.softmax.bias"]))
        return model.eval(), vocabulary, info
