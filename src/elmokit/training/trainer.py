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
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from elmokit.bilm import BiLMConfig
from elmokit.io import atomic_path
from elmokit.text.chars import batch_to_ids
from elmokit.training.checkpoint import (
    decode_rng,
    encode_rng,
    latest_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from elmokit.training.config import RESUMABLE_CHANGES, TrainingConfig
from elmokit.training.data import Batch, Position, SentenceStream, batches, make_tokenizer
from elmokit.training.distributed import DistributedContext
from elmokit.training.lm import Candidates, LanguageModel, init_like_bilm_tf
from elmokit.training.vocab import Vocabulary

logger = logging.getLogger(__name__)

RUN_FORMAT_VERSION = 1


class RunError(ValueError):
    """A run folder that does not fit the request; the message says what differs and the fix."""


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


def _file_sha256(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_run(run_dir: Path) -> tuple[BiLMConfig, TrainingConfig, dict]:
    """(model config, training config, the whole training.json) of an existing run folder."""
    try:
        model_config = BiLMConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
        record = json.loads((run_dir / "training.json").read_text())
        training = TrainingConfig.from_dict(record["training"])
    except (OSError, KeyError, json.JSONDecodeError, ValueError, TypeError) as error:
        raise RunError(f"{run_dir}: not a readable elmokit run folder ({error})") from None
    return model_config, training, record


def _check_resume_compatible(run_dir: Path, model_config: BiLMConfig, training: TrainingConfig, corpus: list[str], vocab_sha: str) -> None:
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
            + ". Fix: resume with the same settings (only max_steps, epochs, checkpoint_every, "
            "keep_checkpoints, log_every may change), or train into a new --out folder."
        )


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
        f"- optimiser: Adagrad lr {training.lr}, initial accumulator {training.initial_accumulator}, "
        f"clip {training.clip_norm}, loss scale {training.loss_scale}; batch "
        + (f"{training.batch_tokens} tokens" if training.batch_tokens else f"{training.batch_size} sentences")
        + f"; seed {training.seed}",
        f"- softmax: {'sampled, ' + str(training.n_negative_samples) + ' negatives' if sampled else 'full'}"
        + (f"; last logged training loss {last_loss:.4f} (perplexity {math.exp(last_loss):.1f}"
           + (", sampled-softmax estimate" if sampled else "") + ")" if last_loss is not None else ""),
        "- command(s):",
        *[f"  - `{c}`" for c in commands],
        "",
    ]
    return "\n".join(lines)


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
    vocabulary = Vocabulary.load(vocab_path)
    vocab_sha = _file_sha256(vocab_path)
    tokenizer = make_tokenizer(training.tokenizer)
    stream = SentenceStream(corpus, tokenizer=tokenizer, max_length=training.max_length,
                            shuffle_buffer=training.shuffle_buffer, seed=training.seed)
    sampled = training.uses_sampled_softmax(len(vocabulary))
    checkpoints = run_dir / "checkpoints"
    exists = (run_dir / "training.json").exists()
    context.barrier()  # every rank has looked before the main rank writes the run's files
    if exists and not resume:
        raise RunError(f"{run_dir}: already holds a run; pass --resume to continue it, or choose another --out")
    if exists:
        _check_resume_compatible(run_dir, model_config, training, corpus, vocab_sha)
    command = command or " ".join(shlex.quote(a) for a in sys.argv)
    record = {
        "format_version": RUN_FORMAT_VERSION,
        "training": training.to_dict(),
        "corpus": stream.describe(),
        "vocabulary": {"source": os.fspath(vocab_path), "size": len(vocabulary), "sha256": vocab_sha},
        "softmax": "sampled" if sampled else "full",
        "world_size": context.world_size,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }
    if context.is_main:
        run_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().isoformat(timespec="seconds")
        with open(run_dir / "command.txt", "a", encoding="utf-8") as handle:
            handle.write(f"{stamp}  world_size={context.world_size}  {command}\n")
        if not exists:
            with atomic_path(run_dir / "config.json") as tmp:
                Path(tmp).write_text(json.dumps(model_config.to_dict(), indent=2) + "\n")
            with atomic_path(run_dir / "training.json") as tmp:
                Path(tmp).write_text(json.dumps(record, indent=2) + "\n")
            vocabulary.save(run_dir / "vocab.txt")
    context.barrier()

    # The model: identical initial weights on every rank (seeded), then per-rank RNG for dropout.
    torch.manual_seed(training.seed)
    model = LanguageModel(model_config, len(vocabulary), bos_id=vocabulary.bos, eos_id=vocabulary.eos)
    init_like_bilm_tf(model, torch.Generator().manual_seed(training.seed))
    model.to(device)
    names = _param_names(model)
    optimizer = torch.optim.Adagrad(
        model.parameters(), lr=training.lr, initial_accumulator_value=training.initial_accumulator, eps=0.0
    )
    torch.manual_seed(training.seed * 1_000_003 + context.rank)

    step, tokens_seen, elapsed_before, position = 0, 0, 0.0, Position()
    ckpt = latest_checkpoint(checkpoints) if resume else None
    if ckpt is not None:
        model_state, state = read_checkpoint(ckpt, optimizer, names)
        model.load_state_dict({k: v.to(device) for k, v in model_state.items()})
        step, tokens_seen = state["step"], state["tokens"]
        elapsed_before = state["elapsed_s"]
        position = Position.from_dict(state["position"])
        if state["world_size"] == context.world_size:
            torch.set_rng_state(decode_rng(state["rng"][context.rank]))
            if device.type == "cuda" and state.get("cuda_rng"):
                torch.cuda.set_rng_state(decode_rng(state["cuda_rng"][context.rank]))
        else:
            logger.warning("resuming %d ranks from a %d-rank checkpoint: dropout masks will differ from an "
                           "uninterrupted run", context.world_size, state["world_size"])
        logger.info("resuming from %s (step %d, %d tokens)", ckpt, step, tokens_seen)
    elif resume:
        logger.info("%s: no checkpoint yet; starting from step 0", run_dir)
    if context.is_main:
        _truncate_metrics(run_dir / "metrics.jsonl", step)
    # for the card, if no step runs in this call
    last_loss = _last_logged_loss(run_dir / "metrics.jsonl") if context.is_main else None

    train_model = model
    if context.enabled:
        import warnings

        from torch.nn.parallel import DistributedDataParallel

        # The char CNN's im2col weight gradients arrive transposed; DDP copies them into its
        # buckets and says so on every step. Harmless (a small copy), so keep the log readable.
        warnings.filterwarnings("ignore", message="Grad strides do not match bucket view strides")
        train_model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    model.train()

    n_params_bilm = sum(p.numel() for p in model.bilm.parameters())
    n_softmax = model.softmax_weight.numel() + model.softmax_bias.numel()
    total = training.max_steps
    bar = _progress_bar(progress and context.is_main, total, step)
    start_time = time.perf_counter()
    window_tokens, window_start = 0, time.perf_counter()
    history: list[dict] = []
    data = batches(stream, start=position, batch_size=None if training.batch_tokens else training.batch_size,
                   batch_tokens=training.batch_tokens)

    def elapsed() -> float:
        return elapsed_before + time.perf_counter() - start_time

    def save(at_step: int) -> None:
        rng = torch.get_rng_state()
        all_rng = context.all_gather_bytes(rng.to(torch.int32), device)
        cuda_rng = None
        if device.type == "cuda":
            cuda_rng = [encode_rng(t.to(torch.uint8)) for t in context.all_gather_bytes(torch.cuda.get_rng_state().to(torch.int32), device)]
        if context.is_main:
            write_checkpoint(
                checkpoints, at_step,
                model_state=model.state_dict(), optimizer=optimizer, param_names=names,
                state={"step": at_step, "tokens": tokens_seen, "position": position.to_dict(), "elapsed_s": elapsed(),
                       "world_size": context.world_size, "rng": [encode_rng(t.to(torch.uint8)) for t in all_rng],
                       "cuda_rng": cuda_rng},
                keep=training.keep_checkpoints,
            )
        context.barrier()

    valid_sentences = None

    def validate(at_step: int) -> None:
        nonlocal valid_sentences
        if context.is_main:
            from itertools import islice

            from elmokit.evaluation.perplexity import perplexity
            from elmokit.text.corpus import Corpus

            if valid_sentences is None:
                corpus_v = Corpus(training.valid_corpus, tokenizer=tokenizer, max_tokens=training.max_length)
                valid_sentences = list(islice(corpus_v, training.valid_sentences))
            rng = torch.get_rng_state()  # evaluation draws nothing, but keep the stream untouched anyway
            began = time.perf_counter()
            result = perplexity(model, vocabulary, valid_sentences, device=device)
            torch.set_rng_state(rng)
            model.train()
            entry = {"step": at_step, "valid_fwd_ppl": result.forward, "valid_bwd_ppl": result.backward,
                     "valid_ppl": result.average, "valid_targets": result.num_targets,
                     "valid_seconds": round(time.perf_counter() - began, 1)}
            history.append(entry)
            with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry) + "\n")
            logger.info("step %d  valid perplexity fwd %.1f bwd %.1f avg %.1f", at_step, result.forward,
                        result.backward, result.average)
        context.barrier()

    last_saved = step
    tokens_at_start, first_step = tokens_seen, step
    while training.max_steps is None or step < training.max_steps:
        batch: Batch = next(data)
        if training.epochs is not None and batch.epoch >= training.epochs:
            break
        if len(batch.sentences) < context.world_size:
            logger.warning("skipping a batch of %d sentences: fewer than the %d ranks", len(batch.sentences), context.world_size)
            position = batch.end
            continue
        step += 1
        loss_value, fwd, bwd, grad_norm = _step(train_model, model, optimizer, batch, vocabulary, training, sampled, step, device, context)
        position = batch.end
        tokens_seen += batch.num_tokens
        window_tokens += batch.num_tokens
        last_loss = loss_value
        if step % training.log_every == 0 or step == training.max_steps:
            now = time.perf_counter()
            entry = {
                "step": step, "epoch": batch.epoch, "loss": loss_value, "ppl": _exp(loss_value),
                "fwd_loss": fwd, "bwd_loss": bwd, "grad_norm": grad_norm, "tokens": tokens_seen,
                "tokens_per_s": window_tokens / max(now - window_start, 1e-9), "elapsed_s": round(elapsed(), 3),
                "softmax": "sampled" if sampled else "full",
            }
            window_tokens, window_start = 0, now
            history.append(entry)
            if context.is_main:
                with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(entry) + "\n")
                if bar is None:  # plain log lines for batch jobs
                    run_s = time.perf_counter() - start_time
                    eta = ""
                    if training.max_steps is not None and step > first_step:
                        left = (training.max_steps - step) * run_s / (step - first_step)
                        eta = f"  ETA {datetime.timedelta(seconds=round(left))}"
                    logger.info("step %d  loss %.4f  ppl %.1f  %.0f tok/s%s", step, loss_value, entry["ppl"],
                                entry["tokens_per_s"], eta)
        if bar is not None:
            bar.update(1)
            rate = (tokens_seen - tokens_at_start) / max(time.perf_counter() - start_time, 1e-9)
            bar.set_postfix(loss=f"{loss_value:.3f}", ppl=f"{_exp(loss_value):.1f}", tok_s=f"{rate:.0f}", refresh=False)
        if training.valid_corpus and step % training.valid_every == 0:
            validate(step)
        if step % training.checkpoint_every == 0:
            save(step)
            last_saved = step
    if bar is not None:
        bar.close()
    if step != last_saved or latest_checkpoint(checkpoints) is None:
        save(step)

    model_dir = None
    if context.is_main:
        model.eval()
        commands = [line.split("  ", 2)[-1] for line in (run_dir / "command.txt").read_text().splitlines() if line.strip()]
        card = _card(model_config, training, record, vocabulary, n_params_bilm, n_softmax, step, tokens_seen,
                     elapsed(), last_loss, commands, sampled)
        model_dir = model.save(run_dir / "model", vocabulary, info={
            "tokenizer": training.tokenizer, "max_length": training.max_length,
            "trained_steps": step, "trained_tokens": tokens_seen,
        }, model_card=card)
    context.barrier()
    return TrainResult(step, tokens_seen, last_loss, run_dir, model_dir, elapsed(), history)


def _exp(x: float) -> float:
    return math.exp(min(x, 700.0))


def _step(train_model, model: LanguageModel, optimizer, batch: Batch, vocabulary: Vocabulary,
          training: TrainingConfig, sampled: bool, step: int, device: torch.device, context: DistributedContext):
    """One optimiser step on this rank's part of the global batch. Returns (mean loss over the
    global batch, forward loss, backward loss, gradient norm before clipping)."""
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
    ((out.forward_nll + out.backward_nll) * scale).backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), training.clip_norm)
    optimizer.step()
    fwd, bwd = context.all_sum([out.forward_nll.item(), out.backward_nll.item()], device)
    return (fwd + bwd) / (2 * global_targets), fwd / global_targets, bwd / global_targets, float(grad_norm)


def _last_logged_loss(path: Path) -> float | None:
    if not path.exists():
        return None
    losses = [e["loss"] for e in map(json.loads, path.read_text(encoding="utf-8").splitlines()) if "loss" in e]
    return losses[-1] if losses else None


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop metric lines past ``step`` (written after the checkpoint a resumed run restarts from)."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= step:
                kept.append(line)
        except (json.JSONDecodeError, KeyError):
            continue  # a line cut by a kill
    with atomic_path(path) as tmp:
        Path(tmp).write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def _progress_bar(enabled: bool, total: int | None, initial: int):
    if not (enabled and sys.stderr.isatty()):
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="step", desc="training", dynamic_ncols=True)


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
