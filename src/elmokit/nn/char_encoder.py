"""The context-independent token encoder of ELMo, as bilm-tf built it: char CNN -> highway -> projection.

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

from collections.abc import Sequence

import torch
from torch import nn

from elmokit.nn.functional import invariant_linear, packed_linear
from elmokit.nn.highway import Highway

ACTIVATIONS = {"relu": torch.relu, "tanh": torch.tanh}
PADDING_CHAR_ID = 261  # the padding character (260) after the +1 shift of every id
_GROUP_SIZE = 256  # tokens per length group in inference


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
        self.precision = "fp32"  # of inference products: "fp32" (exact) or "bf16" (fast)

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        """char_ids (N, C) int64 -> token vectors (N, P)."""
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            return self._forward_differentiable(char_ids)
        unique, inverse = torch.unique(char_ids, dim=0, return_inverse=True)  # each spelling once
        return self.encode_unique(unique)[inverse]

    def _forward_differentiable(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Training: the windows of ``encode_unique`` through differentiable products. Forward values
        are bit-identical to convolving all C positions (every product is row-invariant; the max is
        exact); the gradient is the same up to the order of summation: where the maximum is an
        all-padding window, max-pooling over the full width splits its gradient evenly among the k
        identical windows, which sums to this one window's (tests/test_char_encoder_training.py
        checks against conv1d in float64).
        """
        kernels = [(conv.weight.permute(0, 2, 1).reshape(conv.weight.shape[0], -1), conv.bias) for conv in self.convs]
        h = ACTIVATIONS[self.activation_name](self._max_pooled(char_ids, kernels, invariant_linear))  # (N, F)
        h = self.highway(h)
        if self.projection is None:
            return h
        return invariant_linear(h, self.projection.weight, self.projection.bias)

    # ---- inference ---------------------------------------------------------------------------

    def encode_unique(self, char_ids: torch.Tensor) -> torch.Tensor:
        """Inference on distinct spellings (N, C) -> (N, P), computing only windows that matter
        (``_max_pooled``), through the prepared (packed) products."""

        def product(x, kernel, bias):
            return packed_linear(x, kernel, bias, precision=self.precision)

        h = ACTIVATIONS[self.activation_name](self._max_pooled(char_ids, self._inference_kernels(), product))
        h = self.highway(h)
        if self.projection is None:
            return h
        return packed_linear(h, self.projection.weight, self.projection.bias, precision=self.precision)

    def _max_pooled(self, char_ids: torch.Tensor, kernels, product) -> torch.Tensor:
        """Each filter's maximum over a token's character windows, before the activation: (N, F).

        A token of n non-padding characters is followed by padding characters only, so every
        window that starts at or after n reads the same padding and gives the same value c_f per
        filter, for every token. Tokens are grouped by length; each group computes only the windows
        that start before its longest token ends, and c_f (computed once per filter) joins the max
        wherever the full-width convolution would have had such a window. Because every product is
        batch-invariant, the result is bit-identical to convolving all C positions. ``kernels``:
        (n_f, w * E) matrices with their biases; ``product(x, kernel, bias)``: x kernel^T + bias.
        """
        num_chars = char_ids.shape[1]
        widths = [conv.weight.shape[2] for conv in self.convs]
        if char_ids.shape[0] == 0:
            return self.char_embedding.weight.new_zeros(0, sum(kernel.shape[0] for kernel, _ in kernels))
        lengths = (char_ids != PADDING_CHAR_ID).sum(dim=1)  # (N,) non-padding characters
        order = torch.argsort(lengths, descending=True, stable=True)
        pad_window = self.char_embedding.weight[PADDING_CHAR_ID]  # (E,)
        padding_values: dict[int, torch.Tensor] = {}  # filter index -> c_f (1, n_f), made when first needed
        pooled_rows = []
        for start in range(0, len(order), _GROUP_SIZE):
            group = order[start : start + _GROUP_SIZE]
            longest = int(lengths[group[0]])
            x = self.char_embedding(char_ids[group, : min(longest + max(widths) - 1, num_chars)])  # (n, <= C, E)
            per_filter = []
            for index, ((kernel, bias), width) in enumerate(zip(kernels, widths)):
                num_windows = min(longest, num_chars - width + 1)
                windows = x[:, : num_windows + width - 1].unfold(1, width, 1).transpose(2, 3)
                pooled = product(windows.reshape(*windows.shape[:2], -1), kernel, bias).amax(dim=1)  # (n, n_f)
                if num_windows < num_chars - width + 1:  # all-padding windows exist: their value joins
                    if index not in padding_values:
                        padding_values[index] = product(pad_window.repeat(width)[None], kernel, bias)
                    pooled = torch.maximum(pooled, padding_values[index])
                per_filter.append(pooled)
            pooled_rows.append(torch.cat(per_filter, dim=-1))
        return torch.cat(pooled_rows)[torch.argsort(order)]  # original order

    def _inference_kernels(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each Conv1d weight (n, E, w) as a matrix (n, w * E) over flattened windows; rebuilt
        when a weight changes."""
        key = tuple((conv.weight._version, conv.weight.data_ptr()) for conv in self.convs)
        if getattr(self, "_kernels_key", None) != key:
            with torch.inference_mode(False), torch.no_grad():
                self._kernels = [
                    (conv.weight.detach().permute(0, 2, 1).reshape(conv.weight.shape[0], -1).contiguous(), conv.bias.detach())
                    for conv in self.convs
                ]
            self._kernels_key = key
        return self._kernels
