"""ULMFiT (Howard & Ruder 2018, "Universal Language Model Fine-tuning for Text Classification",
ACL) on elmokit's own LSTM language models: the forward and backward LMs of a biLM with its
softmax (``elmokit.lm.LanguageModel``; the shipped default model carries one).

Legend: B batch, T tokens, T2 = T + 2 with <S> and </S>, C = 50 characters, P projection size,
L LSTM layers, H head hidden size (50), K labels.

The recipe, in the paper's order:

1. **Target-task LM fine-tuning** (§3.2): the whole biLM + softmax trained further on the task's
   text with ``lm.py``'s loss (forward and backward NLL; sampled softmax in training),
   using (2) and (3).
2. **Discriminative fine-tuning** (eq. 2): one Adam rate per layer group, ``eta^{l-1} = eta^l / 2.6``.
   LM groups: token encoder, LSTM layer 1..L (both directions), softmax. Classifier groups: token
   encoder, LSTM layer 1..L (its direction), head.
3. **Slanted triangular learning rates** (eq. 3, ``schedules.py``): every group's rate is its
   discriminative peak times eq. 3's ``eta_t / eta_max``, over all T updates of the run.
4. **The classifier** (§3.3), one per direction: the LM without its softmax, then concat pooling
   ``h_c = [h_T; maxpool(H); meanpool(H)]`` over the top layer's states H (B, T2, P) (eq. 4),
   then two blocks ``BatchNorm -> Dropout -> Linear`` (ReLU after the first, H = 50 units) and a
   softmax. Trained with **gradual unfreezing**: epoch 1 trains the head only, each later epoch
   one more group from the top, until all are trained.
5. **Bidirectional** (§3.3 end): a forward and a backward classifier are trained separately; the
   prediction is the average of their label probabilities.

Paper defaults kept: Adam with beta1 0.7, beta2 0.99; LM fine-tuning peak rate 0.004, the
classifier's 0.01; cut_frac 0.1, ratio 32; decay 2.6; head dropouts 0.4 and 0.1 (fastai's).

Deliberate deviations, stated: the LM is elmokit's char-CNN biLM (token encoder shared by the
two directions in the LM; each classifier gets its own copy), not AWD-LSTM, so there is no weight
dropout or embedding dropout, only dropout on every LSTM layer's input (``encoder_dropout``, by
default the LM's own training dropout: 0.1 for the default model, where AWD-LSTM uses 0.3-0.5);
sentences are short, so no BPT3C (every sentence is one sequence); the pooled states include the
<S> and </S> positions the LM was trained with; ``h_T`` is the state after the last token in the
direction's reading order (</S> forward, <S> backward). One STLR cycle spans the whole classifier
run (fastai restarts one per unfreezing stage). A last batch of a single sentence is merged into
the batch before it (batch norm needs two rows in training). Frozen bottom groups run without
autograd and, for the token encoder, with a token-vector cache (same values, less work). The
trainer keeps the epoch with the best dev accuracy and writes no checkpoints: runs take minutes,
an interrupted run is started again.

A saved classifier is a folder: ``config.json`` (``recipe: "ulmfit"``, format_version, the LM's
biLM config, sizes), ``model.safetensors`` (``forward.*`` / ``backward.*``), ``labels.json``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from elmokit.bilm import BiLM, BiLMConfig, TokenVectorCache, add_boundaries
from elmokit.configs import config_from_dict
from elmokit.engine.epochs import EpochOptions, train_epochs
from elmokit.engine.schedules import discriminative_rates, slanted_triangular_fraction
from elmokit.errors import InputNotFound, UserError
from elmokit.formats.checks import refuse_non_finite, refuse_non_finite_read
from elmokit.io import output_directory
from elmokit.lm import Candidates, LanguageModel, rows
from elmokit.nn.lstm import reverse_padded
from elmokit.tasks.classifier import SAVED_BY
from elmokit.text.chars import batch_to_ids

logger = logging.getLogger(__name__)

RECIPE = "ulmfit"
FORMAT_VERSION = 1
DIRECTIONS = ("forward", "backward")
ADAM_BETAS = (0.7, 0.99)  # the paper's (via fastai): beta1 0.7 instead of 0.9
CONFIG_NAME, WEIGHTS_NAME, LABELS_NAME = "config.json", "model.safetensors", "labels.json"


class ULMFiTError(UserError):
    """A bad ULMFiT input or folder; the message names the file and the fix."""


# ---------------------------------------------------------------------- batches
def length_batches(lengths: Sequence[int], batch_size: int, rng: np.random.Generator, *,
                   bucket: int = 50) -> list[list[int]]:
    """Shuffled batches of similar lengths (fastai's sortish sampler): shuffle, sort each run of
    ``bucket`` batches by length, cut into batches, shuffle the batches. A final batch of one is
    merged into the one before it. Every index appears exactly once."""
    order = rng.permutation(len(lengths))
    batches = []
    chunk = batch_size * bucket
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk].tolist(), key=lambda i: -lengths[i])
        batches.extend(part[s : s + batch_size] for s in range(0, len(part), batch_size))
    if len(batches) > 1 and len(batches[-1]) == 1:
        batches[-2].extend(batches.pop())
    return [batches[i] for i in rng.permutation(len(batches))]


class _Schedule:
    """Adam over the layer groups (bottom first) at eq. 2's discriminative peak rates, and the hook that
    sets every group's rate to its peak times eq. 3's fraction before each update (the loop's
    ``on_step_start``); ``schedule="constant"`` keeps the peaks. ``options``: LM or classifier options."""

    def __init__(self, groups: list[list[nn.Parameter]], lengths: Sequence[int], options) -> None:
        rates = discriminative_rates(options.learning_rate, len(groups), options.decay)
        self.optimizer = torch.optim.Adam([{"params": g, "lr": r, "peak_lr": r} for g, r in zip(groups, rates)],
                                          betas=ADAM_BETAS)
        self.steps_per_epoch = len(length_batches(lengths, options.batch_size, np.random.default_rng(0)))
        self.total_steps = options.epochs * self.steps_per_epoch
        self.options = options

    def set_rates(self, step: int) -> None:
        o = self.options
        fraction = 1.0
        if o.schedule == "stlr":
            fraction = slanted_triangular_fraction(min(step, self.total_steps - 1), self.total_steps,
                                                   cut_frac=o.cut_frac, ratio=o.ratio)
        for group in self.optimizer.param_groups:
            group["lr"] = group["peak_lr"] * fraction


# ---------------------------------------------------------------------- (1) LM fine-tuning
@dataclass(frozen=True, kw_only=True)
class LMFineTuneOptions:
    epochs: int = 10
    batch_size: int = 32
    learning_rate: float = 0.004  # the paper's LM fine-tuning rate (top group: the softmax)
    decay: float = 2.6  # discriminative: each lower group's rate / decay
    schedule: str = "stlr"  # or "constant"
    cut_frac: float = 0.1
    ratio: float = 32.0
    samples: int = 1024  # sampled-softmax negatives per step (0: the full softmax)
    seed: int = 0


def lm_layer_groups(lm: LanguageModel) -> list[list[nn.Parameter]]:
    """Bottom first: token encoder; LSTM layer l of both directions, l = 1..L; softmax."""
    bilm = lm.bilm
    groups = [list(bilm.token_encoder.parameters())]
    for forward_layer, backward_layer in zip(bilm.forward_lstm, bilm.backward_lstm):
        groups.append([*forward_layer.parameters(), *backward_layer.parameters()])
    groups.append([lm.softmax_weight, lm.softmax_bias])
    return groups


def lm_batch(sentences: Sequence[Sequence[str]], indices: Sequence[int], vocabulary) -> tuple[torch.Tensor, torch.Tensor]:
    """char ids (B, T, C) and word ids (B, T) (0 at padding) of the listed sentences."""
    chosen = [sentences[i] for i in indices]
    width = max(len(s) for s in chosen)
    word_ids = torch.tensor([vocabulary.ids(s) + [0] * (width - len(s)) for s in chosen], dtype=torch.long)
    return batch_to_ids(chosen), word_ids


def language_model_loss(lm: LanguageModel, vocabulary, sentences: Sequence[Sequence[str]], *,
                        batch_size: int = 64) -> float:
    """Mean full-softmax NLL per target over both directions (nats; exp() is the perplexity)."""
    lm.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(sentences), batch_size):
            char_ids, word_ids = lm_batch(sentences, range(start, min(start + batch_size, len(sentences))), vocabulary)
            out = lm(char_ids, word_ids)
            total += float(out.forward_nll + out.backward_nll)
            count += 2 * out.num_targets
    return total / max(count, 1)


def finetune_language_model(lm: LanguageModel, vocabulary, sentences: Sequence[Sequence[str]],
                            options: LMFineTuneOptions = LMFineTuneOptions(), *,
                            log: Callable[[str], None] | None = None) -> list[dict]:
    """Step (1): train ``lm`` in place on the task's ``sentences`` with discriminative rates and
    STLR. Returns one record per epoch (mean training loss per target)."""
    _check_sentences(sentences, "LM fine-tuning text")
    generator = np.random.default_rng([options.seed, 0x17F])
    lengths = [len(s) for s in sentences]
    schedule = _Schedule(lm_layer_groups(lm), lengths, options)
    at = [0]  # the run-wide step: the rates and the sampled negatives follow it

    def start_step(step: int) -> None:
        at[0] = step
        schedule.set_rates(step)

    def loss(indices):
        char_ids, word_ids = lm_batch(sentences, indices, vocabulary)
        candidates = Candidates.draw(lm.vocab_size, options.samples, seed=options.seed, step=at[0]) if options.samples else None
        out = lm(char_ids, word_ids, candidates=candidates)
        return out.loss, out.num_targets

    result = train_epochs(lm, schedule.optimizer, batches=lambda epoch: length_batches(lengths, options.batch_size, generator),
                          loss=loss, on_step_start=start_step, options=EpochOptions(max_epochs=options.epochs, seed=options.seed),
                          log=log or logger.debug, description="LM fine-tuning epoch")
    return [{"epoch": r["epoch"], "lm_train_loss": r["train_loss"], "seconds": r["seconds"]} for r in result.history]


# ---------------------------------------------------------------------- (4) the classifier
@dataclass(frozen=True, kw_only=True)
class ULMFiTConfig:
    """What a saved ULMFiT classifier needs to be rebuilt."""

    bilm: dict  # the LM's BiLMConfig.to_dict()
    num_labels: int
    directions: tuple[str, ...] = DIRECTIONS
    head_dim: int = 50  # the paper's hidden units of the first linear block
    head_dropouts: tuple[float, float] = (0.4, 0.1)  # before the first and the second linear layer
    encoder_dropout: float = 0.1  # on every LSTM layer's input (the biLM's own training dropout)
    recipe: str = RECIPE
    format_version: int = FORMAT_VERSION
    FORMAT_VERSION: ClassVar[int] = FORMAT_VERSION

    def __post_init__(self) -> None:
        names = list(self.directions)
        if not names or any(d not in DIRECTIONS for d in names) or len(set(names)) != len(names):
            raise ULMFiTError(f"directions must be distinct names from {DIRECTIONS}, got {list(self.directions)}")
        if self.recipe != RECIPE:
            raise ULMFiTError(f"not a ULMFiT config (recipe {self.recipe!r})")
        object.__setattr__(self, "directions", tuple(self.directions))
        object.__setattr__(self, "head_dropouts", tuple(self.head_dropouts))

    @property
    def bilm_config(self) -> BiLMConfig:
        return BiLMConfig.from_dict(self.bilm)

    def to_dict(self) -> dict:
        data = dataclasses.asdict(self)
        data["directions"], data["head_dropouts"] = list(self.directions), list(self.head_dropouts)
        return data

    @classmethod
    def from_dict(cls, values: dict) -> ULMFiTConfig:
        return config_from_dict(cls, values, "ULMFiT classifier config")


def concat_pool(states: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Eq. 4: ``[h_T; maxpool(H); meanpool(H)]`` over each row's first ``lengths[b]`` states only.

    states (B, T, P) in reading order, lengths (B,) >= 1 -> (B, 3P); ``h_T`` = states[b, lengths[b] - 1].
    """
    batch_size, num_steps, _ = states.shape
    valid = (torch.arange(num_steps, device=states.device).unsqueeze(0) < lengths.unsqueeze(1)).unsqueeze(-1)  # (B, T, 1)
    last = states[torch.arange(batch_size, device=states.device), lengths - 1]  # (B, P)
    max_pool = states.masked_fill(~valid, float("-inf")).amax(dim=1)  # (B, P)
    mean_pool = states.masked_fill(~valid, 0.0).sum(dim=1) / lengths.unsqueeze(1).to(states.dtype)  # (B, P)
    return torch.cat([last, max_pool, mean_pool], dim=-1)


class DirectionalLMEncoder(nn.Module):
    """One direction of the biLM: the token encoder and that direction's LSTM stack.

    char ids (B, T, C) -> top-layer states (B, T2, P) in the direction's reading order (the
    backward direction's rows reversed within their lengths) and lengths (B,) = n_b + 2.
    """

    def __init__(self, config: BiLMConfig, direction: str, *, dropout: float) -> None:
        super().__init__()
        if direction not in DIRECTIONS:
            raise ULMFiTError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
        bilm = BiLM(config)  # the parts and their parameter names, as in the LM
        self.config, self.direction, self.dropout = config, direction, dropout
        self.token_encoder = bilm.token_encoder
        self.lstm = bilm.forward_lstm if direction == "forward" else bilm.backward_lstm
        self.token_cache: TokenVectorCache | None = None

    def load_from_bilm(self, bilm: BiLM) -> DirectionalLMEncoder:
        """Copy the token encoder and this direction's LSTM weights from ``bilm``."""
        self.token_encoder.load_state_dict(bilm.token_encoder.state_dict())
        stack = bilm.forward_lstm if self.direction == "forward" else bilm.backward_lstm
        self.lstm.load_state_dict(stack.state_dict())
        return self

    def layer_groups(self) -> list[list[nn.Parameter]]:
        """Bottom first: token encoder, LSTM layer 1..L."""
        return [list(self.token_encoder.parameters())] + [list(layer.parameters()) for layer in self.lstm]

    def _token_vectors(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T2, C), (B, T2) -> (B, T2, P), zero at padding; each distinct spelling encoded once."""
        flat = ids[mask]  # (N, C)
        if torch.is_grad_enabled():
            unique, inverse = torch.unique(flat, dim=0, return_inverse=True)
            vectors = rows(self.token_encoder(unique), inverse)  # (N, P)
        else:  # frozen: the cache (emptied by TokenVectorCache whenever the weights change)
            if self.token_cache is None:
                self.token_cache = TokenVectorCache(self.token_encoder, 100_000)
            vectors = self.token_cache.lookup(flat, self.token_encoder.encode_unique)
        out = vectors.new_zeros(*mask.shape, vectors.shape[-1])
        out[mask] = vectors
        return out

    def forward(self, char_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids, mask = add_boundaries(char_ids)  # (B, T2, C), (B, T2)
        lengths = mask.sum(dim=1)  # (B,)
        grad = torch.is_grad_enabled()
        trains = [any(p.requires_grad for p in group) for group in self.layer_groups()]
        needs_grad = [grad and any(trains[: g + 1]) for g in range(len(trains))]  # group g or one below it trains
        with torch.set_grad_enabled(needs_grad[0]):
            tokens = self._token_vectors(ids, mask)  # (B, T2, P)
        x = tokens if self.direction == "forward" else reverse_padded(tokens, lengths)
        for layer, cell in enumerate(self.lstm):
            with torch.set_grad_enabled(needs_grad[layer + 1]):
                x_in = F.dropout(x, self.dropout, training=True) if self.training and self.dropout > 0 else x
                out, _ = cell(x_in, lengths)  # (B, T2, P), zero at padding
                if layer > 0 and self.config.use_skip_connections:
                    out = out + x_in  # the biLM's residual, as in BiLM.forward
                x = out
        return x, lengths


class PoolingHead(nn.Module):
    """Two linear blocks (§3.3): BatchNorm -> Dropout -> Linear -> ReLU, BatchNorm -> Dropout -> Linear.
    pooled (B, 3P) -> logits (B, K)."""

    def __init__(self, input_dim: int, hidden_dim: int, num_labels: int, dropouts: tuple[float, float]) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            nn.BatchNorm1d(input_dim), nn.Dropout(dropouts[0]), nn.Linear(input_dim, hidden_dim), nn.ReLU(),
            nn.BatchNorm1d(hidden_dim), nn.Dropout(dropouts[1]), nn.Linear(hidden_dim, num_labels),
        )

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.blocks(pooled)


class DirectionalClassifier(nn.Module):
    """One direction's ULMFiT classifier: char ids (B, T, C) -> logits (B, K)."""

    def __init__(self, config: ULMFiTConfig, direction: str) -> None:
        super().__init__()
        bilm_config = config.bilm_config
        self.encoder = DirectionalLMEncoder(bilm_config, direction, dropout=config.encoder_dropout)
        self.head = PoolingHead(3 * bilm_config.projection_dim, config.head_dim, config.num_labels, config.head_dropouts)

    def layer_groups(self) -> list[list[nn.Parameter]]:
        """Bottom first: token encoder, LSTM layer 1..L, head (L + 2 groups)."""
        return [*self.encoder.layer_groups(), list(self.head.parameters())]

    def forward(self, char_ids: torch.Tensor) -> torch.Tensor:
        states, lengths = self.encoder(char_ids)  # (B, T2, P), (B,)
        return self.head(concat_pool(states, lengths))  # (B, K)


# ---------------------------------------------------------------------- (5) the pair, saved and loaded
@dataclass
class ULMFiTClassifier:
    """The light object users keep: the classifiers of each direction and the label names.

    ``logits`` returns ``log`` of the directions' averaged probabilities, so that ``softmax`` of
    it is that average (the ``classify predict`` path applies softmax to logits).
    """

    config: ULMFiTConfig
    models: dict[str, DirectionalClassifier]
    labels: list[str]

    def probabilities(self, sentences: Sequence[Sequence[str]], *, batch_size: int = 64) -> torch.Tensor:
        """(N, K): the mean over directions of each classifier's softmax (§3.3, bidirectional)."""
        _check_sentences(sentences, "the sentences to classify")
        total = torch.zeros(len(sentences), len(self.labels))
        with torch.no_grad():
            for model in self.models.values():
                model.eval()
                parts = [F.softmax(model(batch_to_ids(sentences[s : s + batch_size])), dim=-1)
                         for s in range(0, len(sentences), batch_size)]
                if parts:
                    total += torch.cat(parts)
        return total / len(self.models)

    def logits(self, sentences, features=None, *, batch_size: int = 64) -> torch.Tensor:
        """(N, K) log of the averaged probabilities; ``features`` is ignored (the LM is the model)."""
        return self.probabilities(sentences, batch_size=batch_size).clamp_min(1e-30).log()

    def accuracy(self, sentences, labels: Sequence[str], features=None) -> float:
        if not labels:
            return float("nan")
        predicted = self.probabilities(sentences).argmax(dim=1).tolist()
        return 100 * float(np.mean([self.labels[p] == y for p, y in zip(predicted, labels)]))

    def save(self, directory: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = ()) -> None:
        """config.json + model.safetensors + labels.json, written to a staging folder and renamed, under
        the output policy (``elmokit.io.output_directory``; ``inputs`` may not be the folder)."""
        state = {f"{d}.{k}": v.detach().cpu().contiguous() for d, m in self.models.items() for k, v in m.state_dict().items()}
        refuse_non_finite(state, Path(directory) / WEIGHTS_NAME)
        with output_directory(Path(directory), command=SAVED_BY, inputs=inputs, artifact="ulmfit-classifier") as staging:
            (staging / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2) + "\n", encoding="utf-8")
            save_file(state, str(staging / WEIGHTS_NAME), metadata={"format": "elmokit-ulmfit-classifier"})
            (staging / LABELS_NAME).write_text(json.dumps(self.labels, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, directory: str | os.PathLike) -> ULMFiTClassifier:
        directory = Path(directory)
        for name in (CONFIG_NAME, WEIGHTS_NAME, LABELS_NAME):
            if not (directory / name).is_file():
                raise InputNotFound(f"{directory}: not a saved ULMFiT classifier (no {name})")
        try:
            config = ULMFiTConfig.from_dict(json.loads((directory / CONFIG_NAME).read_text(encoding="utf-8")))
            labels = json.loads((directory / LABELS_NAME).read_text(encoding="utf-8"))
            state = load_file(str(directory / WEIGHTS_NAME))
        except (ValueError, TypeError, SafetensorError, OSError) as error:  # JSON/Unicode errors are ValueErrors
            raise ULMFiTError(f"{directory}: not a readable ULMFiT classifier folder: {error}") from None
        refuse_non_finite_read(state, directory / WEIGHTS_NAME)
        if not isinstance(labels, list) or len(labels) != config.num_labels:
            raise ULMFiTError(f"{directory / LABELS_NAME}: expected a list of {config.num_labels} labels (config.json)")
        models = {}
        for direction in config.directions:
            model = DirectionalClassifier(config, direction)
            prefix = f"{direction}."
            mine = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            try:
                model.load_state_dict(mine)
            except RuntimeError as error:
                raise ULMFiTError(f"{directory / WEIGHTS_NAME}: the {direction} weights do not fit config.json: "
                                  f"{str(error).splitlines()[0]}") from None
            models[direction] = model.eval()
        return cls(config, models, labels)


def is_ulmfit_folder(directory: str | os.PathLike) -> bool:
    """Whether ``directory``'s config.json says ``"recipe": "ulmfit"`` (False if unreadable)."""
    try:
        data = json.loads((Path(directory) / CONFIG_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and data.get("recipe") == RECIPE


# ---------------------------------------------------------------------- training: (2)-(4) and (5)
@dataclass(frozen=True, kw_only=True)
class ClassifierOptions:
    epochs: int = 10
    batch_size: int = 64  # the paper's
    learning_rate: float = 0.01  # the paper's classifier rate (top group: the head)
    decay: float = 2.6
    schedule: str = "stlr"  # or "constant"
    cut_frac: float = 0.1
    ratio: float = 32.0
    unfreeze: str = "gradual"  # or "all": every group trains from the first epoch
    seed: int = 0

    def __post_init__(self) -> None:
        if self.unfreeze not in ("gradual", "all"):
            raise ULMFiTError(f"unfreeze must be 'gradual' or 'all', got {self.unfreeze!r}")
        if self.schedule not in ("stlr", "constant"):
            raise ULMFiTError(f"schedule must be 'stlr' or 'constant', got {self.schedule!r}")


class ClassifierTrainer:
    """Trains one ``DirectionalClassifier``, an epoch at a time (so tests can look in between).

    Epoch e (1-based) trains the top ``min(e, groups)`` layer groups with gradual unfreezing, all of
    them with ``unfreeze="all"``; the others have ``requires_grad`` False and are not updated.
    """

    def __init__(self, model: DirectionalClassifier, sentences: Sequence[Sequence[str]], targets: Sequence[int],
                 options: ClassifierOptions) -> None:
        self.model, self.sentences, self.options = model, sentences, options
        self.targets = torch.as_tensor(list(targets), dtype=torch.long)
        self.groups = model.layer_groups()
        self.generator = np.random.default_rng([options.seed, 0xC1A55])
        self.lengths = [len(s) for s in sentences]
        self.schedule = _Schedule(self.groups, self.lengths, options)
        self.optimizer, self.steps_per_epoch = self.schedule.optimizer, self.schedule.steps_per_epoch
        self.step = 0  # updates so far, over every epoch run (the schedule's clock)

    def trainable_groups(self, epoch: int) -> int:
        """How many groups, counted from the top, train in ``epoch`` (1-based)."""
        return len(self.groups) if self.options.unfreeze == "all" else min(epoch, len(self.groups))

    def start_epoch(self, epoch: int) -> None:
        """Gradual unfreezing: only the top ``trainable_groups(epoch)`` groups get gradients."""
        top = self.trainable_groups(epoch)
        for index, group in enumerate(self.groups):
            for parameter in group:
                parameter.requires_grad_(index >= len(self.groups) - top)

    def loss(self, indices: list[int]) -> tuple[torch.Tensor, int]:
        self.schedule.set_rates(self.step)
        self.step += 1
        logits = self.model(batch_to_ids([self.sentences[i] for i in indices]))
        return F.cross_entropy(logits, self.targets[indices]), len(indices)

    def train(self, *, evaluate=None, epochs: range | None = None, log=None) -> list[dict]:
        """Run ``epochs`` (default: all of them) on the epoch loop; per-epoch history."""
        epochs = epochs or range(1, self.options.epochs + 1)
        name = f"{self.model.encoder.direction} classifier epoch"
        return train_epochs(self.model, self.optimizer, loss=self.loss,
                            batches=lambda e: length_batches(self.lengths, self.options.batch_size, self.generator),
                            on_epoch_start=lambda e: self.start_epoch(epochs[e - 1]),
                            evaluate=evaluate, metric_name="dev_accuracy",
                            epoch_record=lambda e: {"trainable_groups": self.trainable_groups(epochs[e - 1])},
                            options=EpochOptions(max_epochs=len(epochs)), log=log or logger.debug, description=name).history

    def run_epoch(self, epoch: int) -> float:
        """One epoch alone; returns the mean training cross-entropy."""
        return self.train(epochs=range(epoch, epoch + 1))[0]["train_loss"]


def train_direction(model: DirectionalClassifier, train: tuple[Sequence[Sequence[str]], Sequence[int]],
                    dev: tuple[Sequence[Sequence[str]], Sequence[int]], options: ClassifierOptions, *,
                    log: Callable[[str], None] | None = None) -> list[dict]:
    """Train ``model`` in place; the epoch with the best dev accuracy is kept. Per-epoch history."""
    dev_targets = torch.as_tensor(list(dev[1]))

    def accuracy() -> float:
        predicted = torch.cat([model(batch_to_ids(dev[0][s : s + 64])).argmax(-1) for s in range(0, len(dev[0]), 64)])
        return 100 * float((predicted == dev_targets).float().mean())

    history = ClassifierTrainer(model, train[0], train[1], options).train(evaluate=accuracy, log=log)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return history


def train_ulmfit(train: tuple[Sequence[Sequence[str]], Sequence[str]], dev: tuple[Sequence[Sequence[str]], Sequence[str]],
                 language_model: LanguageModel, vocabulary, *,
                 lm_options: LMFineTuneOptions = LMFineTuneOptions(),
                 classifier_options: ClassifierOptions = ClassifierOptions(),
                 directions: Sequence[str] = DIRECTIONS, head_dim: int = 50,
                 head_dropouts: tuple[float, float] = (0.4, 0.1), encoder_dropout: float | None = None,
                 lm_text: Sequence[Sequence[str]] | None = None,
                 log: Callable[[str], None] | None = None) -> tuple[ULMFiTClassifier, dict]:
    """The whole recipe. ``train``/``dev``: (sentences, label names). ``language_model`` is changed in
    place by step (1) when ``lm_options.epochs`` > 0, on ``lm_text`` (default: the training sentences).
    ``encoder_dropout`` None: the LM's own dropout. Returns the classifier and a history dict."""
    _check_sentences(train[0], "training data")
    _check_sentences(dev[0], "dev data")
    labels = sorted(set(train[1]))
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted(set(dev[1]) - set(index))
    if unknown:
        logger.warning("dev labels never seen in training (always counted wrong): %s", unknown)
    history: dict = {"lm": [], "classifiers": {}}
    if lm_options.epochs:
        if log:
            before = language_model_loss(language_model, vocabulary, dev[0])
            log(f"LM loss on the dev text before fine-tuning {before:.4f} (perplexity {math.exp(before):.1f})")
        history["lm"] = finetune_language_model(language_model, vocabulary, lm_text or train[0], lm_options, log=log)
        if log:
            after = language_model_loss(language_model, vocabulary, dev[0])
            log(f"LM loss on the dev text after fine-tuning {after:.4f} (perplexity {math.exp(after):.1f})")
    config = ULMFiTConfig(bilm=language_model.bilm.config.to_dict(), num_labels=len(labels), directions=tuple(directions),
                          head_dim=head_dim, head_dropouts=tuple(head_dropouts),
                          encoder_dropout=language_model.bilm.config.dropout if encoder_dropout is None else encoder_dropout)
    train_targets = [index[y] for y in train[1]]
    dev_targets = [index.get(y, -1) for y in dev[1]]
    models = {}
    for direction in config.directions:
        torch.manual_seed(classifier_options.seed)
        model = DirectionalClassifier(config, direction)
        model.encoder.load_from_bilm(language_model.bilm)
        history["classifiers"][direction] = train_direction(model, (train[0], train_targets), (dev[0], dev_targets),
                                                            classifier_options, log=log)
        models[direction] = model.eval()
    classifier = ULMFiTClassifier(config, models, labels)
    history["dev_accuracy"] = classifier.accuracy(*dev)
    return classifier, history


def _check_sentences(sentences: Sequence[Sequence[str]], what: str) -> None:
    if isinstance(sentences, str) or any(isinstance(s, str) for s in sentences):
        raise TypeError(f"{what}: expected tokenised sentences (lists of str), got a str")
    empty = [i for i, s in enumerate(sentences) if not s]
    if empty:
        raise ULMFiTError(f"{what}: sentence {empty[0]} (0-based) is empty; every sentence needs a token")
