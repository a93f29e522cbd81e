"""Fine-tuning a pretrained transformer for sentence classification: BERT's recipe and GPT's.

The model is any transformers folder (one pretrained with ``elmokit pretrain``, or a local checkpoint
such as ``bert-base-cased`` on disk) with its fast tokenizer; the input is a tokenised sentence, cut
into the folder's subword pieces with its template's specials (``encode_words``); every parameter
is trained.

* **Encoders (BERT, RoBERTa, DistilBERT)** — Devlin et al. 2019, §3 and §A.3: the final hidden
  vector of the first token (``[CLS]`` / ``<s>``), through the model's pooler when it has one
  (BERT's, trained by next-sentence prediction; ``dense -> tanh``), else through a new ``dense ->
  tanh`` as RoBERTa's classification head does; dropout 0.1; a linear layer to the labels.
* **Left-to-right models (GPT, GPT-2)** — Radford et al. 2018, §3.2: the final activation of the
  last real token, ``h_l^m``, dropout 0.1, ``W_y``; with ``aux_lm`` the objective is eq. 5,

      L3(C) = L2(C) + lambda * L1(C),   lambda = 0.5,

  L2 the classification cross-entropy and L1 the language-model loss on the same input, through
  the model's own LM head (tied to the token embeddings, as in GPT).

Optimisation (both papers): Adam with weight decay (AdamW, 0.01; none on biases and LayerNorm
weights), linear warm-up over ``warmup`` of the steps then linear decay to zero, batch 32, 3 epochs;
the learning rate is BERT's 5e-5 by default (GPT used 6.25e-5). The epoch with the best development
accuracy is kept.

Shapes: B batch, T subword positions, H hidden, K labels, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from elmokit.engine.epochs import EpochOptions, seed_everything, shuffled_batches, train_epochs
from elmokit.errors import InputNotFound, UserError
from elmokit.formats.checks import refuse_non_finite, refuse_non_finite_read
from elmokit.io import output_directory
from elmokit.tasks.classifier import SAVED_BY
from elmokit.text.subword_tokenizers import encode_words

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
HEAD_FILE, CONFIG_FILE, BASE_DIR = "head.safetensors", "finetune.json", "model"


@dataclass(frozen=True, kw_only=True)
class FineTuneOptions:
    """How the model is fine-tuned (defaults: BERT's §A.3; GPT's eq. 5 with ``aux_lm=True``)."""

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup: float = 0.1  # share of the steps with a rising learning rate (BERT 10%; GPT 0.2%)
    dropout: float = 0.1
    aux_lm: bool = False  # GPT's auxiliary LM objective (left-to-right models only)
    aux_lm_weight: float = 0.5  # lambda of eq. 5
    seed: int = 0

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1:
            raise ValueError("epochs and batch_size must be >= 1")
        if not 0.0 <= self.warmup <= 1.0 or not 0.0 <= self.dropout < 1.0:
            raise ValueError("warmup must be in [0, 1] and dropout in [0, 1)")


def is_causal(config) -> bool:
    return getattr(config, "model_type", "") in ("openai-gpt", "gpt2", "gpt_neo", "gptj", "llama", "mistral", "qwen2")


def hidden_size(config) -> int:
    """The width of a transformer's hidden states (GPT's config calls it ``n_embd``)."""
    return int(config.hidden_size if hasattr(config, "hidden_size") else config.n_embd)


class SequenceSummary(nn.Module):
    """A transformer and one vector per input sequence: for a causal model the top hidden state of its last
    real token (GPT's h_l^m), else BERT's pooler tanh(W h_[CLS] + b) (a new one for an encoder without)."""

    def __init__(self, base: nn.Module, dropout: float) -> None:
        super().__init__()
        self.base = base  # AutoModelForCausalLM (causal) or AutoModel (encoders)
        self.causal = is_causal(base.config)
        self.hidden = hidden_size(base.config)
        has_pooler = getattr(base, "pooler", None) is not None
        self.pool = None if (self.causal or has_pooler) else nn.Sequential(nn.Linear(self.hidden, self.hidden), nn.Tanh())
        self.dropout = nn.Dropout(dropout)

    def summary(self, ids: torch.Tensor, mask: torch.Tensor, *, lm_loss: bool = False, **inputs):
        """ids, mask (B, T) -> (summary (B, H), the auxiliary LM loss when asked for, else None); ``inputs``:
        more encoder inputs (token types)."""
        if self.causal:
            labels = ids.masked_fill(mask == 0, -100) if lm_loss else None
            out = self.base(input_ids=ids, attention_mask=mask, labels=labels, output_hidden_states=True)
            last = mask.sum(1) - 1  # the last real token of each row (padding is on the right)
            return out.hidden_states[-1][torch.arange(ids.shape[0]), last], (out.loss if lm_loss else None)
        out = self.base(input_ids=ids, attention_mask=mask, **inputs)
        return (out.pooler_output if self.pool is None else self.pool(out.last_hidden_state[:, 0])), None


class FineTunedClassifier(SequenceSummary):
    """A transformer and a classification head; ``forward`` gives logits (B, K) and, for a causal
    model asked for it, the auxiliary LM loss."""

    def __init__(self, base: nn.Module, num_labels: int, *, dropout: float = 0.1) -> None:
        super().__init__(base, dropout)
        self.classifier = nn.Linear(self.hidden, num_labels)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, lm_loss: bool = False):
        """input_ids, attention_mask (B, T) -> (logits (B, K), LM loss or None)."""
        summary, aux = self.summary(input_ids, attention_mask, lm_loss=lm_loss)
        return self.classifier(self.dropout(summary)), aux


def load_base(folder: str | os.PathLike):
    """(model, tokenizer) of a transformers folder: the LM-headed model for causal ones, else the encoder."""
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise InputNotFound(f"{folder}: not a transformers model folder (no config.json)")
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # dropped pretraining heads are expected
    try:
        config = AutoConfig.from_pretrained(str(folder))
        cls = AutoModelForCausalLM if is_causal(config) else AutoModel
        model = cls.from_pretrained(str(folder), dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
    finally:
        hf_logging.set_verbosity(verbosity)
    refuse_non_finite_read(model.state_dict(), folder / "model.safetensors")
    return model, tokenizer


def max_positions(config) -> int:
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None) or 512
    if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        positions -= (config.pad_token_id or 0) + 1
    return int(positions)


def encode_batch(tokenizer, sentences: Sequence[Sequence[str]], max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenised sentences -> input_ids, attention_mask (B, T), padded on the right, cut to the positions."""
    return pad_ids([encode_words(tokenizer, words).input_ids[:max_positions] for words in sentences], tokenizer)


def pad_ids(rows: Sequence[Sequence[int]], tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of token ids -> input_ids (padded on the right with the tokenizer's pad id, else 0), attention_mask (B, T)."""
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return ids, mask


def warmup_then_linear_decay(step: int, total: int, warmup: float) -> float:
    """The learning-rate factor at ``step`` (0-based) of ``total``: rises linearly over the first
    ``warmup`` share, then falls linearly to 0 at ``total`` (BERT's and GPT's schedule)."""
    warm = int(round(warmup * total))
    if step < warm:
        return (step + 1) / warm
    return max(0.0, (total - step) / max(1, total - warm))


def save_finetuned_folder(directory: str | os.PathLike, model: nn.Module, tokenizer, record: dict, config_file: str,
                          *, command: str, artifact: str, metadata: dict | None = None,
                          inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
    """A fine-tuned folder, atomically: ``model/`` (``model.base`` and the tokenizer, save_pretrained),
    ``head.safetensors`` (every parameter outside ``base.``) and ``record`` as JSON in ``config_file``;
    under the output policy of ``command`` (``elmokit.io.output_directory``)."""
    directory = Path(directory)
    refuse_non_finite(model.state_dict(), directory)
    with output_directory(directory, command=command, inputs=inputs, artifact=artifact) as staging:
        model.base.save_pretrained(str(staging / BASE_DIR))
        tokenizer.save_pretrained(str(staging / BASE_DIR))
        head = {k: v.detach().contiguous() for k, v in model.state_dict().items() if not k.startswith("base.")}
        save_file(head, str(staging / HEAD_FILE), metadata=metadata)
        (staging / config_file).write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return directory


def adamw_with_warmup(model: nn.Module, options: FineTuneOptions, total_steps: int):
    """(optimizer, scheduler) of BERT's §A.3 and GPT's §4.1 for every parameter of ``model``: AdamW with
    ``options.weight_decay``, none on biases and LayerNorm weights; the rate ``options.learning_rate``
    times ``warmup_then_linear_decay`` over ``total_steps`` (call ``scheduler.step()`` after each update)."""
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n or ".ln_" in n]
    decay = [p for p in model.parameters() if all(p is not q for q in no_decay)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": options.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=options.learning_rate)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_then_linear_decay(step, total_steps, options.warmup))
    return optimizer, scheduler


def combined_loss(logits: torch.Tensor, targets: torch.Tensor, lm_loss: torch.Tensor | None, weight: float) -> torch.Tensor:
    """GPT eq. 5: L3 = L2 + lambda * L1 (L1 absent: BERT's L2 alone)."""
    task = nn.functional.cross_entropy(logits, targets)
    return task if lm_loss is None else task + weight * lm_loss


@dataclass
class FineTuned:
    """What users keep: the fine-tuned model, its tokenizer, the label names, how it was trained."""

    model: FineTunedClassifier
    tokenizer: object
    labels: list[str]
    options: FineTuneOptions
    source: str = ""
    history: list = dataclasses.field(default_factory=list)

    @torch.no_grad()
    def logits(self, sentences: Sequence[Sequence[str]], features=None, *, batch_size: int = 32) -> torch.Tensor:
        """(N, K); each sentence's logits do not depend on its batch beyond float rounding (padding).
        ``features`` is unused (the model reads the text itself): the signature is the other classifiers'."""
        self.model.eval()
        positions = max_positions(self.model.base.config)
        out = [self.model(*encode_batch(self.tokenizer, sentences[s: s + batch_size], positions))[0]
               for s in range(0, len(sentences), batch_size)]
        return torch.cat(out) if out else torch.zeros(0, len(self.labels))

    def predict(self, sentences: Sequence[Sequence[str]]) -> list[str]:
        return [self.labels[i] for i in self.logits(sentences).argmax(1).tolist()]

    def accuracy(self, sentences, labels: Sequence[str], features=None) -> float:
        predicted = self.predict(sentences)
        return 100 * float(np.mean([p == y for p, y in zip(predicted, labels)])) if labels else float("nan")

    def save(self, directory: str | os.PathLike, *, inputs: Iterable[str | os.PathLike | None] = ()) -> Path:
        """``model/`` (save_pretrained of the transformer and tokenizer), ``head.safetensors``,
        ``finetune.json`` (labels, options, source, history); written to a staging folder and renamed."""
        record = {"format_version": FORMAT_VERSION, "recipe": "finetune", "labels": self.labels,
                  "options": dataclasses.asdict(self.options), "source": self.source, "history": self.history}
        return save_finetuned_folder(directory, self.model, self.tokenizer, record, CONFIG_FILE, command=SAVED_BY,
                                     artifact="finetuned-classifier", inputs=inputs)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> FineTuned:
        directory = Path(directory)
        for name in (CONFIG_FILE, HEAD_FILE, BASE_DIR):
            if not (directory / name).exists():
                raise InputNotFound(f"{directory}: not a fine-tuned classifier folder (no {name})")
        record = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
        options = FineTuneOptions(**record["options"])
        base, tokenizer = load_base(directory / BASE_DIR)
        model = FineTunedClassifier(base, len(record["labels"]), dropout=options.dropout)
        missing, unexpected = model.load_state_dict(refuse_non_finite_read(load_file(str(directory / HEAD_FILE)),
                                                                     directory / HEAD_FILE), strict=False)
        if unexpected or any(not k.startswith("base.") for k in missing):
            raise UserError(f"{directory}: {HEAD_FILE} does not fit the model (missing {missing}, unexpected {unexpected})")
        return cls(model.eval(), tokenizer, list(record["labels"]), options, record.get("source", ""),
                   record.get("history", []))


def finetune_classifier(
    folder: str | os.PathLike,
    train: tuple[Sequence[Sequence[str]], Sequence[str]],
    dev: tuple[Sequence[Sequence[str]], Sequence[str]],
    options: FineTuneOptions = FineTuneOptions(),
    *,
    log=None,
) -> FineTuned:
    """Fine-tune the transformer in ``folder`` on (sentences, labels); keep the best dev epoch."""
    seed_everything(options.seed)
    rng = np.random.default_rng(options.seed)
    base, tokenizer = load_base(folder)
    labels = sorted(set(train[1]))
    index = {y: i for i, y in enumerate(labels)}
    model = FineTunedClassifier(base, len(labels), dropout=options.dropout)
    if options.aux_lm and not model.causal:
        raise UserError(f"{folder}: the auxiliary LM loss (GPT's eq. 5) needs a left-to-right model, "
                        f"not {base.config.model_type}")
    steps_per_epoch = -(-len(train[0]) // options.batch_size)
    optimizer, scheduler = adamw_with_warmup(model, options, options.epochs * steps_per_epoch)
    targets = torch.tensor([index[y] for y in train[1]])
    positions = max_positions(base.config)
    result = FineTuned(model, tokenizer, labels, options, source=str(folder))

    def loss(rows):
        ids, mask = encode_batch(tokenizer, [train[0][i] for i in rows], positions)
        logits, lm = model(ids, mask, lm_loss=options.aux_lm)
        return combined_loss(logits, targets[rows], lm, options.aux_lm_weight), len(rows)

    result.history = train_epochs(
        model, optimizer, batches=lambda epoch: shuffled_batches(len(train[0]), options.batch_size, rng), loss=loss,
        scheduler=scheduler, evaluate=lambda: result.accuracy(*dev), metric_name="dev_accuracy",
        options=EpochOptions(max_epochs=options.epochs, grad_clip=1.0), log=log or logger.debug).history
    return result
