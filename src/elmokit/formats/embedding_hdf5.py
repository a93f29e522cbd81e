"""Bulk embedding to HDF5 in the layout of the old ``allennlp elmo`` command (spec §3.11).

Input: one whitespace-tokenised sentence per line (UTF-8). Output: one float32 dataset per line,
keyed by the 0-based line number (or by the sentence with ``use_sentence_keys``):
``all`` (L+1, n, 2P), ``top`` (n, 2P) = the last layer, ``average`` (n, 2P) = mean of the layers.
Unless ``forget_sentences``/``use_sentence_keys``, a dataset ``sentence_to_index`` of shape (1,)
holds ``json.dumps({sentence: "line"})`` (a repeated sentence maps to its last line, as before).

Differences from the old command, on purpose: empty lines are an error naming their line numbers
unless ``allow_empty_lines`` (then zeros of shape (L+1, 0, 2P), with the model's real width);
the output is written to a temporary file and renamed at the end, so an interrupted run never
leaves a half-written file where the output should be; the file is streamed in batches, so
memory does not grow with the input (beyond the ``sentence_to_index`` text the layout requires);
stateless runs batch lines of similar length together.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmokit.io import atomic_path

logger = logging.getLogger(__name__)

OUTPUT_FORMATS = ("all", "top", "average")
SENTENCE_INDEX_KEY = "sentence_to_index"
_MAX_LISTED = 10


class InputFileError(ValueError):
    """An input file the embedder cannot take as it is; the message names the lines."""


@dataclass
class EmbedFileSummary:
    output_file: Path
    sentences: int
    tokens: int
    seconds: float

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else float("nan")


def _list_lines(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:_MAX_LISTED])
    more = f" and {len(numbers) - _MAX_LISTED} more" if len(numbers) > _MAX_LISTED else ""
    return f"{shown}{more}"


def scan_input(path: Path, *, use_sentence_keys: bool, allow_empty_lines: bool) -> int:
    """Check the whole input before anything is embedded; return its number of lines.

    Reads line by line (bounded memory). Raises InputFileError naming file and line numbers
    (1-based, as editors show them) for undecodable text, empty lines and, with sentence keys,
    repeated sentences or sentences HDF5 cannot use as a key.
    """
    empty: list[int] = []
    seen: dict[bytes, int] = {}
    count = 0
    with open(path, "rb") as handle:
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
        raise InputFileError(
            f"{path}: {len(empty)} empty line(s) at line {_list_lines(empty)}; remove them, or pass "
            "--allow-empty-lines to write zero-length embeddings for them"
        )
    return count


BUCKET_BATCHES = 16  # stateless runs sort this many batches' worth of lines by length at a time


def _batches(path: Path, batch_size: int, *, bucket: bool) -> Iterator[list[tuple[int, str]]]:
    """Batches of (line index, sentence). In file order, or (``bucket``) sorted by length within
    windows of ``BUCKET_BATCHES`` batches, so sentences of similar length share a batch and
    little padding is computed; memory stays bounded by the window."""
    window_size = batch_size * (BUCKET_BATCHES if bucket else 1)
    window: list[tuple[int, str]] = []

    def flush() -> Iterator[list[tuple[int, str]]]:
        if bucket:
            window.sort(key=lambda item: len(item[1].split()), reverse=True)
        for start in range(0, len(window), batch_size):
            yield window[start : start + batch_size]
        window.clear()

    with open(path, encoding="utf-8") as handle:
        for index, line in enumerate(handle):
            window.append((index, line.strip()))
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
    """Stream ``input_file`` through ``embedder`` (an ``Embedder``) into ``output_file``."""
    import h5py
    from tqdm import tqdm

    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, got {output_format!r}")
    input_path, output_path = Path(input_file), Path(output_file)
    if not input_path.is_file():
        raise InputFileError(f"{input_path}: input file not found")
    if not output_path.parent.is_dir():
        raise InputFileError(f"{output_path.parent}: output directory does not exist")
    total = scan_input(input_path, use_sentence_keys=use_sentence_keys, allow_empty_lines=allow_empty_lines)

    record_index = not (forget_sentences or use_sentence_keys)
    sentence_to_index: dict[str, str] = {}
    sentences = tokens = 0
    started = time.perf_counter()
    bar = tqdm(total=total, unit="sent", disable=None if progress is None else not progress, desc="embed")
    with atomic_path(output_path) as tmp, h5py.File(tmp, "w") as out:
        # Stateful runs must see the file in order (the state flows from line to line); stateless
        # runs are batched by length, and every line still lands under its own key.
        for batch in _batches(input_path, embedder.batch_size, bucket=not embedder.stateful):
            vectors = embedder.embed_batch([sentence.split() for _, sentence in batch])
            for (index, sentence), layers in zip(batch, vectors):
                key = sentence if use_sentence_keys else str(index)
                out.create_dataset(key, data=select_output(layers, output_format))
                if record_index:
                    sentence_to_index[sentence] = str(index)
                tokens += layers.shape[1]
            sentences += len(batch)
            bar.update(len(batch))
            bar.set_postfix(tok_s=f"{tokens / max(time.perf_counter() - started, 1e-9):.0f}", refresh=False)
        if record_index:
            index_dataset = out.create_dataset(SENTENCE_INDEX_KEY, (1,), dtype=h5py.string_dtype())
            index_dataset[0] = json.dumps(sentence_to_index)
    bar.close()
    summary = EmbedFileSummary(output_path, sentences, tokens, time.perf_counter() - started)
    logger.info(
        "embedded %d sentences (%d tokens) into %s in %.1f s (%.0f tokens/s)",
        sentences, tokens, output_path, summary.seconds, summary.tokens_per_second,
    )
    return summary
