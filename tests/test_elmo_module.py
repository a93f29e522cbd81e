"""The Elmo module's AllenNLP-compatible surface, and ScalarMix against a numpy statement."""

import numpy as np
import pytest
import torch
from numpy_elmo import NumpyELMo
from testkit import assert_unchanged, model_snapshot

from elmokit import Elmo, ScalarMix, batch_to_ids, load_original

SENTENCES = [["The", "first", "sentence", "."], ["Another", "one"], ["x"] * 7]


@pytest.fixture
def bilm(tiny_original):
    return load_original(*tiny_original[:2])


def test_output_shapes_and_mask(bilm):
    elmo = Elmo(module=bilm, num_output_representations=2, dropout=0.0)
    out = elmo(batch_to_ids(SENTENCES))
    assert len(out["elmo_representations"]) == 2
    assert out["elmo_representations"][0].shape == (3, 7, 10) and elmo.get_output_dim() == 10
    assert out["mask"].tolist()[1] == [True, True] + [False] * 5
    assert (out["elmo_representations"][0][1, 2:] == 0).all()


def test_keep_sentence_boundaries(bilm):
    elmo = Elmo(module=bilm, num_output_representations=1, dropout=0.0, keep_sentence_boundaries=True)
    out = elmo(batch_to_ids(SENTENCES))
    assert out["elmo_representations"][0].shape == (3, 9, 10)
    assert out["mask"].sum(1).tolist() == [6, 4, 9]


def test_default_mix_is_the_mean_of_layers(bilm):
    elmo = Elmo(module=bilm, num_output_representations=1, dropout=0.0)
    ids = batch_to_ids(SENTENCES)
    with torch.no_grad():
        layers = bilm(ids, keep_boundaries=False).layers  # (3, B, T, 2P)
        mixed = elmo(ids)["elmo_representations"][0]
    torch.testing.assert_close(mixed, layers.mean(0), atol=1e-6, rtol=0)


def test_four_dimensional_input_equals_separate_calls(bilm):
    elmo = Elmo(module=bilm, num_output_representations=1, dropout=0.0)
    ids = batch_to_ids(SENTENCES)
    stacked = torch.stack([ids, ids.flip(0)])  # (2, 3, T, 50)
    with torch.no_grad():
        out = elmo(stacked)["elmo_representations"][0]
        assert out.shape == (2, 3, 7, 10)
        assert torch.equal(out[0], elmo(ids)["elmo_representations"][0])
        assert torch.equal(out[1], elmo(ids.flip(0))["elmo_representations"][0])


def test_frozen_bilm_only_mixes_train(bilm):
    elmo = Elmo(module=bilm, num_output_representations=1, dropout=0.0)
    out = elmo(batch_to_ids(SENTENCES))["elmo_representations"][0]
    out.sum().backward()
    assert all(p.grad is None for p in elmo.bilm.parameters())
    assert elmo.scalar_mixes[0].scalar_parameters.grad is not None and elmo.scalar_mixes[0].gamma.grad is not None


def test_requires_grad_fine_tunes_every_bilm_parameter(bilm):
    elmo = Elmo(module=bilm, num_output_representations=1, requires_grad=True, dropout=0.0)
    out = elmo(batch_to_ids(SENTENCES))["elmo_representations"][0]
    out.pow(2).sum().backward()
    missing = [n for n, p in elmo.bilm.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert missing == []


def test_fixed_scalar_mix_parameters_are_not_trained(bilm):
    elmo = Elmo(module=bilm, num_output_representations=1, scalar_mix_parameters=[1.0, -1.0, 0.5], dropout=0.0)
    mix = elmo.scalar_mixes[0]
    assert not mix.scalar_parameters.requires_grad and not mix.gamma.requires_grad
    expected = np.exp([1.0, -1.0, 0.5]) / np.exp([1.0, -1.0, 0.5]).sum()
    np.testing.assert_allclose(mix.weights().detach().numpy(), expected, rtol=1e-6)


def test_dropout_only_in_training(bilm):
    elmo = Elmo(module=bilm, num_output_representations=1, dropout=0.5)
    ids = batch_to_ids(SENTENCES)
    elmo.eval()
    with torch.no_grad():
        assert torch.equal(elmo(ids)["elmo_representations"][0], elmo(ids)["elmo_representations"][0])
    elmo.train()
    with torch.no_grad():
        zeros = (elmo(ids)["elmo_representations"][0][:, :2] == 0).float().mean()
    assert 0.3 < zeros < 0.7


def numpy_scalar_mix(layers, mask, w, gamma, layer_norm):
    """spec §3.9, restated: s = softmax(w); gamma * sum_j s_j * norm(h_j)."""
    s = np.exp(w) / np.exp(w).sum()
    out = 0
    for s_j, h in zip(s, layers):
        if layer_norm:
            values = h[mask.astype(bool)]  # (n_valid, H)
            h = (h - values.mean()) / np.sqrt(values.var() + 1e-13)
        out = out + s_j * h
    return gamma * out


@pytest.mark.parametrize("layer_norm", [False, True])
def test_scalar_mix_against_numpy(layer_norm):
    rng = np.random.default_rng(1)
    layers = rng.standard_normal((3, 2, 5, 7)).astype(np.float32) * 3 + 1
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=bool)
    mix = ScalarMix(3, do_layer_norm=layer_norm, initial_scalar_parameters=[0.2, 0.4, 0.6])
    with torch.no_grad():
        mix.gamma.fill_(0.88)
        actual = mix(torch.from_numpy(layers), torch.from_numpy(mask)).numpy()
    expected = numpy_scalar_mix(layers.astype(np.float64), mask, np.array([0.2, 0.4, 0.6]), 0.88, layer_norm)
    np.testing.assert_allclose(actual, expected, atol=2e-6, rtol=1e-5)


def test_scalar_mix_l2_penalty():
    mix = ScalarMix(3, initial_scalar_parameters=[1.0, -2.0, 0.5])
    assert mix.l2_penalty(0.001).item() == pytest.approx(0.001 * (1 + 4 + 0.25))
    with pytest.raises(ValueError, match="2 values for a mixture of 3"):
        ScalarMix(3, initial_scalar_parameters=[1.0, 2.0])


# ---- Elmo works on its own copy of `module`: the caller's model is never changed ------------------


def test_elmo_leaves_the_callers_module_alone(tiny_original):
    options_path, weights_path, options, weights = tiny_original
    model = load_original(options_path, weights_path).train()  # a user's model, mid-training
    before = model_snapshot(model)
    elmo = Elmo(module=model, num_output_representations=1, dropout=0.0, stateful=True)  # used to freeze it
    assert_unchanged(model, before)
    assert elmo.bilm is not model and elmo.bilm.stateful and not any(p.requires_grad for p in elmo.bilm.parameters())
    elmo.eval()
    ids = batch_to_ids(SENTENCES)
    mixed = elmo(ids)["elmo_representations"][0]  # (B, T, 2P), the default mix: the mean of the layers
    assert_unchanged(model, before)
    assert model.training and elmo.bilm._state is not None and model._state is None
    oracle = NumpyELMo(options, weights)  # the stateful copy starts from zero: the oracle's first call
    for b, sentence in enumerate(SENTENCES):
        expected = oracle.sentence(sentence)[:, 1:-1].mean(0)  # (n, 2P)
        np.testing.assert_allclose(mixed[b, : len(sentence)].detach().numpy(), expected, atol=2e-5, rtol=1e-4)


def test_fine_tuning_trains_elmos_copy_not_the_callers_module(tiny_original):
    model = load_original(*tiny_original[:2])
    original = {n: p.detach().clone() for n, p in model.named_parameters()}
    elmo = Elmo(module=model, num_output_representations=1, requires_grad=True, dropout=0.0)
    optimizer = torch.optim.SGD(elmo.parameters(), lr=0.1)
    elmo(batch_to_ids(SENTENCES))["elmo_representations"][0].pow(2).sum().backward()
    optimizer.step()
    assert all(torch.equal(p, original[n]) and p.grad is None for n, p in model.named_parameters())
    changed = [n for n, p in elmo.bilm.named_parameters() if not torch.equal(p.detach(), original[n])]
    assert changed == [n for n, _ in model.named_parameters()]
