"""Streaming corpus reader: a glob of UTF-8 text files, one sentence or paragraph per line.

Files may be plain, ``.xz`` or ``.gz``; they are read line by line and never loaded whole, so a
:class:`Corpus` can be iterated again and again (gensim makes one pass per epoch) in constant
memory. Tokenisation is whitespace splitting by default, or a simple regular expression
(``\\w+|[^\\w\\s]``: runs of word characters, and every other non-space character on its own),
or, for text written without spaces (Chinese), a word segmenter by name (``jieba``, ``rjieba``,
``pkuseg``, ``chars``: ``elmokit.text.segmenters``), any of them optionally lowercased. The exact
choice is recorded by :meth:`Corpus.describe` so a
run folder says how its text was cut.

Example::

    corpus = Corpus("data/train.*.txt.xz", tokenizer=Tokenizer(kind="regex", lowercase=True))
    for tokens in corpus:          # list[str] per non-empty line
        ...
"""

from __future__ import annotations

import bz2
import dataclasses
import glob as globlib
import gzip
import io
import lzma
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tqdm import tqdm

from elmokit.errors import UserError
from elmokit.text.segmenters import SEGMENTER_KINDS, check_segmenter, segment

DEFAULT_PATTERN = r"\w+|[^\w\s]"
TOKENIZER_KINDS = ("whitespace", "regex", *SEGMENTER_KINDS)


class CorpusError(UserError):
    """A corpus file is missing or unreadable; the message names the file, the line and the fix."""


@dataclass(frozen=True, kw_only=True)
class Tokenizer:
    """How a line becomes tokens.

    Attributes:
        kind: ``"whitespace"`` (``str.split()``), ``"regex"`` (``re.findall(pattern, line)``), or a
            segmenter for unsegmented text: ``"jieba"``, ``"rjieba"``, ``"pkuseg"``, ``"chars"``
            (``elmokit.text.segmenters``; a missing package raises ``SegmenterError`` naming the install).
        lowercase: lowercase the line first (``str.lower``).
        pattern: the regular expression used when ``kind == "regex"``.
    """

    kind: str = "whitespace"
    lowercase: bool = False
    pattern: str = DEFAULT_PATTERN

    def __post_init__(self) -> None:
        if self.kind not in TOKENIZER_KINDS:
            raise ValueError(f"tokenizer kind {self.kind!r} is not one of {TOKENIZER_KINDS}")
        if self.kind == "regex":
            re.compile(self.pattern)  # fail early on a bad pattern
        if self.kind in SEGMENTER_KINDS:
            check_segmenter(self.kind)  # fail early on a missing package

    def __call__(self, line: str) -> list[str]:
        if self.lowercase:
            line = line.lower()
        if self.kind == "whitespace":
            return line.split()
        if self.kind == "regex":
            return _compiled(self.pattern).findall(line)
        return segment(self.kind, line)

    def to_dict(self) -> dict:
        out = dataclasses.asdict(self)
        if self.kind != "regex":
            out.pop("pattern")
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Tokenizer:
        return cls(**{k: v for k, v in data.items() if k in {"kind", "lowercase", "pattern"}})


def raw_text_tokenizer(recorded: dict | None) -> Tokenizer | None:
    """How a loaded model cuts the raw lines it is given (``elmokit embed``, ``Embedder.tokenize``).

    ``recorded`` is the tokenizer a model was trained with (``lm.json``). A segmenter for
    unsegmented text (jieba, rjieba, pkuseg, chars) is used again, so raw Chinese lines are cut as
    the training text was. Anything else gives None: lines are whitespace-tokenised, as the old
    ``allennlp elmo`` command read them (a whitespace or regex model is given tokenised text; models
    without ``lm.json`` and original-format ones record nothing).
    """
    if not recorded or recorded.get("kind") not in SEGMENTER_KINDS:
        return None
    return Tokenizer.from_dict(recorded)


_PATTERNS: dict[str, re.Pattern] = {}


def _compiled(pattern: str) -> re.Pattern:
    if pattern not in _PATTERNS:
        _PATTERNS[pattern] = re.compile(pattern)
    return _PATTERNS[pattern]


def open_text(path: str | os.PathLike) -> IO[str]:
    """Open a plain, ``.xz``, ``.gz`` or ``.bz2`` file for reading UTF-8 text (strict decoding)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".xz":
        return lzma.open(path, "rt", encoding="utf-8", newline=None)
    if suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline=None)
    if suffix == ".bz2":
        return bz2.open(path, "rt", encoding="utf-8", newline=None)
    return open(path, encoding="utf-8", newline=None)


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a plain, ``.xz``, ``.gz`` or ``.bz2`` file for reading bytes."""
    path = Path(path)
    suffix = path.suffix.lower()
    opener = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}.get(suffix, io.open)
    return opener(path, "rb")


def expand_patterns(patterns: str | Sequence[str]) -> list[Path]:
    """Sorted, de-duplicated files matching one or more glob patterns (or plain paths)."""
    if isinstance(patterns, (str, os.PathLike)):
        patterns = [patterns]
    files: list[Path] = []
    for pattern in patterns:
        pattern = os.fspath(pattern)
        matched = sorted(globlib.glob(os.path.expanduser(pattern), recursive=True))
        matched = [m for m in matched if os.path.isfile(m)]
        if not matched and os.path.isdir(os.path.expanduser(pattern)):
            raise CorpusError(
                f"corpus {pattern!r} is a directory, not a file; fix: give the files in it, e.g. "
                f"'{os.path.join(pattern, '*.txt')}' (quoted)"
            )
        if not matched:
            raise CorpusError(
                f"corpus pattern {pattern!r} matches no file (fix: check the path, and quote the glob "
                "so the shell does not expand it)"
            )
        files.extend(Path(m) for m in matched)
    seen: set[Path] = set()
    unique = []
    for f in files:
        if f.resolve() not in seen:
            seen.add(f.resolve())
            unique.append(f)
    return unique


class Corpus:
    """A restartable stream of tokenised lines from a glob of text files.

    Args:
        patterns: a glob (``"data/train.0[0-2].txt.xz"``), a path, or a list of them.
        tokenizer: how lines are cut (default: whitespace, case kept).
        max_tokens: split lines longer than this into consecutive pieces (gensim silently
            truncates sentences over 10,000 tokens; splitting keeps every token). None: no limit.
        progress: show a tqdm bar (tokens/s) on each pass; it is quiet when stderr is not a tty.
        limit_lines: stop after this many non-empty lines per pass (for quick trials); None: all.

    Iterating yields ``list[str]`` per non-empty line, in file order then line order.
    """

    def __init__(
        self,
        patterns: str | Sequence[str],
        *,
        tokenizer: Tokenizer | None = None,
        max_tokens: int | None = None,
        progress: bool = False,
        limit_lines: int | None = None,
    ) -> None:
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 (or None: no limit), got {max_tokens}")
        if limit_lines is not None and limit_lines < 0:
            raise ValueError(f"limit_lines must be >= 0 (or None: all), got {limit_lines}")
        self.patterns = [os.fspath(patterns)] if isinstance(patterns, (str, os.PathLike)) else [os.fspath(p) for p in patterns]
        self.files = expand_patterns(self.patterns)
        self.tokenizer = tokenizer or Tokenizer()
        self.max_tokens = max_tokens
        self.progress = progress
        self.limit_lines = limit_lines

    def lines(self) -> Iterator[tuple[Path, int, str]]:
        """Raw lines as ``(file, line_number, text)`` (1-based line numbers, newline stripped).

        Lines are read as bytes and decoded one by one, so a decoding error names its exact line.
        """
        for path in self.files:
            lineno = 0
            try:
                with open_binary(path) as handle:
                    for lineno, raw in enumerate(handle, 1):
                        try:
                            line = raw.decode("utf-8")
                        except UnicodeDecodeError as error:
                            raise CorpusError(
                                f"{path}:{lineno}: not valid UTF-8 ({error.reason} at byte {error.start} of the line); "
                                "fix: convert the file, e.g. `iconv -f latin1 -t utf-8`"
                            ) from None
                        yield path, lineno, line.rstrip("\r\n")
            except (EOFError, lzma.LZMAError, gzip.BadGzipFile, OSError) as error:
                raise CorpusError(f"{path}:{lineno + 1}: cannot read ({error}); fix: check the file is complete") from None

    def __iter__(self) -> Iterator[list[str]]:
        bar = tqdm(
            desc="reading corpus", unit="tok", unit_scale=True, mininterval=1.0,
            disable=not (self.progress and sys.stderr.isatty()),
        )
        n_lines = 0
        try:
            for _path, _lineno, line in self.lines():
                tokens = self.tokenizer(line)
                if not tokens:
                    continue
                n_lines += 1
                bar.update(len(tokens))
                if self.max_tokens is None or len(tokens) <= self.max_tokens:
                    yield tokens
                else:
                    for start in range(0, len(tokens), self.max_tokens):
                        yield tokens[start : start + self.max_tokens]
                if self.limit_lines is not None and n_lines >= self.limit_lines:
                    return
        finally:
            bar.close()

    def describe(self) -> dict:
        """What a run records: the patterns, the files (name, bytes) and the tokenizer."""
        return {
            "patterns": self.patterns,
            "files": [{"path": os.fspath(f), "bytes": f.stat().st_size} for f in self.files],
            "tokenizer": self.tokenizer.to_dict(),
            "max_tokens_per_line": self.max_tokens,
            "limit_lines": self.limit_lines,
        }


# A sentence stream's resume point (the biLM's and the transformers' streams over a sharded corpus)
@dataclass(frozen=True, order=True)
class Position:
    """Where the sentence stream stands: the next sentence is number ``offset`` of the
    ``shard``-th shard (in the epoch's shuffled order) of epoch ``epoch``."""

    epoch: int = 0
    shard: int = 0
    offset: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Position:
        return cls(**{k: int(v) for k, v in data.items()})
