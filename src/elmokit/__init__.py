"""elmokit: deep contextualized word representations (ELMo), faithful, deterministic, fast.

    from elmokit import Embedder
    vectors = Embedder.load("default").embed([["Hello", "world", "."]])  # [(3, 3, 32) array]

Importing the package imports nothing heavy: each public name is loaded from its module on first
use (PEP 562), so ``elmokit --version`` and the command line's help never import torch.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    "PRESETS": "elmokit.bilm",
    "BiLM": "elmokit.bilm",
    "BiLMConfig": "elmokit.bilm",
    "BiLMOutput": "elmokit.bilm",
    "Elmo": "elmokit.elmo",
    "Embedder": "elmokit.elmo",
    "load_bilm": "elmokit.formats",
    "load_original": "elmokit.formats",
    "save_native": "elmokit.formats",
    "save_original": "elmokit.formats",
    "ScalarMix": "elmokit.nn.scalar_mix",
    "Representation": "elmokit.representation",
    "batch_to_ids": "elmokit.text.chars",
}

__all__ = [*sorted(_EXPORTS, key=str.lower), "__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'elmokit' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
