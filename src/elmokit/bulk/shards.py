"""Sharded bulk embedding: the plan, the shard writer, the index and resume, without Ray.

A job embeds one input file (one whitespace-tokenised sentence per line, as ``elmokit embed``
reads it) into a folder ``OUTDIR``::

    OUTDIR/index.json          which input lines went to which shard, and which shards are complete
    OUTDIR/shard-00000.h5      lines [0, shard_lines) in the HDF5 layout of ``elmokit embed``
    OUTDIR/shard-00001.h5      (or shard-NNNNN.parquet with --format parquet)
    ...

HDF5 shards hold one dataset per line keyed by its 0-based line number *in the whole input*
(or by the sentence with ``use_sentence_keys``) and, unless turned off, ``sentence_to_index``
for the shard's own lines. Parquet shards hold one row per line: ``line`` int64, ``sentence``
string, ``shape`` list<int32> and ``vectors`` list<float32> (the array ``(L+1, n, 2P)`` for
``all``, ``(n, 2P)`` for ``top``/``average``, flattened in C order); the model, the output format
and the shapes' meaning are in the file's schema metadata.

Every shard file and the index are written under a temporary name and renamed
(``elmokit.io.atomic_path``), so a shard is either absent or whole. The index records for each
shard the SHA-256 of its input bytes and of its file; a rerun keeps a shard only when both still
match (and the model fingerprint and settings are those of the job), and redoes the others —
shards never finished, shards of an edited input, damaged files. Vectors are exactly those of
``elmokit embed``: every sentence starts from the zero (or warm) state, so which shard, worker
or batch a line lands in changes no bit (``Embedder``'s batch invariance).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elmokit.formats.embedding_hdf5 import (
    OUTPUT_FORMATS,
    SENTENCE_INDEX_KEY,
    InputFileError,
    OutputFileError,
    scan_input,
    select_output,
)
from elmokit.io import atomic_path, file_sha256, write_json

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
INDEX_NAME = "index.json"
INDEX_KIND = "elmokit-bulk-embedding"
FILE_FORMATS = {"hdf5": ".h5", "parquet": ".parquet"}


class BulkIndexError(OutputFileError):
    """An ``index.json`` in OUTDIR that elmokit cannot read as one of its own."""


@dataclass(frozen=True, kw_only=True)
class Shard:
    """Lines ``[first_line, stop_line)`` of the input (0-based), bytes ``[offset, offset + size)``."""

    number: int
    first_line: int
    stop_line: int
    offset: int
    size: int
    input_sha256: str

    def file_name(self, file_format: str) -> str:
        return f"shard-{self.number:05d}{FILE_FORMATS[file_format]}"


@dataclass(frozen=True, kw_only=True)
class JobSettings:
    """What decides a shard's bytes: a shard written under other settings is redone."""

    fingerprint: str
    output_format: str = "all"
    file_format: str = "hdf5"
    use_sentence_keys: bool = False
    forget_sentences: bool = False
    allow_empty_lines: bool = False
    tokenizer: str = "whitespace"  # how lines are cut: "whitespace", or the JSON of the segmenter's Tokenizer.to_dict()

    def __post_init__(self) -> None:
        if self.output_format not in OUTPUT_FORMATS:
            raise ValueError(f"output_format must be one of {OUTPUT_FORMATS}, got {self.output_format!r}")
        if self.file_format not in FILE_FORMATS:
            raise ValueError(f"file_format must be one of {tuple(FILE_FORMATS)}, got {self.file_format!r}")
        if self.use_sentence_keys and self.file_format != "hdf5":
            raise ValueError("use_sentence_keys applies to HDF5 shards (Parquet rows carry the line and the sentence)")


def plan_shards(input_file: str | os.PathLike, shard_lines: int) -> list[Shard]:
    """Cut the input into shards of ``shard_lines`` lines (the last one shorter), one pass."""
    if not (isinstance(shard_lines, int) and shard_lines >= 1):
        raise ValueError(f"shard_lines must be an integer >= 1, got {shard_lines!r}")
    shards: list[Shard] = []
    digest, first, offset, position, line = hashlib.sha256(), 0, 0, 0, 0

    def close() -> None:
        shards.append(Shard(number=len(shards), first_line=first, stop_line=line, offset=offset,
                            size=position - offset, input_sha256=digest.hexdigest()))

    with open(input_file, "rb") as handle:
        for raw in handle:
            digest.update(raw)
            position += len(raw)
            line += 1
            if line - first == shard_lines:
                close()
                digest, first, offset = hashlib.sha256(), line, position
    if line > first:
        close()
    return shards


def read_shard_lines(input_file: str | os.PathLike, shard: Shard) -> list[str]:
    """The shard's sentences (stripped), read at its byte range; refuses an input changed since the plan."""
    with open(input_file, "rb") as handle:
        handle.seek(shard.offset)
        data = handle.read(shard.size)
    if hashlib.sha256(data).hexdigest() != shard.input_sha256:
        raise InputFileError(f"{input_file}: lines {shard.first_line + 1}-{shard.stop_line} changed while the job ran; "
                             "rerun it (complete shards are kept)")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return [raw.decode("utf-8").strip() for raw in lines]


# ---- writing one shard ------------------------------------------------------------------------


def write_shard(embedder, input_file: str | os.PathLike, shard: Shard, outdir: str | os.PathLike,
                settings: JobSettings) -> dict[str, Any]:
    """Embed one shard's lines with ``embedder`` and write its file atomically; return its index record."""
    started = time.perf_counter()
    sentences = read_shard_lines(input_file, shard)
    tokenize = getattr(embedder, "tokenize", str.split)  # the model's segmenter if it has one, as `elmokit embed`
    arrays = embedder.embed([tokenize(sentence) for sentence in sentences])  # (L+1, n, 2P) each, any batch: same bits
    target = Path(outdir) / shard.file_name(settings.file_format)
    lines = range(shard.first_line, shard.stop_line)
    if settings.file_format == "hdf5":
        _write_hdf5(target, lines, sentences, arrays, settings)
    else:
        _write_parquet(target, lines, sentences, arrays, settings, embedder)
    return {**asdict(shard), "file": target.name, "file_sha256": file_sha256(target), "sentences": len(sentences),
            "tokens": int(sum(a.shape[1] for a in arrays)), "seconds": round(time.perf_counter() - started, 3)}


def _write_hdf5(target: Path, lines: Iterable[int], sentences: list[str], arrays: list[np.ndarray],
                settings: JobSettings) -> None:
    import h5py

    record_index = not (settings.forget_sentences or settings.use_sentence_keys)
    sentence_to_index: dict[str, str] = {}
    with atomic_path(target) as tmp, h5py.File(tmp, "w") as out:
        for line, sentence, layers in zip(lines, sentences, arrays):
            out.create_dataset(sentence if settings.use_sentence_keys else str(line),
                               data=select_output(layers, settings.output_format))
            if record_index:
                sentence_to_index[sentence] = str(line)
        if record_index:
            index_dataset = out.create_dataset(SENTENCE_INDEX_KEY, (1,), dtype=h5py.string_dtype())
            index_dataset[0] = json.dumps(sentence_to_index)


def _write_parquet(target: Path, lines: Iterable[int], sentences: list[str], arrays: list[np.ndarray],
                   settings: JobSettings, embedder) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    selected = [select_output(layers, settings.output_format) for layers in arrays]
    table = pa.table({
        "line": pa.array(list(lines), pa.int64()),
        "sentence": pa.array(sentences, pa.string()),
        "shape": pa.array([list(a.shape) for a in selected], pa.list_(pa.int32())),
        "vectors": pa.array([a.ravel() for a in selected], pa.list_(pa.float32())),
    })
    meta = {"model": str(embedder.name), "fingerprint": settings.fingerprint, "output_format": settings.output_format,
            "shape": "(L+1, n, 2P)" if settings.output_format == "all" else "(n, 2P)"}
    table = table.replace_schema_metadata({"elmokit": json.dumps(meta)})
    with atomic_path(target) as tmp:
        pq.write_table(table, tmp)


def read_shard(path: str | os.PathLike) -> Iterator[tuple[int | str, np.ndarray]]:
    """(key, array) of every line of one shard file: the line number (Parquet, or HDF5 keyed by
    line) or the sentence (HDF5 written with sentence keys)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        for line, shape, vectors in zip(table["line"].to_pylist(), table["shape"].to_pylist(),
                                        table["vectors"].to_numpy(zero_copy_only=False)):
            yield line, np.asarray(vectors, dtype=np.float32).reshape(shape)
        return
    import h5py

    with h5py.File(path, "r") as f:
        for key in f:
            if key != SENTENCE_INDEX_KEY:
                yield (int(key) if key.isdigit() else key), f[key][...]


# ---- the index and resume ---------------------------------------------------------------------


def read_index(outdir: str | os.PathLike) -> dict[str, Any] | None:
    """The job's index, or None when OUTDIR has none yet."""
    path = Path(outdir) / INDEX_NAME
    if not path.exists():
        return None
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BulkIndexError(f"{path}: not a readable index ({error}); remove it to start the job again") from None
    if not isinstance(index, dict) or index.get("kind") != INDEX_KIND:
        raise BulkIndexError(f"{path}: not an elmokit bulk-embedding index; give another OUTDIR")
    if index.get("format_version") != FORMAT_VERSION:
        raise BulkIndexError(f"{path}: format_version {index.get('format_version')!r}, this elmokit writes "
                             f"{FORMAT_VERSION}; give another OUTDIR")
    return index


def write_index(outdir: str | os.PathLike, index: dict[str, Any]) -> None:
    write_json(Path(outdir) / INDEX_NAME, index, indent=1)


def verified_records(outdir: Path, previous: dict[str, Any] | None, plan: list[Shard],
                     settings: JobSettings) -> dict[int, dict[str, Any]]:
    """The records of the planned shards that are complete: same settings, same input bytes and
    line range, and the file on disk hashes to what was recorded."""
    if previous is None:
        return {}
    if previous.get("settings") != asdict(settings):
        logger.warning("%s: written with other settings or another model; every shard is redone", outdir / INDEX_NAME)
        return {}
    kept: dict[int, dict[str, Any]] = {}
    recorded = {r.get("number"): r for r in previous.get("shards", []) if isinstance(r, dict) and r.get("file_sha256")}
    for shard in plan:
        record = recorded.get(shard.number)
        # the same lines with the same bytes (an edit earlier in the file moves them, which is fine)
        if record is None or any(record.get(k) != getattr(shard, k) for k in ("first_line", "stop_line", "size",
                                                                              "input_sha256")):
            continue
        path = outdir / shard.file_name(settings.file_format)
        if path.is_file() and file_sha256(path) == record["file_sha256"]:
            kept[shard.number] = {**record, "offset": shard.offset}
        elif path.exists():
            logger.warning("%s: does not match the index (damaged or replaced); redoing this shard", path)
    return kept


def prepare_outdir(input_file: str | os.PathLike, outdir: str | os.PathLike) -> Path:
    """Check the paths (before any model loads) and create OUTDIR (its parent must exist)."""
    input_path, outdir = Path(input_file), Path(outdir)
    if os.fspath(input_file) == "-":
        raise InputFileError("sharded embedding reads the input by byte ranges (on every worker): give a file, not '-'")
    if input_path.is_dir():
        raise InputFileError(f"{input_path}: is a directory, not a text file; give the file of sentences to embed")
    if not input_path.is_file():
        raise InputFileError(f"{input_path}: input file not found")
    if outdir.exists() and not outdir.is_dir():
        raise OutputFileError(f"{outdir}: is a file; with --ray the output is a folder of shards and index.json")
    if not outdir.parent.is_dir():
        raise OutputFileError(f"{outdir.parent}: output directory does not exist; create it first (mkdir -p {outdir.parent})")
    if outdir.is_dir() and not (outdir / INDEX_NAME).exists() and any(outdir.iterdir()):
        # not a job's folder: its files are the user's (a rerun would remove shard-named ones)
        first = sorted(os.listdir(outdir))[0]
        raise OutputFileError(f"{outdir}: holds {first!r} and is no earlier output of `elmokit embed --ray` (no "
                              f"{INDEX_NAME}); give a new or empty folder (nothing in it is touched)")
    outdir.mkdir(exist_ok=True)
    if not os.access(outdir, os.W_OK):
        raise OutputFileError(f"{outdir}: cannot write in it; give a folder you can write to")
    return outdir


# A runner embeds the pending shards and yields each record as its shard completes (any order).
ShardRunner = Callable[[list[Shard]], Iterable[dict[str, Any]]]


def run_job(input_file: str | os.PathLike, outdir: str | os.PathLike, *, settings: JobSettings, shard_lines: int,
            runner: ShardRunner, model_name: str = "", num_layers: int | None = None,
            dim: int | None = None) -> dict[str, Any]:
    """Plan, skip the verified shards, run the rest through ``runner``, keep the index current.

    The index is rewritten (atomically) after every completed shard, so a job stopped at any
    point keeps every shard it finished. Returns the final index (``complete`` True).
    """
    outdir = prepare_outdir(input_file, outdir)
    scan_input(Path(input_file), use_sentence_keys=settings.use_sentence_keys,
               allow_empty_lines=settings.allow_empty_lines, name=os.fspath(input_file))  # file:line errors first
    plan = plan_shards(input_file, shard_lines)
    done = verified_records(outdir, read_index(outdir), plan, settings)
    _remove_unplanned(outdir, plan, settings)
    index = {"kind": INDEX_KIND, "format_version": FORMAT_VERSION, "input": os.fspath(input_file),
             "input_lines": plan[-1].stop_line if plan else 0, "shard_lines": shard_lines, "model": model_name,
             "num_layers": num_layers, "dim": dim, "settings": asdict(settings), "complete": False, "shards": []}

    def save() -> None:
        index["shards"] = [done.get(s.number) or {**asdict(s), "file": s.file_name(settings.file_format),
                                                   "file_sha256": None} for s in plan]
        index["complete"] = len(done) == len(plan)
        write_index(outdir, index)

    pending = [s for s in plan if s.number not in done]
    logger.info("bulk embed: %d shards of %d lines; %d complete and verified, %d to do", len(plan), shard_lines,
                len(done), len(pending))
    save()
    for record in runner(pending):
        done[int(record["number"])] = record
        save()
    if len(done) != len(plan):
        missing = sorted({s.number for s in plan} - set(done))
        raise RuntimeError(f"shards {missing[:10]} were not written; rerun to finish them")
    return index


def _remove_unplanned(outdir: Path, plan: list[Shard], settings: JobSettings) -> None:
    """Shard files of an earlier plan (a longer input, other --shard-lines or --format) that this one lacks."""
    wanted = {s.file_name(settings.file_format) for s in plan}
    for path in sorted(outdir.glob("shard-[0-9][0-9][0-9][0-9][0-9]*")):
        if path.name not in wanted and path.suffix in FILE_FORMATS.values():
            logger.warning("%s: not a shard of this job's plan; removed", path)
            path.unlink()


def local_runner(embedder, input_file: str | os.PathLike, outdir: str | os.PathLike,
                 settings: JobSettings) -> ShardRunner:
    """A runner that writes the shards one after another in this process (tests, one machine)."""

    def run(pending: list[Shard]) -> Iterator[dict[str, Any]]:
        for shard in pending:
            yield write_shard(embedder, input_file, shard, outdir, settings)

    return run


def read_job(outdir: str | os.PathLike) -> Iterator[tuple[int | str, np.ndarray]]:
    """Every (key, array) of a complete job, shard after shard in input order."""
    index = read_index(outdir)
    if index is None or not index.get("complete"):
        raise BulkIndexError(f"{outdir}: the job is not complete (no index.json, or shards missing); rerun it")
    for record in index["shards"]:
        yield from read_shard(Path(outdir) / record["file"])
