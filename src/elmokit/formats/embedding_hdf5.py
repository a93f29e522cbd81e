"""Bulk embedding to HDF5 in the layout of the old ``allennlp elmo`` command.

Input: one whitespace-tokenised sentence per line (UTF-8), or raw text when the embedder has a
segmenter (``Embedder.tokenize``: a model trained on Chinese with ``--tokenizer jieba`` cuts raw lines
as its training text was cut). Output: one float32 dataset per line,
keyed by the 0-based line number (or by the sentence with ``use_sentence_keys``):
``all`` (L+1, n, 2P), ``top`` (n, 2P) = the last layer, ``average`` (n, 2P) = mean of the layers.
Unless ``forget_sentences``/``use_sentence_keys``, a dataset ``sentence_to_index`` of shape (1,)
holds ``json.dumps({sentence: "line"})`` (a repeated sentence maps to its last line, as before).

Differences from the old command, on purpose: empty lines are an error naming their line numbers
unless ``allow_empty_lines`` (then zeros of shape (L+1, 0, 2P), with the model's real width);
the output is written to a temporary file beside it (``elmokit.io.atomic_path``) and renamed at
the end, so an interrupted run never leaves a half-written file where the output should be; the
paths are checked before anything is embedded (``check_paths``: an output that is the input, a
folder, in a missing or read-only folder is refused); ``"-"`` (or a pipe) as input is read once
into an anonymous temporary file, since the input is read twice (checked, then embedded); the
file is streamed in batches, so memory does not grow with the input (beyond the
``sentence_to_index`` text the layout requires); stateless runs batch lines of similar length together.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from elmokit.errors import UserError
from elmokit.io import atomic_path, check_output_file
from elmokit.progress import progress_bar

logger = logging.getLogger(__name__)

OUTPUT_FORMATS = ("all", "top", "average")
SENTENCE_INDEX_KEY = "sentence_to_index"
_MAX_LISTED = 10


STDIN = "-"  # the input file name that means standard input


class InputFileError(UserError):
    """An input file the embedder cannot take as it is; the message names the lines."""


class OutputFileError(UserError):
    """An output path that cannot be written (or must not be); the message names it and the fix."""


def _counted(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass
class EmbedFileSummary:
    output_file: Path
    sentences: int
    tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def steady_rate(summary: EmbedFileSummary, first: tuple[float, int] | None) -> str:
    """The tokens/s after the first batch (which also sets up the kernels for the model's shapes, a cost of
    loading, not of embedding); a file of one batch is too little to rate."""
    if first is None or summary.tokens <= first[1] or summary.seconds <= first[0]:
        return "one batch: too little to measure a rate"
    return f"{(summary.tokens - first[1]) / (summary.seconds - first[0]):.0f} tokens/s after the first batch"


def _list_lines(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:_MAX_LISTED])
    more = f" and {len(numbers) - _MAX_LISTED} more" if len(numbers) > _MAX_LISTED else ""
    return f"line{'s' if len(numbers) > 1 else ''} {shown}{more}"


def check_paths(input_file: str | os.PathLike, output_file: str | os.PathLike) -> None:
    """Refuse, before anything is loaded or embedded, what would fail or do harm later.

    InputFileError: the input is missing or a folder. OutputFileError: the output is the input
    (by any name: symlink, hard link), is a folder, or its folder is missing or not writable.
    ``input_file`` ``"-"`` is standard input.
    """
    input_path, output_path = Path(input_file), Path(output_file)
    if os.fspath(input_file) != STDIN:
        if input_path.is_dir():
            raise InputFileError(f"{input_path}: is a directory, not a text file; give the file of sentences to embed")
        if not input_path.exists():
            raise InputFileError(f"{input_path}: input file not found")
    if output_path.is_dir():
        raise OutputFileError(f"{output_path}: is a directory; give the path of the HDF5 file to write, "
                              f"e.g. {output_path / 'embeddings.h5'}")
    if os.fspath(input_file) != STDIN:
        check_output_file(output_path, inputs=[input_path])  # the one rule of file outputs: never an input, by any name
    folder = output_path.parent
    if not folder.is_dir():
        if folder.exists():
            raise OutputFileError(f"{folder}: is a file, not a directory; give an output path in an existing directory")
        raise OutputFileError(f"{folder}: output directory does not exist; create it first (mkdir -p {folder}), "
                              "or give an output path in an existing directory")
    try:  # a real write, unlike os.access (root, read-only mounts, ACLs); an anonymous file leaves nothing
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise OutputFileError(f"{output_path}: cannot write in {folder} ({error.strerror or error}); "
                              "give an output path in a directory you can write to") from None


def scan_input(source: Path | BinaryIO, *, use_sentence_keys: bool, allow_empty_lines: bool, name: str | None = None) -> int:
    """Check the whole input before anything is embedded; return its number of lines.

    Reads line by line (bounded memory). Raises InputFileError naming file and line numbers
    (1-based, as editors show them) for undecodable text, empty lines and, with sentence keys,
    repeated sentences or sentences HDF5 cannot use as a key. ``source`` is a path or an open
    binary file (read from its start); ``name`` is what the messages call it (default: the path).
    """
    path = name or source  # what the messages call the input
    empty: list[int] = []
    seen: dict[bytes, int] = {}
    count = 0
    with _open_lines(source) as handle:
        for count, raw in enumerate(handle, start=1):
            try:
                sentence = raw.decode("utf-8").strip()
            except UnicodeDecodeError as error:
                raise InputFileError(
                    f"{path}:{count}: not valid UTF-8 (byte {error.start}: {raw[error.start:error.start + 1]!r}); "
                    "re-encode the file as UTF-8"
                ) from None
            if not sentence:
                empty.append(count)
                continue
            if use_sentence_keys:
                if "/" in sentence or sentence == ".":
                    raise InputFileError(
                        f"{path}:{count}: the sentence cannot be an HDF5 key ('/' separates groups); "
                        "drop --use-sentence-keys to key datasets by line number"
                    )
                digest = hashlib.blake2b(sentence.encode("utf-8"), digest_size=16).digest()
                if digest in seen:
                    raise InputFileError(
                        f"{path}:{count}: repeats the sentence of line {seen[digest]}, and sentence keys must "
                        "be unique; drop --use-sentence-keys to key datasets by line number"
                    )
                seen[digest] = count
    if empty and not allow_empty_lines:
        them = "it" if len(empty) == 1 else "them"
        raise InputFileError(
            f"{path}: {_counted(len(empty), 'empty line')} at {_list_lines(empty)}; remove {them}, or pass "
            f"--allow-empty-lines to write zero-length embeddings for {them}"
        )
    return count


@contextlib.contextmanager
def _open_lines(source: Path | BinaryIO) -> Iterator[BinaryIO]:
    """The input as bytes, split at b"\\n" only (the same lines for the check and the embedding)."""
    if hasattr(source, "read"):
        source.seek(0)
        yield source
    else:
        with open(source, "rb") as handle:
            yield handle


@contextlib.contextmanager
def _readable_twice(input_file: str | os.PathLike) -> Iterator[tuple[Path | BinaryIO, str]]:
    """(source, name) of the input: a regular file as it is; standard input ("-") or a pipe
    (``<(zcat x.gz)``) copied once into an anonymous temporary file, which the system removes
    however the process ends."""
    if os.fspath(input_file) != STDIN and Path(input_file).is_file():
        yield Path(input_file), os.fspath(input_file)
        return
    name = "<stdin>" if os.fspath(input_file) == STDIN else os.fspath(input_file)
    with tempfile.TemporaryFile(prefix="elmokit-input-") as spool:
        if os.fspath(input_file) == STDIN:
            shutil.copyfileobj(sys.stdin.buffer, spool, 1 << 20)
        else:
            with open(input_file, "rb") as handle:
                shutil.copyfileobj(handle, spool, 1 << 20)
        yield spool, name


BUCKET_BATCHES = 16  # stateless runs sort this many batches' worth of lines by length at a time


def _batches(source: Path | BinaryIO, batch_size: int, *, bucket: bool,
             length=lambda sentence: len(sentence.split())) -> Iterator[list[tuple[int, str]]]:
    """Batches of (line index, sentence). In file order, or (``bucket``) sorted by length within
    windows of ``BUCKET_BATCHES`` batches, so sentences of similar length share a batch and
    little padding is computed; memory stays bounded by the window."""
    window_size = batch_size * (BUCKET_BATCHES if bucket else 1)
    window: list[tuple[int, str]] = []

    def flush() -> Iterator[list[tuple[int, str]]]:
        if bucket:
            window.sort(key=lambda item: length(item[1]), reverse=True)
        for start in range(0, len(window), batch_size):
            yield window[start : start + batch_size]
        window.clear()

    with _open_lines(source) as handle:
        for index, raw in enumerate(handle):
            window.append((index, raw.decode("utf-8").strip()))
            if len(window) == window_size:
                yield from flush()
    yield from flush()


def select_output(layers: np.ndarray, output_format: str) -> np.ndarray:
    """(L+1, n, 2P) -> what the output format stores."""
    if output_format == "all":
        return layers
    if output_format == "top":
        return layers[-1]
    if output_format == "average":
        return layers.mean(axis=0, dtype=np.float64).astype(np.float32)
    raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}")


def embed_file(
    embedder,
    input_file: str | os.PathLike,
    output_file: str | os.PathLike,
    *,
    output_format: str = "all",
    use_sentence_keys: bool = False,
    forget_sentences: bool = False,
    allow_empty_lines: bool = False,
    progress: bool | None = None,
) -> EmbedFileSummary:
    """Stream ``input_file`` (``"-"``: standard input) through ``embedder`` (an ``Embedder``)
    into ``output_file``. The paths are checked first (``check_paths``); an existing output is
    replaced only when the run succeeds."""
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
    if not (isinstance(embedder.batch_size, int) and embedder.batch_size >= 1):
        raise ValueError(f"batch_size must be an integer >= 1, got {embedder.batch_size!r}")
    check_paths(input_file, output_file)
    with _readable_twice(input_file) as (source, name):
        return _embed(embedder, source, name, Path(output_file), output_format=output_format,
                      use_sentence_keys=use_sentence_keys, forget_sentences=forget_sentences,
                      allow_empty_lines=allow_empty_lines, progress=progress)


def _embed(embedder, source, name, output_path, *, output_format, use_sentence_keys, forget_sentences,
           allow_empty_lines, progress) -> EmbedFileSummary:
    import h5py

    total = scan_input(source, use_sentence_keys=use_sentence_keys, allow_empty_lines=allow_empty_lines, name=name)
    record_index = not (forget_sentences or use_sentence_keys)
    sentence_to_index: dict[str, str] = {}
    sentences = tokens = 0
    started = time.perf_counter()
    first = None  # (seconds, tokens) of the first batch, which also sets up the kernels for the model's shapes
    bar = progress_bar(total=total, unit="sent", disable=progress is False, desc="embed")
    with atomic_path(output_path) as tmp, h5py.File(tmp, "w") as out:
        # Stateful runs must see the file in order (the state flows from line to line); stateless
        # runs are batched by length, and every line still lands under its own key.
        tokenize = getattr(embedder, "tokenize", str.split)  # Embedder.tokenize: the model's segmenter, or split
        for batch in _batches(source, embedder.batch_size, bucket=not embedder.stateful,
                              length=lambda sentence: len(tokenize(sentence))):
            vectors = embedder.embed_batch([tokenize(sentence) for _, sentence in batch])
            for (index, sentence), layers in zip(batch, vectors):
                key = sentence if use_sentence_keys else str(index)
                out.create_dataset(key, data=select_output(layers, output_format))
                if record_index:
                    sentence_to_index[sentence] = str(index)
                tokens += layers.shape[1]
            sentences += len(batch)
            if first is None:
                first = (time.perf_counter() - started, tokens)
            bar.update(len(batch))
            bar.set_postfix(tok_s=f"{tokens / max(time.perf_counter() - started, 1e-9):.0f}", refresh=False)
        if record_index:
            index_dataset = out.create_dataset(SENTENCE_INDEX_KEY, (1,), dtype=h5py.string_dtype())
            index_dataset[0] = json.dumps(sentence_to_index)
    bar.close()
    summary = EmbedFileSummary(output_path, sentences, tokens, time.perf_counter() - started)
    logger.info("embedded %s (%s) into %s in %.1f s (%s)", _counted(sentences, "sentence"), _counted(tokens, "token"),
                output_path, summary.seconds, steady_rate(summary, first))
    return summary
