"""Fixtures for the pretraining tests; helpers live in pretraining_testkit.py. Modules that need
transformers skip without it (``need_transformers``); the masking tests need only numpy."""

from __future__ import annotations

import pytest
from pretraining_testkit import need_transformers


@pytest.fixture(scope="session")
def hand_tokenizer():
    """The WordPiece tokenizer of pretraining_testkit.HAND_VOCAB (BERT's pipeline, cased)."""
    from pretraining_testkit import HAND_VOCAB

    need_transformers()
    from elmokit.text.subword_tokenizers import wordpiece_from_vocab

    return wordpiece_from_vocab(HAND_VOCAB)
