"""Foreign and native file formats: the original hdf5 weights, elmokit's folder, embedding hdf5."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from elmokit.formats.bilm_hdf5 import WeightFileError
from elmokit.formats.native import CONFIG_NAME, ModelFolderError

# Models shipped inside the package, loadable by name without any download.
SHIPPED_MODELS = ("default",)


def shipped_model_path(name: str) -> Path:
    return Path(str(resources.files("elmokit") / "models" / name))


def resolve_model_path(path: str | os.PathLike) -> Path:
    if str(path) in SHIPPED_MODELS:
        return shipped_model_path(str(path))
    return Path(path)


def find_original_files(directory: Path) -> tuple[Path, Path] | None:
    """``options.json`` and the single ``.hdf5`` weight file of an original-format folder."""
    options = directory / "options.json"
    if not options.exists():
        return None
    for preferred in ("weights.hdf5", "lm_weights.hdf5"):
        if (directory / preferred).exists():
            return options, directory / preferred
    candidates = sorted(directory.glob("*.hdf5"))
    if len(candidates) != 1:
        raise ModelFolderError(
            f"{directory}: has options.json but {len(candidates)} .hdf5 files; name the weights "
            "weights.hdf5 or pass options and weight files explicitly"
        )
    return options, candidates[0]


def load_bilm(path: str | os.PathLike = "default", *, stateful: bool = False, initial_state: str = "zero"):
    """A BiLM from a shipped model name, a native folder, or an original-format folder.

    ``initial_state="warm"`` also reads the folder's ``warm_state.safetensors`` (``elmokit.warm_state``)."""
    from elmokit.bilm import BiLM

    directory = resolve_model_path(path)
    if not directory.is_dir():
        raise ModelFolderError(
            f"{directory}: not a model folder (expected config.json + model.safetensors, "
            f"or options.json + weights.hdf5); shipped models: {', '.join(SHIPPED_MODELS)}"
        )
    if (directory / CONFIG_NAME).exists():
        from elmokit.formats.native import read_native

        config, state = read_native(directory)
        return BiLM.from_state(config, state, stateful=stateful).load_initial_state(initial_state, directory)
    original = find_original_files(directory)
    if original is None:
        raise ModelFolderError(f"{directory}: neither config.json nor options.json found")
    return BiLM.from_original(*original, stateful=stateful).load_initial_state(initial_state, directory)


__all__ = ["ModelFolderError", "WeightFileError", "load_bilm", "resolve_model_path", "shipped_model_path"]
