"""One-kernel stand-ins for transformers modules that spend a training step's time on elementwise ops.

GPT-2's ``gelu_new`` (transformers' ``NewGELUActivation``) writes the tanh approximation of GeLU
(Hendrycks & Gimpel 2016: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))) as seven tensor ops, each
reading and writing a B x T x 4H tensor forward and more backward; torch's ``GELU(approximate="tanh")``
computes the same function in one kernel each way, equal up to float rounding (tested). The swap is
made in the training run's model only: the saved config still names ``gelu_new``, so a loaded model
computes the same function with transformers' own module.
"""

from __future__ import annotations

from torch import nn


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
