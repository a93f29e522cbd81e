"""Training a tagger: ``train_tagger`` with ``TrainOptions``, early-stopped on the dev score.

Frozen representations are embedded once per data set into a feature cache (``elmokit.features``);
``fine_tune=True`` trains the biLM too, live on character ids, with its own learning rate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import random
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from elmokit.bilm import BiLM
from elmokit.engine.epochs import EpochOptions, seed_everything, shuffled_batches, train_epochs
from elmokit.errors import UserError
from elmokit.features import feature_source
from elmokit.tasks.data import TaggedCorpus, bio_to_bioes
from elmokit.tasks.tagger.metrics import main_metric
from elmokit.tasks.tagger.model import PAD, UNK, TaggerConfig
from elmokit.tasks.tagger.saved import SequenceTagger
from elmokit.tasks.word_input import extend_vocabulary, initialise_embedding

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
    nonfinite: str = "stop"  # a NaN/inf loss stops training ("skip": that batch is skipped and counted)



def build_words(sentences: Sequence[Sequence[str]], lowercase: bool, min_count: int) -> list[str]:
    """PAD, UNK, then training words seen at least ``min_count`` times (most frequent first):
    rarer words are UNK in training, so the UNK vector is learned."""
    counts = Counter(t.lower() if lowercase else t for s in sentences for t in s)
    kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    return [PAD, UNK] + kept


def tagging_labels(train: TaggedCorpus, dev: TaggedCorpus, scheme: str | None, log) -> list[str]:
    """The labels of ``train`` in ``scheme`` ("O" first, then by type), after refusing an empty sentence
    in either set; dev labels never seen in training are logged (they are always wrong)."""
    for name, corpus in (("train", train), ("dev", dev)):
        empty = [i for i, s in enumerate(corpus.sentences) if not s]
        if empty:
            raise UserError(f"{name} set {corpus.path}: sentence {empty[0]} is empty")
    encode = bio_to_bioes if scheme == "BIOES" else list
    labels = sorted({label for row in train.labels for label in encode(row)}, key=lambda l: (l != "O", l[2:], l))
    unknown = sorted({label for row in dev.labels for label in encode(row)} - set(labels))
    if unknown:
        log(f"dev labels never seen in training (always wrong): {', '.join(unknown)}")
    return labels


def train_tagger(
    train: TaggedCorpus,
    dev: TaggedCorpus,
    config: TaggerConfig,
    *,
    representation=None,
    options: TrainOptions | None = None,
    cache_dir: str | os.PathLike | None = None,
    log=None,
    word_table=None,
) -> SequenceTagger:
    """Train on ``train``, keep the epoch with the best dev score (accuracy for POS, span F1 for
    NER), stop after ``patience`` epochs without improvement. Returns the best tagger with
    ``history`` (one dict per epoch). Frozen features are cached under ``cache_dir`` (default: a
    temporary folder removed afterwards). ``word_table`` (a ``StaticVectors``) initialises the word
    embedding (``elmokit.tasks.word_input``; ``config.word_dim`` becomes the table's dimension)."""
    with contextlib.ExitStack() as stack:
        if cache_dir is None:
            cache_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="elmokit-tag-features-"))
        return _fit(train, dev, config, representation, options or TrainOptions(), cache_dir, log or logger.info,
                    word_table)


def _fit(train, dev, config, representation, options, cache_dir, log, word_table=None) -> SequenceTagger:
    seed_everything(options.seed)
    rng = random.Random(options.seed)
    if config.elmo != "none" and representation is None:
        raise UserError("an ELMo tagger needs a representation (or set elmo='none')")
    if config.fine_tune and not hasattr(representation, "bilm"):
        raise UserError(f"fine-tuning needs an ELMo model; {getattr(representation, 'name', representation)} has no biLM")
    for name, corpus in (("train", train), ("dev", dev)):
        empty = [i for i, s in enumerate(corpus.sentences) if not s]
        if empty:
            raise UserError(f"{name} set {corpus.path}: sentence {empty[0]} is empty")
    labels = tagging_labels(train, dev, config.scheme, log)
    words = build_words(train.sentences, config.lowercase, config.min_word_count)
    if word_table is not None:
        config = dataclasses.replace(config, word_dim=word_table.dim, word_vectors=config.word_vectors or word_table.name)
        words = extend_vocabulary(words, word_table, lowercase=config.lowercase, freeze=config.freeze_word_vectors)
    elif config.word_vectors:
        raise UserError(f"the config names word vectors {config.word_vectors!r}; pass the table (word_table=...)")
    tagger = SequenceTagger(config, words, labels, representation=representation)
    model = tagger.model
    if word_table is not None:
        found = initialise_embedding(model.word_embedding, words, word_table, lowercase=config.lowercase,
                                     freeze=config.freeze_word_vectors, seed=options.seed)
        log(f"word embedding: {found} of {len(words) - 2} rows from {word_table.name} "
            f"({'frozen' if config.freeze_word_vectors else 'fine-tuned'})")

    train_features = dev_features = None
    parameter_groups = []
    if config.fine_tune:
        source = representation.bilm  # a fresh fp32 copy without the query object's token cache
        bilm = BiLM.from_state(source.config, source.numpy_state())
        for parameter in bilm.parameters():
            parameter.requires_grad_(True)
        model.bilm = bilm
        parameter_groups.append({"params": list(bilm.parameters()), "lr": options.fine_tune_learning_rate})
    elif config.elmo != "none":
        train_features = feature_source(representation, train.sentences, cache_dir)
        dev_features = feature_source(representation, dev.sentences, cache_dir)
    task_parameters = [p for n, p in model.named_parameters() if not n.startswith("bilm.") and p.requires_grad]
    parameter_groups.insert(0, {"params": task_parameters, "lr": options.learning_rate})
    optimizer = torch.optim.Adam(parameter_groups)

    def loss(indices):
        batch = tagger._inputs(train.sentences, indices, train_features, train.labels)
        return model.loss(tagger._emissions(batch), batch["tags"], batch["mask"]), len(indices)

    def evaluate():
        dev_result = tagger.evaluate(dev, features=dev_features)
        return main_metric(dev_result, config.task), {"dev": dev_result}

    result = train_epochs(model, optimizer, batches=lambda epoch: shuffled_batches(len(train), options.batch_size, rng),
                          loss=loss, evaluate=evaluate, metric_name="dev_score",
                          clip_parameters=[p for g in parameter_groups for p in g["params"]],
                          epoch_record=lambda epoch: {"mixing_weights": tagger.mixing_weights()},
                          options=EpochOptions(max_epochs=options.epochs, patience=options.patience,
                                               grad_clip=options.grad_clip, progress=options.progress,
                                               nonfinite=options.nonfinite), log=log)
    tagger.history = result.history
    tagger.best_epoch = result.best_epoch
    return tagger
