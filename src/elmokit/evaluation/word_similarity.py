"""Word similarity (Spearman) and word analogy (3CosAdd) for ANY `Representation`.

A word's vector:

* for a static table (anything with ``has_vector``/``vector``, e.g. StaticVectors) the table row
  (fastText tables also build unseen words from n-grams);
* for any other `Representation` (ELMo, a transformer), layer ``layer`` of embedding the word as
  a one-token sentence: ``rep.embed([[word]])[0][layer, 0]``. Such models cover every word.

Out-of-vocabulary policy (stated once): a pair whose words are not both covered is left out;
the result gives the coverage (covered pairs / all pairs) and Spearman's rho over the covered
pairs only. Analogy questions count as covered only when all four words are among the ``top_n``
most frequent words; accuracy is over covered questions, ``accuracy_all`` counts uncovered ones
as wrong.

Analogy: for "a is to b as c is to d", predict ``argmax_x cos(x, b - a + c)`` over the unit-
normalised vectors of the ``top_n`` most frequent words (word2vec's compute-accuracy uses 30,000),
excluding a, b and c (Mikolov et al. 2013; Levy & Goldberg 2014 call it 3CosAdd).

Datasets live in the shared data folder (``$ELMOKIT_SHARED`` or ``../shared`` beside the checkout),
under ``data/wordsim`` (see its SOURCE.txt).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmokit.data_paths import shared_data
from elmokit.errors import UserError
from elmokit.evaluation.datasets import ANALOGY_DATASETS, DEFAULT_ANALOGY, DEFAULT_SIMILARITY, SIMILARITY_DATASETS
from elmokit.nn.functional import invariant_scores
from elmokit.tasks.metrics import average_ranks


class DatasetError(UserError):
    """A benchmark file is missing or malformed; the message names the file, the line and the fix."""


def wordsim_dir(data_dir: str | os.PathLike | None = None) -> Path:
    folder = Path(data_dir) if data_dir is not None else shared_data("wordsim")
    if not folder.is_dir():
        raise DatasetError(
            f"no word-similarity data at {folder}; fix: set ELMOKIT_SHARED to the shared folder, or pass --data-dir"
        )
    return folder


# ---------------------------------------------------------------------- readers
def read_pairs(path: str | os.PathLike) -> list[tuple[str, str, float]]:
    """``word1 <TAB> word2 <TAB> score`` lines (CRLF tolerated, blank lines skipped)."""
    pairs = []
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = line.split("\t") if "\t" in line else line.split()
            if len(parts) < 3:
                raise DatasetError(f"{path}:{lineno}: expected 'word1<TAB>word2<TAB>score', got {line[:80]!r}")
            try:
                pairs.append((parts[0].strip(), parts[1].strip(), float(parts[2])))
            except ValueError:
                raise DatasetError(f"{path}:{lineno}: score {parts[2]!r} is not a number") from None
    return pairs


@dataclass(frozen=True)
class Question:
    section: str
    a: str
    b: str
    c: str
    d: str


def read_google(path: str | os.PathLike) -> list[Question]:
    """questions-words.txt: ``: section`` headers, then ``a b c d`` lines."""
    out, section = [], None
    with open(path, encoding="utf-8") as handle:
        for lineno, line in enumerate(handle, 1):
            line = line.strip()
            if not line:
                continue
            if line.startswith(":"):
                section = line[1:].strip()
                continue
            parts = line.split()
            if len(parts) != 4 or section is None:
                raise DatasetError(f"{path}:{lineno}: expected four words after a ': section' line, got {line[:80]!r}")
            out.append(Question(section, *parts))
    return out


def read_msr(path: str | os.PathLike) -> list[Question]:
    """vecto's MSR csv: ``,type,word1,word2,word3,target``."""
    out = []
    with open(path, encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        if header[-4:] != ["word1", "word2", "word3", "target"]:
            raise DatasetError(f"{path}:1: expected a header ending word1,word2,word3,target, got {header}")
        for lineno, row in enumerate(reader, 2):
            if len(row) != len(header) or not all(row[-4:]):
                raise DatasetError(f"{path}:{lineno}: expected {len(header)} fields, got {row}")
            out.append(Question(row[1], *(w.strip() for w in row[-4:])))
    return out


def load_similarity(name: str, data_dir=None) -> list[tuple[str, str, float]]:
    if name not in SIMILARITY_DATASETS:
        raise DatasetError(f"unknown similarity dataset {name!r}; choose from {', '.join(SIMILARITY_DATASETS)}")
    return read_pairs(wordsim_dir(data_dir) / SIMILARITY_DATASETS[name][0])


def load_analogy(name: str, data_dir=None) -> list[Question]:
    if name not in ANALOGY_DATASETS:
        raise DatasetError(f"unknown analogy dataset {name!r}; choose from {', '.join(ANALOGY_DATASETS)}")
    path = wordsim_dir(data_dir) / ANALOGY_DATASETS[name][0]
    return read_google(path) if name == "google" else read_msr(path)


# ---------------------------------------------------------------------- statistics
def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: Pearson correlation of the (tie-averaged) ranks; nan for < 2 points."""
    if len(x) != len(y):
        raise ValueError(f"spearman needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return float("nan")
    rx, ry = average_ranks(x), average_ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denom) if denom else float("nan")


# ---------------------------------------------------------------------- word vectors of any Representation
class WordVectors:
    """Vectors of single words from any `Representation` (see the module doc).

    Args:
        rep: the representation.
        layer: which layer of ``embed`` to use (0 = context-independent for ELMo).
        lowercase: lowercase query words; None: when the representation says it was trained
            lowercased (``rep.lowercase``).
        in_vocab_only: for tables, cover only words with their own row (no fastText n-gram
            vectors), so that tables are compared on the same pairs.
    """

    def __init__(self, rep, *, layer: int = 0, lowercase: bool | None = None, batch_size: int = 512,
                 in_vocab_only: bool = False) -> None:
        if not 0 <= layer < rep.num_layers:
            raise UserError(f"--layer {layer} is out of range: {rep.name} has {rep.num_layers} layer(s) "
                            f"(0..{rep.num_layers - 1})")
        self.rep = rep
        self.layer = layer
        self.lowercase = bool(getattr(rep, "lowercase", False)) if lowercase is None else lowercase
        self.is_table = hasattr(rep, "has_vector") and hasattr(rep, "vector")
        self.batch_size = batch_size
        self.in_vocab_only = in_vocab_only
        self._cache: dict[str, np.ndarray] = {}

    def key(self, word: str) -> str:
        return word.lower() if self.lowercase else word

    def covers(self, word: str) -> bool:
        if not self.is_table:
            return True
        return self.key(word) in self.rep if self.in_vocab_only else self.rep.has_vector(self.key(word))

    def vectors(self, words: Sequence[str]) -> np.ndarray:
        """(len(words), dim) float32 for covered words (KeyError for a word a table lacks)."""
        keys = [self.key(w) for w in words]
        if self.is_table:
            if not keys:
                return np.zeros((0, self.rep.dim), np.float32)
            return np.stack([self.rep.vector(k) for k in keys]).astype(np.float32)
        missing = sorted({k for k in keys if k not in self._cache})
        for start in range(0, len(missing), self.batch_size):
            chunk = missing[start : start + self.batch_size]
            for k, arr in zip(chunk, self.rep.embed([[k] for k in chunk])):
                self._cache[k] = np.asarray(arr[self.layer, 0], dtype=np.float32)
        return np.stack([self._cache[k] for k in keys]) if keys else np.zeros((0, self.rep.dim), np.float32)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=1)
    nb = np.linalg.norm(b, axis=1)
    denom = na * nb
    dots = (a * b).sum(axis=1)
    return np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)


def evaluate_similarity(rep, pairs: Sequence[tuple[str, str, float]], *, layer: int = 0,
                        lowercase: bool | None = None, name: str = "") -> dict:
    """Spearman's rho between cosine similarities and human scores, over covered pairs.

    Returns a dict: dataset, n_pairs, n_covered, coverage, spearman, oov (up to 20 uncovered words).
    """
    wv = rep if isinstance(rep, WordVectors) else WordVectors(rep, layer=layer, lowercase=lowercase)
    covered = [(a, b, s) for a, b, s in pairs if wv.covers(a) and wv.covers(b)]
    oov = sorted({w for a, b, _ in pairs for w in (a, b) if not wv.covers(w)})
    if covered:
        va = wv.vectors([a for a, _, _ in covered])
        vb = wv.vectors([b for _, b, _ in covered])
        rho = spearman(_cosines(va, vb), [s for _, _, s in covered])
    else:
        rho = float("nan")
    return {"dataset": name, "n_pairs": len(pairs), "n_covered": len(covered),
            "coverage": len(covered) / len(pairs) if pairs else 0.0, "spearman": rho, "oov": oov[:20]}


def analogy_vocabulary(rep, vocab: Sequence[str] | None, top_n: int) -> list[str]:
    if vocab is None:
        vocab = getattr(rep, "words", None)
        if vocab is None:
            raise UserError(
                f"{rep.name} has no word list; analogy needs the candidate words (pass vocab=, e.g. the most "
                "frequent words of its training corpus)"
            )
    return list(vocab[:top_n])


def evaluate_analogy(rep, questions: Sequence[Question], *, vocab: Sequence[str] | None = None, top_n: int = 30000,
                     layer: int = 0, lowercase: bool | None = None, name: str = "", batch_size: int = 512) -> dict:
    """3CosAdd accuracy over the ``top_n`` first words of ``vocab`` (default: the table's own order).

    Returns a dict: dataset, n_questions, n_covered, coverage, accuracy (covered), accuracy_all,
    sections (per section and "semantic"/"syntactic" for the Google set: n, covered, correct, accuracy).
    """
    wv = rep if isinstance(rep, WordVectors) else WordVectors(rep, layer=layer, lowercase=lowercase)
    words = analogy_vocabulary(wv.rep, vocab, top_n)
    index: dict[str, int] = {}
    for i, w in enumerate(words):
        index.setdefault(w, i)  # first (most frequent) spelling wins
    E = wv.vectors(words)
    norms = np.linalg.norm(E, axis=1, keepdims=True)
    E = E / np.where(norms == 0, 1, norms)                                   # (N, D) unit rows
    keyed = [(q, tuple(index.get(wv.key(w), -1) for w in (q.a, q.b, q.c, q.d))) for q in questions]
    covered = [(q, ids) for q, ids in keyed if min(ids) >= 0]
    correct = np.zeros(len(covered), dtype=bool)
    for start in range(0, len(covered), batch_size):
        block = np.array([ids for _, ids in covered[start : start + batch_size]], dtype=np.int64)  # (B, 4)
        target = E[block[:, 1]] - E[block[:, 0]] + E[block[:, 2]]                                 # (B, D)
        scores = invariant_scores(E, target).T  # (B, N); identical rows of E tie exactly, on any CPU
        rows = np.arange(len(block))
        for col in range(3):
            scores[rows, block[:, col]] = -np.inf
        correct[start : start + len(block)] = scores.argmax(axis=1) == block[:, 3]
    sections: dict[str, dict] = {}

    def bump(key, is_covered, is_correct):
        s = sections.setdefault(key, {"n": 0, "covered": 0, "correct": 0})
        s["n"] += 1
        s["covered"] += int(is_covered)
        s["correct"] += int(is_correct)

    results = {id(q): bool(c) for (q, _), c in zip(covered, correct)}
    for q, ids in keyed:
        ok = results.get(id(q), False)
        is_cov = min(ids) >= 0
        bump(q.section, is_cov, ok)
        if name == "google":
            bump("syntactic" if q.section.startswith("gram") else "semantic", is_cov, ok)
    for s in sections.values():
        s["accuracy"] = s["correct"] / s["covered"] if s["covered"] else float("nan")
    n = len(questions)
    return {"dataset": name, "n_questions": n, "n_covered": len(covered), "coverage": len(covered) / n if n else 0.0,
            "accuracy": float(correct.mean()) if len(covered) else float("nan"),
            "accuracy_all": float(correct.sum() / n) if n else float("nan"), "top_n": len(words), "sections": sections}


def evaluate(rep, *, datasets: Sequence[str] = DEFAULT_SIMILARITY, analogies: Sequence[str] = DEFAULT_ANALOGY,
             layer: int = 0, lowercase: bool | None = None, top_n: int = 30000, vocab: Sequence[str] | None = None,
             data_dir=None, in_vocab_only: bool = False) -> dict:
    """All requested benchmarks for one representation, as one JSON-ready dict."""
    wv = WordVectors(rep, layer=layer, lowercase=lowercase, in_vocab_only=in_vocab_only)
    out = {"representation": rep.name, "layer": layer, "lowercase": wv.lowercase, "in_vocab_only": in_vocab_only,
           "similarity": [], "analogy": []}
    for name in datasets:
        out["similarity"].append(evaluate_similarity(wv, load_similarity(name, data_dir), name=name))
    for name in analogies:
        out["analogy"].append(evaluate_analogy(wv, load_analogy(name, data_dir), vocab=vocab, top_n=top_n, name=name))
    return out


def format_table(results: Sequence[dict]) -> str:
    """A plain-text table: one row per representation, Spearman (coverage) and accuracy (coverage)."""
    if not results:
        return ""
    sims = [r["dataset"] for r in results[0]["similarity"]]
    anas = [r["dataset"] for r in results[0]["analogy"]]
    header = ["representation"] + sims + anas
    rows = []
    for res in results:
        row = [res["representation"] + (f" [layer {res['layer']}]" if res["layer"] else "")]
        row += [f"{r['spearman']:.3f} ({r['coverage']:.0%})" for r in res["similarity"]]
        row += [f"{r['accuracy']:.3f} ({r['coverage']:.0%})" for r in res["analogy"]]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
