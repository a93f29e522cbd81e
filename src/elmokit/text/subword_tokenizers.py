"""Subword tokenizers trained on a corpus with HF ``tokenizers``, and the word alignment elmokit needs.

Two families, each saved as a folder that ``transformers.AutoTokenizer`` / ``PreTrainedTokenizerFast``
loads (``tokenizer.json`` + ``tokenizer_config.json``):

- ``train_wordpiece``: BERT's WordPiece (Devlin et al. 2019, §A.2: "WordPiece embeddings with a 30,000
  token vocabulary"): BERT's normaliser (cased by default: elmokit's corpora are cased, as ELMo is)
  and pre-tokeniser (whitespace + punctuation), specials ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (ids 0-4, in
  that order), template ``[CLS] A [SEP]`` / ``[CLS] A [SEP] B [SEP]`` with segment ids 0 / 1.
- ``train_byte_bpe``: GPT-2's byte-level BPE (Radford et al. 2019, §2.2), used by RoBERTa too (Liu et al.
  2019, §4.4): every byte is in the base alphabet, so there is no unknown token. ``template="roberta"``:
  specials ``<s> <pad> </s> <unk> <mask>`` (RoBERTa's ids 0-3, then mask), ``<s> A </s>`` and
  ``<s> A </s></s> B </s>``. ``template="gpt2"``: one special ``<|endoftext|>`` (GPT-2's bos = eos = unk),
  nothing added around a text. A space is put before each word (``add_prefix_space``) so that a word
  is spelled the same at the start of a sentence as inside it, which word-level input needs.

Word alignment. elmokit's sentences are lists of words; ``encode_words`` gives the subword ids of a
sentence with the specials of the template, and for each position the index of its word (None for a
special), so that a model's subword vectors can be pooled back to one vector per word. A word that
the tokenizer would turn into no piece at all (``""``, or only characters the normaliser removes such
as U+200B) is encoded as the unknown token (or, without one, as the end-of-text token), so that every
word has at least one piece.

Deterministic WordPiece training. HF ``tokenizers``' WordPiece trainer (its BPE trainer with the ``##``
prefix, ``models/bpe/trainer.rs`` in tokenizers 0.23) gives the characters ids in code-point order, but
creates the ``##c`` pieces while iterating its word counts, a Rust ``HashMap`` whose order is seeded at
random per map, so their ids differ from run to run (and from call to call in one process). Merges of
equal count are taken in ascending order of the pair's ids, so the ids decide every tie: the merges, and
so the vocabulary at the ``vocab_size`` cut, changed from run to run (not only the order of the file:
e.g. 8,000 entries from 20,000 Gutenberg lines differed in their set three runs out of three). Thread
parallelism is not the cause (``RAYON_NUM_THREADS=1`` varies alike; the parallel pair counts are sums).
``train_wordpiece`` therefore first runs the trainer with no merges to learn the initial pieces, then
trains with them passed as special tokens after the five real ones, in the order an unseeded run would
give them (characters, then ``##c``, each by code point): the result is the vocabulary of that one
unseeded ordering, the same every time, and is rebuilt so that only the five are special tokens.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from elmokit.errors import InputNotFound

WORDPIECE_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
GPT2_SPECIALS = ("<|endoftext|>",)


def _fast(tokenizer, **specials):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **specials)


def train_wordpiece(
    lines: Iterable[str],
    out_dir: str | os.PathLike | None = None,
    *,
    vocab_size: int = 30_000,
    min_frequency: int = 2,
    lowercase: bool = False,
    model_max_length: int = 512,
):
    """A BERT WordPiece tokenizer trained on ``lines`` (raw text, one paragraph or sentence a line).

    Returns the ``PreTrainedTokenizerFast``; with ``out_dir`` it is also saved there. The same lines give
    the same vocabulary file every time (module docstring: deterministic training); ``lines`` is read
    twice, so an iterator is first read into a list.
    """
    from tokenizers import Tokenizer, models, trainers

    lines = lines if isinstance(lines, Sequence) else list(lines)
    initial = _initial_pieces(lines, lowercase)
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    _bert_pipeline(tokenizer, lowercase)
    # the initial pieces get their ids here, in code-point order, not in the hash order of the words
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                        special_tokens=[*WORDPIECE_SPECIALS, *initial], show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    trained = tokenizer.get_vocab(with_added_tokens=False)  # token -> id
    # rebuilt with the same ids, so that only the five specials are special (added) tokens
    return wordpiece_from_vocab(sorted(trained, key=trained.__getitem__), out_dir, lowercase=lowercase,
                                model_max_length=model_max_length)


def _initial_pieces(lines: Iterable[str], lowercase: bool) -> list[str]:
    """The pieces the WordPiece trainer starts from on ``lines``, in the order of an unseeded training's ids
    (module docstring): the characters, then the ``##c`` pieces (a character ``c`` seen inside a word),
    each sorted by code point. A training that stops before its first merge creates exactly these."""
    from tokenizers import Tokenizer, models, trainers

    probe = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    _bert_pipeline(probe, lowercase)
    probe.train_from_iterator(lines, trainer=trainers.WordPieceTrainer(vocab_size=1, show_progress=False))
    pieces = probe.get_vocab(with_added_tokens=False)
    return sorted(t for t in pieces if len(t) == 1) + sorted(t for t in pieces if len(t) > 1)


def wordpiece_from_vocab(vocab: Sequence[str], out_dir: str | os.PathLike | None = None, *, lowercase: bool = False,
                         model_max_length: int = 512):
    """A BERT WordPiece tokenizer with a given vocabulary (a ``vocab.txt``'s lines, specials included):
    the same pipeline as ``train_wordpiece``, for hand-built test vocabularies and foreign vocab files."""
    from tokenizers import Tokenizer, models

    missing = [t for t in WORDPIECE_SPECIALS if t not in vocab]
    if missing:
        raise ValueError(f"the vocabulary lacks the specials {missing}")
    tokenizer = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    _bert_pipeline(tokenizer, lowercase)
    return _finish_wordpiece(tokenizer, out_dir, model_max_length)


def _bert_pipeline(tokenizer, lowercase: bool) -> None:
    from tokenizers import decoders, normalizers, pre_tokenizers

    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=lowercase)  # accents stripped only when lowercasing
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()


def _finish_wordpiece(tokenizer, out_dir, model_max_length: int):
    from tokenizers import processors

    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    fast = _fast(tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
                 mask_token="[MASK]", model_max_length=model_max_length,
                 model_input_names=["input_ids", "token_type_ids", "attention_mask"])  # BERT has segments
    if out_dir is not None:
        fast.save_pretrained(str(out_dir))
    return fast


def train_byte_bpe(
    lines: Iterable[str],
    out_dir: str | os.PathLike | None = None,
    *,
    vocab_size: int = 50_000,
    min_frequency: int = 2,
    template: str = "roberta",
    model_max_length: int = 512,
):
    """A byte-level BPE tokenizer trained on ``lines``; ``template`` is ``"roberta"`` or ``"gpt2"``
    (see the module docstring). Returns the ``PreTrainedTokenizerFast``; saved in ``out_dir`` if given."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if template not in ("roberta", "gpt2"):
        raise ValueError(f"template {template!r}: use 'roberta' or 'gpt2'")
    specials = ROBERTA_SPECIALS if template == "roberta" else GPT2_SPECIALS
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(specials),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    if template == "roberta":
        tokenizer.post_processor = processors.RobertaProcessing(
            ("</s>", tokenizer.token_to_id("</s>")), ("<s>", tokenizer.token_to_id("<s>")),
            trim_offsets=False, add_prefix_space=True)
        fast = _fast(tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
                     mask_token="<mask>", cls_token="<s>", sep_token="</s>", model_max_length=model_max_length)
    else:
        tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
        fast = _fast(tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>",
                     model_max_length=model_max_length)
    if out_dir is not None:
        fast.save_pretrained(str(out_dir))
    return fast


def load_tokenizer(path: str | os.PathLike):
    """The tokenizer saved in a folder (ours or any local HF checkpoint with a fast tokenizer)."""
    from transformers import AutoTokenizer

    if not Path(path).is_dir():
        raise InputNotFound(f"{path}: no such tokenizer folder")
    return AutoTokenizer.from_pretrained(str(path))


# --------------------------------------------------------------------------- word alignment


@dataclass(frozen=True)
class WordEncoding:
    """A sentence of words as subword ids.

    input_ids: the ids with the template's specials, length T.
    word_ids: for each of the T positions the index of its word, None for a special.
    pieces: for each word the positions of its pieces (never empty, contiguous, increasing).
    """

    input_ids: list[int]
    word_ids: list[int | None]
    pieces: list[list[int]]

    @property
    def special_mask(self) -> list[bool]:
        return [w is None for w in self.word_ids]


def backend_tokenizer(tokenizer: Any):
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:  # a bare tokenizers.Tokenizer
        return tokenizer
    return backend


def _stand_in(tokenizer: Any) -> str:
    for name in ("unk_token", "eos_token", "sep_token"):
        token = getattr(tokenizer, name, None)
        if token:
            return str(token)
    raise ValueError("the tokenizer has no unk/eos/sep token to stand in for a word that has no subword piece")


def encode_words(tokenizer: Any, words: Sequence[str], *, add_special_tokens: bool = True) -> WordEncoding:
    """The subword encoding of one sentence given as words (see the module docstring)."""
    if isinstance(words, str):
        raise TypeError("encode_words expects a list of words, not a string; use sentence.split()")
    backend = backend_tokenizer(tokenizer)
    words = list(words)
    encoding = backend.encode(words, is_pretokenized=True, add_special_tokens=add_special_tokens)
    seen = {w for w in encoding.word_ids if w is not None}
    if len(seen) < len(words):  # a word with no piece: spell it as the stand-in token
        stand_in = _stand_in(tokenizer)
        words = [w if i in seen else stand_in for i, w in enumerate(words)]
        encoding = backend.encode(words, is_pretokenized=True, add_special_tokens=add_special_tokens)
    word_ids = list(encoding.word_ids)
    pieces: list[list[int]] = [[] for _ in words]
    for position, word in enumerate(word_ids):
        if word is not None:
            pieces[word].append(position)
    if any(not p or p[-1] - p[0] + 1 != len(p) for p in pieces):
        raise ValueError(f"the tokenizer does not give each word contiguous pieces: {words!r} -> {word_ids}")
    return WordEncoding(list(encoding.ids), word_ids, pieces)
