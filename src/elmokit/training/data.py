"""Streaming training data: shuffled sentences, whole-sentence batches, an exact position.

The corpus is one or more UTF-8 files (plain, .xz, .gz), one sentence or paragraph per line, read
shard by shard (a shard is one file) through :class:`elmokit.text.corpus.Corpus` and never
loaded whole. Lines longer than ``max_length`` tokens are cut into consecutive pieces of at most
``max_length`` tokens; a piece is the unit everything below works on ("sentence").

Order, for epoch e (everything seeded from ``seed``; nothing depends on wall time or threads):

1. the shard order is a permutation drawn from ``(seed, e)``;
2. inside each shard a bounded shuffle buffer of ``shuffle_buffer`` sentences, drawn from
   ``(seed, e, shard)``: once full, each new sentence replaces a random one, which is emitted;
   at the end of the shard the rest leaves in a random order. So memory is bounded and a shard's
   tail is shuffled only among itself (a buffer at least as large as a shard is a full shuffle).

A :class:`Position` ``(epoch, shard, offset)`` - the number of sentences already emitted from
the shard-th shard of the epoch's order - says where the stream stands. Because the buffer is
emptied at every shard end, resuming at a position only re-reads (and re-tokenises) the first
part of one shard and replays the buffer's draws; no buffer contents need saving.

Batches are made of consecutive sentences of that stream, ``batch_size`` sentences or, with
``batch_tokens``, as many as fit in that many tokens (at least one); a batch never spans two
epochs. Under data parallelism every rank computes the same global batches and keeps every
world-size-th sentence of each (``sentences[rank::world_size]``), so the union over ranks is
exactly what one process would train on with the same global batch.

Carried-state windows (``window_batches``; bilm-tf's ``unroll_steps``, Zaremba et al.'s truncated
BPTT). Epoch e's sentences, in the order above, are each framed ``<S> w_1 .. w_n </S>`` and
concatenated into one token stream, which is cut into ``rows`` contiguous rows of equal length
(the remainder, fewer than ``rows`` tokens, is dropped). Batch k holds tokens ``kT .. kT + T`` of
every row (T inputs; the last token is a target only) for the forward LM, and the same of every
row read from its end for the backward LM. The LSTM state is carried from batch k to k + 1, so a
row is read as one text, and reset at each epoch start. The position of a window batch is
``Position(epoch, 0, k + 1)``: windows of the epoch already trained. An epoch is tokenised once
into int32 type ids (4 bytes per token), so it must fit in memory; resuming rebuilds it.
"""

from __future__ import annotations

import importlib
import random
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from elmokit.engine.run_folder import Position
from elmokit.text.corpus import Corpus, CorpusError, Tokenizer, expand_patterns

NO_SENTENCES = "no sentences: the files are empty or hold blank lines only; fix: give a corpus with text"

__all__ = ["Position", "Batch", "SentenceStream", "batches", "make_tokenizer", "HookTokenizer",
           "WindowBatch", "window_batches", "BOS_TYPE", "EOS_TYPE"]


@dataclass(frozen=True)
class HookTokenizer:
    """A user tokenizer: ``"package.module:function"`` mapping a line (str) to tokens (list[str]).

    Recorded by its import path, so a run folder still says how its text was cut.
    """

    callable: str
    lowercase: bool = False

    def __post_init__(self) -> None:
        self._resolve()  # fail early, naming the path

    def _resolve(self) -> Callable[[str], list[str]]:
        module_name, _, attribute = self.callable.partition(":")
        if not module_name or not attribute:
            raise ValueError(f"tokenizer hook {self.callable!r} must look like 'package.module:function'")
        try:
            func = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as error:
            raise ValueError(f"tokenizer hook {self.callable!r} cannot be imported: {error}") from None
        return func

    def __call__(self, line: str) -> list[str]:
        if self.lowercase:
            line = line.lower()
        return list(self._resolve()(line))

    def to_dict(self) -> dict:
        return {"kind": "hook", "callable": self.callable, "lowercase": self.lowercase}


def make_tokenizer(spec: dict | None) -> Tokenizer | HookTokenizer:
    """A tokenizer from its recorded form: ``{"kind": "whitespace" | "regex" | "hook", ...}``."""
    spec = dict(spec or {"kind": "whitespace"})
    if spec.get("kind") == "hook":
        return HookTokenizer(callable=spec["callable"], lowercase=bool(spec.get("lowercase", False)))
    return Tokenizer.from_dict(spec)


@dataclass
class Batch:
    """One global batch: its sentences (all ranks), and the stream position after it."""

    sentences: list[list[str]]
    epoch: int
    end: Position

    def part(self, rank: int, world_size: int) -> list[list[str]]:
        return self.sentences[rank::world_size]

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.sentences)


class SentenceStream:
    """The shuffled, endless (epoch after epoch) stream of sentences described in the module doc.

    Args:
        patterns: glob(s) of the corpus files (each file is a shard).
        tokenizer: how lines become tokens.
        max_length: cut longer lines into pieces of at most this many tokens.
        shuffle_buffer: sentences held by the per-shard shuffle buffer (1 = no shuffling).
        seed: the data seed.
    """

    def __init__(
        self,
        patterns: str | Sequence[str],
        *,
        tokenizer: Tokenizer | HookTokenizer | None = None,
        max_length: int = 50,
        shuffle_buffer: int = 10_000,
        seed: int = 0,
    ) -> None:
        if max_length < 1 or shuffle_buffer < 1:
            raise ValueError("max_length and shuffle_buffer must be at least 1")
        self.patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        self.files: list[Path] = expand_patterns(self.patterns)
        self.tokenizer = tokenizer or Tokenizer()
        self.max_length = max_length
        self.shuffle_buffer = shuffle_buffer
        self.seed = seed

    def check_not_empty(self) -> None:
        """Raise CorpusError naming the corpus when it holds no sentence (cheap: stops at the first)."""
        corpus = Corpus(self.patterns, tokenizer=self.tokenizer, max_tokens=self.max_length)
        if next(iter(corpus), None) is None:
            raise CorpusError(f"corpus {', '.join(map(str, self.patterns))}: {NO_SENTENCES}")

    def describe(self) -> dict:
        corpus = Corpus(self.patterns, tokenizer=self.tokenizer, max_tokens=self.max_length)
        return {**corpus.describe(), "shuffle_buffer": self.shuffle_buffer, "seed": self.seed}

    def shard_order(self, epoch: int) -> list[Path]:
        order = list(self.files)
        random.Random(f"elmokit.data/{self.seed}/{epoch}/order").shuffle(order)
        return order

    def _shard_sentences(self, epoch: int, shard: int, path: Path) -> Iterator[list[str]]:
        """One shard's sentences after its shuffle buffer."""
        rng = random.Random(f"elmokit.data/{self.seed}/{epoch}/{shard}")
        buffer: list[list[str]] = []
        size = self.shuffle_buffer
        for sentence in Corpus(str(path), tokenizer=self.tokenizer, max_tokens=self.max_length):
            if len(buffer) < size:
                buffer.append(sentence)
                continue
            j = rng.randrange(size)
            out, buffer[j] = buffer[j], sentence
            yield out
        rng.shuffle(buffer)
        yield from buffer

    def __call__(self, start: Position = Position()) -> Iterator[tuple[list[str], Position]]:
        """Yield ``(sentence, position after it)`` from ``start`` on, forever."""
        epoch, shard, skip = start.epoch, start.shard, start.offset
        while True:
            whole_epoch, emitted = shard == 0 and skip == 0, False
            order = self.shard_order(epoch)
            if shard >= len(order):
                raise ValueError(f"position {start} is past the {len(order)} shards of the corpus")
            while shard < len(order):
                offset = 0
                for sentence in self._shard_sentences(epoch, shard, order[shard]):
                    offset += 1
                    if offset <= skip:
                        continue  # replaying up to the resume position
                    emitted = True
                    yield sentence, Position(epoch, shard, offset)
                if skip > offset:
                    raise ValueError(
                        f"resume position {start} is past the end of shard {order[shard]} ({offset} sentences); "
                        "has the corpus, the tokenizer or max_length changed since the checkpoint?"
                    )
                skip = 0
                shard += 1
            if whole_epoch and not emitted:  # else this loop would spin forever
                raise CorpusError(f"corpus {', '.join(map(str, self.patterns))}: {NO_SENTENCES}")
            epoch, shard = epoch + 1, 0


def batches(
    stream: SentenceStream,
    *,
    start: Position = Position(),
    batch_size: int | None = 64,
    batch_tokens: int | None = None,
) -> Iterator[Batch]:
    """Global batches from ``start`` on, forever. Exactly one of the two sizes is used:
    ``batch_tokens`` if given (sentences are added while the total stays within it), else
    ``batch_size`` sentences. A batch ends early at an epoch boundary."""
    if batch_tokens is None and (batch_size is None or batch_size < 1):
        raise ValueError("give batch_size >= 1 or batch_tokens")
    iterator = stream(start)
    pending: tuple[list[str], Position] | None = None
    last = start
    while True:
        sentences: list[list[str]] = []
        n_tokens = 0
        epoch = None
        while True:
            item = pending if pending is not None else next(iterator)
            pending = None
            sentence, after = item
            if epoch is None:
                epoch = after.epoch
            full = (
                n_tokens + len(sentence) > batch_tokens if batch_tokens is not None else len(sentences) >= batch_size
            )
            if after.epoch != epoch or (sentences and full):
                pending = item  # belongs to the next batch; the position stays before it
                break
            sentences.append(sentence)
            n_tokens += len(sentence)
            last = after
        yield Batch(sentences, epoch, last)


# ---- carried-state windows -------------------------------------------------------------------

BOS_TYPE, EOS_TYPE = 0, 1  # type ids of the sentence boundaries in a window; words are >= 2


@dataclass
class WindowBatch:
    """One window of every row: type ids (rows, T + 1) for each direction, in its reading order
    (``backward`` is the row reversed), the strings of the word types (``types[i]`` for id i >= 2),
    the epoch, and the position after it."""

    forward: np.ndarray
    backward: np.ndarray
    types: list[str]
    epoch: int
    end: Position
    first_of_epoch: bool

    @property
    def num_tokens(self) -> int:
        """Words among the forward inputs (boundaries and the target-only last token not counted)."""
        return int((self.forward[:, :-1] > EOS_TYPE).sum())


def epoch_rows(stream: SentenceStream, epoch: int, rows: int) -> tuple[np.ndarray, list[str]]:
    """Epoch ``epoch`` as ``rows`` contiguous rows of framed sentences: (type ids (rows, n), types)."""
    types: list[str] = ["<S>", "</S>"]  # placeholders: ids 0 and 1 are the boundaries, not these strings
    index: dict[str, int] = {}
    ids = array("i")  # 4 bytes per token while the epoch is read (a list would hold ~40 per token)
    for sentence, after in stream(Position(epoch, 0, 0)):
        if after.epoch != epoch:
            break
        ids.append(BOS_TYPE)
        for token in sentence:
            type_id = index.get(token)
            if type_id is None:
                type_id = index[token] = len(types)
                types.append(token)
            ids.append(type_id)
        ids.append(EOS_TYPE)
    length = len(ids) // rows
    return np.frombuffer(ids, dtype=np.int32, count=length * rows).reshape(rows, length).copy(), types


def window_batches(stream: SentenceStream, *, rows: int, window: int, start: Position = Position()) -> Iterator[WindowBatch]:
    """Carried-state window batches from ``start`` on, forever (module doc)."""
    if rows < 1 or window < 1:
        raise ValueError("rows and window must be at least 1")
    epoch, first = start.epoch, start.offset
    while True:
        forward, types = epoch_rows(stream, epoch, rows)
        n_windows = (forward.shape[1] - 1) // window
        if n_windows < 1:
            raise CorpusError(f"corpus {', '.join(map(str, stream.patterns))}: an epoch holds {forward.size} tokens, "
                              f"too few for {rows} rows of windows of {window} (+1) tokens; fix: a smaller "
                              "batch size or window")
        if first > n_windows:
            raise ValueError(f"resume position {start} is past the {n_windows} windows of epoch {epoch}; "
                             "has the corpus, the tokenizer, the batch size or the window changed since the checkpoint?")
        backward = np.ascontiguousarray(forward[:, ::-1])
        for k in range(first, n_windows):
            span = slice(k * window, (k + 1) * window + 1)
            yield WindowBatch(forward[:, span], backward[:, span], types, epoch, Position(epoch, 0, k + 1), k == 0)
        epoch, first = epoch + 1, 0
