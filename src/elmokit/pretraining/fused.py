"""Stand-ins for transformers modules and torch kernels that spend a training step's time badly on a CPU.

GPT-2's ``gelu_new`` (transformers' ``NewGELUActivation``) writes the tanh approximation of GeLU
(Hendrycks & Gimpel 2016: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))) as seven tensor ops, each
reading and writing a B x T x 4H tensor forward and more backward; torch's ``GELU(approximate="tanh")``
computes the same function in one kernel each way, equal up to float rounding (tested). The swap is
made in the training run's model only: the saved config still names ``gelu_new``, so a loaded model
computes the same function with transformers' own module.

Linear layers through oneDNN. torch multiplies fp32 matrices on the CPU with MKL, whose SGEMM takes its
AVX2 path on CPUs it does not recognise (AMD's: about half the AVX-512 rate there), while oneDNN, also in
every torch CPU build, picks its kernel by the instruction set. ``linear`` computes ``x @ weight.T + bias``
and both products of its backward with oneDNN (``torch.ops.mkldnn._linear_pointwise``: plain strided
tensors in and out, fp32 arithmetic) where torch has it and the tensors are fp32 on the CPU, else with
torch's own ops. Same products, another summation order: equal up to float rounding (tested), and as
deterministic as MKL for a given thread count, so exact resume holds. ``use_onednn_linear`` switches the
``nn.Linear`` and GPT's ``Conv1D`` modules of a training run's model to it in place (their class only:
parameters, names and the saved folder are unchanged). ``ONEDNN["enabled"]`` turns it off process-wide
(the speed benchmark measures its share that way).
"""

from __future__ import annotations

import torch
from torch import nn

ONEDNN = {"enabled": True}


def fuse_activations(model: nn.Module) -> int:
    """Replace every ``NewGELUActivation`` submodule of ``model`` by ``nn.GELU(approximate="tanh")``, in
    place; returns how many were replaced (0 for models without one)."""
    replaced = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ == "NewGELUActivation":
                setattr(parent, name, nn.GELU(approximate="tanh"))
                replaced += 1
    return replaced


def _have_onednn() -> bool:
    try:
        return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    except (AttributeError, RuntimeError):
        return False


HAVE_ONEDNN = _have_onednn()

if HAVE_ONEDNN:  # torch.utils.flop_counter (the run's FLOP count) knows aten's products, not this one
    from torch.utils.flop_counter import register_flop_formula

    @register_flop_formula(torch.ops.mkldnn._linear_pointwise)
    def _linear_flops(x_shape, second, *rest, out_shape=None, **kwargs) -> int:
        # (X, W, B, ...) or, the .binary overload, (X, other, W, B, ...): W is the 2-d shape
        w_shape = rest[0] if rest and isinstance(rest[0], (tuple, list)) and len(rest[0]) == 2 else second
        rows = 1
        for size in x_shape[:-1]:
            rows *= size
        return 2 * rows * x_shape[-1] * w_shape[0]


def onednn_applies(*tensors: torch.Tensor) -> bool:
    """Whether ``linear`` and ``mm_t`` take oneDNN for these tensors: fp32 on the CPU, and switched on."""
    return ONEDNN["enabled"] and HAVE_ONEDNN and all(t.device.type == "cpu" and t.dtype == torch.float32 for t in tensors)


def _onednn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x @ weight.T (+ bias)`` by oneDNN; x (..., I), weight (O, I), either may be a strided view."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def mm_t(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b.T`` for a (N, K), b (M, K): oneDNN where it applies (``onednn_applies``), else torch.mm. No autograd."""
    return _onednn(a, b) if onednn_applies(a, b) else a @ b.t()


def weight_grad(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``grad.T @ x`` (O, I) for x (N, I), grad (N, O): the gradient of a linear layer's weight. The operand
    order oneDNN runs faster for these shapes: the wider side as its weight operand. No autograd."""
    if not onednn_applies(x, grad):
        return grad.t() @ x
    if grad.size(1) >= x.size(1):
        return _onednn(x.t(), grad.t()).t()  # (I, O) transposed: a view
    return _onednn(grad.t(), x.t())


class _Linear(torch.autograd.Function):
    """y = x W^T + b with the three products (forward, dL/dx = g W, dL/dW = g^T x) by oneDNN."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _onednn(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        flat = grad.reshape(-1, grad.size(-1))  # (N, O)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = _onednn(flat, weight.t()).view(x.shape)  # (N, I)
        if ctx.needs_input_grad[1]:
            grad_w = weight_grad(x.reshape(-1, x.size(-1)), flat)  # (O, I)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = flat.sum(0)
        return grad_x, grad_w, grad_b


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)``: x (..., I), weight (O, I), bias (O,) or None; by oneDNN where it applies."""
    tensors = (x, weight) if bias is None else (x, weight, bias)
    if not onednn_applies(*tensors):
        return nn.functional.linear(x, weight, bias)
    return _Linear.apply(x, weight, bias)


class OneDnnLinear(nn.Linear):
    """``nn.Linear`` computed by ``linear`` (a class swapped in place by ``use_onednn_linear``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)


def _conv1d_forward(self, x: torch.Tensor) -> torch.Tensor:
    # transformers' Conv1D keeps its weight as (in, out): y = x W + b, i.e. linear with W^T
    return linear(x, self.weight.t(), self.bias)


_CONV1D_CLASSES: dict[type, type] = {}


def use_onednn_linear(*modules: nn.Module) -> int:
    """Switch every ``nn.Linear`` and transformers ``Conv1D`` inside ``modules`` to ``linear`` (oneDNN), in
    place; returns how many were switched (0 when torch lacks oneDNN). The parameters stay the same objects."""
    if not HAVE_ONEDNN:
        return 0
    switched = 0
    for root in modules:
        for module in root.modules():
            kind = type(module)
            if kind is nn.Linear:
                module.__class__ = OneDnnLinear
                switched += 1
            elif kind.__name__ == "Conv1D" and kind.__module__.startswith("transformers."):
                if kind not in _CONV1D_CLASSES:
                    _CONV1D_CLASSES[kind] = type("OneDnnConv1D", (kind,), {"forward": _conv1d_forward})
                module.__class__ = _CONV1D_CLASSES[kind]
                switched += 1
    return switched
