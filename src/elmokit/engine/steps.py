"""The one step loop (:class:`StepLoop`) every step-counted trainer runs on: the biLM (``elmokit train``),
the pretraining objectives (``elmokit pretrain``), distillation and CoVe's translation model. A recipe gives
its batches, a step function (forward, backward, clip, update when finite) and a save; the loop counts
steps and tokens, logs metrics and progress with tokens/s and ETA, keeps the one non-finite policy,
checkpoints every ``checkpoint_every`` steps and stops at a step or compute budget. Also here: every
rank's RNG states for exact resume. Checkpoints are
``checkpoint.py``'s (atomic folders with SHA256SUMS, set aside when damaged), data parallelism is
``distributed.py``'s, the run folder ``run_folder.py``'s.

Non-finite steps, the same in every loop: a step whose loss or gradient norm is NaN or infinite is not
applied (the recipe's step function drops the gradients); the run stops with an error naming the step
and the last good checkpoint, unless the user allowed ``skip_nonfinite_steps``: that many are skipped,
counted in the metrics and the checkpoints, and one more stops the run.

Metrics (``metrics.jsonl``): one JSON object a line; a line with ``loss`` is a logged training step
(``step``, ``tokens`` seen so far, ``tokens_per_s`` over the steps since the previous line, ``elapsed_s``
over every call of the run); a line with ``skipped`` is a step whose loss or gradient was not finite.
A resumed run first drops the lines past its checkpoint's step, so the file reads as one run.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from elmokit.engine.checkpoint import decode_rng, encode_rng, latest_checkpoint, latest_good_checkpoint, read_checkpoint
from elmokit.engine.distributed import DistributedContext
from elmokit.engine.run_folder import MetricsLog, RunError, RunFolder

logger = logging.getLogger(__name__)

__all__ = ["Launch", "NonFiniteError", "RunResult", "progress_bar", "gather_rng_states", "restore_rng_states",
           "nonfinite_error",
           "StepOutcome", "StepLoop", "update_if_finite", "planned_batches"]


class NonFiniteError(RunError):
    """A step's loss or gradient was NaN or infinite (more often than ``skip_nonfinite_steps``)."""


def progress_bar(enabled: bool, total: int | None, initial: int, desc: str = "training"):
    """A tqdm bar on a terminal, else None (the loops then write plain log lines)."""
    if not (enabled and sys.stderr.isatty()):
        return None

    return tqdm(total=total, initial=initial, unit="step", desc=desc, dynamic_ncols=True)


def eta_text(max_steps: int | None, step: int, first_step: int, run_s: float) -> str:
    """``"  ETA 0:01:23"`` from the pace of the steps run in this call, or ``""``."""
    if max_steps is None or step <= first_step:
        return ""
    left = (max_steps - step) * run_s / (step - first_step)
    return f"  ETA {datetime.timedelta(seconds=round(left))}"


# ---- exact resume: every rank's torch RNG ---------------------------------------------------------


def gather_rng_states(context: DistributedContext, device: torch.device) -> dict:
    """``{"rng": [per rank], "cuda_rng": [per rank] | None}`` (base64) for ``state.json``; every rank
    must call it (it gathers)."""
    all_rng = context.all_gather_bytes(torch.get_rng_state().to(torch.int32), device)
    cuda_rng = None
    if device.type == "cuda":
        cuda_states = context.all_gather_bytes(torch.cuda.get_rng_state().to(torch.int32), device)
        cuda_rng = [encode_rng(t.to(torch.uint8)) for t in cuda_states]
    return {"rng": [encode_rng(t.to(torch.uint8)) for t in all_rng], "cuda_rng": cuda_rng}


def restore_rng_states(state: dict, context: DistributedContext, device: torch.device) -> None:
    """This rank's torch RNG from a checkpoint's ``state.json`` (a warning when the world size or the
    thread count differs: dropout masks, or the float summation order, then differ from an uninterrupted run)."""
    if state["world_size"] == context.world_size:
        torch.set_rng_state(decode_rng(state["rng"][context.rank]))
        if device.type == "cuda" and state.get("cuda_rng"):
            torch.cuda.set_rng_state(decode_rng(state["cuda_rng"][context.rank]))
    else:
        logger.warning("resuming %d ranks from a %d-rank checkpoint: dropout masks will differ from an "
                       "uninterrupted run", context.world_size, state["world_size"])
    threads = state.get("threads")
    if threads is not None and threads != torch.get_num_threads() and device.type == "cpu":
        logger.warning("the checkpoint was written with %d CPU threads, this run uses %d: the weights will not be "
                       "bit-identical to an uninterrupted run (pass --threads %d for that)",
                       threads, torch.get_num_threads(), threads)


# ---- non-finite steps ------------------------------------------------------------------------------


def nonfinite_error(step: int, what: str, loss: float, grad_norm: float, allowed: int, checkpoints: Path,
                    fix: str) -> NonFiniteError:
    """The error that stops a run at a non-finite step past its allowance; ``fix`` names the flags to change."""
    kept = latest_checkpoint(checkpoints)
    kept_text = (f"the last checkpoint, {kept}, holds finite weights and is kept" if kept is not None
                 else "no checkpoint had been written yet")
    allowance = f"; {allowed} such step(s) may be skipped and that many were" if allowed else ""
    return NonFiniteError(
        f"step {step}: non-finite {what} (loss {loss}, gradient norm {grad_norm}); training stopped before applying "
        f"it{allowance}; {kept_text}. Fix: {fix}, or skip such steps with --skip-nonfinite-steps N, then --resume"
    )


@dataclass
class StepOutcome:
    """What one optimiser step reports: the mean loss over the global batch, the gradient norm before
    clipping, the loss's parts (e.g. ``{"mlm": .., "nsp": ..}``) and the tokens the global batch held."""

    loss: float
    grad_norm: float
    tokens: int
    parts: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def finite(self) -> bool:
        return math.isfinite(self.loss) and math.isfinite(self.grad_norm)

    def what(self) -> str:
        parts = [name for name, value in (("loss", self.loss), ("gradient", self.grad_norm)) if not math.isfinite(value)]
        return " and ".join(parts)


# ---- the loop ---------------------------------------------------------------------------------------


def update_if_finite(optimizer: torch.optim.Optimizer, parameters, clip_norm: float, loss: float, tokens: int,
                     parts: dict[str, float] | None = None, extra: dict[str, Any] | None = None) -> StepOutcome:
    """Clip the global gradient norm and step, unless the loss or the norm is not finite: then the gradients
    are dropped and the weights stay (the step loop then stops or skips: the module docstring)."""
    grad_norm = float(torch.nn.utils.clip_grad_norm_(parameters, clip_norm))
    outcome = StepOutcome(loss, grad_norm, tokens, parts or {}, extra or {})
    if outcome.finite:
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
    return outcome


def planned_batches(plan: Callable[[int], list], position: dict[str, int]) -> Iterator[tuple[Any, int]]:
    """``(batch, epoch)`` forever, each epoch's batches ``plan(epoch)`` (a function of the epoch alone, so a
    resume rebuilds it), from ``position`` (``{"epoch", "batch"}``; the step function counts ``batch`` on)."""
    while True:
        batches = plan(position["epoch"])
        while position["batch"] < len(batches):
            yield batches[position["batch"]], position["epoch"]
        position["epoch"], position["batch"] = position["epoch"] + 1, 0


@dataclass(frozen=True, kw_only=True)
class Launch:
    """How a step-loop run starts: the keywords ``train`` and ``pretrain`` take besides their data and configs.

    ``resume``: continue the run in the folder; ``command``: recorded in ``command.txt`` (default: this
    process's argv); ``device``: default this rank's GPU, else the CPU; ``progress``: tqdm bars; ``context``:
    the process group (default: from torchrun's environment); ``init_method``, ``dist_timeout_s``: how the
    group starts; ``folder``: the run folder as the caller opened it (opened by the recipe when not given)."""

    resume: bool = False
    command: str | None = None
    device: str | None = None
    progress: bool = True
    context: DistributedContext | None = None
    init_method: str | None = None
    dist_timeout_s: float = 300.0
    folder: RunFolder | None = None

    @contextmanager
    def started(self) -> Iterator[tuple[DistributedContext, torch.device]]:
        """(context, device) with the process group up, torn down on the way out."""
        context = self.context or DistributedContext.from_environment()
        device = context.device(self.device)
        context.init_process_group(device, init_method=self.init_method, timeout_s=self.dist_timeout_s)
        try:
            yield context, device
        finally:
            context.destroy()


def corpus_list(corpus: str | os.PathLike | list) -> list:
    """``corpus`` as a list of files or patterns (one path or pattern, or a list of them)."""
    return [corpus] if isinstance(corpus, (str, os.PathLike)) else [os.fspath(c) for c in corpus]


@dataclass
class RunResult:
    """What a trainer returns: the last step, tokens seen, the last logged loss, the run and model folders,
    the wall time over every call of the run, this call's metric lines."""

    step: int
    tokens: int
    loss: float | None
    run_dir: Path
    model_dir: Path | None
    elapsed_s: float
    history: list[dict] = field(default_factory=list)


@dataclass
class StepLoop:
    """The loop body every step-counted trainer shares: take a batch, step, count tokens, log, skip
    non-finite steps (at most ``skip_nonfinite_steps``), checkpoint every ``checkpoint_every`` steps.

    The caller gives ``batches`` (an iterator of ``(batch, epoch)``; a batch is whatever ``step_fn``
    takes), ``step_fn(batch, step) -> StepOutcome`` (applies the update only when finite), ``save()``
    and ``fix`` (the flags to change when a step is not finite, for the error). The counters (``step``,
    ``tokens``, ``skipped``, ``elapsed_before``) come from a checkpoint's ``state.json`` through
    :meth:`restore` and go into the next one through :meth:`state`.

    ``after_step(step)`` (optional) runs after each step, before its checkpoint (a validation).
    ``should_stop()`` (optional) is asked after every step; when it says yes the loop logs that step,
    checkpoints as usual and ends with ``stopped = True`` (a compute budget such as ``--max-seconds``:
    the stop falls on a step boundary, so a resumed run continues from the same state).
    """

    batches: Iterator[tuple[Any, int]]
    step_fn: Callable[[Any, int], StepOutcome]
    save: Callable[[], None]
    metrics: MetricsLog
    checkpoints: Path
    max_steps: int | None
    epochs: int | None
    log_every: int
    checkpoint_every: int
    skip_nonfinite_steps: int = 0
    fix: str = "lower --lr"
    progress: bool = True
    is_main: bool = True
    desc: str = "training"
    elapsed_before: float = 0.0
    step: int = 0
    tokens: int = 0
    skipped: int = 0
    last_loss: float | None = None
    last_saved: int = 0
    on_step: Callable[[StepOutcome], dict] | None = None  # extra fields for a logged line (e.g. the lr)
    after_step: Callable[[int], None] | None = None  # e.g. a validation, before the step's checkpoint
    should_stop: Callable[[], bool] | None = None  # asked after each step: end the run here (a budget)
    stopped: bool = False  # set when should_stop ended the run
    start_time: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.start_time

    def state(self, context: DistributedContext, device: torch.device) -> dict:
        """The loop's part of a checkpoint's ``state.json`` (every rank must call it: it gathers the RNGs)."""
        return {"step": self.step, "tokens": self.tokens, "elapsed_s": self.elapsed(), "world_size": context.world_size,
                **gather_rng_states(context, device), "skipped_nonfinite": self.skipped,
                "threads": torch.get_num_threads()}

    def restore(self, state: dict, context: DistributedContext, device: torch.device) -> None:
        """The counters and this rank's RNG from a checkpoint's ``state.json``."""
        self.step, self.tokens, self.elapsed_before = state["step"], state.get("tokens", 0), state["elapsed_s"]
        self.skipped, self.last_saved = state.get("skipped_nonfinite", 0), state["step"]
        restore_rng_states(state, context, device)

    def result(self, run_dir: Path, model_dir: Path | None, **extra: Any) -> RunResult:
        return RunResult(self.step, self.tokens, self.last_loss, run_dir, model_dir, self.elapsed(), self.metrics.history,
                         **extra)

    def resume(self, optimizer: torch.optim.Optimizer, names: list[str], context: DistributedContext,
               device: torch.device) -> tuple[dict, dict] | None:
        """Continue from the newest good checkpoint (the main rank sets damaged newer ones aside): the optimizer
        in place, the counters and this rank's RNG; returns (its weights, its ``state.json``), or None."""
        found = latest_good_checkpoint(self.checkpoints, set_aside_bad=context.is_main)
        context.barrier()
        if found is None:
            logger.info("%s: no checkpoint yet; starting from step 0", self.checkpoints.parent)
            return None
        weights, state = read_checkpoint(found, optimizer, names)
        self.restore(state, context, device)
        logger.info("resuming from %s (step %d, %d tokens)", found, self.step, self.tokens)
        return weights, state

    def save_final(self) -> None:
        """The checkpoint of the last step, unless it was just written."""
        if self.step != self.last_saved or latest_checkpoint(self.checkpoints) is None:
            self._save()

    def _save(self) -> None:
        self.save()
        self.last_saved = self.step

    def run(self) -> None:
        self.start_time = time.perf_counter()
        window_tokens, window_start = 0, time.perf_counter()
        first_step, tokens_at_start = self.step, self.tokens
        bar = progress_bar(self.progress and self.is_main, self.max_steps, self.step, desc=self.desc)
        try:
            while self.max_steps is None or self.step < self.max_steps:
                item = next(self.batches, None)
                if item is None:
                    break
                batch, epoch = item
                if self.epochs is not None and epoch >= self.epochs:
                    break
                self.step += 1
                outcome = self.step_fn(batch, self.step)
                self.tokens += outcome.tokens
                window_tokens += outcome.tokens
                stop = self.should_stop is not None and self.should_stop()
                if outcome.finite:
                    self.last_loss = outcome.loss
                    if self.step % self.log_every == 0 or self.step == self.max_steps or stop:
                        now = time.perf_counter()
                        rate = window_tokens / max(now - window_start, 1e-9)
                        entry = {"step": self.step, "epoch": epoch, "loss": outcome.loss, **outcome.parts,
                                 "grad_norm": outcome.grad_norm, "tokens": self.tokens, "tokens_per_s": rate,
                                 "elapsed_s": round(self.elapsed(), 3), "skipped_nonfinite": self.skipped,
                                 **outcome.extra, **(self.on_step(outcome) if self.on_step else {})}
                        window_tokens, window_start = 0, now
                        self.metrics.write(entry)
                        if self.is_main and bar is None:
                            eta = eta_text(self.max_steps, self.step, first_step, time.perf_counter() - self.start_time)
                            parts = "".join(f"  {k} {v:.4f}" for k, v in outcome.parts.items())
                            logger.info("step %d  loss %.4f%s  %.0f tok/s%s", self.step, outcome.loss, parts, rate, eta)
                else:
                    self._skip(outcome)
                if bar is not None:
                    bar.update(1)
                    rate = (self.tokens - tokens_at_start) / max(time.perf_counter() - self.start_time, 1e-9)
                    bar.set_postfix(loss=f"{outcome.loss:.3f}", tok_s=f"{rate:.0f}", refresh=False)
                if self.after_step is not None:
                    self.after_step(self.step)
                if self.step % self.checkpoint_every == 0:
                    self._save()
                if stop:
                    self.stopped = True
                    break
        finally:
            if bar is not None:
                bar.close()

    def _skip(self, outcome: StepOutcome) -> None:
        self.skipped += 1
        if self.skipped > self.skip_nonfinite_steps:
            raise nonfinite_error(self.step, outcome.what(), outcome.loss, outcome.grad_norm, self.skip_nonfinite_steps,
                                  self.checkpoints, self.fix)
        logger.warning("step %d: non-finite %s; step skipped (%d of at most %d)", self.step, outcome.what(),
                       self.skipped, self.skip_nonfinite_steps)
        self.metrics.write({"step": self.step, "skipped": f"non-finite {outcome.what()}",
                            "skipped_nonfinite": self.skipped, "tokens": self.tokens})
