"""A sentence classifier with ELMo (Peters et al. 2018, section 3.3).

The model, in data-flow order (legend: B batch, T tokens, L layers, D representation dim,
E word-vector dim, H LSTM hidden size, K labels):

    x_k       learned word vectors                          (B, T, E)
    ELMo_k    gamma * sum_j softmax(w)_j h_{k,j}  (eq. 1)   (B, T, D)   from frozen, cached layers
    [x_k; ELMo_k] -> dropout -> BiLSTM                      (B, T, 2H)
    max and mean over the real tokens, concatenated         (B, 4H)
    dropout -> linear                                       (B, K)

trained with cross-entropy plus the paper's lambda * ||w||^2 on the mix weights (lambda = 0.001).
``use_elmo=False`` is the baseline without ELMo (word vectors only). Deviation, stated: the
paper's SST model is the BCN of McCann et al. (2017) with GloVe and CoVe inputs; this is the
simpler BiLSTM + pooling classifier; x_k is learned from scratch unless pretrained vectors
initialise it, optionally with a character CNN beside it (``elmokit.tasks.word_input``: the strong
baseline of the paper's Table 1).

Its data readers are in :mod:`elmokit.tasks.data` (labelled TSV) and :mod:`elmokit.evaluation.sst`
(the SST trees and the benchmark).

A saved model is a folder: ``config.json`` (format_version, sizes, labels' count, the
representation to embed with as a spec of :mod:`elmokit.representation`), ``model.safetensors``,
``labels.json``, ``vocab.txt``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from elmokit.configs import config_from_dict
from elmokit.engine.epochs import EpochOptions, seed_everything, shuffled_batches, train_epochs
from elmokit.errors import InputNotFound, UserError
from elmokit.formats.checks import refuse_non_finite, refuse_non_finite_read
from elmokit.io import output_directory
from elmokit.nn.scalar_mix import ScalarMix
from elmokit.tasks.word_input import char_cnn, encode_chars, extend_vocabulary, initialise_embedding
from elmokit.text.chars import batch_to_ids

logger = logging.getLogger(__name__)

# 2: ``representation`` is a representation spec (a dict); version 1 held a model name or folder
# (str), or None for original-format files, upgraded in ClassifierConfig.from_dict.
FORMAT_VERSION = 2
SAVED_BY = "classify train"  # the command whose output a classifier folder is (any recipe): it may replace it
PAD, UNK = "<pad>", "<unk>"


# ---------------------------------------------------------------------- the model
@dataclass(frozen=True, kw_only=True)
class ClassifierConfig:
    num_labels: int
    vocab_size: int
    use_elmo: bool = True
    elmo_layers: int = 0  # L of the representation (0 without ELMo)
    elmo_dim: int = 0  # D of the representation
    word_dim: int = 50
    word_vectors: str = ""  # the pretrained table that initialised x_k ("": learned from scratch)
    freeze_word_vectors: bool = False
    char_filters: int = 0  # character CNN filters, c_k (0: none); elmokit.tasks.word_input
    char_width: int = 3
    char_dim: int = 30
    hidden_dim: int = 64
    dropout: float = 0.5
    mix_l2: float = 0.001  # the paper's lambda on the scalar-mix weights
    representation: dict = dataclasses.field(default_factory=dict)  # spec to embed with at predict ({}: none/unknown)
    format_version: int = FORMAT_VERSION
    FORMAT_VERSION: ClassVar[int] = FORMAT_VERSION

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> ClassifierConfig:
        version = values.get("format_version")
        if version not in (1, FORMAT_VERSION):
            raise UserError(f"classifier config format_version {version!r}; this elmokit reads 1 to {FORMAT_VERSION}")
        if version == 1:  # the representation was a model name or folder, or None (original files: unknown)
            old = values.get("representation")
            values = {**values, "format_version": FORMAT_VERSION,
                      "representation": {"kind": "elmo", "model": old} if old else {}}
            logger.info("classifier config format_version 1 upgraded: representation %r read as %r",
                        old, values["representation"])
        return config_from_dict(cls, values, "classifier config")


class SentenceClassifier(nn.Module):
    def __init__(self, config: ClassifierConfig):
        super().__init__()
        self.config = config
        self.word_embedding = nn.Embedding(config.vocab_size, config.word_dim, padding_idx=0)
        self.char_encoder = (char_cnn(config.char_filters, config.char_width, config.char_dim)
                             if config.char_filters else None)
        self.scalar_mix = ScalarMix(config.elmo_layers) if config.use_elmo else None
        self.dropout = nn.Dropout(config.dropout)
        input_dim = config.word_dim + config.char_filters + (config.elmo_dim if config.use_elmo else 0)
        self.encoder = nn.LSTM(input_dim, config.hidden_dim, batch_first=True, bidirectional=True)
        self.output = nn.Linear(4 * config.hidden_dim, config.num_labels)

    def forward(self, word_ids: torch.Tensor, mask: torch.Tensor, layers: torch.Tensor | None = None,
                char_ids: torch.Tensor | None = None) -> torch.Tensor:
        """word_ids (B, T) int64, mask (B, T) bool, layers (B, L, T, D) frozen features, char_ids (B, T, 50)
        (with a character encoder) -> logits (B, K)."""
        inputs = self.word_embedding(word_ids)  # (B, T, E)
        if self.char_encoder is not None:
            if char_ids is None:
                raise ValueError("this classifier has a character encoder: pass char_ids")
            inputs = torch.cat([inputs, encode_chars(self.char_encoder, char_ids)], dim=-1)  # [w_k; c_k]
        if self.scalar_mix is not None:
            if layers is None:
                raise ValueError("this classifier uses ELMo: pass the representation's layers")
            elmo = self.scalar_mix(layers.transpose(0, 1), mask)  # (B, T, D), eq. 1
            inputs = torch.cat([inputs, elmo], dim=-1)  # [x_k; ELMo_k]
        inputs = self.dropout(inputs)
        lengths = mask.sum(dim=1).clamp_min(1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
        encoded, _ = self.encoder(packed)
        encoded, _ = nn.utils.rnn.pad_packed_sequence(encoded, batch_first=True, total_length=mask.shape[1])  # (B, T, 2H)
        keep = mask.unsqueeze(-1)  # (B, T, 1)
        max_pool = encoded.masked_fill(~keep, float("-inf")).max(dim=1).values
        mean_pool = (encoded * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1)
        pooled = torch.cat([max_pool, mean_pool], dim=-1)  # (B, 4H)
        return self.output(self.dropout(pooled))

    def penalty(self) -> torch.Tensor:
        """lambda * ||w||^2 on the mix weights (0 without ELMo)."""
        if self.scalar_mix is None:
            return torch.zeros(())
        return self.scalar_mix.l2_penalty(self.config.mix_l2)

    def layer_weights(self) -> dict | None:
        """The learned softmax(w) per layer and gamma (None without ELMo)."""
        if self.scalar_mix is None:
            return None
        return {"weights": [float(w) for w in self.scalar_mix.weights().detach()],
                "gamma": float(self.scalar_mix.gamma.detach())}


# ---------------------------------------------------------------------- training and prediction
class WordVocabulary:
    def __init__(self, words: Sequence[str]):
        if list(words[:2]) != [PAD, UNK]:
            raise ValueError(f"a word vocabulary starts with {PAD!r}, {UNK!r}")
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}

    @classmethod
    def from_sentences(cls, sentences: Sequence[Sequence[str]]) -> WordVocabulary:
        seen = dict.fromkeys(w for s in sentences for w in s)
        return cls([PAD, UNK] + sorted(seen))

    def ids(self, sentences: Sequence[Sequence[str]], indices: Sequence[int]) -> torch.Tensor:
        """(B, T) ids zero-padded; unknown words -> UNK."""
        width = max((len(sentences[i]) for i in indices), default=0)
        out = torch.zeros(len(indices), width, dtype=torch.long)
        for row, i in enumerate(indices):
            out[row, : len(sentences[i])] = torch.tensor([self.index.get(w, 1) for w in sentences[i]], dtype=torch.long)
        return out


@dataclass
class Classifier:
    """A trained model with what it needs to read text: the vocabulary and the label names."""

    model: SentenceClassifier
    vocabulary: WordVocabulary
    labels: list[str]

    def logits(self, sentences: Sequence[Sequence[str]], features=None, *, batch_size: int = 64) -> torch.Tensor:
        """(N, K) for ``sentences``; ``features`` gives ``.batch(indices)`` aligned with them."""
        self.model.eval()
        outputs = []
        with torch.no_grad():
            for start in range(0, len(sentences), batch_size):
                indices = list(range(start, min(start + batch_size, len(sentences))))
                word_ids = self.vocabulary.ids(sentences, indices)
                mask = _mask(sentences, indices, word_ids.shape[1])
                layers = None
                if self.model.scalar_mix is not None:
                    layers, feature_mask = features.batch(indices)
                    if not torch.equal(feature_mask, mask):
                        raise ValueError("the features do not line up with the sentences (token counts differ)")
                outputs.append(self.model(word_ids, mask, layers, _char_ids(self.model, sentences, indices)))
        return torch.cat(outputs) if outputs else torch.zeros(0, len(self.labels))

    def accuracy(self, sentences, labels: Sequence[str], features=None) -> float:
        predicted = self.logits(sentences, features).argmax(dim=1).tolist()
        return 100 * float(np.mean([self.labels[p] == y for p, y in zip(predicted, labels)])) if labels else float("nan")

    def save(self, directory: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = ()) -> None:
        """config.json + model.safetensors + labels.json + vocab.txt, written to a staging folder and renamed,
        under the output policy (``elmokit.io.output_directory``; ``inputs`` may not be the folder)."""
        directory = Path(directory)
        state = {k: v.contiguous() for k, v in self.model.state_dict().items()}
        refuse_non_finite(state, directory / "model.safetensors")
        with output_directory(directory, command=SAVED_BY, inputs=inputs, artifact="classifier") as staging:
            (staging / "config.json").write_text(json.dumps(self.model.config.to_dict(), indent=2) + "\n", encoding="utf-8")
            save_file(state, str(staging / "model.safetensors"))
            (staging / "labels.json").write_text(json.dumps(self.labels, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
            (staging / "vocab.txt").write_text("".join(w + "\n" for w in self.vocabulary.words), encoding="utf-8")

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Classifier:
        directory = Path(directory)
        for name in ("config.json", "model.safetensors", "labels.json", "vocab.txt"):
            if not (directory / name).is_file():
                raise InputNotFound(f"{directory}: not a saved classifier (no {name})")
        try:
            config = ClassifierConfig.from_dict(json.loads((directory / "config.json").read_text(encoding="utf-8")))
            labels = json.loads((directory / "labels.json").read_text(encoding="utf-8"))
            words = (directory / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
        except (ValueError, TypeError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise UserError(f"{directory}: not a readable classifier folder: {error}") from None
        model = SentenceClassifier(config)
        model.load_state_dict(refuse_non_finite_read(load_file(str(directory / "model.safetensors")),
                                                     directory / "model.safetensors"))
        if len(labels) != config.num_labels or len(words) != config.vocab_size:
            raise UserError(f"{directory}: labels.json/vocab.txt do not match config.json's sizes")
        return cls(model.eval(), WordVocabulary(words), labels)


def train_classifier(
    train: tuple[Sequence[Sequence[str]], Sequence[str]],
    dev: tuple[Sequence[Sequence[str]], Sequence[str]],
    *,
    train_features=None,
    dev_features=None,
    use_elmo: bool = True,
    elmo_layers: int = 0,
    elmo_dim: int = 0,
    epochs: int = 10,
    batch_size: int = 32,
    learning_rate: float = 1e-3,
    seed: int = 0,
    representation: dict | None = None,
    log=None,
    word_table=None,
    patience: int | None = None,
    **model_options,
) -> tuple[Classifier, list[dict]]:
    """Adam on cross-entropy + the mix penalty; the epoch with the best dev accuracy is kept.

    ``train``/``dev``: (sentences, label names); ``*_features``: ``.batch(indices)`` sources
    (a ``FeatureCache``) aligned with the sentences, needed when ``use_elmo``. ``word_table`` (a
    ``StaticVectors``) initialises x_k (``elmokit.tasks.word_input``; case kept, a word missing from the
    table takes its lowercased form's row); ``patience``: stop after this many epochs without a better
    dev accuracy (None: run all ``epochs``). Returns the
    classifier and per-epoch history (loss, dev accuracy, layer weights).
    """
    seed_everything(seed)
    generator = np.random.default_rng(seed)
    labels = sorted(set(train[1]))
    label_index = {y: i for i, y in enumerate(labels)}
    vocabulary = WordVocabulary.from_sentences(train[0])
    if word_table is not None:
        freeze = model_options.get("freeze_word_vectors", False)
        vocabulary = WordVocabulary(extend_vocabulary(vocabulary.words, word_table, lowercase=False, freeze=freeze))
        model_options = {**model_options, "word_dim": word_table.dim,
                         "word_vectors": model_options.get("word_vectors") or word_table.name}
    config = ClassifierConfig(num_labels=len(labels), vocab_size=len(vocabulary.words), use_elmo=use_elmo,
                              elmo_layers=elmo_layers if use_elmo else 0, elmo_dim=elmo_dim if use_elmo else 0,
                              representation=dict(representation or {}) if use_elmo else {}, **model_options)
    classifier = Classifier(SentenceClassifier(config), vocabulary, labels)
    model = classifier.model
    if word_table is not None:
        found = initialise_embedding(model.word_embedding, vocabulary.words, word_table, lowercase=False,
                                     freeze=config.freeze_word_vectors, seed=seed)
        (log or logger.debug)(f"word embedding: {found} of {len(vocabulary.words) - 2} rows from {word_table.name}")
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    targets = torch.tensor([label_index[y] for y in train[1]], dtype=torch.long)
    sentences = train[0]

    def loss(indices):
        word_ids = vocabulary.ids(sentences, indices)
        mask = _mask(sentences, indices, word_ids.shape[1])
        layers = train_features.batch(indices)[0] if use_elmo else None
        logits = model(word_ids, mask, layers, _char_ids(model, sentences, indices))
        return nn.functional.cross_entropy(logits, targets[indices]) + model.penalty(), len(indices)

    result = train_epochs(model, optimizer, batches=lambda epoch: shuffled_batches(len(sentences), batch_size, generator),
                          loss=loss, metric_name="dev_accuracy",
                          evaluate=lambda: classifier.accuracy(dev[0], dev[1], dev_features),
                          epoch_record=lambda epoch: {"layer_weights": model.layer_weights()},
                          options=EpochOptions(max_epochs=epochs, patience=patience), log=log or logger.debug)
    return classifier, result.history


def _char_ids(model: SentenceClassifier, sentences, indices) -> torch.Tensor | None:
    """(B, T, 50) character ids of the chosen sentences when the model has a character encoder."""
    return batch_to_ids([sentences[i] for i in indices]) if model.char_encoder is not None else None


def _mask(sentences, indices, width) -> torch.Tensor:
    lengths = torch.tensor([len(sentences[i]) for i in indices])
    return torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
