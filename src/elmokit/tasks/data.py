"""Readers and writers of task data: CoNLL-U (POS), CoNLL-style columns (NER), labelled TSV.

* CoNLL-U (Universal Dependencies): 10 tab-separated columns; the UPOS (or XPOS) column is the
  label. Multiword-token ranges (``1-2``) and empty nodes (``1.1``) are skipped, so the tokens are
  the syntactic words, as UD POS results count them. Comment lines start with ``#``.
* CoNLL columns: one token per line, the token first and the label last (tab- or
  space-separated: WikiANN ``en:token<TAB>tag``, WNUT-17 ``token<TAB>tag``, CoNLL-2003
  ``token POS chunk tag``); blank or whitespace-only lines end a sentence; ``-DOCSTART-`` lines
  separate documents and are dropped. NER labels are returned in BIO (IOB2): IOB1 input (chunks
  opened by ``I-``) is converted, which leaves well-formed BIO unchanged.
* Labelled TSV (sentence classification): ``label<TAB>whitespace-tokenised sentence`` per line.
* Plain text: one whitespace-tokenised sentence per line.

Every reader decodes its file as UTF-8 line by line (``read_lines``). Errors name ``file:line``
and the problem (``DataFileError``; ``TaggingDataError`` for the tagging formats).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elmokit.errors import InputNotFound, UserError
from elmokit.io import atomic_path

CONLLU_COLUMNS = {"upos": 3, "xpos": 4}


class DataFileError(UserError):
    """A task data file that cannot be read as it is; the message names file and line and the fix."""


class TaggingDataError(DataFileError):
    """A tagging data file that cannot be read as it is; the message names file and line."""


@dataclass
class TaggedCorpus:
    """Tokenised sentences with one label per token."""

    sentences: list[list[str]]
    labels: list[list[str]]
    path: str = ""
    notes: list[str] = field(default_factory=list)  # what the reader changed (IOB1 chunks converted, ...)

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def num_tokens(self) -> int:
        return sum(len(s) for s in self.sentences)

    def label_set(self) -> list[str]:
        """The labels seen, sorted ('O' first)."""
        return sorted({label for row in self.labels for label in row}, key=lambda l: (l != "O", l))

    def subset(self, count: int | None) -> TaggedCorpus:
        """The first ``count`` sentences (all when None)."""
        if count is None or count >= len(self):
            return self
        return TaggedCorpus(self.sentences[:count], self.labels[:count], self.path, list(self.notes))


def read_lines(path: str | os.PathLike, error: type[DataFileError] = DataFileError) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of a UTF-8 text file, line endings removed, read line by line.

    A line that is not valid UTF-8 raises ``error`` naming the file, the line and the byte (the
    whole file is not decoded at once, so the line number is exact)."""
    path = Path(path)
    if not path.is_file():
        raise InputNotFound(f"{path}: no such file" if not path.is_dir() else f"{path}: is a folder, not a file")
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as failure:
                raise error(f"{path}:{number}: not valid UTF-8 (byte {failure.start + 1} of the line: "
                            f"{raw[failure.start:failure.start + 1]!r}); re-encode the file as UTF-8, "
                            "e.g. iconv -f latin1 -t utf-8") from None
            yield number, line.rstrip("\r\n")


def _lines(path: str | os.PathLike):
    return read_lines(path, TaggingDataError)


def read_conllu(path: str | os.PathLike, column: str = "upos") -> TaggedCorpus:
    """Sentences and UPOS (or ``column="xpos"``) labels of a CoNLL-U file."""
    if column not in CONLLU_COLUMNS:
        raise ValueError(f"column must be one of {', '.join(CONLLU_COLUMNS)}, got {column!r}")
    label_index = CONLLU_COLUMNS[column]
    corpus = TaggedCorpus([], [], str(path))
    tokens: list[str] = []
    labels: list[str] = []
    for number, line in _lines(path):
        if not line.strip():
            if tokens:
                corpus.sentences.append(tokens)
                corpus.labels.append(labels)
            tokens, labels = [], []
            continue
        if line.startswith("#"):
            continue
        fields = line.split("\t")
        where = f"{path}:{number}"
        if len(fields) != 10:
            raise TaggingDataError(f"{where}: a CoNLL-U word line has 10 tab-separated columns, this one has "
                                   f"{len(fields)}: {line[:80]!r}")
        word_id = fields[0]
        if "-" in word_id or "." in word_id:
            continue  # multiword-token range or empty node: not a syntactic word
        if not word_id.isdigit():
            raise TaggingDataError(f"{where}: the ID column must be a number, a range 1-2 or an empty node 1.1, "
                                   f"got {word_id!r}")
        form, label = fields[1], fields[label_index]
        if not form or label in ("", "_"):
            raise TaggingDataError(f"{where}: word {word_id} has no {'form' if not form else column.upper()}")
        tokens.append(form)
        labels.append(label)
    if tokens:
        corpus.sentences.append(tokens)
        corpus.labels.append(labels)
    if not corpus.sentences:
        raise TaggingDataError(f"{path}: no sentences found (is it CoNLL-U?)")
    return corpus


def _check_chunk_label(label: str, where: str) -> None:
    if label == "O":
        return
    prefix, sep, entity = label.partition("-")
    if not sep or prefix not in ("B", "I", "E", "S") or not entity:
        raise TaggingDataError(f"{where}: label {label!r} is not O or B-/I-/E-/S-TYPE")


def read_conll(
    path: str | os.PathLike, *, token_prefix: str = "", convert_to_bio: bool = True
) -> TaggedCorpus:
    """A CoNLL-style NER file: the token in the first column, the label in the last.

    ``token_prefix``: stripped from every token that has it (WikiANN's ``en:``).
    ``convert_to_bio``: turn IOB1 chunks into BIO (a no-op on BIO input); BIOES labels are
    returned unchanged.
    """
    corpus = TaggedCorpus([], [], str(path))
    tokens: list[str] = []
    labels: list[str] = []

    def end_sentence() -> None:
        nonlocal tokens, labels
        if tokens:
            corpus.sentences.append(tokens)
            corpus.labels.append(labels)
        tokens, labels = [], []

    for number, line in _lines(path):
        if not line.strip():
            end_sentence()
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        where = f"{path}:{number}"
        if fields[0] == "-DOCSTART-":
            end_sentence()
            continue
        if len(fields) < 2 or not fields[0].strip():
            raise TaggingDataError(f"{where}: expected 'token [columns...] label', got {line[:80]!r}")
        token, label = fields[0].strip(), fields[-1].strip()
        _check_chunk_label(label, where)
        if token_prefix and token.startswith(token_prefix):
            token = token[len(token_prefix):] or token
        tokens.append(token)
        labels.append(label)
    end_sentence()
    if not corpus.sentences:
        raise TaggingDataError(f"{path}: no sentences found")
    if convert_to_bio and not any(l[0] in "ES" for row in corpus.labels for l in row):
        changed = 0
        for i, row in enumerate(corpus.labels):
            converted = iob1_to_bio(row)
            changed += sum(a != b for a, b in zip(row, converted))
            corpus.labels[i] = converted
        if changed:
            corpus.notes.append(f"{changed} chunk-opening I- labels (IOB1) converted to B- (BIO)")
    return corpus


def iob1_to_bio(labels: Sequence[str]) -> list[str]:
    """IOB1 -> BIO (IOB2): an I-x that opens a chunk (after O, another type, or at the start) becomes B-x."""
    out = []
    previous = "O"
    for label in labels:
        if label.startswith("I-") and (previous == "O" or previous[2:] != label[2:]):
            label = "B-" + label[2:]
        out.append(label)
        previous = label
    return out


def bio_to_bioes(labels: Sequence[str]) -> list[str]:
    """BIO -> BIOES: single-token chunks become S-x, the last token of a longer chunk E-x."""
    out = []
    for i, label in enumerate(labels):
        following = labels[i + 1] if i + 1 < len(labels) else "O"
        continues = following == "I-" + label[2:]
        if label.startswith("B-"):
            out.append(label if continues else "S-" + label[2:])
        elif label.startswith("I-"):
            out.append(label if continues else "E-" + label[2:])
        else:
            out.append(label)
    return out


def bioes_to_bio(labels: Sequence[str]) -> list[str]:
    """BIOES -> BIO: S-x -> B-x, E-x -> I-x."""
    return ["B-" + l[2:] if l.startswith("S-") else "I-" + l[2:] if l.startswith("E-") else l for l in labels]


def bio_spans(tags: Sequence[str]) -> list[tuple[int, int, str]]:
    """(start, end, type) of the entities in BIO or BIOES tags (an I- after O or after another type
    starts an entity, as conlleval)."""
    spans: list[tuple[int, int, str]] = []
    start, kind = None, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        continues = prefix in ("I", "E") and start is not None and label == kind
        if start is not None and not continues:
            spans.append((start, i, kind))
            start = kind = None
        if prefix in ("B", "S") or (prefix in ("I", "E") and start is None):
            start, kind = i, label
        if prefix in ("E", "S") and start is not None:
            spans.append((start, i + 1, kind))
            start = kind = None
    return spans


def read_text(path: str | os.PathLike, tokenize: Callable[[str], list[str]] = str.split) -> list[list[str]]:
    """One sentence per line, cut by ``tokenize`` (default: whitespace; or an
    ``elmokit.text.corpus.Tokenizer`` such as jieba for raw Chinese). Empty lines are an error naming them."""
    sentences, empty = [], []
    for number, line in _lines(path):
        tokens = tokenize(line)
        if not tokens:
            empty.append(number)
        sentences.append(tokens)
    if empty:
        shown = ", ".join(map(str, empty[:10])) + (" ..." if len(empty) > 10 else "")
        raise TaggingDataError(f"{path}: empty lines {shown}: give one sentence per line")
    return sentences


def read_labelled_tsv(path: str | os.PathLike,
                      tokenize: Callable[[str], list[str]] = str.split) -> tuple[list[list[str]], list[str]]:
    """``label <TAB> sentence`` per line -> (sentences, labels); blank lines skipped. The sentence is cut
    by ``tokenize`` (default: whitespace; or an ``elmokit.text.corpus.Tokenizer`` such as jieba)."""
    sentences, labels = [], []
    for number, line in read_lines(path):
        if not line.strip():
            continue
        label, tab, text = line.partition("\t")
        tokens = tokenize(text)
        if not tab or not label or not tokens:
            raise DataFileError(f"{path}:{number}: expected 'label<TAB>sentence'")
        sentences.append(tokens)
        labels.append(label)
    if not sentences:
        raise DataFileError(f"{path}: no 'label<TAB>sentence' lines found")
    return sentences, labels


def write_conll(path: str | os.PathLike, sentences: Sequence[Sequence[str]], labels: Sequence[Sequence[str]]) -> None:
    """``token<TAB>label`` lines, a blank line after each sentence; written atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        for tokens, row in zip(sentences, labels):
            for token, label in zip(tokens, row):
                handle.write(f"{token}\t{label}\n")
            handle.write("\n")
