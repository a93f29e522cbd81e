"""UniLM (Dong et al. 2019): one shared BERT transformer trained with four self-attention masks.

The paper (§2, Figure 1, Table 1): the same Transformer is trained as a bidirectional LM, a
left-to-right and a right-to-left LM, and a sequence-to-sequence LM; only the self-attention mask
M (eq. 2: ``A_l = softmax(Q K^T / sqrt(d) + M) V``, M_ij = 0 allowed, -inf blocked) changes:

- bidirectional: every token sees every token (``[SOS] A [EOS] B [EOS]``);
- left-to-right: token i sees tokens j <= i; right-to-left: j >= i (one segment ``[SOS] A B [EOS]``);
- seq2seq: a source token (``[SOS] A [EOS]``) sees the whole source; a target token (``B [EOS]``) sees
  the whole source and the target up to and including itself.

The task in every mode is the cloze task of BERT (§2.2): 15% of the tokens chosen, replaced by [MASK]
80% / random 10% / kept 10%, and predicted from what the mask lets them see. "Within one training
batch, 1/3 of the time we use the bidirectional LM objective, 1/3 of the time the sequence-to-sequence
LM objective, and both left-to-right and right-to-left LM objectives are sampled with rate of 1/6"
(§2.3): each example of a batch draws its mode with those probabilities (``MODE_PROBABILITIES``).
Segment embeddings double as the LM identifier (§2.1): as UniLM's code (``--new_segment_ids``,
type_vocab_size 6) the token types are 0/1 bidirectional (A/B), 2 left-to-right, 3 right-to-left,
4/5 seq2seq (source/target). [SOS]/[EOS] are BERT's [CLS]/[SEP], as in UniLM's code.

The mask is built as a (B, T, T) boolean (True = may attend) and handed to transformers' ``BertModel``
as (B, 1, T, T) (transformers 5 takes 4-D masks; a 3-D one is refused), which applies it in every
layer and head. Padding is never attended; a padding query sees only itself (its output is unused).

Deviations: UniLM masks a bigram or trigram instead of one token in 20% of the choices, and adds
next-sentence prediction to the bidirectional LM; here the choice is BERT's token masking
(``masking.mask_tokens``) and there is no NSP. UniLM also initialises from BERT-large; here the model
is trained from scratch like every objective in elmokit.

Shape legend: B batch, T tokens (padded), H hidden.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
from elmokit.pretraining.heads import masked_lm_loss
from elmokit.pretraining.masking import BERT_RATES, MaskingRates, MaskingVocab, mask_tokens, truncate_pair

BIDIRECTIONAL, SEQ2SEQ, LEFT_TO_RIGHT, RIGHT_TO_LEFT = 0, 1, 2, 3
MODE_NAMES = ("bidirectional", "seq2seq", "left_to_right", "right_to_left")
MODE_PROBABILITIES = (1 / 3, 1 / 3, 1 / 6, 1 / 6)  # §2.3
# token type ids of (first segment, second segment) per mode (UniLM's --new_segment_ids)
MODE_TOKEN_TYPES = {BIDIRECTIONAL: (0, 1), SEQ2SEQ: (4, 5), LEFT_TO_RIGHT: (2, 2), RIGHT_TO_LEFT: (3, 3)}
TYPE_VOCAB_SIZE = 6


def unilm_config(p, vocab_size: int, ids: dict):
    """BERT's config with six token types (the LM identifiers above)."""
    from transformers import BertConfig

    return BertConfig(vocab_size=vocab_size, hidden_size=p.hidden, num_hidden_layers=p.layers, num_attention_heads=p.heads,
                      intermediate_size=p.intermediate, max_position_embeddings=p.max_positions,
                      type_vocab_size=TYPE_VOCAB_SIZE, hidden_dropout_prob=p.dropout,
                      attention_probs_dropout_prob=p.dropout, pad_token_id=ids.get("pad_id", 0))


def attention_mask(mode: int, length: int, source_length: int, padded_length: int | None = None) -> np.ndarray:
    """(T, T) bool, True where query i may attend key j, for one sequence of ``length`` real tokens
    padded to ``padded_length``; ``source_length``: tokens of ``[SOS] A [EOS]`` (seq2seq only)."""
    T = padded_length or length
    i = np.arange(T)[:, None]
    j = np.arange(T)[None, :]
    real = (i < length) & (j < length)
    if mode == BIDIRECTIONAL:
        allowed = real
    elif mode == LEFT_TO_RIGHT:
        allowed = real & (j <= i)
    elif mode == RIGHT_TO_LEFT:
        allowed = real & (j >= i)
    elif mode == SEQ2SEQ:
        allowed = real & ((j < source_length) | ((i >= source_length) & (j <= i)))
    else:
        raise ValueError(f"unknown UniLM mode {mode}")
    pad = np.arange(T) >= length
    allowed[pad, pad] = True  # a padding query sees itself only (no NaN; its output is never used)
    return allowed


def build_input(a, b, mode: int, *, cls_id: int, sep_id: int) -> dict[str, Any]:
    """The ids, token types and source length of one pair in ``mode`` (see the module docstring)."""
    first, second = MODE_TOKEN_TYPES[mode]
    if mode in (BIDIRECTIONAL, SEQ2SEQ):
        ids = [cls_id, *a, sep_id, *b, sep_id]
        types = [first] * (len(a) + 2) + [second] * (len(b) + 1)
    else:
        ids = [cls_id, *a, *b, sep_id]
        types = [first] * len(ids)
    return {"input_ids": np.asarray(ids, dtype=np.int64), "token_type_ids": np.asarray(types, dtype=np.int64),
            "source_length": len(a) + 2}


def source_and_target(example) -> tuple[list[int], list[int]]:
    """(a, b) token ids without specials: the example's ``a`` and ``b``, or a single segment
    (``input_ids`` + ``word_ids``, specials where the word id is None) split at the word boundary
    nearest its middle (the first half is the source, the rest its continuation). A one-token
    segment has nothing to split: it is all source, ``b`` empty (``UniLMObjective.example`` then
    draws a mode that needs no target)."""
    if example_field(example, "a") is not None:
        return [int(t) for t in example_field(example, "a")], [int(t) for t in example_field(example, "b")]
    ids, word_ids = example_field(example, "input_ids"), example_field(example, "word_ids")
    pairs = [(int(t), w) for t, w in zip(ids, word_ids) if w is not None and w >= 0]
    if not pairs:
        raise ValueError("a UniLM example needs at least one token")
    if len(pairs) == 1:
        return [pairs[0][0]], []
    starts = [i for i in range(1, len(pairs)) if pairs[i][1] != pairs[i - 1][1]] or [len(pairs) // 2]
    cut = min(starts, key=lambda i: abs(i - len(pairs) / 2))
    return [t for t, _ in pairs[:cut]], [t for t, _ in pairs[cut:]]


class UniLMObjective:
    """UniLM pretraining (see the module docstring). Examples carry ``a`` and ``b``: two consecutive
    text segments as token ids without specials (a seq2seq source and target; read as one text by
    the unidirectional modes), or are single segments (``source_and_target``). Model: family 'unilm'
    (``BertForMaskedLM``, six token types)."""

    name = "unilm"

    def __init__(self, vocab: MaskingVocab, *, cls_id: int, sep_id: int, pad_id: int, max_tokens: int = 128,
                 rates: MaskingRates = BERT_RATES, mode_probabilities=MODE_PROBABILITIES) -> None:
        if len(mode_probabilities) != 4 or abs(sum(mode_probabilities) - 1) > 1e-9:
            raise ValueError(f"mode_probabilities must be 4 numbers summing to 1, got {mode_probabilities}")
        self.vocab, self.cls_id, self.sep_id, self.pad_id = vocab, cls_id, sep_id, pad_id
        self.max_tokens, self.rates, self.mode_probabilities = max_tokens, rates, tuple(mode_probabilities)

    def modules(self) -> dict[str, nn.Module]:
        return {}

    def example(self, example, rng: np.random.Generator, mode: int | None = None) -> dict[str, Any]:
        """One masked row: input_ids, token_type_ids, labels (T,), mode, source_length."""
        a, b = source_and_target(example)
        if mode is None:
            mode = self.draw_mode(rng, has_target=bool(b))
        truncate_pair(a, b, self.max_tokens - (3 if mode in (BIDIRECTIONAL, SEQ2SEQ) else 2), rng)
        row = build_input(a, b, mode, cls_id=self.cls_id, sep_id=self.sep_id)
        masked = mask_tokens(row["input_ids"], self.vocab, rng, rates=self.rates)
        row["input_ids"], row["labels"], row["mode"] = masked.input_ids, masked.labels, mode
        return row

    def draw_mode(self, rng: np.random.Generator, *, has_target: bool = True) -> int:
        """A mode at the paper's rates; without a target (a one-token text) seq2seq has nothing to
        predict, so the other three keep their relative rates (1/3 : 1/6 : 1/6 -> 1/2 : 1/4 : 1/4)."""
        p = np.asarray(self.mode_probabilities, dtype=np.float64)
        if not has_target:
            p[SEQ2SEQ] = 0.0
            p = p / p.sum()
        return int(rng.choice(4, p=p))

    def collate(self, rows) -> dict[str, torch.Tensor]:
        """Pad the rows and add ``unilm_mask`` (B, T, T) bool."""
        lengths = [len(r["input_ids"]) for r in rows]
        batch = collate([{k: r[k] for k in ("input_ids", "token_type_ids", "labels", "mode", "source_length")}
                         for r in rows], pad_id=self.pad_id)
        T = batch["input_ids"].shape[1]
        masks = [attention_mask(r["mode"], n, r["source_length"], T) for r, n in zip(rows, lengths)]
        batch["unilm_mask"] = torch.from_numpy(np.stack(masks))
        return batch

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        for chunk in chunks(examples, batch_size):
            yield self.collate([self.example(e, rng) for e in chunk])

    def hidden(self, model, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """The shared transformer's last layer (B, T, H) under each row's mask."""
        return model.base_model(input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                                attention_mask=batch["unilm_mask"][:, None]).last_hidden_state

    def loss(self, model, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        """Cross-entropy at the masked tokens of all modes together (the paper sums the LM losses)."""
        mlm = masked_lm_loss(model, self.hidden(model, batch), batch["labels"])
        parts = {"mlm": float(mlm.mean.detach())}
        for mode, name in enumerate(MODE_NAMES):
            parts[f"rows_{name}"] = float((batch["mode"] == mode).sum())
        return ObjectiveLoss(mlm.mean, parts, mlm.count, int(batch["attention_mask"].sum()))


def unilm(tokenizer, *, max_tokens: int = 128) -> UniLMObjective:
    return UniLMObjective(MaskingVocab.from_tokenizer(tokenizer), cls_id=tokenizer.cls_token_id,
                          sep_id=tokenizer.sep_token_id, pad_id=tokenizer.pad_token_id, max_tokens=max_tokens)
