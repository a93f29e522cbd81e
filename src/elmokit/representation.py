"""The one interface every representation offers (ELMo, static tables, transformers).

Evaluation and task code only ever see this surface, so they never ask which kind they hold.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Representation(Protocol):
    """Turns tokenised sentences into per-token vectors.

    Attributes:
        name: a short human-readable name ("elmo:default", "word2vec:skipgram", ...).
        num_layers: 1 for a static table, L + 1 for a biLM with L LSTM layers.
        dim: the size of each token vector.
    """

    name: str
    num_layers: int
    dim: int

    def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One float32 array of shape (num_layers, n_tokens, dim) per sentence."""
        ...
