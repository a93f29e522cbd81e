"""Training speed: tokens/s of full training steps, the FLOP/s they imply, and the machine's GEMM rate.

    python benchmarks/bench_training.py                       # small preset, 2 threads
    python benchmarks/bench_training.py --preset small --set lstm_dim=512 --negatives 4096 --threads 1
    python benchmarks/bench_training.py --threads 1 --set lstm_dim=512 --negatives 4096 --lstm-path both --profile
    python benchmarks/bench_training.py --threads 1 --set lstm_dim=512 --negatives 4096 --softmax-update both

``--lstm-path both`` compares the LSTM's two training paths (elmokit.nn.lstm.TRAINING_PATH: the
hand-written BPTT "fused", the per-step autograd loop "autograd") in one invocation: two copies of
the model from the same initial weights, each step's batch run on one then the other (the order
alternating), so that the load of other processes falls on both alike. ``--profile`` adds
torch.profiler's top operators (self CPU time) of one step of each path. ``--softmax-update both``
compares the same way the two Adagrad updates of the sampled softmax: "rows" (what a one-process
`elmokit train` does: only the rows a step touches, lm.py SoftmaxRows) and "dense" (the
whole (V, P) table, as DDP ranks do).

A step is what `elmokit train` does: char ids -> biLM (forward + backward LM) -> sampled (or
full) softmax -> backward -> clip -> Adagrad. Sentences are 20-token pieces of the gutenberg_en
test text (bilm-tf trains on 20-token windows) or, without ../shared, a synthetic Zipfian text;
batches of 64. One warm-up step, then the median of the measured steps.

FLOPs are counted analytically per position (1 multiply-add = 2 FLOP), training = 3 x forward:
char CNN sum_i 2 (50 - w_i + 1) w_i E n_i; highway 2 x 2F^2 per layer; projection 2FP; per LSTM
layer and direction 2 P 4D (input) + 2 P 4D (recurrent) + 2 D P (projection); softmax 2 P (S + 1)
per target and direction (S = V for the full softmax). The token encoder runs on <S> + tokens +
</S> positions, the softmax on tokens + 1 targets per direction; padding is not counted (it is
computed only in the LSTMs). The trainer runs the encoder once per distinct token of a batch,
and only on the character windows that reach a character (elmokit.nn.char_encoder: a window of
padding alone has one value per filter, computed once), so the FLOPs it actually does are fewer
than counted: "model FLOP/s" is the usual convention. The JSON also gives the "executed" count:
the same, with the token encoder's term for the distinct spellings and the windows the trainer
computes (``executed_fraction_of_matmul_rate``), the stricter share. On a machine other processes
share, ``executed_fraction_of_matmul_rate_cpu_time`` divides by this process's CPU seconds instead of
wall seconds, for the steps and the mm rate alike (time the others took from it does not count; their
use of the shared caches and memory still does).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO.parent / "shared"))


def cpu_busy_seconds() -> float:
    """All CPUs' non-idle time so far (from /proc/stat), to see what other processes used."""
    with open("/proc/stat") as handle:
        fields = [float(x) for x in handle.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def machine() -> str:
    """The CPU by name, family and vector extensions, and the kernels torch picks on it: speed
    figures differ between CPUs a 2-vCPU VM is lent (MKL takes its fastest paths on Intel only)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "cpu"
    family = f" (family {fields['cpu family']}, model {fields.get('model', '?')})" if "cpu family" in fields else ""
    flags = set(fields.get("flags", "").split())
    isa = " ".join(f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags) or "-"
    return (f"{platform.machine()} {os.cpu_count()} cpus, {name}{family}, flags: {isa}, "
            f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def matmul_gflops(threads: int, n: int = 2048, repeats: int = 5, clock=time.perf_counter) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        start = clock()
        torch.mm(a, b)
        times.append(clock() - start)
    return 2 * n**3 / min(times) / 1e9


def flops_per_step(config, sentences, negatives: int | None, vocab_size: int) -> dict:
    E, F, P, D, L = config.char_embedding_dim, config.n_filters, config.projection_dim, config.lstm_dim, config.n_layers
    cnn = sum(2 * (50 - w + 1) * w * E * n for w, n in config.filters)
    highway = config.n_highway * 2 * 2 * F * F
    projection = 2 * F * P if config.token_projection else 0
    lstm = 2 * P * 4 * D * 2 + 2 * D * P
    classes = (negatives + 1) if negatives else vocab_size
    positions = sum(len(s) + 2 for s in sentences)
    targets = sum(len(s) + 1 for s in sentences)
    forward = {
        "token_encoder": positions * (cnn + highway + projection),
        "bilstm": positions * 2 * L * lstm,
        "softmax": 2 * targets * 2 * P * classes,
    }
    executed = dict(forward, token_encoder=executed_token_encoder_flops(config, sentences, highway + projection))
    return {"forward": forward, "training": 3 * sum(forward.values()), "executed_training": 3 * sum(executed.values())}


def executed_token_encoder_flops(config, sentences, per_spelling: int) -> int:
    """The char CNN + highway + projection FLOPs the trainer does: each distinct spelling of the
    batch once, in length-sorted groups, each group's windows up to its longest spelling."""
    import elmokit.nn.char_encoder as char_encoder
    from elmokit.text import batch_to_ids

    ids = batch_to_ids(sentences)  # (B, T, 50); padded slots (all-zero rows) are not encoded
    ids = ids.reshape(-1, ids.shape[-1])
    unique = torch.unique(ids[ids.any(dim=1)], dim=0)
    # + the sentence boundaries <S> and </S>, which the model adds: 3 characters each
    lengths = sorted((unique != char_encoder.PADDING_CHAR_ID).sum(dim=1).tolist() + [3, 3], reverse=True)
    total = 0
    for start in range(0, len(lengths), char_encoder._GROUP_SIZE):
        group = lengths[start : start + char_encoder._GROUP_SIZE]
        for width, n in config.filters:
            windows = min(group[0], 50 - width + 1)
            total += len(group) * 2 * windows * width * config.char_embedding_dim * n
    return total + len(lengths) * per_spelling


def sentences_for_benchmark(n: int, length: int) -> list[list[str]]:
    from elmokit.text.corpus import Corpus, Tokenizer

    test = SHARED / "data" / "gutenberg_en" / "test.txt.xz"
    if test.exists():
        tokens: list[str] = []
        for line in Corpus(str(test), tokenizer=Tokenizer(kind="regex")):
            tokens += line
            if len(tokens) >= n * length:
                break
        return [tokens[i : i + length] for i in range(0, n * length, length)]
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(20000)]
    ranks = np.minimum(rng.zipf(1.2, n * length), len(words)) - 1
    return [[words[r] for r in ranks[i : i + length]] for i in range(0, n * length, length)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small", help="architecture (default small)")
    parser.add_argument("--set", action="append", default=[], help="override a model field, e.g. lstm_dim=512")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--vocab-size", type=int, default=50000, help="softmax size (default 50000)")
    parser.add_argument("--negatives", type=int, default=8192, help="sampled-softmax negatives; 0 = full softmax (default 8192)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per step (default 64)")
    parser.add_argument("--length", type=int, default=20, help="tokens per sentence (default 20)")
    parser.add_argument("--steps", type=int, default=6, help="measured steps after one warm-up (default 6)")
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast of the forward pass (as `elmokit train --bf16`)")
    parser.add_argument("--lstm-path", default="fused", choices=["fused", "autograd", "both"],
                        help="LSTM training path (elmokit.nn.lstm.TRAINING_PATH); both = compare them (default fused)")
    parser.add_argument("--softmax-update", default="rows", choices=["rows", "dense", "both"],
                        help="Adagrad on the sampled softmax's touched rows (one process's trainer) or on the "
                             "whole table (DDP's); both = compare them (default rows)")
    parser.add_argument("--profile", action="store_true", help="print the top operators of one extra step of each path")
    parser.add_argument("--json", default=None, help="also write the result here")
    args = parser.parse_args()

    from elmokit.bilm import PRESETS
    from elmokit.lm import Candidates, LanguageModel, init_like_bilm_tf
    from elmokit.text.chars import batch_to_ids
    from elmokit.training.trainer import _differentiate_and_update

    torch.set_num_threads(args.threads)
    config = PRESETS[args.preset]
    for item in args.set:
        key, _, value = item.partition("=")
        config = config.replace(**{key: json.loads(value)})
    import elmokit.nn.lstm as lstm_module

    if args.lstm_path == "both" and args.softmax_update == "both":
        parser.error("compare the LSTM paths or the softmax updates, not both at once")
    if args.lstm_path == "both":  # variant name -> (LSTM training path, softmax update)
        variants = {path: (path, args.softmax_update) for path in ("autograd", "fused")}
    elif args.softmax_update == "both":
        variants = {update: (args.lstm_path, update) for update in ("dense", "rows")}
    else:
        variants = {args.lstm_path: (args.lstm_path, args.softmax_update)}
    paths = list(variants)
    runners = {}
    for path in paths:
        model = LanguageModel(config, args.vocab_size)
        init_like_bilm_tf(model, torch.Generator().manual_seed(0))
        model.train()
        model.row_sparse_softmax = variants[path][1] == "rows"
        optimizer = torch.optim.Adagrad(model.parameters(), lr=0.2, initial_accumulator_value=1.0, eps=0.0)
        runners[path] = (model, optimizer)
    sentences = sentences_for_benchmark(args.batch_size * (args.steps + 1), args.length)
    vocabulary: dict[str, int] = {}
    for s in sentences:
        for t in s:
            vocabulary.setdefault(t, 3 + len(vocabulary) % (args.vocab_size - 3))

    def training_step(path, step, batch):
        model, optimizer = runners[path]
        lstm_module.TRAINING_PATH = variants[path][0]
        torch.manual_seed(step)  # the same dropout masks for both paths: their losses agree to rounding
        char_ids = batch_to_ids(batch)
        word_ids = torch.tensor([[vocabulary[t] for t in s] for s in batch])
        candidates = Candidates.draw(args.vocab_size, args.negatives, seed=0, step=step) if args.negatives else None
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            out = model(char_ids, word_ids, candidates=candidates)
        loss = out.loss.item()  # the trainer's own backward, clip 10 and Adagrad update
        _differentiate_and_update(model, optimizer, out.loss * 20.0, 10.0, loss, loss, loss)
        return loss

    gemm_before = matmul_gflops(args.threads)
    gemm_cpu_before = matmul_gflops(args.threads, clock=time.process_time)
    times = {path: [] for path in paths}
    cpu_times = {path: [] for path in paths}
    losses = {path: [] for path in paths}
    flops, tokens = [], []
    busy0, own0, wall0 = cpu_busy_seconds(), own_cpu_seconds(), time.perf_counter()
    for step in range(args.steps + 1):
        batch = sentences[step * args.batch_size : (step + 1) * args.batch_size]
        for path in paths if step % 2 == 0 else paths[::-1]:
            start, start_cpu = time.perf_counter(), time.process_time()
            loss = training_step(path, step, batch)
            times[path].append(time.perf_counter() - start)
            cpu_times[path].append(time.process_time() - start_cpu)
            losses[path].append(loss)
        if step == 0:
            busy0, own0, wall0 = cpu_busy_seconds(), own_cpu_seconds(), time.perf_counter()
            continue
        tokens.append(sum(len(s) for s in batch))
        flops.append(flops_per_step(config, batch, args.negatives or None, args.vocab_size))
    wall = time.perf_counter() - wall0
    others = max(0.0, (cpu_busy_seconds() - busy0) - (own_cpu_seconds() - own0)) / wall
    gemm_after = matmul_gflops(args.threads)
    gemm = (gemm_before + gemm_after) / 2
    gemm_cpu = (gemm_cpu_before + matmul_gflops(args.threads, clock=time.process_time)) / 2
    step_flops = statistics.median(f["training"] for f in flops)
    executed_flops = statistics.median(f["executed_training"] for f in flops)

    def summary(path):
        measured = times[path][1:]
        median = statistics.median(measured)
        return {
            "step_s_median": median,
            "step_s_all": measured,
            "tokens_per_s": statistics.median(t / s for t, s in zip(tokens, measured)),
            "model_gflop_per_s": step_flops / median / 1e9,
            "fraction_of_matmul_rate": step_flops / median / 1e9 / gemm,
            "executed_gflop_per_s": executed_flops / median / 1e9,
            "executed_fraction_of_matmul_rate": executed_flops / median / 1e9 / gemm,
            "step_cpu_s_median": statistics.median(cpu_times[path][1:]),
            "executed_fraction_of_matmul_rate_cpu_time": executed_flops / statistics.median(cpu_times[path][1:]) / 1e9 / gemm_cpu,
            "losses": losses[path],
        }

    model = runners[paths[0]][0]
    result = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "torch": torch.__version__,
        "threads": args.threads,
        "command": "python " + " ".join([os.path.relpath(__file__, REPO)] + sys.argv[1:]),
        "config": config.to_dict(),
        "vocab_size": args.vocab_size,
        "softmax": f"sampled-{args.negatives}" if args.negatives else "full",
        "bf16_autocast": args.bf16,
        "batch": f"{args.batch_size} x {args.length} tokens",
        "parameters_bilm": sum(p.numel() for p in model.bilm.parameters()),
        "parameters_softmax": model.softmax_weight.numel() + model.softmax_bias.numel(),
        "lstm_path": args.lstm_path,
        "softmax_update": args.softmax_update if args.negatives else "dense (full softmax)",
        "training_mflop_per_token": step_flops / statistics.median(tokens) / 1e6,
        "executed_training_mflop_per_token": executed_flops / statistics.median(tokens) / 1e6,
        "forward_mflop_per_token_by_part": {k: v / statistics.median(tokens) / 1e6 for k, v in flops[0]["forward"].items()},
        "matmul_gflop_per_s": gemm,
        "matmul_gflop_per_s_before_after": [gemm_before, gemm_after],
        "matmul_gflop_per_cpu_s": gemm_cpu,
        "other_processes_cpus": others,
    }
    if len(paths) == 1:
        result.update(summary(paths[0]))
    else:
        result["paths"] = {path: summary(path) for path in paths}
        slow, fast = paths  # ("autograd", "fused") or ("dense", "rows")
        ratios = [a / f for a, f in zip(times[slow][1:], times[fast][1:])]
        result[f"{fast}_speedup_median_of_step_ratios"] = statistics.median(ratios)
        result[f"{fast}_speedup_ratio_of_median_tokens_per_s"] = (
            result["paths"][fast]["tokens_per_s"] / result["paths"][slow]["tokens_per_s"])
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        batch = sentences[: args.batch_size]
        for path in paths:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                training_step(path, 0, batch)
            print(f"--- profile of one step, {path} (LSTM path, softmax update: {variants[path]})")
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
