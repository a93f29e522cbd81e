"""Frozen per-token vectors of a Representation, streamed in chunks of sentences.

``embed_in_chunks`` is the one loop that feeds a data set through ``rep.embed`` (shape-checked,
with a progress bar): the probes consume it directly (they need each sentence once, in order, and
keep only the token rows or running sums per sense); ``elmokit.tasks.features.FeatureCache``
writes it to disk for the task models, which read it every epoch.
"""

from __future__ import annotations

import sys
from typing import Iterator, Sequence

import numpy as np


def embed_in_chunks(
    rep, sentences: Sequence[Sequence[str]], *, chunk_size: int = 512, progress: bool | None = None,
    description: str = "embedding",
) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield ``(start, arrays)``: arrays[i] (L, n_tokens, D) float32 for sentences[start + i]."""
    from tqdm import tqdm

    if progress is None:
        progress = sys.stderr.isatty()
    total_tokens = sum(len(s) for s in sentences)
    with tqdm(total=total_tokens, unit="tok", desc=description, disable=not progress, file=sys.stderr) as bar:
        for start in range(0, len(sentences), chunk_size):
            chunk = sentences[start : start + chunk_size]
            arrays = rep.embed(chunk)
            for sentence, array in zip(chunk, arrays):
                if array.shape[:2] != (rep.num_layers, len(sentence)) or array.shape[2] != rep.dim:
                    raise ValueError(
                        f"{rep.name}: embed gave shape {array.shape} for a sentence of {len(sentence)} tokens; "
                        f"expected ({rep.num_layers}, {len(sentence)}, {rep.dim})"
                    )
            bar.update(sum(len(s) for s in chunk))
            yield start, arrays


def stack_token_features(rep, sentences: Sequence[Sequence[str]], **options) -> np.ndarray:
    """Every token of every sentence, in order: float32 (L, N, D), N = total tokens."""
    total = sum(len(s) for s in sentences)
    features = np.empty((rep.num_layers, total, rep.dim), dtype=np.float32)
    position = 0
    for _, arrays in embed_in_chunks(rep, sentences, **options):
        for array in arrays:
            features[:, position : position + array.shape[1]] = array
            position += array.shape[1]
    return features
