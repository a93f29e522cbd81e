"""The epoch loop against hand-computed behaviour: a one-weight model trained by plain SGD on
``(w - t)^2`` (each update is ``w -= lr * 2 (w - t)``, computed here in Python floats), scripted dev
metric sequences (where it must stop, which epoch's weights it must give back), the non-finite policy
and seeding."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
from torch import nn

from elmokit.engine.epochs import EpochOptions, NonFiniteLoss, shuffled_batches, train_epochs
from elmokit.errors import UserError


class Scalar(nn.Module):
    def __init__(self, value: float = 0.0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.tensor(value, dtype=torch.float64))


def _square_loss(model):
    """batch = (target, weight) -> ((w - t)^2, weight)."""
    return lambda batch: ((model.w - batch[0]) ** 2, batch[1])


def _scripted(metrics, model, snapshots):
    """evaluate(): the next scripted metric; remembers the weight each epoch ended with."""
    values = iter(metrics)

    def evaluate():
        snapshots.append(model.w.detach().clone())
        return next(values)

    return evaluate


BATCHES = [(1.0, 2), (3.0, 1), (-2.0, 3)]


def _by_hand(w: float, lr: float, epochs: int, batches=BATCHES) -> tuple[float, list[float]]:
    """The weight after ``epochs`` epochs and each epoch's weighted mean loss, by hand."""
    losses = []
    for _ in range(epochs):
        total = count = 0.0
        for t, n in batches:
            total += (w - t) ** 2 * n
            count += n
            w -= lr * 2 * (w - t)
        losses.append(total / count)
    return w, losses


def test_losses_and_updates_match_plain_sgd_by_hand():
    model = Scalar(0.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    result = train_epochs(model, optimizer, batches=lambda epoch: BATCHES, loss=_square_loss(model),
                          options=EpochOptions(max_epochs=3, progress=False), log=lambda m: None)
    w, losses = _by_hand(0.5, 0.1, 3)
    assert [r["train_loss"] for r in result.history] == pytest.approx(losses, rel=1e-12)
    assert model.w.item() == pytest.approx(w, rel=1e-12)
    assert [r["epoch"] for r in result.history] == [1, 2, 3]
    assert result.best_epoch is None and not result.stopped_early  # no dev: all epochs, the last state kept
    json.dumps(result.history)  # records are JSON-ready


@pytest.mark.parametrize("metrics, higher, patience, max_epochs, best_epoch, epochs_run", [
    ([0.1, 0.5, 0.4, 0.6, 0.3, 0.2, 0.55, 0.9, 0.95], True, 3, 9, 4, 7),  # best at 4, three worse: stop after 7
    ([0.1, 0.5, 0.5, 0.5, 0.5, 0.9], True, 3, 6, 2, 5),  # a tie is not better
    ([5.0, 4.0, 4.5, 3.0, 3.5, 3.2], False, 2, 6, 4, 6),  # lower is better; patience reached at the last epoch
    ([5.0, 4.0, 4.5, 4.1, 1.0], False, 2, 5, 2, 4),
    ([0.3, 0.2, 0.1, 0.0], True, None, 4, 1, 4),  # no patience: every epoch runs, the first stays best
    ([float("nan"), 0.2, float("nan"), 0.1], True, None, 4, 2, 4),  # a number beats NaN, NaN beats nothing
])
def test_stops_at_best_plus_patience_and_restores_the_best_weights_bit_for_bit(metrics, higher, patience, max_epochs,
                                                                                best_epoch, epochs_run):
    model = Scalar(0.25)
    snapshots: list[torch.Tensor] = []
    result = train_epochs(model, torch.optim.SGD(model.parameters(), lr=0.05), batches=lambda e: BATCHES,
                          loss=_square_loss(model), evaluate=_scripted(metrics, model, snapshots),
                          options=EpochOptions(max_epochs=max_epochs, patience=patience, higher_is_better=higher,
                                               progress=False), metric_name="dev_score", log=lambda m: None)
    assert len(result.history) == epochs_run == len(snapshots)
    assert result.best_epoch == best_epoch and result.best_metric == metrics[best_epoch - 1]
    assert result.stopped_early == (epochs_run < max_epochs)
    assert torch.equal(model.w.detach(), snapshots[best_epoch - 1])  # restored exactly, not re-trained
    assert not torch.equal(snapshots[best_epoch - 1], snapshots[-1]) or best_epoch == epochs_run
    expected = [max(metrics[:k], key=lambda m: (m == m, m if higher else -m)) if any(m == m for m in metrics[:k])
                else metrics[0] for k in range(1, epochs_run + 1)]  # the best number so far, else the first NaN
    assert repr([r["best_so_far"] for r in result.history]) == repr(expected)
    assert repr([r["dev_score"] for r in result.history]) == repr(metrics[:epochs_run])
    assert not model.training


def test_a_nonfinite_loss_stops_naming_the_epoch_and_step():
    model = Scalar(0.0)
    bad = [(1.0, 1), (float("nan"), 1), (2.0, 1)]
    with pytest.raises(NonFiniteLoss, match=r"nan at epoch 2, step 2 \(step 5 of the run\)") as caught:
        train_epochs(model, torch.optim.SGD(model.parameters(), lr=0.1),
                     batches=lambda e: BATCHES[:2] + [(1.0, 1)] if e == 1 else bad, loss=_square_loss(model),
                     options=EpochOptions(max_epochs=3, progress=False), log=lambda m: None)
    assert isinstance(caught.value, UserError)


def test_skipped_nonfinite_steps_are_counted_and_change_nothing():
    inf_batches = [(1.0, 2), (float("inf"), 5), (3.0, 1), (float("nan"), 1), (-2.0, 3)]
    model = Scalar(0.5)
    result = train_epochs(model, torch.optim.SGD(model.parameters(), lr=0.1), batches=lambda e: inf_batches,
                          loss=_square_loss(model), options=EpochOptions(max_epochs=2, nonfinite="skip", progress=False),
                          log=lambda m: None)
    w, losses = _by_hand(0.5, 0.1, 2)  # the same run without the two bad batches
    assert model.w.item() == pytest.approx(w, rel=1e-12)
    assert [r["train_loss"] for r in result.history] == pytest.approx(losses, rel=1e-12)
    assert [r["skipped_steps"] for r in result.history] == [2, 2] and result.skipped_steps == 4
    model = Scalar(0.5)
    result = train_epochs(model, torch.optim.SGD(model.parameters(), lr=0.1), batches=lambda e: [(float("nan"), 1)],
                          loss=_square_loss(model), options=EpochOptions(max_epochs=1, nonfinite="skip", progress=False),
                          log=lambda m: None)
    assert result.history[0]["train_loss"] is None and model.w.item() == 0.5  # nothing trained, nothing non-finite
    json.dumps(result.history, allow_nan=False)


def test_gradient_clipping_and_the_scheduler_step_after_each_update():
    model = Scalar(0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 ** step)
    train_epochs(model, optimizer, batches=lambda e: [(10.0, 1), (10.0, 1)], loss=_square_loss(model), scheduler=scheduler,
                 options=EpochOptions(max_epochs=1, grad_clip=0.5, progress=False), log=lambda m: None)
    # gradients -20 and about -19 are both clipped to norm 0.5; rates 1.0 then 0.5
    assert model.w.item() == pytest.approx(0.5 + 0.25, abs=1e-6)  # torch adds 1e-6 to the norm it divides by
    assert optimizer.param_groups[0]["lr"] == 0.25


def test_hooks_see_epochs_and_run_wide_steps_and_add_record_fields():
    model = Scalar(0.0)
    seen = []
    result = train_epochs(model, torch.optim.SGD(model.parameters(), lr=0.1), batches=lambda e: BATCHES,
                          loss=_square_loss(model), options=EpochOptions(max_epochs=2, progress=False),
                          on_epoch_start=lambda e: seen.append(("epoch", e)), on_step_start=lambda s: seen.append(s),
                          evaluate=lambda: (1.0, {"dev": {"f1": 1.0}}), epoch_record=lambda e: {"groups": e},
                          log=lambda m: None)
    assert seen == [("epoch", 1), 0, 1, 2, ("epoch", 2), 3, 4, 5]
    assert result.history[1]["dev"] == {"f1": 1.0} and result.history[1]["groups"] == 2
    assert set(result.history[0]) == {"epoch", "train_loss", "dev_metric", "dev", "best_so_far", "groups", "seconds"}


def _dropout_run(seed: int):
    torch.manual_seed(0)  # the same initial weights; the loop's seed then decides the dropout masks
    model = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5), nn.Linear(4, 1))
    data = torch.linspace(-1, 1, 21).reshape(7, 3)
    generator = torch.Generator().manual_seed(0)

    def batches(epoch):
        order = torch.randperm(7, generator=generator).tolist()
        return [order[i: i + 3] for i in range(0, 7, 3)]

    def loss(rows):
        return model(data[rows]).pow(2).mean(), len(rows)

    result = train_epochs(model, torch.optim.SGD(model.parameters(), lr=0.1), batches=batches, loss=loss,
                          evaluate=lambda: float(model(data).pow(2).mean()),
                          options=EpochOptions(max_epochs=4, seed=seed, higher_is_better=False, progress=False),
                          log=lambda m: None)
    return [{k: v for k, v in r.items() if k != "seconds"} for r in result.history], model.state_dict()


def test_the_same_seed_gives_the_same_history_and_weights():
    (first, weights), (second, again), (other, _) = _dropout_run(7), _dropout_run(7), _dropout_run(8)
    assert first == second
    assert all(torch.equal(weights[k], again[k]) for k in weights)
    assert first != other


def test_progress_log_lines_without_a_terminal():
    model = Scalar(0.0)
    lines = []
    train_epochs(model, torch.optim.SGD(model.parameters(), lr=0.1), batches=lambda e: BATCHES, loss=_square_loss(model),
                 evaluate=lambda: 0.5, options=EpochOptions(max_epochs=1, progress=False, log_every=0.0),
                 log=lines.append, description="tagger epoch")
    assert [line.split(",")[0] for line in lines[:3]] == ["tagger epoch 1: batch 1/3", "tagger epoch 1: batch 2/3",
                                                         "tagger epoch 1: batch 3/3"]
    assert lines[3].startswith("tagger epoch 1: train loss ") and "dev_metric 0.5000" in lines[3]


@pytest.mark.parametrize("fields", [{"max_epochs": 0}, {"max_epochs": 2, "patience": 0}, {"max_epochs": 2, "nonfinite": "warn"},
                                    {"max_epochs": 2, "grad_clip": 0.0}])
def test_impossible_options_are_user_errors(fields):
    with pytest.raises(UserError):
        EpochOptions(**fields)


def test_shuffled_batches_follow_each_generators_own_shuffle():
    order = list(range(11))
    random.Random(4).shuffle(order)
    assert shuffled_batches(11, 4, random.Random(4)) == [order[0:4], order[4:8], order[8:11]]
    permutation = np.random.default_rng(4).permutation(11).tolist()
    assert shuffled_batches(11, 4, np.random.default_rng(4)) == [permutation[0:4], permutation[4:8], permutation[8:11]]
    assert shuffled_batches(0, 4, random.Random(0)) == []
