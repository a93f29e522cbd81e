"""The epoch loop with dev early stopping, for task models. It knows no model.

A recipe (a tagger, a classifier, a fine-tuning recipe, ULMFiT) supplies its model and optimizer, the
batches of each epoch, the loss of a batch and a dev metric; the loop does the rest, the same way for all:

    for epoch in 1..max_epochs:
        model.train(); on_epoch_start(epoch)
        for batch in batches(epoch):
            on_step_start(step); loss, weight = loss_of(batch)
            non-finite loss: stop naming epoch and step (or skip the update and count it)
            zero_grad -> backward -> clip (optional) -> optimizer.step -> scheduler.step
        model.eval(); metric = evaluate() under no_grad
        a better metric (strictly; the first epoch always is one; NaN never): deep-copy the state dict
        ``patience`` epochs in a row without a better one: stop
    restore the best epoch's state dict; model.eval()

Without ``evaluate`` every epoch runs and the last state is kept. Quirks of a recipe (gradual
unfreezing, per-step learning rates) live in its hooks, not here.

``train_epochs`` returns an ``EpochResult``; its ``history`` holds one JSON-ready dict per epoch:
``epoch``, ``train_loss`` (mean over the epoch, weighted by what the recipe's loss says a batch
counts), the metric under ``metric_name``, ``best_so_far``, ``seconds``, ``skipped_steps`` (only
with ``nonfinite="skip"``), then the recipe's own fields.
"""

from __future__ import annotations

import copy
import logging
import math
import random
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from elmokit.errors import UserError

logger = logging.getLogger(__name__)

NONFINITE_POLICIES = ("stop", "skip")


class NonFiniteLoss(UserError):
    """A training loss was NaN or infinite (``nonfinite="stop"``): the message names the epoch and step."""


def seed_everything(seed: int) -> None:
    """Seed torch (every device), Python's and numpy's global generators. Recipes that draw random
    numbers while building the model call this before building it (and leave ``EpochOptions.seed`` None)."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def shuffled_batches(count: int, batch_size: int, rng: random.Random | np.random.Generator) -> list[list[int]]:
    """The indices ``0..count-1`` in an order drawn from ``rng`` (``random.Random.shuffle`` of the list, or
    numpy's ``permutation``), cut into batches of ``batch_size`` (the last one may be smaller)."""
    if isinstance(rng, random.Random):
        order = list(range(count))
        rng.shuffle(order)
    else:
        order = rng.permutation(count).tolist()
    return [order[start : start + batch_size] for start in range(0, count, batch_size)]


@dataclass(frozen=True, kw_only=True)
class EpochOptions:
    """How the loop runs (the recipe's own options map onto these)."""

    max_epochs: int
    patience: int | None = None  # stop after this many epochs in a row without a better metric (None: never)
    higher_is_better: bool = True  # False: a lower metric is better (a loss, a perplexity)
    grad_clip: float | None = None  # max total gradient norm (None: no clipping)
    nonfinite: str = "stop"  # "stop": raise NonFiniteLoss; "skip": no update for that batch, counted
    seed: int | None = None  # seed_everything(seed) when the loop starts (None: the recipe seeded)
    progress: bool | None = None  # tqdm bars (None: only when stderr is a terminal)
    log_every: float = 60.0  # seconds between progress log lines when there is no bar

    def __post_init__(self) -> None:
        if self.max_epochs < 1:
            raise UserError(f"max_epochs must be >= 1, got {self.max_epochs}")
        if self.patience is not None and self.patience < 1:
            raise UserError(f"patience must be >= 1 (or None: never stop early), got {self.patience}")
        if self.nonfinite not in NONFINITE_POLICIES:
            raise UserError(f"nonfinite must be one of {', '.join(NONFINITE_POLICIES)}, got {self.nonfinite!r}")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise UserError(f"grad_clip must be > 0 (or None: no clipping), got {self.grad_clip}")


@dataclass
class EpochResult:
    history: list[dict] = field(default_factory=list)
    best_epoch: int | None = None  # None without evaluate
    best_metric: float | None = None
    stopped_early: bool = False
    skipped_steps: int = 0


def train_epochs(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    *,
    batches: Callable[[int], Iterable],
    loss: Callable[[Any], tuple[torch.Tensor, float]],
    options: EpochOptions,
    evaluate: Callable[[], float | tuple[float, Mapping]] | None = None,
    metric_name: str = "dev_metric",
    scheduler=None,
    clip_parameters: Iterable[torch.Tensor] | None = None,
    on_epoch_start: Callable[[int], None] | None = None,
    on_step_start: Callable[[int], None] | None = None,
    epoch_record: Callable[[int], Mapping] | None = None,
    log: Callable[[str], None] | None = None,
    description: str = "epoch",
) -> EpochResult:
    """Train ``model`` in place (see the module docstring for the order of things).

    batches(epoch): the batches of epoch ``epoch`` (1-based), in order; the recipe shuffles.
    loss(batch): (scalar loss tensor, how many examples or targets it averages over).
    evaluate(): the dev metric, or (metric, fields for the epoch's record); run in eval mode, no_grad.
    scheduler: ``.step()`` after every update. clip_parameters: what ``grad_clip`` clips (default: the
    model's parameters). on_epoch_start(epoch), on_step_start(step): the recipe's hooks (step counts
    batches from 0 over the whole run). epoch_record(epoch): more fields for the epoch's record.
    log: one line per epoch and the early stop (default: this module's logger).
    """
    log = log or logger.info
    if options.seed is not None:
        seed_everything(options.seed)
    clip = list(clip_parameters) if clip_parameters is not None else list(model.parameters())
    bar = sys.stderr.isatty() if options.progress is None else options.progress
    result, best_state, stale, step = EpochResult(), None, 0, 0
    for epoch in range(1, options.max_epochs + 1):
        started = last_line = time.perf_counter()
        model.train()
        if on_epoch_start is not None:
            on_epoch_start(epoch)
        epoch_batches = batches(epoch)
        of = f"/{len(epoch_batches)}" if hasattr(epoch_batches, "__len__") else ""
        if bar:

            epoch_batches = tqdm(epoch_batches, desc=f"{description} {epoch}", unit="batch", leave=False)
        total, weight_sum, skipped = 0.0, 0.0, 0
        for position, batch in enumerate(epoch_batches, 1):
            if on_step_start is not None:
                on_step_start(step)
            value, weight = loss(batch)
            step += 1
            optimizer.zero_grad()
            number = value.item()
            if not math.isfinite(number):
                if options.nonfinite == "stop":
                    raise NonFiniteLoss(f"training loss is {number} at epoch {epoch}, step {position} (step {step} of the "
                                        "run): look for non-finite inputs or lower the learning rate (or skip such "
                                        "steps: nonfinite='skip')")
                skipped += 1
                continue
            value.backward()
            if options.grad_clip is not None:
                nn.utils.clip_grad_norm_(clip, options.grad_clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            total, weight_sum = total + number * weight, weight_sum + weight
            if not bar and time.perf_counter() - last_line >= options.log_every:
                last_line = time.perf_counter()
                log(f"{description} {epoch}: batch {position}{of}, train loss so far {total / weight_sum:.4f}")
        # None, not NaN, when every batch was skipped: the history is written as JSON
        record: dict = {"epoch": epoch, "train_loss": total / weight_sum if weight_sum else None}
        if options.nonfinite == "skip":
            record["skipped_steps"] = skipped
            result.skipped_steps += skipped
        line = f"{description} {epoch}: train loss {total / weight_sum if weight_sum else float('nan'):.4f}"
        line += f", {skipped} non-finite skipped" if skipped else ""
        if evaluate is not None:
            model.eval()
            with torch.no_grad():
                evaluated = evaluate()
            metric, fields = evaluated if isinstance(evaluated, tuple) else (evaluated, {})
            metric, best = float(metric), result.best_metric
            # the first epoch is the first best; a NaN metric (an empty dev set) is never better than a number
            if best is None or (math.isnan(best) and not math.isnan(metric)) or (
                    metric > best if options.higher_is_better else metric < best):
                result.best_metric, result.best_epoch, stale = metric, epoch, 0
                best_state = copy.deepcopy(model.state_dict())
            else:
                stale += 1
            record.update({metric_name: metric, **fields, "best_so_far": result.best_metric})
            line += f", {metric_name} {metric:.4f} (best {result.best_metric:.4f}, epoch {result.best_epoch})"
        if epoch_record is not None:
            record.update(epoch_record(epoch))
        record["seconds"] = round(time.perf_counter() - started, 2)
        result.history.append(record)
        log(f"{line} ({record['seconds']:.1f}s)")
        if options.patience is not None and stale >= options.patience and epoch < options.max_epochs:
            result.stopped_early = True
            log(f"early stop: no better {metric_name} for {options.patience} epochs (best epoch {result.best_epoch})")
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return result
