"""Training a tagger: ``train_tagger`` with ``TrainOptions``, early-stopped on the dev score.

Frozen representations are embedded once per data set into a feature cache (``elmokit.features``);
``fine_tune=True`` trains the biLM too, live on character ids, with its own learning rate.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from elmokit.features import feature_source
from elmokit.tasks.data import TaggedCorpus, bio_to_bioes
from elmokit.tasks.tagger.metrics import main_metric
from elmokit.tasks.tagger.model import PAD, UNK, TaggerConfig
from elmokit.tasks.tagger.saved import SequenceTagger

logger = logging.getLogger(__name__)


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
        log(f"epoch {epoch}: train loss {record['train_loss']:.4f}, dev {name} {100 * dev_score:.2f} "
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
