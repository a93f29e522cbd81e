"""The masked-positions-only MLM loss equals transformers' stock loss; the span boundary head equals a
numpy re-statement of SpanBERT's equations, passes gradcheck, and only reads the boundary tokens."""

from __future__ import annotations

import numpy as np
import pytest
from pretraining_testkit import need_transformers

need_transformers()

import torch  # noqa: E402

from elmokit.pretraining.heads import SpanBoundaryHead, masked_lm_loss, next_sentence_loss  # noqa: E402
from elmokit.pretraining.models import build_model, preset  # noqa: E402

V, B, T = 211, 3, 7
TINY = preset("tiny", dropout=0.0)


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, T), generator=g)
    attention = torch.ones(B, T, dtype=torch.long)
    attention[1, 5:] = 0  # padding in one row
    labels = torch.full((B, T), -100)
    for b, positions in enumerate(([1, 4], [2], [0, 3, 6])):
        labels[b, positions] = torch.randint(5, V, (len(positions),), generator=g)
    return ids, attention, labels


@pytest.mark.parametrize("family", ["bert-mlm", "roberta", "distilbert"])
def test_masked_positions_loss_equals_the_stock_loss_and_gradients(family):
    model = build_model(family, TINY, vocab_size=V, pad_id=1 if family == "roberta" else 0)
    ids, attention, labels = _batch()
    stock = model(input_ids=ids, attention_mask=attention, labels=labels).loss
    stock.backward()
    stock_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    hidden = model.base_model(input_ids=ids, attention_mask=attention)[0]
    ours = masked_lm_loss(model, hidden, labels)
    assert ours.count == 6
    torch.testing.assert_close(ours.mean, stock, rtol=1e-6, atol=1e-6)
    ours.mean.backward()
    for name, parameter in model.named_parameters():
        if name in stock_grads:
            torch.testing.assert_close(parameter.grad, stock_grads[name], rtol=1e-5, atol=1e-7, msg=name)


def test_bert_pretraining_mlm_plus_nsp_equals_the_stock_total():
    model = build_model("bert", TINY, vocab_size=V)
    ids, attention, labels = _batch(1)
    types = torch.tensor([[0] * 4 + [1] * 3] * B)
    nsp = torch.tensor([0, 1, 1])
    stock = model(input_ids=ids, attention_mask=attention, token_type_ids=types, labels=labels, next_sentence_label=nsp).loss
    out = model.base_model(input_ids=ids, attention_mask=attention, token_type_ids=types)
    ours = masked_lm_loss(model, out[0], labels).mean + next_sentence_loss(model, out.pooler_output, nsp).mean
    torch.testing.assert_close(ours, stock, rtol=1e-6, atol=1e-6)


def _gelu(x):
    from math import sqrt

    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / sqrt(2)))


def _layer_norm(x, weight, bias, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


def test_span_boundary_head_equals_the_papers_equations():
    pytest.importorskip("scipy")
    H = 6
    torch.manual_seed(0)
    head = SpanBoundaryHead(H, 11, max_offset=4).double()
    with torch.no_grad():
        for p in head.parameters():
            p.normal_()
    hidden = torch.randn(2, 7, H, dtype=torch.float64)
    embeddings = torch.randn(11, H, dtype=torch.float64)
    left, right, offset = (torch.full((2, 7), -1) for _ in range(3))
    # row 0: span at 2..4; row 1: span at 1..1 and a long span 3..5 whose offset 2 is within max_offset
    left[0, 2:5], right[0, 2:5], offset[0, 2:5] = 1, 5, torch.tensor([0, 1, 2])
    left[1, 1], right[1, 1], offset[1, 1] = 0, 2, 0
    left[1, 3:6], right[1, 3:6], offset[1, 3:6] = 2, 6, torch.tensor([0, 1, 5])  # 5 is clamped to 3
    logits = head(hidden, left, right, offset, embeddings).detach().numpy()
    w = {n: p.detach().numpy() for n, p in head.named_parameters()}
    x = hidden.numpy()
    expected = []
    for b, t in [(0, 2), (0, 3), (0, 4), (1, 1), (1, 3), (1, 4), (1, 5)]:
        h0 = np.concatenate([x[b, left[b, t]], x[b, right[b, t]], w["position.weight"][min(int(offset[b, t]), 3)]])
        h1 = _layer_norm(_gelu(w["dense1.weight"] @ h0 + w["dense1.bias"]), w["norm1.weight"], w["norm1.bias"])
        y = _layer_norm(_gelu(w["dense2.weight"] @ h1 + w["dense2.bias"]), w["norm2.weight"], w["norm2.bias"])
        expected.append(embeddings.numpy() @ y + w["bias"])
    np.testing.assert_allclose(logits, np.array(expected), rtol=1e-10, atol=1e-10)


def test_span_boundary_head_gradients():
    torch.manual_seed(1)
    head = SpanBoundaryHead(4, 9, max_offset=3).double()
    hidden = torch.randn(1, 6, 4, dtype=torch.float64, requires_grad=True)
    embeddings = torch.randn(9, 4, dtype=torch.float64, requires_grad=True)
    left, right, offset = (torch.full((1, 6), -1) for _ in range(3))
    left[0, 2:4], right[0, 2:4], offset[0, 2:4] = 1, 4, torch.tensor([0, 1])
    assert torch.autograd.gradcheck(lambda h, e: head(h, left, right, offset, e), (hidden, embeddings))
    head(hidden, left, right, offset, embeddings).sum().backward()
    touched = hidden.grad.abs().sum(-1)[0]
    assert (touched[[1, 4]] > 0).all() and (touched[[0, 2, 3, 5]] == 0).all()  # only the boundaries are read
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in head.parameters())
