"""The tagger's model: ``TaggerConfig`` (saved as config.json) and ``TaggerModel`` (the nn.Module).

Word embedding + ELMo mix (eq. 1) -> BiLSTM (+ ELMo mix at the output) -> label scores -> CRF or
softmax; see :mod:`elmokit.tasks.tagger` for the paper and the deviations.

Shapes: B batch, T tokens, L representation layers, D representation dim, H LSTM hidden, N labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from elmokit.configs import config_from_dict
from elmokit.errors import UserError
from elmokit.nn.scalar_mix import ScalarMix
from elmokit.tasks.crf import ConditionalRandomField, allowed_transitions, decode_tags, tag_loss
from elmokit.tasks.modes import ELMO_MODES
from elmokit.tasks.word_input import char_cnn, encode_chars

FORMAT_VERSION = 1
PAD, UNK = "<pad>", "<unk>"  # the first two words of every tagger vocabulary

LAST_FOUR = 4


def mixed_layer_count(elmo: str, num_layers: int) -> int:
    """How many layers a learned mix of mode ``elmo`` weighs (0: no mix)."""
    return {"mix": num_layers, "mix-last-four": min(LAST_FOUR, num_layers)}.get(elmo, 0)


def feature_dim(elmo: str, num_layers: int, dim: int) -> int:
    """The width of the representation features the task model sees in mode ``elmo``."""
    if elmo == "none":
        return 0
    return min(LAST_FOUR, num_layers) * dim if elmo == "concat-last-four" else dim


@dataclass(frozen=True, kw_only=True)
class TaggerConfig:
    """Everything that shapes the task model (saved as config.json).

    ``representation`` records how to rebuild the features at prediction time:
    ``{"kind": "elmo", "model": ...}``, ``{"kind": "elmo-original", "options_file": ..., "weight_file": ...}``,
    ``{"kind": "vectors", "path": ...}`` or ``{}`` (no representation).
    """

    FORMAT_VERSION: ClassVar[int] = FORMAT_VERSION
    format_version: int = FORMAT_VERSION
    task: str = "ner"  # "pos" (metric: token accuracy) or "ner" (metric: strict span F1)
    output: str = "crf"  # "crf" or "softmax"
    scheme: str | None = "BIO"  # the label scheme the model is trained in (BIO, BIOES) or None (POS)
    elmo: str = "mix"  # "mix" (eq. 1), "top" (top layer only), "none" (baseline)
    elmo_at_output: bool = False
    elmo_layers: int = 0
    elmo_dim: int = 0
    elmo_dropout: float = 0.5
    mix_l2: float = 0.001
    fine_tune: bool = False
    representation: dict = field(default_factory=dict)
    representation_name: str = ""
    lowercase: bool = True
    min_word_count: int = 2
    word_dim: int = 100
    word_vectors: str = ""  # the pretrained table that initialised the word embedding ("": learned from scratch)
    freeze_word_vectors: bool = False  # keep those rows fixed (elmokit.tasks.word_input)
    char_filters: int = 0  # character CNN filters (0: no character encoder)
    char_width: int = 3
    char_dim: int = 30
    hidden_dim: int = 200
    dropout: float = 0.5

    def __post_init__(self) -> None:
        checks = {"task": ("pos", "ner"), "output": ("crf", "softmax"), "elmo": tuple(ELMO_MODES)}
        for name, allowed in checks.items():
            if getattr(self, name) not in allowed:
                raise UserError(f"TaggerConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.elmo != "none" and (self.elmo_layers < 1 or self.elmo_dim < 1):
            raise UserError("an ELMo tagger needs elmo_layers and elmo_dim (from the representation)")
        if self.elmo == "none" and (self.elmo_at_output or self.fine_tune):
            raise UserError("elmo_at_output and fine_tune need a representation (elmo='mix' or 'top')")
        if self.elmo == "taglm" and self.elmo_at_output:
            raise UserError("elmo='taglm' places the top layer between the two BiLSTM layers; elmo_at_output does not apply")
        if self.char_filters and (self.char_width < 1 or self.char_dim < 1):
            raise UserError(f"a character CNN needs char_width and char_dim >= 1, got {self.char_width}, {self.char_dim}")
        if self.elmo == "second-to-last" and self.elmo_layers < 2:
            raise UserError(f"elmo='second-to-last' needs a representation of 2 or more layers, not {self.elmo_layers}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TaggerConfig:
        return config_from_dict(cls, {"format_version": FORMAT_VERSION, **data}, "tagger config")



class TaggerModel(nn.Module):
    """Word embedding (+ character CNN) + ELMo mix -> BiLSTM (+ ELMo mix) -> label scores -> CRF or softmax.

    With ``elmo="taglm"`` (Peters et al. 2017, eq. 5 there): word embedding -> BiLSTM ->
    ``[h_k,1; h_k^LM]`` (the LM's top layer) -> a second BiLSTM -> label scores.
    """

    def __init__(self, config: TaggerConfig, vocab_size: int, num_labels: int, labels: Sequence[str]) -> None:
        super().__init__()
        self.config = config
        self.word_embedding = nn.Embedding(vocab_size, config.word_dim, padding_idx=0)
        self.char_encoder = (char_cnn(config.char_filters, config.char_width, config.char_dim)
                             if config.char_filters else None)
        mixed = mixed_layer_count(config.elmo, config.elmo_layers)
        self.input_mix = ScalarMix(mixed) if mixed else None
        self.output_mix = ScalarMix(mixed) if mixed and config.elmo_at_output else None
        self.elmo_dropout = nn.Dropout(config.elmo_dropout)
        self.dropout = nn.Dropout(config.dropout)
        features = feature_dim(config.elmo, config.elmo_layers, config.elmo_dim)
        taglm = config.elmo == "taglm"
        input_dim = config.word_dim + config.char_filters + (0 if taglm else features)
        self.lstm = nn.LSTM(input_dim, config.hidden_dim, batch_first=True, bidirectional=True)
        self.upper_lstm = (nn.LSTM(2 * config.hidden_dim + features, config.hidden_dim, batch_first=True, bidirectional=True)
                           if taglm else None)
        output_dim = 2 * config.hidden_dim + (features if config.elmo_at_output else 0)
        self.label_scores = nn.Linear(output_dim, num_labels)
        self.crf = None
        if config.output == "crf":
            constraints = allowed_transitions(labels, config.scheme) if config.scheme else None
            self.crf = ConditionalRandomField(num_labels, constraints=constraints)
        self.bilm: nn.Module | None = None  # set by fine-tuning: runs live on character ids

    def _elmo(self, layers: torch.Tensor, mix: ScalarMix | None) -> torch.Tensor:
        """layers (B, L, T, D) -> the features of mode ``config.elmo``, (B, T, D) or (B, T, 4D), with dropout."""
        mode = self.config.elmo
        if mix is not None:  # eq. 1: gamma * sum_j softmax(w)_j h_kj, over all layers or the top four
            chosen = layers if mode == "mix" else layers[:, -min(LAST_FOUR, layers.shape[1]):]
            features = mix(chosen.transpose(0, 1))
        elif mode in ("top", "taglm"):
            features = layers[:, -1]
        elif mode == "embeddings":
            features = layers[:, 0]
        elif mode == "second-to-last":
            features = layers[:, -2]
        elif mode == "concat-last-four":
            top = layers[:, -min(LAST_FOUR, layers.shape[1]):]  # (B, k, T, D), lowest first
            features = top.permute(0, 2, 1, 3).reshape(top.shape[0], top.shape[2], -1)  # (B, T, k*D)
        else:
            raise ValueError(f"no features in mode {mode!r}")
        return self.elmo_dropout(features)

    def _bilstm(self, lstm: nn.LSTM, inputs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """inputs (B, T, I) -> (B, T, 2H); padding never reaches a real position."""
        lengths = mask.sum(1).cpu()
        packed = pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
        hidden, _ = lstm(packed)
        hidden, _ = pad_packed_sequence(hidden, batch_first=True, total_length=mask.shape[1])
        return hidden

    def emissions(
        self, word_ids: torch.Tensor, mask: torch.Tensor, features: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """word_ids (B, T), mask (B, T), features (B, L, T, D) or char_ids (B, T, 50) -> (B, T, N).
        char_ids feed the character CNN and a fine-tuned biLM alike."""
        tokens = self.word_embedding(word_ids)  # (B, T, word_dim)
        if self.char_encoder is not None:
            if char_ids is None:
                raise ValueError("a tagger with a character encoder needs char_ids")
            tokens = torch.cat([tokens, encode_chars(self.char_encoder, char_ids)], dim=-1)  # [w_k; c_k]
        pieces = [self.dropout(tokens)]
        layers = None
        if self.config.elmo != "none":
            if self.bilm is not None:
                if char_ids is None:
                    raise ValueError("a fine-tuned tagger needs char_ids")
                layers = self.bilm(char_ids, keep_boundaries=False).layers.transpose(0, 1)  # (B, L, T, D)
            elif features is None:
                raise ValueError("an ELMo tagger needs the representation's features (B, L, T, D)")
            else:
                layers = features
            if self.upper_lstm is None:
                pieces.append(self._elmo(layers, self.input_mix))
        inputs = torch.cat(pieces, dim=-1)  # (B, T, word_dim + D)
        hidden = self._bilstm(self.lstm, inputs, mask)  # (B, T, 2H)
        if self.upper_lstm is not None:  # TagLM: [h_k,1; h_k^LM] -> the second BiLSTM
            lower = torch.cat([self.dropout(hidden), self._elmo(layers, None)], dim=-1)
            hidden = self._bilstm(self.upper_lstm, lower, mask)
        hidden = self.dropout(hidden)
        if self.config.elmo_at_output:
            hidden = torch.cat([hidden, self._elmo(layers, self.output_mix)], dim=-1)  # [h_k; ELMo'_k]
        return self.label_scores(hidden)

    def loss(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean over sentences of -log p(tags) (CRF), or mean token cross-entropy (softmax); plus the mix L2."""
        loss = tag_loss(self.crf, emissions, tags, mask)
        for mix in (self.input_mix, self.output_mix):
            if mix is not None and self.config.mix_l2 > 0:
                loss = loss + mix.l2_penalty(self.config.mix_l2)
        return loss

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        return decode_tags(self.crf, emissions, mask)
