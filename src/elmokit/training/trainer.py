"""The biLM recipe on the engine: its batches, its step, its validation and its export. The run folder
(``engine/run_folder.py``; here beside the record: ``config.json``, ``vocab.txt``, and at the end ``model/``,
the native model folder + LM head + model card), the step loop, checkpoints and data parallelism are the
engine's (``elmokit.engine``).

Exactness. Everything a step depends on is a function of (seed, step) or is in the checkpoint:
the initial weights (seeded), the data (``data.py``: the stream position is saved), the negatives
(drawn from (seed, step)), the dropout masks (each rank's torch RNG state is saved), the Adagrad
accumulators. So a run stopped at any point - even by ``kill -9`` - and resumed with ``--resume``
ends with bit-identical weights to an uninterrupted run on the same machine and thread count.

Data parallelism. Under torchrun every rank builds the same global batch and trains on its
share; the loss is normalised by the global number of targets times the world size, so after
DDP's gradient averaging the update equals one process's on the whole global batch.
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
from itertools import islice
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from elmokit.bilm import BiLMConfig
from elmokit.engine.checkpoint import file_sha256, write_checkpoint
from elmokit.engine.distributed import DistributedContext
from elmokit.engine.run_folder import (
    MetricsLog,
    RunError,
    RunFolder,
    corpus_files_record,
    corpus_problems,
    last_logged_loss,
    model_card,
    read_metrics,
    resume_differences,
    truncate_metrics,
)
from elmokit.engine.steps import Launch, NonFiniteError, RunResult, StepLoop, StepOutcome, corpus_list
from elmokit.evaluation.perplexity import perplexity, stream_backward_perplexity, stream_forward_perplexity
from elmokit.formats import WEIGHTS_NAME, resolve_model_path
from elmokit.io import atomic_directory, write_json
from elmokit.lm import LM_WEIGHTS_NAME, Candidates, LanguageModel, init_like_bilm_tf
from elmokit.text.chars import BOS_CHAR_IDS, EOS_CHAR_IDS, batch_to_ids
from elmokit.text.corpus import Corpus, Position
from elmokit.text.vocab import Vocabulary
from elmokit.training.config import SCHEDULE_FIELDS, TrainingConfig
from elmokit.training.data import (
    BOS_TYPE,
    EOS_TYPE,
    Batch,
    SentenceStream,
    WindowBatch,
    batches,
    make_tokenizer,
    window_batches,
)

logger = logging.getLogger(__name__)

RUN_FORMAT_VERSION = 1


__all__ = ["RunError", "NonFiniteError", "RunResult", "train", "read_metrics"]


# ---- the run folder ---------------------------------------------------------------------------

RUN_KIND = "train"


def saved_configs(folder: RunFolder) -> tuple[BiLMConfig, TrainingConfig, dict]:
    """(model config, training config, the whole training.json) of a run folder's record (read once, by ``open``)."""
    if folder.record is None:
        raise RunError(f"{folder.path}: holds no run record (training.json); start a run there without --resume")
    return folder.saved("config.json", BiLMConfig.from_dict), folder.saved("training", TrainingConfig.from_dict), folder.record


def _card_lines(model_config: BiLMConfig, training: TrainingConfig, record: dict, vocabulary: Vocabulary,
                n_params: int, n_softmax: int, step: int, tokens: int, elapsed_s: float, last_loss: float | None,
                sampled: bool) -> list[str]:
    filters = ", ".join(f"{w}x{n}" for w, n in model_config.filters)
    files = record["corpus"]["files"]
    return [
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
    ]


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


# ---- the run ----------------------------------------------------------------------------------


def _autocast(device: torch.device, enabled: bool):
    if not enabled:
        return torch.autocast(device_type=device.type, enabled=False)
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def train(run_dir: str | os.PathLike, *, corpus: str | list[str], vocab: str | os.PathLike, model_config: BiLMConfig,
          training: TrainingConfig, **launch) -> RunResult:
    """Train (or resume) a biLM into ``run_dir``. See the module docstring. ``launch``: the keywords of
    ``elmokit.engine.steps.Launch`` (resume, command, device, progress, context, init_method, dist_timeout_s,
    folder: the run folder as ``resolve_run_config`` opened it)."""
    run_dir, launch = Path(run_dir), Launch(**launch)
    with launch.started() as (context, device):
        run = _Run(run_dir, corpus_list(corpus), Path(vocab), model_config, training, launch.resume, launch.command, device,
                   launch.progress, context, launch.folder)
        if run.folder.resuming:
            run.resume()
        if run.steps.step == 0 and training.init_from is not None:
            run.start_from_model(training.init_from)
        run.prepare_loop()
        run.steps.run()
        run.steps.save_final()
        return run.export()


class _Run:
    """One call of ``train``: set up (run folder, data, model, optimizer), ``resume``, the loop's batches,
    step and validation, ``save``, ``export``."""

    def __init__(self, run_dir, corpus, vocab_path, model_config, training, resume, command, device, progress, context,
                 folder) -> None:
        self.run_dir, self.model_config, self.training = run_dir, model_config, training
        self.device, self.progress, self.context = device, progress, context
        self.checkpoints = run_dir / "checkpoints"
        self.vocabulary = Vocabulary.load(vocab_path)
        self.tokenizer = make_tokenizer(training.tokenizer)
        if training.window and context.world_size > 1:
            raise RunError("--window trains on one process for now: the carried state of each rank's rows is not "
                           "gathered into the checkpoint; run without torchrun, or without --window")
        self.stream = SentenceStream(corpus, tokenizer=self.tokenizer, max_length=training.max_length,
                                     shuffle_buffer=training.shuffle_buffer, seed=training.seed)
        self.stream.check_not_empty()  # before the run folder is written
        self.sampled = training.uses_sampled_softmax(len(self.vocabulary))
        if folder is None or folder.path != run_dir:
            folder = RunFolder.open(run_dir, kind=RUN_KIND, resume=resume)
        self.folder = folder
        self._open_run_folder(corpus, vocab_path, command)
        self._build_model()
        self.position = Position()
        self.metrics = MetricsLog(run_dir / "metrics.jsonl", context.is_main)
        self.valid_sentences = None
        # window > 0: the LSTM state carried from window to window (None = zero), and the word
        # types' vocabulary ids of the current epoch's type table
        self.carried: tuple[torch.Tensor, torch.Tensor] | None = None
        self.type_vocab_ids: tuple[list[str], torch.Tensor] | None = None
        self.steps = StepLoop(
            batches=iter(()), step_fn=self._step, save=self.save, metrics=self.metrics, checkpoints=self.checkpoints,
            max_steps=training.max_steps, epochs=training.epochs, log_every=training.log_every,
            checkpoint_every=training.checkpoint_every, skip_nonfinite_steps=training.skip_nonfinite_steps,
            fix=f"lower --lr (now {training.lr}) or --loss-scale (now {training.loss_scale})", progress=progress,
            is_main=context.is_main, on_step=lambda _: {"softmax": "sampled" if self.sampled else "full"},
            after_step=self._validate if training.valid_corpus else None)

    def _open_run_folder(self, corpus, vocab_path, command) -> None:
        folder, context, training = self.folder, self.context, self.training
        vocab_sha = file_sha256(vocab_path)
        described = self.stream.describe()
        described["files"] = corpus_files_record(f["path"] for f in described["files"])
        self.record = {
            "format_version": RUN_FORMAT_VERSION,
            "kind": RUN_KIND,
            "training": training.to_dict(),
            "corpus": described,
            "vocabulary": {"source": os.fspath(vocab_path), "size": len(self.vocabulary), "sha256": vocab_sha},
            "softmax": "sampled" if self.sampled else "full",
            "world_size": context.world_size,
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
        }
        if training.init_from is not None:  # a name such as "default" may later name other weights
            self.record["init_from"] = _start_model_record(training.init_from)
        if folder.resuming:
            saved_model, saved_training, saved_record = saved_configs(folder)
            problems = resume_differences(saved_model, self.model_config, "model.")
            problems += resume_differences(saved_training, training, "training.")
            problems += corpus_problems(saved_record.get("corpus", {}), corpus, described["files"])
            if saved_record.get("vocabulary", {}).get("sha256") != vocab_sha:
                problems.append("the vocabulary file's content differs from the run's vocab.txt")
            folder.refuse_if(problems, TrainingConfig)
        context.barrier()  # every rank has looked before the main rank writes the run's files
        if context.is_main:
            folder.start(command or " ".join(shlex.quote(a) for a in sys.argv), context.world_size, self.record,
                         {"config.json": json.dumps(self.model_config.to_dict(), indent=2) + "\n"})
            if folder.resuming:
                self._record_schedule_change(saved_training, saved_record)
            else:
                self.vocabulary.save(self.run_dir / "vocab.txt")
        context.barrier()

    def _build_model(self) -> None:
        """Identical initial weights on every rank (seeded), then per-rank RNG for dropout."""
        training, vocabulary = self.training, self.vocabulary
        torch.manual_seed(training.seed)
        self.model = LanguageModel(self.model_config, len(vocabulary), bos_id=vocabulary.bos, eos_id=vocabulary.eos)
        init_like_bilm_tf(self.model, torch.Generator().manual_seed(training.seed))
        self.model.to(self.device)
        self.names = [name for name, _ in self.model.named_parameters()]
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
        write_json(self.run_dir / "training.json", saved_record)
        logger.info("%s: the learning-rate schedule changes from this resume on: %s", self.run_dir, rule)

    # ---- resume: the newest good checkpoint

    def resume(self) -> None:
        device = self.device
        found = self.steps.resume(self.optimizer, self.names, self.context, device)
        if found is None:
            return
        model_state, state = found
        carried = [model_state.pop(name, None) for name in CARRIED_STATE_NAMES]
        if self.training.window and all(t is not None for t in carried):
            self.carried = (carried[0].to(device), carried[1].to(device))
        self.model.load_state_dict({k: v.to(device) for k, v in model_state.items()})
        self.position = Position.from_dict(state["position"])
        self.schedule = state.get("lr_schedule", self.schedule)
        self._set_lr(self.schedule["lr"])

    def start_from_model(self, init_from: str) -> None:
        """Step 0 of a run with ``init_from``: the trained model's biLM and softmax replace the random
        weights (bilm-tf's restart.py); Adagrad's accumulators start at ``initial_accumulator``.
        ``resolve_run_config`` has checked that the architecture and the vocabulary are the model's."""
        loaded, vocabulary, _ = LanguageModel.load(init_from)
        if vocabulary.tokens != self.vocabulary.tokens:
            raise RunError(f"--init-from {init_from}: its vocabulary is not this run's")
        self.model.load_state_dict({k: v.to(self.device) for k, v in loaded.state_dict().items()})
        logger.info("starting from the weights of %s", init_from)

    # ---- the loop: batches, one step, validation

    def prepare_loop(self) -> None:
        context, model, training = self.context, self.model, self.training
        if context.is_main:
            truncate_metrics(self.run_dir / "metrics.jsonl", self.steps.step)
        # for the card, if no step runs in this call
        self.steps.last_loss = last_logged_loss(self.run_dir / "metrics.jsonl") if context.is_main else None
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
        self.steps.batches = self._batches()

    def _batches(self):
        """``(batch, epoch)`` from the stream's position on; a batch with fewer sentences than ranks is passed over."""
        training, context = self.training, self.context
        if training.window:
            data = window_batches(self.stream, rows=training.batch_size, window=training.window, start=self.position)
        else:
            data = batches(self.stream, start=self.position, batch_size=None if training.batch_tokens else training.batch_size,
                           batch_tokens=training.batch_tokens)
        for batch in data:
            if isinstance(batch, Batch) and len(batch.sentences) < context.world_size:
                if training.epochs is not None and batch.epoch >= training.epochs:
                    yield batch, batch.epoch  # the loop ends there
                logger.warning("skipping a batch of %d sentences: fewer than the %d ranks", len(batch.sentences),
                               context.world_size)
                self.position = batch.end
                continue
            yield batch, batch.epoch

    def _step(self, batch: Batch | WindowBatch, step: int) -> StepOutcome:
        if isinstance(batch, WindowBatch):
            outcome = self._window_step(batch, step)
        else:
            outcome = _step(self.train_model, self.model, self.optimizer, batch, self.vocabulary, self.training,
                            self.sampled, step, self.device, self.context)
        self.position = batch.end
        outcome.tokens = batch.num_tokens
        return outcome

    def _window_step(self, batch: WindowBatch, step: int) -> StepOutcome:
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
            Candidates.draw(len(self.vocabulary), training.n_negative_samples, seed=training.seed, step=step,
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

    def _validate(self, step: int) -> None:
        context, training, model = self.context, self.training, self.model
        if step % training.valid_every:
            return
        if context.is_main:
            if self.valid_sentences is None:
                corpus_v = Corpus(training.valid_corpus, tokenizer=self.tokenizer, max_tokens=training.max_length)
                self.valid_sentences = list(islice(corpus_v, training.valid_sentences))
            rng = torch.get_rng_state()  # evaluation draws nothing, but keep the stream untouched anyway
            began = time.perf_counter()
            result = perplexity(model, self.vocabulary, self.valid_sentences, device=self.device)
            entry = {"step": step, "valid_fwd_ppl": result.forward, "valid_bwd_ppl": result.backward,
                     "valid_ppl": result.average, "valid_targets": result.num_targets}
            scheduled = result.average
            if training.window:  # trained on running text: also read the valid text as one stream each way
                forward = stream_forward_perplexity(model, self.vocabulary, self.valid_sentences, device=self.device)
                backward = stream_backward_perplexity(model, self.vocabulary, self.valid_sentences, device=self.device)
                entry.update(valid_stream_fwd_ppl=forward.forward, valid_stream_bwd_ppl=backward.forward)
                scheduled = 0.5 * (forward.forward + backward.forward)  # the protocol the model is trained for
            torch.set_rng_state(rng)
            model.train()
            self.metrics.write({**entry, "valid_seconds": round(time.perf_counter() - began, 1)})
            logger.info("step %d  valid perplexity fwd %.1f bwd %.1f avg %.1f", step, result.forward,
                        result.backward, result.average)
        if training.lr_decay < 1.0:
            # the main rank measured; every rank must take the same decision
            (valid_ppl,) = context.all_sum([scheduled if context.is_main else 0.0], self.device)
            self._decay_on_plateau(step, valid_ppl)
        context.barrier()

    def _decay_on_plateau(self, step: int, valid_ppl: float) -> None:
        """Kim et al. (2016): "we halve the learning rate if the perplexity on the validation set does
        not decrease by more than 1.0 after an epoch" - against the previous validation."""
        training, schedule = self.training, self.schedule
        previous = schedule["previous_valid_ppl"]
        if previous is not None and not valid_ppl < previous - training.lr_decay_min_gain:
            schedule["lr"] *= training.lr_decay
            self._set_lr(schedule["lr"])
            logger.info("step %d: validation %.2f gained <= %s on %.2f; learning rate now %g", step, valid_ppl,
                        training.lr_decay_min_gain, previous, schedule["lr"])
            self.metrics.write({"step": step, "lr": schedule["lr"]})
        schedule["previous_valid_ppl"] = valid_ppl

    def _set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    # ---- save: checkpoints and the final model

    def save(self) -> None:
        context, steps = self.context, self.steps
        state = {**steps.state(context, self.device), "position": self.position.to_dict(), "lr_schedule": self.schedule}
        if context.is_main:
            write_checkpoint(self.checkpoints, steps.step, model_state={**self.model.state_dict(), **self._carried_tensors()},
                             optimizer=self.optimizer, param_names=self.names, state=state,
                             keep=self.training.keep_checkpoints)
        context.barrier()

    def _carried_tensors(self) -> dict[str, torch.Tensor]:
        """The carried window state, saved beside the weights so that a resumed run continues the rows."""
        if self.carried is None:
            return {}
        return dict(zip(CARRIED_STATE_NAMES, self.carried))

    def export(self) -> RunResult:
        """The model folder (main rank) and the result."""
        model_dir, steps = None, self.steps
        if self.context.is_main:
            self.model.eval()
            n_params_bilm = sum(p.numel() for p in self.model.bilm.parameters())
            n_softmax = self.model.softmax_weight.numel() + self.model.softmax_bias.numel()
            card = model_card("elmokit biLM (trained with `elmokit train`)", _card_lines(
                self.model_config, self.training, self.record, self.vocabulary, n_params_bilm, n_softmax, steps.step,
                steps.tokens, steps.elapsed(), steps.last_loss, self.sampled), self.run_dir)
            model_dir = self.run_dir / "model"
            with atomic_directory(model_dir) as tmp:  # swapped whole: never a half-written export
                self.model.save(tmp, self.vocabulary, model_card=card, info={
                    "tokenizer": self.training.tokenizer, "max_length": self.training.max_length,
                    "trained_steps": steps.step, "trained_tokens": steps.tokens})
        self.context.barrier()
        return steps.result(self.run_dir, model_dir)


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
          training: TrainingConfig, sampled: bool, step: int, device: torch.device, context: DistributedContext) -> StepOutcome:
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
                              bwd: float) -> StepOutcome:
    """Backward, clip the global gradient norm, and step - unless the loss or the gradient norm is
    non-finite (the same on every rank), when the gradients are dropped and the weights stay."""
    objective.backward()
    rows, model.softmax_rows = model.softmax_rows, None  # the sampled softmax's touched rows (SoftmaxRows)
    leaves = [rows.weight, rows.bias] if rows is not None else []
    grad_norm = torch.nn.utils.clip_grad_norm_([*model.parameters(), *leaves], clip_norm)
    outcome = StepOutcome(loss, float(grad_norm), 0, {"ppl": _exp(loss), "fwd_loss": fwd, "bwd_loss": bwd})
    if outcome.finite:
        optimizer.step()  # the softmax table has no gradient when its rows are leaves of their own
        if rows is not None:
            rows.adagrad_step(optimizer, model.softmax_weight, model.softmax_bias)
    else:
        optimizer.zero_grad(set_to_none=True)
    return outcome
