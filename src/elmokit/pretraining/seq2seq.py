"""MASS (Song et al. 2019): masked sequence-to-sequence pretraining on transformers' BART classes.

The paper (§3.1, Figure 1, eq. 1): for a sentence x of m tokens, a contiguous fragment x^{u:v} of
k tokens is masked in the encoder input (x^{\\u:v}); the decoder predicts exactly the fragment,
autoregressively: L = sum_{t=u..v} log P(x_t | x_{<t}^{u:v}, x^{\\u:v}). The decoder's input at the
fragment is the fragment shifted right by one, and "the tokens in the decoder which are unmasked in
the encoder are masked" (Figure 1: decoder input ``_ _ _ x3 x4 x5 _ _`` for the fragment x3..x6), so
the decoder must read the source through the encoder-decoder attention. k = 50% of m works best
(§4.1, Figure 5), and masked encoder tokens are replaced as in BERT: [M] 80%, a random token 10%,
kept 10%.

Here (``mass_example``), per sentence: m = the maskable (non-special) tokens, which must be one
contiguous run; k = ``max(1, round(ratio * m))`` (ratio 0.5, rounding half up); the fragment's first
token u is uniform over the m - k + 1 places the fragment fits. Encoder input: the ids with the
fragment corrupted 80/10/10 per token. Decoder input (as long as the encoder input, position for
position as in Figure 1): [M] everywhere except x_{t-1} at the positions t = u+1..v; the position u
reads [M] (Figure 1's ``_``, the start of the fragment). Labels: x_t at t = u..v, -100 elsewhere.

Model: ``BartForConditionalGeneration`` (family 'mass') at a preset, encoder and decoder of the
preset's depth: post-LN Transformer with learned positions, as MASS's. The loss applies the model's
own LM head (tied output embeddings + ``final_logits_bias``) to the k fragment rows only (as
``heads.masked_lm_loss`` does for BERT), not to all T decoder positions.

Deviations: MASS's code feeds the decoder the fragment alone with its original positions (half the
decoder's work); BART's decoder numbers its positions from 0, so the decoder here runs over the whole
sentence, the other positions reading [M] — the paper's formulation, at twice the decoder cost.
BART adds a LayerNorm on the embeddings; MASS's Transformer does not.

Shape legend: B batch, T tokens (padded), H hidden, V vocabulary, M fragment tokens in the batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
from elmokit.pretraining.masking import BERT_RATES, IGNORE_INDEX, MaskingRates, MaskingVocab, corrupt, maskable


def mass_config(p, vocab_size: int, ids: dict):
    """A ``BartConfig`` at a ``ModelPreset`` (encoder and decoder each ``p.layers`` deep)."""
    from transformers import BartConfig

    pad, bos, eos = ids.get("pad_id", 0), ids.get("bos_id", ids.get("cls_id", 2)), ids.get("eos_id", ids.get("sep_id", 3))
    return BartConfig(vocab_size=vocab_size, d_model=p.hidden, encoder_layers=p.layers, decoder_layers=p.layers,
                      encoder_attention_heads=p.heads, decoder_attention_heads=p.heads, encoder_ffn_dim=p.intermediate,
                      decoder_ffn_dim=p.intermediate, max_position_embeddings=p.max_positions, dropout=p.dropout,
                      attention_dropout=p.dropout, activation_function="gelu", pad_token_id=pad, bos_token_id=bos,
                      eos_token_id=eos, decoder_start_token_id=bos, forced_eos_token_id=None)


@dataclass
class MassExample:
    """One MASS training row; arrays (T,) int64. ``fragment``: (u, v + 1), token positions."""

    input_ids: np.ndarray
    decoder_input_ids: np.ndarray
    labels: np.ndarray
    fragment: tuple[int, int]


def fragment_length(m: int, ratio: float = 0.5) -> int:
    """k = max(1, round(ratio * m)), rounding half up (MASS: k = 50% of the sentence)."""
    return max(1, min(m, int(math.floor(ratio * m + 0.5))))


def mass_example(ids, vocab: MaskingVocab, rng: np.random.Generator, *, word_ids=None, ratio: float = 0.5,
                 rates: MaskingRates = BERT_RATES) -> MassExample:
    """Mask one contiguous fragment of one sentence (see the module docstring)."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    positions = np.flatnonzero(maskable(ids, word_ids, vocab))
    m = len(positions)
    if m == 0:
        raise ValueError("a MASS example needs at least one non-special token")
    if positions[-1] - positions[0] + 1 != m:
        raise ValueError("MASS masks a contiguous fragment of one sentence: the non-special tokens must be contiguous")
    k = fragment_length(m, ratio)
    u = int(positions[0] + rng.integers(0, m - k + 1))
    fragment = list(range(u, u + k))
    corrupted = corrupt(ids, [[t] for t in fragment], vocab, rates, rng)
    decoder = np.full_like(ids, vocab.mask_id)
    decoder[u + 1: u + k] = ids[u: u + k - 1]
    return MassExample(corrupted.input_ids, decoder, corrupted.labels, (u, u + k))


class MassObjective:
    """MASS pretraining. Examples: sentences with ``input_ids`` (with the tokenizer's specials) and
    optionally ``word_ids``. Model: family 'mass' (``BartForConditionalGeneration``)."""

    name = "mass"

    def __init__(self, vocab: MaskingVocab, *, pad_id: int, ratio: float = 0.5, rates: MaskingRates = BERT_RATES) -> None:
        if not 0 < ratio <= 1:
            raise ValueError(f"fragment ratio {ratio} must be in (0, 1]")
        self.vocab, self.pad_id, self.ratio, self.rates = vocab, pad_id, ratio, rates

    def modules(self) -> dict[str, nn.Module]:
        return {}

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        """input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, labels: (B, T)."""
        for chunk in chunks(examples, batch_size):
            rows = []
            for e in chunk:
                x = mass_example(example_field(e, "input_ids"), self.vocab, rng, word_ids=example_field(e, "word_ids"),
                                 ratio=self.ratio, rates=self.rates)
                rows.append({"input_ids": x.input_ids, "decoder_input_ids": x.decoder_input_ids, "labels": x.labels})
            batch = collate(rows, pad_id=self.pad_id)
            batch["decoder_input_ids"] = batch["decoder_input_ids"].masked_fill(batch["attention_mask"] == 0, self.pad_id)
            batch["decoder_attention_mask"] = batch["attention_mask"].clone()
            yield batch

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        """Mean cross-entropy of the decoder at the fragment tokens."""
        out = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          decoder_input_ids=batch["decoder_input_ids"],
                          decoder_attention_mask=batch["decoder_attention_mask"])
        hidden = out.last_hidden_state  # (B, T, H), the decoder's
        labels = batch["labels"].reshape(-1)
        index = (labels != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)
        rows = hidden.reshape(-1, hidden.size(-1)).index_select(0, index)  # (M, H)
        logits = model.lm_head(rows) + model.final_logits_bias  # (M, V)
        loss = F.cross_entropy(logits.float(), labels.index_select(0, index))
        return ObjectiveLoss(loss, {"mass": float(loss.detach())}, int(index.numel()), int(batch["attention_mask"].sum()))


def mass(tokenizer, *, ratio: float = 0.5) -> MassObjective:
    return MassObjective(MaskingVocab.from_tokenizer(tokenizer), pad_id=tokenizer.pad_token_id, ratio=ratio)
