"""Masking schemes and input construction for the masked-LM family, over token ids and word ids.

Written here because transformers 5.x lacks them (``DataCollatorForWholeWordMask`` and the NSP dataset
helpers are gone; its whole-word masking needs offsets, forces 100% [MASK] and breaks with byte-level
BPE). Every function works on one sequence as numpy arrays and draws from a ``numpy.random.Generator``
the caller owns, so a result is a function of (input, generator state) and nothing else.

Inputs. ``ids``: (T,) token ids of one sequence with its specials. ``word_ids``: (T,) the word index of
each position, None (or -1) for a special; a *word* is a maximal run of consecutive positions with the
same word index (so word indices may restart in a second segment). Positions whose id is a special id
(``MaskingVocab.special_ids``: [CLS] [SEP] [PAD] ...) or whose word index is None are never masked.

Output (``Masked``). ``input_ids``: the corrupted input; ``labels``: the original id at every position
the model must predict, -100 elsewhere (the ``ignore_index`` of ``torch.nn.functional.cross_entropy``
and of transformers); ``units``: the positions of each masked unit (a token, a word, a span or a
phrase); ``decisions``: per unit 0 = replaced by [MASK], 1 = replaced by random tokens, 2 = kept.

The schemes, each with the paper's numbers and the reference code's choices (deviations marked):

- ``mask_tokens`` — BERT (Devlin et al. 2019, §3.1 and A.1; google-research/bert
  ``create_masked_lm_predictions``): exactly ``max(1, round(0.15 * n))`` of the n maskable positions,
  chosen uniformly without replacement (capped by ``max_predictions``, 20 for 128 tokens in the
  reference); each chosen token is replaced by [MASK] with probability 0.8, by a random token with 0.1,
  kept with 0.1. Deviation: n counts the maskable positions (the reference counts the specials too), and
  random tokens are drawn from the non-special vocabulary (the reference draws from the whole
  vocabulary, so it can insert [CLS]; fairseq's RoBERTa excludes specials as here).
- ``mask_whole_words`` — whole-word masking (BERT's ``--do_whole_word_mask``; Cui et al. 2019,
  BERT-wwm): the same budget in tokens; words are visited in a random order and a word is taken
  whole if it still fits the budget (the reference's rule: a word that would overshoot is skipped),
  until the budget is met. The 80/10/10 choice is made once per word, so a word is all [MASK], all
  random or all kept (at the word level, as Cui et al. describe it; the reference decides per token).
- ``mask_spans`` — SpanBERT (Joshi et al. 2020, §3.1): span lengths in words drawn from Geometric(p=0.2)
  restricted to 1..10 — the reference (``facebookresearch/SpanBERT``, ``masking.py``) renormalises the
  geometric probabilities over 1..10, which gives the paper's mean of 3.8 words (clipping, i.e. moving
  the tail mass to 10, would give 4.46); the span starts at the first piece of a word chosen uniformly
  among the words not yet masked and covers whole words to its right; spans are drawn until 15% of the
  tokens are masked; 80/10/10 once per span (random tokens drawn per position). Deviations: a span
  stops early at a segment boundary, at an already masked word, or as soon as the budget is met (the
  last word is kept whole, so a sequence may go over the budget by less than one word); the reference
  picks the start uniformly over token positions and may cut the last word at the budget. For the span
  boundary objective each masked position gets the positions of the tokens just outside its span
  (``span_left`` = start - 1, ``span_right`` = end + 1) and its offset in the span (0-based; the paper's
  ``p_{i-s+1}``).
- ``mask_phrases`` — ERNIE 1.0 knowledge masking (Sun et al. 2019, §3.2): phrase- or entity-level
  masking with spans given by the caller (word index ranges, end exclusive), each span masked whole
  with the whole-word rule above and 80/10/10 per span; basic-level masking is ``mask_whole_words``.
  Where the spans come from (a chunker, a NER tagger) is not decided here.
- ``DynamicMasking`` — RoBERTa (Liu et al. 2019, §4.1): a new mask every time a sequence is fed; it is
  any scheme above called at batch time with a generator that advances.
- ``pack_full_sentences`` — RoBERTa's FULL-SENTENCES inputs (§4.2): full sentences packed
  contiguously from one or more documents up to the length limit, an extra separator between
  documents. A sentence longer than a pack is cut into pieces (the reference would overflow).
- ``nsp_pairs`` — BERT's next-sentence prediction pairs (google-research/bert
  ``create_instances_from_document``): segments gathered up to a target length (drawn once per
  document: shorter with probability ``short_seq_prob`` = 0.1), A = a random prefix of them, B = the rest (IsNext, label 0)
  or, with probability 0.5, sentences from a random other document (NotNext, label 1; the unused
  segments go back to be read again); the pair is truncated from the longer side, front or back at
  random. As in the reference a chunk of a single segment can only make NotNext, so NotNext is a little
  over 50% (such pairs are marked ``forced_random``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

IGNORE_INDEX = -100
MASK, RANDOM, KEEP = 0, 1, 2


@dataclass(frozen=True)
class MaskingRates:
    """The masking budget and the replacement probabilities (BERT's 15% and 80/10/10)."""

    rate: float = 0.15
    mask: float = 0.8
    random: float = 0.1

    def __post_init__(self):
        if not (0 < self.rate <= 1 and self.mask >= 0 and self.random >= 0 and self.mask + self.random <= 1):
            raise ValueError(f"bad masking rates {self}: need 0 < rate <= 1, mask, random >= 0, mask + random <= 1")

    @property
    def keep(self) -> float:
        return 1.0 - self.mask - self.random


BERT_RATES = MaskingRates()


@dataclass(frozen=True)
class MaskingVocab:
    """What masking needs to know of a vocabulary: its size, the [MASK] id and the special ids."""

    size: int
    mask_id: int
    special_ids: frozenset[int]
    replacement_ids: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.mask_id not in self.special_ids:
            object.__setattr__(self, "special_ids", frozenset(self.special_ids | {self.mask_id}))
        ids = np.array([i for i in range(self.size) if i not in self.special_ids], dtype=np.int64)
        if len(ids) == 0:
            raise ValueError("the vocabulary has no non-special token to draw random replacements from")
        object.__setattr__(self, "replacement_ids", ids)

    @classmethod
    def from_tokenizer(cls, tokenizer) -> MaskingVocab:
        if tokenizer.mask_token_id is None:
            raise ValueError("this tokenizer has no mask token; masked-LM objectives need one (train_wordpiece or "
                             "train_byte_bpe(template='roberta'))")
        return cls(len(tokenizer), int(tokenizer.mask_token_id), frozenset(int(i) for i in tokenizer.all_special_ids))


@dataclass
class Masked:
    """One masked sequence (see the module docstring). Arrays are (T,) int64."""

    input_ids: np.ndarray
    labels: np.ndarray
    units: list[list[int]]
    decisions: list[int]
    span_left: np.ndarray | None = None  # SpanBERT: position before the span of each masked token, -1 elsewhere
    span_right: np.ndarray | None = None  # position after the span, -1 elsewhere
    span_offset: np.ndarray | None = None  # 0-based offset of the token in its span, -1 elsewhere


# --------------------------------------------------------------------------- helpers


def _as_ids(ids) -> np.ndarray:
    return np.asarray(ids, dtype=np.int64).reshape(-1)


def _word_index(word_ids, length: int) -> np.ndarray:
    if word_ids is None:
        return np.arange(length, dtype=np.int64)
    out = np.array([-1 if w is None else int(w) for w in word_ids], dtype=np.int64)
    if len(out) != length:
        raise ValueError(f"word_ids has {len(out)} entries for {length} token ids")
    return out


def maskable(ids, word_ids, vocab: MaskingVocab) -> np.ndarray:
    """(T,) bool: positions that may be masked (not a special id, not a special in word_ids)."""
    ids = _as_ids(ids)
    words = _word_index(word_ids, len(ids))
    special = np.isin(ids, np.fromiter(vocab.special_ids, dtype=np.int64))
    return ~special & (words >= 0)


def words_of(ids, word_ids, vocab: MaskingVocab) -> list[list[int]]:
    """The words of a sequence: maximal runs of maskable positions with the same word index."""
    ok = maskable(ids, word_ids, vocab)
    words = _word_index(word_ids, len(ok))
    runs: list[list[int]] = []
    for position in range(len(ok)):
        if not ok[position]:
            continue
        if runs and runs[-1][-1] == position - 1 and words[position - 1] == words[position]:
            runs[-1].append(position)
        else:
            runs.append([position])
    return runs


def budget(n_maskable: int, rates: MaskingRates, max_predictions: int | None = None) -> int:
    """How many tokens to mask: ``max(1, round(rate * n))`` (round half up), capped; 0 when n is 0."""
    if n_maskable == 0:
        return 0
    k = max(1, int(math.floor(rates.rate * n_maskable + 0.5)))
    if max_predictions is not None:
        k = min(k, max_predictions)
    return min(k, n_maskable)


def corrupt(ids: np.ndarray, units: list[list[int]], vocab: MaskingVocab, rates: MaskingRates,
             rng: np.random.Generator) -> Masked:
    """Apply 80/10/10 once per unit: one uniform draw decides the unit; random ids are drawn per position."""
    inputs = ids.copy()
    labels = np.full_like(ids, IGNORE_INDEX)
    decisions = []
    for unit in units:
        u = rng.random()
        if u < rates.mask:
            inputs[unit] = vocab.mask_id
            decisions.append(MASK)
        elif u < rates.mask + rates.random:
            inputs[unit] = rng.choice(vocab.replacement_ids, size=len(unit))
            decisions.append(RANDOM)
        else:
            decisions.append(KEEP)
        labels[unit] = ids[unit]
    return Masked(inputs, labels, units, decisions)


def _greedy_units(candidates: list[list[int]], k: int, rng: np.random.Generator) -> list[list[int]]:
    """BERT's whole-word selection: visit units in random order, take one if it still fits in k."""
    chosen, count = [], 0
    for index in rng.permutation(len(candidates)):
        if count >= k:
            break
        unit = candidates[index]
        if count + len(unit) > k:
            continue
        chosen.append(unit)
        count += len(unit)
    return sorted(chosen)


# --------------------------------------------------------------------------- the schemes


def mask_tokens(ids, vocab: MaskingVocab, rng: np.random.Generator, *, word_ids=None,
                rates: MaskingRates = BERT_RATES, max_predictions: int | None = None) -> Masked:
    """BERT's token-level masking (see the module docstring)."""
    ids = _as_ids(ids)
    positions = np.flatnonzero(maskable(ids, word_ids, vocab))
    k = budget(len(positions), rates, max_predictions)
    chosen = np.sort(rng.permutation(positions)[:k])
    return corrupt(ids, [[int(p)] for p in chosen], vocab, rates, rng)


def mask_whole_words(ids, word_ids, vocab: MaskingVocab, rng: np.random.Generator, *,
                     rates: MaskingRates = BERT_RATES, max_predictions: int | None = None) -> Masked:
    """Whole-word masking, 80/10/10 per word (see the module docstring)."""
    ids = _as_ids(ids)
    words = words_of(ids, word_ids, vocab)
    k = budget(sum(map(len, words)), rates, max_predictions)
    return corrupt(ids, _greedy_units(words, k, rng), vocab, rates, rng)


def mask_phrases(ids, word_ids, spans: Sequence[tuple[int, int]], vocab: MaskingVocab, rng: np.random.Generator, *,
                 rates: MaskingRates = BERT_RATES, max_predictions: int | None = None) -> Masked:
    """ERNIE phrase/entity masking: ``spans`` are (first word, end word) ranges, end exclusive, over the
    sequence's words (``words_of``, in order). Each span is masked whole or not at all, until the budget
    (counted over all maskable tokens) is met; 80/10/10 per span."""
    ids = _as_ids(ids)
    words = words_of(ids, word_ids, vocab)
    taken = np.zeros(len(words), dtype=bool)
    units = []
    for start, end in spans:
        if not (0 <= start < end <= len(words)):
            raise ValueError(f"span ({start}, {end}) is not a word range of this sequence of {len(words)} words")
        if taken[start:end].any():
            raise ValueError(f"span ({start}, {end}) overlaps another span")
        taken[start:end] = True
        units.append([p for w in words[start:end] for p in w])
    k = budget(sum(map(len, words)), rates, max_predictions)
    return corrupt(ids, _greedy_units(units, k, rng), vocab, rates, rng)


def span_length_probabilities(p: float = 0.2, max_words: int = 10) -> np.ndarray:
    """P(length = l) for l = 1..max_words: p (1-p)^(l-1) renormalised over 1..max_words (SpanBERT's code)."""
    lengths = np.arange(1, max_words + 1)
    probabilities = p * (1 - p) ** (lengths - 1)
    return probabilities / probabilities.sum()


def sample_span_lengths(rng: np.random.Generator, size: int, *, p: float = 0.2, max_words: int = 10) -> np.ndarray:
    """``size`` span lengths (in words) drawn as ``mask_spans`` draws them."""
    return rng.choice(np.arange(1, max_words + 1), size=size, p=span_length_probabilities(p, max_words))


def mask_spans(ids, word_ids, vocab: MaskingVocab, rng: np.random.Generator, *, rates: MaskingRates = BERT_RATES,
               p: float = 0.2, max_words: int = 10, max_predictions: int | None = None) -> Masked:
    """SpanBERT's span masking with the span boundary objective's targets (see the module docstring).

    Raises ValueError if a span touches either end of the sequence (the boundary objective needs a
    token outside each span: keep the [CLS]/[SEP] or <s>/</s> specials)."""
    ids = _as_ids(ids)
    words = words_of(ids, word_ids, vocab)
    k = budget(sum(map(len, words)), rates, max_predictions)
    probabilities = span_length_probabilities(p, max_words)
    masked = np.zeros(len(words), dtype=bool)
    spans: list[list[int]] = []  # word indices of each span
    count = 0
    while count < k and not masked.all():
        length = int(rng.choice(np.arange(1, max_words + 1), p=probabilities))
        start = int(rng.choice(np.flatnonzero(~masked)))
        span = [start]
        masked[start] = True
        count += len(words[start])
        while len(span) < length and count < k:
            after = span[-1] + 1
            if after >= len(words) or masked[after] or words[after][0] != words[span[-1]][-1] + 1:
                break
            span.append(after)
            masked[after] = True
            count += len(words[after])
        spans.append(span)
    spans.sort()
    units = [[pos for w in span for pos in words[w]] for span in spans]
    result = corrupt(ids, units, vocab, rates, rng)
    left, right, offset = (np.full(len(ids), -1, dtype=np.int64) for _ in range(3))
    for unit in units:
        before, after = unit[0] - 1, unit[-1] + 1
        if before < 0 or after >= len(ids):
            raise ValueError("a masked span touches the end of the sequence; the span boundary objective needs "
                             "a token on each side (encode with the template's specials)")
        left[unit], right[unit] = before, after
        offset[unit] = np.arange(len(unit))
    result.span_left, result.span_right, result.span_offset = left, right, offset
    return result


class DynamicMasking:
    """RoBERTa's dynamic masking: each call masks afresh, drawing from its own advancing generator.

    ``scheme`` is any of the functions above with the vocabulary bound, called as
    ``scheme(ids, word_ids, rng)``; the default is BERT's token masking."""

    def __init__(self, vocab: MaskingVocab, *, seed: int | np.random.Generator = 0,
                 scheme: Callable[..., Masked] | None = None) -> None:
        self.vocab = vocab
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.scheme = scheme or (lambda ids, word_ids, rng: mask_tokens(ids, vocab, rng, word_ids=word_ids))

    def __call__(self, ids, word_ids=None) -> Masked:
        return self.scheme(ids, word_ids, self.rng)


# --------------------------------------------------------------------------- building inputs


def pack_full_sentences(documents: Iterable[Iterable[Sequence[int]]], max_tokens: int, *, bos_id: int, eos_id: int,
                        doc_separator_id: int | None = None) -> Iterator[list[int]]:
    """RoBERTa FULL-SENTENCES packing: ``<s> s1 s2 ... </s>`` of at most ``max_tokens`` ids.

    ``documents``: each an iterable of sentences (token ids without specials). Sentences are packed in
    order across documents; a document boundary inside a pack gets ``doc_separator_id`` (default
    ``eos_id``, as fairseq). A pack is emitted when the next sentence (with its separator) would not fit;
    a sentence longer than a pack's body (``max_tokens - 2``) is cut into pieces that fill whole packs.
    """
    capacity = max_tokens - 2
    if capacity < 1:
        raise ValueError(f"max_tokens={max_tokens}: a pack needs room for <s>, </s> and at least one token")
    separator = eos_id if doc_separator_id is None else doc_separator_id
    body: list[int] = []
    for document in documents:
        new_document = True
        for sentence in document:
            sentence = [int(t) for t in sentence]
            if not sentence:
                continue
            glue = [separator] if new_document and body else []
            new_document = False
            if len(body) + len(glue) + len(sentence) > capacity and body:
                yield [bos_id, *body, eos_id]
                body, glue = [], []
            body += glue
            while len(body) + len(sentence) > capacity:  # longer than a pack: cut
                room = capacity - len(body)
                body += sentence[:room]
                sentence = sentence[room:]
                yield [bos_id, *body, eos_id]
                body = []
            body += sentence
    if body:
        yield [bos_id, *body, eos_id]


@dataclass
class NspPair:
    """One BERT pretraining pair ``[CLS] A [SEP] B [SEP]``.

    input_ids, token_type_ids (0 for [CLS] A [SEP], 1 for B [SEP]), word_ids (None for the specials;
    word indices run on from A into B): lists of length T. next_sentence_label: 0 IsNext, 1 NotNext
    (transformers' convention). a_source / b_source: (document, first sentence, end sentence) before
    truncation. forced_random: A's chunk had one segment, so B had to come from another document.
    """

    input_ids: list[int]
    token_type_ids: list[int]
    word_ids: list[int | None]
    next_sentence_label: int
    a_source: tuple[int, int, int]
    b_source: tuple[int, int, int]
    forced_random: bool = False


def truncate_pair(a: list, b: list, max_len: int, rng: np.random.Generator) -> None:
    """google-research/bert ``truncate_seq_pair``: drop from the longer side, front or back at random."""
    while len(a) + len(b) > max_len:
        longer = a if len(a) > len(b) else b
        if rng.random() < 0.5:
            del longer[0]
        else:
            longer.pop()


def nsp_pairs(documents: Sequence[Sequence[Sequence[int]]], *, max_tokens: int, cls_id: int, sep_id: int,
              rng: np.random.Generator, short_seq_prob: float = 0.1, next_prob: float = 0.5,
              word_ids: Sequence[Sequence[Sequence[int]]] | None = None) -> list[NspPair]:
    """BERT next-sentence-prediction pairs from every document in order (see the module docstring).

    ``documents``: each a list of sentences as token ids without specials. ``word_ids``: optional, the
    same nesting, the word index of each token within its sentence (default: each token is a word).
    """
    if len(documents) < 2:
        raise ValueError("next-sentence prediction needs at least two documents (NotNext draws from another one)")
    max_num_tokens = max_tokens - 3
    if max_num_tokens < 2:
        raise ValueError(f"max_tokens={max_tokens}: too short for [CLS] A [SEP] B [SEP]")

    def tagged(d: int, s: int) -> list[tuple[int, tuple]]:
        sentence = documents[d][s]
        words = word_ids[d][s] if word_ids is not None else range(len(sentence))
        return [(int(t), (d, s, int(w))) for t, w in zip(sentence, words)]

    pairs: list[NspPair] = []
    for d, document in enumerate(documents):
        target = max_num_tokens  # drawn once per document, as the reference
        if rng.random() < short_seq_prob:
            target = int(rng.integers(2, max_num_tokens + 1))
        chunk: list[int] = []  # sentence indices
        length = 0
        i = 0
        while i < len(document):
            chunk.append(i)
            length += len(document[i])
            if i == len(document) - 1 or length >= target:
                if chunk:
                    a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                    a = [t for s in chunk[:a_end] for t in tagged(d, s)]
                    forced = len(chunk) == 1
                    if forced or rng.random() >= next_prob:
                        label = 1
                        target_b = target - len(a)
                        other = int(rng.integers(0, len(documents) - 1))
                        other += other >= d  # uniform over the other documents
                        start = int(rng.integers(0, len(documents[other])))
                        b, end = [], start
                        while end < len(documents[other]):  # at least one sentence, as the reference
                            b += tagged(other, end)
                            end += 1
                            if len(b) >= target_b:
                                break
                        b_source = (other, start, end)
                        i -= len(chunk) - a_end  # the unused segments are read again
                    else:
                        label = 0
                        b = [t for s in chunk[a_end:] for t in tagged(d, s)]
                        b_source = (d, chunk[a_end], chunk[-1] + 1)
                    a_source = (d, chunk[0], chunk[a_end - 1] + 1)
                    truncate_pair(a, b, max_num_tokens, rng)
                    if a and b:
                        pairs.append(_pair(a, b, label, a_source, b_source, forced, cls_id, sep_id))
                chunk, length = [], 0
            i += 1
    return pairs


def _pair(a, b, label, a_source, b_source, forced, cls_id, sep_id) -> NspPair:
    keys: dict[tuple, int] = {}
    word_ids: list[int | None] = [None]
    for _, key in a:
        word_ids.append(keys.setdefault(key, len(keys)))
    word_ids.append(None)
    for _, key in b:
        word_ids.append(keys.setdefault(("B", key), len(keys)))
    word_ids.append(None)
    input_ids = [cls_id, *(t for t, _ in a), sep_id, *(t for t, _ in b), sep_id]
    token_type_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return NspPair(input_ids, token_type_ids, word_ids, label, a_source, b_source, forced)
