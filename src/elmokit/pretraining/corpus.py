"""From corpus files to each objective family's examples, as an exactly resumable stream.

Documents. A corpus file holds documents separated by blank lines, one paragraph a line (the layout
of elmokit's Gutenberg corpus: a book is a document, ``SOURCE.txt``). A paragraph is split into
sentences after ``.``, ``!`` or ``?`` (optionally followed by a closing quote or bracket) and a space;
a sentence into words with elmokit's regex tokenizer (``\\w+|[^\\w\\s]``, BERT's basic tokenizer up to
accents), and the words into subword pieces with the run's tokenizer (``tokenizers.encode_words``,
so every word keeps its word index: whole-word and span masking need it).

Examples, per ``EXAMPLE_READERS`` entry (``registry.OBJECTIVES`` names one per objective). Every
reader gets the documents of one file (a *shard*) as ``Document``s and a ``numpy`` generator; inputs
longer than ``max_tokens`` are cut into windows, so no example is longer than the model's positions:

- ``pairs`` (BERT): ``masking.nsp_pairs``: consecutive sentences within a document, 50% IsNext; a
  shard needs at least two documents (NotNext draws from another one).
- ``packed`` (RoBERTa): ``masking.pack_full_sentences``: FULL-SENTENCES packs across documents.
- ``segments`` (SpanBERT, WWM): single segments ``[CLS] s1 s2 ... [SEP]`` of consecutive whole
  sentences of one document; a sentence longer than a segment is cut at word boundaries.
- ``causal`` (GPT, GPT-2): contiguous text: the documents' tokens in order, an end-of-text token after
  each document (GPT-2's ``<|endoftext|>``), cut into windows of exactly ``max_tokens`` (the last
  window of a shard may be shorter).

The stream (``ExampleStream``): epoch ``e`` visits the shards in an order drawn from ``(seed, e)``;
a shard's examples are built with a generator seeded from ``(seed, e, shard)`` (so NSP pairs are
redrawn each epoch, like BERT's ``dupe_factor``) and emitted in a permutation drawn from the same
seed. A ``text.corpus.Position`` ``(epoch, shard, offset)`` says where it stands; resuming rebuilds
that shard and skips ``offset`` examples, so nothing but the position is saved. A shard's documents
are held in memory while its examples are built: split a large corpus into shards (files).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from elmokit.pretraining.masking import nsp_pairs, pack_full_sentences
from elmokit.pretraining.permutation import batchified_streams, document_streams
from elmokit.text.corpus import CorpusError, Position, Tokenizer, expand_patterns, open_text
from elmokit.text.subword_tokenizers import encode_words

# a sentence ends after . ! or ? (optionally closed by a quote or bracket) followed by white space
SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[.!?][\"'”’)\]])\s+")
WORDS = Tokenizer(kind="regex")


def split_sentences(paragraph: str) -> list[list[str]]:
    """The sentences of one paragraph, each a list of words (empty sentences dropped)."""
    return [words for part in SENTENCE_END.split(paragraph) if (words := WORDS(part))]


def read_paragraph_documents(path: str | Path) -> Iterator[list[str]]:
    """The documents of one file (blank-line separated), each a list of its paragraphs (one a line)."""
    document: list[str] = []
    try:
        with open_text(path) as handle:
            for line in handle:
                if not line.strip():
                    if document:
                        yield document
                    document = []
                    continue
                document.append(line.strip())
    except (UnicodeDecodeError, EOFError, OSError) as error:
        raise CorpusError(f"{path}: unreadable ({error}); fix: give UTF-8 text files (plain, .xz, .gz)") from None
    if document:
        yield document


def read_documents(path: str | Path) -> Iterator[list[list[str]]]:
    """The documents of one file (blank-line separated), each a list of sentences of words."""
    for paragraphs in read_paragraph_documents(path):
        if sentences := [sentence for paragraph in paragraphs for sentence in split_sentences(paragraph)]:
            yield sentences


@dataclass
class Document:
    """One document as subword ids: per sentence the ids (no specials) and each id's word index; ``words``:
    per sentence its words as read (the ``ernie2`` reader needs their case)."""

    ids: list[list[int]]
    word_ids: list[list[int]]
    words: list[list[str]] | None = None


def encode_document(tokenizer, sentences: Sequence[Sequence[str]]) -> Document:
    ids, word_ids = [], []
    for words in sentences:
        encoding = encode_words(tokenizer, words, add_special_tokens=False)
        ids.append(list(encoding.input_ids))
        word_ids.append([int(w) for w in encoding.word_ids])
    return Document(ids, word_ids, [list(w) for w in sentences])


@dataclass(frozen=True)
class SpecialIds:
    """The ids the readers put around examples (from the tokenizer)."""

    cls: int | None = None
    sep: int | None = None
    bos: int | None = None
    eos: int | None = None

    @classmethod
    def from_tokenizer(cls, tokenizer) -> SpecialIds:
        return cls(tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)


# --------------------------------------------------------------------------- the readers


def sentence_windows(ids: list[int], word_ids: list[int], capacity: int) -> Iterator[tuple[list[int], list[int]]]:
    """Cut one sentence into pieces of at most ``capacity`` tokens, at word boundaries where a word fits."""
    start = 0
    while start < len(ids):
        end = min(start + capacity, len(ids))
        if end < len(ids) and word_ids[end] == word_ids[end - 1]:  # would split a word: cut before it
            cut = end - 1
            while cut > start and word_ids[cut] == word_ids[cut - 1]:
                cut -= 1
            end = cut if cut > start else end  # a word longer than a window is cut anyway
        yield ids[start:end], word_ids[start:end]
        start = end


def pairs(documents: list[Document], *, max_tokens: int, special: SpecialIds, rng: np.random.Generator,
          source: str = "") -> list[Any]:
    if len(documents) < 2:
        raise CorpusError(f"{source}: {len(documents)} document(s); next-sentence prediction draws NotNext from another "
                          "document. Fix: separate the documents of each file with a blank line")
    return nsp_pairs([d.ids for d in documents], max_tokens=max_tokens, cls_id=special.cls, sep_id=special.sep, rng=rng,
                     word_ids=[d.word_ids for d in documents])


def packed(documents: list[Document], *, max_tokens: int, special: SpecialIds, rng: np.random.Generator,
           source: str = "") -> list[dict]:
    packs = pack_full_sentences((d.ids for d in documents), max_tokens, bos_id=special.bos, eos_id=special.eos)
    return [{"input_ids": np.asarray(p, dtype=np.int64)} for p in packs]


def segments(documents: list[Document], *, max_tokens: int, special: SpecialIds, rng: np.random.Generator,
             source: str = "") -> list[dict]:
    capacity = max_tokens - 2
    if capacity < 1:
        raise ValueError(f"max_tokens={max_tokens}: a segment needs room for [CLS], [SEP] and one token")
    out: list[dict] = []

    def emit(ids: list[int], words: list[int]) -> None:
        renumbered, last, index = [], None, -1
        for w in words:  # consecutive word indices across the segment's sentences
            if w != last:
                index, last = index + 1, w
            renumbered.append(index)
        out.append({"input_ids": np.asarray([special.cls, *ids, special.sep], dtype=np.int64),
                    "word_ids": [None, *renumbered, None]})

    for document in documents:
        ids, words = [], []
        for sentence_ids, sentence_words in zip(document.ids, document.word_ids):
            if not sentence_ids:
                continue
            if ids and len(ids) + len(sentence_ids) > capacity:
                emit(ids, words)
                ids, words = [], []
            if len(sentence_ids) > capacity:
                for piece_ids, piece_words in sentence_windows(sentence_ids, sentence_words, capacity):
                    emit(piece_ids, piece_words)
                continue
            # a sentence's word indices restart at 0: shift them past the previous sentence's
            shift = (words[-1] + 1) if words else 0
            ids += sentence_ids
            words += [w + shift for w in sentence_words]
        if ids:
            emit(ids, words)
    return out


def causal(documents: list[Document], *, max_tokens: int, special: SpecialIds, rng: np.random.Generator,
           source: str = "") -> list[dict]:
    stream: list[int] = []
    for document in documents:
        for sentence in document.ids:
            stream += sentence
        if special.eos is not None:
            stream.append(special.eos)
    return [{"input_ids": np.asarray(stream[i:i + max_tokens], dtype=np.int64)}
            for i in range(0, len(stream), max_tokens) if len(stream[i:i + max_tokens]) > 1]


def documents(documents: list[Document], **kwargs) -> list[dict]:
    """One example per document, its text whole (``permutation.document_streams``)."""
    return document_streams(documents, **kwargs)


def segment_rows(documents: list[Document], *, max_tokens: int, special: SpecialIds, rng: np.random.Generator,
                 source: str = "", rows: int = 1) -> list[dict]:
    """XLNet: the shard's documents (shuffled whole, joined by [SEP] or the end token) as ``rows``
    contiguous parts of one stream cut into segments of ``max_tokens`` (``permutation.batchified_streams``,
    Transformer-XL's layout: a shard of fewer documents than rows still fills every row),
    emitted row by row, segment after segment: ``rows`` consecutive examples are one (B, T) segment and
    row i of the next segment continues row i. Each example: ``input_ids`` (T,), ``segment_index`` (0 at
    the shard's first segment: the memory starts afresh there). The stream keeps this order
    (``ORDERED_READERS``); the shard's tail shorter than a segment in some row is dropped."""
    streams = document_streams([documents[i] for i in rng.permutation(len(documents))])
    separator = special.sep if special.sep is not None else special.eos
    return [{"input_ids": segment[i], "segment_index": k}
            for k, segment in enumerate(batchified_streams(streams, rows, max_tokens, separator_id=separator))
            for i in range(rows)]


# name -> reader(documents, *, max_tokens, special, rng, source) -> examples. New families add theirs.
EXAMPLE_READERS: dict[str, Callable[..., list]] = {"pairs": pairs, "packed": packed, "segments": segments,
                                                    "causal": causal, "documents": documents,
                                                    "segment_rows": segment_rows}
# readers whose examples must be fed in the order they are made (rows of consecutive segments), whose
# batches are ``rows`` examples: the stream neither permutes them nor lets a batch straddle a segment
ORDERED_READERS = {"segment_rows"}


# --------------------------------------------------------------------------- the stream


class ExampleStream:
    """Examples of one family from corpus files, epoch after epoch (see the module docstring).

    Args:
        patterns: glob(s) of the corpus files (each file is a shard).
        tokenizer: the run's subword tokenizer (a transformers fast tokenizer).
        reader: an ``EXAMPLE_READERS`` name.
        max_tokens: the longest example, in subword tokens with the specials.
        seed: the data seed.
        rows: the batch size, for the readers of ``ORDERED_READERS`` (parallel streams); others ignore it.
    """

    def __init__(self, patterns: str | Sequence[str], *, tokenizer, reader: str, max_tokens: int, seed: int = 0,
                 rows: int = 1) -> None:
        if reader not in EXAMPLE_READERS:
            raise ValueError(f"unknown example reader {reader!r}; known: {', '.join(EXAMPLE_READERS)}")
        self.patterns = [patterns] if isinstance(patterns, str) else list(patterns)
        self.files: list[Path] = expand_patterns(self.patterns)
        self.tokenizer, self.reader, self.max_tokens, self.seed = tokenizer, reader, max_tokens, seed
        self.rows = rows
        self.special = SpecialIds.from_tokenizer(tokenizer)

    def describe(self) -> dict:
        return {"patterns": self.patterns, "files": [{"path": str(f), "bytes": f.stat().st_size} for f in self.files],
                "reader": self.reader, "max_tokens": self.max_tokens, "seed": self.seed}

    def shard_order(self, epoch: int) -> list[Path]:
        order = list(self.files)
        np.random.default_rng([self.seed, epoch, 0x5EED]).shuffle(order)
        return order

    def shard_examples(self, epoch: int, shard: int, path: Path) -> list:
        """The examples of one shard in this epoch, in the order they are fed."""
        rng = np.random.default_rng([self.seed, epoch, shard + 1])
        documents = [encode_document(self.tokenizer, d) for d in read_documents(path)]
        ordered = self.reader in ORDERED_READERS
        examples = EXAMPLE_READERS[self.reader](documents, max_tokens=self.max_tokens, special=self.special, rng=rng,
                                                source=str(path), **({"rows": self.rows} if ordered else {}))
        return examples if ordered else [examples[i] for i in rng.permutation(len(examples))]

    def __call__(self, start: Position | None = None) -> Iterator[tuple[Any, Position]]:
        """Yield ``(example, position after it)`` from ``start`` (default: the beginning) on, forever."""
        start = start or Position()
        epoch, shard, skip = start.epoch, start.shard, start.offset
        while True:
            order = self.shard_order(epoch)
            if shard >= len(order):
                raise ValueError(f"position {start} is past the {len(order)} shards of the corpus")
            whole_epoch, emitted = shard == 0 and skip == 0, False
            while shard < len(order):
                examples = self.shard_examples(epoch, shard, order[shard])
                if skip > len(examples):
                    raise ValueError(f"resume position {start} is past the end of shard {order[shard]} "
                                     f"({len(examples)} examples); has the corpus changed since the checkpoint?")
                for offset in range(skip, len(examples)):
                    emitted = True
                    yield examples[offset], Position(epoch, shard, offset + 1)
                skip = 0
                shard += 1
            if whole_epoch and not emitted:  # else this loop would spin forever
                raise CorpusError(f"corpus {', '.join(self.patterns)}: no examples: the files are empty or hold blank "
                                  "lines only; fix: give a corpus with text")
            epoch, shard = epoch + 1, 0
