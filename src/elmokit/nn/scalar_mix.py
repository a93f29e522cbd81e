"""The task-specific weighting of biLM layers (Peters et al. 2018, eq. 1):

    ELMo_k = gamma * sum_j s_j h_{k,j},   s = softmax(w)

with the semantics of AllenNLP's ``ScalarMix``: w starts at 0 (or at given *pre-softmax* values), gamma at
1.0; with ``do_layer_norm`` each layer is first normalised with one mean and one variance over
all unmasked positions and all dimensions of the batch, eps 1e-13. ``l2_penalty`` is the
paper's lambda * ||w||^2 regulariser (lambda = 0.001 recommended).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

LAYER_NORM_EPS = 1e-13


class ScalarMix(nn.Module):
    def __init__(
        self,
        mixture_size: int,
        *,
        do_layer_norm: bool = False,
        initial_scalar_parameters: Sequence[float] | None = None,
        trainable: bool = True,
    ) -> None:
        super().__init__()
        if initial_scalar_parameters is None:
            initial_scalar_parameters = [0.0] * mixture_size
        if len(initial_scalar_parameters) != mixture_size:
            raise ValueError(
                f"initial_scalar_parameters has {len(initial_scalar_parameters)} values "
                f"for a mixture of {mixture_size} layers"
            )
        self.mixture_size = mixture_size
        self.do_layer_norm = do_layer_norm
        self.scalar_parameters = nn.Parameter(
            torch.tensor([float(v) for v in initial_scalar_parameters]), requires_grad=trainable
        )
        self.gamma = nn.Parameter(torch.tensor([1.0]), requires_grad=trainable)

    def weights(self) -> torch.Tensor:
        """The normalised layer weights s = softmax(w), shape (mixture_size,)."""
        return torch.softmax(self.scalar_parameters, dim=0)

    def l2_penalty(self, coefficient: float = 0.001) -> torch.Tensor:
        """lambda * ||w||^2 on the pre-softmax weights (the paper's regulariser)."""
        return coefficient * (self.scalar_parameters**2).sum()

    def forward(
        self, layers: Sequence[torch.Tensor] | torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """layers: L+1 tensors (B, T, H) (or one stacked (L+1, B, T, H)); mask (B, T) -> (B, T, H)."""
        if len(layers) != self.mixture_size:
            raise ValueError(f"expected {self.mixture_size} layers, got {len(layers)}")
        weights = self.weights()
        if self.do_layer_norm:
            if mask is None:
                raise ValueError("do_layer_norm needs the mask")
            mask_f = mask.unsqueeze(-1).to(layers[0].dtype)  # (B, T, 1)
            layers = [_masked_layer_norm(layer, mask_f) for layer in layers]
        mixed = sum(w * layer for w, layer in zip(weights, layers))
        return self.gamma * mixed


def _masked_layer_norm(layer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """One mean and variance over every unmasked position and dimension of the batch."""
    count = mask.sum() * layer.shape[-1]
    mean = (layer * mask).sum() / count
    variance = (((layer - mean) * mask) ** 2).sum() / count
    return (layer - mean) / torch.sqrt(variance + LAYER_NORM_EPS)
