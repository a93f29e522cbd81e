"""The context-independent token encoder of ELMo (spec §3.5): char CNN -> highway -> projection.

Legend: N tokens, C = 50 characters per token, E char-embedding dim, F = sum of filters,
P projection dim.

    x = char_embedding[ids]                                   # (N, C, E)
    h_i = act(max_over_positions(conv_i(x) + b_i))            # (N, n_i), one per filter width
    h = highway([h_1; ...; h_k])                              # (N, F)
    token = h W_proj + b_proj                                 # (N, P)   "layer 0"

Max-pooling happens before the activation: both relu and tanh are monotone, so the order is
immaterial to the result and pooling first is cheaper. Each convolution runs as one matrix
product over all character windows (im2col): faster than ``conv1d`` on a CPU, and it goes through
the same batch-invariant GEMM as the rest of the model. The weights keep ``Conv1d``'s layout.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from elmokit.nn.functional import invariant_linear
from elmokit.nn.highway import Highway

ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}


class CharCNNEncoder(nn.Module):
    def __init__(
        self,
        *,
        n_characters: int,
        char_embedding_dim: int,
        filters: Sequence[tuple[int, int]],
        activation: str,
        n_highway: int,
        output_dim: int,
        use_projection: bool,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"char_cnn activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        n_filters = sum(n for _, n in filters)
        if not use_projection and n_filters != output_dim:
            raise ValueError(
                f"without a projection the filters must sum to the projection dim: {n_filters} != {output_dim}"
            )
        # Row 0 is the padding id (all-zero token slots); the reference keeps it at zero.
        self.char_embedding = nn.Embedding(n_characters, char_embedding_dim, padding_idx=0)
        self.convs = nn.ModuleList(
            nn.Conv1d(char_embedding_dim, num, kernel_size=width) for width, num in filters
        )
        self.activation_name = activation
        self.highway = Highway(n_filters, n_highway)
        self.projection = nn.Linear(n_filters, output_dim) if use_projection else None
        self.output_dim = output_dim

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """char_ids (N, C) int64 -> token vectors (N, P)."""
        activation = ACTIVATIONS[self.activation_name]
        x = self.char_embedding(char_ids)  # (N, C, E)
        pooled = []
        for conv in self.convs:
            num, dim, width = conv.weight.shape
            windows = x.unfold(1, width, 1).transpose(2, 3)  # (N, C - w + 1, w, E)
            windows = windows.reshape(*windows.shape[:2], width * dim)
            kernel = conv.weight.permute(0, 2, 1).reshape(num, width * dim)  # (n, w * E)
            pooled.append(invariant_linear(windows, kernel, conv.bias).amax(dim=1))  # (N, n)
        h = activation(torch.cat(pooled, dim=-1))  # (N, F)
        h = self.highway(h)
        if self.projection is None:
            return h
        return invariant_linear(h, self.projection.weight, self.projection.bias)
