"""The training path of the char CNN (``_forward_differentiable``) against a brute-force oracle:
``torch.nn.functional.conv1d`` over all 50 character positions, max over every window, then the
same highway and projection. Float64, so the gradients compare to rounding."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from elmokit.nn.char_encoder import ACTIVATIONS, CharCNNEncoder
from elmokit.text import token_to_char_ids

WORDS = ["a", "the", "cat", "Ünïcödé", "🙂", "supercalifragilistic", "y" * 48, "x" * 60, "of", "the"]


def make_encoder(activation: str) -> CharCNNEncoder:
    torch.manual_seed(3)
    encoder = CharCNNEncoder(n_characters=262, char_embedding_dim=4, filters=[(1, 3), (2, 4), (4, 5)],
                             activation=activation, n_highway=1, output_dim=6, use_projection=True).double()
    with torch.no_grad():
        for p in encoder.parameters():
            p.normal_(0.0, 0.5)
        encoder.char_embedding.weight[261] *= 4.0  # the padding character: all-padding windows win some maxima
    return encoder


def padding_windows_win(encoder: CharCNNEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    """(N, F) bool: the max over every window is an all-padding window's value (the shortcut's case)."""
    x = encoder.char_embedding(char_ids).transpose(1, 2)
    wins = []
    for conv in encoder.convs:
        values = F.conv1d(x, conv.weight, conv.bias)  # (N, n, S)
        lengths = (char_ids != 261).sum(dim=1)
        starts = torch.arange(values.shape[2])
        padding_only = starts[None, :] >= lengths[:, None]  # (N, S)
        best_padding = values.masked_fill(~padding_only[:, None, :], float("-inf")).amax(dim=2)
        wins.append(best_padding >= values.amax(dim=2))
    return torch.cat(wins, dim=1)


def brute_force(encoder: CharCNNEncoder, char_ids: torch.Tensor) -> torch.Tensor:
    x = encoder.char_embedding(char_ids).transpose(1, 2)  # (N, E, C)
    pooled = [F.conv1d(x, conv.weight, conv.bias).amax(dim=2) for conv in encoder.convs]  # every window
    h = encoder.highway(ACTIVATIONS[encoder.activation_name](torch.cat(pooled, dim=1)))
    return encoder.projection(h)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_training_path_equals_conv1d_over_every_window(activation, monkeypatch):
    import elmokit.nn.char_encoder as module

    monkeypatch.setattr(module, "_GROUP_SIZE", 4)  # several length groups, the longest alone
    encoder = make_encoder(activation)
    char_ids = torch.from_numpy(np.stack([token_to_char_ids(w) for w in WORDS]))
    char_ids = torch.cat([char_ids, torch.zeros(1, char_ids.shape[1], dtype=char_ids.dtype)])  # a padding token
    weights = torch.randn(len(char_ids), 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)

    def value_and_grads(fn):
        encoder.zero_grad(set_to_none=True)
        out = fn(char_ids)
        (out * weights).sum().backward()
        return out.detach(), {name: p.grad.clone() for name, p in encoder.named_parameters()}

    wins = padding_windows_win(encoder, char_ids)
    assert wins.any() and not wins.all(), "the case must have maxima on both sides"
    fast, fast_grads = value_and_grads(encoder._forward_differentiable)
    slow, slow_grads = value_and_grads(lambda ids: brute_force(encoder, ids))
    torch.testing.assert_close(fast, slow, rtol=1e-12, atol=1e-12)
    assert fast_grads.keys() == slow_grads.keys()
    for name, grad in slow_grads.items():
        torch.testing.assert_close(fast_grads[name], grad, rtol=1e-10, atol=1e-12, msg=name)
    # The padding character's embedding is trained through the all-padding windows of short words.
    assert slow_grads["char_embedding.weight"][261].abs().sum() > 0
    assert torch.equal(fast[1], fast[9]), "the same spelling gets the same vector"
