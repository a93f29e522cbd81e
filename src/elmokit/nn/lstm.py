"""One direction of one layer of ELMo's LSTM with a projected hidden state.

This is TensorFlow's ``LSTMCell(num_proj=P, cell_clip, proj_clip)`` as bilm-tf trained it
(Hochreiter & Schmidhuber 1997 with the projection of Sak et al. 2014):

    [i, j, f, o] = x_t W_x + h_{t-1} W_h + b      # gate order i, j, f, o as TF stores it
    c_t = sigmoid(f + 1.0) * c_{t-1} + sigmoid(i) * tanh(j)
    c_t = clip(c_t, -cell_clip, cell_clip)
    h_t = clip((sigmoid(o) * tanh(c_t)) W_P, -proj_clip, proj_clip)

Kept for weight compatibility: the TF gate order (so converting is a transpose, never a
shuffle) and the forget bias of +1.0 added at run time, never folded into the stored bias
(folding would round, and the round trip to the original files would no longer be exact).

Legend: B batch, T time steps, I input size, D cell size, P projection size.
Three code paths compute this recurrence. For training (autograd on): the whole sequence as one
autograd node with a hand-written backward (``elmokit.nn.lstm_bptt``, the default), or the plain
per-step autograd loop (``_forward_differentiable``), selected by ``TRAINING_PATH = "autograd"``
or the environment variable ``ELMOKIT_LSTM_TRAINING_PATH=autograd`` (kept for comparison, and
used under autocast); the two give bit-identical outputs and gradients equal to rounding. For
inference: derived, prepacked weights and a batch that skips finished rows
(``_forward_inference``); it agrees with the others to float32 rounding. Each path is
batch-invariant bit for bit.

Rows are left-aligned: row b is valid for t < lengths[b]. A row stops updating after its last
step, so the final state of each row is its state after its own last token; outputs at
padded steps are zero.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from elmokit.nn.functional import PreparedWeight, can_prepare, invariant_linear, sigmoid, sigmoid_
from elmokit.nn.lstm_bptt import projected_lstm

FORGET_BIAS = 1.0
INPUT_CHUNK_ROWS = 512  # rows per hoisted input product in inference (memory vs GEMM shape)
TRAINING_PATHS = ("fused", "autograd")
# The training path: "fused" (one autograd node, hand-written BPTT) or "autograd" (the per-step loop).
TRAINING_PATH = os.environ.get("ELMOKIT_LSTM_TRAINING_PATH", "fused")


class ProjectedLSTM(nn.Module):
    def __init__(
        self,
        input_size: int,
        cell_size: int,
        projection_size: int,
        *,
        cell_clip: float | None,
        proj_clip: float | None,
    ) -> None:
        super().__init__()
        self.cell_size = cell_size
        self.projection_size = projection_size
        self.cell_clip = cell_clip or None  # 0 / None both mean "no clipping", as in the reference
        self.proj_clip = proj_clip or None
        self.input_linear = nn.Linear(input_size, 4 * cell_size)  # W_x (4D, I) and the gate bias
        self.hidden_linear = nn.Linear(projection_size, 4 * cell_size, bias=False)  # W_h (4D, P)
        self.projection = nn.Linear(cell_size, projection_size, bias=False)  # W_P (P, D)
        self.precision = "fp32"  # of inference products: "fp32" (exact) or "bf16" (fast)

    def zero_state(self, batch_size: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = like.new_zeros(batch_size, self.projection_size)
        c = like.new_zeros(batch_size, self.cell_size)
        return h, c

    def forward(
        self,
        inputs: torch.Tensor,
        lengths: torch.Tensor,
        state: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """inputs (B, T, I), lengths (B,) -> outputs (B, T, P), final (h (B, P), c (B, D))."""
        if not can_prepare(inputs, self.input_linear.weight):
            if self._use_fused(inputs, state):
                return projected_lstm(inputs, lengths, state, self.input_linear.weight, self.input_linear.bias,
                                      self.hidden_linear.weight, self.projection.weight, self.cell_clip, self.proj_clip)
            return self._forward_differentiable(inputs, lengths, state)
        return self._forward_inference(inputs, lengths, state)

    def _use_fused(self, inputs, state) -> bool:
        """The hand-written BPTT serves autograd outside autocast; everything else (inference on
        other devices or dtypes, autocast's per-op casts) keeps the plain loop."""
        if TRAINING_PATH not in TRAINING_PATHS:
            raise ValueError(f"elmokit.nn.lstm.TRAINING_PATH must be one of {TRAINING_PATHS}, got {TRAINING_PATH!r}")
        if TRAINING_PATH != "fused" or not torch.is_grad_enabled() or torch.is_autocast_enabled(inputs.device.type):
            return False
        tensors = [inputs, *self.parameters(), *(state if state is not None else ())]
        return any(t.requires_grad for t in tensors)

    def _forward_differentiable(self, inputs, lengths, state):
        """The recurrence as written in the module docstring, for training and fine-tuning."""
        batch_size, num_steps, _ = inputs.shape
        h, c = state if state is not None else self.zero_state(batch_size, inputs)
        # The input half of every gate pre-activation, for all steps in one matmul.
        input_gates = invariant_linear(inputs, self.input_linear.weight, self.input_linear.bias)  # (B, T, 4D)
        outputs = inputs.new_zeros(batch_size, num_steps, self.projection_size)
        for t in range(num_steps):
            gates = input_gates[:, t] + invariant_linear(h, self.hidden_linear.weight)  # (B, 4D)
            i, j, f, o = gates.chunk(4, dim=-1)
            new_c = sigmoid(f + FORGET_BIAS) * c + sigmoid(i) * torch.tanh(j)
            if self.cell_clip is not None:
                new_c = new_c.clamp(-self.cell_clip, self.cell_clip)
            new_h = invariant_linear(sigmoid(o) * torch.tanh(new_c), self.projection.weight)  # (B, P)
            if self.proj_clip is not None:
                new_h = new_h.clamp(-self.proj_clip, self.proj_clip)
            active = (lengths > t).unsqueeze(-1)  # (B, 1)
            h = torch.where(active, new_h, h)
            c = torch.where(active, new_c, c)
            outputs[:, t] = new_h * active
        return outputs, (h, c)

    # ---- inference ---------------------------------------------------------------------------

    def _inference_weights(self) -> tuple[PreparedWeight, PreparedWeight, PreparedWeight]:
        """Weights prepared for inference, rebuilt when a parameter or the precision changes: gate
        rows reordered from TF's (i, j, f, o) to (i, f, o, j) so that one sigmoid covers three
        gates, and the forget bias folded into the gate bias. Derived copies only: the stored
        weights never change, and only the prepared (packed) form is kept."""
        params = (self.input_linear.weight, self.input_linear.bias, self.hidden_linear.weight, self.projection.weight)
        key = (self.precision, *((p._version, p.data_ptr()) for p in params))
        if getattr(self, "_prepared_key", None) != key:
            self._prepared = None  # free the old copies before building new ones
            D = self.cell_size
            order = torch.cat([torch.arange(0, D), torch.arange(2 * D, 4 * D), torch.arange(D, 2 * D)])
            with torch.inference_mode(False), torch.no_grad():
                bias = self.input_linear.bias.detach().clone()
                bias[2 * D : 3 * D] += FORGET_BIAS
                self._prepared = (
                    PreparedWeight(self.input_linear.weight.detach()[order], bias[order], precision=self.precision),
                    PreparedWeight(self.hidden_linear.weight.detach()[order], precision=self.precision),
                    PreparedWeight(self.projection.weight, precision=self.precision),
                )
            self._prepared_key = key
        return self._prepared

    def _forward_inference(self, inputs, lengths, state):
        """The same recurrence without autograd: packed weights, in-place gate arithmetic, and a
        batch sorted by length that shrinks as rows end, so padding is never computed."""
        batch_size, num_steps, _ = inputs.shape
        D, P = self.cell_size, self.projection_size
        order = torch.argsort(lengths, descending=True, stable=True)
        is_sorted = bool((order == torch.arange(batch_size, device=order.device)).all())
        if not is_sorted:
            inputs, lengths = inputs[order], lengths[order]
            state = (state[0][order], state[1][order]) if state is not None else None
        h, c = (state[0].clone(), state[1].clone()) if state is not None else self.zero_state(batch_size, inputs)
        input_weights, hidden_weights, projection_weights = self._inference_weights()
        outputs = inputs.new_zeros(batch_size, num_steps, P)
        active_rows = (lengths.unsqueeze(0) > torch.arange(num_steps, device=lengths.device).unsqueeze(1)).sum(1).tolist()
        chunk_start, chunk_end = 0, 0
        for t, active in enumerate(active_rows):
            if active == 0:
                break
            if t == chunk_end:
                # The input half of the gates, hoisted out of the loop for a chunk of steps at a
                # time (~INPUT_CHUNK_ROWS rows): one well-shaped product, a bounded buffer instead
                # of (B, T, 4D), and no work on rows that have already ended. Rows are computed
                # independently (functional.py), so chunking changes no bit.
                chunk_start, chunk_end = t, min(num_steps, t + max(1, INPUT_CHUNK_ROWS // active))
                input_gates = input_weights(inputs[:active, chunk_start:chunk_end])  # (b, k, 4D), (i, f, o, j)
            gates = hidden_weights(h[:active]).add_(input_gates[:active, t - chunk_start])  # (b, 4D)
            sigmoid_(gates[:, : 3 * D])
            in_gate, forget_gate, out_gate = gates[:, :D], gates[:, D : 2 * D], gates[:, 2 * D : 3 * D]
            candidate = gates[:, 3 * D :].tanh_()
            new_c = torch.addcmul(forget_gate * c[:active], in_gate, candidate)  # (b, D)
            if self.cell_clip is not None:
                new_c.clamp_(-self.cell_clip, self.cell_clip)
            new_h = projection_weights(out_gate.mul_(torch.tanh(new_c)))  # (b, P)
            if self.proj_clip is not None:
                new_h.clamp_(-self.proj_clip, self.proj_clip)
            h[:active], c[:active] = new_h, new_c
            outputs[:active, t] = new_h
        if not is_sorted:
            restore = torch.argsort(order)
            outputs, h, c = outputs[restore], h[restore], c[restore]
        return outputs, (h, c)


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each row's valid prefix in time, leaving padding in place: (B, T, ...) -> same.

    TF's ``reverse_sequence``; applying it twice is the identity.
    """
    num_steps = x.shape[1]
    steps = torch.arange(num_steps, device=x.device).unsqueeze(0)  # (1, T)
    lengths = lengths.unsqueeze(1)  # (B, 1)
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # (B, T)
    index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(1, index)
