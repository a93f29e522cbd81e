"""elmokit's own model folder: ``config.json`` + ``model.safetensors`` + ``README.md``.

The config carries a ``format_version``; older versions are upgraded in ``BiLMConfig.from_dict``
with logged defaults. Weights are safetensors (no pickles), under our parameter names.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from elmokit.bilm import BiLMConfig
from elmokit.io import atomic_path

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
CARD_NAME = "README.md"


class ModelFolderError(ValueError):
    """A native model folder that is incomplete or inconsistent."""


def write_native(
    directory: str | os.PathLike,
    config: BiLMConfig,
    state: dict[str, np.ndarray],
    *,
    model_card: str | None = None,
) -> Path:
    from safetensors.numpy import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {name: np.ascontiguousarray(value, dtype=np.float32) for name, value in state.items()}
    with atomic_path(directory / WEIGHTS_NAME) as tmp:
        save_file(arrays, tmp, metadata={"format": "elmokit-bilm"})
    with atomic_path(directory / CONFIG_NAME) as tmp:
        Path(tmp).write_text(json.dumps(config.to_dict(), indent=2) + "\n", encoding="utf-8")
    card = model_card if model_card is not None else default_model_card(config, arrays)
    with atomic_path(directory / CARD_NAME) as tmp:
        Path(tmp).write_text(card, encoding="utf-8")
    return directory


def read_native(directory: str | os.PathLike) -> tuple[BiLMConfig, dict[str, np.ndarray]]:
    from safetensors.numpy import load_file

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
    return config, load_file(str(weights_path))


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
