"""Pretraining objectives: what an objective gives the shared training loop.

The loop (``elmokit.engine.steps.StepLoop``, driven by ``elmokit.pretraining.run``) owns checkpoints, exact
resume, DDP, metrics and progress; an objective supplies its batches and its loss::

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

This module holds the interface's BERT and GPT families; ``batching`` the interface and the helpers every
objective shares; ``registry`` the table ``elmokit pretrain --objective NAME`` reads.

Shape legend: B batch, T tokens (padded), H hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
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

# --------------------------------------------------------------------------- masked LM family


def _tokens(example, vocab, rng, rates):
    return mask_tokens(example_field(example, "input_ids"), vocab, rng, word_ids=example_field(example, "word_ids"), rates=rates)


def _whole_words(example, vocab, rng, rates):
    return mask_whole_words(example_field(example, "input_ids"), example_field(example, "word_ids"), vocab, rng, rates=rates)


def _spans(example, vocab, rng, rates):
    return mask_spans(example_field(example, "input_ids"), example_field(example, "word_ids"), vocab, rng, rates=rates)


def _phrases(example, vocab, rng, rates):
    return mask_phrases(example_field(example, "input_ids"), example_field(example, "word_ids"),
                        example_field(example, "phrases", ()), vocab, rng, rates=rates)


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
        token_types = example_field(example, "token_type_ids")
        if token_types is not None:
            row["token_type_ids"] = np.asarray(token_types, dtype=np.int64)
        if self.nsp:
            row["next_sentence_label"] = int(example_field(example, "next_sentence_label"))
        if self.sbo_head is not None:
            row.update(span_left=masked.span_left, span_right=masked.span_right, span_offset=masked.span_offset)
        return row

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        for chunk in chunks(examples, batch_size):
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
        for chunk in chunks(examples, batch_size):
            rows = [{"input_ids": np.asarray(example_field(e, "input_ids"), dtype=np.int64)} for e in chunk]
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
