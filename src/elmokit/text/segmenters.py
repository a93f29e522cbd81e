"""Tokenizers for text written without spaces between words (Chinese): word segmenters by name.

ELMo reads UTF-8 bytes, so it reads any script; what it needs is tokens. Space-separated
languages get them from ``str.split`` or the regex tokenizer (``elmokit.text.corpus``); text
in an unsegmented script (Chinese, Japanese, Thai, ...) needs a segmenter. The kinds, chosen by
name wherever a tokenizer is taken (``Tokenizer(kind=...)``, ``--tokenizer``):

``chars``
    No dictionary, no model: every Han character is a token. The rules, in order:

    1. whitespace (``str.isspace``) separates tokens and is dropped;
    2. a Han character (:func:`is_han`: the Unicode Han script's blocks, listed in
       ``HAN_RANGES``) is a token by itself: ``中国`` -> ``中``, ``国``;
    3. a run of other word characters (Python's ``\\w``: letters and digits of any other script,
       full-width ones too, and ``_``) is one token: ``iPhone15``, ``２０２４``, ``カタカナ``;
    4. any other character (punctuation, symbols, emoji) is a token, and a run of the same
       character is one token: ``，`` ``——`` ``……`` ``!!!``;
    5. combining marks (categories Mn, Mc, Me), variation selectors, emoji skin-tone modifiers
       and tag characters stay with the character before them, and a zero-width joiner joins the
       characters on both sides, so ``❤️``, ``👍🏽`` and ``👨‍👩‍👧`` are one token each.

    Joining the tokens gives the line without its whitespace, always.

``jieba``
    The ``jieba`` package (``pip install 'elmokit[zh]'``): its own default dictionary
    (``dict.txt``, 349,046 words), the DAG + dynamic-programming cut with its HMM for unknown words
    (``jieba.cut(line, HMM=True)``, jieba's default mode). Deterministic: a private
    ``jieba.Tokenizer`` (words a program adds to jieba's global one never leak in), its prefix
    dictionary built in memory once per process (jieba's own ``initialize`` would log to stderr and
    read and write a marshal cache in the temporary folder; neither happens here).

``rjieba``
    ``rjieba`` (``pip install rjieba``), the binding of jieba-rs: the same dictionary and algorithm
    in Rust, several times faster; its cuts can differ from jieba's in a few places.

``pkuseg``
    ``pkuseg`` (Luo et al. 2019) with its default mixed-domain model. pkuseg publishes no wheel for
    Python 3.11 or newer and its source build needs Cython and an old numpy, so it is not in the
    ``zh`` extra; install it where it builds (``pip install pkuseg``). Note that pkuseg fetches its
    model files on first use.

Whatever the segmenter returns, tokens never contain whitespace (a token holding some is split
there, whitespace-only tokens are dropped), so segmented lines can be written space-separated and
read back by ``str.split``.
"""

from __future__ import annotations

import bisect
import functools
import importlib
import unicodedata
from collections.abc import Callable

from elmokit.errors import UserError

SEGMENTER_KINDS = ("chars", "jieba", "rjieba", "pkuseg")

# The default Chinese tokenizer, chosen from the SIGHAN-2005 F1 in docs/results.md ("Chinese").
DEFAULT_CHINESE_TOKENIZER = "jieba"

# Where each segmenter comes from: (import name, how to install it).
_PACKAGES = {
    "jieba": ("jieba", "pip install 'elmokit[zh]' (or pip install jieba)"),
    "rjieba": ("rjieba", "pip install rjieba"),
    "pkuseg": ("pkuseg", "pip install pkuseg where it builds: it publishes no wheel for Python >= 3.11 and its "
                         "source build needs Cython and numpy < 2, so it is not part of elmokit[zh]"),
}

# The Unicode Han script (Scripts.txt, Unicode 17), as code-point ranges (inclusive): CJK radicals,
# 々 〇 and the Suzhou numerals, CJK Unified Ideographs and extensions A-J, compatibility ideographs.
HAN_RANGES = (
    (0x2E80, 0x2E99), (0x2E9B, 0x2EF3), (0x2F00, 0x2FD5), (0x3005, 0x3005), (0x3007, 0x3007),
    (0x3021, 0x3029), (0x3038, 0x303B), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFA6D),
    (0xFA70, 0xFAD9), (0x16FE2, 0x16FE3), (0x16FF0, 0x16FF6), (0x20000, 0x2A6DF), (0x2A700, 0x2B81E),
    (0x2B820, 0x2CEAD), (0x2CEB0, 0x2EBE0), (0x2EBF0, 0x2EE5D), (0x2F800, 0x2FA1D), (0x30000, 0x3134A),
    (0x31350, 0x33479),
)
_ZWJ = "\u200d"


class SegmenterError(UserError):
    """A segmenter that cannot be used here (its package is missing); the message names the install."""


_HAN_STARTS = [low for low, _ in HAN_RANGES]


def is_han(char: str) -> bool:
    """True for a character of the Unicode Han script (``HAN_RANGES``)."""
    code = ord(char)
    if code < 0x2E80:  # most text: Latin, digits, punctuation
        return False
    index = bisect.bisect_right(_HAN_STARTS, code) - 1
    return index >= 0 and code <= HAN_RANGES[index][1]


def _attaches(char: str) -> bool:
    """Characters that belong to the one before them (rule 5 of ``chars``)."""
    code = ord(char)
    return (unicodedata.category(char) in ("Mn", "Mc", "Me") or 0xFE00 <= code <= 0xFE0F or 0xE0100 <= code <= 0xE01EF
            or 0x1F3FB <= code <= 0x1F3FF or 0xE0020 <= code <= 0xE007F)


def _is_word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def split_chars(line: str) -> list[str]:
    """The ``chars`` tokenizer (rules in the module docstring).

    >>> split_chars("我用iPhone15拍了——照片！！😀")
    ['我', '用', 'iPhone15', '拍', '了', '——', '照', '片', '！！', '😀']
    """
    tokens: list[str] = []
    current = ""  # the token being built
    joined = False  # the last character was a zero-width joiner: the next one joins too
    for char in line:
        if char.isspace():
            if current:
                tokens.append(current)
            current, joined = "", False
            continue
        if current and (joined or char == _ZWJ or _attaches(char)):
            current += char
            joined = char == _ZWJ
            continue
        joined = False
        if current and not is_han(char) and not is_han(current[-1]) and (
            (_is_word_char(char) and _is_word_char(current[-1])) or (not _is_word_char(char) and char == current[-1])
        ):
            current += char
            continue
        if current:
            tokens.append(current)
        current = char
    if current:
        tokens.append(current)
    return tokens


def _require(kind: str):
    module_name, install = _PACKAGES[kind]
    try:
        return importlib.import_module(module_name)
    except ImportError as error:
        raise SegmenterError(f"tokenizer {kind!r} needs the {module_name} package, which is not installed "
                             f"({error}); fix: {install}") from None


@functools.cache
def _jieba() -> Callable[[str], list[str]]:
    jieba = _require("jieba")
    tokenizer = jieba.Tokenizer()  # private: words added to jieba's global tokenizer do not leak in
    with tokenizer.get_dict_file() as handle:  # the packaged dict.txt, built in memory: no log, no cache file
        tokenizer.FREQ, tokenizer.total = tokenizer.gen_pfdict(handle)
    tokenizer.initialized = True
    return lambda line: list(tokenizer.cut(line, HMM=True))


@functools.cache
def _rjieba() -> Callable[[str], list[str]]:
    rjieba = _require("rjieba")
    return lambda line: list(rjieba.cut(line, True))


@functools.cache
def _pkuseg() -> Callable[[str], list[str]]:  # pragma: no cover - pkuseg does not install on Python 3.11
    pkuseg = _require("pkuseg")
    segmenter = pkuseg.pkuseg()
    return lambda line: list(segmenter.cut(line))


_SEGMENTERS: dict[str, Callable[[], Callable[[str], list[str]]]] = {
    "chars": lambda: split_chars, "jieba": _jieba, "rjieba": _rjieba, "pkuseg": _pkuseg,
}


def check_segmenter(kind: str) -> None:
    """Raise SegmenterError now (naming the install) if ``kind``'s package is missing."""
    if kind not in _SEGMENTERS:
        raise ValueError(f"segmenter {kind!r} is not one of {SEGMENTER_KINDS}")
    if kind in _PACKAGES:
        _require(kind)


def segment(kind: str, line: str) -> list[str]:
    """``line`` cut by the segmenter ``kind`` (one of ``SEGMENTER_KINDS``): tokens without whitespace."""
    if kind not in _SEGMENTERS:
        raise ValueError(f"segmenter {kind!r} is not one of {SEGMENTER_KINDS}")
    tokens = _SEGMENTERS[kind]()(line)
    if kind == "chars":
        return tokens
    return [piece for token in tokens for piece in token.split()]


