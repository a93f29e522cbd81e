"""fastText character n-grams (Bojanowski et al. 2017): how an unseen word gets a vector.

A word ``w`` is wrapped as ``<w>``; its n-grams are every substring of ``<w>`` of ``min_n`` to
``max_n`` characters (Unicode code points, as fastText walks UTF-8 code points). Each n-gram is
hashed into one of ``bucket`` rows with fastText's 32-bit FNV-1a over the UTF-8 bytes, where each
byte is first sign-extended (fastText reads bytes as ``int8_t`` — kept so the buckets match fastText
and gensim). An out-of-vocabulary word's vector is the mean of its n-gram rows.

We store only the bucket rows that training touched (the n-grams of vocabulary words): the other
rows still hold their random initial values, which are noise. Hence one deliberate deviation from
gensim/fastText: the mean runs over the word's n-grams whose bucket is stored; n-grams no training
word shared are skipped rather than averaging in random initial values. A word none of whose
n-grams is stored has no vector (KeyError / zeros, as for other tables).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def char_ngrams(word: str, min_n: int, max_n: int) -> list[str]:
    """The n-grams of ``<word>`` with ``min_n <= n <= max_n`` characters, shortest first."""
    extended = f"<{word}>"
    out = []
    for n in range(min_n, min(len(extended), max_n) + 1):
        for i in range(len(extended) - n + 1):
            out.append(extended[i : i + n])
    return out


def fasttext_hash(text: str) -> int:
    """fastText's FNV-1a 32-bit hash of the UTF-8 bytes, each byte sign-extended first."""
    h = 2166136261
    for byte in text.encode("utf-8"):
        signed = byte - 256 if byte > 127 else byte
        h = ((h ^ (signed & 0xFFFFFFFF)) * 16777619) & 0xFFFFFFFF
    return h


def ngram_buckets(word: str, min_n: int, max_n: int, bucket: int) -> list[int]:
    return [fasttext_hash(g) % bucket for g in char_ngrams(word, min_n, max_n)]


@dataclass(frozen=True, kw_only=True)
class SubwordTable:
    """The stored n-gram rows of a fastText model.

    Attributes:
        min_n, max_n: n-gram lengths (fastText defaults 3 and 6).
        bucket: number of hash buckets (fastText default 2,000,000).
        bucket_ids: (K,) int64, sorted bucket numbers that are stored.
        vectors: (K, dim) float32, their rows.
    """

    min_n: int
    max_n: int
    bucket: int
    bucket_ids: np.ndarray
    vectors: np.ndarray

    def vector(self, word: str) -> np.ndarray | None:
        """Mean of the stored n-gram rows of ``word`` (dim,), or None when none is stored."""
        ids = np.asarray(ngram_buckets(word, self.min_n, self.max_n, self.bucket), dtype=np.int64)
        if ids.size == 0 or self.bucket_ids.size == 0:
            return None
        pos = np.searchsorted(self.bucket_ids, ids)
        pos = np.minimum(pos, self.bucket_ids.size - 1)
        found = self.bucket_ids[pos] == ids
        if not found.any():
            return None
        return self.vectors[pos[found]].mean(axis=0)

    def metadata(self) -> dict:
        return {"min_n": self.min_n, "max_n": self.max_n, "bucket": self.bucket,
                "hash": "fasttext-fnv1a-32-signed-bytes", "stored_rows": int(self.bucket_ids.size)}
