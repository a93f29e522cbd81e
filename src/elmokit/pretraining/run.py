"""``elmokit pretrain``: a transformer objective trained on the shared loop, into a run folder.

A run folder holds (the same record as ``elmokit train``'s, see ``training/trainer.py``)

    command.txt       every command that ran in this folder (one line each, with the time)
    training.json     the resolved PretrainConfig, the objective, the model class and sizes, the corpus
                      (files, bytes), the tokenizer's sha256, the world size, versions, and once measured
                      ``flops``: the FLOPs of the first step's forward + backward (torch.utils.flop_counter)
    config.json       the transformers model config
    tokenizer/        the subword tokenizer trained on the corpus (or copied from --tokenizer)
    metrics.jsonl     one JSON line per logged step: loss and its parts, grad norm, lr, tokens seen, tokens/s,
                      ``cpu_s`` (the CPU-seconds of the training steps so far, below)
    checkpoints/      step_XXXXXXXX/ (``training/checkpoint.py``: atomic, SHA256SUMS, damaged ones set aside)
    model/            at the end: a standard HF checkpoint folder (config.json, model.safetensors, the
                      tokenizer files) and README.md (the model card); ``Embedder.load(DIR)`` and
                      ``--model DIR`` read it as a ``{"kind": "transformer"}`` representation

Optimisation (BERT's recipe, Devlin et al. 2019 §A.2): AdamW (decoupled weight decay 0.01, not on biases and
LayerNorm weights, i.e. on parameters of 2 or more dimensions), gradient-norm clipping at 1.0, the learning
rate rising linearly over ``warmup_steps`` (default 1% of ``max_steps``: BERT's 10k of 1M) and falling
linearly to 0 at the run's first ``max_steps`` (``decay_steps``; with ``--epochs`` or ``--max-seconds``
only it stays constant after the warmup).

Compute budget (``max_seconds``). The run counts the CPU-seconds of its training steps (process CPU time,
``time.process_time``, spent building the step's masked batch, forward, backward and the AdamW update, the
first step's FLOP count included; not reading or tokenising the corpus, nor writing checkpoints), summed
over resumes and saved in each checkpoint. With ``max_seconds`` the run ends at the first step boundary
at or after that many CPU-seconds (on several ranks: as soon as any rank is there, so all stop together),
logs and checkpoints that step, exports the model, and records ``budget`` in training.json. CPU time,
not wall time, so a run sharing its cores with other work gets the same compute; with one torch thread
it is the one core's seconds. Where the stop falls depends on the machine's speed; what each step computes
does not: a budget-stopped run resumed with a larger (or no) budget continues exactly.

Exactness. A step is a function of the checkpoint: weights of the model and of every module
``objective.modules()`` returns, AdamW's moments and step counts, the schedule's step, the example
stream's position (``pretraining/corpus.py``), the masking generator's state (numpy ``bit_generator.state``)
and each rank's torch RNG (dropout). So a run killed (even with -9) and resumed with ``--resume`` ends with
bit-identical weights and metrics to an uninterrupted one on the same machine and thread count. A
parameter that gets no gradient in a step gets a zero gradient (so AdamW treats every parameter alike on
every rank, and each has optimiser state to checkpoint).

Data parallelism (``torchrun``): every rank builds the same global batch (same examples, same masks) and
trains on its rows ``[rank::world_size]``; each rank's loss is weighted by its share of the global
prediction targets and the gradients are averaged over the ranks (one all-reduce of the flattened
gradients per step: the objectives call into the model's submodules, which DistributedDataParallel's
forward hooks would not see). The masked-LM loss so equals one process's on the whole batch; NSP's per-pair
mean is weighted by the MLM targets, so BERT's total is close to, not equal to, one process's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from elmokit.configs import config_from_dict
from elmokit.io import atomic_path
from elmokit.pretraining.corpus import ExampleStream, read_documents
from elmokit.pretraining.fused import fuse_activations
from elmokit.pretraining.models import PRESETS, build_model, non_embedding_parameters, preset, special_ids
from elmokit.pretraining.objectives import OBJECTIVES
from elmokit.text.corpus import expand_patterns
from elmokit.training.checkpoint import file_sha256, latest_checkpoint, latest_good_checkpoint, read_checkpoint, write_checkpoint
from elmokit.training.data import Position
from elmokit.training.distributed import DistributedContext
from elmokit.training.loop import (
    MetricsLog,
    RunError,
    StepLoop,
    StepOutcome,
    gather_rng_states,
    last_logged_loss,
    read_commands,
    record_command,
    restore_rng_states,
    truncate_metrics,
)

logger = logging.getLogger(__name__)

RUN_KIND = "pretrain"
# Fields that may differ when a run is resumed (they do not change what a step computes).
RESUMABLE_CHANGES = frozenset({"max_steps", "epochs", "max_seconds", "checkpoint_every", "keep_checkpoints",
                               "log_every", "skip_nonfinite_steps"})
TOKENIZER_TEMPLATES = {"wordpiece": None, "roberta": "roberta", "gpt2": "gpt2"}


@dataclass(frozen=True, kw_only=True)
class PretrainConfig:
    """How to pretrain. Saved in ``training.json`` (with ``format_version``). Batches are global."""

    FORMAT_VERSION: ClassVar[int] = 1

    objective: str
    preset: str = "tiny"
    sbo: bool = False  # SpanBERT: add the span boundary objective
    # ERNIE (knowledge.ernie_from_options): language of the units, stages run, batches per stage, entity source
    ernie_language: str = "en"  # "en": words; "zh": characters, jieba words, cached entities (knowledge_zh)
    ernie_stages: str = "basic,phrase,entity"
    ernie_stage_batches: int | None = None  # None: thirds of max_steps (3 x 1000 batches without it)
    ernie_entities: str | None = None  # en: a NER tagger folder; zh: an entity cache (knowledge_zh.tag_entity_cache)
    dropout: float | None = None  # None: the preset's (0.1)
    max_tokens: int | None = None  # the longest example in subword tokens (None: the preset's positions)
    # tokenizer (trained on the corpus unless tokenizer_dir is given)
    tokenizer_dir: str | None = None
    vocab_size: int = 8000
    tokenizer_lines: int = 1_000_000  # train the tokenizer on the first N lines of the corpus
    # optimisation
    batch_size: int = 32
    lr: float = 5e-4
    beta2: float = 0.999  # BERT's; RoBERTa used 0.98
    eps: float = 1e-6
    weight_decay: float = 0.01
    warmup_steps: int | None = None  # None: 1% of max_steps (BERT: 10k of 1M), at least 1
    decay_steps: int | None = None  # None: max_steps (linear decay to 0 there); constant with epochs only
    clip_norm: float = 1.0
    # run
    seed: int = 0
    max_steps: int | None = None
    epochs: int | None = None
    max_seconds: float | None = None  # CPU-seconds of training steps (module docstring: compute budget)
    checkpoint_every: int = 1000
    keep_checkpoints: int = 2
    log_every: int = 10
    skip_nonfinite_steps: int = 0

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; known: {', '.join(OBJECTIVES)}")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; known: {', '.join(PRESETS)}")
        if self.max_steps is None and self.epochs is None and self.max_seconds is None:
            raise ValueError("give max_steps, epochs or max_seconds (how long to train)")
        if self.max_seconds is not None and not (isinstance(self.max_seconds, (int, float))
                                                 and math.isfinite(self.max_seconds) and self.max_seconds > 0):
            raise ValueError(f"max_seconds must be a finite number > 0, got {self.max_seconds!r}")
        if self.sbo and self.objective != "spanbert":
            raise ValueError("--sbo (the span boundary objective) goes with --objective spanbert")
        ernie_set = [name for name in ("ernie_language", "ernie_stages", "ernie_stage_batches", "ernie_entities")
                     if getattr(self, name) != type(self).__dataclass_fields__[name].default]
        if ernie_set and self.objective != "ernie":
            raise ValueError(f"{', '.join(ernie_set)} go with --objective ernie")
        if self.ernie_language not in ("en", "zh"):
            raise ValueError(f"ernie_language must be 'en' or 'zh', got {self.ernie_language!r}")
        stages = [s.strip() for s in self.ernie_stages.split(",") if s.strip()]
        order = ("basic", "phrase", "entity")
        if not stages or any(s not in order for s in stages) or stages != sorted(set(stages), key=order.index):
            raise ValueError(f"ernie_stages {self.ernie_stages!r}: give some of basic,phrase,entity, each once, in that order")
        for name in ("lr", "eps", "clip_norm"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if not 0 <= self.beta2 < 1 or not 0 <= self.weight_decay or (self.dropout is not None and not 0 <= self.dropout < 1):
            raise ValueError("beta2 and dropout must be in [0, 1), weight_decay >= 0")
        for name in ("max_steps", "epochs", "max_tokens", "warmup_steps", "decay_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        for name in ("vocab_size", "tokenizer_lines", "batch_size", "checkpoint_every", "keep_checkpoints", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.seed < 0 or self.skip_nonfinite_steps < 0:
            raise ValueError("seed and skip_nonfinite_steps must be at least 0")
        positions = PRESETS[self.preset].max_positions
        if self.max_tokens is not None and self.max_tokens > positions:
            raise ValueError(f"max_tokens {self.max_tokens} is more than the {positions} positions of preset {self.preset!r}")
        if self.max_steps is not None:  # resolve the schedule once, so a resumed run keeps it
            if self.decay_steps is None:
                object.__setattr__(self, "decay_steps", self.max_steps)
            if self.warmup_steps is None:
                object.__setattr__(self, "warmup_steps", max(1, round(0.01 * self.max_steps)))
        if self.warmup_steps is None:
            object.__setattr__(self, "warmup_steps", 1)

    @property
    def example_tokens(self) -> int:
        return self.max_tokens or PRESETS[self.preset].max_positions

    def replace(self, **changes: Any) -> PretrainConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {"format_version": self.FORMAT_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PretrainConfig:
        return config_from_dict(cls, data, "pretraining config")


def learning_rate(config: PretrainConfig, step: int) -> float:
    """The learning rate of 1-based ``step``: linear warmup to ``lr`` over ``warmup_steps``, then linear
    decay reaching 0 after ``decay_steps`` (constant without ``decay_steps``)."""
    warmup = config.warmup_steps
    if step <= warmup:
        return config.lr * step / warmup
    if config.decay_steps is None:
        return config.lr
    return config.lr * max(0.0, (config.decay_steps - step + 1) / max(1, config.decay_steps - warmup + 1))


@dataclass
class PretrainResult:
    step: int
    tokens: int
    loss: float | None
    run_dir: Path
    model_dir: Path | None
    elapsed_s: float
    history: list[dict]


def read_pretrain_run(run_dir: Path) -> tuple[PretrainConfig, dict]:
    """(config, the whole training.json) of an existing pretraining run folder."""
    try:
        record = json.loads((run_dir / "training.json").read_text(encoding="utf-8"))
        if record.get("kind") != RUN_KIND:
            raise ValueError("training.json is not a pretraining run's (an `elmokit train` folder?)")
        return PretrainConfig.from_dict(record["pretraining"]), record
    except (OSError, KeyError, json.JSONDecodeError, ValueError, TypeError) as error:
        raise RunError(f"{run_dir}: not a readable elmokit pretraining run folder ({error})") from None


def pretrain(
    run_dir: str | os.PathLike,
    *,
    corpus: str | list[str],
    config: PretrainConfig,
    resume: bool = False,
    command: str | None = None,
    device: str | None = None,
    progress: bool = True,
    context: DistributedContext | None = None,
    init_method: str | None = None,
    dist_timeout_s: float = 300.0,
) -> PretrainResult:
    """Pretrain (or resume) ``config.objective`` on ``corpus`` into ``run_dir``. See the module docstring."""
    run_dir = Path(run_dir)
    corpus = [corpus] if isinstance(corpus, (str, os.PathLike)) else [os.fspath(c) for c in corpus]
    context = context or DistributedContext.from_environment()
    torch_device = context.device(device)
    context.init_process_group(torch_device, init_method=init_method, timeout_s=dist_timeout_s)
    try:
        run = _PretrainRun(run_dir, corpus, config, resume, command, torch_device, progress, context)
        if resume:
            run.resume()
        run.loop()
        run.save_final()
        return run.export()
    finally:
        context.destroy()


def _tokenizer_lines(files: list[Path], limit: int):
    n = 0
    for path in files:
        for document in read_documents(path):
            for sentence in document:
                yield " ".join(sentence)
                n += 1
                if n >= limit:
                    return


def _folder_sha256(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        digest.update(path.name.encode() + b"\0" + file_sha256(path).encode())
    return digest.hexdigest()


class _PretrainRun:
    """One call of ``pretrain``: set up (run folder, tokenizer, model, objective, optimizer), resume, loop,
    save, export."""

    def __init__(self, run_dir: Path, corpus: list[str], config: PretrainConfig, resume: bool, command: str | None,
                 device: torch.device, progress: bool, context: DistributedContext) -> None:
        self.run_dir, self.config, self.device, self.progress, self.context = run_dir, config, device, progress, context
        self.checkpoints = run_dir / "checkpoints"
        self.spec = OBJECTIVES[config.objective]
        files = expand_patterns(corpus)  # CorpusError naming the pattern
        exists = (run_dir / "training.json").exists()
        context.barrier()  # every rank has looked before the main rank writes
        if exists and not resume:
            raise RunError(f"{run_dir}: already holds a run; pass --resume to continue it, or choose another --out")
        if resume and not exists:
            raise RunError(f"{run_dir}: no such run folder to resume (no training.json); start it without --resume")
        if exists:
            self._check_resume_compatible(corpus)
        tokenizer_dir = run_dir / "tokenizer"
        if context.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            if not exists:
                self._make_tokenizer(files, tokenizer_dir)
        context.barrier()
        from elmokit.pretraining.tokenizers import load_tokenizer

        self.tokenizer = load_tokenizer(tokenizer_dir)
        self.stream = ExampleStream(corpus, tokenizer=self.tokenizer, reader=self.spec.examples,
                                    max_tokens=config.example_tokens, seed=config.seed, rows=config.batch_size)
        self._build(config)
        command = command or " ".join(shlex.quote(a) for a in sys.argv)
        if context.is_main:
            record_command(run_dir, command, context.world_size)
            if exists:
                self.record = json.loads((run_dir / "training.json").read_text(encoding="utf-8"))
            else:
                self.record = self._record(tokenizer_dir)
                self._write_record()
                with atomic_path(run_dir / "config.json") as tmp:
                    Path(tmp).write_text(self.model.config.to_json_string(), encoding="utf-8")
        context.barrier()
        self.need_flops = not self._record_has_flops()  # decided once, on every rank alike
        self.step, self.tokens, self.elapsed_before, self.position, self.skipped = 0, 0, 0.0, Position(), 0
        self.cpu_s = 0.0  # CPU-seconds of the training steps, over resumes (module docstring: compute budget)
        self.mask_rng = np.random.default_rng([config.seed, 0x3A5C])
        self.metrics = MetricsLog(run_dir / "metrics.jsonl", context.is_main)
        self.last_saved = 0

    # ---- setup

    def _check_resume_compatible(self, corpus: list[str]) -> None:
        saved, record = read_pretrain_run(self.run_dir)
        problems = [f"{name}: saved {value!r}, requested {getattr(self.config, name)!r}"
                    for name, value in vars(saved).items()
                    if name not in RESUMABLE_CHANGES and getattr(self.config, name) != value]
        if record.get("corpus", {}).get("patterns") != corpus:
            problems.append(f"corpus: saved {record.get('corpus', {}).get('patterns')}, requested {corpus}")
        if problems:
            raise RunError(f"{self.run_dir}: --resume asks for a different run: " + "; ".join(problems)
                           + ". Fix: resume with the same settings (only " + ", ".join(sorted(RESUMABLE_CHANGES))
                           + " may change), or pretrain into a new --out folder.")

    def _make_tokenizer(self, files: list[Path], target: Path) -> None:
        """The run's tokenizer folder: a copy of ``tokenizer_dir`` or one trained on the corpus (written aside, renamed)."""
        from elmokit.pretraining.tokenizers import train_byte_bpe, train_wordpiece

        config, kind = self.config, self.spec.tokenizer
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)  # from a start killed before training.json was written
        try:
            if config.tokenizer_dir:
                source = Path(config.tokenizer_dir)
                if not (source / "tokenizer.json").exists():
                    raise RunError(f"--tokenizer {source}: no tokenizer.json there; give a folder saved by "
                                   "transformers' save_pretrained (or leave --tokenizer out to train one)")
                shutil.copytree(source, tmp)
            else:
                lines = _tokenizer_lines(files, config.tokenizer_lines)
                positions = config.example_tokens
                if kind == "wordpiece":
                    train_wordpiece(lines, tmp, vocab_size=config.vocab_size, model_max_length=positions)
                else:
                    train_byte_bpe(lines, tmp, vocab_size=config.vocab_size, template=TOKENIZER_TEMPLATES[kind],
                                   model_max_length=positions)
            os.rename(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _build(self, config: PretrainConfig) -> None:
        """Model (seeded, identical on every rank), the objective's modules (seeded), AdamW, per-rank dropout RNG."""
        size = preset(config.preset, **({"dropout": config.dropout} if config.dropout is not None else {}))
        self.model = build_model(self.spec.family, size, vocab_size=len(self.tokenizer), seed=config.seed,
                                 **special_ids(self.tokenizer))
        fuse_activations(self.model)  # GPT-2's gelu_new as one kernel (fused.py); the saved config is unchanged
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed + 1)
            # ERNIE's three stages are thirds of the run's first max_steps (decay_steps: resolved once, so a
            # run resumed with another max_steps keeps its stages); with a time budget alone, 3 x 1000 batches
            self.objective = self.spec.build(self.tokenizer, self.model, {
                "sbo": config.sbo, "max_steps": config.decay_steps, "ernie_language": config.ernie_language,
                "ernie_stages": tuple(s.strip() for s in config.ernie_stages.split(",") if s.strip()),
                "ernie_stage_batches": config.ernie_stage_batches, "ernie_entities": config.ernie_entities,
                "max_tokens": config.example_tokens})
        self.modules = dict(self.objective.modules())
        self.model.to(self.device)
        for module in self.modules.values():
            module.to(self.device)
        named: list[tuple[str, torch.nn.Parameter]] = []
        seen: set[int] = set()
        for prefix, module in [("model", self.model), *self.modules.items()]:
            for name, parameter in module.named_parameters():
                if id(parameter) not in seen:
                    seen.add(id(parameter))
                    named.append((f"{prefix}.{name}", parameter))
        decay = [(n, p) for n, p in named if p.ndim >= 2]
        no_decay = [(n, p) for n, p in named if p.ndim < 2]
        self.names = [n for n, _ in decay + no_decay]  # the optimizer's parameter order
        self.parameters = [p for _, p in decay + no_decay]
        self.optimizer = torch.optim.AdamW(
            [{"params": [p for _, p in decay], "weight_decay": config.weight_decay},
             {"params": [p for _, p in no_decay], "weight_decay": 0.0}],
            lr=config.lr, betas=(0.9, config.beta2), eps=config.eps)
        torch.manual_seed(config.seed * 1_000_003 + self.context.rank)

    def _record(self, tokenizer_dir: Path) -> dict:
        import transformers

        return {
            "format_version": 1, "kind": RUN_KIND, "pretraining": self.config.to_dict(),
            "objective": {"name": self.spec.name, "family": self.spec.family, "examples": self.spec.examples,
                          "summary": self.spec.summary},
            "model": {"class": type(self.model).__name__, "parameters": sum(p.numel() for p in self.model.parameters()),
                      "non_embedding_parameters": non_embedding_parameters(self.model),
                      "module_parameters": {k: sum(p.numel() for p in m.parameters()) for k, m in self.modules.items()}},
            "corpus": self.stream.describe(),
            "tokenizer": {"kind": self.spec.tokenizer, "vocab_size": len(self.tokenizer),
                          "source": self.config.tokenizer_dir or "trained on the corpus",
                          "sha256": _folder_sha256(tokenizer_dir)},
            "world_size": self.context.world_size, "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(),
        }

    def _write_record(self) -> None:
        with atomic_path(self.run_dir / "training.json") as tmp:
            Path(tmp).write_text(json.dumps(self.record, indent=2) + "\n", encoding="utf-8")

    # ---- resume

    def resume(self) -> None:
        context = self.context
        ckpt = latest_good_checkpoint(self.checkpoints, set_aside_bad=context.is_main)
        context.barrier()  # the main rank has set the bad ones aside
        if ckpt is None:
            logger.info("%s: no checkpoint yet; starting from step 0", self.run_dir)
            return
        weights, state = read_checkpoint(ckpt, self.optimizer, self.names)
        for prefix, module in [("model", self.model), *self.modules.items()]:
            part = {k[len(prefix) + 1:]: v.to(self.device) for k, v in weights.items() if k.startswith(prefix + ".")}
            module.load_state_dict(part)
        self.step, self.tokens, self.elapsed_before = state["step"], state["tokens"], state["elapsed_s"]
        self.position = Position.from_dict(state["position"])
        self.mask_rng.bit_generator.state = state["masking_rng"]
        self.skipped = state.get("skipped_nonfinite", 0)
        self.cpu_s = float(state.get("cpu_s", 0.0))
        if "objective_state" in state:  # e.g. ERNIE's stage counter
            self.objective.load_state_dict(state["objective_state"])
        if hasattr(self.objective, "load_tensor_state"):  # e.g. XLNet's memory, this rank's
            self._restore_objective_tensors(weights, state)
        self.last_saved = self.step
        restore_rng_states(state, context, self.device)
        logger.info("resuming from %s (step %d, %d tokens)", ckpt, self.step, self.tokens)

    # ---- the loop

    def _global_batches(self):
        """``((examples, position after them), epoch)`` of ``batch_size`` examples, never spanning two epochs;
        a batch with fewer examples than ranks is passed over."""
        iterator = self.stream(self.position)
        pending = None
        while True:
            examples, epoch, end = [], None, self.position
            while len(examples) < self.config.batch_size:
                item = pending if pending is not None else next(iterator)
                pending = None
                example, after = item
                if epoch is None:
                    epoch = after.epoch
                if after.epoch != epoch:
                    pending = item
                    break
                examples.append(example)
                end = after
            if len(examples) < self.context.world_size:
                logger.warning("skipping a batch of %d examples: fewer than the %d ranks", len(examples),
                               self.context.world_size)
                self.position = end
                continue
            yield (examples, end), epoch

    def loop(self) -> None:
        context, config = self.context, self.config
        if context.is_main:
            truncate_metrics(self.metrics.path, self.step)
        self.model.train()
        for module in self.modules.values():
            module.train()
        self.steps = StepLoop(
            batches=self._global_batches(), step_fn=self._step, save=self.save, metrics=self.metrics,
            checkpoints=self.checkpoints, max_steps=config.max_steps, epochs=config.epochs, log_every=config.log_every,
            checkpoint_every=config.checkpoint_every, skip_nonfinite_steps=config.skip_nonfinite_steps,
            fix=f"lower --lr (now {config.lr})", progress=self.progress, is_main=context.is_main,
            elapsed_before=self.elapsed_before, step=self.step, tokens=self.tokens, skipped=self.skipped,
            last_loss=last_logged_loss(self.metrics.path) if context.is_main else None,
            on_step=lambda outcome: {"lr": learning_rate(config, self.steps.step), "cpu_s": round(self.cpu_s, 6)},
            should_stop=self._over_budget if config.max_seconds is not None else None,
        )
        self.steps.run()
        self.step, self.tokens, self.skipped = self.steps.step, self.steps.tokens, self.steps.skipped
        if context.is_main and config.max_seconds is None and "budget" in self.record:
            del self.record["budget"]  # resumed without a budget: the old stop no longer describes the run
            self._write_record()
        if config.max_seconds is not None and context.is_main:
            self.record["budget"] = {"max_seconds": config.max_seconds, "cpu_s": round(self.cpu_s, 6),
                                     "stopped_by_budget": self.steps.stopped, "step": self.step, "tokens": self.tokens,
                                     "threads": torch.get_num_threads(), "clock": "time.process_time of the steps"}
            self._write_record()

    def _over_budget(self) -> bool:
        """Whether the CPU-seconds of the steps have reached ``max_seconds`` (on any rank: all stop together)."""
        over = self.cpu_s >= self.config.max_seconds
        if self.context.enabled:
            return self.context.all_sum([1.0 if over else 0.0], self.device)[0] > 0
        return over

    def _step(self, item, step: int) -> StepOutcome:
        started = time.process_time()
        try:
            return self._optimiser_step(item, step)
        finally:
            self.cpu_s += time.process_time() - started

    def _optimiser_step(self, item, step: int) -> StepOutcome:
        examples, end = item
        context, device = self.context, self.device
        batch = next(self.objective.batches(examples, batch_size=len(examples), rng=self.mask_rng))  # masks drawn here
        self.position = end
        tokens = int(batch["attention_mask"].sum())
        # a rank's rows; a 0-dim entry (ERNIE's stage) is the whole batch's and goes to every rank as it is
        part = {k: (v[context.rank::context.world_size] if v.ndim else v).to(device) for k, v in batch.items()}
        if self.need_flops:
            self.need_flops = False
            self._count_flops(part, tokens)
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(self.config, step)
        self.optimizer.zero_grad(set_to_none=True)
        out = self.objective.loss(self.model, part)
        n_local = float(out.n_targets)
        if context.enabled:  # weight each rank by its share of the targets (module docstring)
            sums = context.all_sum([n_local, float(out.loss.detach()) * n_local,
                                    *(value * n_local for value in out.parts.values())], device)
            n_global = sums[0]
            weight = n_local * context.world_size / n_global if n_global > 0 else 1.0
            (out.loss * weight).backward()
            loss = sums[1] / n_global if n_global > 0 else float("nan")
            parts = {k: v / n_global if n_global > 0 else float("nan") for k, v in zip(out.parts, sums[2:])}
        else:
            out.loss.backward()
            loss, parts = float(out.loss.detach()), dict(out.parts)
        for parameter in self.parameters:
            if parameter.grad is None:
                parameter.grad = torch.zeros_like(parameter)
        if context.enabled:
            flat = torch.cat([p.grad.reshape(-1) for p in self.parameters])
            torch.distributed.all_reduce(flat)
            flat /= context.world_size
            offset = 0
            for parameter in self.parameters:
                n = parameter.numel()
                parameter.grad.copy_(flat[offset:offset + n].view_as(parameter))
                offset += n
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, self.config.clip_norm))
        targets = int(n_global) if context.enabled else int(out.n_targets)
        outcome = StepOutcome(loss, grad_norm, tokens, parts, {"targets": targets})
        if outcome.finite:
            self.optimizer.step()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        return outcome

    def _record_has_flops(self) -> bool:
        path = self.run_dir / "training.json"
        return "flops" in json.loads(path.read_text(encoding="utf-8")) if path.exists() else False

    def _count_flops(self, part: dict, tokens: int) -> None:
        """FLOPs of one forward + backward on the first global batch (torch.utils.flop_counter), into
        training.json. Under a forked RNG and with the gradients dropped after: the run is unchanged."""
        from torch.utils.flop_counter import FlopCounterMode

        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            counter = FlopCounterMode(display=False)
            with counter:
                self.objective.loss(self.model, part).loss.backward()
        self.optimizer.zero_grad(set_to_none=True)
        total = self.context.all_sum([float(counter.get_total_flops())], self.device)[0]
        if self.context.is_main:
            self.record["flops"] = {
                "forward_backward_first_step": int(total), "tokens_first_step": tokens,
                "per_token": total / max(tokens, 1),
                "note": "torch.utils.flop_counter on the first global batch (matmuls, attention); the optimiser "
                        "step is not counted; later batches differ with their lengths",
            }
            self._write_record()
        self.context.barrier()

    # ---- save and export

    def _weights(self) -> dict[str, torch.Tensor]:
        out = {}
        for prefix, module in [("model", self.model), *self.modules.items()]:
            for name, value in module.state_dict().items():
                out[f"{prefix}.{name}"] = value.detach().clone()  # tied weights apart: safetensors shares nothing
        return out

    def _objective_tensors(self) -> dict[str, torch.Tensor]:
        """Every rank's tensor state of the objective (XLNet's memory) as ``objective.rank{r}.{name}``; every
        rank must call it (it gathers). Ranks hold the same names and shapes: they read one segment at a time."""
        if not hasattr(self.objective, "tensor_state"):
            return {}
        out = {}
        for name, tensor in sorted(self.objective.tensor_state().items()):
            flat = tensor.detach().contiguous().view(torch.uint8).flatten()  # all_gather_bytes carries bytes
            for rank, gathered in enumerate(self.context.all_gather_bytes(flat, self.device)):
                out[f"objective.rank{rank}.{name}"] = gathered.view(tensor.dtype).reshape(tensor.shape).clone()
        return out

    def _restore_objective_tensors(self, weights: dict, state: dict) -> None:
        prefix = f"objective.rank{self.context.rank}."
        mine = {k[len(prefix):]: v.to(self.device) for k, v in weights.items() if k.startswith(prefix)}
        if state["world_size"] != self.context.world_size:
            logger.warning("resuming %d ranks from a %d-rank checkpoint: the objective's memory starts afresh",
                           self.context.world_size, state["world_size"])
            mine = {}
        self.objective.load_tensor_state(mine)

    def save(self) -> None:
        context = self.context
        rng_states = gather_rng_states(context, self.device)
        objective_tensors = self._objective_tensors()
        steps = self.steps
        if context.is_main:
            write_checkpoint(
                self.checkpoints, steps.step, model_state={**self._weights(), **objective_tensors},
                optimizer=self.optimizer,
                param_names=self.names,
                state={"step": steps.step, "tokens": steps.tokens, "position": self.position.to_dict(),
                       "masking_rng": self.mask_rng.bit_generator.state, "elapsed_s": steps.elapsed(),
                       "world_size": context.world_size, **rng_states, "skipped_nonfinite": steps.skipped,
                       "threads": torch.get_num_threads(), "cpu_s": self.cpu_s,
                       **({"objective_state": self.objective.state_dict()} if hasattr(self.objective, "state_dict") else {}),
                       "schedule": {"lr": learning_rate(self.config, steps.step), "warmup_steps": self.config.warmup_steps,
                                    "decay_steps": self.config.decay_steps}},
                keep=self.config.keep_checkpoints,
            )
        context.barrier()
        self.last_saved = steps.step

    def save_final(self) -> None:
        if self.step != self.last_saved or latest_checkpoint(self.checkpoints) is None:
            self.save()

    def export(self) -> PretrainResult:
        """``model/``: the HF checkpoint folder + tokenizer + model card (main rank), written aside and renamed."""
        model_dir = None
        elapsed = self.steps.elapsed()
        if self.context.is_main:
            self.model.eval()
            target = self.run_dir / "model"
            tmp = self.run_dir / f".model.tmp-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            try:
                self.model.save_pretrained(str(tmp))
                self.tokenizer.save_pretrained(str(tmp))
                (tmp / "README.md").write_text(self._card(elapsed), encoding="utf-8")
                if target.exists():
                    shutil.rmtree(target)
                os.rename(tmp, target)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            model_dir = target
        self.context.barrier()
        return PretrainResult(self.step, self.tokens, self.steps.last_loss, self.run_dir, model_dir, elapsed,
                              self.metrics.history)

    def _card(self, elapsed_s: float) -> str:
        config, record = self.config, self.record
        files = record["corpus"]["files"]
        flops = record.get("flops", {})
        loss = self.steps.last_loss
        lines = [
            f"# elmokit {config.objective} (trained with `elmokit pretrain`)",
            "",
            f"- objective: {config.objective}" + (" + span boundary objective" if config.sbo else "")
            + f": {self.spec.summary}",
            f"- model: `{record['model']['class']}` (transformers {record['transformers']}), preset {config.preset} "
            f"({PRESETS[config.preset]}), {record['model']['parameters']:,} parameters, "
            f"{record['model']['non_embedding_parameters']:,} outside the embeddings",
            f"- tokenizer: {record['tokenizer']['kind']}, {record['tokenizer']['vocab_size']:,} entries "
            f"({record['tokenizer']['source']})",
            f"- corpus: {', '.join(record['corpus']['patterns'])} ({len(files)} file(s), "
            f"{sum(f['bytes'] for f in files):,} bytes); examples: {self.spec.examples}, at most {config.example_tokens} tokens",
            f"- training: {self.step:,} steps of {config.batch_size} examples, {self.tokens:,} tokens seen; AdamW lr {config.lr} "
            f"(warmup {config.warmup_steps}, linear decay over {config.decay_steps}), weight decay {config.weight_decay}, "
            f"clip {config.clip_norm}; seed {config.seed}; {record['world_size']} process(es); "
            f"wall time {elapsed_s / 60:.1f} min, {self.cpu_s:.1f} CPU-seconds of training steps"
            + (f" (budget --max-seconds {config.max_seconds:g})" if config.max_seconds is not None else ""),
            f"- last logged training loss: {loss:.4f}" if loss is not None else "- no logged training loss",
            f"- FLOPs of the first step (forward + backward): {flops['forward_backward_first_step']:,}"
            if flops else "- FLOPs: not measured",
            "- load: `elmokit.Embedder.load(DIR)`, `--model DIR`, or transformers' `AutoModel.from_pretrained(DIR)`",
            "- command(s):",
            *[f"  - `{c}`" for c in read_commands(self.run_dir)],
            "",
        ]
        return "\n".join(lines)
