"""The training loop: a run folder, exact resumption, data parallelism.

A run folder holds

    command.txt          every command that ran in this folder (one line each, with the time)
    config.json          the resolved BiLMConfig
    training.json        the resolved TrainingConfig, the corpus (files, sizes, tokenizer), the vocabulary
    vocab.txt            a copy of the vocabulary
    metrics.jsonl        one JSON object per logged step
    checkpoints/         step_XXXXXXXX/ folders (see checkpoint.py), the newest ``keep_checkpoints``
    model/               at the end: the native model folder + LM head + model card

Exactness. Everything a step depends on is a function of (seed, step) or is in the checkpoint:
the initial weights (seeded), the data (``data.py``: the stream position is saved), the negatives
(drawn from (seed, step)), the dropout masks (each rank's torch RNG state is saved), the Adagrad
accumulators. So a run stopped at any point - even by ``kill -9`` - and resumed with ``--resume``
ends with bit-identical weights to an uninterrupted run on the same machine and thread count.

Data parallelism. Under torchrun every rank builds the same global batch and trains on its
share; the loss is normalised by the global number of targets times the world size, so after
DDP's gradient averaging the update equals one process's on the whole global batch.

Shared with the pretraining loop (``loop.py``): the command record, metrics, progress, non-finite
steps, the RNG states of a checkpoint; ``checkpoint.py`` and ``distributed.py`` as they are.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import sys
import time
import warnings
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from elmokit.bilm import BiLMConfig
from elmokit.evaluation.perplexity import perplexity, stream_backward_perplexity, stream_forward_perplexity
from elmokit.formats import WEIGHTS_NAME, resolve_model_path
from elmokit.io import atomic_path
from elmokit.text.chars import BOS_CHAR_IDS, EOS_CHAR_IDS, batch_to_ids
from elmokit.text.corpus import Corpus
from elmokit.training.checkpoint import (
    file_sha256,
    latest_checkpoint,
    latest_good_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from elmokit.training.config import RESUMABLE_CHANGES, SCHEDULE_FIELDS, TrainingConfig
from elmokit.training.data import (
    BOS_TYPE,
    EOS_TYPE,
    Batch,
    Position,
    SentenceStream,
    WindowBatch,
    batches,
    make_tokenizer,
    window_batches,
)
from elmokit.training.distributed import DistributedContext
from elmokit.training.lm import LM_WEIGHTS_NAME, Candidates, LanguageModel, init_like_bilm_tf
from elmokit.training.loop import (
    MetricsLog,
    NonFiniteError,
    RunError,
    eta_text,
    gather_rng_states,
    last_logged_loss,
    nonfinite_error,
    progress_bar,
    read_commands,
    read_metrics,
    record_command,
    restore_rng_states,
    truncate_metrics,
)
from elmokit.training.vocab import Vocabulary

logger = logging.getLogger(__name__)

RUN_FORMAT_VERSION = 1


__all__ = ["RunError", "NonFiniteError", "TrainResult", "read_run", "train", "read_metrics"]


@dataclass
class TrainResult:
    step: int
    tokens: int
    loss: float | None
    run_dir: Path
    model_dir: Path | None
    elapsed_s: float
    history: list[dict] = field(default_factory=list)


# ---- the run folder ---------------------------------------------------------------------------


def read_run(run_dir: Path) -> tuple[BiLMConfig, TrainingConfig, dict]:
    """(model config, training config, the whole training.json) of an existing run folder."""
    try:
        model_config = BiLMConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
        record = json.loads((run_dir / "training.json").read_text())
        training = TrainingConfig.from_dict(record["training"])
    except (OSError, KeyError, json.JSONDecodeError, ValueError, TypeError) as error:
        raise RunError(f"{run_dir}: not a readable elmokit run folder ({error})") from None
    return model_config, training, record


def _check_resume_compatible(run_dir: Path, model_config: BiLMConfig, training: TrainingConfig, corpus: list[str],
                             vocab_sha: str) -> tuple[TrainingConfig, dict]:
    """The saved training config and run record, once the requested run is checked to be the saved one."""
    saved_model, saved_training, record = read_run(run_dir)
    problems = []
    if saved_model != model_config:
        diff = {k: (v, getattr(model_config, k)) for k, v in vars(saved_model).items() if getattr(model_config, k) != v}
        problems.append(f"model config differs {diff} (saved, requested)")
    for name, saved_value in vars(saved_training).items():
        if name not in RESUMABLE_CHANGES and getattr(training, name) != saved_value:
            problems.append(f"training.{name}: saved {saved_value!r}, requested {getattr(training, name)!r}")
    if record.get("corpus", {}).get("patterns") != corpus:
        problems.append(f"corpus: saved {record.get('corpus', {}).get('patterns')}, requested {corpus}")
    if record.get("vocabulary", {}).get("sha256") != vocab_sha:
        problems.append("the vocabulary file's content differs from the run's vocab.txt")
    if problems:
        raise RunError(
            f"{run_dir}: --resume asks for a different run: " + "; ".join(problems)
            + f". Fix: resume with the same settings (only {', '.join(sorted(RESUMABLE_CHANGES))} may change), "
            "or train into a new --out folder."
        )
    return saved_training, record


def _card(model_config: BiLMConfig, training: TrainingConfig, record: dict, vocabulary: Vocabulary,
          n_params: int, n_softmax: int, step: int, tokens: int, elapsed_s: float, last_loss: float | None,
          commands: list[str], sampled: bool) -> str:
    filters = ", ".join(f"{w}x{n}" for w, n in model_config.filters)
    files = record["corpus"]["files"]
    lines = [
        "# elmokit biLM (trained with `elmokit train`)",
        "",
        "## Training data",
        f"- corpus: {', '.join(record['corpus']['patterns'])} ({len(files)} file(s), "
        f"{sum(f['bytes'] for f in files):,} bytes)",
        f"- tokenizer: `{json.dumps(training.tokenizer)}`; lines longer than {training.max_length} tokens "
        "cut into pieces",
        f"- vocabulary: {len(vocabulary):,} entries (`vocab.txt`, bilm-tf format; <S>, </S>, <UNK> first), "
        f"sha256 {record['vocabulary']['sha256'][:16]}...",
        "",
        "## Architecture",
        f"- token encoder: char CNN ({filters}; {model_config.activation}; char embedding "
        f"{model_config.char_embedding_dim}), {model_config.n_highway} highway, projection {model_config.projection_dim}",
        f"- biLSTM: {model_config.n_layers} x {model_config.lstm_dim} cells projected to {model_config.projection_dim}; "
        f"skip connections {model_config.use_skip_connections}; clips {model_config.cell_clip}/{model_config.proj_clip}; "
        f"dropout {model_config.dropout}",
        f"- parameters: {n_params:,} in the biLM (what ELMo uses) + {n_softmax:,} in the softmax (`lm.safetensors`)",
        "",
        "## Training",
        f"- steps: {step:,}; training tokens: {tokens:,} (real tokens, boundaries excluded); "
        f"wall time {elapsed_s / 3600:.2f} h ({elapsed_s / 60:.1f} min)",
        f"- optimiser: {_optimizer_text(training)}, "
        f"clip {training.clip_norm}, loss scale {training.loss_scale}; batch " + _batch_text(training)
        + f"; seed {training.seed}",
        f"- softmax: {'sampled, ' + str(training.n_negative_samples) + ' negatives' if sampled else 'full'}"
        + (f"; last logged training loss {last_loss:.4f} (perplexity {_exp(last_loss):.1f}"
           + (", sampled-softmax estimate" if sampled else "") + ")" if last_loss is not None else ""),
        "- command(s):",
        *[f"  - `{c}`" for c in commands],
        "",
    ]
    return "\n".join(lines)


def _batch_text(training: TrainingConfig) -> str:
    if training.window:
        return (f"{training.batch_size} rows of running text read in windows of {training.window} tokens, the LSTM "
                "state carried from batch to batch")
    if training.batch_tokens:
        return f"{training.batch_tokens} tokens"
    return f"{training.batch_size} sentences, each from a zero state"


def _optimizer_text(training: TrainingConfig) -> str:
    if training.optimizer == "sgd":
        text = f"SGD lr {training.lr}"
    else:
        text = f"Adagrad lr {training.lr}, initial accumulator {training.initial_accumulator}"
    if training.lr_decay < 1.0:
        text += (f" (x {training.lr_decay} when a validation gains no more than {training.lr_decay_min_gain} "
                 "perplexity on the previous one)")
    return text


def _start_model_record(init_from: str) -> dict:
    """Which weights a run started from: the folder and the sha256 of its biLM and softmax files."""
    folder = resolve_model_path(init_from)
    return {"model": init_from, "model_sha256": file_sha256(folder / WEIGHTS_NAME),
            "lm_sha256": file_sha256(folder / LM_WEIGHTS_NAME)}


# ---- the loop ---------------------------------------------------------------------------------


def _param_names(model: LanguageModel) -> list[str]:
    return [name for name, _ in model.named_parameters()]


def _autocast(device: torch.device, enabled: bool):
    if not enabled:
        return torch.autocast(device_type=device.type, enabled=False)
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def train(
    run_dir: str | os.PathLike,
    *,
    corpus: str | list[str],
    vocab: str | os.PathLike,
    model_config: BiLMConfig,
    training: TrainingConfig,
    resume: bool = False,
    command: str | None = None,
    device: str | None = None,
    progress: bool = True,
    context: DistributedContext | None = None,
    init_method: str | None = None,
    dist_timeout_s: float = 300.0,
) -> TrainResult:
    """Train (or resume) a biLM into ``run_dir``. See the module docstring."""
    run_dir = Path(run_dir)
    corpus = [corpus] if isinstance(corpus, (str, os.PathLike)) else [os.fspath(c) for c in corpus]
    context = context or DistributedContext.from_environment()
    torch_device = context.device(device)
    context.init_process_group(torch_device, init_method=init_method, timeout_s=dist_timeout_s)
    try:
        return _train(run_dir, corpus, Path(vocab), model_config, training, resume, command, torch_device, progress, context)
    finally:
        context.destroy()


def _train(run_dir, corpus, vocab_path, model_config, training, resume, command, device, progress, context) -> TrainResult:
    run = _Run.setup(run_dir, corpus, vocab_path, model_config, training, resume, command, device, progress, context)
    if resume:
        run.resume()
    if run.step == 0 and training.init_from is not None:
        run.start_from_model(training.init_from)
    run.prepare_loop()
    run.loop()
    run.save_final()
    return run.export()


@dataclass
class _StepOutcome:
    loss: float
    fwd: float
    bwd: float
    grad_norm: float

    @property
    def finite(self) -> bool:
        return math.isfinite(self.loss) and math.isfinite(self.grad_norm)

    def what(self) -> str:
        parts = [name for name, value in (("loss", self.loss), ("gradient", self.grad_norm)) if not math.isfinite(value)]
        return " and ".join(parts)


class _Run:
    """One call of ``train``: the named steps ``setup``, ``resume``, ``loop``, ``save_final``, ``export``."""

    # ---- setup: the run folder, the data, the model and the optimizer

    @classmethod
    def setup(cls, run_dir, corpus, vocab_path, model_config, training, resume, command, device, progress, context) -> _Run:
        self = cls()
        self.run_dir, self.model_config, self.training = run_dir, model_config, training
        self.device, self.progress, self.context = device, progress, context
        self.checkpoints = run_dir / "checkpoints"
        self.vocabulary = Vocabulary.load(vocab_path)
        self.tokenizer = make_tokenizer(training.tokenizer)
        self.stream = SentenceStream(corpus, tokenizer=self.tokenizer, max_length=training.max_length,
                                     shuffle_buffer=training.shuffle_buffer, seed=training.seed)
        self.stream.check_not_empty()  # before the run folder is written
        self.sampled = training.uses_sampled_softmax(len(self.vocabulary))
        self._open_run_folder(corpus, vocab_path, resume, command)
        self._build_model()
        self.step, self.tokens_seen, self.elapsed_before, self.position = 0, 0, 0.0, Position()
        self.skipped = 0  # steps skipped for a non-finite loss or gradient (training.skip_nonfinite_steps)
        self.metrics = MetricsLog(run_dir / "metrics.jsonl", context.is_main)
        self.history: list[dict] = self.metrics.history
        self.valid_sentences = None
        # window > 0: the LSTM state carried from window to window (None = zero), and the word
        # types' vocabulary ids of the current epoch's type table
        self.carried: tuple[torch.Tensor, torch.Tensor] | None = None
        self.type_vocab_ids: tuple[list[str], torch.Tensor] | None = None
        if training.window and context.world_size > 1:
            raise RunError("--window trains on one process for now: the carried state of each rank's rows is not "
                           "gathered into the checkpoint; run without torchrun, or without --window")
        return self

    def _open_run_folder(self, corpus, vocab_path, resume, command) -> None:
        run_dir, context, training = self.run_dir, self.context, self.training
        vocab_sha = file_sha256(vocab_path)
        exists = (run_dir / "training.json").exists()
        context.barrier()  # every rank has looked before the main rank writes the run's files
        if exists and not resume:
            raise RunError(f"{run_dir}: already holds a run; pass --resume to continue it, or choose another --out")
        if exists:
            saved_training, saved_record = _check_resume_compatible(run_dir, self.model_config, training, corpus,
                                                                    vocab_sha)
        command = command or " ".join(shlex.quote(a) for a in sys.argv)
        self.record = {
            "format_version": RUN_FORMAT_VERSION,
            "training": training.to_dict(),
            "corpus": self.stream.describe(),
            "vocabulary": {"source": os.fspath(vocab_path), "size": len(self.vocabulary), "sha256": vocab_sha},
            "softmax": "sampled" if self.sampled else "full",
            "world_size": context.world_size,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        }
        if training.init_from is not None:  # a name such as "default" may later name other weights
            self.record["init_from"] = _start_model_record(training.init_from)
        if context.is_main:
            run_dir.mkdir(parents=True, exist_ok=True)
            record_command(run_dir, command, context.world_size)
            if exists:
                self._record_schedule_change(saved_training, saved_record)
            if not exists:
                with atomic_path(run_dir / "config.json") as tmp:
                    Path(tmp).write_text(json.dumps(self.model_config.to_dict(), indent=2) + "\n")
                with atomic_path(run_dir / "training.json") as tmp:
                    Path(tmp).write_text(json.dumps(self.record, indent=2) + "\n")
                self.vocabulary.save(run_dir / "vocab.txt")
        context.barrier()

    def _build_model(self) -> None:
        """Identical initial weights on every rank (seeded), then per-rank RNG for dropout."""
        training, vocabulary = self.training, self.vocabulary
        torch.manual_seed(training.seed)
        self.model = LanguageModel(self.model_config, len(vocabulary), bos_id=vocabulary.bos, eos_id=vocabulary.eos)
        init_like_bilm_tf(self.model, torch.Generator().manual_seed(training.seed))
        self.model.to(self.device)
        self.names = _param_names(self.model)
        if training.optimizer == "sgd":  # plain SGD (Zaremba et al.; Kim et al.): no per-parameter state
            self.optimizer = torch.optim.SGD(self.model.parameters(), lr=training.lr)
        else:
            self.optimizer = torch.optim.Adagrad(
                self.model.parameters(), lr=training.lr, initial_accumulator_value=training.initial_accumulator, eps=0.0
            )
        # the plateau schedule (lr_decay): the learning rate now and the last validation perplexity
        self.schedule = {"lr": training.lr, "previous_valid_ppl": None}
        torch.manual_seed(training.seed * 1_000_003 + self.context.rank)

    def _record_schedule_change(self, saved_training: TrainingConfig, saved_record: dict) -> None:
        """A resume that switches the plateau rule on, off or to other values rewrites the rule in the run
        record (with the validation it decides on), so that ``training.json`` says what the run now does;
        the command log (``command.txt``) says from which command on."""
        if all(getattr(saved_training, name) == getattr(self.training, name) for name in SCHEDULE_FIELDS):
            return
        rule = {name: getattr(self.training, name)
                for name in (*SCHEDULE_FIELDS, "valid_corpus", "valid_every", "valid_sentences")}
        saved_record["training"].update(rule)
        with atomic_path(self.run_dir / "training.json") as tmp:
            Path(tmp).write_text(json.dumps(saved_record, indent=2) + "\n")
        logger.info("%s: the learning-rate schedule changes from this resume on: %s", self.run_dir, rule)

    # ---- resume: the newest good checkpoint

    def resume(self) -> None:
        context, device = self.context, self.device
        ckpt = latest_good_checkpoint(self.checkpoints, set_aside_bad=context.is_main)
        context.barrier()  # the main rank has set the bad ones aside
        if ckpt is None:
            logger.info("%s: no checkpoint yet; starting from step 0", self.run_dir)
            return
        model_state, state = read_checkpoint(ckpt, self.optimizer, self.names)
        carried = [model_state.pop(name, None) for name in CARRIED_STATE_NAMES]
        if self.training.window and all(t is not None for t in carried):
            self.carried = (carried[0].to(device), carried[1].to(device))
        self.model.load_state_dict({k: v.to(device) for k, v in model_state.items()})
        self.step, self.tokens_seen = state["step"], state["tokens"]
        self.elapsed_before = state["elapsed_s"]
        self.position = Position.from_dict(state["position"])
        self.skipped = state.get("skipped_nonfinite", 0)
        self.schedule = state.get("lr_schedule", self.schedule)
        self._set_lr(self.schedule["lr"])
        restore_rng_states(state, context, device)
        logger.info("resuming from %s (step %d, %d tokens)", ckpt, self.step, self.tokens_seen)

    def start_from_model(self, init_from: str) -> None:
        """Step 0 of a run with ``init_from``: the trained model's biLM and softmax replace the random
        weights (bilm-tf's restart.py); Adagrad's accumulators start at ``initial_accumulator``.
        ``resolve_run_config`` has checked that the architecture and the vocabulary are the model's."""
        loaded, vocabulary, _ = LanguageModel.load(init_from)
        if vocabulary.tokens != self.vocabulary.tokens:
            raise RunError(f"--init-from {init_from}: its vocabulary is not this run's")
        self.model.load_state_dict({k: v.to(self.device) for k, v in loaded.state_dict().items()})
        logger.info("starting from the weights of %s", init_from)

    # ---- the loop

    def prepare_loop(self) -> None:
        context, model, training = self.context, self.model, self.training
        if context.is_main:
            truncate_metrics(self.run_dir / "metrics.jsonl", self.step)
        # for the card, if no step runs in this call
        self.last_loss = last_logged_loss(self.run_dir / "metrics.jsonl") if context.is_main else None
        self.train_model = model
        # One process: the sampled softmax's gradient stays on the rows a step touches (SoftmaxRows).
        # DDP averages dense gradients, so its ranks keep the (V, P) table's.
        model.row_sparse_softmax = training.optimizer == "adagrad" and not context.enabled
        if context.enabled:
            # The char CNN's im2col weight gradients arrive transposed; DDP copies them into its
            # buckets and says so on every step. Harmless (a small copy), so keep the log readable.
            warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
            device_ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(model, device_ids=device_ids)
        model.train()
        self.bar = progress_bar(self.progress and context.is_main, training.max_steps, self.step)
        self.start_time = time.perf_counter()
        self.window_tokens, self.window_start = 0, time.perf_counter()
        self.tokens_at_start, self.first_step, self.last_saved = self.tokens_seen, self.step, self.step
        if training.window:
            self.data = window_batches(self.stream, rows=training.batch_size, window=training.window,
                                       start=self.position)
        else:
            self.data = batches(self.stream, start=self.position,
                                batch_size=None if training.batch_tokens else training.batch_size,
                                batch_tokens=training.batch_tokens)

    def elapsed(self) -> float:
        return self.elapsed_before + time.perf_counter() - self.start_time

    def loop(self) -> None:
        training, context = self.training, self.context
        while training.max_steps is None or self.step < training.max_steps:
            batch: Batch | WindowBatch = next(self.data)
            if training.epochs is not None and batch.epoch >= training.epochs:
                break
            if isinstance(batch, Batch) and len(batch.sentences) < context.world_size:
                logger.warning("skipping a batch of %d sentences: fewer than the %d ranks", len(batch.sentences),
                               context.world_size)
                self.position = batch.end
                continue
            self.step += 1
            if isinstance(batch, WindowBatch):
                outcome = self._window_step(batch)
            else:
                outcome = _step(self.train_model, self.model, self.optimizer, batch, self.vocabulary, training,
                                self.sampled, self.step, self.device, context)
            self.position = batch.end
            self.tokens_seen += batch.num_tokens
            self.window_tokens += batch.num_tokens
            if outcome.finite:
                self.last_loss = outcome.loss
                if self.step % training.log_every == 0 or self.step == training.max_steps:
                    self._log_step(batch, outcome)
            else:
                self._skip_step(outcome)
            self._update_bar(outcome)
            if training.valid_corpus and self.step % training.valid_every == 0:
                self._validate()
            if self.step % training.checkpoint_every == 0:
                self.save()
        if self.bar is not None:
            self.bar.close()

    def _window_step(self, batch: WindowBatch) -> _StepOutcome:
        """One optimiser step on a carried-state window (``data.py``): the state the previous window
        ended in is the initial state (zero at an epoch's start); gradients stop at the window's start
        (truncated backpropagation through time, as bilm-tf and Zaremba et al.)."""
        model, training, device = self.model, self.training, self.device
        if batch.first_of_epoch:
            self.carried = None
        forward_in, backward_in = batch.forward[:, :-1], batch.backward[:, :-1]  # (B, T) type ids
        unique, inverse = np.unique(np.concatenate([forward_in, backward_in]), return_inverse=True)
        inverse = torch.from_numpy(inverse.reshape(2, *forward_in.shape).astype(np.int64)).to(device)
        vocab_ids = self._type_vocab_ids(batch.types)
        forward_targets = vocab_ids[torch.from_numpy(batch.forward[:, 1:].astype(np.int64)).to(device)]
        backward_targets = vocab_ids[torch.from_numpy(batch.backward[:, 1:].astype(np.int64)).to(device)]
        # a sentence's last input (</S> forward, <S> backward) would predict the next sentence's start marker
        forward_scored = torch.from_numpy(forward_in != EOS_TYPE).to(device)
        backward_scored = torch.from_numpy(backward_in != BOS_TYPE).to(device)
        candidates = (
            Candidates.draw(len(self.vocabulary), training.n_negative_samples, seed=training.seed, step=self.step,
                            device=device)
            if self.sampled else None
        )
        self.optimizer.zero_grad(set_to_none=True)
        with _autocast(device, training.bf16):
            out, carried = model.window_forward(
                _type_char_ids(batch.types, unique).to(device), inverse[0], inverse[1], forward_targets,
                backward_targets, forward_scored, backward_scored, self.carried, candidates=candidates)
        n_f, n_b = max(out.forward_targets, 1), max(out.backward_targets, 1)
        # bilm-tf's 0.5 * (mean_f + mean_b), times loss_scale
        fwd, bwd = out.forward_nll.item() / n_f, out.backward_nll.item() / n_b
        outcome = _differentiate_and_update(
            model, self.optimizer, 0.5 * training.loss_scale * (out.forward_nll / n_f + out.backward_nll / n_b),
            training.clip_norm, 0.5 * (fwd + bwd), fwd, bwd)
        if outcome.finite:
            self.carried = carried
        return outcome

    def _type_vocab_ids(self, types: list[str]) -> torch.Tensor:
        """Vocabulary ids of an epoch's type table (boundaries first) on the run's device, once per table
        (the table itself is kept for the identity test: a freed table's id() could name the next one)."""
        if self.type_vocab_ids is None or self.type_vocab_ids[0] is not types:
            self.type_vocab_ids = (types, torch.from_numpy(_vocab_ids_of_types(self.vocabulary, types)).to(self.device))
        return self.type_vocab_ids[1]

    def _write_metrics(self, entry: dict) -> None:
        self.metrics.write(entry)

    def _log_step(self, batch: Batch, outcome: _StepOutcome) -> None:
        now = time.perf_counter()
        entry = {
            "step": self.step, "epoch": batch.epoch, "loss": outcome.loss, "ppl": _exp(outcome.loss),
            "fwd_loss": outcome.fwd, "bwd_loss": outcome.bwd, "grad_norm": outcome.grad_norm, "tokens": self.tokens_seen,
            "tokens_per_s": self.window_tokens / max(now - self.window_start, 1e-9), "elapsed_s": round(self.elapsed(), 3),
            "softmax": "sampled" if self.sampled else "full", "skipped_nonfinite": self.skipped,
        }
        self.window_tokens, self.window_start = 0, now
        self._write_metrics(entry)
        if self.context.is_main and self.bar is None:  # plain log lines for batch jobs
            eta = eta_text(self.training.max_steps, self.step, self.first_step, time.perf_counter() - self.start_time)
            logger.info("step %d  loss %.4f  ppl %.1f  %.0f tok/s%s", self.step, outcome.loss, entry["ppl"],
                        entry["tokens_per_s"], eta)

    def _skip_step(self, outcome: _StepOutcome) -> None:
        """A non-finite loss or gradient: the update was not applied. Skip it (counted) or stop."""
        training = self.training
        self.skipped += 1
        if self.skipped > training.skip_nonfinite_steps:
            raise nonfinite_error(self.step, outcome.what(), outcome.loss, outcome.grad_norm, training.skip_nonfinite_steps,
                                  self.checkpoints, f"lower --lr (now {training.lr}) or --loss-scale (now {training.loss_scale})")
        logger.warning("step %d: non-finite %s; step skipped (%d of at most %d)", self.step, outcome.what(),
                       self.skipped, training.skip_nonfinite_steps)
        self._write_metrics({"step": self.step, "skipped": f"non-finite {outcome.what()}", "skipped_nonfinite": self.skipped,
                             "tokens": self.tokens_seen})

    def _update_bar(self, outcome: _StepOutcome) -> None:
        if self.bar is None:
            return
        self.bar.update(1)
        rate = (self.tokens_seen - self.tokens_at_start) / max(time.perf_counter() - self.start_time, 1e-9)
        self.bar.set_postfix(loss=f"{outcome.loss:.3f}", ppl=f"{_exp(outcome.loss):.1f}", tok_s=f"{rate:.0f}", refresh=False)

    def _validate(self) -> None:
        context, training, model = self.context, self.training, self.model
        if context.is_main:
            if self.valid_sentences is None:
                corpus_v = Corpus(training.valid_corpus, tokenizer=self.tokenizer, max_tokens=training.max_length)
                self.valid_sentences = list(islice(corpus_v, training.valid_sentences))
            rng = torch.get_rng_state()  # evaluation draws nothing, but keep the stream untouched anyway
            began = time.perf_counter()
            result = perplexity(model, self.vocabulary, self.valid_sentences, device=self.device)
            entry = {"step": self.step, "valid_fwd_ppl": result.forward, "valid_bwd_ppl": result.backward,
                     "valid_ppl": result.average, "valid_targets": result.num_targets}
            scheduled = result.average
            if training.window:  # trained on running text: also read the valid text as one stream each way
                forward = stream_forward_perplexity(model, self.vocabulary, self.valid_sentences, device=self.device)
                backward = stream_backward_perplexity(model, self.vocabulary, self.valid_sentences, device=self.device)
                entry.update(valid_stream_fwd_ppl=forward.forward, valid_stream_bwd_ppl=backward.forward)
                scheduled = 0.5 * (forward.forward + backward.forward)  # the protocol the model is trained for
            torch.set_rng_state(rng)
            model.train()
            self._write_metrics({**entry, "valid_seconds": round(time.perf_counter() - began, 1)})
            logger.info("step %d  valid perplexity fwd %.1f bwd %.1f avg %.1f", self.step, result.forward,
                        result.backward, result.average)
        if training.lr_decay < 1.0:
            # the main rank measured; every rank must take the same decision
            (valid_ppl,) = context.all_sum([scheduled if context.is_main else 0.0], self.device)
            self._decay_on_plateau(valid_ppl)
        context.barrier()

    def _decay_on_plateau(self, valid_ppl: float) -> None:
        """Kim et al. (2016): "we halve the learning rate if the perplexity on the validation set does
        not decrease by more than 1.0 after an epoch" - against the previous validation."""
        training, schedule = self.training, self.schedule
        previous = schedule["previous_valid_ppl"]
        if previous is not None and not valid_ppl < previous - training.lr_decay_min_gain:
            schedule["lr"] *= training.lr_decay
            self._set_lr(schedule["lr"])
            logger.info("step %d: validation %.2f gained <= %s on %.2f; learning rate now %g", self.step, valid_ppl,
                        training.lr_decay_min_gain, previous, schedule["lr"])
            self._write_metrics({"step": self.step, "lr": schedule["lr"]})
        schedule["previous_valid_ppl"] = valid_ppl

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ---- save: checkpoints and the final model

    def save(self) -> None:
        context, device = self.context, self.device
        rng_states = gather_rng_states(context, device)
        if context.is_main:
            write_checkpoint(
                self.checkpoints, self.step,
                model_state={**self.model.state_dict(), **self._carried_tensors()},
                optimizer=self.optimizer, param_names=self.names,
                state={"step": self.step, "tokens": self.tokens_seen, "position": self.position.to_dict(),
                       "elapsed_s": self.elapsed(), "world_size": context.world_size, **rng_states,
                       "skipped_nonfinite": self.skipped, "threads": torch.get_num_threads(),
                       "lr_schedule": self.schedule},
                keep=self.training.keep_checkpoints,
            )
        context.barrier()
        self.last_saved = self.step

    def _carried_tensors(self) -> dict[str, torch.Tensor]:
        """The carried window state, saved beside the weights so that a resumed run continues the rows."""
        if self.carried is None:
            return {}
        return dict(zip(CARRIED_STATE_NAMES, self.carried))

    def save_final(self) -> None:
        if self.step != self.last_saved or latest_checkpoint(self.checkpoints) is None:
            self.save()

    def export(self) -> TrainResult:
        """The model folder (main rank) and the result."""
        model_dir = None
        if self.context.is_main:
            self.model.eval()
            commands = read_commands(self.run_dir)
            n_params_bilm = sum(p.numel() for p in self.model.bilm.parameters())
            n_softmax = self.model.softmax_weight.numel() + self.model.softmax_bias.numel()
            card = _card(self.model_config, self.training, self.record, self.vocabulary, n_params_bilm, n_softmax,
                         self.step, self.tokens_seen, self.elapsed(), self.last_loss, commands, self.sampled)
            model_dir = self.model.save(self.run_dir / "model", self.vocabulary, info={
                "tokenizer": self.training.tokenizer, "max_length": self.training.max_length,
                "trained_steps": self.step, "trained_tokens": self.tokens_seen,
            }, model_card=card)
        self.context.barrier()
        return TrainResult(self.step, self.tokens_seen, self.last_loss, self.run_dir, model_dir, self.elapsed(), self.history)


# checkpoint names of the carried window state: h (L, 2, B, P), c (L, 2, B, D)
CARRIED_STATE_NAMES = ("carried_state/h", "carried_state/c")


def _vocab_ids_of_types(vocabulary: Vocabulary, types: list[str]) -> np.ndarray:
    """Vocabulary ids of a window type table: <S>, </S>, then the words'."""
    return np.asarray([vocabulary.bos, vocabulary.eos, *vocabulary.ids(types[2:])], dtype=np.int64)


def _type_char_ids(types: list[str], type_ids: np.ndarray) -> torch.Tensor:
    """Char ids (U, C) of sorted type ids: the boundary markers' own char ids, then the words'."""
    words = [types[i] for i in type_ids if i > EOS_TYPE]
    chars = batch_to_ids([words])[0] if words else torch.zeros(0, BOS_CHAR_IDS.shape[0], dtype=torch.long)
    boundaries = [torch.from_numpy(BOS_CHAR_IDS if i == BOS_TYPE else EOS_CHAR_IDS).long()
                  for i in type_ids if i <= EOS_TYPE]
    return torch.cat([torch.stack(boundaries), chars]) if boundaries else chars


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))


def _step(train_model, model: LanguageModel, optimizer, batch: Batch, vocabulary: Vocabulary,
          training: TrainingConfig, sampled: bool, step: int, device: torch.device, context: DistributedContext) -> _StepOutcome:
    """One optimiser step on this rank's part of the global batch: (mean loss over the global
    batch, forward loss, backward loss, gradient norm before clipping). With a non-finite loss
    or gradient norm (the same on every rank) the update is not applied."""
    part = batch.part(context.rank, context.world_size)
    global_targets = sum(len(s) + 1 for s in batch.sentences)  # per direction; every rank knows it
    char_ids = batch_to_ids(part).to(device)
    max_len = max(len(s) for s in part)
    word_ids = torch.tensor([vocabulary.ids(s) + [0] * (max_len - len(s)) for s in part], dtype=torch.long, device=device)
    candidates = (
        Candidates.draw(len(vocabulary), training.n_negative_samples, seed=training.seed, step=step, device=device)
        if sampled else None
    )
    optimizer.zero_grad(set_to_none=True)
    with _autocast(device, training.bf16):
        out = train_model(char_ids, word_ids, candidates=candidates)
    # Normalised by the *global* number of targets; x world_size undoes DDP's gradient averaging.
    scale = training.loss_scale * context.world_size / (2.0 * global_targets)
    fwd, bwd = context.all_sum([out.forward_nll.item(), out.backward_nll.item()], device)
    return _differentiate_and_update(model, optimizer, (out.forward_nll + out.backward_nll) * scale, training.clip_norm,
                                     (fwd + bwd) / (2 * global_targets), fwd / global_targets, bwd / global_targets)


def _differentiate_and_update(model, optimizer, objective: torch.Tensor, clip_norm: float, loss: float, fwd: float,
                              bwd: float) -> _StepOutcome:
    """Backward, clip the global gradient norm, and step - unless the loss or the gradient norm is
    non-finite (the same on every rank), when the gradients are dropped and the weights stay."""
    objective.backward()
    rows, model.softmax_rows = model.softmax_rows, None  # the sampled softmax's touched rows (SoftmaxRows)
    leaves = [rows.weight, rows.bias] if rows is not None else []
    grad_norm = torch.nn.utils.clip_grad_norm_([*model.parameters(), *leaves], clip_norm)
    outcome = _StepOutcome(loss, fwd, bwd, float(grad_norm))
    if outcome.finite:
        optimizer.step()  # the softmax table has no gradient when its rows are leaves of their own
        if rows is not None:
            rows.adagrad_step(optimizer, model.softmax_weight, model.softmax_bias)
    else:
        optimizer.zero_grad(set_to_none=True)
    return outcome
