"""StaticVectors: a word -> vector table behind the `Representation` interface.

The light query object of every static method (word2vec, fastText, GloVe, LSA, Doc2Vec word
vectors): what users keep and ship, without any trainer state.

Out-of-vocabulary behaviour (stated once, here):

* ``table[word]`` / :meth:`vector` raise ``KeyError`` naming the word and the table, except for
  fastText tables, which build the vector from the word's stored character n-grams
  (see :mod:`elmokit.static.subwords`) and raise only when none of them is stored.
* ``word in table`` is True only for words with their own row; :meth:`has_vector` is also True
  for words a fastText table can build.
* :meth:`embed` (the `Representation` method) never raises for unknown words: it gives them the
  n-gram vector where there is one, else a row of zeros.

A folder written by :meth:`save_folder` (and by ``elmokit static train``) holds ``vectors.txt``
(word2vec text with header), ``vectors.bin`` (word2vec binary), ``static.json`` (what the loader
needs: name, dimension, tokenizer, format_version) and, for fastText, ``subwords.safetensors``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from elmokit.errors import InputNotFound, UserError
from elmokit.formats.checks import describe_non_finite
from elmokit.formats.word2vec import VectorFileError, read_word2vec, write_word2vec
from elmokit.io import atomic_path, write_json
from elmokit.nn.functional import invariant_scores
from elmokit.representation import EmbedsFiles
from elmokit.static.subwords import SubwordTable

FORMAT_VERSION = 1
META_NAME = "static.json"
TEXT_NAME = "vectors.txt"
BINARY_NAME = "vectors.bin"
SUBWORDS_NAME = "subwords.safetensors"


class StaticVectors(EmbedsFiles):
    """A table of word vectors with cosine queries; a one-layer `Representation`.

    Args:
        words: the vocabulary, usually most frequent first (analogy restricts to the first N).
        vectors: (n_words, dim) array, stored as float32.
        name: e.g. ``"word2vec:skipgram-ns"``.
        lowercase: the table was trained on lowercased text; evaluators lowercase queries.
        subwords: fastText n-gram rows for out-of-vocabulary words, or None.
    """

    num_layers = 1

    def __init__(
        self,
        words: Sequence[str],
        vectors: np.ndarray,
        *,
        name: str = "static",
        lowercase: bool = False,
        subwords: SubwordTable | None = None,
        metadata: dict | None = None,
    ) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(words):
            raise ValueError(f"{len(words)} words need vectors of shape ({len(words)}, dim), got {vectors.shape}")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            dup = next(w for i, w in enumerate(self.words) if self.index[w] != i)
            raise UserError(f"word {dup!r} occurs twice in the table {name}; fix: keep one row per word")
        self.vectors = vectors
        self.name = name
        self.dim = int(vectors.shape[1])
        self.lowercase = lowercase
        self.subwords = subwords
        self.metadata = dict(metadata or {})
        self._unit: np.ndarray | None = None

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: str) -> bool:
        return word in self.index

    def has_vector(self, word: str) -> bool:
        """True for table words, and for words a fastText table can build from n-grams."""
        return word in self.index or (self.subwords is not None and self.subwords.vector(word) is not None)

    def vector(self, word: str) -> np.ndarray:
        """The (dim,) float32 vector of ``word``; KeyError when the table cannot give one."""
        i = self.index.get(word)
        if i is not None:
            return self.vectors[i]
        if self.subwords is not None:
            v = self.subwords.vector(word)
            if v is not None:
                return v.astype(np.float32)
            raise KeyError(f"{word!r}: none of its character n-grams is stored in {self.name}")
        raise KeyError(
            f"{word!r} is not in the vocabulary of {self.name} ({len(self.words)} words); only fastText "
            "tables build unseen words; embed() gives such words a row of zeros"
        )

    __getitem__ = vector

    @property
    def unit_vectors(self) -> np.ndarray:
        """(n_words, dim) rows scaled to unit length (zero rows stay zero); cached."""
        if self._unit is None:
            norms = np.linalg.norm(self.vectors, axis=1, keepdims=True)
            self._unit = self.vectors / np.where(norms == 0, 1, norms)
        return self._unit

    def similarity(self, a: str, b: str) -> float:
        """Cosine similarity of two words (KeyError for an unknown word, see the module doc)."""
        return cosine(self.vector(a), self.vector(b))

    def most_similar(
        self, query: str | np.ndarray, *, topn: int = 10, restrict: int | None = None
    ) -> list[tuple[str, float]]:
        """The ``topn`` nearest words by cosine, excluding the query word itself.

        Args:
            query: a word or a (dim,) vector.
            restrict: search only the first ``restrict`` words of the table (the most frequent).
        """
        vec = self.vector(query) if isinstance(query, str) else np.asarray(query, dtype=np.float32)
        norm = np.linalg.norm(vec)
        unit = self.unit_vectors[:restrict] if restrict else self.unit_vectors
        scores = invariant_scores(unit, (vec / (norm if norm else 1.0))[None])[:, 0]  # ties stay ties, any CPU
        if isinstance(query, str) and query in self.index and self.index[query] < len(scores):
            scores[self.index[query]] = -np.inf
        k = min(topn, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]  # by score, ties in table order (most frequent first)
        return [(self.words[i], float(scores[i])) for i in top if np.isfinite(scores[i])]

    # ------------------------------------------------------------------ Representation
    def embed(self, sentences: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """One (1, n_tokens, dim) float32 array per sentence; unknown words get zeros (or n-grams)."""
        out = []
        for sentence in sentences:
            arr = np.zeros((1, len(sentence), self.dim), dtype=np.float32)
            for t, token in enumerate(sentence):
                i = self.index.get(token)
                if i is not None:
                    arr[0, t] = self.vectors[i]
                elif self.subwords is not None:
                    v = self.subwords.vector(token)
                    if v is not None:
                        arr[0, t] = v
            out.append(arr)
        return out

    # ------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike, *, binary: bool = False, header: bool = True) -> None:
        """Write the table as one word2vec file (text or binary; text with or without header)."""
        write_word2vec(path, self.words, self.vectors, binary=binary, header=header)

    def save_folder(self, folder: str | os.PathLike, *, extra: dict | None = None) -> Path:
        """Write vectors.txt, vectors.bin, static.json (and subwords.safetensors) into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.save(folder / TEXT_NAME)
        self.save(folder / BINARY_NAME, binary=True)
        meta = {
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "dim": self.dim,
            "n_words": len(self.words),
            "lowercase": self.lowercase,
            "vectors": BINARY_NAME,
            "subwords": None,
        }
        meta.update(self.metadata)
        meta.update(extra or {})
        if self.subwords is not None:
            with atomic_path(folder / SUBWORDS_NAME) as tmp:
                save_file({"bucket_ids": self.subwords.bucket_ids.astype(np.int64),
                           "vectors": self.subwords.vectors.astype(np.float32)}, tmp)
            meta["subwords"] = self.subwords.metadata() | {"file": SUBWORDS_NAME}
        write_json(folder / META_NAME, meta, ensure_ascii=False)
        return folder

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        binary: bool | None = None,
        header: bool | None = None,
        name: str | None = None,
        lowercase: bool | None = None,
        limit: int | None = None,
    ) -> StaticVectors:
        """Load a folder written by :meth:`save_folder` / ``elmokit static train``, or one file.

        A file may be word2vec text (with or without header, detected) or binary (detected).
        """
        path = Path(path)
        meta: dict = {}
        subwords = None
        if path.is_dir():
            meta_path = path / META_NAME
            if meta_path.exists():
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                if meta.get("format_version", 1) > FORMAT_VERSION:
                    raise VectorFileError(f"{meta_path}: format_version {meta['format_version']} is newer than this "
                                          f"elmokit reads ({FORMAT_VERSION}); fix: upgrade elmokit")
            candidates = [meta.get("vectors", BINARY_NAME), BINARY_NAME, TEXT_NAME]
            file = next((path / c for c in candidates if (path / c).is_file()), None)
            if file is None:
                raise InputNotFound(f"{path} holds no {BINARY_NAME} or {TEXT_NAME}; fix: point at a folder "
                                    "written by `elmokit static train` or at a vector file")
            sub = meta.get("subwords")
            if sub and limit is None:
                tensors = load_file(str(path / sub.get("file", SUBWORDS_NAME)))
                problem = describe_non_finite(tensors["vectors"])
                if problem:
                    raise VectorFileError(f"{path / sub.get('file', SUBWORDS_NAME)}: tensor 'vectors' holds {problem}; "
                                          "fix: train the table again")
                subwords = SubwordTable(min_n=sub["min_n"], max_n=sub["max_n"], bucket=sub["bucket"],
                                        bucket_ids=tensors["bucket_ids"], vectors=tensors["vectors"])
        else:
            file = path
        words, vectors = read_word2vec(file, binary=binary, header=header, limit=limit)
        known = {"format_version", "name", "dim", "n_words", "lowercase", "vectors", "subwords"}
        return cls(
            words, vectors,
            name=name or meta.get("name") or file.stem,
            lowercase=meta.get("lowercase", False) if lowercase is None else lowercase,
            subwords=subwords,
            metadata={k: v for k, v in meta.items() if k not in known},
        )

    def __repr__(self) -> str:
        sub = ", fastText n-grams" if self.subwords is not None else ""
        return f"StaticVectors({self.name!r}, {len(self.words)} words x {self.dim}{sub})"


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity; 0.0 when either vector is zero."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))

