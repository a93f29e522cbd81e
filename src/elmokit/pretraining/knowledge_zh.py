"""ERNIE 1.0's knowledge masking on Chinese (Sun et al. 2019, §3.2 and §4.1): characters, phrases, entities.

ERNIE is Chinese: "for Chinese corpus, we add spaces around every character in the CJK Unicode range and
use the WordPiece to tokenize" (§4.1), so the *basic* masking unit is a character, as in Chinese BERT;
a *phrase* is a word of the lexical analyser and an *entity* a name found by a named-entity tool
(§3.2: persons, locations, organisations). Here:

- characters: elmokit's WordPiece tokenizer already does this: BERT's normaliser puts spaces around
  every CJK ideograph, so each Han character is one token (other scripts and digits stay WordPiece
  words, a token each piece). The basic stage masks single tokens: BERT's token masking.
- phrases: the corpus is segmented by jieba beforehand (``segment_corpus``; ERNIE likewise prepared its
  segmentation offline), so the corpus words that reach the objective (``word_ids``) are jieba words; a
  word of two or more tokens is a phrase (a Han word of 2+ characters; a one-token word is a unit of
  the basic stage anyway).
- entities: a character NER tagger (elmokit's ``SequenceTagger``; ``benchmarks/zh_ernie.py`` trains one
  on People's Daily's nr/ns/nt) tags every corpus line once (``tag_entity_cache``) into a JSON-lines
  cache: ``{"line": the segmented line, "entities": [[start, end, type], ...]}`` (ranges over the line's
  characters without its spaces, end exclusive; lines with no entity left out). ``EntityCache`` turns each
  cached line into the run tokenizer's ids, with the entities as token ranges, and finds the cached lines inside an example's
  ids: a segment is whole corpus sentences in order (``corpus.segments``), so scanning it from the
  left and taking the longest cached line that starts at each point recovers every tagged sentence.
  Tagging once keeps the tagger out of the training steps' CPU-seconds. What it misses, by design: a
  sentence cut by the segment's length limit (its tokens after the cut have no entity).

``ChineseUnits.units(ids, word_ids, stage)`` gives what ``ErnieObjective`` masks: per-token word ids (every
maskable token a unit of its own) and the stage's spans as ranges over those units.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from elmokit.io import atomic_path
from elmokit.pretraining.corpus import sentence_windows, split_sentences
from elmokit.pretraining.masking import MaskingVocab
from elmokit.tasks.data import bio_spans
from elmokit.text.segmenters import check_segmenter, segment
from elmokit.text.subword_tokenizers import backend_tokenizer

Span = tuple[int, int]
KEY = 4  # cached lines are indexed by their first KEY token ids (fewer for a shorter line)


# --------------------------------------------------------------------------- offline preparation


def segment_corpus(source: str | os.PathLike, target: str | os.PathLike, *, segmenter: str = "jieba",
                   log_every: int = 0) -> int:
    """Write ``source`` (one unsegmented line a sentence) to ``target`` with its words separated by spaces
    (``elmokit.text.segmenters.segment``); blank lines stay blank. Written aside, then renamed. Returns the
    number of lines."""
    check_segmenter(segmenter)
    count = 0
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp, open(source, encoding="utf-8") as f, open(tmp, "w", encoding="utf-8") as out:
        for count, line in enumerate(f, 1):
            out.write(" ".join(segment(segmenter, line.strip())) + "\n")
            if log_every and count % log_every == 0:
                print(f"segmented {count:,} lines", flush=True)
    return count


def tag_entity_cache(tagger, lines: Iterable[str], target: str | os.PathLike, *, batch_size: int = 256) -> dict:
    """Tag each line's characters (spaces removed) with a BIO NER ``tagger`` (``predict(sentences) -> tags``)
    and write the lines that hold an entity to ``target`` as JSON lines (see the module docstring; the line
    is kept with its spaces, so its words, and so the corpus reader's windows, can be rebuilt).
    Returns counts: lines, lines with entities, entities per type."""
    counts = {"lines": 0, "lines_with_entities": 0, "entities": {}}
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(target) as tmp, open(tmp, "w", encoding="utf-8") as out:
        batch: list[str] = []

        def flush() -> None:
            lines = [line for line in batch if line]
            tags = tagger.predict([list("".join(line.split())) for line in lines], batch_size=64) if lines else []
            for line, row in zip(lines, tags):
                spans = [[s, e, kind] for s, e, kind in bio_spans(row)]
                if spans:
                    counts["lines_with_entities"] += 1
                    for *_, kind in spans:
                        counts["entities"][kind] = counts["entities"].get(kind, 0) + 1
                    out.write(json.dumps({"line": line, "entities": spans}, ensure_ascii=False) + "\n")
            batch.clear()

        for line in lines:
            counts["lines"] += 1
            batch.append(" ".join(line.split()))
            if len(batch) >= batch_size:
                flush()
        flush()
    return counts


# --------------------------------------------------------------------------- entities in a run's token ids


class EntityCache:
    """The cached lines of ``tag_entity_cache`` in one tokenizer's ids, and the entities of a token sequence.

    Args:
        rows: ``(line, [(start, end, type), ...])`` per corpus line (ranges over its characters without spaces).
        tokenizer: the run's tokenizer (a transformers fast tokenizer).
        window: the segment capacity (``max_tokens - 2``): a sentence longer than that reaches the examples
            cut into windows at word boundaries (``corpus.sentence_windows``), so each window is indexed on its own,
            with the parts of the entities inside it.
    """

    def __init__(self, rows: Iterable[tuple[str, Sequence[Sequence]]], tokenizer, *, window: int | None = None) -> None:
        backend = backend_tokenizer(tokenizer)
        self.index: dict[tuple[int, ...], dict[tuple[int, ...], list[Span]]] = {}
        self.lines = 0
        for text, entities in rows:
            # the corpus reader's view of the line: sentences of regex words, whose characters are the text's
            # characters in order (the words cover every non-space character)
            char_start = 0
            for words in split_sentences(text):
                encoding = backend.encode(words, is_pretokenized=True, add_special_tokens=False)
                word_start = np.cumsum([0, *map(len, words)]) + char_start
                starts = [int(word_start[w]) + a for w, (a, _) in zip(encoding.word_ids, encoding.offsets)]
                ends = [int(word_start[w]) + b for w, (_, b) in zip(encoding.word_ids, encoding.offsets)]
                spans = []
                for start, end, *_ in entities:  # tokens overlapping the entity's characters
                    inside = [t for t in range(len(starts)) if starts[t] < end and ends[t] > start]
                    if inside:
                        spans.append((inside[0], inside[-1] + 1))
                char_start = int(word_start[-1])
                ids, cut = list(encoding.ids), 0
                # a sentence longer than a segment reaches the examples in windows (corpus.sentence_windows): index each
                pieces = sentence_windows(ids, list(encoding.word_ids), window) if window and len(ids) > window else [(ids, None)]
                for piece, _ in pieces:
                    inside = [(max(s, cut) - cut, min(e, cut + len(piece)) - cut) for s, e in spans
                              if s < cut + len(piece) and e > cut]
                    cut += len(piece)
                    if inside and piece:
                        self.index.setdefault(tuple(piece[:KEY]), {})[tuple(piece)] = inside
                        self.lines += 1

    @classmethod
    def from_file(cls, path: str | os.PathLike, tokenizer, *, window: int | None = None) -> EntityCache:
        """Read a cache written by ``tag_entity_cache``; a bad line is an error naming file and line."""
        rows = []
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                    text, entities = row["line"], row["entities"]
                    length = len("".join(text.split()))
                    for start, end, _ in entities:
                        if not 0 <= int(start) < int(end) <= length:
                            raise ValueError(f"entity ({start}, {end}) is outside the line of {length} characters")
                except (ValueError, KeyError, TypeError) as error:
                    raise ValueError(f"{path}:{number}: not an entity cache line ({error}); expected "
                                     '{"line": ..., "entities": [[start, end, type], ...]}') from None
                rows.append((text, entities))
        return cls(rows, tokenizer, window=window)

    def spans(self, ids: Sequence[int]) -> list[Span]:
        """Entity token ranges in ``ids`` (a run of corpus tokens, no specials): from the left, the longest
        cached line starting at each point is taken and skipped over; where none starts, one token on."""
        ids = tuple(int(i) for i in ids)
        out: list[Span] = []
        position = 0
        while position < len(ids):
            best = None
            for k in range(1, KEY + 1):
                for line, spans in self.index.get(ids[position:position + k], {}).items():
                    if ids[position:position + len(line)] == line and (best is None or len(line) > len(best[0])):
                        best = (line, spans)
            if best is None:
                position += 1
                continue
            out += [(position + s, position + e) for s, e in best[1]]
            position += len(best[0])
        return out


# --------------------------------------------------------------------------- the units of a stage


class ChineseUnits:
    """Per-token units and the spans of a stage for Chinese (see the module docstring).

    ``units(ids, word_ids, stage)`` -> ``(token_word_ids, spans)``: ``token_word_ids`` numbers the maskable
    tokens 0, 1, ... (None for a special), so every token is a unit of its own; ``spans`` are ranges over
    those numbers: jieba words of 2+ tokens ("phrase"), cached entities ("entity"), none ("basic")."""

    def __init__(self, vocab: MaskingVocab, entities: EntityCache | None = None) -> None:
        self.vocab, self.entities = vocab, entities

    def units(self, ids, word_ids, stage: str) -> tuple[list[int | None], list[Span]]:
        ids = [int(i) for i in ids]
        if len(word_ids) != len(ids):
            raise ValueError(f"word_ids has {len(word_ids)} entries for {len(ids)} token ids")
        special = self.vocab.special_ids
        positions = [p for p, (i, w) in enumerate(zip(ids, word_ids))
                     if w is not None and int(w) >= 0 and i not in special]
        unit_of = {p: u for u, p in enumerate(positions)}
        token_word_ids: list[int | None] = [unit_of.get(p) for p in range(len(ids))]
        if stage == "basic":
            return token_word_ids, []
        if stage == "phrase":
            spans, start = [], 0
            for u in range(1, len(positions) + 1):  # runs of units with one jieba word index
                if u == len(positions) or word_ids[positions[u]] != word_ids[positions[u - 1]] \
                        or positions[u] != positions[u - 1] + 1:
                    if u - start >= 2:
                        spans.append((start, u))
                    start = u
            return token_word_ids, spans
        if stage == "entity":
            if self.entities is None:
                raise ValueError("the entity stage of Chinese ERNIE needs an entity cache (--ernie-entities)")
            corpus = [p for p, w in enumerate(word_ids) if w is not None and int(w) >= 0]  # [UNK] included
            spans = []
            for s, e in self.entities.spans([ids[p] for p in corpus]):
                inside = [unit_of[p] for p in corpus[s:e] if p in unit_of]
                if inside:
                    spans.append((inside[0], inside[-1] + 1))
            return token_word_ids, spans
        raise ValueError(f"unknown ERNIE stage {stage!r}")
