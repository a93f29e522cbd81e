"""`elmokit pretrain`'s step against HF ``Trainer`` + ``DataCollatorForLanguageModeling`` on the same model,
the same corpus slice and the same examples: tokens per CPU-second and per wall second, the ratio
elmokit / Trainer, and each speed lever's share.

    python benchmarks/pretrain_vs_trainer.py --model gpt2 --threads 2      # GPT-2 causal LM, preset mini
    python benchmarks/pretrain_vs_trainer.py --model roberta --threads 2   # RoBERTa-style MLM 15%, preset mini
    python benchmarks/pretrain_vs_trainer.py --smoke                       # seconds: tiny, to a temp dir

What runs. One corpus slice (the first ``--corpus-words`` words of gutenberg_en ``train.00``, as in
``pretrain_speed.py``), one tokenizer trained on it, and one model config (``--preset``, the same seed, so
the same initial weights) for all variants:

- ``trainer``: ``transformers.Trainer`` with ``DataCollatorForLanguageModeling`` (``mlm_probability`` 0.15
  for the masked LM, ``mlm=False`` for the causal LM: the model's own loss on all positions), AdamW
  (``adamw_torch``, the default), linear schedule, grad clipping 1.0, fed the very examples
  `elmokit pretrain` feeds (its ``ExampleStream`` of the run, in its order: a sequential sampler),
  offline, ``report_to="none"``, no evaluation, no saving, no tqdm; a step is the Trainer's own loop
  (fetch + collate + forward + backward + clip + AdamW + schedule), timed from a callback.
- ``elmokit``: `elmokit pretrain`'s step as it ships (``_PretrainRun._step``: masks drawn, forward, loss,
  backward, clip, AdamW), as ``pretrain_speed.py`` drives it.
- ``elmokit-base`` (causal only; what the step was before the levers): the loss on ``logits[:, :-1]`` (a
  sliced copy) and transformers' seven-op ``gelu_new`` for GPT-2, torch's own (MKL) products. Each of these
  adds one lever to it: ``elmokit-loss``: the loss on the logits with shifted targets (no copy, bit-equal);
  ``elmokit-fused-ce``: the tied LM head and the cross-entropy as one autograd function
  (``heads.linear_cross_entropy``, in its first form: fresh N x V buffers each step); ``elmokit-gelu``
  (GPT-2): ``gelu_new`` as one kernel (``pretraining/fused.py``). Their distance to ``elmokit-base`` is each
  lever's share.
- Levers taken out of the step as shipped, one each: ``elmokit-no-onednn``: the linear layers' and the fused
  head's products by torch's own ops (MKL) instead of oneDNN (``fused.linear``); ``elmokit-no-buffer``
  (causal): the fused head allocating its N x V logits and log-probabilities afresh each step (and zeroing
  the ignored rows by a pass over all of it) instead of one buffer reused, log-softmax in place;
  ``elmokit-previous`` (causal): both taken out (the step as it was before them; for the masked LM
  ``elmokit-no-onednn`` is that step). Their distance to ``elmokit`` is each lever's share.
- Levers measured and not shipped, each added to the step as shipped: ``elmokit-foreach``: foreach AdamW and
  gradient clipping (bit-equal to torch's per-tensor CPU default); ``elmokit-fused`` (only when named in
  ``--variants``): torch's fused CPU AdamW (not bit-equal: ~1 ulp a step).
- ``elmokit-stock-head`` (masked only): as shipped but the model's own MLM loss over all B x T positions,
  the share of the masked-rows-only head.

Repeats: all variants are built first; then round after round each runs ``--steps`` steps, the order
rotating every round (the first ``--warmup`` rounds are not counted): a loaded machine weighs on all
alike. The figures are medians over rounds; only their RATIOS mean anything on a shared machine, the
absolute speeds are the machine's at that load (the record keeps the load average and the other
processes' CPU share). Seconds to a fixed loss are not measured (too long for a benchmark here); the
last loss of each variant after the same number of steps is recorded as a sanity check.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_training import cpu_busy_seconds  # noqa: E402
from pretrain_speed import SOURCE, Variant, build_corpus, train_tokenizers  # noqa: E402

MODELS = {"gpt2": "gpt2", "roberta": "roberta", "gpt": "gpt"}  # --model -> elmokit objective
CAUSAL = {"gpt2", "gpt"}


def log(*parts) -> None:
    print(time.strftime("%H:%M:%S"), *parts, file=sys.stderr, flush=True)


def machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def cpu_details() -> dict:
    """The CPU's vendor, family and model, its vector instruction sets, and torch's kernel capability: the
    oneDNN lever depends on them (MKL's SGEMM takes its AVX2 path on CPUs other than Intel's)."""
    info: dict = {"torch_cpu_capability": torch.backends.cpu.get_cpu_capability()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key in ("vendor_id", "cpu family", "model") and key not in info:
                info[key] = value
            elif key == "flags" and "flags" not in info:
                info["flags"] = sorted(f for f in value.split() if f.startswith(("avx", "fma", "amx")))
    except OSError:
        pass
    return info


# ---- the step as it was before the levers (for the shares) ------------------------------------------


def sliced_causal_loss(model, batch):
    """The causal LM loss on ``logits[:, :-1]`` (a copy of B x (T-1) x V floats): the step before the lever."""
    from elmokit.pretraining.masking import IGNORE_INDEX
    from elmokit.pretraining.objectives import ObjectiveLoss

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)
    n = int((targets != IGNORE_INDEX).sum())
    return ObjectiveLoss(loss, {"lm": float(loss.detach())}, n, int(batch["attention_mask"].sum()))


def logits_causal_loss(model, batch):
    """The causal LM loss on the model's (B, T, V) logits with shifted targets (``heads.causal_lm_loss``): the
    loss lever without the fused head."""
    from elmokit.pretraining.heads import causal_lm_loss
    from elmokit.pretraining.objectives import ObjectiveLoss

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    lm = causal_lm_loss(logits, batch["labels"])
    return ObjectiveLoss(lm.mean, {"lm": float(lm.mean.detach())}, lm.count, int(batch["attention_mask"].sum()))


class FreshBufferHead(torch.autograd.Function):
    """``heads._LinearCrossEntropy`` before the buffer lever: the logits and the log-softmax each in a fresh
    (N, V) tensor, the ignored rows zeroed by a masked pass over all N x V (the backward's products as shipped:
    ``fused.mm_t`` / ``fused.weight_grad``, torch's own ops when oneDNN is off)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets):
        from elmokit.pretraining.masking import IGNORE_INDEX

        log_probs = torch.log_softmax(hidden @ weight.t(), dim=1)
        ignored = targets == IGNORE_INDEX
        safe = targets.masked_fill(ignored, 0).unsqueeze(1)
        losses = -log_probs.gather(1, safe).squeeze(1).masked_fill(ignored, 0.0)
        grad = log_probs.exp_()
        grad.scatter_add_(1, safe, torch.full((grad.size(0), 1), -1.0, dtype=grad.dtype))
        if bool(ignored.any()):
            grad.masked_fill_(ignored.unsqueeze(1), 0.0)
        ctx.save_for_backward(hidden, weight, grad)
        return losses.sum()

    @staticmethod
    def backward(ctx, upstream):
        from elmokit.pretraining.fused import mm_t, weight_grad

        hidden, weight, grad = ctx.saved_tensors
        return mm_t(grad, weight.t()) * upstream, weight_grad(hidden, grad) * upstream, None


def fresh_buffer_causal_loss(model, batch):
    """`elmokit pretrain`'s causal loss (base model + fused tied head) with ``FreshBufferHead``."""
    from elmokit.pretraining.heads import next_token_targets
    from elmokit.pretraining.objectives import ObjectiveLoss

    hidden = model.base_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]
    targets = next_token_targets(batch["labels"]).reshape(-1)
    total = FreshBufferHead.apply(hidden.reshape(-1, hidden.size(-1)), model.get_output_embeddings().weight, targets)
    n = int((targets != -100).sum())
    loss = total / max(n, 1)
    return ObjectiveLoss(loss, {"lm": float(loss.detach())}, n, int(batch["attention_mask"].sum()))


def stock_mlm_loss(model, batch):
    """The masked LM loss as transformers computes it: the head on all B x T positions, -100 ignored."""
    from elmokit.pretraining.objectives import ObjectiveLoss

    loss = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss
    return ObjectiveLoss(loss, {"mlm": float(loss.detach())}, int((batch["labels"] != -100).sum()),
                         int(batch["attention_mask"].sum()))


_real_clip = torch.nn.utils.clip_grad_norm_
CLIP_FOREACH = {"value": None}


def _clip(parameters, max_norm, *args, foreach=None, **kwargs):
    """``clip_grad_norm_`` with the current elmokit variant's foreach setting (None: torch's default, the run's)."""
    return _real_clip(parameters, max_norm, *args, foreach=CLIP_FOREACH["value"], **kwargs)


# ---- the variants --------------------------------------------------------------------------------


class Elmokit:
    """One `elmokit pretrain` run object with some levers switched, stepped a few steps at a time."""

    def __init__(self, name: str, objective: str, preset: str, corpus: Path, tokenizer: Path, args, run_dir: Path,
                 *, sliced_loss=False, logits_loss=False, foreach=False, fused=False, stock_head=False,
                 gelu_new=False, fresh_buffer=False, onednn=True):
        from pretrain_speed import Timed

        class Options:
            max_tokens, batch_size, seed = args.max_tokens, args.batch_size, args.seed

        self.name = name
        self.timed = Timed(Variant(name, objective), preset, corpus, {"gpt2": tokenizer, "roberta": tokenizer,
                                                                      "wordpiece": tokenizer}, Options, run_dir)
        run = self.timed.run
        run.need_flops = False
        if gelu_new:  # transformers' own seven-op gelu_new back in the blocks
            from transformers.activations import NewGELUActivation

            for block in run.model.transformer.h:
                block.mlp.act = NewGELUActivation()
        if sliced_loss:
            run.objective.loss = sliced_causal_loss
        if logits_loss:
            run.objective.loss = logits_causal_loss
        if stock_head:
            run.objective.loss = stock_mlm_loss
        if fresh_buffer:
            run.objective.loss = fresh_buffer_causal_loss
        self.onednn = onednn
        if foreach or fused:
            groups = [{"params": g["params"], "weight_decay": g["weight_decay"]} for g in run.optimizer.param_groups]
            config = run.config
            run.optimizer = torch.optim.AdamW(groups, lr=config.lr, betas=(0.9, config.beta2), eps=config.eps,
                                              **({"fused": True} if fused else {"foreach": True}))
        self.clip_foreach = True if foreach else None
        self.rounds: list[dict] = []

    def steps(self, n: int) -> dict:
        from elmokit.pretraining.fused import ONEDNN

        CLIP_FOREACH["value"] = self.clip_foreach
        ONEDNN["enabled"] = self.onednn  # the run's linear layers were switched to fused.linear when it was built
        # the run's own clocks around its steps (process CPU time, as for the Trainer); tokenising the
        # corpus when the stream opens a shard is not a step (the Trainer gets the examples tokenised)
        return self.timed.steps(n)


class TrainerVariant:
    """HF Trainer in a worker thread, paused by a callback every ``steps`` optimizer steps (cooperative: one
    runs at a time, so process CPU time over a round is the Trainer's)."""

    def __init__(self, objective: str, preset: str, examples: list, tokenizer_dir: Path, args, out: Path, total_steps: int):
        from transformers import DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments

        from elmokit.pretraining.models import build_model, special_ids
        from elmokit.pretraining.registry import OBJECTIVES
        from elmokit.text.subword_tokenizers import load_tokenizer

        self.name, self.rounds, self.threads = "trainer", [], args.threads
        spec = OBJECTIVES[objective]
        tokenizer = load_tokenizer(tokenizer_dir)
        if tokenizer.pad_token is None:  # GPT-2's BPE: pad with the end token (its labels become -100)
            tokenizer.pad_token = tokenizer.eos_token
        model = build_model(spec.family, preset, vocab_size=len(tokenizer), seed=args.seed, **special_ids(tokenizer))
        collator = DataCollatorForLanguageModeling(tokenizer, mlm=objective not in CAUSAL, mlm_probability=0.15)
        self.dataset = [{"input_ids": [int(i) for i in e["input_ids"]]} for e in examples]
        self.batch_tokens = [sum(len(e["input_ids"]) for e in self.dataset[i:i + args.batch_size])
                             for i in range(0, len(self.dataset), args.batch_size)]
        self.steps_each, self.done_steps, self.losses = args.steps, 0, []
        self.go, self.paused, self.failed = threading.Event(), threading.Event(), None
        owner = self

        class Pause(TrainerCallback):
            def on_train_begin(self, targs, state, control, **kwargs):
                owner._pause()

            def on_step_end(self, targs, state, control, **kwargs):
                if state.global_step % owner.steps_each == 0:
                    owner._pause()

            def on_log(self, targs, state, control, logs=None, **kwargs):
                if logs and "loss" in logs:
                    owner.losses.append(float(logs["loss"]))

        class Sequential(Trainer):  # the examples in elmokit's order, not reshuffled
            def _get_train_sampler(self, train_dataset=None):
                return torch.utils.data.SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

        targs = TrainingArguments(
            output_dir=str(out), per_device_train_batch_size=args.batch_size, max_steps=total_steps,
            learning_rate=5e-4, weight_decay=0.01, adam_beta2=0.999, adam_epsilon=1e-6, warmup_steps=10,
            max_grad_norm=1.0, lr_scheduler_type="linear", report_to="none", save_strategy="no", eval_strategy="no",
            logging_strategy="steps", logging_steps=args.steps, disable_tqdm=True, use_cpu=True,
            dataloader_pin_memory=False, dataloader_num_workers=0, seed=args.seed)
        self.trainer = Sequential(model=model, args=targs, train_dataset=self.dataset, data_collator=collator,
                                  callbacks=[Pause()])
        from transformers.trainer_callback import PrinterCallback

        self.trainer.remove_callback(PrinterCallback)  # no log lines on stdout
        self.thread = threading.Thread(target=self._train, daemon=True)
        self.thread.start()
        self.paused.wait()  # set up and at on_train_begin

    def _train(self):
        torch.set_num_threads(self.threads)  # OpenMP's thread count is per calling thread
        try:
            self.trainer.train()
        except BaseException as error:  # noqa: BLE001  (reported by the main thread)
            self.failed = error
        finally:
            self.paused.set()

    def _pause(self):
        self.paused.set()
        self.go.wait()
        self.go.clear()

    def steps(self, n: int) -> dict:
        assert n == self.steps_each
        self.paused.clear()
        before_cpu, before_wall = time.process_time(), time.perf_counter()
        self.go.set()
        self.paused.wait()
        cpu, wall = time.process_time() - before_cpu, time.perf_counter() - before_wall
        if self.failed:
            raise RuntimeError(f"Trainer failed: {self.failed!r}")
        tokens = sum(self.batch_tokens[self.done_steps:self.done_steps + n])
        self.done_steps += n
        return {"steps": n, "cpu_s": cpu, "wall_s": wall, "tokens": tokens,
                "loss": self.losses[-1] if self.losses else None}

    def finish(self):
        self.go.set()
        self.thread.join(timeout=60)


def summarise(rounds: list[dict]) -> dict:
    per_cpu = [r["tokens"] / r["cpu_s"] for r in rounds]
    per_wall = [r["tokens"] / r["wall_s"] for r in rounds]
    return {"tokens_per_cpu_s": statistics.median(per_cpu), "tokens_per_wall_s": statistics.median(per_wall),
            "tokens_per_cpu_s_min_max": [min(per_cpu), max(per_cpu)],
            "step_wall_s": statistics.median(r["wall_s"] / r["steps"] for r in rounds),
            "step_cpu_s": statistics.median(r["cpu_s"] / r["steps"] for r in rounds),
            "tokens_per_batch": sum(r["tokens"] for r in rounds) / sum(r["steps"] for r in rounds),
            "last_loss": rounds[-1]["loss"], "rounds": rounds}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(MODELS), default="gpt2", help="gpt2/gpt: causal LM; roberta: MLM 15%%")
    parser.add_argument("--preset", default="mini", help="model preset (tiny, mini, small)")
    parser.add_argument("--variants", default=None, help="comma-separated (default: all that apply to --model)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--corpus-words", type=int, default=60_000)
    parser.add_argument("--warmup", type=int, default=1, help="rounds not counted")
    parser.add_argument("--repeats", type=int, default=5, help="counted rounds (medians reported)")
    parser.add_argument("--steps", type=int, default=2, help="steps of each variant per round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="JSON record (default: docs/benchmarks/pretrain_vs_trainer_"
                                                    "MODEL_PRESET_tTHREADS.json)")
    parser.add_argument("--smoke", action="store_true", help="seconds: preset tiny, small slice, 1+1 rounds, temp dir")
    args = parser.parse_args(argv)
    if args.smoke:
        args.preset, args.corpus_words, args.vocab_size, args.batch_size = "tiny", 8000, 500, 4
        args.warmup, args.repeats, args.steps, args.max_tokens = 1, 1, 1, 32
    if not SOURCE.exists():
        sys.exit(f"{SOURCE}: not found; the benchmark reads the gutenberg_en corpus of the shared data folder "
                 "(set ELMOKIT_SHARED)")
    objective = MODELS[args.model]
    causal = args.model in CAUSAL
    known = (["trainer", "elmokit-base", "elmokit-loss", "elmokit-fused-ce"] + (["elmokit-gelu"] if args.model == "gpt2" else [])
             + ["elmokit-previous", "elmokit", "elmokit-no-onednn", "elmokit-no-buffer", "elmokit-foreach", "elmokit-fused"]
             if causal else ["trainer", "elmokit-base", "elmokit", "elmokit-no-onednn", "elmokit-foreach", "elmokit-fused",
                             "elmokit-stock-head"])
    names = args.variants.split(",") if args.variants else [n for n in known if n != "elmokit-fused"]
    if not causal and not args.variants:
        names = [n for n in names if n != "elmokit-base"]  # the masked LM's step has no lever of this file's before it
    if [n for n in names if n not in known]:
        parser.error(f"unknown variants; for --model {args.model}: {', '.join(known)}")
    torch.set_num_threads(args.threads)
    torch.nn.utils.clip_grad_norm_ = _clip
    from elmokit.io import atomic_path
    from elmokit.pretraining.registry import OBJECTIVES

    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="pretrain_vs_trainer_") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        corpus = build_corpus(work / "corpus", SOURCE, args.corpus_words, 40, 6)
        kind = OBJECTIVES[objective].tokenizer
        tokenizer = train_tokenizers({kind}, work / "corpus", work / "tokenizers", args.vocab_size, args.max_tokens)[kind]
        total = (args.warmup + args.repeats) * args.steps
        gelu = args.model == "gpt2"
        # the rows before the levers of this file run as the step was then: torch's (MKL) products, the head's
        # fresh N x V buffers
        before = dict(onednn=False, fresh_buffer=causal)
        levers = {"elmokit-base": dict(sliced_loss=causal, gelu_new=gelu, onednn=False),
                  "elmokit-loss": dict(logits_loss=True, gelu_new=gelu, onednn=False),
                  "elmokit-fused-ce": dict(gelu_new=gelu, **before),
                  "elmokit-gelu": dict(sliced_loss=True, onednn=False), "elmokit": {},
                  "elmokit-previous": before, "elmokit-no-onednn": dict(onednn=False),
                  "elmokit-no-buffer": dict(fresh_buffer=True),
                  "elmokit-foreach": dict(foreach=True), "elmokit-fused": dict(fused=True),
                  "elmokit-stock-head": dict(stock_head=True)}
        variants = []
        for name in names:
            log(f"building {name}")
            if name == "trainer":
                feeder = Elmokit("feeder", objective, args.preset, work / "corpus", tokenizer, args, work / "feeder")
                batches = feeder.timed.batches
                examples = [e for _ in range(total) for e in next(batches)[0][0]]
                variants.append(TrainerVariant(objective, args.preset, examples, tokenizer, args, work / "trainer", total))
            else:
                variants.append(Elmokit(name, objective, args.preset, work / "corpus", tokenizer, args, work / name,
                                        **levers[name]))
        busy_before, own_before, wall_before = cpu_busy_seconds(), time.process_time(), time.perf_counter()
        for round_ in range(args.warmup + args.repeats):
            order = variants[round_ % len(variants):] + variants[:round_ % len(variants)]
            for v in order:
                result = v.steps(args.steps)
                if round_ >= args.warmup:
                    v.rounds.append(result)
            log(f"round {round_ + 1}/{args.warmup + args.repeats}" + (" (warm-up)" if round_ < args.warmup else ""))
        wall = time.perf_counter() - wall_before
        others = (cpu_busy_seconds() - busy_before - (time.process_time() - own_before)) / wall
        for v in variants:
            if isinstance(v, TrainerVariant):
                v.finish()
        results = {v.name: summarise(v.rounds) for v in variants}
        ratios = {}
        if "trainer" in results:
            trainer = {v.name: v for v in variants}["trainer"]
            for v in variants:
                if v.name == "trainer":
                    continue
                paired = [(a["tokens"] / a["cpu_s"]) / (b["tokens"] / b["cpu_s"]) for a, b in zip(v.rounds, trainer.rounds)]
                ratios[v.name] = {
                    "per_cpu_s": results[v.name]["tokens_per_cpu_s"] / results["trainer"]["tokens_per_cpu_s"],
                    "per_wall_s": results[v.name]["tokens_per_wall_s"] / results["trainer"]["tokens_per_wall_s"],
                    "median_of_paired_round_ratios_cpu": statistics.median(paired)}
        import transformers

        given = list(argv if argv is not None else sys.argv[1:])
        record = {
            "command": "python " + " ".join([os.path.relpath(__file__, REPO), *given]),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(), "cpu": cpu_details(), "cpus": os.cpu_count(), "threads": args.threads,
            "torch": torch.__version__,
            "transformers": transformers.__version__, "model": args.model, "objective": objective, "preset": args.preset,
            "corpus": corpus, "tokenizer": kind, "vocab_size": args.vocab_size,
            "batch": {"examples": args.batch_size, "max_tokens": args.max_tokens},
            "rounds": {"warmup": args.warmup, "counted": args.repeats, "steps_each": args.steps},
            "load": {"loadavg_before": load_before, "loadavg_after": os.getloadavg(), "other_processes_cpus": others,
                     "note": "the machine was shared with other work: only the ratios between variants of this run mean "
                             "anything; absolute speeds are this load's"},
            "clock": "process CPU time (all threads) and wall time of each variant's steps; tokens: non-padding input tokens",
            "seconds_to_fixed_loss": "not measured (too long for a benchmark on this machine)",
            "variants": results, "ratio_to_trainer": ratios, "total_wall_s": time.perf_counter() - started,
        }
        out = Path(args.out) if args.out else (work / "record.json" if args.smoke else
                                               REPO / "docs" / "benchmarks" /
                                               f"pretrain_vs_trainer_{args.model}_{args.preset}_t{args.threads}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(out) as tmp_out:
            Path(tmp_out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
        print(f"{args.model} {args.preset}, {args.threads} thread(s), other processes {others:.2f} CPUs busy, "
              f"load {load_before[0]:.2f}")
        print("| variant | tokens / CPU-s | tokens / wall s | x Trainer (CPU-s) | x Trainer (wall) | last loss |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, r in results.items():
            ratio = ratios.get(name, {})
            loss = f"{r['last_loss']:.3f}" if r["last_loss"] is not None else "—"
            print(f"| {name} | {r['tokens_per_cpu_s']:,.0f} | {r['tokens_per_wall_s']:,.0f} | "
                  + (f"{ratio['per_cpu_s']:.2f} | {ratio['per_wall_s']:.2f}" if ratio else "1 | 1") + f" | {loss} |")
        log(f"wrote {out}")


if __name__ == "__main__":
    main()
