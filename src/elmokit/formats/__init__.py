"""Foreign and native file formats: the original hdf5 weights, elmokit's folder, embedding hdf5.

The dependency is one way, as in torchtitan's ``state_dict_adapter``: this package imports the
model (``elmokit.bilm``) and the config (``elmokit.bilm_config``); the model imports nothing
from here. Reading and writing a biLM in any format is here: ``load_bilm`` (a shipped name or a
folder), ``load_original`` (``options.json`` + ``weights.hdf5``), ``save_native``, ``save_original``.
"""

from __future__ import annotations

from elmokit.formats.bilm_files import (
    INITIAL_STATES,
    SHIPPED_MODELS,
    find_original_files,
    load_bilm,
    load_initial_state,
    load_original,
    recorded_tokenizer,
    resolve_model_path,
    save_native,
    save_original,
    shipped_model_path,
)
from elmokit.formats.bilm_hdf5 import WeightFileError
from elmokit.formats.native import CONFIG_NAME, WEIGHTS_NAME, ModelFolderError

__all__ = [
    "CONFIG_NAME",
    "INITIAL_STATES",
    "SHIPPED_MODELS",
    "WEIGHTS_NAME",
    "ModelFolderError",
    "WeightFileError",
    "find_original_files",
    "load_bilm",
    "load_initial_state",
    "load_original",
    "recorded_tokenizer",
    "resolve_model_path",
    "save_native",
    "save_original",
    "shipped_model_path",
]
