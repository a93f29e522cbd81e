"""The pretraining step's speed levers keep the numbers: the causal LM loss on shifted targets equals the loss
on sliced logits (value and gradients, bit for bit) and a numpy re-statement; the fused LM head and
cross-entropy equal autograd's and transformers' own loss up to rounding; GPT-2's one-kernel GeLU equals
``gelu_new`` up to rounding; a GPT-2 run resumed halfway ends bit-identical (one thread and two); the linear
layers and products by oneDNN equal a float64 numpy re-statement, repeat bit for bit and are counted by the FLOP
counter; the fused head's reused buffer gives the numbers of a fresh one."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pretraining_testkit import need_transformers, write_document_corpus
from train_helpers import one_thread

from elmokit.pretraining.heads import IGNORE_INDEX, causal_lm_loss, causal_lm_model_loss, linear_cross_entropy, next_token_targets


@contextlib.contextmanager
def n_threads(n):
    if n == 1:
        with one_thread():
            yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _sliced(logits, labels):
    """The loss as the step computed it before: logits[:, :-1] against labels[:, 1:], mean over targets."""
    targets = labels[:, 1:]
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE_INDEX)


def test_next_token_targets_shift_left_and_drop_the_last_column():
    labels = torch.tensor([[5, 6, 7, IGNORE_INDEX], [8, 9, 10, 11]])
    assert next_token_targets(labels).tolist() == [[6, 7, IGNORE_INDEX, IGNORE_INDEX], [9, 10, 11, IGNORE_INDEX]]


def test_causal_lm_loss_equals_the_sliced_form_bit_for_bit_and_a_numpy_restatement():
    generator = torch.Generator().manual_seed(0)
    B, T, V = 3, 9, 13
    logits = torch.randn(B, T, V, generator=generator) * 3
    labels = torch.randint(0, V, (B, T), generator=generator)
    labels[1, 6:] = IGNORE_INDEX  # a padded row
    a = logits.clone().requires_grad_(True)
    b = logits.clone().requires_grad_(True)
    head = causal_lm_loss(a, labels)
    new = head.mean
    old = _sliced(b, labels)
    new.backward()
    old.backward()
    assert torch.equal(new.detach(), old.detach()) and torch.equal(a.grad, b.grad)
    # the oracle: mean over t of -log softmax(logits[b, t])[labels[b, t+1]] where the target is a token
    x = logits.double().numpy()
    log_probs = x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
    terms = [-log_probs[i, t, labels[i, t + 1]] for i in range(B) for t in range(T - 1) if labels[i, t + 1] != IGNORE_INDEX]
    assert head.count == len(terms) == B * (T - 1) - 3
    np.testing.assert_allclose(float(new.detach()), np.mean(terms), rtol=1e-6)


def test_the_fused_head_and_cross_entropy_equal_autograds_on_the_logits():
    """Value and gradients (hidden and the tied weight) against F.cross_entropy(hidden @ W.T), ignored rows
    included, with a non-unit upstream gradient (the mean's 1/count)."""
    generator = torch.Generator().manual_seed(2)
    N, H, V = 40, 16, 97
    hidden, weight = torch.randn(N, H, generator=generator), torch.randn(V, H, generator=generator) * 0.5
    targets = torch.randint(0, V, (N,), generator=generator)
    targets[[3, 17, 39]] = IGNORE_INDEX
    h1, w1 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    h2, w2 = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
    fused = linear_cross_entropy(h1, w1, targets)
    assert fused.count == N - 3
    fused.mean.backward()
    reference = F.cross_entropy(h2 @ w2.t(), targets, ignore_index=IGNORE_INDEX)  # mean over the N - 3 targets
    reference.backward()
    np.testing.assert_allclose(float(fused.mean.detach()), float(reference.detach()), rtol=1e-6)
    np.testing.assert_allclose(h1.grad.numpy(), h2.grad.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(w1.grad.numpy(), w2.grad.numpy(), rtol=1e-5, atol=1e-7)
    assert not h1.grad[[3, 17, 39]].any()  # an ignored row sends nothing back


@pytest.mark.parametrize("family", ["gpt2", "gpt"])
def test_the_causal_lm_loss_equals_transformers_own_loss_with_labels(family):
    """The objective's loss (base model + fused tied head) against the model's own ``labels=`` loss, padding
    included, and the same gradients."""
    need_transformers()
    from elmokit.pretraining.models import build_model

    model = build_model(family, "tiny", vocab_size=60).eval()
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 60, (3, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[2, 8:] = 0
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    ours = causal_lm_model_loss(model, ids, mask, labels)
    ours.mean.backward()
    mine = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    theirs = model(input_ids=ids, attention_mask=mask, labels=labels).loss
    theirs.backward()
    assert ours.count == 3 * 11 - 4
    np.testing.assert_allclose(float(ours.mean.detach()), float(theirs.detach()), rtol=1e-6)
    for name, parameter in model.named_parameters():
        np.testing.assert_allclose(mine[name].numpy(), parameter.grad.numpy(), rtol=1e-4, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("threads", [1, 2])
def test_a_gpt2_run_resumed_halfway_is_bit_identical(tmp_path, threads):
    """Straight 6 steps against 3 + --resume + 3 for the causal LM (the fused head and its reused buffer, GPT-2's
    one-kernel GeLU, the linear layers by oneDNN): weights, optimizer state and metrics identical; dropout on, so
    the torch RNG is restored too. Two threads too: oneDNN's products must not depend on thread timing."""
    need_transformers()
    from safetensors.torch import load_file

    from elmokit.engine.run_folder import read_metrics
    from elmokit.pretraining.run import PretrainConfig, pretrain

    corpus = tmp_path / "docs.txt"
    write_document_corpus(corpus)
    config = PretrainConfig(objective="gpt2", preset="tiny", max_steps=6, batch_size=4, vocab_size=300, max_tokens=32,
                            log_every=1, checkpoint_every=3, lr=2e-3)

    def run(folder, config, resume=False):
        with n_threads(threads):
            return pretrain(folder, corpus=str(corpus), config=config, resume=resume, command="test", progress=False)

    straight = run(tmp_path / "straight", config)
    config = config.replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))
    run(tmp_path / "split", config.replace(max_steps=3))
    resumed = run(tmp_path / "split", config, resume=True)
    assert resumed.step == straight.step == 6 and resumed.tokens == straight.tokens

    def untimed(folder):
        return [{k: v for k, v in e.items() if k not in ("tokens_per_s", "elapsed_s", "cpu_s")} for e in read_metrics(folder)]

    assert untimed(tmp_path / "split") == untimed(tmp_path / "straight")
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000006" / name))
        b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000006" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    state = json.loads((tmp_path / "split" / "checkpoints" / "step_00000003" / "state.json").read_text())
    assert state["step"] == 3


def test_the_one_kernel_tanh_gelu_equals_gpt2s_gelu_new_and_a_numpy_restatement():
    need_transformers()
    from transformers.activations import NewGELUActivation

    x = torch.linspace(-8, 8, 4001, dtype=torch.float32)
    a, b = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    new, fused = NewGELUActivation()(a), torch.nn.GELU(approximate="tanh")(b)
    new.sum().backward()
    fused.sum().backward()
    z = x.double().numpy()
    oracle = 0.5 * z * (1 + np.tanh(np.sqrt(2 / np.pi) * (z + 0.044715 * z ** 3)))
    np.testing.assert_allclose(fused.detach().numpy(), oracle, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(fused.detach().numpy(), new.detach().numpy(), rtol=1e-6, atol=1e-6)
    # the one kernel flushes the tail of the gradient below x = -4.4 to 0 where gelu_new gives ~-1e-6
    np.testing.assert_allclose(b.grad.numpy(), a.grad.numpy(), rtol=1e-5, atol=2e-6)


def test_fuse_activations_swaps_gpt2s_gelu_new_in_the_run_only():
    need_transformers()
    from elmokit.pretraining.fused import fuse_activations
    from elmokit.pretraining.models import build_model

    reference = build_model("gpt2", "tiny", vocab_size=50).eval()
    model = build_model("gpt2", "tiny", vocab_size=50).eval()
    assert fuse_activations(model) == 2 and fuse_activations(model) == 0  # one per block, then none left
    assert all(isinstance(block.mlp.act, torch.nn.GELU) for block in model.transformer.h)
    assert model.config.activation_function == "gelu_new"  # what a saved folder says
    ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        np.testing.assert_allclose(model(ids).logits.numpy(), reference(ids).logits.numpy(), rtol=1e-5, atol=1e-5)
    assert fuse_activations(build_model("bert-mlm", "tiny", vocab_size=50)) == 0  # exact GeLU: nothing to swap


# ---- oneDNN products (fused.linear) and the head's reused buffer ------------------------------------------------


def _need_onednn():
    from elmokit.pretraining.fused import HAVE_ONEDNN

    if not HAVE_ONEDNN:
        pytest.skip("this torch build has no oneDNN (torch.ops.mkldnn._linear_pointwise): fused.linear is F.linear")


def test_onednn_linear_equals_a_float64_numpy_restatement_value_and_gradients():
    _need_onednn()
    from elmokit.pretraining.fused import linear, onednn_applies

    generator = torch.Generator().manual_seed(4)
    x = torch.randn(3, 7, 5, generator=generator).requires_grad_(True)
    weight = torch.randn(11, 5, generator=generator).requires_grad_(True)
    bias = torch.randn(11, generator=generator).requires_grad_(True)
    upstream = torch.randn(3, 7, 11, generator=generator)
    assert onednn_applies(x, weight, bias)
    y = linear(x, weight, bias)
    assert y.grad_fn is not None and type(y.grad_fn).__name__ == "_LinearBackward"  # the oneDNN path, not F.linear
    (y * upstream).sum().backward()
    X, W, b, G = (t.detach().double().numpy() for t in (x, weight, bias, upstream))
    np.testing.assert_allclose(y.detach().numpy(), X @ W.T + b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), G @ W, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(weight.grad.numpy(), G.reshape(-1, 11).T @ X.reshape(-1, 5), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(bias.grad.numpy(), G.reshape(-1, 11).sum(0), rtol=1e-5, atol=1e-5)
    # the weight-gradient's other operand order (more inputs than outputs) and a strided weight (GPT's Conv1D)
    from elmokit.pretraining.fused import weight_grad

    a, g = torch.randn(9, 13, generator=generator), torch.randn(9, 4, generator=generator)
    np.testing.assert_allclose(weight_grad(a, g).numpy(), g.double().numpy().T @ a.double().numpy(), rtol=1e-5, atol=1e-5)
    conv = torch.randn(5, 11, generator=generator)  # (in, out)
    np.testing.assert_allclose(linear(x, conv.t()).detach().numpy(), X @ conv.double().numpy(), rtol=1e-5, atol=1e-5)


def test_linear_is_torchs_own_when_onednn_is_off_or_the_tensors_are_not_fp32():
    from elmokit.pretraining.fused import ONEDNN, linear

    x, weight = torch.randn(4, 6), torch.randn(3, 6)
    ONEDNN["enabled"] = False
    try:
        assert torch.equal(linear(x, weight), F.linear(x, weight))
    finally:
        ONEDNN["enabled"] = True
    assert torch.equal(linear(x.double(), weight.double()), F.linear(x.double(), weight.double()))  # fp32 only


def test_onednn_products_repeat_bit_for_bit_on_two_threads():
    _need_onednn()
    from elmokit.pretraining.fused import linear

    generator = torch.Generator().manual_seed(5)
    x0, w0 = torch.randn(300, 64, generator=generator), torch.randn(200, 64, generator=generator)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        results = []
        for _ in range(2):
            x, w = x0.clone().requires_grad_(True), w0.clone().requires_grad_(True)
            y = linear(x, w)
            (y * y).sum().backward()
            results.append((y.detach(), x.grad, w.grad))
    finally:
        torch.set_num_threads(before)
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("family", ["gpt2", "roberta"])
def test_use_onednn_linear_switches_the_modules_in_place_and_keeps_the_numbers(family):
    """GPT-2 (transformers' Conv1D and the tied head) and RoBERTa (nn.Linear): the same parameters and names, outputs
    and gradients equal to the untouched model's up to rounding."""
    need_transformers()
    _need_onednn()
    from elmokit.pretraining.fused import OneDnnLinear, use_onednn_linear
    from elmokit.pretraining.models import build_model

    reference, model = build_model(family, "tiny", vocab_size=50).eval(), build_model(family, "tiny", vocab_size=50).eval()
    names = [n for n, _ in model.named_parameters()]
    parameters = [id(p) for p in model.parameters()]
    switched = use_onednn_linear(model)
    assert switched == (4 * 2 + 1 if family == "gpt2" else 6 * 2 + 2)  # per block, + the heads
    assert use_onednn_linear(model) == 0  # nothing left to switch
    assert [n for n, _ in model.named_parameters()] == names and [id(p) for p in model.parameters()] == parameters
    assert any(isinstance(m, OneDnnLinear) for m in model.modules())
    ids = torch.randint(3, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    out, ref = model(ids).logits, reference(ids).logits
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    out.square().mean().backward()
    ref.square().mean().backward()
    for (name, a), b in zip(model.named_parameters(), reference.parameters()):
        if b.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name)


def test_the_flop_counter_counts_the_onednn_products():
    _need_onednn()
    from torch.utils.flop_counter import FlopCounterMode

    from elmokit.pretraining.fused import linear

    x, w = torch.randn(6, 5, requires_grad=True), torch.randn(4, 5, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        linear(x, w).sum().backward()
    assert counter.get_total_flops() == 3 * 2 * 6 * 5 * 4  # forward, d/dx, d/dW


def test_the_fused_heads_reused_buffer_gives_a_fresh_ones_numbers():
    """Two steps of the head in a row: the second reuses the first's (N, V) buffer (same memory) and gives bit for bit
    what it gives after the buffer was dropped; its in-place log-softmax equals torch's out-of-place one."""
    from elmokit.pretraining import heads

    generator = torch.Generator().manual_seed(6)
    N, H, V = 30, 8, 41
    hidden, weight = torch.randn(N, H, generator=generator), torch.randn(V, H, generator=generator)
    targets = torch.randint(0, V, (N,), generator=generator)
    targets[[0, 29]] = IGNORE_INDEX

    def step():
        h, w = hidden.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        loss = linear_cross_entropy(h, w, targets)
        loss.mean.backward()
        return loss.total.detach(), h.grad, w.grad

    heads._BUFFERS.clear()
    first = step()
    kept = next(iter(heads._BUFFERS.values()))
    second = step()
    assert next(iter(heads._BUFFERS.values())) is kept  # taken and given back, not reallocated
    heads._BUFFERS.clear()
    fresh = step()
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(first, second, fresh))
    a = torch.randn(7, 13, generator=generator) * 5
    b = a.clone()
    torch._log_softmax(b, 1, False, out=b)
    assert torch.equal(b, torch.log_softmax(a, 1))
