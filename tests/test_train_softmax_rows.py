"""The sampled softmax's row-sparse Adagrad (lm.py: SoftmaxRows) against torch's own dense
Adagrad on the whole (V, P) table: the same weights and accumulators after several steps."""

import copy

import pytest
import torch
from train_helpers import run_tiny

from elmokit import lm as lm_module
from elmokit.bilm import PRESETS
from elmokit.lm import Candidates, LanguageModel, init_like_bilm_tf
from elmokit.text.chars import batch_to_ids
from elmokit.training.trainer import _differentiate_and_update

V, S = 60, 12
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far", "away", "home"]


def batches(steps):
    generator = torch.Generator().manual_seed(3)
    for _ in range(steps):
        sentences = [[WORDS[i] for i in torch.randint(0, len(WORDS), (int(n),), generator=generator)]
                     for n in torch.randint(2, 7, (4,), generator=generator)]
        word_ids = torch.zeros(4, max(map(len, sentences)), dtype=torch.long)
        for row, sentence in enumerate(sentences):
            word_ids[row, : len(sentence)] = torch.randint(3, V, (len(sentence),), generator=generator)
        yield batch_to_ids(sentences), word_ids


def train_both(clip_norm, steps=5):
    """Two copies of one model, one with the dense table gradient and one with SoftmaxRows."""
    torch.manual_seed(0)
    dense = LanguageModel(PRESETS["tiny"].replace(dropout=0.1), V)
    init_like_bilm_tf(dense, torch.Generator().manual_seed(0))
    rows = copy.deepcopy(dense)
    rows.row_sparse_softmax = True
    initial = dense.softmax_weight.detach().clone()
    runs = []
    for model in (dense, rows):
        model.train()
        optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0, eps=0.0)
        touched, norms = set(), []
        for step, (char_ids, word_ids) in enumerate(batches(steps)):
            torch.manual_seed(100 + step)  # the same dropout masks in both models
            candidates = Candidates.draw(V, S, seed=0, step=step)
            optimizer.zero_grad(set_to_none=True)
            out = model(char_ids, word_ids, candidates=candidates)
            outcome = _differentiate_and_update(model, optimizer, out.loss, clip_norm, out.loss.item(), 0.0, 0.0)
            norms.append(outcome.grad_norm)
            touched |= set(candidates.ids.tolist()) | set(word_ids[word_ids > 0].tolist()) | {0, 1}
            if model is rows:
                assert model.softmax_weight.grad is None, "the (V, P) table itself gets no gradient"
        runs.append((model, optimizer, touched, norms))
    return runs, initial


def test_row_updates_equal_dense_adagrad_bit_for_bit_without_clipping():
    [(dense, dense_opt, touched, dense_norms), (rows, rows_opt, _, rows_norms)], initial = train_both(clip_norm=1e9)
    for (name, a), b in zip(dense.named_parameters(), rows.parameters()):
        assert torch.equal(a, b), name
        assert torch.equal(dense_opt.state[a]["sum"], rows_opt.state[b]["sum"]), name
        assert float(dense_opt.state[a]["step"]) == float(rows_opt.state[b]["step"]) == 5, name
    untouched = sorted(set(range(V)) - touched)
    assert untouched, "the test means something: some rows are never read"
    assert torch.equal(rows.softmax_weight[untouched], initial[untouched])
    assert not torch.equal(rows.softmax_weight[sorted(touched)], initial[sorted(touched)])
    assert rows_norms == pytest.approx(dense_norms, rel=1e-6)


def test_row_updates_follow_dense_adagrad_with_clipping():
    """Clipping scales every gradient by clip / norm; the norm over the touched rows sums in
    another order than over the whole table, so the two agree to rounding, not bit for bit."""
    [(dense, _, _, dense_norms), (rows, _, _, _)], _ = train_both(clip_norm=0.05)
    assert min(dense_norms) > 0.05, "every step was clipped"
    for (name, a), b in zip(dense.named_parameters(), rows.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=name)


def test_a_single_process_sampled_run_updates_the_touched_rows(tmp_path, monkeypatch):
    calls = []
    original = lm_module.SoftmaxRows.adagrad_step

    def counting(self, *args):
        calls.append(len(self.ids))
        return original(self, *args)

    monkeypatch.setattr(lm_module.SoftmaxRows, "adagrad_step", counting)
    run_tiny(tmp_path / "run", max_steps=3, softmax="sampled", n_negative_samples=10)
    assert len(calls) == 3 and all(n < 44 for n in calls)  # touched rows only, of the 44-entry vocabulary
    calls.clear()
    run_tiny(tmp_path / "full", max_steps=2)  # the golden configuration: full softmax, dense table
    assert calls == []
