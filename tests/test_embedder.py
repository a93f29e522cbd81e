"""Embedder as the Representation every evaluation uses."""

import numpy as np
import pytest
import torch
from numpy_elmo import NumpyELMo
from testkit import assert_unchanged, model_snapshot

from elmokit import Embedder, Representation, batch_to_ids, load_original
from elmokit.warm_state import compute_warm_state


def test_embedder_is_a_representation(tiny_original):
    embedder = Embedder(load_original(*tiny_original[:2]))
    assert isinstance(embedder, Representation)
    assert (embedder.num_layers, embedder.dim) == (3, 10)
    out = embedder.embed([["a", "b", "c"], [], ["d"]])
    assert [o.shape for o in out] == [(3, 3, 10), (3, 0, 10), (3, 1, 10)]
    assert all(o.dtype == np.float32 for o in out)
    np.testing.assert_array_equal(embedder.embed_sentence(["d"]), out[2])


def test_layer_zero_is_context_independent(tiny_original):
    embedder = Embedder(load_original(*tiny_original[:2]))
    a, b = embedder.embed([["the", "bank", "of", "the", "river"], ["a", "bank", "loan"]])
    np.testing.assert_array_equal(a[0, 1], b[0, 1])
    assert not np.allclose(a[1, 1], b[1, 1]) and not np.allclose(a[2, 1], b[2, 1])


# ---- Embedder works on its own copy: the caller's model is never changed -------------------------


SENTENCES = [["The", "first", "sentence", "."], ["Another", "one"], []]


def test_embedder_leaves_the_callers_training_model_alone(tiny_original):
    options_path, weights_path, options, weights = tiny_original
    model = load_original(options_path, weights_path).train()  # a user's model, mid-training
    assert all(p.requires_grad for p in model.parameters())
    before = model_snapshot(model)
    fast = Embedder(model, precision="bf16", token_cache_size=100)  # used to switch the model itself
    assert_unchanged(model, before)
    assert fast.bilm is not model and fast.bilm.precision == "bf16" and not fast.bilm.training
    embedder = Embedder(model)
    vectors = embedder.embed(SENTENCES)
    assert_unchanged(model, before)
    oracle = NumpyELMo(options, weights)  # correct outputs: the independent numpy statement
    for array, sentence in zip(vectors, SENTENCES):
        np.testing.assert_allclose(array, oracle.sentence(sentence)[:, 1:-1], atol=2e-5, rtol=1e-4)
    fresh = Embedder(load_original(options_path, weights_path)).embed(SENTENCES)
    for a, b in zip(vectors, fresh):
        np.testing.assert_array_equal(a, b)


def test_the_callers_model_still_trains_after_an_embedder_was_made(tiny_original):
    model = load_original(*tiny_original[:2]).train()
    embedder = Embedder(model)
    layers = model(batch_to_ids(SENTENCES[:2])).layers  # autograd on, the caller's params require grad
    layers.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert all(not p.requires_grad and p.grad is None for p in embedder.bilm.parameters())


def test_embedder_copy_keeps_the_warm_state_and_does_not_follow_later_changes(tiny_original):
    model = load_original(*tiny_original[:2])
    warm = compute_warm_state(model, [["It", "was", "late", "."]])
    model.set_initial_state(warm)
    embedder = Embedder(model)
    assert embedder.initial_state == "warm"
    expected = embedder.embed(SENTENCES)
    model.set_initial_state(None)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    for a, b in zip(embedder.embed(SENTENCES), expected):
        np.testing.assert_array_equal(a, b)


# ---- precision="bf16" exists on the CPU inference path only: elsewhere it raises, never silent fp32


def test_bf16_with_autograd_on_raises_instead_of_silently_computing_fp32(tiny_original):
    bilm = load_original(*tiny_original[:2]).set_precision("bf16")  # parameters require grad
    with pytest.raises(ValueError,
                       match=r"precision='bf16' applies to CPU float32 inference only.*requires_grad=True and autograd on"):
        bilm(batch_to_ids(SENTENCES))
    bilm.train()
    with pytest.raises(ValueError, match="inference_mode"):
        bilm(batch_to_ids(SENTENCES))
    # where bf16 does apply the check passes (running bf16 itself needs a CPU with bf16 support)
    with torch.no_grad():
        bilm.check_precision()
    with torch.inference_mode():
        bilm.check_precision()
    frozen = load_original(*tiny_original[:2]).set_precision("bf16").requires_grad_(False)
    frozen.check_precision()  # autograd on, but nothing requires grad: the inference path
    bilm.set_precision("fp32")
    bilm(batch_to_ids(SENTENCES))  # fp32 is exact everywhere


def test_bf16_off_the_cpu_raises(tiny_original):
    bilm = load_original(*tiny_original[:2]).to(torch.float64).set_precision("bf16")  # not float32: no bf16 path
    with pytest.raises(ValueError, match="torch.float64 on cpu"), torch.inference_mode():
        bilm.check_precision()
    with pytest.raises(ValueError, match="applies to CPU float32 inference only"):
        Embedder(bilm, precision="bf16")
    if torch.cuda.is_available():
        on_gpu = load_original(*tiny_original[:2]).cuda()
        with pytest.raises(ValueError, match="on cuda"):
            Embedder(on_gpu, precision="bf16")
