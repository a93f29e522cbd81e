"""Fine-tuning a pretrained transformer for sequence tagging: BERT's NER recipe (the fine-tuning row of
Devlin et al. 2019, Table 7).

The model is any transformers folder (one pretrained with ``elmokit pretrain``, or a local BERT-family
checkpoint on disk) with its fast tokenizer. Each sentence is a list of words, cut into the folder's
subword pieces with its template's specials (``encode_words``); the whole transformer is trained end to
end with the output layer (Devlin et al. 2019, §5.3; §4.3 in the first arXiv version):

    h_k   = T_i,  i = the position of word k's *first* sub-token in the last layer (the other pieces
            of the word get no prediction; BERT: "we use the representation of the first sub-token
            as the input to the token-level classifier over the NER label set")
    s_k   = W dropout(h_k) + b                       (B, T, N) label scores
    loss  = mean token cross-entropy (``output="softmax"``, BERT's: no CRF), or the linear-chain CRF
            of the feature-based tagger (``output="crf"``, ``elmokit.tasks.crf``) with the scheme's
            transition constraints.

``softmax`` is the default because it is the paper's fine-tuning row (Table 7 compares it, with no
CRF, against feature rows that feed a BiLSTM); ``crf`` is there for the comparison with our BiLSTM-CRF.

Optimisation is ``elmokit.transfer.finetune``'s (BERT §A.3): AdamW (weight decay 0.01, none on biases
and LayerNorm weights), peak rate 5e-5, 10% linear warm-up then linear decay to zero over all the
epochs, batch 32, 3 epochs by default, gradient norm clipped at 1; the epoch with the best dev score
(span F1 for NER, accuracy for POS) is kept, with optional early stopping (``patience``).

A sentence with more pieces than the model has positions is cut into consecutive windows of whole
words, each encoded with the specials and run alone (no overlap: a word near a cut sees less context);
a single word with more pieces than a window holds raises ValueError naming it.

A saved tagger is a folder: ``model/`` (save_pretrained of the transformer and the tokenizer),
``head.safetensors`` (the linear layer and the CRF), ``finetune_tagger.json`` (labels, task, scheme,
output, options, source, history); written to a staging folder and renamed.

Shapes: B sentences, T words, R subword rows (one per window; = B for sentences that fit), P subword
positions, H hidden, N labels.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from elmokit.pretraining.tokenizers import WordEncoding, encode_words
from elmokit.tasks.crf import ConditionalRandomField, allowed_transitions
from elmokit.tasks.data import TaggedCorpus, bio_to_bioes, bioes_to_bio
from elmokit.tasks.tagger.metrics import main_metric, score
from elmokit.transfer.finetune import (
    BASE_DIR,
    HEAD_FILE,
    FineTuneOptions,
    _max_positions,
    adamw_with_warmup,
    load_base,
    save_finetuned_folder,
)

FORMAT_VERSION = 1
TAGGER_CONFIG_FILE = "finetune_tagger.json"
OUTPUTS = ("softmax", "crf")
TAGGING_DEFAULTS = FineTuneOptions(epochs=3)  # BERT §A.3: 5e-5, batch 32, 3 epochs (2-4 recommended)


def first_subtoken_positions(encoding: WordEncoding) -> list[int]:
    """The position in ``encoding.input_ids`` of each word's first piece (BERT §5.3's token representation)."""
    return [pieces[0] for pieces in encoding.pieces]


def word_windows(tokenizer, words: Sequence[str], max_positions: int) -> list[tuple[int, WordEncoding]]:
    """(first word index, encoding) of consecutive windows of whole words that each fit ``max_positions``
    with the specials; one window when the sentence fits."""
    encoding = encode_words(tokenizer, words)
    if len(encoding.input_ids) <= max_positions:
        return [(0, encoding)]
    specials = len(encoding.input_ids) - sum(len(p) for p in encoding.pieces)
    room = max_positions - specials
    windows, start, used = [], 0, 0
    for k, pieces in enumerate(encoding.pieces):
        if len(pieces) > room:
            raise ValueError(f"the word {words[k]!r} has {len(pieces)} sub-tokens, more than the {room} a window "
                             f"of {max_positions} positions holds")
        if used + len(pieces) > room:
            windows.append((start, k))
            start, used = k, 0
        used += len(pieces)
    windows.append((start, len(words)))
    return [(a, encode_words(tokenizer, words[a:b])) for a, b in windows]


@dataclass
class SubwordBatch:
    """The transformer's input for B sentences and where each word's first piece lands.

    input_ids, attention_mask: (R, P), padded on the right; word_positions: (B, T) indices into the
    flattened (R * P) last layer (0 at padding); mask: (B, T) bool, True at real words."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    word_positions: torch.Tensor
    mask: torch.Tensor


def encode_tagging_batch(tokenizer, sentences: Sequence[Sequence[str]], max_positions: int) -> SubwordBatch:
    """Tokenised sentences -> a ``SubwordBatch`` (see ``word_windows`` for sentences that do not fit)."""
    rows: list[list[int]] = []
    placed: list[tuple[int, int, int, int]] = []  # (sentence, word, row, position)
    for b, words in enumerate(sentences):
        for start, encoding in word_windows(tokenizer, words, max_positions):
            for k, position in enumerate(first_subtoken_positions(encoding)):
                placed.append((b, start + k, len(rows), position))
            rows.append(list(encoding.input_ids))
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for r, row in enumerate(rows):
        input_ids[r, : len(row)] = torch.tensor(row)
        attention_mask[r, : len(row)] = 1
    steps = max(len(s) for s in sentences)
    word_positions = torch.zeros((len(sentences), steps), dtype=torch.long)
    mask = torch.zeros((len(sentences), steps), dtype=torch.bool)
    for b, k, r, position in placed:
        word_positions[b, k] = r * width + position
        mask[b, k] = True
    return SubwordBatch(input_ids, attention_mask, word_positions, mask)


class FineTunedTaggerModel(nn.Module):
    """A transformer, dropout and a linear layer on each word's first sub-token; softmax or CRF on top."""

    def __init__(self, base: nn.Module, labels: Sequence[str], *, output: str = "softmax", scheme: str | None = None,
                 dropout: float = 0.1) -> None:
        super().__init__()
        if output not in OUTPUTS:
            raise ValueError(f"output {output!r}: use one of {', '.join(OUTPUTS)}")
        if getattr(base, "pooler", None) is not None:  # BERT's [CLS] pooler feeds no tag: dropped, not trained
            base.pooler = None
        self.base = base
        hidden = int(base.config.hidden_size if hasattr(base.config, "hidden_size") else base.config.n_embd)
        self.dropout = nn.Dropout(dropout)
        self.label_scores = nn.Linear(hidden, len(labels))
        self.crf = None
        if output == "crf":
            constraints = allowed_transitions(list(labels), scheme) if scheme else None
            self.crf = ConditionalRandomField(len(labels), constraints=constraints)

    def emissions(self, batch: SubwordBatch) -> torch.Tensor:
        """-> label scores (B, T, N); padding positions hold the scores of row 0's first position."""
        out = self.base(input_ids=batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=True)
        last = out.hidden_states[-1]  # (R, P, H): the last layer
        words = last.reshape(-1, last.shape[-1])[batch.word_positions]  # (B, T, H): first sub-tokens
        return self.label_scores(self.dropout(words))

    def loss(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean token cross-entropy (softmax) or mean over sentences of -log p(tags) (CRF)."""
        if self.crf is not None:
            return self.crf(emissions, tags, mask).mean()
        return nn.functional.cross_entropy(emissions[mask], tags[mask])

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        if self.crf is not None:
            return self.crf.viterbi_decode(emissions, mask)
        best = emissions.argmax(-1)
        return [best[b, : int(n)].tolist() for b, n in enumerate(mask.sum(1))]


@dataclass
class FineTunedTagger:
    """What users keep: the fine-tuned model, its tokenizer, the labels (in the training scheme), how it
    was trained. ``predict`` gives BIO labels for NER whatever the training scheme."""

    model: FineTunedTaggerModel
    tokenizer: Any
    labels: list[str]
    task: str = "ner"
    scheme: str | None = "BIO"
    output: str = "softmax"
    options: FineTuneOptions = TAGGING_DEFAULTS
    source: str = ""
    history: list = dataclasses.field(default_factory=list)
    best_epoch: int | None = None
    results: dict = dataclasses.field(default_factory=dict)

    def _encode_labels(self, labels: Sequence[str]) -> list[str]:
        return bio_to_bioes(labels) if self.scheme == "BIOES" else list(labels)

    def _decode_labels(self, labels: Sequence[str]) -> list[str]:
        return bioes_to_bio(labels) if self.scheme == "BIOES" else list(labels)

    def batch(self, sentences: Sequence[Sequence[str]]) -> SubwordBatch:
        return encode_tagging_batch(self.tokenizer, sentences, _max_positions(self.model.base.config))

    def tags(self, labels: Sequence[Sequence[str]], steps: int) -> torch.Tensor:
        """Label ids (B, T) of ``labels`` (BIO/IOB2 for NER), 0 at padding."""
        index = {label: i for i, label in enumerate(self.labels)}
        tags = torch.zeros((len(labels), steps), dtype=torch.long)
        for b, row in enumerate(labels):
            tags[b, : len(row)] = torch.tensor([index[label] for label in self._encode_labels(row)], dtype=torch.long)
        return tags

    @torch.no_grad()
    def predict(self, sentences: Sequence[Sequence[str]], *, batch_size: int = 32) -> list[list[str]]:
        """Labels (BIO for NER) for each sentence; an empty sentence gets none."""
        self.model.eval()
        order = sorted((i for i in range(len(sentences)) if sentences[i]), key=lambda i: len(sentences[i]))
        results: list[list[str]] = [[] for _ in sentences]
        for start in range(0, len(order), batch_size):
            indices = order[start: start + batch_size]
            batch = self.batch([sentences[i] for i in indices])
            for i, path in zip(indices, self.model.decode(self.model.emissions(batch), batch.mask)):
                results[i] = self._decode_labels([self.labels[j] for j in path])
        return results

    def evaluate(self, corpus: TaggedCorpus, *, batch_size: int = 32) -> dict[str, Any]:
        return score(corpus.labels, self.predict(corpus.sentences, batch_size=batch_size), self.task)

    def save(self, directory: str | os.PathLike) -> Path:
        """``model/``, ``head.safetensors``, ``finetune_tagger.json`` (module docstring), atomically."""
        record = {"format_version": FORMAT_VERSION, "recipe": "finetune", "task": self.task, "scheme": self.scheme,
                  "output": self.output, "labels": self.labels, "options": dataclasses.asdict(self.options),
                  "source": self.source, "best_epoch": self.best_epoch, "results": self.results,
                  "history": self.history}
        return save_finetuned_folder(directory, self.model, self.tokenizer, record, TAGGER_CONFIG_FILE,
                                     metadata={"format": "elmokit-finetuned-tagger"})

    @classmethod
    def load(cls, directory: str | os.PathLike) -> FineTunedTagger:
        from safetensors.torch import load_file

        directory = Path(directory)
        for name in (TAGGER_CONFIG_FILE, HEAD_FILE, BASE_DIR):
            if not (directory / name).exists():
                raise FileNotFoundError(f"{directory}: not a fine-tuned tagger folder (no {name}); "
                                        "train one with `elmokit tag train --recipe finetune`")
        try:
            record = json.loads((directory / TAGGER_CONFIG_FILE).read_text(encoding="utf-8"))
            options = FineTuneOptions(**record["options"])
            labels, output, scheme = list(record["labels"]), record["output"], record.get("scheme")
        except (ValueError, TypeError, KeyError) as error:
            raise ValueError(f"{directory / TAGGER_CONFIG_FILE}: {error!r}") from None
        base, tokenizer = load_base(directory / BASE_DIR)
        model = FineTunedTaggerModel(base, labels, output=output, scheme=scheme, dropout=options.dropout)
        missing, unexpected = model.load_state_dict(load_file(str(directory / HEAD_FILE)), strict=False)
        if unexpected or any(not k.startswith("base.") for k in missing):
            raise ValueError(f"{directory / HEAD_FILE}: does not fit the model (missing "
                             f"{[k for k in missing if not k.startswith('base.')]}, unexpected {unexpected})")
        return cls(model.eval(), tokenizer, labels, record.get("task", "ner"), scheme, output, options,
                   record.get("source", ""), record.get("history", []), record.get("best_epoch"),
                   record.get("results", {}))


def is_finetuned_tagger_folder(path: str | os.PathLike) -> bool:
    return (Path(path) / TAGGER_CONFIG_FILE).is_file()


def finetune_tagger(
    folder: str | os.PathLike,
    train: TaggedCorpus,
    dev: TaggedCorpus,
    *,
    task: str = "ner",
    scheme: str | None = "BIO",
    output: str = "softmax",
    options: FineTuneOptions = TAGGING_DEFAULTS,
    patience: int | None = None,
    log=None,
) -> FineTunedTagger:
    """Fine-tune the transformer in ``folder`` with a tagging layer on ``train``; keep the epoch with the
    best dev score (span F1 for NER, token accuracy for POS); stop after ``patience`` epochs without a
    better one (None: run all ``options.epochs``). ``history``: one dict per epoch, as ``train_tagger``'s."""
    log = log or (lambda message: None)
    if options.aux_lm:
        raise ValueError("the auxiliary LM loss (GPT's eq. 5) is a classification option, not a tagging one")
    if task not in ("ner", "pos"):
        raise ValueError(f"task {task!r}: use ner or pos")
    for name, corpus in (("train", train), ("dev", dev)):
        empty = [i for i, s in enumerate(corpus.sentences) if not s]
        if empty:
            raise ValueError(f"{name} set {corpus.path}: sentence {empty[0]} is empty")
    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    scheme = scheme if task == "ner" else None
    encode = bio_to_bioes if scheme == "BIOES" else list
    labels = sorted({label for row in train.labels for label in encode(row)}, key=lambda l: (l != "O", l[2:], l))
    unknown = sorted({label for row in dev.labels for label in encode(row)} - set(labels))
    if unknown:
        log(f"dev labels never seen in training (always wrong): {', '.join(unknown)}")
    base, tokenizer = load_base(folder)
    model = FineTunedTaggerModel(base, labels, output=output, scheme=scheme, dropout=options.dropout)
    tagger = FineTunedTagger(model, tokenizer, labels, task, scheme, output, options, source=str(folder))
    steps_per_epoch = -(-len(train) // options.batch_size)
    optimizer, scheduler = adamw_with_warmup(model, options, options.epochs * steps_per_epoch)
    best_score, best_state, stale = -math.inf, None, 0
    for epoch in range(1, options.epochs + 1):
        started = time.perf_counter()
        model.train()
        order = list(range(len(train)))
        rng.shuffle(order)
        total_loss = 0.0
        for start in range(0, len(order), options.batch_size):
            rows = order[start: start + options.batch_size]
            batch = tagger.batch([train.sentences[i] for i in rows])
            tags = tagger.tags([train.labels[i] for i in rows], batch.mask.shape[1])
            loss = model.loss(model.emissions(batch), tags, batch.mask)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            total_loss += loss.item() * len(rows)
        dev_result = tagger.evaluate(dev)
        dev_score = main_metric(dev_result, task)
        record = {"epoch": epoch, "train_loss": total_loss / len(train), "dev": dev_result,
                  "seconds": round(time.perf_counter() - started, 2), "learning_rate": scheduler.get_last_lr()[0]}
        tagger.history.append(record)
        name = "F1" if task == "ner" else "accuracy"
        log(f"epoch {epoch}: train loss {record['train_loss']:.4f}, dev {name} {100 * dev_score:.2f} ({record['seconds']:.1f}s)")
        if dev_score > best_score:
            best_score, tagger.best_epoch, stale = dev_score, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            stale += 1
            if patience is not None and stale >= patience:
                log(f"early stop: no better dev {name} for {patience} epochs (best epoch {tagger.best_epoch})")
                break
    model.load_state_dict(best_state)
    model.eval()
    return tagger
