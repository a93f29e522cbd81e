"""Nearest occurrences of a word in context: seeing polysemy (Peters et al. 2018, Table 4).

Table 4 of the paper puts a word in one sentence ("play" in a sports report) beside the nearest
*occurrences* of words in a corpus under the biLM's contextual vectors (the same sense of "play"
in other sentences), and beside the nearest *types* of a static table (GloVe: "playing, game,
games, ...", every sense mixed). This module builds the first half for any ``Representation``:

* ``NeighborIndex.build`` embeds a corpus once and stores, per layer j, the matrix of every
  occurrence's vector scaled to unit length, ``layer_j.npy`` (N, D), float16 or float32,
  memory-mapped; ``offsets.npy`` (n_sentences + 1) int64 locates sentence i at rows
  ``offsets[i]:offsets[i+1]``; ``sentences.txt`` holds the tokens (one sentence per line,
  tokens joined by single spaces); ``meta.json`` the representation, shapes and dtype. The folder
  is written under a temporary name and renamed, so an interrupted build leaves nothing that
  looks complete.
* ``NeighborIndex.query`` takes the query word's vector and makes one matrix-vector product per
  layer: with unit rows, ``M_j @ (v / |v|)`` is every occurrence's cosine (in row chunks, so
  memory stays bounded). Optionally only occurrences of the same word form are scored. The
  product is taken in float64 as elementwise products summed row by row (not by BLAS, whose
  kernels round a row differently by its position and by how many rows are scored, and
  differently on each CPU): a row's score depends only on the row and the query, so identical
  rows tie exactly and ties go by corpus order on any machine.
* ``nearest_occurrences`` embeds the query sentence (only it: the corpus is never re-embedded)
  and queries the index.

Legend: N occurrences (tokens) in the corpus, D the representation's dim, L its layers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmokit.errors import UserError
from elmokit.io import output_directory
from elmokit.progress import progress_bar
from elmokit.representation import fingerprint

FORMAT_VERSION = 1
META_NAME = "meta.json"
OFFSETS_NAME = "offsets.npy"
SENTENCES_NAME = "sentences.txt"
DTYPES = ("float16", "float32")
SAVED_BY = "neighbors index"  # the command whose output an index folder is: it may replace it
CHUNK_ELEMENTS = 1 << 21  # rows x dim per scoring step (16 MB of float64): bounded memory


class NeighborIndexError(UserError):
    """A neighbour index folder that is missing, incomplete, or built for another representation."""


def layer_name(layer: int) -> str:
    return f"layer_{layer}.npy"


@dataclass(frozen=True)
class Occurrence:
    """One corpus occurrence found near the query: its cosine, sentence and token position."""

    score: float
    sentence: int
    token: int
    tokens: tuple[str, ...]

    @property
    def word(self) -> str:
        return self.tokens[self.token]

    def marked(self, left: str = "[[", right: str = "]]", *, window: int | None = None) -> str:
        """The sentence with the matched word marked, e.g. ``a [[play]] by Hamlet``; with
        ``window``, only that many tokens each side of it (cuts shown as ``...``)."""
        start, stop = 0, len(self.tokens)
        if window is not None:
            start, stop = max(0, self.token - window), min(len(self.tokens), self.token + window + 1)
        words = [f"{left}{t}{right}" if i == self.token else t for i, t in enumerate(self.tokens[start:stop], start)]
        return " ".join((["..."] if start > 0 else []) + words + (["..."] if stop < len(self.tokens) else []))


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to length 1 (in float64, then float32); zero rows stay zero."""
    matrix = matrix.astype(np.float64)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)


def _row_dots(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix @ query`` in float64, each row summed on its own in a fixed order (numpy's
    pairwise sum of a contiguous row): the result of a row never depends on the other rows, their
    number, the row's position or the CPU's BLAS kernels."""
    return np.multiply(np.asarray(matrix, dtype=np.float64), query).sum(axis=1)


class NeighborIndex:
    """Unit-length occurrence vectors of a corpus, per layer, memory-mapped from a folder."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / META_NAME
        if not meta_path.exists():
            raise NeighborIndexError(
                f"{self.directory}: not a neighbour index (no {META_NAME}); fix: build one with "
                "`elmokit neighbors index --model M --corpus FILE --out DIR`"
            )
        self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if self.meta.get("format_version") != FORMAT_VERSION:
            raise NeighborIndexError(f"{meta_path}: format_version {self.meta.get('format_version')}, expected {FORMAT_VERSION}")
        self.num_layers = int(self.meta["num_layers"])
        self.dim = int(self.meta["dim"])
        self.offsets = np.load(self.directory / OFFSETS_NAME)
        n_tokens = int(self.offsets[-1])
        self.layers = []
        for layer in range(self.num_layers):
            matrix = np.load(self.directory / layer_name(layer), mmap_mode="r")  # (N, D)
            if matrix.shape != (n_tokens, self.dim):
                raise NeighborIndexError(
                    f"{self.directory / layer_name(layer)}: shape {matrix.shape}, expected {(n_tokens, self.dim)} "
                    f"from {OFFSETS_NAME} and {META_NAME}; fix: rebuild the index"
                )
            self.layers.append(matrix)
        lines = (self.directory / SENTENCES_NAME).read_text(encoding="utf-8").split("\n")[: len(self.offsets) - 1]
        self.sentences = [tuple(line.split(" ")) if line else () for line in lines]
        lengths = np.diff(self.offsets)
        if len(self.sentences) != len(lengths) or any(len(s) != n for s, n in zip(self.sentences, lengths)):
            raise NeighborIndexError(f"{self.directory / SENTENCES_NAME}: does not match {OFFSETS_NAME}; fix: rebuild the index")
        self._forms: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        """The number of occurrences (tokens) indexed."""
        return int(self.offsets[-1])

    @property
    def representation(self) -> str:
        return self.meta["representation"]

    # ---- building ---------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        rep,
        sentences: Iterable[Sequence[str]],
        directory: str | os.PathLike,
        *,
        dtype: str = "float16",
        batch_sentences: int = 256,
        progress: bool = False,
        source: dict | None = None,
        inputs: Iterable[str | os.PathLike | None] = (),
    ) -> NeighborIndex:
        """Embed ``sentences`` with ``rep`` (batches of ``batch_sentences``) into ``directory``.

        ``dtype``: ``"float16"`` halves the disk and memory (cosines then carry about 1e-3 of
        rounding); ``"float32"`` keeps them exact to float32. The folder is written under the output
        policy (``elmokit.io.output_directory``): an earlier index is replaced only when the build
        succeeds; a file, one of ``inputs`` or a folder holding anything else is refused before any work.
        """
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
        sentences = [list(s) for s in sentences]
        for i, sentence in enumerate(sentences):
            if any((not token) or any(ch.isspace() for ch in token) for token in sentence):
                raise NeighborIndexError(f"sentence {i}: tokens must be non-empty and contain no whitespace")
        lengths = np.array([len(s) for s in sentences], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        directory = Path(directory)
        with output_directory(directory, command=SAVED_BY, inputs=inputs, artifact="neighbor-index") as staging:
            matrices = [
                np.lib.format.open_memmap(staging / layer_name(j), mode="w+", dtype=dtype, shape=(int(offsets[-1]), rep.dim))
                for j in range(rep.num_layers)
            ]
            starts = range(0, len(sentences), batch_sentences)
            if progress:
                starts = progress_bar(starts, desc=f"indexing with {rep.name}", unit="batch")
            for start in starts:
                batch = sentences[start : start + batch_sentences]
                for i, array in enumerate(rep.embed(batch), start):  # array (L, n_i, D)
                    expected = (rep.num_layers, len(sentences[i]), rep.dim)
                    if array.shape != expected:
                        raise ValueError(f"{rep.name} gave shape {array.shape} for sentence {i}, expected {expected}")
                    for j, matrix in enumerate(matrices):
                        matrix[offsets[i] : offsets[i + 1]] = _unit_rows(array[j])
            for matrix in matrices:
                matrix.flush()
            del matrices
            np.save(staging / OFFSETS_NAME, offsets)
            (staging / SENTENCES_NAME).write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
            meta = {
                "format_version": FORMAT_VERSION,
                "representation": rep.name,
                "fingerprint": _fingerprint(rep),
                "num_layers": rep.num_layers,
                "dim": rep.dim,
                "dtype": dtype,
                "n_sentences": len(sentences),
                "n_tokens": int(offsets[-1]),
                "source": source,
            }
            (staging / META_NAME).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        return cls(directory)

    def check_representation(self, rep) -> None:
        """Refuse a representation other than the one the index was built with."""
        if (rep.num_layers, rep.dim) != (self.num_layers, self.dim):
            raise NeighborIndexError(
                f"{self.directory}: built with {self.representation} ({self.num_layers} layers of {self.dim}); "
                f"{rep.name} has {rep.num_layers} layers of {rep.dim}; fix: query with the model it was built with"
            )
        mine, theirs = self.meta.get("fingerprint"), _fingerprint(rep)
        if mine and theirs and mine != theirs:
            raise NeighborIndexError(
                f"{self.directory}: built with {self.representation} (fingerprint {mine}), not with {rep.name} "
                f"({theirs}); fix: query with the same model and options, or rebuild the index"
            )

    # ---- querying ---------------------------------------------------------------------------

    def occurrences_of(self, form: str) -> np.ndarray:
        """Row numbers of every occurrence of the exact word form (int64, ascending)."""
        if self._forms is None:
            flat: dict[str, list[int]] = {}
            row = 0
            for sentence in self.sentences:
                for token in sentence:
                    flat.setdefault(token, []).append(row)
                    row += 1
            self._forms = {token: np.asarray(rows, dtype=np.int64) for token, rows in flat.items()}
        return self._forms.get(form, np.zeros(0, dtype=np.int64))

    def locate(self, row: int) -> tuple[int, int]:
        """(sentence, token) of occurrence row ``row``."""
        sentence = int(np.searchsorted(self.offsets, row, side="right") - 1)
        return sentence, row - int(self.offsets[sentence])

    def scores(self, layer: int, vector: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """Cosine of ``vector`` (D,) with every occurrence of ``layer`` (or only ``rows``): (N,)
        float64, each row's score the same whichever rows are scored with it."""
        query = np.asarray(vector, dtype=np.float64).reshape(-1)  # (D,)
        norm = np.linalg.norm(query)
        query = query / norm if norm > 0 else query
        matrix = self.layers[layer]
        n = len(matrix) if rows is None else len(rows)
        out = np.empty(n, dtype=np.float64)
        step = max(1, CHUNK_ELEMENTS // max(1, self.dim))
        for start in range(0, n, step):
            chunk = matrix[start : start + step] if rows is None else matrix[rows[start : start + step]]
            out[start : start + step] = _row_dots(chunk, query)
        return out

    def query(
        self,
        layer: int,
        vector: np.ndarray,
        *,
        top: int = 5,
        same_form: str | None = None,
        exclude: tuple[Sequence[str], int] | None = None,
    ) -> list[Occurrence]:
        """The ``top`` occurrences nearest to ``vector`` on ``layer`` by cosine, best first.

        ``same_form``: score only occurrences of this exact word form. ``exclude``: (sentence
        tokens, position) of the query itself, left out wherever the corpus holds it.
        """
        if not 0 <= layer < self.num_layers:
            raise NeighborIndexError(f"layer {layer} out of range: the index has layers 0..{self.num_layers - 1}")
        rows = self.occurrences_of(same_form) if same_form is not None else None
        scores = self.scores(layer, vector, rows)
        if len(scores) == 0:
            return []
        results: list[Occurrence] = []
        want = top
        while True:  # widen until ``top`` hits survive the exclusion (a corpus may repeat the query)
            k = min(want, len(scores))
            best = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
            best = best[np.lexsort((best, -scores[best]))]  # by score, ties by corpus order
            results = []
            for position in best:
                row = int(rows[position]) if rows is not None else int(position)
                sentence, token = self.locate(row)
                if exclude is not None and token == exclude[1] and self.sentences[sentence] == tuple(exclude[0]):
                    continue
                results.append(Occurrence(float(scores[position]), sentence, token, self.sentences[sentence]))
                if len(results) == top:
                    return results
            if k == len(scores):
                return results
            want *= 2


def _fingerprint(rep) -> str | None:
    try:
        return fingerprint(rep)
    except (ImportError, TypeError):
        return None


def nearest_occurrences(
    rep,
    index: NeighborIndex,
    sentence: Sequence[str],
    word_index: int,
    *,
    layers: Sequence[int] | None = None,
    top: int = 5,
    same_form: bool = False,
    exclude_self: bool = True,
) -> dict[int, list[Occurrence]]:
    """Per layer, the corpus occurrences nearest to ``sentence[word_index]`` in context.

    Embeds only the query sentence (one ``rep.embed`` call), then one product per layer.
    """
    sentence = list(sentence)
    if not sentence:
        raise NeighborIndexError("the query sentence is empty")
    if not -len(sentence) <= word_index < len(sentence):
        raise NeighborIndexError(
            f"word index {word_index} is outside the query sentence ({len(sentence)} tokens: "
            + " ".join(f"{i}:{t}" for i, t in enumerate(sentence)) + ")"
        )
    word_index %= len(sentence)
    index.check_representation(rep)
    layers = list(range(index.num_layers)) if layers is None else list(layers)
    for layer in layers:
        if not 0 <= layer < index.num_layers:
            raise NeighborIndexError(f"layer {layer} out of range: {rep.name} has layers 0..{index.num_layers - 1}")
    vectors = rep.embed([sentence])[0]  # (L, n, D)
    word = sentence[word_index]
    exclude = (sentence, word_index) if exclude_self else None
    return {
        layer: index.query(layer, vectors[layer, word_index], top=top, same_form=word if same_form else None, exclude=exclude)
        for layer in layers
    }


def format_neighbors(
    sentence: Sequence[str],
    word_index: int,
    results: dict[int, list[Occurrence]],
    *,
    representation: str,
    static: tuple[str, list[tuple[str, float]]] | None = None,
    window: int | None = None,
) -> str:
    """A plain-text Table 4: the query, the static table's nearest types, then each layer's hits
    (each corpus sentence cut to ``window`` tokens either side of the match, if given)."""
    query = Occurrence(1.0, -1, word_index % len(sentence), tuple(sentence))
    lines = [f"query: {query.marked()}"]
    if static is not None:
        name, types = static
        listed = ", ".join(f"{word} ({score:.3f})" for word, score in types) or "(not in the table)"
        lines.append(f"{name} nearest types: {listed}")
    for layer, hits in results.items():
        lines.append(f"{representation} layer {layer}:")
        if not hits:
            lines.append("  (no occurrences)")
        for hit in hits:
            lines.append(f"  {hit.score:.3f}  {hit.marked(window=window)}")
    return "\n".join(lines)
