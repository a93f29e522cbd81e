"""Pretraining objectives: what an objective gives the shared training loop (DESIGN.md, convention 15).

The loop in ``elmokit.training`` owns checkpoints, exact resume, DDP, metrics and progress; an
objective supplies its batches and its loss::

    class Objective(Protocol):
        name: str
        def modules(self) -> dict[str, nn.Module]: ...
            # parameters the objective owns beside the model (SpanBERT's boundary head); the loop
            # optimises and checkpoints them with the model
        def batches(self, examples, *, batch_size, rng) -> Iterator[dict[str, Tensor]]: ...
            # examples: dicts (or objects) with input_ids, word_ids and what the objective needs;
            # masking is drawn here, from ``rng``, each time an example is fed (dynamic masking), so
            # batches are a function of (examples, rng state): the loop saves the rng for exact resume
        def loss(self, model, batch) -> ObjectiveLoss: ...

Not wired into ``elmokit.training`` yet (its trainer is being refactored); ``elmokit pretrain`` will
call ``batches`` and ``loss`` from there.

Shape legend: B batch, T tokens (padded), H hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from elmokit.pretraining.heads import SpanBoundaryHead, causal_lm_model_loss, masked_lm_loss, next_sentence_loss
from elmokit.pretraining.masking import (
    BERT_RATES,
    IGNORE_INDEX,
    MaskingRates,
    MaskingVocab,
    mask_phrases,
    mask_spans,
    mask_tokens,
    mask_whole_words,
)


@dataclass
class ObjectiveLoss:
    """loss: the scalar to minimise (the paper's sum of mean losses). parts: each component's mean,
    detached, for the metrics. n_targets: predicted positions; n_tokens: non-pad input tokens."""

    loss: torch.Tensor
    parts: dict[str, float] = field(default_factory=dict)
    n_targets: int = 0
    n_tokens: int = 0


class Objective(Protocol):
    name: str

    def modules(self) -> dict[str, nn.Module]: ...

    def batches(self, examples: Iterable[Any], *, batch_size: int,
                rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]: ...

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss: ...


# --------------------------------------------------------------------------- batching

_PAD_VALUES = {"labels": IGNORE_INDEX, "token_type_ids": 0, "attention_mask": 0,
               "span_left": -1, "span_right": -1, "span_offset": -1}


def _field(example, name: str, default=None):
    if isinstance(example, Mapping):
        return example.get(name, default)
    return getattr(example, name, default)


def collate(rows: Sequence[Mapping[str, Any]], *, pad_id: int) -> dict[str, torch.Tensor]:
    """Pad per-sequence arrays to (B, T) tensors: input_ids with ``pad_id``, labels with -100,
    token_type_ids / attention_mask with 0, span targets with -1; scalars (next_sentence_label) stack."""
    T = max(len(r["input_ids"]) for r in rows)
    out: dict[str, torch.Tensor] = {}
    for name in rows[0]:
        values = [r[name] for r in rows]
        if np.ndim(values[0]) == 0:
            out[name] = torch.tensor(np.asarray(values), dtype=torch.long)
            continue
        pad = pad_id if name == "input_ids" else _PAD_VALUES.get(name, 0)
        array = np.full((len(rows), T), pad, dtype=np.int64)
        for b, v in enumerate(values):
            array[b, : len(v)] = v
        out[name] = torch.from_numpy(array)
    if "attention_mask" not in out:
        mask = np.zeros((len(rows), T), dtype=np.int64)
        for b, r in enumerate(rows):
            mask[b, : len(r["input_ids"])] = 1
        out["attention_mask"] = torch.from_numpy(mask)
    return out


def _chunks(examples: Iterable[Any], batch_size: int) -> Iterator[list]:
    chunk = []
    for example in examples:
        chunk.append(example)
        if len(chunk) == batch_size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


# --------------------------------------------------------------------------- masked LM family

def _tokens(example, vocab, rng, rates):
    return mask_tokens(_field(example, "input_ids"), vocab, rng, word_ids=_field(example, "word_ids"), rates=rates)


def _whole_words(example, vocab, rng, rates):
    return mask_whole_words(_field(example, "input_ids"), _field(example, "word_ids"), vocab, rng, rates=rates)


def _spans(example, vocab, rng, rates):
    return mask_spans(_field(example, "input_ids"), _field(example, "word_ids"), vocab, rng, rates=rates)


def _phrases(example, vocab, rng, rates):
    return mask_phrases(_field(example, "input_ids"), _field(example, "word_ids"), _field(example, "phrases", ()),
                        vocab, rng, rates=rates)


SCHEMES: dict[str, Callable] = {"tokens": _tokens, "whole_words": _whole_words, "spans": _spans, "phrases": _phrases}


class MaskedLMObjective:
    """BERT-family pretraining: a masking scheme, optional NSP, optional span boundary objective.

    ``scheme``: "tokens" (BERT, RoBERTa), "whole_words" (WWM), "spans" (SpanBERT), "phrases" (ERNIE;
    examples carry ``phrases``: word ranges). ``nsp``: examples are ``NspPair``s (or carry
    token_type_ids and next_sentence_label) and the model is ``BertForPreTraining``. ``sbo_head``: a
    ``SpanBoundaryHead`` (scheme "spans" only); its loss is added to the MLM loss.
    """

    def __init__(self, name: str, vocab: MaskingVocab, *, pad_id: int, scheme: str = "tokens", nsp: bool = False,
                 sbo_head: SpanBoundaryHead | None = None, rates: MaskingRates = BERT_RATES) -> None:
        if scheme not in SCHEMES:
            raise ValueError(f"unknown masking scheme {scheme!r}; known: {', '.join(SCHEMES)}")
        if sbo_head is not None and scheme != "spans":
            raise ValueError("the span boundary objective needs the 'spans' masking scheme")
        self.name, self.vocab, self.pad_id, self.scheme = name, vocab, pad_id, scheme
        self.nsp, self.sbo_head, self.rates = nsp, sbo_head, rates

    def modules(self) -> dict[str, nn.Module]:
        return {"sbo_head": self.sbo_head} if self.sbo_head is not None else {}

    def mask(self, example, rng: np.random.Generator) -> dict[str, np.ndarray]:
        masked = SCHEMES[self.scheme](example, self.vocab, rng, self.rates)
        row: dict[str, Any] = {"input_ids": masked.input_ids, "labels": masked.labels}
        token_types = _field(example, "token_type_ids")
        if token_types is not None:
            row["token_type_ids"] = np.asarray(token_types, dtype=np.int64)
        if self.nsp:
            row["next_sentence_label"] = int(_field(example, "next_sentence_label"))
        if self.sbo_head is not None:
            row.update(span_left=masked.span_left, span_right=masked.span_right, span_offset=masked.span_offset)
        return row

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        for chunk in _chunks(examples, batch_size):
            yield collate([self.mask(e, rng) for e in chunk], pad_id=self.pad_id)

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        names = ("input_ids", "attention_mask") + (("token_type_ids",) if hasattr(model.config, "type_vocab_size") else ())
        inputs = {k: batch[k] for k in names if k in batch}  # DistilBERT has no segment embeddings
        out = model.base_model(**inputs)
        hidden = out[0]  # (B, T, H)
        mlm = masked_lm_loss(model, hidden, batch["labels"])
        total, parts = mlm.mean, {"mlm": float(mlm.mean.detach())}
        if self.nsp:
            nsp = next_sentence_loss(model, out.pooler_output, batch["next_sentence_label"])
            total = total + nsp.mean
            parts["nsp"] = float(nsp.mean.detach())
        if self.sbo_head is not None:
            sbo = self.sbo_head.loss(model, hidden, batch["labels"], batch["span_left"], batch["span_right"],
                                     batch["span_offset"])
            total = total + sbo.mean
            parts["sbo"] = float(sbo.mean.detach())
        return ObjectiveLoss(total, parts, mlm.count, int(batch["attention_mask"].sum()))


class CausalLMObjective:
    """GPT / GPT-2: predict every next token (Radford et al. 2018 eq. 1); padding is not predicted."""

    def __init__(self, name: str, *, pad_id: int = 0) -> None:
        self.name, self.pad_id = name, pad_id

    def modules(self) -> dict[str, nn.Module]:
        return {}

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        for chunk in _chunks(examples, batch_size):
            rows = [{"input_ids": np.asarray(_field(e, "input_ids"), dtype=np.int64)} for e in chunk]
            batch = collate(rows, pad_id=self.pad_id)
            batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
            yield batch

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        lm = causal_lm_model_loss(model, batch["input_ids"], batch["attention_mask"], batch["labels"])  # heads.py
        loss = lm.mean
        return ObjectiveLoss(loss, {"lm": float(loss.detach())}, lm.count, int(batch["attention_mask"].sum()))


def bert(vocab: MaskingVocab, *, pad_id: int) -> MaskedLMObjective:
    """BERT: token masking 15% / 80-10-10 plus next-sentence prediction (model: family 'bert')."""
    return MaskedLMObjective("bert", vocab, pad_id=pad_id, scheme="tokens", nsp=True)


def roberta(vocab: MaskingVocab, *, pad_id: int) -> MaskedLMObjective:
    """RoBERTa: dynamic token masking, no NSP; examples are FULL-SENTENCES packs."""
    return MaskedLMObjective("roberta", vocab, pad_id=pad_id, scheme="tokens")


def wwm(vocab: MaskingVocab, *, pad_id: int, nsp: bool = False) -> MaskedLMObjective:
    return MaskedLMObjective("wwm", vocab, pad_id=pad_id, scheme="whole_words", nsp=nsp)


def ernie(vocab: MaskingVocab, *, pad_id: int) -> MaskedLMObjective:
    return MaskedLMObjective("ernie", vocab, pad_id=pad_id, scheme="phrases")


def spanbert(vocab: MaskingVocab, *, pad_id: int, sbo_head: SpanBoundaryHead | None = None) -> MaskedLMObjective:
    """SpanBERT: span masking on single segments, no NSP; ``sbo_head`` adds the boundary objective."""
    return MaskedLMObjective("spanbert", vocab, pad_id=pad_id, scheme="spans", sbo_head=sbo_head)


def gpt(*, pad_id: int = 0) -> CausalLMObjective:
    return CausalLMObjective("gpt", pad_id=pad_id)


def gpt2(*, pad_id: int = 0) -> CausalLMObjective:
    return CausalLMObjective("gpt2", pad_id=pad_id)


# --------------------------------------------------------------------------- the table `elmokit pretrain` reads


@dataclass(frozen=True)
class ObjectiveSpec:
    """How ``elmokit pretrain --objective NAME`` sets up an objective.

    family: the ``models.FAMILIES`` entry of the model it trains. tokenizer: ``"wordpiece"`` (BERT's),
    ``"roberta"`` or ``"gpt2"`` (byte-level BPE with that template; ``tokenizers.py``). examples: the
    ``pretraining.corpus.EXAMPLE_READERS`` entry that turns documents into its examples. build:
    ``build(tokenizer, model, options) -> Objective`` (``options``: the ``--sbo`` style switches, a dict).
    """

    name: str
    family: str
    tokenizer: str
    examples: str
    build: Callable[[Any, Any, Mapping[str, Any]], Objective]
    summary: str = ""


def _masking_vocab(tokenizer) -> MaskingVocab:
    return MaskingVocab.from_tokenizer(tokenizer)


def _build_spanbert(tokenizer, model, options: Mapping[str, Any]) -> MaskedLMObjective:
    head = None
    if options.get("sbo"):
        head = SpanBoundaryHead(int(model.config.hidden_size), int(model.config.vocab_size))
    return spanbert(_masking_vocab(tokenizer), pad_id=tokenizer.pad_token_id, sbo_head=head)


# name -> spec. One entry per objective; new objectives add theirs with ``register``.
OBJECTIVES: dict[str, ObjectiveSpec] = {}


def register(spec: ObjectiveSpec) -> ObjectiveSpec:
    """Add (or replace) an entry of ``OBJECTIVES``."""
    OBJECTIVES[spec.name] = spec
    return spec


for _spec in (
    ObjectiveSpec("bert", "bert", "wordpiece", "pairs",
                  lambda tok, model, opts: bert(_masking_vocab(tok), pad_id=tok.pad_token_id),
                  "MLM 15% 80/10/10 + next-sentence prediction on sentence pairs (Devlin et al. 2019)"),
    ObjectiveSpec("roberta", "roberta", "roberta", "packed",
                  lambda tok, model, opts: roberta(_masking_vocab(tok), pad_id=tok.pad_token_id),
                  "dynamic MLM on FULL-SENTENCES packs, no NSP, byte-level BPE (Liu et al. 2019)"),
    ObjectiveSpec("wwm", "bert-mlm", "wordpiece", "segments",
                  lambda tok, model, opts: wwm(_masking_vocab(tok), pad_id=tok.pad_token_id),
                  "whole-word masking, 80/10/10 per word (Cui et al. 2019)"),
    ObjectiveSpec("spanbert", "bert-mlm", "wordpiece", "segments", _build_spanbert,
                  "span masking on single segments, --sbo adds the span boundary objective (Joshi et al. 2020)"),
    ObjectiveSpec("gpt", "gpt", "gpt2", "causal", lambda tok, model, opts: gpt(pad_id=_pad_or_eos(tok)),
                  "causal LM, post-LN, learned positions (Radford et al. 2018)"),
    ObjectiveSpec("gpt2", "gpt2", "gpt2", "causal", lambda tok, model, opts: gpt2(pad_id=_pad_or_eos(tok)),
                  "causal LM, pre-LN, byte-level BPE (Radford et al. 2019)"),
):
    register(_spec)


# issue 12's other objectives live in their own modules (which import this one): built lazily.
def _build_xlnet(tokenizer, model, options: Mapping[str, Any]):
    from elmokit.pretraining.permutation import PermutationLMObjective

    # the segment is the run's example length (--max-tokens, else the preset's positions)
    length = options.get("segment_length") or options.get("max_tokens") or model.config.mem_len
    return PermutationLMObjective(tokenizer, segment_length=int(length))


def _build_unilm(tokenizer, model, options: Mapping[str, Any]):
    from elmokit.pretraining.unilm import unilm

    return unilm(tokenizer, max_tokens=int(model.config.max_position_embeddings))


def _build_mass(tokenizer, model, options: Mapping[str, Any]):
    from elmokit.pretraining.seq2seq import mass

    return mass(tokenizer)


def _build_ernie(tokenizer, model, options: Mapping[str, Any]):
    from elmokit.pretraining.knowledge import ernie_from_options

    return ernie_from_options(tokenizer, options)


for _spec in (
    ObjectiveSpec("xlnet", "xlnet", "wordpiece", "segment_rows", _build_xlnet,
                  "permutation LM, two-stream attention, segment memory over contiguous streams (Yang et al. 2019)"),
    ObjectiveSpec("unilm", "unilm", "wordpiece", "segments", _build_unilm,
                  "one BERT, bidirectional/seq2seq/left-to-right/right-to-left masks 1/3:1/3:1/6:1/6 (Dong et al. 2019)"),
    ObjectiveSpec("mass", "mass", "wordpiece", "segments", _build_mass,
                  "encoder-decoder, 50% contiguous fragment masked, decoder predicts it (Song et al. 2019)"),
    ObjectiveSpec("ernie", "bert-mlm", "wordpiece", "segments", _build_ernie,
                  "knowledge masking: whole words -> phrases -> entities in three stages (Sun et al. 2019)"),
):
    register(_spec)


def _pad_or_eos(tokenizer) -> int:
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)
