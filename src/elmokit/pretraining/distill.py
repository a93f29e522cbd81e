"""Knowledge distillation of a BERT teacher into a half-depth DistilBERT student (Sanh et al. 2019),
with TinyBERT's layer-to-layer losses as an option (Jiao et al. 2020).

DistilBERT (§2-3, and its code ``examples/research_projects/distillation``: ``distiller.py``, the
training command of its README, ``scripts/extract_distilbert.py``):

- Loss ``L = 5 L_ce + 2 L_mlm + 1 L_cos`` (``--alpha_ce 5.0 --alpha_mlm 2.0 --alpha_cos 1.0``).
- ``L_ce``: soft-target cross-entropy ``sum_i t_i log s_i`` (§2) with ``t = softmax(z_t / T)``,
  ``s = softmax(z_s / T)`` at temperature T (2.0 in the README's command), averaged over the
  non-padding positions (the code's default ``restrict_ce_to_mask=False``; ``restrict_to_masked``
  uses the masked positions only) and multiplied by T^2 (Hinton et al. 2015: keeps the gradient scale
  independent of T). The code computes ``KLDivLoss`` = this minus the teacher's entropy: the same
  gradient; the cross-entropy is reported because it is what §2 writes.
- ``L_mlm``: the student's masked-LM cross-entropy at the masked positions (BERT's 15%, 80/10/10).
- ``L_cos``: ``1 - cos(h_s, h_t)`` of the last hidden states, averaged over non-padding positions
  (``CosineEmbeddingLoss`` with target 1).
- Student: ``DistilBertForMaskedLM`` with the teacher's width, heads, feed-forward width, vocabulary
  and positions, half the layers; "we initialise the student from the teacher by taking one layer
  out of two" (§3): student layer j = teacher layer 2j (0-based; ``student_from_teacher``), the
  embeddings and the MLM head copied. DistilBERT has no segment embeddings, so the teacher's
  segment-0 embedding is added into the student's position table: the student's embedding output
  equals the teacher's for single-segment input (the reference's extract script drops it instead).

TinyBERT (§3.1, eq. 7-9), optional: ``L_hidn = MSE(H_s W_h, H_t)`` for the embedding output and each
student layer m against teacher layer g(m) = m N / M (N teacher, M student layers), W_h a learned
bias-free projection when the widths differ (the identity when they are equal); ``L_attn = (1/h)
sum_heads MSE(A_s, A_t)`` for each student layer m against teacher layer g(m), averaged over the
(query, key) pairs of real tokens. Deviation: TinyBERT fits the unnormalised attention scores;
transformers returns the softmax probabilities only, so those are fitted here.

The training loop here (``distill``) is minimal on purpose (Adam, fixed steps, save); the shared
trainer in ``elmokit.training`` should run ``DistillationObjective`` (it follows the ``Objective``
protocol) for checkpoints, resume and DDP.

Shape legend: B batch, T tokens, V vocabulary, H hidden (Hs student, Ht teacher), A heads.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmokit.io import atomic_directory
from elmokit.pretraining.batching import ObjectiveLoss, chunks, collate, example_field
from elmokit.pretraining.masking import BERT_RATES, IGNORE_INDEX, MaskingRates, MaskingVocab, mask_tokens
from elmokit.text.subword_tokenizers import encode_words

DISTILBERT_WEIGHTS = {"ce": 5.0, "mlm": 2.0, "cos": 1.0}  # the README's --alpha_ce/--alpha_mlm/--alpha_cos
DISTILBERT_TEMPERATURE = 2.0


# --------------------------------------------------------------------------- the student


def student_layers(teacher_layers: int) -> list[int]:
    """Teacher layers the student starts from: 0, 2, 4, ... (one out of two, §3)."""
    return list(range(0, teacher_layers, 2))


def student_from_teacher(teacher, *, seed: int = 0):
    """A ``DistilBertForMaskedLM`` initialised from a BERT masked-LM teacher (``BertForMaskedLM`` or
    ``BertForPreTraining``): embeddings, teacher layers 0, 2, ..., and the MLM head copied."""
    from transformers import DistilBertConfig, DistilBertForMaskedLM

    c = teacher.config
    if c.model_type != "bert":
        raise TypeError(f"the teacher must be a BERT masked LM, got model_type {c.model_type!r}")
    layers = student_layers(c.num_hidden_layers)
    config = DistilBertConfig(vocab_size=c.vocab_size, dim=c.hidden_size, n_layers=len(layers), n_heads=c.num_attention_heads,
                              hidden_dim=c.intermediate_size, max_position_embeddings=c.max_position_embeddings,
                              dropout=c.hidden_dropout_prob, attention_dropout=c.attention_probs_dropout_prob,
                              activation=c.hidden_act, pad_token_id=c.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        student = DistilBertForMaskedLM(config)
    bert = teacher.bert
    head = teacher.cls.predictions
    with torch.no_grad():
        emb, s_emb = bert.embeddings, student.distilbert.embeddings
        s_emb.word_embeddings.weight.copy_(emb.word_embeddings.weight)
        s_emb.position_embeddings.weight.copy_(emb.position_embeddings.weight + emb.token_type_embeddings.weight[0])
        s_emb.LayerNorm.load_state_dict(emb.LayerNorm.state_dict())
        for j, t in enumerate(layers):
            src, dst = bert.encoder.layer[t], student.distilbert.transformer.layer[j]
            for a, b in ((src.attention.self.query, dst.attention.q_lin), (src.attention.self.key, dst.attention.k_lin),
                         (src.attention.self.value, dst.attention.v_lin), (src.attention.output.dense, dst.attention.out_lin),
                         (src.attention.output.LayerNorm, dst.sa_layer_norm), (src.intermediate.dense, dst.ffn.lin1),
                         (src.output.dense, dst.ffn.lin2), (src.output.LayerNorm, dst.output_layer_norm)):
                b.load_state_dict(a.state_dict())
        student.vocab_transform.load_state_dict(head.transform.dense.state_dict())
        student.vocab_layer_norm.load_state_dict(head.transform.LayerNorm.state_dict())
        student.vocab_projector.bias.copy_(head.bias if getattr(head, "bias", None) is not None else head.decoder.bias)
        if not config.tie_word_embeddings:
            student.vocab_projector.weight.copy_(head.decoder.weight)
    return student


# --------------------------------------------------------------------------- the losses


def soft_target_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float,
                              select: torch.Tensor) -> torch.Tensor:
    """T^2 * mean over the selected positions of -sum_v softmax(z_t/T)_v log softmax(z_s/T)_v.
    logits: (B, T, V); select: (B, T) bool."""
    s = student_logits[select].float() / temperature  # (N, V)
    t = teacher_logits[select].float() / temperature
    ce = -(F.softmax(t, dim=-1) * F.log_softmax(s, dim=-1)).sum(-1)  # (N,)
    return ce.mean() * temperature ** 2


def cosine_loss(student_hidden: torch.Tensor, teacher_hidden: torch.Tensor, select: torch.Tensor) -> torch.Tensor:
    """Mean over the selected positions of 1 - cos(h_s, h_t); hidden: (B, T, H), select: (B, T) bool."""
    return (1 - F.cosine_similarity(student_hidden[select].float(), teacher_hidden[select].float(), dim=-1)).mean()


def layer_map(student_layers_count: int, teacher_layers_count: int) -> list[int]:
    """TinyBERT's g(m) = m N / M for m = 0..M (0 = the embedding output)."""
    if teacher_layers_count % student_layers_count:
        raise ValueError(f"TinyBERT's uniform mapping needs the teacher's {teacher_layers_count} layers to be a multiple "
                         f"of the student's {student_layers_count}")
    k = teacher_layers_count // student_layers_count
    return [m * k for m in range(student_layers_count + 1)]


def hidden_mse(student_states: Sequence[torch.Tensor], teacher_states: Sequence[torch.Tensor], projection: nn.Module,
               mapping: Sequence[int], select: torch.Tensor) -> torch.Tensor:
    """Sum over m of MSE(H_s^m W_h, H_t^{g(m)}) at the selected positions (TinyBERT eq. 8 and 9, embedding
    layer included). states: (B, T, H) per layer, embedding output first."""
    total = student_states[0].new_zeros(())
    for m, g in enumerate(mapping):
        total = total + F.mse_loss(projection(student_states[m][select].float()), teacher_states[g][select].float())
    return total


def attention_mse(student_attentions: Sequence[torch.Tensor], teacher_attentions: Sequence[torch.Tensor],
                  mapping: Sequence[int], attention_mask: torch.Tensor) -> torch.Tensor:
    """Sum over student layers m >= 1 of MSE(A_s^m, A_t^{g(m)}) over heads and (query, key) pairs of real
    tokens (TinyBERT eq. 7, on probabilities). attentions: (B, A, T, T) per layer."""
    real = attention_mask.bool()
    pairs = (real[:, None, :, None] & real[:, None, None, :]).expand_as(student_attentions[0])  # (B, A, T, T)
    total = student_attentions[0].new_zeros(())
    for m, g in enumerate(mapping[1:], start=1):
        s, t = student_attentions[m - 1][pairs].float(), teacher_attentions[g - 1][pairs].float()
        total = total + F.mse_loss(s, t)
    return total


def use_eager_attention(*models) -> None:
    """transformers' SDPA attention returns no probabilities; switch to the eager kernel (same outputs)."""
    for model in models:
        if model.config._attn_implementation != "eager":
            model.set_attn_implementation("eager")


# --------------------------------------------------------------------------- the objective


@dataclass(frozen=True)
class DistillationConfig:
    temperature: float = DISTILBERT_TEMPERATURE
    alpha_ce: float = DISTILBERT_WEIGHTS["ce"]
    alpha_mlm: float = DISTILBERT_WEIGHTS["mlm"]
    alpha_cos: float = DISTILBERT_WEIGHTS["cos"]
    alpha_hidden: float = 0.0  # TinyBERT's hidden-state MSE (0 = off)
    alpha_attention: float = 0.0  # TinyBERT's attention MSE (0 = off)
    restrict_to_masked: bool = False


class DistillationObjective:
    """DistilBERT's triple loss (+ TinyBERT's options) for the ``Objective`` protocol: ``loss(student,
    batch)`` runs the frozen teacher itself. Examples: single segments (``input_ids`` with specials).
    ``modules()`` holds TinyBERT's projection W_h when it is learned."""

    name = "distill"

    def __init__(self, teacher, vocab: MaskingVocab, *, pad_id: int, config: DistillationConfig = DistillationConfig(),
                 student_hidden: int | None = None, rates: MaskingRates = BERT_RATES) -> None:
        self.teacher = teacher.eval().requires_grad_(False)
        self.vocab, self.pad_id, self.config, self.rates = vocab, pad_id, config, rates
        t_hidden = teacher.config.hidden_size
        s_hidden = student_hidden or t_hidden
        self.projection: nn.Module = nn.Identity() if s_hidden == t_hidden else nn.Linear(s_hidden, t_hidden, bias=False)

    def modules(self) -> dict[str, nn.Module]:
        return {"projection": self.projection} if isinstance(self.projection, nn.Linear) else {}

    def batches(self, examples, *, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, torch.Tensor]]:
        for chunk in chunks(examples, batch_size):
            rows = []
            for e in chunk:
                masked = mask_tokens(example_field(e, "input_ids"), self.vocab, rng, word_ids=example_field(e, "word_ids"),
                                     rates=self.rates)
                rows.append({"input_ids": masked.input_ids, "labels": masked.labels})
            yield collate(rows, pad_id=self.pad_id)

    def losses(self, student, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each loss term (unweighted scalars)."""
        c = self.config
        attentions = c.alpha_attention > 0
        if attentions:
            use_eager_attention(self.teacher, student)
        inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        with torch.no_grad():
            t = self.teacher(**inputs, token_type_ids=torch.zeros_like(batch["input_ids"]), output_hidden_states=True,
                             output_attentions=attentions)
        s = student(**inputs, output_hidden_states=True, output_attentions=attentions)
        real = batch["attention_mask"].bool()
        labels = batch["labels"]
        if attentions and (t.attentions is None or s.attentions is None):
            raise ValueError("the attention loss needs attention probabilities: load both models with "
                             "attn_implementation='eager' (use_eager_attention)")
        select = (labels != IGNORE_INDEX) if c.restrict_to_masked else real
        out = {"ce": soft_target_cross_entropy(s.logits, t.logits, c.temperature, select),
               "mlm": F.cross_entropy(s.logits.reshape(-1, s.logits.size(-1)).float(), labels.reshape(-1),
                                      ignore_index=IGNORE_INDEX),
               "cos": cosine_loss(s.hidden_states[-1], t.hidden_states[-1], real)}
        mapping = layer_map(len(s.hidden_states) - 1, len(t.hidden_states) - 1) if c.alpha_hidden or attentions else None
        if c.alpha_hidden > 0:
            out["hidden"] = hidden_mse(s.hidden_states, t.hidden_states, self.projection, mapping, real)
        if attentions:
            out["attention"] = attention_mse(s.attentions, t.attentions, mapping, batch["attention_mask"])
        return out

    def loss(self, student, batch: Mapping[str, torch.Tensor]) -> ObjectiveLoss:
        c = self.config
        terms = self.losses(student, batch)
        weights = {"ce": c.alpha_ce, "mlm": c.alpha_mlm, "cos": c.alpha_cos, "hidden": c.alpha_hidden,
                   "attention": c.alpha_attention}
        total = sum(weights[k] * v for k, v in terms.items())
        n_targets = int((batch["labels"] != IGNORE_INDEX).sum())
        return ObjectiveLoss(total, {k: float(v.detach()) for k, v in terms.items()}, n_targets,
                             int(batch["attention_mask"].sum()))


# --------------------------------------------------------------------------- the minimal loop


def read_segments(paths: Iterable[str | os.PathLike], tokenizer, *, max_tokens: int) -> list[dict]:
    """One example per non-empty line (whitespace words, WordPiece pieces), cut to ``max_tokens``."""
    examples = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                words = line.split()
                if not words:
                    continue
                e = encode_words(tokenizer, words)
                ids, word_ids = e.input_ids, e.word_ids
                if len(ids) > max_tokens:
                    ids, word_ids = ids[: max_tokens - 1] + ids[-1:], word_ids[: max_tokens - 1] + word_ids[-1:]
                examples.append({"input_ids": np.asarray(ids, dtype=np.int64), "word_ids": word_ids})
    return examples


def distill(teacher_dir: str | os.PathLike, out_dir: str | os.PathLike, corpus: Sequence[str | os.PathLike], *,
            steps: int = 100, batch_size: int = 16, max_tokens: int = 128, lr: float = 5e-4, seed: int = 0,
            config: DistillationConfig = DistillationConfig(), log=print) -> dict:
    """Distil the teacher folder into a student saved at ``out_dir`` (written atomically); returns the
    last step's losses. A plain loop: Adam, ``steps`` batches cycling over the corpus lines."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    if not (Path(teacher_dir) / "config.json").is_file():
        raise FileNotFoundError(f"{teacher_dir}: no config.json; the teacher must be a transformers model folder")
    tokenizer = AutoTokenizer.from_pretrained(str(teacher_dir))
    teacher = AutoModelForMaskedLM.from_pretrained(str(teacher_dir))
    student = student_from_teacher(teacher, seed=seed)
    objective = DistillationObjective(teacher, MaskingVocab.from_tokenizer(tokenizer), pad_id=tokenizer.pad_token_id,
                                      config=config, student_hidden=student.config.dim)
    examples = read_segments(corpus, tokenizer, max_tokens=min(max_tokens, teacher.config.max_position_embeddings))
    if not examples:
        raise ValueError(f"corpus {', '.join(map(str, corpus))}: no non-empty line to distil on")
    parameters = list(student.parameters()) + [p for m in objective.modules().values() for p in m.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=lr)
    rng = np.random.default_rng(seed)
    student.train()
    done, last = 0, {}
    while done < steps:
        order = [examples[i] for i in rng.permutation(len(examples))]
        for batch in objective.batches(order, batch_size=batch_size, rng=rng):
            optimizer.zero_grad()
            out = objective.loss(student, batch)
            if not math.isfinite(float(out.loss.detach())):
                raise FloatingPointError(f"step {done + 1}: the distillation loss is not finite ({out.parts})")
            out.loss.backward()
            optimizer.step()
            done += 1
            last = {"step": done, "loss": float(out.loss.detach()), **out.parts}
            if done == 1 or done % 10 == 0 or done == steps:
                log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in last.items()))
            if done == steps:
                break
    with atomic_directory(out_dir) as tmp:
        student.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return last
