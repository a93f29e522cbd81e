"""Tokens to model inputs: ELMo character ids.

The names below load ``elmokit.text.chars`` (and torch) on first use, so that the tokenizers and
segmenters of this package can be imported without torch (PEP 562).
"""

import importlib

__all__ = ["BOS_TOKEN", "EOS_TOKEN", "batch_to_ids", "token_to_char_ids"]


def __getattr__(name: str):
    if name not in __all__:
        raise AttributeError(f"module 'elmokit.text' has no attribute {name!r}")
    return getattr(importlib.import_module("elmokit.text.chars"), name)
