"""The training path of ``ProjectedLSTM``: the whole sequence as one autograd node, BPTT by hand.

Same recurrence as ``elmokit.nn.lstm`` (its module docstring; TF gate order i, j, f, o, forget bias
+1 at run time, cell clip, projection clip, left-aligned rows with per-row lengths, zero outputs
at padded steps, each row's final state after its own last step). Why a hand-written backward:
the plain loop records ~20 autograd nodes per time step, and its backward accumulates the
recurrent and projection weight gradients one step at a time (T thin products plus T
additions into a full-size gradient) and zero-fills and copies per-step output slices
(docs/benchmarks.md, the training profile). Here

* forward runs the time loop without autograd and keeps the gate activations (N, 4D), the cell
  before and after its clip, tanh(c) and m = o * tanh(c) (N, D each: it computes them anyway, and
  tanh is the costliest elementwise function here) and the unclipped projection (N, P) (N =
  number of real tokens). The backward computes the gate coefficients step by step from these,
  on the step's rows, which stay in cache (precomputed for all steps as one (N, 4D) array they
  measured slower than the loop's extra operations; the 3 saved (N, D) arrays per LSTM take about
  the memory that array and its temporaries would, one LSTM at a time);
* backward runs BPTT by hand: per step only the two products the recurrence needs
  (dh_t W_P and dgates_t W_h); the weight gradients are one product each over all steps:
  dW_h = dgates^T [h_{t-1}], dW_x = dgates^T x, dW_P = dh_raw^T (o * tanh c).

Rows are sorted by length and stored packed, time-major (PackedSequence's layout: step t holds
the n_t rows still running), so padded positions are never computed, in either direction. Every
product that a row's result flows through is row-invariant (``invariant_linear``; in the backward
loop ``invariant_matmul``, which multiplies by the weights as stored: faster here for these skinny
products than through their transposes), so a row's outputs and its input/state gradients do not
depend on the other rows; the forward pass does the same floating-point operations in the same
order as the plain loop, so its outputs are bit-identical to it (tests/test_lstm_backward.py).

Gradients of the clips are those of ``torch.clamp``: 1 inside [-clip, clip], boundaries
included, 0 outside. Sigmoid's derivative is taken as s (1 - s) (the plain loop differentiates
``1 / (1 + exp(-x))`` step by step, which differs by rounding and gives NaN below x ~ -88 in
float32, where exp(-x) overflows).

Legend: B batch, T time steps, N real tokens (sum of lengths), I input, D cell, P projection.
"""

from __future__ import annotations

import torch

from elmokit.nn.functional import (
    GEMM_WIDTH_MULTIPLE,
    MAX_MATMUL_BLOCK_ROWS,
    MIN_GEMM_ROWS,
    invariant_linear,
    invariant_matmul,
    pad_columns,
    sigmoid_,
)

FORGET_BIAS = 1.0


def _clip_mask(raw: torch.Tensor, clip: float | None) -> torch.Tensor | None:
    """torch.clamp's gradient: 1 where -clip <= raw <= clip (boundaries pass), else 0 (NaN too)."""
    if clip is None:
        return None
    return (raw.abs() <= clip).to(raw.dtype)


def cell_step(step, c_prev, cell_raw, cell, tanh_cell, memory, cell_clip: float | None):
    """The elementwise half of one step, in place: the gate pre-activations ``step`` (n, 4D) become
    the activations; writes c_t before the clip (``cell_raw``), after it (``cell``; the same tensor
    as ``cell_raw`` without a clip), tanh(c_t) and m_t = o * tanh(c_t) (n, D each) and returns
    (c_t, m_t). The exact sequence of eager operations the bit-identity of this path rests on."""
    D = c_prev.shape[1]
    sigmoid_(step[:, :D])  # i
    torch.tanh_(step[:, D : 2 * D])  # j
    step[:, 2 * D : 3 * D].add_(FORGET_BIAS)  # f + 1.0: TF's forget bias at run time
    sigmoid_(step[:, 2 * D :])  # f and o, adjacent: one call
    in_gate, candidate, forget_gate, out_gate = step.chunk(4, dim=1)
    new_c = torch.mul(forget_gate, c_prev, out=cell_raw)
    new_c.add_(in_gate * candidate)
    if cell_clip is not None:
        new_c = torch.clamp(new_c, -cell_clip, cell_clip, out=cell)
    return new_c, torch.mul(out_gate, torch.tanh(new_c, out=tanh_cell), out=memory)


def _linear_into(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out[:] = invariant_linear(x, weight)``, the product written in place where it needs no
    padding (the same kernel on the same operands: the same bits, one copy fewer)."""
    if x.shape[0] >= MIN_GEMM_ROWS and weight.shape[0] % GEMM_WIDTH_MULTIPLE == 0:
        return torch.mm(x, weight.t(), out=out)
    return out.copy_(invariant_linear(x, weight))


def _matmul_into(x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``out[:] = invariant_matmul(x, weight)[:, :out width]`` for a weight padded with
    ``pad_columns``, in place where the product is a single block that needs no padding."""
    if MIN_GEMM_ROWS <= x.shape[0] <= MAX_MATMUL_BLOCK_ROWS and weight.shape[1] == out.shape[1]:
        return torch.mm(x, weight, out=out)
    return out.copy_(invariant_matmul(x, weight)[:, : out.shape[1]])


class PackedLayout:
    """Where each real token sits in the packed, length-sorted, time-major layout.

    order (B,): sorted position -> original row; counts[t]: rows running at step t; offsets[t]:
    the first packed position of step t; index (N,): packed position -> b * T + t in the
    original (B, T) layout; previous (N - counts[0],): for the packed positions of steps t >= 1,
    the packed position of the same row at step t - 1; last (B,): each original row's packed
    position at its last step (-1 for an empty row).
    """

    def __init__(self, lengths: torch.Tensor, num_steps: int) -> None:
        lengths = lengths.to(torch.long).cpu()
        batch_size = lengths.shape[0]
        self.order = torch.argsort(lengths, descending=True, stable=True)
        sorted_lengths = lengths[self.order]
        steps = torch.arange(num_steps)
        running = sorted_lengths.unsqueeze(0) > steps.unsqueeze(1)  # (T, B), rows left of the count
        counts = running.sum(1)
        self.counts = [c for c in counts.tolist() if c > 0]
        offsets = torch.cumsum(counts, 0) - counts
        self.offsets = offsets.tolist()[: len(self.counts)]
        self.num_tokens = int(counts.sum())
        t_index, rank = running.nonzero(as_tuple=True)  # row-major over (T, B): the packed order
        self.index = self.order[rank] * num_steps + t_index
        later = t_index > 0
        self.previous = offsets[t_index[later] - 1] + rank[later]
        rank_of_row = torch.empty_like(self.order)
        rank_of_row[self.order] = torch.arange(batch_size)
        self.restore = rank_of_row
        self.last = torch.where(lengths > 0, offsets[(lengths - 1).clamp(min=0)] + rank_of_row, torch.full_like(lengths, -1))

    def to(self, device: torch.device) -> PackedLayout:
        for name in ("order", "index", "previous", "restore", "last"):
            setattr(self, name, getattr(self, name).to(device))
        return self


def _previous(packed: torch.Tensor, initial_sorted: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """The state each packed step started from: (N, K) from the packed states (N, K) and the
    sorted initial state (B, K)."""
    first = layout.counts[0] if layout.counts else 0
    return torch.cat([initial_sorted[:first], packed[layout.previous]])


def _final(packed: torch.Tensor, initial: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """Each original row's state after its last step (its initial state if it has none): (B, K)."""
    if packed.shape[0] == 0:
        return initial.clone()
    has_steps = (layout.last >= 0).unsqueeze(1)
    return torch.where(has_steps, packed[layout.last.clamp(min=0)], initial)


class ProjectedLSTMFunction(torch.autograd.Function):
    """(inputs (B, T, I), lengths (B,), h0 (B, P), c0 (B, D), W_x (4D, I), b (4D,), W_h (4D, P),
    W_P (P, D), cell_clip, proj_clip) -> outputs (B, T, P), h (B, P), c (B, D)."""

    @staticmethod
    def forward(ctx, inputs, lengths, h0, c0, input_weight, input_bias, hidden_weight, projection_weight, cell_clip, proj_clip):
        batch_size, num_steps, input_size = inputs.shape
        D, P = c0.shape[1], h0.shape[1]
        layout = PackedLayout(lengths, num_steps).to(inputs.device)
        x = inputs.reshape(batch_size * num_steps, input_size)[layout.index]  # (N, I)
        h0_sorted, c0_sorted = h0[layout.order], c0[layout.order]
        # The input half of every gate for all real tokens in one product; the loop adds the
        # recurrent half in place and turns the buffer into the activations (the saved state).
        gates = invariant_linear(x, input_weight, input_bias)  # (N, 4D): i, j, f, o
        cell_raw = gates.new_empty(layout.num_tokens, D)  # before the cell clip
        cell = cell_raw if cell_clip is None else gates.new_empty(layout.num_tokens, D)  # after it
        tanh_cell = gates.new_empty(layout.num_tokens, D)  # tanh(c_t): the backward reuses it
        memory_all = gates.new_empty(layout.num_tokens, D)  # m_t = o * tanh(c_t), the projection's input
        proj_raw = gates.new_empty(layout.num_tokens, P)  # before the projection clip
        h_all = proj_raw if proj_clip is None else gates.new_empty(layout.num_tokens, P)  # clipped h
        h, c = h0_sorted, c0_sorted
        for start, n in zip(layout.offsets, layout.counts):
            span = slice(start, start + n)
            step = gates[span]  # (n, 4D)
            step.add_(invariant_linear(h[:n], hidden_weight))
            new_c, memory = cell_step(step, c[:n], cell_raw[span], cell[span], tanh_cell[span], memory_all[span], cell_clip)
            new_h = _linear_into(memory, projection_weight, proj_raw[span])  # (n, P)
            if proj_clip is not None:
                new_h = torch.clamp(new_h, -proj_clip, proj_clip, out=h_all[span])
            h, c = new_h, new_c
        outputs = inputs.new_zeros(batch_size * num_steps, P)
        outputs[layout.index] = h_all
        h_final, c_final = _final(h_all, h0, layout), _final(cell, c0, layout)
        ctx.save_for_backward(x, h0_sorted, c0_sorted, gates, cell_raw, cell, tanh_cell, memory_all, proj_raw, h_all,
                              input_weight, hidden_weight, projection_weight)
        ctx.layout, ctx.clips, ctx.shape = layout, (cell_clip, proj_clip), inputs.shape
        return outputs.view(batch_size, num_steps, P), h_final, c_final

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_outputs, grad_h, grad_c):
        (x, h0_sorted, c0_sorted, acts, cell_raw, cell, tanh_cell, memory, proj_raw, h_all,
         input_weight, hidden_weight, projection_weight) = ctx.saved_tensors
        layout, (cell_clip, proj_clip) = ctx.layout, ctx.clips
        batch_size, num_steps, input_size = ctx.shape
        N, D, P = layout.num_tokens, cell_raw.shape[1], proj_raw.shape[1]
        in_gate, candidate, forget_gate, out_gate = acts.chunk(4, dim=1)

        # Everything that does not depend on the carried gradient, for all steps at once.
        cell_mask, proj_mask = _clip_mask(cell_raw, cell_clip), _clip_mask(proj_raw, proj_clip)

        if grad_outputs is None:
            grad_out = acts.new_zeros(N, P)
        else:
            grad_out = grad_outputs.reshape(batch_size * num_steps, P)[layout.index]  # (N, P), a copy: becomes dh_raw in place
        dh = grad_h[layout.order] if grad_h is not None else acts.new_zeros(batch_size, P)
        dc = grad_c[layout.order] if grad_c is not None else acts.new_zeros(batch_size, D)
        dgates = torch.empty_like(acts)  # (N, 4D)
        # Widths padded once here, not in every step's product (sliced back below).
        projection_padded, hidden_padded = pad_columns(projection_weight), pad_columns(hidden_weight)
        # dgates = [dc * k_i, dc * k_j, dc * k_f, dm * k_o] and dc += dm * k_c (m = o * tanh c), with
        # k_i = j i (1 - i), k_j = i (1 - j^2), k_f = c_{t-1} f (1 - f), k_o = tanh(c) o (1 - o),
        # k_c = o (1 - tanh(c)^2): computed step by step, on slices that stay in cache.
        for t in reversed(range(len(layout.counts))):
            start, n = layout.offsets[t], layout.counts[t]
            span = slice(start, start + n)
            i, j, f, o, tanh_c = in_gate[span], candidate[span], forget_gate[span], out_gate[span], tanh_cell[span]
            # the cell each row started the step from: rows are sorted by length, so a step's rows
            # are the first n of the previous step's
            c_prev = c0_sorted[:n] if t == 0 else cell[layout.offsets[t - 1] : layout.offsets[t - 1] + n]
            d_proj = grad_out[span].add_(dh[:n])  # dL/dh_t, before the clip
            if proj_mask is not None:
                d_proj.mul_(proj_mask[span])
            dm = invariant_matmul(d_proj, projection_padded)[:, :D]  # (n, D) = dh_raw W_P
            d_cell = torch.addcmul(dc[:n], dm, o * (1 - tanh_c * tanh_c))
            if cell_mask is not None:
                d_cell.mul_(cell_mask[span])
            step = dgates[span]
            torch.mul(j, i * (1 - i), out=step[:, :D]).mul_(d_cell)
            torch.mul(i, 1 - j * j, out=step[:, D : 2 * D]).mul_(d_cell)
            torch.mul(c_prev, f * (1 - f), out=step[:, 2 * D : 3 * D]).mul_(d_cell)
            torch.mul(tanh_c, o * (1 - o), out=step[:, 3 * D :]).mul_(dm)
            _matmul_into(step, hidden_padded, dh[:n])  # dh_{t-1} = dgates_t W_h
            torch.mul(d_cell, f, out=dc[:n])
        d_proj_all = grad_out  # (N, P)

        grads = [None] * 10
        needs = ctx.needs_input_grad
        if needs[0]:
            grad_x = invariant_linear(dgates, input_weight.t().contiguous())  # (N, I)
            grad_inputs = grad_x.new_zeros(batch_size * num_steps, input_size)
            grad_inputs[layout.index] = grad_x
            grads[0] = grad_inputs.view(batch_size, num_steps, input_size)
        if needs[2]:
            grads[2] = dh[layout.restore]
        if needs[3]:
            grads[3] = dc[layout.restore]
        if needs[4]:
            grads[4] = dgates.t() @ x  # (4D, I): one product over all steps
        if needs[5]:
            grads[5] = dgates.sum(0)
        if needs[6]:
            h_prev = _previous(h_all, h0_sorted, layout)  # (N, P)
            grads[6] = dgates.t() @ h_prev  # (4D, P)
        if needs[7]:
            grads[7] = d_proj_all.t() @ memory  # (P, D)
        return tuple(grads)


def projected_lstm(inputs, lengths, state, input_weight, input_bias, hidden_weight, projection_weight,
                   cell_clip, proj_clip):
    """``ProjectedLSTM``'s recurrence with the hand-written backward: (outputs, (h, c))."""
    batch_size = inputs.shape[0]
    P, D = projection_weight.shape
    if state is None:
        h0, c0 = inputs.new_zeros(batch_size, P), inputs.new_zeros(batch_size, D)
    else:
        h0, c0 = state
    outputs, h, c = ProjectedLSTMFunction.apply(inputs, lengths, h0, c0, input_weight, input_bias, hidden_weight,
                                                projection_weight, cell_clip, proj_clip)
    return outputs, (h, c)
