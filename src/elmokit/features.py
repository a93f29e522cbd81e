"""Frozen per-token vectors of a Representation: streamed, cached on disk, or held in memory.

* ``embed_in_chunks`` is the one loop that feeds a data set through ``rep.embed`` (shape-checked,
  with a progress bar). The probes consume it directly (they need each sentence once, in order);
  ``FeatureCache`` writes it to disk for the task models, which read it every epoch.
* ``FeatureCache``: in the usual ELMo setting the biLM is frozen (Peters et al. 2018, section
  3.3), so its layers for a data set never change while a task model trains: computing them once
  makes every epoch cost only the task model. The cache is a folder::

      features.npy   float32 (total_tokens, L, D), sentence after sentence (np.lib.format, memmapped)
      offsets.npy    int64 (n_sentences + 1,): sentence i is rows offsets[i]:offsets[i + 1]
      meta.json      representation name, L, D, counts, the key

  Memory stays bounded: ``build`` writes chunk by chunk and reads go through the OS page cache.
  The folder is written under a temporary name and renamed, so an interrupted build leaves
  nothing that looks complete. ``for_dataset`` keys a folder by (representation fingerprint,
  sentences), so the same data with the same model is embedded only once.
* ``InMemoryFeatures`` offers the same ``batch`` surface over arrays in memory (prediction, and
  representations without a fingerprint); ``FeatureSubset`` selects rows of either.

Every feature source gives ``batch(indices) -> (features (B, L, T, D) zero-padded, mask (B, T))``.
Shapes: B batch, T tokens (longest in the batch), L layers, D representation dim.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
import torch

from elmokit.errors import InputNotFound
from elmokit.io import atomic_directory
from elmokit.progress import progress_bar
from elmokit.representation import fingerprint

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1


def embed_in_chunks(
    rep, sentences: Sequence[Sequence[str]], *, chunk_size: int = 512, progress: bool | None = None,
    description: str = "embedding",
) -> Iterator[tuple[int, list[np.ndarray]]]:
    """Yield ``(start, arrays)``: arrays[i] (L, n_tokens, D) float32 for sentences[start + i]."""
    total_tokens = sum(len(s) for s in sentences)
    with progress_bar(total=total_tokens, unit="tok", desc=description, disable=progress is False) as bar:
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


def pad_features(arrays: Sequence[np.ndarray], num_layers: int | None = None,
                 dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, n_i, D) arrays -> features (B, L, T, D) zero-padded to the longest, mask (B, T).

    ``num_layers`` and ``dim`` are needed only when ``arrays`` is empty."""
    if arrays:
        num_layers, _, dim = arrays[0].shape
    steps = max((a.shape[1] for a in arrays), default=0)
    out = np.zeros((len(arrays), num_layers or 0, steps, dim or 0), dtype=np.float32)
    mask = np.zeros((len(arrays), steps), dtype=bool)
    for b, a in enumerate(arrays):
        out[b, :, : a.shape[1]] = a
        mask[b, : a.shape[1]] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def sentences_fingerprint(sentences: Iterable[Sequence[str]]) -> str:
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update("\x1f".join(sentence).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()


class InMemoryFeatures:
    """The ``FeatureCache.batch`` surface over arrays held in memory (prediction; representations
    that cannot be fingerprinted, such as test fakes)."""

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self.arrays = list(arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.arrays[index]

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return pad_features([self.arrays[i] for i in indices])


class FeatureSubset:
    """Rows ``indices`` of a feature source (SST-2 is a subset of the SST-5 sentences)."""

    def __init__(self, source, indices: Sequence[int]) -> None:
        self.source, self.indices = source, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.source.batch([self.indices[i] for i in indices])


class FeatureCache:
    """Per-token vectors (L, n_tokens, D) of every sentence of a data set, read from disk."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / "meta.json"
        if not meta_path.exists():
            raise InputNotFound(f"{self.directory}: not a feature cache (no meta.json)")
        self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if self.meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{meta_path}: format_version {self.meta.get('format_version')}, expected {FORMAT_VERSION}")
        self.offsets = np.load(self.directory / "offsets.npy")
        self.features = np.load(self.directory / "features.npy", mmap_mode="r")  # (N_tokens, L, D)
        self.num_layers = int(self.meta["num_layers"])
        self.dim = int(self.meta["dim"])
        if self.features.shape != (int(self.offsets[-1]), self.num_layers, self.dim):
            raise ValueError(f"{self.directory}: features.npy has shape {self.features.shape}, meta.json and "
                             f"offsets.npy say {(int(self.offsets[-1]), self.num_layers, self.dim)}")

    @classmethod
    def build(cls, rep, sentences: Sequence[Sequence[str]], directory: str | os.PathLike, *,
              chunk_sentences: int = 512, key: str | None = None, progress: bool = False) -> FeatureCache:
        """Embed ``sentences`` with ``rep`` into ``directory`` (replaced atomically if present)."""
        directory = Path(directory)
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        with atomic_directory(directory) as staging:
            features = np.lib.format.open_memmap(
                staging / "features.npy", mode="w+", dtype=np.float32, shape=(int(offsets[-1]), rep.num_layers, rep.dim)
            )
            for start, arrays in embed_in_chunks(rep, sentences, chunk_size=chunk_sentences, progress=progress,
                                                 description=f"embedding with {rep.name}"):
                for i, array in enumerate(arrays, start):
                    features[offsets[i] : offsets[i + 1]] = array.transpose(1, 0, 2)
            features.flush()
            del features
            np.save(staging / "offsets.npy", offsets)
            meta = {"format_version": FORMAT_VERSION, "representation": rep.name, "key": key,
                    "num_layers": rep.num_layers, "dim": rep.dim, "n_sentences": len(sentences),
                    "n_tokens": int(offsets[-1])}
            (staging / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return cls(directory)

    @classmethod
    def for_dataset(cls, rep, sentences: Sequence[Sequence[str]], cache_root: str | os.PathLike, **options) -> FeatureCache:
        """The cache of these sentences under ``cache_root``, built on first use and reused after."""
        key = hashlib.sha256(f"{fingerprint(rep)}\n{sentences_fingerprint(sentences)}".encode()).hexdigest()
        directory = Path(cache_root) / key[:24]
        if (directory / "meta.json").exists():
            cache = cls(directory)
            if cache.meta.get("key") == key:
                return cache
        return cls.build(rep, sentences, directory, key=key, **options)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> np.ndarray:
        """Sentence ``index`` as float32 (L, n_tokens, D), like ``Representation.embed``."""
        if not -len(self) <= index < len(self):
            raise IndexError(f"sentence {index} of a cache of {len(self)}")
        index %= len(self)
        rows = np.asarray(self.features[self.offsets[index] : self.offsets[index + 1]])
        return np.ascontiguousarray(rows.transpose(1, 0, 2))

    def length(self, index: int) -> int:
        return int(self.offsets[index + 1] - self.offsets[index])

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (B, L, T, D) zero-padded to the longest sentence, and the mask (B, T)."""
        return pad_features([self[i] for i in indices], self.num_layers, self.dim)


def feature_source(representation, sentences: Sequence[Sequence[str]], cache_dir: str | os.PathLike):
    """Frozen features of ``sentences``: a ``FeatureCache`` under ``cache_dir`` (built once,
    memory-mapped, reused by later runs on the same data and model), or arrays in memory for a
    representation without a fingerprint."""
    started = time.perf_counter()
    try:
        fingerprint(representation)
    except TypeError:
        source = InMemoryFeatures(representation.embed(sentences))
    else:
        source = FeatureCache.for_dataset(representation, sentences, cache_dir)
    logger.info("features: %d sentences from %s in %.1fs", len(sentences), representation.name,
                time.perf_counter() - started)
    return source
