"""``elmokit pretrain``: a transformer objective trained on the shared loop, into a run folder.

The run folder is the engine's (``engine/run_folder.py``); beside its record and metrics it holds
``config.json`` (the transformers config), ``tokenizer/`` (trained on the corpus, or copied from --tokenizer)
and at the end ``model/``, a standard HF checkpoint folder with the tokenizer and README.md (the model card)
that ``Embedder.load(DIR)`` and ``--model DIR`` read as a ``{"kind": "transformer"}`` representation.
``training.json`` also records the objective, the model class and sizes, the tokenizer's sha256 and, once
measured, ``flops`` (the first step's forward + backward, torch.utils.flop_counter); metric lines carry the
loss's parts, ``lr`` and ``cpu_s`` (the CPU-seconds of the training steps so far, below).

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

import hashlib
import logging
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

from elmokit.configs import SavedConfig
from elmokit.engine.checkpoint import file_sha256, load_module_weights, module_weights, write_checkpoint
from elmokit.engine.distributed import DistributedContext
from elmokit.engine.run_folder import (
    MetricsLog,
    RunError,
    RunFolder,
    corpus_differences,
    corpus_files_record,
    last_logged_loss,
    model_card,
    resumable,
    resume_differences,
    truncate_metrics,
)
from elmokit.engine.schedules import warmup_linear_decay
from elmokit.engine.steps import Launch, RunResult, StepLoop, StepOutcome, corpus_list, update_if_finite
from elmokit.io import atomic_directory
from elmokit.pretraining.corpus import ExampleStream, read_documents
from elmokit.pretraining.dialogue import parse_mix, parse_pools
from elmokit.pretraining.fused import fuse_activations, use_onednn_linear
from elmokit.pretraining.models import PRESETS, build_model, non_embedding_parameters, preset, special_ids
from elmokit.pretraining.registry import OBJECTIVES
from elmokit.text.corpus import CorpusError, Position, expand_patterns
from elmokit.text.subword_tokenizers import load_tokenizer, train_byte_bpe, train_wordpiece

logger = logging.getLogger(__name__)

RUN_KIND = "pretrain"
TOKENIZER_TEMPLATES = {"wordpiece": None, "wordpiece-uncased": None, "roberta": "roberta", "gpt2": "gpt2"}


# The fields only some objectives read (objectives -> fields): changed under another objective, an error.
OBJECTIVE_FIELDS = {
    ("ernie-dlm",): ("dlm_mix", "dlm_dialogues", "dlm_text", "dlm_fake_rate"),
    ("ernie", "ernie-dlm"): ("ernie_language", "ernie_stages", "ernie_stage_batches", "ernie_entities"),
    ("ernie2",): ("ernie2_tasks", "ernie2_schedule", "ernie2_task_iterations", "ernie2_reorder_pieces"),
    ("ernie-thu",): ("ernie_thu_wordnet", "ernie_thu_transe", "ernie_thu_mentions", "ernie_thu_k_layers", "ernie_thu_fusion"),
}


@dataclass(frozen=True, kw_only=True)
class PretrainConfig(SavedConfig):
    """How to pretrain. Saved in ``training.json`` (with ``format_version``). Batches are global. Fields
    declared ``resumable()`` may differ when a run is resumed (they do not change what a step computes)."""

    FORMAT_VERSION: ClassVar[int] = 1
    WHAT = "pretraining config"

    objective: str
    preset: str = "tiny"
    sbo: bool = False  # SpanBERT: add the span boundary objective
    # ERNIE (knowledge.ernie_from_options): language of the units, stages run, batches per stage, entity source
    ernie_language: str = "en"  # "en": words; "zh": characters, jieba words, cached entities (knowledge_zh)
    ernie_stages: str = "basic,phrase,entity"
    ernie_stage_batches: int | None = None  # None: thirds of max_steps (3 x 1000 batches without it)
    ernie_entities: str | None = None  # en: a NER tagger folder; zh: an entity cache (knowledge_zh.tag_entity_cache)
    # ERNIE 2.0 (ernie2.ernie2_from_options): tasks in order of introduction, stages or all at once, N per task, k
    ernie2_tasks: str = "km,cap,tdr,reorder,distance"
    ernie2_schedule: str = "continual"  # "multitask": every task from the start (the ablation)
    ernie2_task_iterations: int | None = None  # None: max_steps // number of tasks (1000 without max_steps)
    ernie2_reorder_pieces: int = 3
    # ERNIE's dialogue LM (dialogue.dialogue_from_options): source weights, dialogue files, extra text pools, fakes
    dlm_mix: str = "text=0.7,dialogue=0.3"
    dlm_dialogues: str | None = None  # novels to extract dialogue from (None: the corpus)
    dlm_text: str | None = None  # "NAME=GLOB,...": in-memory text pools dlm_mix may name
    dlm_fake_rate: float = 0.5
    # ERNIE (Tsinghua) (ernie_thu.ernie_thu_from_options): WordNet, its TransE folder, SemCor mentions, K-Encoder
    ernie_thu_wordnet: str | None = None
    ernie_thu_transe: str | None = None
    ernie_thu_mentions: str | None = None
    ernie_thu_k_layers: int | None = None  # None: half the layers
    ernie_thu_fusion: str = "paper"
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
    max_steps: int | None = resumable(None)
    epochs: int | None = resumable(None)
    max_seconds: float | None = resumable(None)  # CPU-seconds of training steps (module docstring: compute budget)
    checkpoint_every: int = resumable(1000)
    keep_checkpoints: int = resumable(2)
    log_every: int = resumable(10)
    skip_nonfinite_steps: int = resumable(0)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; known: {', '.join(OBJECTIVES)}")
        if self.preset not in PRESETS:
            raise ValueError(f"unknown preset {self.preset!r}; known: {', '.join(PRESETS)}")
        if self.max_steps is None and self.epochs is None and self.max_seconds is None:
            raise ValueError("give max_steps, epochs or max_seconds (how long to train)")
        self.require("finite > 0", "max_seconds", "lr", "eps", "clip_norm")
        if self.sbo and self.objective != "spanbert":
            raise ValueError("--sbo (the span boundary objective) goes with --objective spanbert")
        for objectives, names in OBJECTIVE_FIELDS.items():
            given = [name for name in names if getattr(self, name) != type(self).__dataclass_fields__[name].default]
            if given and self.objective not in objectives:
                raise ValueError(f"{', '.join(given)} go with --objective {objectives[0]}")
        if not 0 <= self.dlm_fake_rate <= 1:
            raise ValueError(f"dlm_fake_rate must be in [0, 1], got {self.dlm_fake_rate!r}")
        parse_mix(self.dlm_mix, list(parse_pools(self.dlm_text)))  # a bad mix is refused before anything is written
        tasks2 = [t.strip() for t in self.ernie2_tasks.split(",") if t.strip()]
        known2 = ("km", "cap", "tdr", "reorder", "distance", "discourse")
        if not tasks2 or any(t not in known2 for t in tasks2) or len(set(tasks2)) != len(tasks2):
            raise ValueError(f"ernie2_tasks {self.ernie2_tasks!r}: give some of {','.join(known2)}, each once")
        if self.ernie2_schedule not in ("continual", "multitask") or not 1 <= self.ernie2_reorder_pieces <= 4:
            raise ValueError("ernie2_schedule must be continual or multitask, ernie2_reorder_pieces 1..4")
        if self.ernie2_schedule == "continual" and self.ernie2_task_iterations is not None \
                and self.ernie2_task_iterations < len(tasks2) + 1:
            raise ValueError(f"ernie2_task_iterations {self.ernie2_task_iterations} cannot be spread over {len(tasks2)} "
                             f"stages; give at least {len(tasks2) + 1}")
        if self.objective == "ernie-thu" and not (self.ernie_thu_wordnet and self.ernie_thu_transe):
            raise ValueError("--objective ernie-thu needs --ernie-thu-wordnet (WordNet 3.0's folder or archive) and "
                             "--ernie-thu-transe (a folder of knowledge_graph.train_wordnet_transe)")
        if self.ernie_thu_k_layers is not None and not 1 <= self.ernie_thu_k_layers <= PRESETS[self.preset].layers:
            raise ValueError(f"ernie_thu_k_layers must be 1 to {PRESETS[self.preset].layers} (the layers of preset "
                             f"{self.preset!r}), got {self.ernie_thu_k_layers}")
        if self.ernie_thu_fusion not in ("paper", "residual"):
            raise ValueError(f"ernie_thu_fusion must be 'paper' or 'residual', got {self.ernie_thu_fusion!r}")
        if self.ernie_language not in ("en", "zh"):
            raise ValueError(f"ernie_language must be 'en' or 'zh', got {self.ernie_language!r}")
        stages = [s.strip() for s in self.ernie_stages.split(",") if s.strip()]
        order = ("basic", "phrase", "entity")
        if not stages or any(s not in order for s in stages) or stages != sorted(set(stages), key=order.index):
            raise ValueError(f"ernie_stages {self.ernie_stages!r}: give some of basic,phrase,entity, each once, in that order")
        if not 0 <= self.beta2 < 1 or not 0 <= self.weight_decay or (self.dropout is not None and not 0 <= self.dropout < 1):
            raise ValueError("beta2 and dropout must be in [0, 1), weight_decay >= 0")
        self.require(">= 1", "max_steps", "epochs", "max_tokens", "warmup_steps", "decay_steps", "vocab_size",
                     "tokenizer_lines", "batch_size", "checkpoint_every", "keep_checkpoints", "log_every")
        self.require(">= 0", "seed", "skip_nonfinite_steps")
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


def learning_rate(config: PretrainConfig, step: int) -> float:
    """The learning rate of 1-based ``step``: linear warmup to ``lr`` over ``warmup_steps``, then linear
    decay reaching 0 after ``decay_steps`` (constant without ``decay_steps``)."""
    return warmup_linear_decay(step, config.lr, config.warmup_steps, config.decay_steps)


def open_pretrain_run(run_dir: str | os.PathLike, resume: bool) -> tuple[RunFolder, PretrainConfig | None]:
    """The run folder (opened once; refused when it does not fit) and, when it holds a run, that run's config."""
    folder = RunFolder.open(run_dir, kind=RUN_KIND, resume=resume)
    return folder, (folder.saved("pretraining", PretrainConfig.from_dict) if folder.record is not None else None)


def pretrain(run_dir: str | os.PathLike, *, corpus: str | list[str], config: PretrainConfig, **launch) -> RunResult:
    """Pretrain (or resume) ``config.objective`` on ``corpus`` into ``run_dir``. See the module docstring.
    ``launch``: the keywords of ``elmokit.engine.steps.Launch`` (resume, command, device, progress, context,
    init_method, dist_timeout_s, folder: the run folder as ``open_pretrain_run`` opened it)."""
    run_dir, launch = Path(run_dir), Launch(**launch)
    folder = launch.folder
    if folder is None or folder.path != run_dir:
        folder = RunFolder.open(run_dir, kind=RUN_KIND, resume=launch.resume)
    with launch.started() as (context, device):
        run = _PretrainRun(folder, corpus_list(corpus), config, launch.command, device, launch.progress, context)
        if folder.resuming:
            run.resume()
        run.loop()
        run.steps.save_final()
        return run.export()


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

    def __init__(self, folder: RunFolder, corpus: list[str], config: PretrainConfig, command: str | None,
                 device: torch.device, progress: bool, context: DistributedContext) -> None:
        run_dir = folder.path
        self.folder, self.run_dir, self.config, self.device, self.progress, self.context = (
            folder, run_dir, config, device, progress, context)
        self.checkpoints = run_dir / "checkpoints"
        self.spec = OBJECTIVES[config.objective]
        files = expand_patterns(corpus)  # CorpusError naming the pattern
        if next(_tokenizer_lines(files, 1), None) is None:  # before anything is written
            raise CorpusError(f"corpus {', '.join(corpus)}: no text to pretrain on (every line is blank); fix: give "
                              "text files, one paragraph a line")
        corpus_files = corpus_files_record(files)
        if folder.resuming:
            self._check_resume_compatible(corpus, corpus_files)
        context.barrier()  # every rank has looked before the main rank writes
        tokenizer_dir = run_dir / "tokenizer"
        if context.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            if not folder.resuming:
                self._make_tokenizer(files, tokenizer_dir)
        context.barrier()

        self.tokenizer = load_tokenizer(tokenizer_dir)
        self.stream = ExampleStream(corpus, tokenizer=self.tokenizer, reader=self.spec.examples,
                                    max_tokens=config.example_tokens, seed=config.seed, rows=config.batch_size)
        self._build(config)
        self.record = folder.record if folder.resuming else self._record(tokenizer_dir, corpus_files)
        if context.is_main:
            folder.start(command or " ".join(shlex.quote(a) for a in sys.argv), context.world_size, self.record,
                         {"config.json": self.model.config.to_json_string()})
        context.barrier()
        self.need_flops = "flops" not in self.record  # decided once, on every rank alike
        self.position = Position()
        self.cpu_s = 0.0  # CPU-seconds of the training steps, over resumes (module docstring: compute budget)
        self.mask_rng = np.random.default_rng([config.seed, 0x3A5C])
        self.metrics = MetricsLog(run_dir / "metrics.jsonl", context.is_main)
        self.steps = StepLoop(
            batches=iter(()), step_fn=self._step, save=self.save, metrics=self.metrics,
            checkpoints=self.checkpoints, max_steps=config.max_steps, epochs=config.epochs, log_every=config.log_every,
            checkpoint_every=config.checkpoint_every, skip_nonfinite_steps=config.skip_nonfinite_steps,
            fix=f"lower --lr (now {config.lr})", progress=progress, is_main=context.is_main, desc="pretraining",
            on_step=lambda outcome: {"lr": learning_rate(config, self.steps.step), "cpu_s": round(self.cpu_s, 6)},
            should_stop=self._over_budget if config.max_seconds is not None else None,
        )

    # ---- setup

    def _check_resume_compatible(self, corpus: list[str], corpus_files: list[dict]) -> None:
        folder = self.folder
        record = folder.record
        problems = resume_differences(folder.saved("pretraining", PretrainConfig.from_dict), self.config)
        if record.get("corpus", {}).get("patterns") != corpus:
            problems.append(f"corpus: saved {record.get('corpus', {}).get('patterns')}, requested {corpus}")
        else:
            problems += corpus_differences(record["corpus"].get("files", []), corpus_files)
        folder.refuse_if(problems, PretrainConfig)

    def _make_tokenizer(self, files: list[Path], target: Path) -> None:
        """The run's tokenizer folder: a copy of ``tokenizer_dir`` or one trained on the corpus (written aside, renamed)."""
        config, kind = self.config, self.spec.tokenizer
        if config.tokenizer_dir and not (Path(config.tokenizer_dir) / "tokenizer.json").exists():
            raise RunError(f"--tokenizer {config.tokenizer_dir}: no tokenizer.json there; give a folder saved by "
                           "transformers' save_pretrained (or leave --tokenizer out to train one)")
        with atomic_directory(target) as tmp:  # replaces the tokenizer of an earlier start that failed
            if config.tokenizer_dir:
                for source in Path(config.tokenizer_dir).iterdir():
                    if source.is_file():
                        (tmp / source.name).write_bytes(source.read_bytes())
            else:
                lines = _tokenizer_lines(files, config.tokenizer_lines)
                positions = config.example_tokens
                if kind in ("wordpiece", "wordpiece-uncased"):  # ERNIE 2.0 predicts the case: its input has none
                    train_wordpiece(lines, tmp, vocab_size=config.vocab_size, model_max_length=positions,
                                    lowercase=kind == "wordpiece-uncased")
                else:
                    train_byte_bpe(lines, tmp, vocab_size=config.vocab_size, template=TOKENIZER_TEMPLATES[kind],
                                   model_max_length=positions)

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
                "max_tokens": config.example_tokens, "seed": config.seed, "corpus_files": [str(f) for f in self.stream.files],
                "ernie2_tasks": tuple(t.strip() for t in config.ernie2_tasks.split(",") if t.strip()),
                "ernie2_schedule": config.ernie2_schedule, "ernie2_task_iterations": config.ernie2_task_iterations,
                "ernie2_reorder_pieces": config.ernie2_reorder_pieces,
                "dlm_mix": config.dlm_mix, "dlm_dialogues": config.dlm_dialogues, "dlm_text": config.dlm_text,
                "dlm_fake_rate": config.dlm_fake_rate,
                **{k: v for k, v in config.to_dict().items() if k.startswith("ernie_thu_")}})
        self.modules = dict(self.objective.modules())
        use_onednn_linear(self.model, *self.modules.values())  # linear layers' products by oneDNN (fused.py)
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

    def _record(self, tokenizer_dir: Path, corpus_files: list[dict]) -> dict:
        import transformers

        return {
            "format_version": 1, "kind": RUN_KIND, "pretraining": self.config.to_dict(),
            "objective": {"name": self.spec.name, "family": self.spec.family, "examples": self.spec.examples,
                          "summary": self.spec.summary},
            "model": {"class": type(self.model).__name__, "parameters": sum(p.numel() for p in self.model.parameters()),
                      "non_embedding_parameters": non_embedding_parameters(self.model),
                      "module_parameters": {k: sum(p.numel() for p in m.parameters()) for k, m in self.modules.items()}},
            "corpus": {**self.stream.describe(), "files": corpus_files},
            "tokenizer": {"kind": self.spec.tokenizer, "vocab_size": len(self.tokenizer),
                          "source": self.config.tokenizer_dir or "trained on the corpus",
                          "sha256": _folder_sha256(tokenizer_dir)},
            "world_size": self.context.world_size, "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": torch.get_num_threads(),
        }

    def _write_record(self) -> None:
        self.folder.write_record(self.record)

    # ---- resume

    def resume(self) -> None:
        found = self.steps.resume(self.optimizer, self.names, self.context, self.device)
        if found is None:
            return
        weights, state = found
        load_module_weights({"model": self.model, **self.modules}, weights, self.device)
        self.position = Position.from_dict(state["position"])
        self.mask_rng.bit_generator.state = state["masking_rng"]
        self.cpu_s = float(state.get("cpu_s", 0.0))
        if "objective_state" in state:  # e.g. ERNIE's stage counter
            self.objective.load_state_dict(state["objective_state"])
        if hasattr(self.objective, "load_tensor_state"):  # e.g. XLNet's memory, this rank's
            self._restore_objective_tensors(weights, state)

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
        steps = self.steps
        if context.is_main:
            truncate_metrics(self.metrics.path, steps.step)
        self.model.train()
        for module in self.modules.values():
            module.train()
        steps.batches = self._global_batches()
        steps.last_loss = last_logged_loss(self.metrics.path) if context.is_main else None
        steps.run()
        if context.is_main and config.max_seconds is None and "budget" in self.record:
            del self.record["budget"]  # resumed without a budget: the old stop no longer describes the run
            self._write_record()
        if config.max_seconds is not None and context.is_main:
            self.record["budget"] = {"max_seconds": config.max_seconds, "cpu_s": round(self.cpu_s, 6),
                                     "stopped_by_budget": steps.stopped, "step": steps.step, "tokens": steps.tokens,
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
        targets = int(n_global) if context.enabled else int(out.n_targets)
        return update_if_finite(self.optimizer, self.parameters, self.config.clip_norm, loss, tokens, parts,
                                {"targets": targets})

    def _count_flops(self, part: dict, tokens: int) -> None:
        """FLOPs of one forward + backward on the first global batch (torch.utils.flop_counter), into
        training.json. Under a forked RNG and with the gradients dropped after: the run is unchanged."""
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
        context, steps = self.context, self.steps
        state = {**steps.state(context, self.device), "position": self.position.to_dict(),
                 "masking_rng": self.mask_rng.bit_generator.state, "cpu_s": self.cpu_s,
                 **({"objective_state": self.objective.state_dict()} if hasattr(self.objective, "state_dict") else {}),
                 "schedule": {"lr": learning_rate(self.config, steps.step), "warmup_steps": self.config.warmup_steps,
                              "decay_steps": self.config.decay_steps}}
        objective_tensors = self._objective_tensors()
        if context.is_main:
            weights = {**module_weights({"model": self.model, **self.modules}), **objective_tensors}
            write_checkpoint(self.checkpoints, steps.step, model_state=weights, optimizer=self.optimizer,
                             param_names=self.names, state=state, keep=self.config.keep_checkpoints)
        context.barrier()

    def export(self) -> RunResult:
        """``model/``: the HF checkpoint folder + tokenizer + model card (main rank), written aside and renamed."""
        model_dir, steps = None, self.steps
        elapsed = steps.elapsed()
        if self.context.is_main:
            self.model.eval()
            model_dir = self.run_dir / "model"
            with atomic_directory(model_dir) as tmp:
                export = getattr(self.objective, "export_model", None)  # ERNIE 2.0 folds a task embedding into it
                (export(self.model) if export else self.model).save_pretrained(str(tmp))
                self.tokenizer.save_pretrained(str(tmp))
                (tmp / "README.md").write_text(self._card(elapsed), encoding="utf-8")
        self.context.barrier()
        return steps.result(self.run_dir, model_dir)

    def _card(self, elapsed_s: float) -> str:
        config, record = self.config, self.record
        files = record["corpus"]["files"]
        flops = record.get("flops", {})
        loss, steps = self.steps.last_loss, self.steps
        return model_card(f"elmokit {config.objective} (trained with `elmokit pretrain`)", [
            f"- objective: {config.objective}" + (" + span boundary objective" if config.sbo else "")
            + f": {self.spec.summary}",
            f"- model: `{record['model']['class']}` (transformers {record['transformers']}), preset {config.preset} "
            f"({PRESETS[config.preset]}), {record['model']['parameters']:,} parameters, "
            f"{record['model']['non_embedding_parameters']:,} outside the embeddings",
            f"- tokenizer: {record['tokenizer']['kind']}, {record['tokenizer']['vocab_size']:,} entries "
            f"({record['tokenizer']['source']})",
            f"- corpus: {', '.join(record['corpus']['patterns'])} ({len(files)} file(s), "
            f"{sum(f['bytes'] for f in files):,} bytes); examples: {self.spec.examples}, at most {config.example_tokens} tokens",
            f"- training: {steps.step:,} steps of {config.batch_size} examples, {steps.tokens:,} tokens seen; "
            f"AdamW lr {config.lr} "
            f"(warmup {config.warmup_steps}, linear decay over {config.decay_steps}), weight decay {config.weight_decay}, "
            f"clip {config.clip_norm}; seed {config.seed}; {record['world_size']} process(es); "
            f"wall time {elapsed_s / 60:.1f} min, {self.cpu_s:.1f} CPU-seconds of training steps"
            + (f" (budget --max-seconds {config.max_seconds:g})" if config.max_seconds is not None else ""),
            f"- last logged training loss: {loss:.4f}" if loss is not None else "- no logged training loss",
            f"- FLOPs of the first step (forward + backward): {flops['forward_backward_first_step']:,}"
            if flops else "- FLOPs: not measured",
            "- load: `elmokit.Embedder.load(DIR)`, `--model DIR`, or transformers' `AutoModel.from_pretrained(DIR)`",
        ], self.run_dir)
