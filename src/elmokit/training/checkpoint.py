"""Checkpoints: model, optimizer, RNG states and data position, written atomically.

A checkpoint is a folder ``checkpoints/step_00001234/`` holding

* ``model.safetensors``  - every parameter of the LanguageModel (biLM + ``softmax_*``);
* ``optimizer.safetensors`` - the Adagrad accumulators (``sum/<param>``) and step counts;
* ``state.json`` - step, tokens seen, data position, wall time so far, world size, and each
  rank's torch RNG state (base64), with a ``format_version``.

It is written into a temporary sibling folder and renamed into place, so a reader (or a run
killed with -9 half-way) only ever sees complete checkpoints. No pickles anywhere.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
from pathlib import Path

import torch

FORMAT_VERSION = 1
STEP_DIR = re.compile(r"^step_(\d{8,})$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the file and the fix."""


def encode_rng(state: torch.Tensor) -> str:
    return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")


def decode_rng(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8).clone()


def checkpoint_dir(root: Path, step: int) -> Path:
    return root / f"step_{step:08d}"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_DIR.match(child.name)
        if match and child.is_dir() and (child / "state.json").exists():
            found.append((int(match.group(1)), child))
    return sorted(found)


def latest_checkpoint(root: Path) -> Path | None:
    found = list_checkpoints(root)
    return found[-1][1] if found else None


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
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    final = checkpoint_dir(root, step)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        save_file({k: v.detach().cpu().contiguous() for k, v in model_state.items()}, str(tmp / "model.safetensors"))
        save_file(optimizer_tensors(optimizer, dict(enumerate(param_names))), str(tmp / "optimizer.safetensors"))
        (tmp / "state.json").write_text(json.dumps({"format_version": FORMAT_VERSION, **state}, indent=1) + "\n")
        if final.exists():  # a re-run of the same step (e.g. the final save): replace it
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for _, old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def read_checkpoint(path: Path, optimizer: torch.optim.Optimizer, param_names: list[str]):
    """(model state dict, state.json dict); the optimizer is restored in place."""
    from safetensors.torch import load_file

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
        if not entry:
            raise CheckpointError(f"{path}/optimizer.safetensors: no state for parameter {name!r}")
        restored[index] = entry
    optimizer.load_state_dict({"state": restored, "param_groups": current["param_groups"]})
    return model_state, state
