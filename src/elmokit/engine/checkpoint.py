"""Checkpoints: model, optimizer, RNG states and data position, written atomically.

A checkpoint is a folder ``checkpoints/step_00001234/`` holding

* ``model.safetensors``  - every parameter of the LanguageModel (biLM + ``softmax_*``);
* ``optimizer.safetensors`` - the Adagrad accumulators (``sum/<param>``) and step counts (empty
  for plain SGD, which keeps none);
* ``state.json`` - step, tokens seen, data position, wall time so far, world size, and each
  rank's torch RNG state (base64), with a ``format_version``;
* ``SHA256SUMS`` - the sha256 of the three files above (``sha256sum -c SHA256SUMS`` checks them).

It is written into a temporary sibling folder and put in place by ``io.atomic_directory`` (a
checkpoint written again for the same step is swapped whole, never removed first), so a reader (or a
run killed with -9 half-way) only ever sees complete checkpoints. No pickles anywhere.

Trust. A checkpoint is *good* when its files match SHA256SUMS and every weight and optimizer
accumulator is finite (:func:`checkpoint_problem`). The trainer never writes a checkpoint with
non-finite weights, resumes from the newest good checkpoint (a bad newer one is set aside as
``step_XXXXXXXX.damaged`` and named in the log), and rotation only deletes checkpoints older
than the one just written (itself good), so the last good checkpoint is never rotated away.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from elmokit.engine.run_folder import checkpoint_dir, latest_checkpoint, list_checkpoints
from elmokit.errors import UserError
from elmokit.formats.checks import describe_non_finite
from elmokit.io import atomic_directory, file_sha256

logger = logging.getLogger(__name__)

__all__ = ["CheckpointError", "checkpoint_dir", "list_checkpoints", "latest_checkpoint", "latest_good_checkpoint",
           "file_sha256", "checkpoint_problem", "write_checkpoint", "read_checkpoint", "encode_rng", "decode_rng",
           "module_weights", "load_module_weights"]

FORMAT_VERSION = 1
CHECKSUMS_NAME = "SHA256SUMS"
CHECKED_FILES = ("model.safetensors", "optimizer.safetensors", "state.json")


class CheckpointError(UserError):
    """A checkpoint that cannot be resumed from; the message names the file and the fix."""


def encode_rng(state: torch.Tensor) -> str:
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def decode_rng(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()


def _write_checksums(folder: Path) -> None:
    lines = [f"{file_sha256(folder / name)}  {name}\n" for name in CHECKED_FILES]
    (folder / CHECKSUMS_NAME).write_text("".join(lines), encoding="ascii")


def verify_checksums(folder: Path) -> str | None:
    """None if every file listed in SHA256SUMS is there with that content; else what is wrong.
    A checkpoint from before checksums were written (no SHA256SUMS) passes."""
    sums = folder / CHECKSUMS_NAME
    if not sums.exists():
        return None
    try:
        listed = dict(reversed(line.split(None, 1)) for line in sums.read_text(encoding="ascii").splitlines() if line.strip())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"{CHECKSUMS_NAME} unreadable ({error})"
    for name in CHECKED_FILES:
        expected = listed.get(name)
        if expected is None:
            return f"{CHECKSUMS_NAME} lists no {name}"
        try:
            actual = file_sha256(folder / name)
        except OSError as error:
            return f"{name}: unreadable ({error.strerror or error})"
        if actual != expected.strip():
            return f"{name}: sha256 {actual[:12]}... differs from {CHECKSUMS_NAME} ({expected.strip()[:12]}...)"
    return None


def non_finite_tensors(tensors: dict[str, torch.Tensor]) -> list[str]:
    """Names of the floating-point tensors holding a NaN or an infinity."""
    return [name for name, value in tensors.items() if describe_non_finite(value)]


def checkpoint_problem(folder: Path) -> str | None:
    """None for a good checkpoint (files match SHA256SUMS, all weights and accumulators finite),
    else why it cannot be resumed from."""
    problem = verify_checksums(folder)
    if problem:
        return problem
    for name in ("model.safetensors", "optimizer.safetensors"):
        try:
            bad = non_finite_tensors(load_file(str(folder / name)))
        except Exception as error:  # noqa: BLE001 - safetensors raises its own error types for damaged files
            return f"{name}: unreadable ({error})"
        if bad:
            more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
            return f"{name}: non-finite values (NaN or inf) in {', '.join(bad[:3])}{more}"
    return None


def set_aside(folder: Path) -> Path:
    """Rename a bad checkpoint to ``step_XXXXXXXX.damaged`` (kept for inspection, no longer listed)."""
    target = folder.with_name(folder.name + ".damaged")
    n = 1
    while target.exists():
        n += 1
        target = folder.with_name(f"{folder.name}.damaged{n}")
    os.rename(folder, target)
    return target


def latest_good_checkpoint(root: Path, *, set_aside_bad: bool = True) -> Path | None:
    """The newest good checkpoint under ``root``; each newer bad one is named in a warning and
    (``set_aside_bad``: under data parallelism only the main rank does) set aside. Raises
    CheckpointError when checkpoints exist but none is good."""
    found = list_checkpoints(root)
    problems = []
    for _, folder in reversed(found):
        problem = checkpoint_problem(folder)
        if problem is None:
            return folder
        problems.append(f"{folder.name}: {problem}")
        if set_aside_bad:
            aside = set_aside(folder)
            logger.warning("%s: skipped, not resumable: %s; set aside as %s; using the checkpoint before it",
                           folder, problem, aside.name)
    if problems:
        raise CheckpointError(f"{root}: no usable checkpoint ({'; '.join(problems)}); the damaged ones were set aside "
                              "as *.damaged. Fix: train into a new --out folder")
    return None


def module_weights(modules: dict[str, torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Every module's state as ``<prefix>.<name>``, copied (tied weights apart: safetensors shares nothing)."""
    return {f"{prefix}.{k}": v.detach().clone() for prefix, module in modules.items() for k, v in module.state_dict().items()}


def load_module_weights(modules: dict[str, torch.nn.Module], weights: dict[str, torch.Tensor], device=None) -> None:
    """The inverse of :func:`module_weights` (each module takes the tensors under its prefix)."""
    for prefix, module in modules.items():
        module.load_state_dict({k[len(prefix) + 1:]: v.to(device) for k, v in weights.items() if k.startswith(prefix + ".")})


def optimizer_tensors(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, torch.Tensor]:
    """Adagrad's per-parameter state under the parameters' names."""
    out = {}
    for index, state in optimizer.state_dict()["state"].items():
        name = names[index]
        for key, value in state.items():
            out[f"{key}/{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    return out


def write_checkpoint(
    root: Path,
    step: int,
    *,
    model_state: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    param_names: list[str],
    state: dict,
    keep: int,
) -> Path:
    bad = non_finite_tensors(model_state)
    if bad:
        raise CheckpointError(f"{root}: refusing to write the checkpoint of step {step}: non-finite weights in "
                              f"{', '.join(bad[:3])}; the checkpoints already there are kept")
    final = checkpoint_dir(root, step)
    with atomic_directory(final) as tmp:  # a re-run of the same step (e.g. the final save) swaps it whole
        save_file({k: v.detach().cpu().contiguous() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
        save_file(optimizer_tensors(optimizer, dict(enumerate(param_names))), str(tmp / "optimizer.safetensors"))
        (tmp / "state.json").write_text(json.dumps({"format_version": FORMAT_VERSION, **state}, indent=1) + "\n")
        _write_checksums(tmp)
    rotate(root, final, keep)
    return final


def rotate(root: Path, newest_good: Path, keep: int) -> None:
    """Keep the newest ``keep`` checkpoints, but delete only ones older than ``newest_good`` (the
    checkpoint just written): a checkpoint is never rotated away in favour of unverified newer ones."""
    found = list_checkpoints(root)
    good_step = next(step for step, folder in found if folder == newest_good)
    for step, old in found[:-keep]:
        if step < good_step:
            shutil.rmtree(old, ignore_errors=True)


def read_checkpoint(path: Path, optimizer: torch.optim.Optimizer, param_names: list[str]):
    """(model state dict, state.json dict); the optimizer is restored in place."""
    try:
        state = json.loads((path / "state.json").read_text())
        model_state = load_file(str(path / "model.safetensors"))
        opt_tensors = load_file(str(path / "optimizer.safetensors"))
    except (OSError, json.JSONDecodeError) as error:
        raise CheckpointError(f"{path}: unreadable checkpoint ({error}); delete it to resume from the one before") from None
    if state.get("format_version", 0) > FORMAT_VERSION:
        raise CheckpointError(f"{path}/state.json: format_version {state.get('format_version')} is newer than this elmokit")
    current = optimizer.state_dict()
    restored: dict[int, dict] = {}
    for index, name in enumerate(param_names):
        entry = {key.split("/", 1)[0]: value for key, value in opt_tensors.items() if key.split("/", 1)[1] == name}
        if entry:
            restored[index] = entry
        elif index in current["state"]:  # a fresh Adagrad already holds its accumulators; plain SGD holds none
            raise CheckpointError(f"{path}/optimizer.safetensors: no state for parameter {name!r}")
    optimizer.load_state_dict({"state": restored, "param_groups": current["param_groups"]})
    return model_state, state
