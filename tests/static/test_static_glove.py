"""GloVe's cost and gradients against a numpy re-statement, brute force and finite differences."""

import numpy as np
import pytest
import torch

pytest.importorskip("scipy")
import scipy.sparse as sp

from elmokit.static.glove import GloveConfig, GloveModel, full_loss_and_grads, train_glove, weighting

V, D = 5, 3  # oddly sized: a swapped axis fails


def problem(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 4, size=(V, V)).astype(np.float64) * rng.uniform(0.5, 150, size=(V, V))
    X[X < 1] = 0  # some zeros, some above x_max = 100
    W, C = rng.normal(size=(V, D)), rng.normal(size=(V, D))
    bw, bc = rng.normal(size=V), rng.normal(size=V)
    return X, W, C, bw, bc


def restated(X, W, C, bw, bc, x_max=100.0, alpha=0.75):
    """The paper's J/2 and its gradient, written out loop by loop."""
    loss = 0.0
    dW, dC, dbw, dbc = np.zeros_like(W), np.zeros_like(C), np.zeros_like(bw), np.zeros_like(bc)
    for i in range(V):
        for j in range(V):
            if X[i, j] <= 0:
                continue
            f = (X[i, j] / x_max) ** alpha if X[i, j] < x_max else 1.0
            diff = W[i] @ C[j] + bw[i] + bc[j] - np.log(X[i, j])
            loss += 0.5 * f * diff**2
            dW[i] += f * diff * C[j]
            dC[j] += f * diff * W[i]
            dbw[i] += f * diff
            dbc[j] += f * diff
    return loss, dW, dC, dbw, dbc


def test_weighting_function():
    np.testing.assert_allclose(weighting(np.array([0.0, 50.0, 100.0, 400.0]), 100.0, 0.75), [0.0, 0.5**0.75, 1.0, 1.0])
    assert float(weighting(torch.tensor(25.0), 100.0, 0.5)) == pytest.approx(0.5)


def test_loss_and_gradients_match_restatement():
    X, W, C, bw, bc = problem()
    rows, cols = np.nonzero(X)
    assert 0 < len(rows) < V * V and (X > 100).any()
    loss, dW, dC, dbw, dbc = full_loss_and_grads(W, C, bw, bc, rows, cols, X[rows, cols])
    ref = restated(X, W, C, bw, bc)
    assert loss == pytest.approx(ref[0], rel=1e-12)
    for got, want in zip((dW, dC, dbw, dbc), ref[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_gradient_matches_finite_differences():
    X, W, C, bw, bc = problem(seed=1)
    rows, cols = np.nonzero(X)
    x = X[rows, cols]
    _, dW, dC, _, dbc = full_loss_and_grads(W, C, bw, bc, rows, cols, x)
    eps = 1e-6
    for (arr, grad, idx) in [(W, dW, (2, 1)), (C, dC, (4, 0)), (bc, dbc, (3,))]:
        plus, minus = arr.copy(), arr.copy()
        plus[idx] += eps
        minus[idx] -= eps
        args_p = [plus if a is arr else a for a in (W, C, bw, bc)]
        args_m = [minus if a is arr else a for a in (W, C, bw, bc)]
        numeric = (full_loss_and_grads(*args_p, rows, cols, x)[0] - full_loss_and_grads(*args_m, rows, cols, x)[0]) / (2 * eps)
        assert grad[idx] == pytest.approx(numeric, rel=1e-5, abs=1e-7)


def test_one_adagrad_step_matches_glove_c_restated():
    X, *_ = problem(seed=2)
    rows, cols = np.nonzero(X)
    lr = 0.05
    model = GloveModel(V, GloveConfig(dim=D, batch_size=10_000, epochs=1, seed=4, lr=lr))
    W0, C0, bw0, bc0 = (t.double().numpy().copy() for t in (model.W, model.C, model.bw, model.bc))
    # glove.c, pair by pair, except that every pair reads the parameters and the accumulators as they
    # were before the batch (one batch holds every nonzero): u = lr * g; p -= u / sqrt(G); G += u^2
    W1, C1, bw1, bc1 = W0.copy(), C0.copy(), bw0.copy(), bc0.copy()
    GW, GC, Gbw, Gbc = np.ones_like(W0), np.ones_like(C0), np.ones_like(bw0), np.ones_like(bc0)
    for i, j in zip(rows, cols):
        x = X[i, j]
        f = min(1.0, (x / 100.0) ** 0.75)
        fdiff = lr * f * (W0[i] @ C0[j] + bw0[i] + bc0[j] - np.log(x))
        W1[i] -= fdiff * C0[j]
        C1[j] -= fdiff * W0[i]
        bw1[i] -= fdiff
        bc1[j] -= fdiff
        GW[i] += (fdiff * C0[j]) ** 2
        GC[j] += (fdiff * W0[i]) ** 2
        Gbw[i] += fdiff**2
        Gbc[j] += fdiff**2
    x = X[rows, cols]
    t = lambda a: torch.as_tensor(a)  # noqa: E731
    model.train_epoch(t(rows), t(cols), t(np.log(x)).float(), weighting(t(x), 100.0, 0.75).float())
    for want, got in [(W1, model.W), (C1, model.C), (bw1, model.bw), (bc1, model.bc),
                      (GW, model.gW), (GC, model.gC), (Gbw, model.gbw), (Gbc, model.gbc)]:
        np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-4, atol=1e-6)


def test_training_lowers_the_cost_and_outputs_w_plus_w_tilde():
    rng = np.random.default_rng(3)
    V2 = 17
    X = sp.csr_matrix(rng.poisson(2.0, size=(V2, V2)).astype(np.float64) * 3)
    model, losses = train_glove(X, GloveConfig(dim=4, epochs=30, batch_size=7, seed=2), progress=False)
    assert len(losses) == 30 and losses[-1] < 0.1 * losses[0]
    np.testing.assert_allclose(model.word_vectors(), (model.W + model.C).numpy())
    assert model.word_vectors().shape == (V2, 4)
