"""The heads and losses transformers lacks: an MLM loss over the masked positions only, and SpanBERT's
span boundary objective.

Shape legend: B batch, T tokens, H hidden size, V vocabulary, M masked positions in the batch.

Masked positions only. transformers' ``*ForMaskedLM`` / ``BertForPreTraining`` apply the prediction
head (dense + GeLU + LayerNorm + an H x V decoder) to all B*T positions and then ignore the ~85% with
label -100, which makes CPU pretraining of BERT several times slower (docs/benchmarks.md). ``masked_lm_loss``
gathers the M labelled rows of the encoder output first and applies *the model's own* head to them,
so the parameters, the tying to the input embeddings and the saved folder are the library's; the
loss equals the stock one up to float rounding (tested).

Span boundary objective (Joshi et al. 2020, §3.2, eq. 1-2): a token x_i in a masked span (s, e) is
predicted from the encoder outputs at the boundary x_{s-1}, x_{e+1} and a relative position embedding
p_{i-s+1}: h0 = [x_{s-1}; x_{e+1}; p], h1 = LayerNorm(GeLU(W1 h0)), y = LayerNorm(GeLU(W2 h1)), then
the output embeddings (tied to the input word embeddings, as SpanBERT's code ties its pair-target
decoder) and an own bias give the logits. The loss is summed with the MLM loss (§3.2: "we sum the loss
from both the span boundary and the regular masked language model objectives for each token").
Offsets beyond ``max_offset - 1`` share the last position embedding (SpanBERT's code caps pair
targets at 20 tokens instead).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from elmokit.pretraining.fused import mm_t, weight_grad

IGNORE_INDEX = -100


def _distilbert_head(model) -> Callable[[torch.Tensor], torch.Tensor]:
    def head(hidden: torch.Tensor) -> torch.Tensor:
        return model.vocab_projector(model.vocab_layer_norm(model.activation(model.vocab_transform(hidden))))

    return head


# transformers class name -> the function that gives that model's own MLM prediction head (H -> V).
MLM_HEADS: dict[str, Callable] = {
    "BertForPreTraining": lambda m: m.cls.predictions,
    "BertForMaskedLM": lambda m: m.cls.predictions,
    "RobertaForMaskedLM": lambda m: m.lm_head,
    "DistilBertForMaskedLM": _distilbert_head,
}


def mlm_head(model) -> Callable[[torch.Tensor], torch.Tensor]:
    """The prediction head of a transformers masked-LM model: (..., H) -> (..., V)."""
    getter = MLM_HEADS.get(type(model).__name__)
    if getter is None:
        raise TypeError(f"no masked-LM head known for {type(model).__name__}; known: {', '.join(MLM_HEADS)}")
    return getter(model)


@dataclass
class HeadLoss:
    """A loss summed over its targets and their number; ``mean`` is what the papers minimise."""

    total: torch.Tensor
    count: int

    @property
    def mean(self) -> torch.Tensor:
        return self.total / max(self.count, 1)


def masked_positions(labels: torch.Tensor) -> torch.Tensor:
    """(M,) flat indices into B*T of the positions with a label, in row-major order."""
    return (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)


def masked_lm_loss(model, hidden: torch.Tensor, labels: torch.Tensor) -> HeadLoss:
    """Cross-entropy of the model's MLM head on the labelled positions only.

    hidden: (B, T, H) the encoder's last layer. labels: (B, T), -100 where nothing is predicted.
    """
    index = masked_positions(labels)  # (M,)
    rows = hidden.reshape(-1, hidden.size(-1)).index_select(0, index)  # (M, H)
    logits = mlm_head(model)(rows)  # (M, V)
    targets = labels.reshape(-1).index_select(0, index)  # (M,)
    return HeadLoss(F.cross_entropy(logits.float(), targets, reduction="sum"), int(index.numel()))


def next_token_targets(labels: torch.Tensor) -> torch.Tensor:
    """(B, T) labels shifted one to the left, -100 in the last column: position t's target is token t+1."""
    targets = torch.full_like(labels, IGNORE_INDEX)
    targets[:, :-1] = labels[:, 1:]
    return targets


def causal_lm_loss(logits: torch.Tensor, labels: torch.Tensor) -> HeadLoss:
    """Next-token cross-entropy (Radford et al. 2018 eq. 1) of (B, T, V) logits against (B, T) labels.

    The targets are shifted, not the logits: ``logits[:, :-1]`` would copy B x (T-1) x V floats forward
    and zero-fill and copy them again backward; the flat view costs nothing and the last column's -100
    drops the same B predictions. Same terms, same order: equal to the sliced form (tested)."""
    targets = next_token_targets(labels).reshape(-1)  # (B*T,)
    flat = logits.reshape(-1, logits.size(-1))  # (B*T, V), a view of contiguous logits
    return HeadLoss(F.cross_entropy(flat.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum"),
                    int((targets != IGNORE_INDEX).sum()))


class _LinearCrossEntropy(torch.autograd.Function):
    """Summed cross-entropy of ``hidden @ weight.T`` whose backward needs no softmax pass of its own.

    Forward: log-probabilities (N, V) = log_softmax(hidden @ weight.T), loss_n = -log p[n, y_n]. The
    gradient of the sum with respect to the logits, softmax - onehot (rows with target -100: zero), is
    then written over that buffer in place and kept for backward, where it meets the two matmuls. Against
    autograd on ``F.cross_entropy(hidden @ weight.T, ...)`` this skips the zero-filled (N, V) gradient of
    the NLL and the log-softmax backward (which reads two N x V tensors and writes a third): the softmax
    is one in-place pass instead. The upstream gradient (a scalar) scales the (N, H) and (V, H) results,
    not the (N, V) matrix.

    One (N, V) buffer in all, reused from step to step (``_BUFFERS``): the logits are written into it, the
    log-softmax overwrites them in place (bit-equal to the out-of-place op) and the gradient overwrites
    that; backward hands it back. A fresh N x V allocation each step costs the CPU more than the
    log-softmax itself (the allocator returns blocks this large to the system, so every step faults the
    pages in again). The backward's two products go through oneDNN (``fused.mm_t``, ``fused.weight_grad``).
    """

    @staticmethod
    def forward(ctx, hidden, weight, targets):
        buffer = _take_buffer((hidden.size(0), weight.size(0)), hidden)  # (N, V)
        torch.mm(hidden, weight.t(), out=buffer)  # the logits
        log_probs = torch._log_softmax(buffer, 1, False, out=buffer)
        ignored = targets == IGNORE_INDEX  # (N,)
        safe = targets.masked_fill(ignored, 0).unsqueeze(1)  # (N, 1)
        losses = -log_probs.gather(1, safe).squeeze(1).masked_fill(ignored, 0.0)  # (N,)
        grad = log_probs.exp_()  # softmax, in place
        grad.scatter_add_(1, safe, torch.full((grad.size(0), 1), -1.0, dtype=grad.dtype, device=grad.device))
        rows = ignored.nonzero().squeeze(1)
        if rows.numel():
            grad.index_fill_(0, rows, 0.0)  # only the ignored rows, not a pass over all N x V
        ctx.save_for_backward(hidden, weight, grad)
        return losses.sum()

    @staticmethod
    def backward(ctx, upstream):
        hidden, weight, grad = ctx.saved_tensors
        grad_hidden = mm_t(grad, weight.t()) * upstream if ctx.needs_input_grad[0] else None  # (N, H)
        grad_weight = weight_grad(hidden, grad) * upstream if ctx.needs_input_grad[1] else None  # (V, H)
        _give_back_buffer(grad)
        return grad_hidden, grad_weight, None


# (shape, dtype, device) -> a free (N, V) buffer of ``_LinearCrossEntropy``; taken by a forward, given back by its
# backward (a forward whose backward never runs leaves none, and the next allocates afresh)
_BUFFERS: dict[tuple, torch.Tensor] = {}


def _take_buffer(shape: tuple[int, int], like: torch.Tensor) -> torch.Tensor:
    buffer = _BUFFERS.pop((shape, like.dtype, like.device), None)
    return buffer if buffer is not None else torch.empty(shape, dtype=like.dtype, device=like.device)


def _give_back_buffer(buffer: torch.Tensor) -> None:
    _BUFFERS.clear()  # one kept: a run's batches change shape only at an epoch's or a shard's end
    _BUFFERS[(tuple(buffer.shape), buffer.dtype, buffer.device)] = buffer


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> HeadLoss:
    """Summed cross-entropy of the bias-free projection ``hidden @ weight.T`` (an LM head tied to the input
    embeddings) against ``targets`` (-100: not predicted). hidden (N, H), weight (V, H), targets (N,).
    Equal to ``F.cross_entropy`` on the logits up to float rounding (tested); fp32 throughout."""
    total = _LinearCrossEntropy.apply(hidden.float(), weight.float(), targets)
    return HeadLoss(total, int((targets != IGNORE_INDEX).sum()))


def causal_lm_model_loss(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> HeadLoss:
    """Next-token loss of a transformers causal LM (GPT, GPT-2) on a (B, T) batch: its base model, then its
    own output projection through ``linear_cross_entropy`` when that is a bias-free linear layer (the tied
    LM heads of GPT and GPT-2), else the model's logits through ``causal_lm_loss``."""
    head = model.get_output_embeddings()
    if not (isinstance(head, nn.Linear) and head.bias is None):
        return causal_lm_loss(model(input_ids=input_ids, attention_mask=attention_mask).logits, labels)
    hidden = model.base_model(input_ids=input_ids, attention_mask=attention_mask)[0]  # (B, T, H)
    return linear_cross_entropy(hidden.reshape(-1, hidden.size(-1)), head.weight, next_token_targets(labels).reshape(-1))


def next_sentence_loss(model, pooled: torch.Tensor, next_sentence_label: torch.Tensor) -> HeadLoss:
    """BERT's NSP loss from the pooled [CLS] output (B, H) and labels (B,) (0 IsNext, 1 NotNext)."""
    logits = model.cls.seq_relationship(pooled)  # (B, 2)
    return HeadLoss(F.cross_entropy(logits.float(), next_sentence_label, reduction="sum"), int(pooled.size(0)))


class SpanBoundaryHead(nn.Module):
    """SpanBERT's span boundary objective head (see the module docstring)."""

    def __init__(self, hidden_size: int, vocab_size: int, *, max_offset: int = 32, layer_norm_eps: float = 1e-12) -> None:
        super().__init__()
        self.max_offset = max_offset
        self.position = nn.Embedding(max_offset, hidden_size)
        self.dense1 = nn.Linear(3 * hidden_size, hidden_size)
        self.norm1 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.dense2 = nn.Linear(hidden_size, hidden_size)
        self.norm2 = nn.LayerNorm(hidden_size, eps=layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        nn.init.normal_(self.position.weight, std=0.02)  # BERT's initializer_range
        for dense in (self.dense1, self.dense2):
            nn.init.normal_(dense.weight, std=0.02)
            nn.init.zeros_(dense.bias)

    def forward(self, hidden: torch.Tensor, span_left: torch.Tensor, span_right: torch.Tensor, span_offset: torch.Tensor,
                output_embeddings: torch.Tensor) -> torch.Tensor:
        """Logits (M, V) for the M positions with ``span_offset >= 0``, in row-major order.

        hidden: (B, T, H). span_left, span_right, span_offset: (B, T), -1 at unmasked positions.
        output_embeddings: (V, H), the model's word embeddings (tied, as SpanBERT).
        """
        B, T, H = hidden.shape
        index = (span_offset.reshape(-1) >= 0).nonzero().squeeze(1)  # (M,)
        row_start = (index // T) * T  # (M,) flat index of each masked token's row
        flat = hidden.reshape(B * T, H)
        left = flat.index_select(0, row_start + span_left.reshape(-1).index_select(0, index))  # (M, H)
        right = flat.index_select(0, row_start + span_right.reshape(-1).index_select(0, index))  # (M, H)
        offset = span_offset.reshape(-1).index_select(0, index).clamp(max=self.max_offset - 1)  # (M,)
        h0 = torch.cat([left, right, self.position(offset)], dim=-1)  # (M, 3H)
        h1 = self.norm1(F.gelu(self.dense1(h0)))  # (M, H)
        y = self.norm2(F.gelu(self.dense2(h1)))  # (M, H)
        return y @ output_embeddings.t() + self.bias  # (M, V)

    def loss(self, model, hidden: torch.Tensor, labels: torch.Tensor, span_left: torch.Tensor, span_right: torch.Tensor,
             span_offset: torch.Tensor) -> HeadLoss:
        """Cross-entropy of the boundary predictions against ``labels`` at the span positions."""
        logits = self(hidden, span_left, span_right, span_offset, model.get_input_embeddings().weight)
        targets = labels.reshape(-1)[span_offset.reshape(-1) >= 0]  # (M,)
        return HeadLoss(F.cross_entropy(logits.float(), targets, reduction="sum"), int(targets.numel()))
