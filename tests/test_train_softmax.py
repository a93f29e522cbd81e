"""The LM's softmaxes against independent oracles: numpy re-statements of TensorFlow's
log-uniform sampler and sampled-softmax logits, and Monte Carlo agreement with the full softmax."""

import math

import numpy as np
import pytest
import torch

from elmokit.lm import (
    Candidates,
    full_softmax_nll,
    log_expected_count,
    log_uniform_probabilities,
    sample_log_uniform,
    sampled_softmax_nll,
)


def test_log_uniform_probabilities_by_hand():
    # V = 3: P(k) = log((k + 2) / (k + 1)) / log(4)
    expected = [math.log(2) / math.log(4), math.log(1.5) / math.log(4), math.log(4 / 3) / math.log(4)]
    np.testing.assert_allclose(log_uniform_probabilities(3), expected, rtol=1e-15)
    assert log_uniform_probabilities(1000).sum() == pytest.approx(1.0, abs=1e-12)


def test_sampler_draws_follow_the_distribution_and_are_unique():
    V = 9
    rng = np.random.default_rng(0)
    firsts = np.array([sample_log_uniform(V, 1, rng)[0][0] for _ in range(5000)])
    frequencies = np.bincount(firsts, minlength=V) / len(firsts)
    p = log_uniform_probabilities(V)
    # a single draw is one sample of P: each frequency within 4 binomial standard errors
    assert np.all(np.abs(frequencies - p) < 4 * np.sqrt(p * (1 - p) / len(firsts)))
    ids, tries = sample_log_uniform(V, 6, np.random.default_rng(1))
    assert len(set(ids.tolist())) == 6 and tries >= 6
    with pytest.raises(ValueError):
        sample_log_uniform(V, V + 1, rng)


def test_number_of_tries_is_the_draw_that_completed_the_set():
    """Re-draw the same random numbers one by one and count, independently of the chunked code."""
    V, S = 50, 20
    ids, tries = sample_log_uniform(V, S, np.random.default_rng(7))
    u = np.random.default_rng(7).random(4096)  # the code draws chunks of max(S, 1024) from the same stream
    seen, order = set(), []
    for n, value in enumerate(u, 1):  # noqa: B007 - n (the draws it took) is read after the loop
        k = min(max(int(math.exp(value * math.log(V + 1))) - 1, 0), V - 1)
        if k not in seen:
            seen.add(k)
            order.append(k)
        if len(order) == S:
            break
    assert ids.tolist() == order and tries == n


def numpy_sampled_nll(h, W, b, targets, candidates, tries):
    """TensorFlow's sampled_softmax_loss restated in numpy, float64, row by row."""
    V = W.shape[0]
    p = np.array([np.log((k + 2) / (k + 1)) / np.log(V + 1) for k in range(V)])
    q = 1.0 - (1.0 - p) ** tries  # expected count of each id in a unique sample of `tries` draws
    out = []
    for row, t in zip(h, targets):
        logits = [row @ W[t] + b[t] - np.log(q[t])]
        for c in candidates:
            logits.append(-np.inf if c == t else row @ W[c] + b[c] - np.log(q[c]))
        logits = np.array(logits)
        m = logits.max()
        out.append(m + np.log(np.exp(logits - m).sum()) - logits[0])
    return np.array(out)


def test_sampled_logits_and_correction_match_numpy_brute_force():
    rng = np.random.default_rng(3)
    V, P, M = 7, 3, 5
    h, W, b = rng.standard_normal((M, P)), rng.standard_normal((V, P)), rng.standard_normal(V)
    targets = np.array([0, 3, 5, 6, 3])  # 3 and 5 are also candidates: accidental hits
    candidates, tries = np.array([3, 0, 5]), 6
    log_q = log_expected_count(log_uniform_probabilities(V), tries)
    got = sampled_softmax_nll(
        torch.tensor(h), torch.tensor(targets), torch.tensor(W), torch.tensor(b),
        Candidates(torch.tensor(candidates), torch.tensor(log_q)),
    )
    np.testing.assert_allclose(got.numpy(), numpy_sampled_nll(h, W, b, targets, candidates, tries), rtol=1e-12)


def test_full_softmax_matches_numpy_in_chunks():
    rng = np.random.default_rng(4)
    h, W, b = rng.standard_normal((11, 3)), rng.standard_normal((13, 3)), rng.standard_normal(13)
    t = rng.integers(0, 13, 11)
    logits = h @ W.T + b
    expected = np.log(np.exp(logits).sum(1)) - logits[np.arange(11), t]
    got = full_softmax_nll(torch.tensor(h), torch.tensor(t), torch.tensor(W), torch.tensor(b))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12)


def test_sampled_loss_estimates_the_full_loss():
    """Mean over 400 draws vs the exact full-softmax loss, V = 100, S = 60 shared negatives.

    Tolerance. TF's sampled softmax is consistent but biased: (a) E[log Z_hat] < log E[Z_hat]
    (Jensen); (b) the true logit is corrected by log Q(target) too, which shrinks the estimate by
    the factor Q(target) on the other classes - large for rare targets; (c) 1 - (1 - p)^tries is
    only approximately the inclusion probability of a unique sample. Targets are drawn from the
    10 most frequent ids (where language-model targets mostly are; there Q(target) > 0.9), so (b)
    is small, and measured (a) + (c) stay below 1% of the loss here; the Monte Carlo standard
    error of the mean is ~0.6%. So: mean within 2%, every row within 4%. Leaving out the log-Q
    correction, a plausible bug, is off by ~10% and fails.
    """
    torch.manual_seed(0)
    V, S, P, M = 100, 60, 5, 64
    h, W, b = torch.randn(M, P).double(), torch.randn(V, P).double() * 0.5, torch.randn(V).double() * 0.3
    targets = torch.from_numpy(np.random.default_rng(1).integers(0, 10, M))
    full = full_softmax_nll(h, targets, W, b)
    total = torch.zeros(M, dtype=torch.float64)
    uncorrected = torch.zeros(M, dtype=torch.float64)
    draws = 400
    for step in range(draws):
        c = Candidates.draw(V, S, seed=11, step=step)
        total += sampled_softmax_nll(h, targets, W, b, Candidates(c.ids, c.log_q.double()))
        uncorrected += sampled_softmax_nll(h, targets, W, b, Candidates(c.ids, torch.zeros(V, dtype=torch.float64)))
    mean = total / draws
    assert abs(mean.mean() - full.mean()) / full.mean() < 0.02
    assert torch.all((mean - full).abs() / full < 0.04)
    assert abs((uncorrected / draws).mean() - full.mean()) / full.mean() > 0.05


def test_candidates_are_the_same_for_the_same_seed_and_step():
    a = Candidates.draw(1000, 50, seed=1, step=9)
    assert torch.equal(a.ids, Candidates.draw(1000, 50, seed=1, step=9).ids)
    assert not torch.equal(a.ids, Candidates.draw(1000, 50, seed=1, step=10).ids)
    assert Candidates.draw(10, 50, seed=0, step=0).ids.numel() == 10  # capped at the vocabulary


@pytest.mark.parametrize("sampled", [False, True])
def test_chunked_gradients_match_finite_differences(monkeypatch, sampled):
    """The hand-written backward (row chunks recomputed) against torch's float64 gradcheck."""
    import elmokit.lm as lm

    monkeypatch.setattr(lm, "CHUNK_BYTES", 4 * 7 * 2)  # 2 rows per chunk: several chunks
    rng = np.random.default_rng(5)
    V, P, M = 7, 3, 5
    h = torch.tensor(rng.standard_normal((M, P)), requires_grad=True)
    W = torch.tensor(rng.standard_normal((V, P)), requires_grad=True)
    b = torch.tensor(rng.standard_normal(V), requires_grad=True)
    targets = torch.tensor([0, 3, 5, 6, 3])
    if sampled:
        log_q = torch.tensor(log_expected_count(log_uniform_probabilities(V), 6))
        candidates = Candidates(torch.tensor([3, 0, 5, 1]), log_q)
        func = lambda h, W, b: sampled_softmax_nll(h, targets, W, b, candidates)  # noqa: E731
    else:
        func = lambda h, W, b: full_softmax_nll(h, targets, W, b)  # noqa: E731
    assert torch.autograd.gradcheck(func, (h, W, b))
