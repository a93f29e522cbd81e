"""A ``BiLM`` from and to files: the shipped models, native folders, the original hdf5 weights.

This module imports the model; the model never imports it (see ``elmokit.formats``).
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from elmokit.bilm import BiLM
from elmokit.formats.bilm_hdf5 import read_options, read_weights, write_original
from elmokit.formats.native import CONFIG_NAME, ModelFolderError, read_native, write_native
from elmokit.warm_state import load_warm_state

# Models shipped inside the package, loadable by name without any download.
SHIPPED_MODELS = ("default", "zh")

# What `elmokit train` writes beside the weights: vocabulary size, tokenizer, ... (training.lm.LM_INFO_NAME).
LM_INFO_NAME = "lm.json"

# Where every sentence's LSTM state starts: zero, or the folder's warm_state.safetensors.
INITIAL_STATES = ("zero", "warm")


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


def load_bilm(path: str | os.PathLike = "default", *, stateful: bool = False, initial_state: str = "zero") -> BiLM:
    """A BiLM (eval mode) from ``"default"`` (the shipped model), a native folder (config.json +
    model.safetensors), or a folder holding ``options.json`` and one ``.hdf5`` weight file.

    ``initial_state``: ``"zero"`` (the default) or ``"warm"`` (the folder's
    ``warm_state.safetensors``; see ``elmokit.warm_state``). ``stateful``: the reference's state
    carrying between calls (see ``BiLM``). Damaged files, weights that do not fit the config and
    weights holding NaN or infinity raise ``ModelFolderError`` / ``WeightFileError`` naming the file.
    """
    _check_initial_state(initial_state)
    directory = resolve_model_path(path)
    if not directory.is_dir():
        raise ModelFolderError(
            f"{directory}: not a model folder (expected config.json + model.safetensors, "
            f"or options.json + weights.hdf5); shipped models: {', '.join(SHIPPED_MODELS)}"
        )
    if (directory / CONFIG_NAME).exists():
        config, state = read_native(directory)
        return load_initial_state(BiLM.from_state(config, state, stateful=stateful), initial_state, directory)
    original = find_original_files(directory)
    if original is None:
        raise ModelFolderError(f"{directory}: neither config.json nor options.json found")
    return load_original(*original, stateful=stateful, initial_state=initial_state)


def recorded_tokenizer(path: str | os.PathLike = "default") -> dict | None:
    """The tokenizer a native model folder records in ``lm.json`` (``{"kind": "jieba", ...}``, written
    by ``elmokit train``); None when the folder has no ``lm.json`` or it names none."""
    info_path = resolve_model_path(path) / LM_INFO_NAME
    if not info_path.is_file():
        return None
    try:
        info = json.loads(info_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelFolderError(f"{info_path}: not readable JSON ({error}); fix: restore the file from the run folder") from None
    tokenizer = info.get("tokenizer") if isinstance(info, dict) else None
    if tokenizer is not None and not (isinstance(tokenizer, dict) and isinstance(tokenizer.get("kind"), str)):
        raise ModelFolderError(f"{info_path}: \"tokenizer\" must be an object with a \"kind\", got {tokenizer!r}")
    return tokenizer


def load_original(
    options_file: str | os.PathLike,
    weight_file: str | os.PathLike,
    *,
    stateful: bool = False,
    initial_state: str = "zero",
) -> BiLM:
    """A BiLM from bilm-tf / allennlp ``options.json`` + ``weights.hdf5`` (261- or 262-row char
    table). ``initial_state="warm"`` reads ``warm_state.safetensors`` beside the weight file."""
    _check_initial_state(initial_state)
    config = read_options(options_file)
    model = BiLM.from_state(config, read_weights(weight_file, config, options_file), stateful=stateful)
    return load_initial_state(model, initial_state, Path(os.path.abspath(weight_file)).parent)


def load_initial_state(bilm: BiLM, initial_state: str, directory: str | os.PathLike) -> BiLM:
    """``"zero"``: ``bilm`` as it is; ``"warm"``: ``bilm`` starting every sentence from the warm
    state stored in ``directory`` (checked to belong to its weights). Returns ``bilm``."""
    _check_initial_state(initial_state)
    if initial_state == "warm":
        bilm.set_initial_state(load_warm_state(directory, bilm))
    return bilm


def save_native(bilm: BiLM, directory: str | os.PathLike, *, model_card: str | None = None) -> Path:
    """Write elmokit's folder: config.json + model.safetensors + README.md (the model card)."""
    return write_native(directory, bilm.config, bilm.numpy_state(), model_card=model_card)


def save_original(bilm: BiLM, directory: str | os.PathLike) -> tuple[Path, Path]:
    """Write ``options.json`` + ``weights.hdf5`` that bilm-tf and allennlp can read."""
    return write_original(directory, bilm.config, bilm.numpy_state())


def _check_initial_state(initial_state: str) -> None:
    if initial_state not in INITIAL_STATES:
        raise ValueError(f"initial_state must be one of {INITIAL_STATES}, got {initial_state!r}")
