"""The sequence tagger of Peters et al. (2018, §3.3, §5): a BiLSTM-CRF with ELMo added.

For token k the task model's input is ``[x_k; ELMo_k]``: x_k a learned word embedding over the
training words, and (eq. 1)

    ELMo_k = gamma * sum_j softmax(w)_j h_{k,j}

a learned scalar mix of the L+1 layers of any ``Representation`` (ScalarMix), with dropout. A
BiLSTM reads the sequence; optionally ELMo is added again at its output, ``[h_k; ELMo'_k]`` with
its own mix (the paper's "input & output" variant). Label scores go to a linear-chain CRF (NER,
Lample et al. 2016, with the transition constraints of the tagging scheme) or to a per-token
softmax (an option for POS). ``elmo="top"`` uses the top layer alone (the paper's "last only"
row, no gamma), ``elmo="none"`` no representation at all (the baseline). The paper's L2
regulariser ``lambda * ||w||^2`` on the mix weights is ``mix_l2`` (0.001).

Deliberate deviations: no character CNN for x_k (the representation brings the characters), and
the word embedding is learned from scratch rather than initialised from GloVe/Senna.

The biLM is frozen by default: its layers are computed once per sentence (the feature cache), so
an epoch costs only the task model. ``fine_tune=True`` (ELMo models only) runs the biLM live on
character ids and trains it with its own learning rate; its weights are then saved with the
tagger. (The live path calls ``BiLM`` directly rather than ``Elmo`` so that the frozen and the
fine-tuned tagger share one mixing code path; without layer norm the two are the same.)

A saved tagger is a folder: ``config.json`` (TaggerConfig), ``model.safetensors``, ``vocab.json``
(words and labels), ``metrics.json`` (training history), and ``bilm/`` when fine-tuned.

Shapes: B batch, T tokens, L representation layers, D representation dim, H LSTM hidden, N labels.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import math
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from elmokit.io import atomic_directory
from elmokit.nn.scalar_mix import ScalarMix
from elmokit.tasks.crf import ConditionalRandomField, allowed_transitions
from elmokit.tasks.data import TaggedCorpus, bio_to_bioes, bioes_to_bio

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME, METRICS_NAME, BILM_DIR = (
    "config.json", "model.safetensors", "vocab.json", "metrics.json", "bilm")
PAD, UNK = "<pad>", "<unk>"


class TaggerFolderError(ValueError):
    """A tagger folder that cannot be loaded; the message names the file and the problem."""


@dataclass(frozen=True, kw_only=True)
class TaggerConfig:
    """Everything that shapes the task model (saved as config.json).

    ``representation`` records how to rebuild the features at prediction time:
    ``{"kind": "elmo", "model": ...}``, ``{"kind": "elmo-original", "options_file": ..., "weight_file": ...}``,
    ``{"kind": "vectors", "path": ...}`` or ``{}`` (no representation).
    """

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
    hidden_dim: int = 200
    dropout: float = 0.5

    def __post_init__(self) -> None:
        checks = {"task": ("pos", "ner"), "output": ("crf", "softmax"), "elmo": ("mix", "top", "none")}
        for name, allowed in checks.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"TaggerConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.elmo != "none" and (self.elmo_layers < 1 or self.elmo_dim < 1):
            raise ValueError("an ELMo tagger needs elmo_layers and elmo_dim (from the representation)")
        if self.elmo == "none" and (self.elmo_at_output or self.fine_tune):
            raise ValueError("elmo_at_output and fine_tune need a representation (elmo='mix' or 'top')")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TaggerConfig":
        version = data.get("format_version", FORMAT_VERSION)
        if version > FORMAT_VERSION:
            raise ValueError(f"tagger format_version {version} is newer than this elmokit ({FORMAT_VERSION})")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown tagger config fields: {', '.join(unknown)}")
        return cls(**data)


@dataclass
class TrainOptions:
    """How to train (not saved with the model: it does not shape it)."""

    epochs: int = 10
    patience: int = 3  # stop after this many epochs without a better dev score
    batch_size: int = 32
    learning_rate: float = 1e-3
    fine_tune_learning_rate: float = 1e-4
    grad_clip: float = 5.0
    seed: int = 0
    progress: bool | None = None  # tqdm bars (None: only on a terminal)


# ----------------------------------------------------------------------------------- the model


class TaggerModel(nn.Module):
    """Word embedding + ELMo mix -> BiLSTM (+ ELMo mix) -> label scores -> CRF or softmax."""

    def __init__(self, config: TaggerConfig, vocab_size: int, num_labels: int, labels: Sequence[str]) -> None:
        super().__init__()
        self.config = config
        self.word_embedding = nn.Embedding(vocab_size, config.word_dim, padding_idx=0)
        use_elmo = config.elmo != "none"
        if config.elmo == "mix":
            self.input_mix = ScalarMix(config.elmo_layers)
            self.output_mix = ScalarMix(config.elmo_layers) if config.elmo_at_output else None
        else:
            self.input_mix = self.output_mix = None
        self.elmo_dropout = nn.Dropout(config.elmo_dropout)
        self.dropout = nn.Dropout(config.dropout)
        input_dim = config.word_dim + (config.elmo_dim if use_elmo else 0)
        self.lstm = nn.LSTM(input_dim, config.hidden_dim, batch_first=True, bidirectional=True)
        output_dim = 2 * config.hidden_dim + (config.elmo_dim if config.elmo_at_output else 0)
        self.label_scores = nn.Linear(output_dim, num_labels)
        self.crf = None
        if config.output == "crf":
            constraints = allowed_transitions(labels, config.scheme) if config.scheme else None
            self.crf = ConditionalRandomField(num_labels, constraints=constraints)
        self.bilm: nn.Module | None = None  # set by fine-tuning: runs live on character ids

    def _elmo(self, layers: torch.Tensor, mix: ScalarMix | None) -> torch.Tensor:
        """layers (B, L, T, D) -> ELMo_k (B, T, D) with dropout."""
        if mix is None:  # "top": the top layer alone
            mixed = layers[:, -1]
        else:
            mixed = mix(layers.transpose(0, 1))  # eq. 1: gamma * sum_j softmax(w)_j h_kj
        return self.elmo_dropout(mixed)

    def emissions(
        self, word_ids: torch.Tensor, mask: torch.Tensor, features: torch.Tensor | None = None,
        char_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """word_ids (B, T), mask (B, T), features (B, L, T, D) or char_ids (B, T, 50) -> (B, T, N)."""
        pieces = [self.dropout(self.word_embedding(word_ids))]  # (B, T, word_dim)
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
            pieces.append(self._elmo(layers, self.input_mix))
        inputs = torch.cat(pieces, dim=-1)  # (B, T, word_dim + D)
        lengths = mask.sum(1).cpu()
        packed = pack_padded_sequence(inputs, lengths, batch_first=True, enforce_sorted=False)
        hidden, _ = self.lstm(packed)
        hidden, _ = pad_packed_sequence(hidden, batch_first=True, total_length=mask.shape[1])  # (B, T, 2H)
        hidden = self.dropout(hidden)
        if self.config.elmo_at_output:
            hidden = torch.cat([hidden, self._elmo(layers, self.output_mix)], dim=-1)  # [h_k; ELMo'_k]
        return self.label_scores(hidden)

    def loss(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean over sentences of -log p(tags) (CRF), or mean token cross-entropy (softmax); plus the mix L2."""
        if self.crf is not None:
            loss = self.crf(emissions, tags, mask).mean()
        else:
            loss = nn.functional.cross_entropy(emissions[mask], tags[mask])
        for mix in (self.input_mix, self.output_mix):
            if mix is not None and self.config.mix_l2 > 0:
                loss = loss + mix.l2_penalty(self.config.mix_l2)
        return loss

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        if self.crf is not None:
            return self.crf.viterbi_decode(emissions, mask)
        best = emissions.argmax(-1)
        return [best[b, : int(n)].tolist() for b, n in enumerate(mask.sum(1))]


# ------------------------------------------------------------------------------- features


class InMemoryFeatures:
    """The ``FeatureCache.batch`` surface over arrays held in memory (representations that cannot
    be fingerprinted, such as test fakes)."""

    def __init__(self, arrays: Sequence[np.ndarray]) -> None:
        self.arrays = list(arrays)

    def __len__(self) -> int:
        return len(self.arrays)

    def batch(self, indices: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return pad_features([self.arrays[i] for i in indices])


def pad_features(arrays: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, n_i, D) arrays -> features (B, L, T, D) zero-padded, mask (B, T)."""
    num_layers, _, dim = arrays[0].shape
    steps = max(a.shape[1] for a in arrays)
    out = np.zeros((len(arrays), num_layers, steps, dim), dtype=np.float32)
    mask = np.zeros((len(arrays), steps), dtype=bool)
    for b, a in enumerate(arrays):
        out[b, :, : a.shape[1]] = a
        mask[b, : a.shape[1]] = True
    return torch.from_numpy(out), torch.from_numpy(mask)


def feature_source(representation, sentences: Sequence[Sequence[str]], cache_dir: str | os.PathLike):
    """Frozen features of ``sentences``: a ``FeatureCache`` under ``cache_dir`` (built once, memory-mapped,
    reused by later runs on the same data and model), or arrays in memory for a representation
    without a fingerprint."""
    from elmokit.tasks.features import FeatureCache, representation_fingerprint

    started = time.perf_counter()
    try:
        representation_fingerprint(representation)
    except TypeError:
        source = InMemoryFeatures(representation.embed(sentences))
    else:
        source = FeatureCache.for_dataset(representation, sentences, cache_dir)
    logger.info("features: %d sentences from %s in %.1fs", len(sentences), representation.name,
                time.perf_counter() - started)
    return source


def load_representation(spec: dict, base: Path | None = None):
    """Rebuild the representation a tagger was trained with from its config's ``representation``."""
    kind = spec.get("kind")
    if not kind:
        return None
    if kind == "elmo":
        from elmokit.elmo import Embedder

        model = spec["model"]
        if base is not None and model == BILM_DIR:
            model = str(base / BILM_DIR)
        return Embedder.load(model, initial_state=spec.get("initial_state", "zero"))
    if kind == "elmo-original":
        from elmokit.elmo import Embedder

        return Embedder.from_original(spec["options_file"], spec["weight_file"], initial_state=spec.get("initial_state", "zero"))
    if kind == "vectors":
        from elmokit.static.vectors import StaticVectors

        return StaticVectors.load(spec["path"])
    raise ValueError(f"unknown representation kind {kind!r}")


# ------------------------------------------------------------------------- the query object


class SequenceTagger:
    """A trained tagger: the model, its vocabularies and (for ELMo taggers) the representation."""

    def __init__(self, config: TaggerConfig, words: Sequence[str], labels: Sequence[str],
                 representation=None, model: TaggerModel | None = None) -> None:
        self.config = config
        self.words = list(words)
        self.word_index = {w: i for i, w in enumerate(self.words)}
        self.labels = list(labels)  # in the training scheme (BIOES labels when trained in BIOES)
        self.label_index = {l: i for i, l in enumerate(self.labels)}
        self.representation = representation
        self.model = model if model is not None else TaggerModel(config, len(self.words), len(self.labels), self.labels)
        self.history: list[dict] = []
        self.best_epoch: int | None = None
        self.results: dict[str, Any] = {}  # final scores and the command, saved in metrics.json

    # -- inputs
    def word_ids(self, tokens: Sequence[str]) -> list[int]:
        unk = self.word_index[UNK]
        if self.config.lowercase:
            tokens = [t.lower() for t in tokens]
        return [self.word_index.get(t, unk) for t in tokens]

    def _encode_labels(self, labels: Sequence[str]) -> list[str]:
        return bio_to_bioes(labels) if self.config.scheme == "BIOES" else list(labels)

    def _decode_labels(self, labels: Sequence[str]) -> list[str]:
        return bioes_to_bio(labels) if self.config.scheme == "BIOES" else list(labels)

    def _inputs(self, sentences, indices, features=None, labels=None) -> dict[str, torch.Tensor]:
        chosen = [sentences[i] for i in indices]
        steps = max(len(s) for s in chosen)
        word_ids = torch.zeros(len(chosen), steps, dtype=torch.long)
        for b, tokens in enumerate(chosen):
            word_ids[b, : len(tokens)] = torch.tensor(self.word_ids(tokens))
        mask = word_ids.new_zeros(word_ids.shape, dtype=torch.bool)
        for b, tokens in enumerate(chosen):
            mask[b, : len(tokens)] = True
        batch = {"word_ids": word_ids, "mask": mask}
        if self.config.elmo != "none":
            if self.model.bilm is not None:
                from elmokit.text.chars import batch_to_ids

                batch["char_ids"] = batch_to_ids(chosen)
            else:
                if features is not None:
                    feats, feature_mask = features.batch(indices)
                else:
                    feats, feature_mask = pad_features(self.representation.embed(chosen))
                if feats.shape[1:2] != (self.config.elmo_layers,) or feats.shape[-1] != self.config.elmo_dim:
                    raise ValueError(f"features of shape {tuple(feats.shape)} for a tagger trained on "
                                     f"{self.config.elmo_layers} layers of dim {self.config.elmo_dim}")
                if not torch.equal(feature_mask, mask):
                    raise ValueError("the features do not match the sentences (token counts differ)")
                batch["features"] = torch.as_tensor(feats, dtype=torch.float32)
        if labels is not None:
            tags = torch.zeros_like(word_ids)
            for b, i in enumerate(indices):
                tags[b, : len(labels[i])] = torch.tensor([self.label_index[l] for l in self._encode_labels(labels[i])])
            batch["tags"] = tags
        return batch

    def _emissions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.model.emissions(batch["word_ids"], batch["mask"], batch.get("features"), batch.get("char_ids"))

    # -- prediction
    @torch.no_grad()
    def predict(self, sentences: Sequence[Sequence[str]], *, batch_size: int = 64, features=None) -> list[list[str]]:
        """Labels (BIO for NER) for each sentence. ``features``: a precomputed feature source."""
        if self.config.elmo != "none" and self.model.bilm is None and features is None and self.representation is None:
            raise ValueError("this tagger needs its representation: load it with SequenceTagger.load(..., representation=...)")
        self.model.eval()
        order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))  # similar lengths together
        results: list[list[str]] = [[] for _ in sentences]
        for start in range(0, len(order), batch_size):
            indices = [i for i in order[start : start + batch_size] if len(sentences[i]) > 0]
            if not indices:
                continue
            batch = self._inputs(sentences, indices, features)
            paths = self.model.decode(self._emissions(batch), batch["mask"])
            for i, path in zip(indices, paths):
                results[i] = self._decode_labels([self.labels[j] for j in path])
        return results

    def evaluate(self, corpus: TaggedCorpus, *, features=None, batch_size: int = 64) -> dict[str, Any]:
        predictions = self.predict(corpus.sentences, batch_size=batch_size, features=features)
        return score(corpus.labels, predictions, self.config.task)

    def mixing_weights(self) -> dict[str, Any]:
        """softmax(w) and gamma of each learned mix (what the layers contributed)."""
        out: dict[str, Any] = {}
        for name, mix in (("input", self.model.input_mix), ("output", self.model.output_mix)):
            if mix is not None:
                out[name] = {"softmax_w": [round(float(v), 6) for v in mix.weights().detach()],
                             "gamma": round(float(mix.gamma.detach()), 6)}
        return out

    # -- saving and loading
    def save(self, directory: str | os.PathLike) -> Path:
        """Write the tagger folder atomically (a complete folder replaces any old one)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        with atomic_directory(directory) as tmp:
            (tmp / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2) + "\n", encoding="utf-8")
            state = {k: v.detach().contiguous() for k, v in self.model.state_dict().items() if not k.startswith("bilm.")}
            save_file(state, str(tmp / WEIGHTS_NAME), metadata={"format": "elmokit-tagger"})
            vocab = {"words": self.words, "labels": self.labels}
            (tmp / VOCAB_NAME).write_text(json.dumps(vocab, ensure_ascii=False) + "\n", encoding="utf-8")
            metrics = {**self.results, "best_epoch": self.best_epoch, "mixing_weights": self.mixing_weights(),
                       "history": self.history}
            (tmp / METRICS_NAME).write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
            if self.model.bilm is not None:
                self.model.bilm.save_pretrained(tmp / BILM_DIR)
        return directory

    @classmethod
    def load(cls, directory: str | os.PathLike, *, representation=None) -> "SequenceTagger":
        """Read a tagger folder. The representation is rebuilt from the config unless given."""
        from safetensors.torch import load_file

        directory = Path(directory)
        for name in (CONFIG_NAME, WEIGHTS_NAME, VOCAB_NAME):
            if not (directory / name).is_file():
                raise TaggerFolderError(f"{directory}: not a tagger folder (no {name}); train one with `elmokit tag train`")
        try:
            config = TaggerConfig.from_dict(json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8")))
            vocab = json.loads((directory / VOCAB_NAME).read_text(encoding="utf-8"))
        except (ValueError, TypeError) as error:
            raise TaggerFolderError(f"{directory}: {error}") from None
        tagger = cls(config, vocab["words"], vocab["labels"])
        if config.fine_tune:
            from elmokit.bilm import BiLM

            tagger.model.bilm = BiLM.from_pretrained(directory / BILM_DIR)
            tagger.model.bilm.disable_token_cache()
        elif config.elmo != "none":
            if representation is None:
                representation = load_representation(config.representation, directory)
            if (representation.num_layers, representation.dim) != (config.elmo_layers, config.elmo_dim):
                raise TaggerFolderError(
                    f"{directory}: trained on {config.elmo_layers} layers of dim {config.elmo_dim}, but the "
                    f"representation {representation.name} has {representation.num_layers} of dim {representation.dim}")
            tagger.representation = representation
        missing, unexpected = tagger.model.load_state_dict(load_file(str(directory / WEIGHTS_NAME)), strict=False)
        missing = [k for k in missing if not k.startswith("bilm.")]
        if missing or unexpected:
            raise TaggerFolderError(f"{directory / WEIGHTS_NAME}: missing {missing}, unexpected {unexpected}")
        metrics_path = directory / METRICS_NAME
        if metrics_path.is_file():
            metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
            tagger.history, tagger.best_epoch = metrics.get("history", []), metrics.get("best_epoch")
        tagger.model.eval()
        return tagger


# ------------------------------------------------------------------------------- metrics


def score(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]], task: str) -> dict[str, Any]:
    """POS: token accuracy. NER: span precision/recall/F1 by seqeval in strict mode (IOB2)."""
    if len(gold) != len(predicted) or any(len(g) != len(p) for g, p in zip(gold, predicted)):
        raise ValueError("gold and predicted label sequences differ in shape")
    tokens = sum(len(g) for g in gold)
    correct = sum(a == b for g, p in zip(gold, predicted) for a, b in zip(g, p))
    result: dict[str, Any] = {"tokens": tokens, "accuracy": correct / max(tokens, 1)}
    if task == "ner":
        from seqeval.metrics import f1_score, precision_score, recall_score
        from seqeval.scheme import IOB2

        gold, predicted = [list(g) for g in gold], [list(p) for p in predicted]
        kwargs = {"mode": "strict", "scheme": IOB2, "zero_division": 0}
        result.update(
            precision=float(precision_score(gold, predicted, **kwargs)),
            recall=float(recall_score(gold, predicted, **kwargs)),
            f1=float(f1_score(gold, predicted, **kwargs)),
            metric="span F1, seqeval strict mode, IOB2",
        )
    else:
        result["metric"] = "token accuracy"
    return result


def main_metric(result: dict[str, Any], task: str) -> float:
    return result["f1"] if task == "ner" else result["accuracy"]


# ------------------------------------------------------------------------------- training


def build_words(sentences: Sequence[Sequence[str]], lowercase: bool, min_count: int) -> list[str]:
    """PAD, UNK, then training words seen at least ``min_count`` times (most frequent first):
    rarer words are UNK in training, so the UNK vector is learned."""
    counts = Counter(t.lower() if lowercase else t for s in sentences for t in s)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return [PAD, UNK] + kept


def train_tagger(
    train: TaggedCorpus,
    dev: TaggedCorpus,
    config: TaggerConfig,
    *,
    representation=None,
    options: TrainOptions | None = None,
    cache_dir: str | os.PathLike | None = None,
    log=None,
) -> SequenceTagger:
    """Train on ``train``, keep the epoch with the best dev score (accuracy for POS, span F1 for
    NER), stop after ``patience`` epochs without improvement. Returns the best tagger with
    ``history`` (one dict per epoch). Frozen features are cached under ``cache_dir`` (default: a
    temporary folder removed afterwards)."""
    with contextlib.ExitStack() as stack:
        if cache_dir is None:
            cache_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="elmokit-tag-features-"))
        return _fit(train, dev, config, representation, options or TrainOptions(), cache_dir, log or logger.info)


def _fit(train, dev, config, representation, options, cache_dir, log) -> SequenceTagger:
    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    if config.elmo != "none" and representation is None:
        raise ValueError("an ELMo tagger needs a representation (or set elmo='none')")
    if config.fine_tune and not hasattr(representation, "bilm"):
        raise ValueError(f"fine-tuning needs an ELMo model; {getattr(representation, 'name', representation)} has no biLM")
    for name, corpus in (("train", train), ("dev", dev)):
        empty = [i for i, s in enumerate(corpus.sentences) if not s]
        if empty:
            raise ValueError(f"{name} set {corpus.path}: sentence {empty[0]} is empty")

    words = build_words(train.sentences, config.lowercase, config.min_word_count)
    encode = bio_to_bioes if config.scheme == "BIOES" else list
    labels = sorted({l for row in train.labels for l in encode(row)}, key=lambda l: (l != "O", l[2:], l))
    tagger = SequenceTagger(config, words, labels, representation=representation)
    unknown = sorted({l for row in dev.labels for l in encode(row)} - set(labels))
    if unknown:
        log(f"dev labels never seen in training (always wrong): {', '.join(unknown)}")
    model = tagger.model

    train_features = dev_features = None
    parameter_groups = []
    if config.fine_tune:
        from elmokit.bilm import BiLM

        source = representation.bilm  # a fresh fp32 copy without the query object's token cache
        bilm = BiLM.from_state(source.config, source.numpy_state())
        for parameter in bilm.parameters():
            parameter.requires_grad_(True)
        model.bilm = bilm
        parameter_groups.append({"params": list(bilm.parameters()), "lr": options.fine_tune_learning_rate})
    elif config.elmo != "none":
        train_features = feature_source(representation, train.sentences, cache_dir)
        dev_features = feature_source(representation, dev.sentences, cache_dir)
    task_parameters = [p for n, p in model.named_parameters() if not n.startswith("bilm.")]
    parameter_groups.insert(0, {"params": task_parameters, "lr": options.learning_rate})
    optimizer = torch.optim.Adam(parameter_groups)

    progress = sys.stderr.isatty() if options.progress is None else options.progress
    best_score, best_state, best_epoch, stale = -math.inf, None, 0, 0
    tagger.history = []
    for epoch in range(1, options.epochs + 1):
        started = time.perf_counter()
        model.train()
        order = list(range(len(train)))
        rng.shuffle(order)
        batches = [order[i : i + options.batch_size] for i in range(0, len(order), options.batch_size)]
        total_loss = 0.0
        iterator = batches
        if progress:
            from tqdm import tqdm

            iterator = tqdm(batches, desc=f"epoch {epoch}", unit="batch", leave=False)
        for indices in iterator:
            batch = tagger._inputs(train.sentences, indices, train_features, train.labels)
            loss = model.loss(tagger._emissions(batch), batch["tags"], batch["mask"])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_([p for g in parameter_groups for p in g["params"]], options.grad_clip)
            optimizer.step()
            total_loss += loss.item() * len(indices)
        dev_result = tagger.evaluate(dev, features=dev_features)
        dev_score = main_metric(dev_result, config.task)
        record = {"epoch": epoch, "train_loss": total_loss / len(train), "dev": dev_result,
                  "seconds": round(time.perf_counter() - started, 2), "mixing_weights": tagger.mixing_weights()}
        tagger.history.append(record)
        name = "F1" if config.task == "ner" else "accuracy"
        log(f"epoch {epoch}: train loss {record['train_loss']:.4f}, dev {name} {dev_score:.4f} "
            f"({record['seconds']:.1f}s)")
        if dev_score > best_score:
            best_score, best_epoch, stale = dev_score, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            stale += 1
            if stale >= options.patience:
                log(f"early stop: no better dev {name} for {options.patience} epochs (best epoch {best_epoch})")
                break
    model.load_state_dict(best_state)
    model.eval()
    tagger.best_epoch = best_epoch
    return tagger
