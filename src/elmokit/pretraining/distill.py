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

``distill`` trains the student on the engine's step loop, into a run folder as ``elmokit pretrain``'s
(``engine/run_folder.py``: command.txt, training.json with the corpus and the teacher fingerprinted by
content, metrics.jsonl, checkpoints/, and at the end model/ with the student, its tokenizer and card):
Adam at ``lr``, the gradient norm clipped at 5 (the reference distiller's ``max_grad_norm``), batches of
``batch_size`` lines in a seeded order per epoch, masks from a generator saved in each checkpoint, so a
run stopped and continued with ``resume`` ends with the weights of an uninterrupted one.

Shape legend: B batch, T tokens, V vocabulary, H hidden (Hs student, Ht teacher), A heads.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from elmokit.configs import SavedConfig
from elmokit.engine.checkpoint import file_sha256, load_module_weights, module_weights, write_checkpoint
from elmokit.engine.distributed import DistributedContext
from elmokit.engine.run_folder import (
    MetricsLog,
    RunFolder,
    corpus_files_record,
    corpus_problems,
    last_logged_loss,
    model_card,
    resumable,
    resume_differences,
    truncate_metrics,
)
from elmokit.engine.steps import RunResult, StepLoop, StepOutcome, planned_batches, update_if_finite
from elmokit.errors import UserError
from elmokit.formats.checks import refuse_non_finite_read
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


# --------------------------------------------------------------------------- the run

RUN_KIND = "distill"


class DistillError(UserError):
    """A teacher or corpus distillation cannot use; the message names it (file and line) and the fix."""


@dataclass(frozen=True, kw_only=True)
class DistillRunConfig(SavedConfig):
    """How to train the student. Saved in ``training.json``; ``resumable()`` fields may change on resume."""

    FORMAT_VERSION: ClassVar[int] = 1
    WHAT = "distillation config"

    batch_size: int = 32
    max_tokens: int = 128  # the longest segment in pieces (and at most the teacher's positions)
    lr: float = 5e-4  # Adam (DistilBERT's)
    clip_norm: float = 5.0  # the reference distiller's max_grad_norm
    seed: int = 0
    max_steps: int = resumable(1000)
    checkpoint_every: int = resumable(1000)
    keep_checkpoints: int = resumable(2)
    log_every: int = resumable(10)
    skip_nonfinite_steps: int = resumable(0)

    def __post_init__(self) -> None:
        self.require(">= 1", "batch_size", "max_tokens", "max_steps", "checkpoint_every", "keep_checkpoints", "log_every")
        self.require(">= 0", "seed", "skip_nonfinite_steps")
        self.require("finite > 0", "lr", "clip_norm")


def check_teacher(teacher_dir: str | os.PathLike) -> Path:
    """The teacher folder, once it is a transformers BERT masked-LM folder; else a one-line DistillError."""
    folder = Path(teacher_dir)
    config_path = folder / "config.json"
    fix = "give a transformers BERT masked-LM folder, e.g. the model/ folder of `elmokit pretrain --objective bert`"
    if not config_path.is_file():
        raise DistillError(f"--teacher {folder}: no config.json there; {fix}")
    try:
        model_type = json.loads(config_path.read_text(encoding="utf-8")).get("model_type")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as error:
        raise DistillError(f"{config_path}: unreadable ({error}); {fix}") from None
    if model_type != "bert":
        raise DistillError(f"--teacher {folder}: a {model_type!r} model; distilling into DistilBERT needs a BERT masked-LM "
                           f"teacher (model_type 'bert'); {fix}")
    return folder


def read_segments(paths: Iterable[str | os.PathLike], tokenizer, *, max_tokens: int) -> list[dict]:
    """One example per non-empty line (whitespace words, WordPiece pieces), cut to ``max_tokens``. A missing
    file or a line that is not UTF-8 is a DistillError naming the file (and the line)."""
    examples = []
    for path in paths:
        try:
            handle = open(path, "rb")
        except OSError as error:
            raise DistillError(f"--corpus {path}: {error.strerror or error}") from None
        with handle:
            for number, raw in enumerate(handle, 1):
                try:
                    words = raw.decode("utf-8").split()
                except UnicodeDecodeError as error:
                    raise DistillError(f"{path}:{number}: not UTF-8 ({error.reason} at byte {error.start} of the line); "
                                       "fix: give UTF-8 text, one segment a line") from None
                if not words:
                    continue
                e = encode_words(tokenizer, words)
                ids, word_ids = e.input_ids, e.word_ids
                if len(ids) > max_tokens:
                    ids, word_ids = ids[: max_tokens - 1] + ids[-1:], word_ids[: max_tokens - 1] + word_ids[-1:]
                examples.append({"input_ids": np.asarray(ids, dtype=np.int64), "word_ids": word_ids})
    return examples


def distill(teacher_dir: str | os.PathLike, out_dir: str | os.PathLike, corpus: Sequence[str | os.PathLike], *,
            config: DistillRunConfig = DistillRunConfig(), losses: DistillationConfig = DistillationConfig(),
            resume: bool = False, command: str | None = None, progress: bool = True,
            folder: RunFolder | None = None) -> RunResult:
    """Distil the teacher folder into a student trained in the run folder ``out_dir`` (module docstring);
    the student ends in ``out_dir/model``. ``folder``: the run folder as the caller opened it."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    out_dir, corpus = Path(out_dir), [os.fspath(c) for c in corpus]
    if folder is None or folder.path != out_dir:
        folder = RunFolder.open(out_dir, kind=RUN_KIND, resume=resume)
    teacher_dir = check_teacher(teacher_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(teacher_dir))
    teacher = AutoModelForMaskedLM.from_pretrained(str(teacher_dir))
    refuse_non_finite_read(teacher.state_dict(), Path(teacher_dir) / "model.safetensors")
    student = student_from_teacher(teacher, seed=config.seed)
    objective = DistillationObjective(teacher, MaskingVocab.from_tokenizer(tokenizer), pad_id=tokenizer.pad_token_id,
                                      config=losses, student_hidden=student.config.dim)
    examples = read_segments(corpus, tokenizer, max_tokens=min(config.max_tokens, teacher.config.max_position_embeddings))
    if not examples:
        raise DistillError(f"corpus {', '.join(corpus)}: no non-empty line to distil on; fix: give text, one segment a line")
    weights = sorted(p for p in teacher_dir.iterdir() if p.suffix in (".safetensors", ".bin"))
    record = {"format_version": 1, "kind": RUN_KIND, "distill": config.to_dict(), "losses": dataclasses.asdict(losses),
              "teacher": {"path": str(teacher_dir.resolve()), "weights_sha256": {p.name: file_sha256(p) for p in weights}},
              "corpus": {"patterns": corpus, "files": corpus_files_record(corpus), "examples": len(examples)},
              "torch": torch.__version__, "threads": torch.get_num_threads()}
    if folder.resuming:
        saved = folder.record
        problems = resume_differences(folder.saved("distill", DistillRunConfig.from_dict), config)
        problems += [f"losses.{k}: saved {v!r}, requested {record['losses'].get(k)!r}"
                     for k, v in saved.get("losses", {}).items() if record["losses"].get(k) != v]
        if saved.get("teacher", {}).get("weights_sha256") != record["teacher"]["weights_sha256"]:
            problems.append(f"the teacher's weights differ from the ones the run read ({saved.get('teacher', {}).get('path')})")
        problems += corpus_problems(saved.get("corpus", {}), corpus, record["corpus"]["files"])
        folder.refuse_if(problems, DistillRunConfig)
        record = {**saved, "distill": config.to_dict()}  # the first record, the resumable fields as now requested
        folder.write_record(record)
    folder.start(command or " ".join(shlex.quote(a) for a in sys.argv), 1, record)

    context, device = DistributedContext(), torch.device("cpu")
    modules = {"student": student, **objective.modules()}
    names = [f"{prefix}.{n}" for prefix, module in modules.items() for n, _ in module.named_parameters()]
    parameters = [p for module in modules.values() for p in module.parameters()]
    optimizer = torch.optim.Adam(parameters, lr=config.lr)
    torch.manual_seed(config.seed * 1_000_003)  # dropout's stream
    mask_rng = np.random.default_rng([config.seed, 0xD157])
    position = {"epoch": 0, "batch": 0}
    metrics = MetricsLog(out_dir / "metrics.jsonl")

    def plan(epoch: int) -> list[list[dict]]:  # the epoch's order, a function of (seed, epoch)
        order = np.random.default_rng([config.seed, epoch]).permutation(len(examples))
        return [[examples[i] for i in order[k : k + config.batch_size]] for k in range(0, len(order), config.batch_size)]

    def step_fn(chunk: list[dict], step: int) -> StepOutcome:
        position["batch"] += 1
        batch = next(objective.batches(chunk, batch_size=len(chunk), rng=mask_rng))  # masks drawn here
        optimizer.zero_grad(set_to_none=True)
        out = objective.loss(student, batch)
        out.loss.backward()
        return update_if_finite(optimizer, parameters, config.clip_norm, float(out.loss.detach()),
                                int(batch["attention_mask"].sum()), dict(out.parts))

    def save() -> None:
        state = {**steps.state(context, device), "position": dict(position), "masking_rng": mask_rng.bit_generator.state}
        write_checkpoint(out_dir / "checkpoints", steps.step, model_state=module_weights(modules), optimizer=optimizer,
                         param_names=names, state=state, keep=config.keep_checkpoints)

    steps = StepLoop(batches=planned_batches(plan, position), step_fn=step_fn, save=save, metrics=metrics,
                     checkpoints=out_dir / "checkpoints", max_steps=config.max_steps, epochs=None, log_every=config.log_every,
                     checkpoint_every=config.checkpoint_every, skip_nonfinite_steps=config.skip_nonfinite_steps,
                     fix=f"lower --lr (now {config.lr})", progress=progress, desc="distilling")
    found = steps.resume(optimizer, names, context, device) if folder.resuming else None
    if found is not None:
        saved_weights, state = found
        load_module_weights(modules, saved_weights)
        position.update(state["position"])
        mask_rng.bit_generator.state = state["masking_rng"]
    truncate_metrics(metrics.path, steps.step)
    steps.last_loss = last_logged_loss(metrics.path)
    student.train()
    steps.run()
    steps.save_final()
    student.eval()
    model_dir = out_dir / "model"
    with atomic_directory(model_dir) as tmp:
        student.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "README.md").write_text(_card(record, config, losses, steps, out_dir), encoding="utf-8")
    return steps.result(out_dir, model_dir)


def _card(record: dict, config: DistillRunConfig, losses: DistillationConfig, steps: StepLoop, run_dir: Path) -> str:
    files = record["corpus"]["files"]
    return model_card("elmokit DistilBERT student (trained with `elmokit distill`)", [
        f"- teacher: {record['teacher']['path']}; the student starts from its layers 0, 2, ... (Sanh et al. 2019)",
        f"- loss: {losses.alpha_ce} x soft cross-entropy at T = {losses.temperature} + {losses.alpha_mlm} x MLM + "
        f"{losses.alpha_cos} x cosine" + (f" + {losses.alpha_hidden} x hidden MSE" if losses.alpha_hidden else "")
        + (f" + {losses.alpha_attention} x attention MSE" if losses.alpha_attention else ""),
        f"- corpus: {', '.join(record['corpus']['patterns'])} ({len(files)} file(s), {sum(f['bytes'] for f in files):,} "
        f"bytes, {record['corpus']['examples']:,} segments of at most {config.max_tokens} pieces)",
        f"- training: {steps.step:,} steps of {config.batch_size} segments, {steps.tokens:,} tokens; Adam lr {config.lr}, "
        f"clip {config.clip_norm}; seed {config.seed}; wall time {steps.elapsed() / 60:.1f} min",
        f"- last logged loss: {steps.last_loss:.4f}" if steps.last_loss is not None else "- no logged loss",
        "- load: `elmokit.Embedder.load(DIR)`, `--model DIR`, or transformers' `AutoModelForMaskedLM.from_pretrained(DIR)`",
    ], run_dir)
