"""Batch-invariant linear algebra: a sentence's vectors must not depend on its batch.

The CPU BLAS picks kernels by shape, and for some shapes a row's result depends on the other
rows: below 16 rows a row's product with the same weights is rounded differently (1e-7
relative) than in a taller matrix, and when the output width is small and odd the library
transposes the problem so that rows share SIMD lanes. With at least 16 rows and an output width
that is a multiple of 16, every row's result is bit-identical whatever the number of rows, their
order or the row's position (measured here on 720 shapes with 1 to 200 inputs and 1 to 130
outputs; ``tests/test_functional.py`` checks it on the machine it runs on). So short inputs are
padded with zero rows and odd widths with zero weights. Real models have widths that are
multiples of 16 and batches of many tokens, so there the padding costs nothing.

Elementwise functions have the same trap: ``torch.sigmoid`` rounds the last few elements of a
tensor (the SIMD loop's tail) differently from the rest, so a value's result depended on where it
fell in the batch. ``exp`` and ``tanh`` do not, and ``+`` and ``/`` are exactly rounded, so
``sigmoid`` below is written as the textbook ``1 / (1 + exp(-x))``.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch
import torch.nn.functional as F

MIN_GEMM_ROWS = 16
GEMM_WIDTH_MULTIPLE = 16
MIN_PACKED_ROWS = 2  # prepared (oneDNN) products: see the inference section below


def invariant_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T + bias`` over the last dim of x, rounded the same way for any batch shape."""
    out_dim, in_dim = weight.shape
    rows = x.numel() // in_dim if in_dim else 0
    width_pad = -out_dim % GEMM_WIDTH_MULTIPLE
    if rows == 0 or (rows >= MIN_GEMM_ROWS and width_pad == 0):
        return F.linear(x, weight, bias)
    if width_pad:
        weight = torch.cat([weight, weight.new_zeros(width_pad, in_dim)])
        bias = torch.cat([bias, bias.new_zeros(width_pad)]) if bias is not None else None
    flat = x.reshape(rows, in_dim)
    if rows < MIN_GEMM_ROWS:
        flat = torch.cat([flat, flat.new_zeros(MIN_GEMM_ROWS - rows, in_dim)])
    return F.linear(flat, weight, bias)[:rows, :out_dim].reshape(*x.shape[:-1], out_dim)


MAX_MATMUL_BLOCK_ROWS = 64


def pad_columns(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` (in, out) with zero columns up to a multiple of GEMM_WIDTH_MULTIPLE (itself if
    none are needed): pad once outside a loop of ``invariant_matmul`` calls, then slice the result."""
    width_pad = -weight.shape[1] % GEMM_WIDTH_MULTIPLE
    return torch.cat([weight, weight.new_zeros(weight.shape[0], width_pad)], dim=1) if width_pad else weight


def invariant_matmul(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight`` for x (rows, in) and a weight stored (in, out), rounded the same way for any
    number of rows: rows are padded to MIN_GEMM_ROWS and multiplied in blocks of at most
    MAX_MATMUL_BLOCK_ROWS (MKL's kernel for this layout was seen to change its summation order
    from ~190 rows on), widths padded like ``invariant_linear``'s (``pad_columns``).

    Why not ``invariant_linear(x, weight.t())``: for skinny x and a long reduction into a narrow
    output (the LSTM backward's ``dgates_t W_h``: n x 4D times 4D x P) MKL's ``x @ W^T`` kernel ran
    2-4x slower than ``x @ W`` here (n = 8-64, 4D = 2048, P = 128, one thread).
    """
    in_dim, out_dim = weight.shape
    weight = pad_columns(weight)
    blocks = []
    for block in x.split(MAX_MATMUL_BLOCK_ROWS):  # zero rows give one empty block
        rows = block.shape[0]
        if rows < MIN_GEMM_ROWS:
            block = torch.cat([block, block.new_zeros(MIN_GEMM_ROWS - rows, in_dim)])
        blocks.append(torch.mm(block, weight)[:rows])
    out = blocks[0] if len(blocks) == 1 else torch.cat(blocks)
    return out[:, :out_dim] if weight.shape[1] != out_dim else out


def invariant_scores(rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``rows @ queries.T`` (N, B) in float32 for ranking: each row's scores are rounded the same
    way wherever the row sits and however many rows are scored, so identical rows tie exactly
    and a prefix (``rows[:k]``) scores as in the whole (BLAS alone breaks both, differently on
    each CPU). The rows are the batch side of ``invariant_linear``."""
    x, w = (_as_tensor(a) for a in (rows, queries))
    with torch.no_grad():
        return invariant_linear(x, w).numpy()


def _as_tensor(array: np.ndarray) -> torch.Tensor:
    array = np.ascontiguousarray(array, dtype=np.float32)
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    """The logistic function, rounded the same way wherever x sits in a tensor.

    Differentiated as s (1 - s) from the output: autograd through ``1 / (1 + exp(-x))`` itself multiplies
    0 by exp(-x) = inf once x < -88 (float32), a NaN gradient for a gate that is simply shut."""
    if torch.is_grad_enabled() and x.requires_grad:
        return _Sigmoid.apply(x)
    return _sigmoid_value(x)


def _sigmoid_value(x: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-x))


class _Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = _sigmoid_value(x)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * s * (1.0 - s)


# ---- inference: weights prepacked for oneDNN ----------------------------------------------------
#
# For inference on a CPU the weights are reordered once into oneDNN's blocked layout: the skinny
# per-step matrix products of the LSTM then run ~3x faster than through plain ``F.linear`` here
# (for instance at 64 x 512 x 16384). The packed kernel rounds differently from
# MKL's (1e-6 relative), and it is batch-invariant from 2 rows on (a single row takes a different
# kernel for some shapes); so inputs are padded to MIN_PACKED_ROWS = 2 rows, not 16, which cuts
# the cost of one sentence's recurrent step (see the batch-1 rows of docs/benchmarks.md). The same
# holds for the bf16 products. Widths are padded to multiples of 16 like above. Packed copies live
# beside their weights and are rebuilt when a weight changes (its version counter moves).
#
# bf16 products need oneDNN's bf16 kernels, which refuse to run on CPUs without AVX512-BW/VL/DQ or
# AVX-NE-CONVERT (most AMD and older Intel x86-64 CPUs, many arm ones). There the same arithmetic
# is emulated: weights and inputs are rounded to bf16 and multiplied by the fp32 packed kernel.
# The product of two bf16 numbers is exact in fp32, so the only other rounding is the fp32
# accumulation, as in the native kernel: same error against fp32, same batch invariance (that of
# the fp32 packed kernel), but fp32 speed and fp32 weight memory. ``bf16_backend()`` says which
# one runs; it is probed once, by packing a tiny bf16 weight.

# (id(weight), "fp32" or the bf16 backend) -> (weak reference to the weight, version key, PreparedWeight)
_PACKED: dict[int, tuple] = {}


def can_prepare(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Prepared weights serve CPU float32 inference; autograd and other devices use plain products."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))
    )


PRECISIONS = ("fp32", "bf16")
# Rows per native bf16 product (see PreparedWeight.__call__): where oneDNN's kernel choice is the same for 1 row.
BF16_MAX_BLOCK_ROWS = 32

# None: not probed yet; then True where oneDNN runs bf16 products on this CPU. Tests set it to
# False to exercise the emulation on any CPU.
_native_bf16: bool | None = None


def _probe_native_bf16() -> bool:
    try:
        with torch.inference_mode(False), torch.no_grad():
            weight = torch.ops.mkldnn._reorder_linear_weight(torch.ones(16, 16, dtype=torch.bfloat16), 64)
            x = torch.ones(MIN_PACKED_ROWS, 16, dtype=torch.bfloat16)
            out = torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
        return bool((out.float() == 16.0).all())
    except RuntimeError:  # "bf16 path needs the cpu support avx_ne_convert or avx512bw, ..."
        return False


def bf16_backend() -> str:
    """How ``precision="bf16"`` products run on this CPU: ``"onednn"`` (native bf16 kernels) or
    ``"emulated"`` (bf16-rounded operands through the fp32 kernel: same results up to the order
    of fp32 accumulation, fp32 speed)."""
    global _native_bf16
    if _native_bf16 is None:
        _native_bf16 = torch.backends.mkldnn.is_available() and _probe_native_bf16()
    return "onednn" if _native_bf16 else "emulated"


def _round_to_bf16(t: torch.Tensor) -> torch.Tensor:
    """Each element rounded to the nearest bf16 (ties to even), kept as float32: exact, elementwise."""
    return t.to(torch.bfloat16).float()


class PreparedWeight:
    """A weight (and bias) prepared once for inference products at one precision.

    Reordered into oneDNN's packed layout, in fp32 or as a bf16 copy (where the CPU lacks bf16
    kernels, as a bf16-rounded fp32 copy: see ``bf16_backend``). Widths are padded to a multiple
    of 16; inputs are padded to ``MIN_PACKED_ROWS`` rows when called (see above).
    Holds no reference to the original weight, so derived weights can be dropped once prepared.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, *, precision: str = "fp32") -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        self.precision = precision
        self.emulated = precision == "bf16" and bf16_backend() == "emulated"
        self.out_dim, self.in_dim = weight.shape
        width_pad = -self.out_dim % GEMM_WIDTH_MULTIPLE
        with torch.inference_mode(False), torch.no_grad():
            weight = weight.detach()
            bias = None if bias is None else bias.detach()
            if width_pad:
                weight = torch.cat([weight, weight.new_zeros(width_pad, self.in_dim)])
                bias = None if bias is None else torch.cat([bias, bias.new_zeros(width_pad)])
            if self.emulated:
                weight = _round_to_bf16(weight)
            elif precision == "bf16":  # packed too: plain bf16 F.linear is slower on skinny (one-sentence) steps
                weight = weight.to(torch.bfloat16)
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), 64)
            self.bias = None if bias is None else bias.contiguous()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // self.in_dim if self.in_dim else 0
        if rows == 0:
            return x.new_zeros(*x.shape[:-1], self.out_dim)
        flat = x.reshape(rows, self.in_dim)
        if rows < MIN_PACKED_ROWS:
            flat = torch.cat([flat, flat.new_zeros(MIN_PACKED_ROWS - rows, self.in_dim)])
        if self.emulated:
            out = torch.ops.mkldnn._linear_pointwise(_round_to_bf16(flat).contiguous(), self.weight, None, "none", [], "")
            if self.bias is not None:
                out += self.bias
        elif self.precision == "bf16":
            # Blocks of at most BF16_MAX_BLOCK_ROWS rows: on CPUs with AMX, oneDNN switches to its AMX
            # kernel above ~32 rows, which sums in another order (measured: 512 x 2048 differed from
            # one row at a time from 37 rows on). Every block stays on the one kernel a single row uses.
            flat = flat.to(torch.bfloat16)
            out = torch.cat([
                torch.ops.mkldnn._linear_pointwise(block.contiguous(), self.weight, None, "none", [], "")
                for block in _row_blocks(flat, BF16_MAX_BLOCK_ROWS)
            ]).float()
            if self.bias is not None:
                out += self.bias
        else:
            out = torch.ops.mkldnn._linear_pointwise(flat.contiguous(), self.weight, self.bias, "none", [], "")
        return out[:rows, : self.out_dim].reshape(*x.shape[:-1], self.out_dim)


def _row_blocks(flat: torch.Tensor, size: int) -> list[torch.Tensor]:
    """``flat``'s rows in blocks of ``size``; a last block shorter than MIN_PACKED_ROWS is zero-padded."""
    blocks = list(flat.split(size))
    if blocks[-1].shape[0] < MIN_PACKED_ROWS:
        blocks[-1] = torch.cat([blocks[-1], blocks[-1].new_zeros(MIN_PACKED_ROWS - blocks[-1].shape[0], flat.shape[1])])
    return blocks


def packed_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, precision: str = "fp32"
) -> torch.Tensor:
    """``invariant_linear`` for inference, through a ``PreparedWeight`` cached beside ``weight``
    and rebuilt when the weight changes.

    ``precision="bf16"`` multiplies in bfloat16 (inputs rounded to bf16, products accumulated in
    fp32; oneDNN's native kernel rounds the product to bf16, the emulation keeps it in fp32; the
    bias is added in fp32 and the result returned in fp32): about twice the speed on
    CPUs with AVX512-BF16, at about 1e-2 absolute error; emulated at fp32 speed on CPUs without bf16
    kernels (``bf16_backend``). Falls back to ``invariant_linear`` where
    preparing does not apply (autograd, GPU, not float32).
    """
    if not can_prepare(x, weight):
        return invariant_linear(x, weight, bias)
    key = (_version(weight), weight.data_ptr(), None if bias is None else (_version(bias), bias.data_ptr()))
    cache_id = (id(weight), precision if precision == "fp32" else bf16_backend())
    entry = _PACKED.get(cache_id)
    if entry is None or entry[0]() is not weight or entry[1] != key:
        if entry is None or entry[0]() is not weight:
            weakref.finalize(weight, _PACKED.pop, cache_id, None)
        entry = (weakref.ref(weight), key, PreparedWeight(weight, bias, precision=precision))
        _PACKED[cache_id] = entry
    return entry[2](x)


def _version(t: torch.Tensor) -> int:
    """In-place updates bump a tensor's version; inference tensors have none (they cannot be
    updated outside inference mode)."""
    return 0 if t.is_inference() else t._version


def sigmoid_(x: torch.Tensor) -> torch.Tensor:
    """In-place ``sigmoid`` with the same rounding as ``sigmoid`` above."""
    return x.neg_().exp_().add_(1.0).reciprocal_()
