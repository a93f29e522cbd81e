"""word2vec vector files, text and binary (Mikolov et al.'s ``word2vec.c`` formats).

Text: an optional header line ``"<n_words> <dim>"``, then one line per word:
``word v_1 ... v_dim`` separated by single spaces. GloVe's released files are the same without
the header line; :func:`read_word2vec` detects the header when ``header=None``.

Binary: the header line (required: without it the number of floats per word is unknown), then
for each word its UTF-8 bytes, one space, ``dim`` little-endian float32s, and a newline (the
newline is what ``word2vec.c`` writes; readers, gensim and ours, also accept it missing).

Everything here is plain numpy; gensim's ``KeyedVectors`` IO is the independent oracle in the tests.
Writers go through a temporary file renamed over the target, so a failed write leaves any existing
file untouched.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from elmokit.errors import InputNotFound, UserError
from elmokit.formats.checks import refuse_non_finite
from elmokit.io import atomic_path


class VectorFileError(UserError):
    """A vector file does not follow the format; the message names the file, the line and the fix."""


def _check_words(words: Sequence[str], vectors: np.ndarray) -> None:
    if vectors.ndim != 2 or vectors.shape[0] != len(words):
        raise ValueError(f"expected vectors of shape ({len(words)}, dim), got {vectors.shape}")
    for i, word in enumerate(words):
        if not word or any(ch in word for ch in " \n\r\t"):
            raise ValueError(
                f"word #{i} {word!r} is empty or contains a space/tab/newline, which the word2vec "
                "formats cannot hold; fix: tokenise so that tokens have no whitespace"
            )


def write_word2vec(
    path: str | os.PathLike,
    words: Sequence[str],
    vectors: np.ndarray,
    *,
    binary: bool = False,
    header: bool = True,
) -> None:
    """Write ``words`` and ``vectors`` (n_words, dim) in word2vec text or binary format.

    Text values are written with ``%.9g``, which round-trips float32 exactly.
    """
    vectors = np.asarray(vectors, dtype=np.float32)
    _check_words(words, vectors)
    if binary and not header:
        raise ValueError("the binary word2vec format needs its header line (it gives the dimension)")
    n, dim = vectors.shape
    refuse_non_finite({"vectors": vectors}, path)
    with atomic_path(path) as tmp:
        if binary:
            little = vectors.astype("<f4", copy=False)
            with open(tmp, "wb") as out:
                out.write(f"{n} {dim}\n".encode())
                for word, row in zip(words, little):
                    out.write(word.encode("utf-8") + b" " + row.tobytes() + b"\n")
        else:
            with open(tmp, "w", encoding="utf-8", newline="\n") as out:
                if header:
                    out.write(f"{n} {dim}\n")
                fmt = " ".join(["%.9g"] * dim)
                for word, row in zip(words, vectors):
                    out.write(word + " " + (fmt % tuple(row.tolist())) + "\n")


def _looks_like_header(line: str) -> bool:
    parts = line.split()
    return len(parts) == 2 and all(p.isdigit() for p in parts)


def sniff_binary(path: str | os.PathLike) -> bool:
    """True when the file after its first line is not UTF-8 text (the binary format)."""
    with open(path, "rb") as handle:
        handle.readline()
        sample = handle.read(4096)
    if b"\x00" in sample:
        return True
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as error:
        # A multi-byte character cut by the 4096-byte window is still text.
        return error.start < len(sample) - 4
    return False


def read_word2vec(
    path: str | os.PathLike,
    *,
    binary: bool | None = None,
    header: bool | None = None,
    limit: int | None = None,
) -> tuple[list[str], np.ndarray]:
    """Read a word2vec text or binary file into ``(words, vectors (n_words, dim) float32)``.

    Args:
        binary: None: detect from the bytes after the first line.
        header: text files only; None: a first line of exactly two integers is the header.
        limit: read only the first ``limit`` words (files are usually sorted by frequency).
    """
    path = Path(path)
    if not path.is_file():
        raise InputNotFound(f"{path}: no such vector file")
    if binary is None:
        binary = sniff_binary(path)
    return _read_binary(path, limit) if binary else _read_text(path, header, limit)


def _read_text(path: Path, header: bool | None, limit: int | None) -> tuple[list[str], np.ndarray]:
    words: list[str] = []
    rows: list[np.ndarray] = []
    expected_n = dim = None
    with open(path, encoding="utf-8", newline="\n") as handle:
        first = handle.readline()
        lineno = 1
        if header is None:
            header = _looks_like_header(first)
        pending = [] if header else [first]
        if header:
            try:
                expected_n, dim = (int(p) for p in first.split())
            except ValueError:
                raise VectorFileError(
                    f"{path}:1: header {first.strip()!r} is not '<n_words> <dim>'; fix: pass header=False "
                    "(GloVe-style file) or repair the first line"
                ) from None
            lineno = 1
        else:
            lineno = 0

        def lines():
            yield from pending
            yield from handle

        for line in lines():
            lineno += 1
            if limit is not None and len(words) >= limit:
                break
            line = line.rstrip("\n").rstrip("\r")
            if not line.strip():
                continue
            parts = line.rstrip(" ").split(" ")
            if dim is None:
                dim = len(parts) - 1
            if len(parts) != dim + 1:
                raise VectorFileError(
                    f"{path}:{lineno}: expected a word and {dim} numbers, found {len(parts) - 1} numbers; "
                    "fix: words may not contain spaces, and every line needs the same dimension"
                )
            try:
                row = np.array(parts[1:], dtype=np.float32)
            except ValueError:
                raise VectorFileError(f"{path}:{lineno}: a value of word {parts[0]!r} is not a number") from None
            if not np.isfinite(row).all():
                raise _non_finite(f"{path}:{lineno}", parts[0], row)
            rows.append(row)
            words.append(parts[0])
    if expected_n is not None and limit is None and len(words) != expected_n:
        raise VectorFileError(
            f"{path}: header promises {expected_n} words, file holds {len(words)}; fix: the file is "
            "truncated or the header is wrong"
        )
    vectors = np.stack(rows) if rows else np.zeros((0, dim or 0), dtype=np.float32)
    return words, vectors


def _read_binary(path: Path, limit: int | None) -> tuple[list[str], np.ndarray]:
    with open(path, "rb") as handle:
        first = handle.readline().decode("utf-8", errors="replace")
        if not _looks_like_header(first):
            raise VectorFileError(
                f"{path}:1: a binary word2vec file starts with '<n_words> <dim>', found {first.strip()[:60]!r}; "
                "fix: is this a text file? pass binary=False"
            )
        n, dim = (int(p) for p in first.split())
        if limit is not None:
            n = min(n, limit)
        data = handle.read()
    words: list[str] = []
    vectors = np.empty((n, dim), dtype=np.float32)
    pos = 0
    width = 4 * dim
    for i in range(n):
        while pos < len(data) and data[pos : pos + 1] in (b"\n", b"\r"):
            pos += 1
        space = data.find(b" ", pos)
        if space < 0 or space + 1 + width > len(data):
            raise VectorFileError(
                f"{path}: word #{i + 1} of {n} is cut short (file holds {len(data)} bytes after the header); "
                "fix: the file is truncated or the header is wrong"
            )
        try:
            words.append(data[pos:space].decode("utf-8"))
        except UnicodeDecodeError:
            raise VectorFileError(f"{path}: word #{i + 1} is not valid UTF-8 (byte offset {pos} after the header)") from None
        vectors[i] = np.frombuffer(data, dtype="<f4", count=dim, offset=space + 1)
        if not np.isfinite(vectors[i]).all():
            raise _non_finite(f"{path}: word #{i + 1}", words[-1], vectors[i])
        pos = space + 1 + width
    return words, vectors


def _non_finite(place: str, word: str, row: np.ndarray) -> VectorFileError:
    """A vector holding NaN or infinity: refused at load (it would make every model trained on it NaN)."""
    column = int(np.argwhere(~np.isfinite(row))[0][0])
    return VectorFileError(f"{place}: the vector of {word!r} holds {row[column]} (value {column + 1} of {len(row)}); "
                           "fix: repair or drop that row of the vector file")
