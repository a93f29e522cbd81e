"""Small transformer models built from transformers' config classes: one preset table, one builder.

Sizes (``PRESETS``). ``tiny`` is for tests (2 x 32); ``mini`` is Turc et al. 2019's BERT-Tiny width
(2 x 128); ``small`` is 4 x 256 (Turc et al.'s BERT-Mini), ~3.2M non-embedding parameters: the size
of the side-by-side family study (``benchmarks/family_study.py``). Feed-forward width is 4 x hidden and a head is 64 wide (16 in
``tiny``), as in BERT; dropout 0.1 everywhere, as in BERT and GPT.

Families (``FAMILIES``): the transformers class each objective trains, and how a preset becomes its
config:

- ``bert``: ``BertForPreTraining`` (MLM + NSP heads; Devlin et al. 2019), ``bert-mlm``: ``BertForMaskedLM``
  (WWM / SpanBERT / ERNIE: no NSP), two segment types.
- ``roberta``: ``RobertaForMaskedLM`` (Liu et al. 2019): one segment type; positions are counted from
  ``pad_id + 1`` as fairseq does, so ``max_position_embeddings`` is ``max_positions + pad_id + 1``.
- ``gpt``: ``OpenAIGPTLMHeadModel`` (Radford et al. 2018; present in transformers 5.x): post-LN blocks,
  learned positions, GeLU.
- ``gpt2``: ``GPT2LMHeadModel`` (Radford et al. 2019): pre-LN blocks and a final LayerNorm.
- ``distilbert``: ``DistilBertForMaskedLM`` (Sanh et al. 2019), the student of distillation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from elmokit.pretraining.permutation import xlnet_config
from elmokit.pretraining.seq2seq import mass_config
from elmokit.pretraining.unilm import unilm_config


@dataclass(frozen=True, kw_only=True)
class ModelPreset:
    hidden: int
    layers: int
    heads: int
    intermediate: int
    max_positions: int
    dropout: float = 0.1


PRESETS: dict[str, ModelPreset] = {
    "tiny": ModelPreset(hidden=32, layers=2, heads=2, intermediate=128, max_positions=128),
    "mini": ModelPreset(hidden=128, layers=2, heads=2, intermediate=512, max_positions=512),
    "small": ModelPreset(hidden=256, layers=4, heads=4, intermediate=1024, max_positions=512),
}


def _bert_config(p: ModelPreset, vocab_size: int, ids: dict):
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=p.hidden, num_hidden_layers=p.layers, num_attention_heads=p.heads,
                      intermediate_size=p.intermediate, max_position_embeddings=p.max_positions, type_vocab_size=2,
                      hidden_dropout_prob=p.dropout, attention_probs_dropout_prob=p.dropout,
                      pad_token_id=ids.get("pad_id", 0))


def _roberta_config(p: ModelPreset, vocab_size: int, ids: dict):
    from transformers import RobertaConfig

    pad = ids.get("pad_id", 1)
    return RobertaConfig(vocab_size=vocab_size, hidden_size=p.hidden, num_hidden_layers=p.layers, num_attention_heads=p.heads,
                         intermediate_size=p.intermediate, max_position_embeddings=p.max_positions + pad + 1, type_vocab_size=1,
                         hidden_dropout_prob=p.dropout, attention_probs_dropout_prob=p.dropout, pad_token_id=pad,
                         bos_token_id=ids.get("bos_id", 0), eos_token_id=ids.get("eos_id", 2))


def _gpt_config(p: ModelPreset, vocab_size: int, ids: dict):
    from transformers import OpenAIGPTConfig

    return OpenAIGPTConfig(vocab_size=vocab_size, n_embd=p.hidden, n_layer=p.layers, n_head=p.heads, n_positions=p.max_positions,
                           afn="gelu", resid_pdrop=p.dropout, embd_pdrop=p.dropout, attn_pdrop=p.dropout)


def _gpt2_config(p: ModelPreset, vocab_size: int, ids: dict):
    from transformers import GPT2Config

    eos = ids.get("eos_id", 0)
    return GPT2Config(vocab_size=vocab_size, n_embd=p.hidden, n_layer=p.layers, n_head=p.heads, n_positions=p.max_positions,
                      n_inner=p.intermediate, resid_pdrop=p.dropout, embd_pdrop=p.dropout, attn_pdrop=p.dropout,
                      bos_token_id=ids.get("bos_id", eos), eos_token_id=eos)


def _distilbert_config(p: ModelPreset, vocab_size: int, ids: dict):
    from transformers import DistilBertConfig

    return DistilBertConfig(vocab_size=vocab_size, dim=p.hidden, n_layers=p.layers, n_heads=p.heads, hidden_dim=p.intermediate,
                            max_position_embeddings=p.max_positions, dropout=p.dropout, attention_dropout=p.dropout,
                            pad_token_id=ids.get("pad_id", 0))


def _class(name: str):
    import transformers

    return getattr(transformers, name)


# family -> (transformers model class name, config builder)
FAMILIES: dict[str, tuple[str, Callable]] = {
    "bert": ("BertForPreTraining", _bert_config),
    "bert-mlm": ("BertForMaskedLM", _bert_config),
    "roberta": ("RobertaForMaskedLM", _roberta_config),
    "gpt": ("OpenAIGPTLMHeadModel", _gpt_config),
    "gpt2": ("GPT2LMHeadModel", _gpt2_config),
    "distilbert": ("DistilBertForMaskedLM", _distilbert_config),
    "xlnet": ("XLNetLMHeadModel", xlnet_config),  # permutation.py
    "unilm": ("BertForMaskedLM", unilm_config),  # unilm.py: six token types
    "mass": ("BartForConditionalGeneration", mass_config),  # seq2seq.py
}


def preset(name: str, **overrides) -> ModelPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}")
    return replace(PRESETS[name], **overrides)


def build_config(family: str, size: str | ModelPreset, *, vocab_size: int, **ids):
    """The transformers config of ``family`` at a preset (a name or a ``ModelPreset``).

    ``ids``: ``pad_id``, ``bos_id``, ``eos_id`` from the tokenizer (see ``special_ids``)."""
    if family not in FAMILIES:
        raise ValueError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")
    p = preset(size) if isinstance(size, str) else size
    if p.hidden % p.heads:
        raise ValueError(f"hidden size {p.hidden} is not a multiple of the {p.heads} heads")
    return FAMILIES[family][1](p, vocab_size, ids)


def build_model(family: str, size: str | ModelPreset, *, vocab_size: int, seed: int | None = 0, **ids):
    """A freshly initialised model (the library's own init), seeded without touching the caller's RNG."""
    config = build_config(family, size, vocab_size=vocab_size, **ids)
    cls = _class(FAMILIES[family][0])
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        return cls(config)


def special_ids(tokenizer) -> dict:
    """The ids ``build_model`` needs, read from a tokenizer."""
    out = {}
    for key, name in (("pad_id", "pad_token_id"), ("bos_id", "bos_token_id"), ("eos_id", "eos_token_id")):
        value = getattr(tokenizer, name, None)
        if value is not None:
            out[key] = int(value)
    return out


def non_embedding_parameters(model) -> int:
    """Parameters outside the token and position embeddings (and tied output embeddings)."""
    embeddings = {id(p) for m in model.modules() if "Embedding" in type(m).__name__ for p in m.parameters()}
    return sum(p.numel() for p in model.parameters() if id(p) not in embeddings)

