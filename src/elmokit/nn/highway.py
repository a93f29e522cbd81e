"""Highway layers (Srivastava et al. 2015, "Training Very Deep Networks", eq. 3).

    t = sigmoid(x W_carry + b_carry)            # the gate; TF names it "carry"
    y = t * relu(x W_transform + b_transform) + (1 - t) * x

bilm-tf calls the gate "carry" although t weights the *transform* branch; we keep its names so
the weight files map one to one, and the sense exactly as bilm-tf computes it. The nonlinearity
is relu whatever the char-CNN activation is (bilm-tf hard-codes it). Products go through
``packed_linear``, which is the plain batch-invariant product whenever autograd needs it.
"""

from __future__ import annotations

import torch
from torch import nn

from elmokit.nn.functional import packed_linear, sigmoid


class Highway(nn.Module):
    """A stack of highway layers of constant width. Shapes: (..., F) -> (..., F)."""

    def __init__(self, width: int, num_layers: int) -> None:
        super().__init__()
        self.carry = nn.ModuleList(nn.Linear(width, width) for _ in range(num_layers))
        self.transform = nn.ModuleList(nn.Linear(width, width) for _ in range(num_layers))
        self.precision = "fp32"  # of inference products: "fp32" (exact) or "bf16" (fast)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for carry, transform in zip(self.carry, self.transform):
            gate = sigmoid(packed_linear(x, carry.weight, carry.bias, precision=self.precision))
            x = gate * torch.relu(packed_linear(x, transform.weight, transform.bias, precision=self.precision)) + (1.0 - gate) * x
        return x
