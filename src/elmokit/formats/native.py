"""elmokit's own model folder: ``config.json`` + ``model.safetensors`` + ``README.md``.

The config carries a ``format_version``; older versions are upgraded in ``BiLMConfig.from_dict``
with logged defaults. Weights are safetensors (no pickles), under our parameter names.

``read_native`` refuses, each with one line naming the file: a damaged (truncated, empty)
weight file, weights that do not fit the config (the tensor, both shapes, both files), and
weights holding NaN or infinity.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from elmokit.bilm import BiLM  # the model defines the shapes; formats import it, never the reverse
from elmokit.bilm_config import BiLMConfig
from elmokit.errors import UserError
from elmokit.formats.checks import describe_non_finite, refuse_non_finite
from elmokit.io import atomic_path, write_json

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
CARD_NAME = "README.md"


class ModelFolderError(UserError):
    """A native model folder that is incomplete or inconsistent."""


def write_native(
    directory: str | os.PathLike,
    config: BiLMConfig,
    state: dict[str, np.ndarray],
    *,
    model_card: str | None = None,
) -> Path:
    directory = Path(directory)
    arrays = {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in state.items()}
    refuse_non_finite(arrays, directory / WEIGHTS_NAME)  # before anything is written
    directory.mkdir(parents=True, exist_ok=True)
    with atomic_path(directory / WEIGHTS_NAME) as tmp:
        save_file(arrays, tmp, metadata={"format": "elmokit-bilm"})
    write_json(directory / CONFIG_NAME, config.to_dict())
    card = model_card if model_card is not None else default_model_card(config, arrays)
    with atomic_path(directory / CARD_NAME) as tmp:
        Path(tmp).write_text(card, encoding="utf-8")
    return directory


def read_native(directory: str | os.PathLike) -> tuple[BiLMConfig, dict[str, np.ndarray]]:
    """The config and the checked weights (float32 arrays under our names) of a native folder."""
    directory = Path(directory)
    config_path, weights_path = directory / CONFIG_NAME, directory / WEIGHTS_NAME
    for path in (config_path, weights_path):
        if not path.exists():
            raise ModelFolderError(f"{directory}: no {path.name}; is this an elmokit model folder?")
    try:
        data = json.loads(config_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ModelFolderError(f"{config_path}: not valid JSON (line {error.lineno}: {error.msg})") from None
    try:
        config = BiLMConfig.from_dict(data)
    except (TypeError, ValueError) as error:
        raise ModelFolderError(f"{config_path}: {error}") from None
    state = read_weights_file(weights_path)
    check_fits_config(state, config, config_path, weights_path)
    return config, state


def read_weights_file(path: Path) -> dict[str, np.ndarray]:
    """A safetensors file of float weights -> arrays; ``ModelFolderError`` naming the file if it is
    damaged (truncated, empty, not safetensors) or holds NaN or infinity."""
    try:
        state = load_file(str(path))
    except Exception as error:  # safetensors raises its own error types for a damaged file
        raise ModelFolderError(
            f"{path}: not a readable safetensors file ({describe_safetensors_error(path, error)}); "
            "the file is damaged or incomplete: copy or write it again"
        ) from None
    for name, array in state.items():
        problem = describe_non_finite(array)
        if problem:
            raise ModelFolderError(f"{path}: tensor {name!r} holds {problem}; refusing a damaged model")
    return state


def describe_safetensors_error(path: Path, error: Exception) -> str:
    size = path.stat().st_size
    if size == 0:
        return "empty: 0 bytes"
    return f"{size} bytes: {str(error).splitlines()[0] if str(error) else type(error).__name__}"


def check_fits_config(state: dict[str, np.ndarray], config: BiLMConfig, config_path: Path, weights_path: Path) -> None:
    """Every parameter the config describes is in the weights with its shape, and nothing else."""
    with torch.device("meta"):  # shapes only, nothing allocated
        expected = {name: tuple(t.shape) for name, t in BiLM(config).state_dict().items()}
    for name, shape in expected.items():
        if name not in state:
            raise ModelFolderError(
                f"{weights_path}: no tensor {name!r} (shape {shape} per {config_path}); "
                "the config and the weights do not belong together"
            )
        found = tuple(state[name].shape)
        if found != shape:
            raise ModelFolderError(
                f"{weights_path}: tensor {name!r} has shape {found}, but {config_path} describes {shape}; "
                "the config and the weights do not belong together"
            )
    unexpected = sorted(set(state) - set(expected))
    if unexpected:
        raise ModelFolderError(
            f"{weights_path}: tensor {unexpected[0]!r} ({len(unexpected)} in all) is not part of the model "
            f"{config_path} describes; the config and the weights do not belong together"
        )


def default_model_card(config: BiLMConfig, state: dict[str, np.ndarray]) -> str:
    n_params = sum(int(np.prod(v.shape)) for v in state.values())
    filters = ", ".join(f"{w}x{n}" for w, n in config.filters)
    return (
        "# elmokit biLM\n\n"
        f"- layers: {config.n_layers} x LSTM {config.lstm_dim} cells, projection {config.projection_dim} "
        f"(outputs {config.n_layers + 1} layers of {config.output_dim})\n"
        f"- token encoder: char CNN ({filters}; {config.activation}), {config.n_highway} highway\n"
        f"- skip connections: {config.use_skip_connections}; cell clip {config.cell_clip}, "
        f"projection clip {config.proj_clip}\n"
        f"- parameters: {n_params:,}\n"
    )
