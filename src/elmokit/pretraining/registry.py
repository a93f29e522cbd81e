"""The table ``elmokit pretrain --objective NAME`` reads: one ``ObjectiveSpec`` per objective (its model family,
tokenizer, example reader and how to build it). It imports every objective module; they import only
``batching`` (and ``objectives`` for the BERT family), never this table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from elmokit.pretraining.batching import Objective
from elmokit.pretraining.dialogue import dialogue_from_options
from elmokit.pretraining.ernie2 import ernie2_from_options
from elmokit.pretraining.ernie_thu import ernie_thu_from_options
from elmokit.pretraining.heads import SpanBoundaryHead
from elmokit.pretraining.knowledge import ernie_from_options
from elmokit.pretraining.masking import MaskingVocab
from elmokit.pretraining.objectives import MaskedLMObjective, bert, gpt, gpt2, roberta, spanbert, wwm
from elmokit.pretraining.permutation import PermutationLMObjective
from elmokit.pretraining.seq2seq import mass
from elmokit.pretraining.unilm import unilm


@dataclass(frozen=True)
class ObjectiveSpec:
    """How ``elmokit pretrain --objective NAME`` sets up an objective.

    family: the ``models.FAMILIES`` entry of the model it trains. tokenizer: ``"wordpiece"`` (BERT's),
    ``"roberta"`` or ``"gpt2"`` (byte-level BPE with that template; ``text/subword_tokenizers.py``). examples: the
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


# the other objectives live in their own modules
def _build_xlnet(tokenizer, model, options: Mapping[str, Any]):
    # the segment is the run's example length (--max-tokens, else the preset's positions)
    length = options.get("segment_length") or options.get("max_tokens") or model.config.mem_len
    return PermutationLMObjective(tokenizer, segment_length=int(length))


def _build_unilm(tokenizer, model, options: Mapping[str, Any]):
    return unilm(tokenizer, max_tokens=int(model.config.max_position_embeddings))


def _build_mass(tokenizer, model, options: Mapping[str, Any]):
    return mass(tokenizer)


def _build_ernie(tokenizer, model, options: Mapping[str, Any]):
    return ernie_from_options(tokenizer, options)


def _build_ernie2(tokenizer, model, options: Mapping[str, Any]):
    return ernie2_from_options(tokenizer, model, options)


for _spec in (
    ObjectiveSpec("xlnet", "xlnet", "wordpiece", "segment_rows", _build_xlnet,
                  "permutation LM, two-stream attention, segment memory over contiguous streams (Yang et al. 2019)"),
    ObjectiveSpec("unilm", "unilm", "wordpiece", "segments", _build_unilm,
                  "one BERT, bidirectional/seq2seq/left-to-right/right-to-left masks 1/3:1/3:1/6:1/6 (Dong et al. 2019)"),
    ObjectiveSpec("mass", "mass", "wordpiece", "segments", _build_mass,
                  "encoder-decoder, 50% contiguous fragment masked, decoder predicts it (Song et al. 2019)"),
    ObjectiveSpec("ernie", "bert-mlm", "wordpiece", "segments", _build_ernie,
                  "knowledge masking: whole words -> phrases -> entities in three stages (Sun et al. 2019)"),
    ObjectiveSpec("ernie2", "bert-mlm", "wordpiece-uncased", "ernie2", _build_ernie2,
                  "continual multi-task pretraining: knowledge masking, capitalization, token-document relation, "
                  "sentence reordering and distance, task embeddings, tasks added in stages (Sun et al. 2020)"),
    ObjectiveSpec("ernie-thu", "bert-mlm", "wordpiece", "segments", ernie_thu_from_options,
                  "WordNet synsets (TransE) fused into the top layers, MLM + denoising entity auto-encoder (Zhang et al. 2019)"),
):
    register(_spec)


def _build_ernie_dlm(tokenizer, model, options: Mapping[str, Any]):
    return dialogue_from_options(tokenizer, model, options, ernie_from_options(tokenizer, options))


register(ObjectiveSpec("ernie-dlm", "bert-mlm", "wordpiece", "segments", _build_ernie_dlm,
                       "ERNIE 1.0 knowledge masking + dialogue LM (QRQ/QRR/QQR, role embeddings, real/fake) on a "
                       "text + dialogue mix (Sun et al. 2019)"))


def _pad_or_eos(tokenizer) -> int:
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)
