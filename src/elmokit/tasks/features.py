"""Frozen representations of a whole data set, computed once and memory-mapped from disk.

In the usual ELMo setting the biLM is frozen (Peters et al. 2018, section 3.3), so its layers for
a data set never change while a task model trains: computing them once makes every epoch cost
only the task model. The cache is a folder:

    features.npy   float32 (total_tokens, L, D), sentence after sentence (np.lib.format, memmapped)
    offsets.npy    int64 (n_sentences + 1,): sentence i is rows offsets[i]:offsets[i + 1]
    meta.json      representation name and fingerprint, L, D, counts, the key

Memory stays bounded: ``build`` writes chunk by chunk and reads go through the OS page cache.
The folder is written under a temporary name and renamed, so an interrupted build leaves nothing
that looks complete. ``for_dataset`` keys a folder by (representation fingerprint, sentences), so
the same data with the same model is embedded only once.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from elmokit.evaluation.token_features import embed_in_chunks
from elmokit.io import atomic_directory

FORMAT_VERSION = 1


def representation_fingerprint(rep) -> str:
    """A string that changes whenever the representation's outputs could change."""
    own = getattr(rep, "fingerprint", None)
    if own is not None:
        return str(own)
    vectors = getattr(rep, "vectors", None)  # a static table
    if isinstance(vectors, np.ndarray):
        digest = hashlib.sha256(np.ascontiguousarray(vectors).tobytes())
        digest.update("\n".join(getattr(rep, "words", [])).encode("utf-8"))
        return f"{rep.name}:{digest.hexdigest()[:16]}"
    raise TypeError(
        f"cannot fingerprint representation {getattr(rep, 'name', rep)!r}: give it a `fingerprint` "
        "attribute (a string that changes when its outputs change) or pass an explicit cache directory"
    )


def sentences_fingerprint(sentences: Iterable[Sequence[str]]) -> str:
    digest = hashlib.sha256()
    for sentence in sentences:
        digest.update("\x1f".join(sentence).encode("utf-8"))
        digest.update(b"\x1e")
    return digest.hexdigest()


class FeatureCache:
    """Per-token vectors (L, n_tokens, D) of every sentence of a data set, read from disk."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{self.directory}: not a feature cache (no meta.json)")
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
              chunk_sentences: int = 512, key: str | None = None, progress: bool = False) -> "FeatureCache":
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
    def for_dataset(cls, rep, sentences: Sequence[Sequence[str]], cache_root: str | os.PathLike, **options) -> "FeatureCache":
        """The cache of these sentences under ``cache_root``, built on first use and reused after."""
        key = hashlib.sha256(f"{representation_fingerprint(rep)}\n{sentences_fingerprint(sentences)}".encode()).hexdigest()
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
        lengths = [self.length(i) for i in indices]
        width = max(lengths, default=0)
        out = np.zeros((len(indices), self.num_layers, width, self.dim), dtype=np.float32)
        mask = np.zeros((len(indices), width), dtype=bool)
        for row, (index, n) in enumerate(zip(indices, lengths)):
            out[row, :, :n] = self[index]
            mask[row, :n] = True
        return torch.from_numpy(out), torch.from_numpy(mask)
