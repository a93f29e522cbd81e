"""The output vocabulary of a biLM, in bilm-tf's file format.

One token per line, UTF-8: ``<S>``, ``</S>``, ``<UNK>`` first, then the corpus tokens by
descending count, ties broken by code-point order of the token (so the file depends only on the
counts, never on the order of the corpus). The softmax's log-uniform sampler assumes exactly this
frequency order (id 0 most frequent), as bilm-tf's does.

The vocabulary only shapes the *output* side: the inputs are always spelled from their bytes, so
an out-of-vocabulary word is read like any other and only predicted as ``<UNK>``.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elmokit.errors import UserError
from elmokit.io import atomic_path
from elmokit.text.chars import BOS_TOKEN, EOS_TOKEN

UNK_TOKEN = "<UNK>"
SPECIAL_TOKENS = (BOS_TOKEN, EOS_TOKEN, UNK_TOKEN)


class VocabularyError(UserError):
    """A vocabulary file that cannot be used; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class Vocabulary:
    """Token <-> id. ``tokens[i]`` is id i; ``<S>``, ``</S>``, ``<UNK>`` must be present."""

    tokens: tuple[str, ...]
    index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, int] = {}
        for i, token in enumerate(self.tokens):
            if token in index:
                raise VocabularyError(f"token {token!r} appears twice (ids {index[token]} and {i})")
            index[token] = i
        missing = [t for t in SPECIAL_TOKENS if t not in index]
        if missing:
            raise VocabularyError(f"vocabulary lacks {missing}; bilm-tf vocabularies start with <S>, </S>, <UNK>")
        object.__setattr__(self, "index", index)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def bos(self) -> int:
        return self.index[BOS_TOKEN]

    @property
    def eos(self) -> int:
        return self.index[EOS_TOKEN]

    @property
    def unk(self) -> int:
        return self.index[UNK_TOKEN]

    def id(self, token: str) -> int:
        return self.index.get(token, self.index[UNK_TOKEN])

    def ids(self, tokens: Sequence[str]) -> list[int]:
        index, unk = self.index, self.index[UNK_TOKEN]
        return [index.get(t, unk) for t in tokens]

    @classmethod
    def load(cls, path: str | os.PathLike) -> Vocabulary:
        """Read a bilm-tf vocabulary file (one token per line; a trailing newline is optional)."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise VocabularyError(f"{path}: no such vocabulary file (fix: build one with `elmokit vocab`)") from None
        except UnicodeDecodeError as error:
            raise VocabularyError(f"{path}: not UTF-8 ({error.reason} at byte {error.start})") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        seen: dict[str, int] = {}
        for lineno, token in enumerate(lines, 1):
            if not _representable(token):
                raise VocabularyError(f"{path}:{lineno}: {token!r} is empty or starts/ends with whitespace; one token per line")
            if token in seen:
                raise VocabularyError(f"{path}:{lineno}: {token!r} already on line {seen[token]}; remove the duplicate")
            seen[token] = lineno
        try:
            return cls(tuple(lines))
        except VocabularyError as error:
            raise VocabularyError(f"{path}: {error}") from None

    def save(self, path: str | os.PathLike) -> Path:
        bad = [t for t in self.tokens if not _representable(t)]
        if bad:
            raise VocabularyError(
                f"cannot write tokens {bad[:5]} to a vocabulary file (one token per line: no line breaks, "
                "no leading or trailing whitespace, not empty); fix the tokenizer"
            )
        path = Path(path)
        with atomic_path(path) as tmp:
            Path(tmp).write_text("".join(t + "\n" for t in self.tokens), encoding="utf-8")
        return path


def _representable(token: str) -> bool:
    return bool(token) and token == token.strip() and "\n" not in token and "\r" not in token


def count_tokens(sentences: Iterable[Sequence[str]]) -> Counter:
    """Token counts of a stream of tokenised sentences (the special tokens are not counted)."""
    counts: Counter = Counter()
    for tokens in sentences:
        counts.update(tokens)
    for special in SPECIAL_TOKENS:
        counts.pop(special, None)
    return counts


def build_vocabulary(counts: Counter, *, min_count: int = 1, max_size: int | None = None) -> Vocabulary:
    """``<S>``, ``</S>``, ``<UNK>``, then tokens with ``count >= min_count`` by descending count,
    ties in code-point order; ``max_size`` caps the total number of lines (specials included)."""
    if max_size is not None and max_size < len(SPECIAL_TOKENS):
        raise VocabularyError(f"max_size must be at least {len(SPECIAL_TOKENS)} (the special tokens), got {max_size}")
    kept = sorted(((t, c) for t, c in counts.items() if c >= min_count), key=lambda tc: (-tc[1], tc[0]))
    if max_size is not None:
        kept = kept[: max_size - len(SPECIAL_TOKENS)]
    return Vocabulary(SPECIAL_TOKENS + tuple(t for t, _ in kept))


def coverage(vocabulary: Vocabulary, counts: Counter) -> float:
    """Fraction of the counted running tokens that the vocabulary keeps (the rest become <UNK>)."""
    total = sum(counts.values())
    if not total:
        return 1.0
    return sum(c for t, c in counts.items() if t in vocabulary.index) / total
