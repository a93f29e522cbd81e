"""Fine-tuning a transformer on sentence and sentence-pair tasks: BERT's pair input and GPT's input
transformations.

Inputs (each sentence a list of words cut into the folder's subword pieces, ``encode_words``):

* **Encoders** -- Devlin et al. 2019, §3 (Figure 2) and §4.1: ``[CLS] A [SEP] B [SEP]``, segment
  (token type) ids 0 up to and including the first ``[SEP]``, 1 after it; one sentence is
  ``[CLS] A [SEP]``. RoBERTa-type models (Liu et al. 2019) spell it ``<s> A </s></s> B </s>`` with no
  segment ids. The summary is the final ``[CLS]`` vector through the pooler (or a new ``dense -> tanh``),
  as in ``elmokit.transfer.finetune``.
* **Left-to-right models (GPT)** -- Radford et al. 2018, §3.3 (Figure 1): three new tokens with
  randomly initialised embeddings, start, delimiter and extract. Single sentence: ``start A extract``.
  Entailment: ``start premise delimiter hypothesis extract``. Similarity (no inherent order): both
  ``start A delimiter B extract`` and ``start B delimiter A extract``, processed independently, their
  final extract-token vectors h_l^m added element-wise before the linear output layer. The summary
  is always the final vector of the extract token (the last real token).

Too long a pair is cut one piece at a time from the end of the longer sentence (BERT's rule) until it
fits the model's positions. Classification: cross-entropy; similarity scores (STS-B, SICK-R): one output
and mean squared error (BERT's STS-B head). GPT's auxiliary LM loss (eq. 5, ``aux_lm``) is taken on the
first (or only) input sequence.

Optimisation is ``elmokit.transfer.finetune``'s (AdamW, linear warm-up and decay, gradient norm 1),
on the engine's epoch loop with dev early stopping (``elmokit.engine.epochs``).

Shapes: B batch, T subword positions, H hidden, K outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from elmokit.engine.epochs import EpochOptions, EpochResult, seed_everything, shuffled_batches, train_epochs
from elmokit.errors import UserError
from elmokit.text.subword_tokenizers import encode_words
from elmokit.transfer.finetune import FineTuneOptions, SequenceSummary, adamw_with_warmup, is_causal, load_base, max_positions

# GPT's new tokens (Radford et al. 2018, §3.3: "randomly initialized start and end tokens", a delimiter "$")
GPT_START, GPT_DELIMITER, GPT_EXTRACT = "<|start|>", "<|delimiter|>", "<|extract|>"
INPUT_KINDS = ("single", "entailment", "similarity")


def _pieces(tokenizer, words: Sequence[str]) -> list[int]:
    return list(encode_words(tokenizer, words, add_special_tokens=False).input_ids)


def truncate_pair(a: list[int], b: list[int] | None, room: int) -> tuple[list[int], list[int] | None]:
    """Drop the last piece of the longer sequence (of the second on a tie, as BERT's ``_truncate_seq_pair``)
    until len(a) + len(b) <= room."""
    a = list(a)
    b = None if b is None else list(b)
    while len(a) + (len(b) if b is not None else 0) > room:
        if b is not None and len(b) >= len(a):
            b.pop()
        else:
            a.pop()
    return a, b


class PairInputs:
    """Builds the model's input sequences for a task: ``rows(first, second)`` -> a list of (input_ids,
    token_type_ids) sequences (two for GPT's similarity, else one)."""

    def __init__(self, tokenizer, config, kind: str) -> None:
        if kind not in INPUT_KINDS:
            raise ValueError(f"input kind {kind!r}: use one of {', '.join(INPUT_KINDS)}")
        self.tokenizer, self.kind = tokenizer, kind
        self.causal = is_causal(config)
        self.positions = max_positions(config)
        self.double_separator = getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert")
        if self.causal:
            missing = [t for t in (GPT_START, GPT_DELIMITER, GPT_EXTRACT) if t not in tokenizer.get_vocab()]
            if missing:
                raise ValueError(f"the tokenizer lacks GPT's task tokens {missing}: call add_gpt_task_tokens first")
            self.start, self.delimiter, self.extract = tokenizer.convert_tokens_to_ids([GPT_START, GPT_DELIMITER,
                                                                                        GPT_EXTRACT])
        else:
            if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
                raise UserError("an encoder's tokenizer needs a CLS and a SEP token (BERT's [CLS], [SEP]); this folder's "
                                "has none")
            self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id

    def rows(self, first: Sequence[str], second: Sequence[str] | None) -> list[tuple[list[int], list[int]]]:
        a = _pieces(self.tokenizer, first)
        b = None if second is None else _pieces(self.tokenizer, second)
        if (b is None) != (self.kind == "single"):
            raise ValueError(f"a {self.kind} input takes {'one sentence' if self.kind == 'single' else 'two sentences'}")
        if self.causal:
            a, b = truncate_pair(a, b, self.positions - (2 if b is None else 3))
            if b is None:
                return [([self.start, *a, self.extract], [0] * (len(a) + 2))]
            orders = [(a, b), (b, a)] if self.kind == "similarity" else [(a, b)]
            return [([self.start, *x, self.delimiter, *y, self.extract], [0] * (len(x) + len(y) + 3)) for x, y in orders]
        extra = [self.sep] if self.double_separator else []
        a, b = truncate_pair(a, b, self.positions - (2 if b is None else 3 + len(extra)))
        if b is None:
            return [([self.cls, *a, self.sep], [0] * (len(a) + 2))]
        ids = [self.cls, *a, self.sep, *extra, *b, self.sep]
        types = [0] * (len(a) + 2 + len(extra)) + [1] * (len(b) + 1)
        return [(ids, types)]


def add_gpt_task_tokens(model, tokenizer) -> None:
    """Add GPT's start, delimiter and extract tokens to the tokenizer, new embedding rows to the model."""
    new = [t for t in (GPT_START, GPT_DELIMITER, GPT_EXTRACT) if t not in tokenizer.get_vocab()]
    if new:
        tokenizer.add_tokens(new, special_tokens=True)
        model.resize_token_embeddings(len(tokenizer))


def pad_rows(rows: Sequence[tuple[list[int], list[int]]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """(input_ids, token_type_ids, attention_mask), each (B, T), padded on the right."""
    width = max(len(ids) for ids, _ in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    types = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, row_types) in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        types[i, : len(row)] = torch.tensor(row_types)
        mask[i, : len(row)] = 1
    return ids, types, mask


class FineTunedPairModel(SequenceSummary):
    """A transformer and an output layer over the summary of each input sequence (summed for GPT's similarity;
    for GPT the summary is the extract token's, the last real one)."""

    def __init__(self, base: nn.Module, num_outputs: int, *, dropout: float = 0.1) -> None:
        super().__init__(base, dropout)
        self.uses_segments = (getattr(base.config, "type_vocab_size", 0) or 0) > 1
        self.output = nn.Linear(self.hidden, num_outputs)

    def forward(self, sequences: Sequence[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], *, lm_loss: bool = False):
        """One (ids, types, mask) triple per input sequence of the examples -> (outputs (B, K), LM loss or None)."""
        total, aux = None, None
        for i, (ids, types, mask) in enumerate(sequences):
            extra = {"token_type_ids": types} if self.uses_segments else {}
            vector, loss = self.summary(ids, mask, lm_loss=lm_loss and i == 0, **extra)
            total = vector if total is None else total + vector  # GPT similarity: h_l^m of both orders added
            aux = loss if i == 0 else aux
        return self.output(self.dropout(total)), aux


@dataclass
class FineTunedPairs:
    """What a run keeps: the model, its input builder, the label names (empty for a regression)."""

    model: FineTunedPairModel
    inputs: PairInputs
    labels: list[str]
    pad_id: int

    def encode(self, first, second) -> list[list[tuple[list[int], list[int]]]]:
        """The input sequences of every example (``PairInputs.rows``), computed once per data set."""
        return [self.inputs.rows(first[i], None if second is None else second[i]) for i in range(len(first))]

    def batch(self, encoded, indices) -> list[tuple[torch.Tensor, ...]]:
        """One padded (ids, types, mask) triple per input sequence of the examples ``indices`` of ``encoded``."""
        rows = [encoded[i] for i in indices]
        return [pad_rows([r[k] for r in rows], self.pad_id) for k in range(len(rows[0]))]

    @torch.no_grad()
    def predict(self, first, second, *, batch_size: int = 32, encoded=None) -> list:
        """Label names, or scores for a regression; ``encoded``: ``encode(first, second)`` when already done."""
        self.model.eval()
        encoded = encoded if encoded is not None else self.encode(first, second)
        out = [self.model(self.batch(encoded, range(s, min(s + batch_size, len(first)))))[0]
               for s in range(0, len(first), batch_size)]
        out = torch.cat(out) if out else torch.zeros(0, self.model.output.out_features)
        return out[:, 0].tolist() if not self.labels else [self.labels[i] for i in out.argmax(1).tolist()]


def finetune_pairs(
    folder, train: tuple[list, list | None, list], dev: tuple[list, list | None, list], *, kind: str,
    metric: Callable[[list, list], float], regression: bool = False, options: FineTuneOptions | None = None,
    patience: int | None = None, log=None,
) -> tuple[FineTunedPairs, EpochResult]:
    """Fine-tune the transformer in ``folder`` on (first sentences, second sentences or None, targets);
    keep the epoch with the best dev ``metric(predicted, gold)``."""
    options = options or FineTuneOptions()
    seed_everything(options.seed)
    rng = np.random.default_rng(options.seed)
    base, tokenizer = load_base(folder)
    if is_causal(base.config):
        add_gpt_task_tokens(base, tokenizer)
    elif options.aux_lm:
        raise UserError(f"{folder}: the auxiliary LM loss (GPT's eq. 5) needs a left-to-right model; "
                        f"{base.config.model_type} is an encoder (drop --aux-lm)")
    first, second, targets = train
    labels = [] if regression else sorted(set(targets), key=str)
    gold = (torch.tensor([float(t) for t in targets]) if regression
            else torch.tensor([labels.index(t) for t in targets], dtype=torch.long))
    model = FineTunedPairModel(base, 1 if regression else len(labels), dropout=options.dropout)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    tuned = FineTunedPairs(model, PairInputs(tokenizer, base.config, kind), labels, pad)
    steps = options.epochs * -(-len(first) // options.batch_size)
    optimizer, scheduler = adamw_with_warmup(model, options, steps)

    train_encoded, dev_encoded = tuned.encode(first, second), tuned.encode(dev[0], dev[1])

    def batches(epoch: int):
        return shuffled_batches(len(first), options.batch_size, rng)

    def loss(indices):
        out, aux = model(tuned.batch(train_encoded, indices), lm_loss=options.aux_lm)
        task = (nn.functional.mse_loss(out[:, 0], gold[indices]) if regression
                else nn.functional.cross_entropy(out, gold[indices]))
        return (task if aux is None else task + options.aux_lm_weight * aux), len(indices)

    def evaluate():
        return metric(tuned.predict(dev[0], dev[1], encoded=dev_encoded), list(dev[2]))

    result = train_epochs(model, optimizer, batches=batches, loss=loss, evaluate=evaluate, scheduler=scheduler,
                          options=EpochOptions(max_epochs=options.epochs, patience=patience, grad_clip=1.0),
                          metric_name="dev_metric", log=log, description="fine-tuning epoch")
    return tuned, result
