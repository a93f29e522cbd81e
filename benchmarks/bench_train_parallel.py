"""Both cores for training (issue 14): one process on one thread, one process on two threads, and two
processes of one thread each under torchrun, each running `elmokit train` on the same corpus, vocabulary,
model shape and global batch. Tokens/s from each run's own metrics.jsonl.

    python benchmarks/bench_train_parallel.py                 # the default model's shape, 3 rounds
    python benchmarks/bench_train_parallel.py --rounds 1 --steps 12 --json docs/benchmarks/train_parallel.json

The shape is the shipped default's (`--preset small --set lstm_dim=512 --negatives 4096`, 64 sentences of
at most 40 regex tokens). The corpus is the first ``--lines`` lines of gutenberg_en ``train.00``, the
vocabulary its 50,000 most frequent tokens (built once). Under torchrun every rank builds the same global
batch and trains on half of it (docs/training.md, "Data parallelism"), so the three configurations do the
same work per step (the fourth doubles the global batch, so each rank runs the single process's 64 sentences:
weak scaling, as data parallelism is usually run); tokens/s is the tokens of the steps after the first ``--skip`` (start-up, first
allocations) over their wall time, read from ``tokens`` and ``elapsed_s`` of metrics.jsonl. The configurations
run one after the other, in an order that rotates each round, so a change in the machine's load falls on each
alike; the median over the rounds is reported, with every round's value in the JSON. On a machine shared with
other work the two-core numbers say little: a step waits for its slowest thread or rank.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO.parent / "shared"))
SHAPE = ["--preset", "small", "--set", "lstm_dim=512", "--negatives", "4096", "--tokenizer", "regex",
         "--max-length", "40"]
TORCHRUN = ["torchrun", "--standalone", "--nproc_per_node", "2"]
# name -> (launcher prefix, --threads per process, global sentences per step)
CONFIGS = {
    "1 process x 1 thread": ([], 1, 64),
    "1 process x 2 threads": ([], 2, 64),
    "2 processes x 1 thread (torchrun, gloo)": (TORCHRUN, 1, 64),
    # weak scaling, as data parallelism is usually run: each rank keeps the single process's 64 sentences
    "2 processes x 1 thread, 64 sentences each (global batch 128)": (TORCHRUN, 1, 128),
}


def other_cpus(seconds: float) -> tuple[float, float]:
    """(busy CPUs of the whole machine, over ``seconds``) from /proc/stat; (nan, nan) elsewhere."""
    def read():
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return sum(values), values[3] + values[4]
    try:
        total0, idle0 = read()
        time.sleep(seconds)
        total1, idle1 = read()
    except OSError:
        return float("nan"), float("nan")
    return (1 - (idle1 - idle0) / max(total1 - total0, 1)) * os.cpu_count(), seconds


def throughput(metrics: Path, skip: int) -> dict:
    rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines() if line.strip()]
    steps = [r for r in rows if "loss" in r]
    first, last = steps[skip - 1], steps[-1]
    return {"steps": last["step"] - first["step"], "tokens": last["tokens"] - first["tokens"],
            "seconds": round(last["elapsed_s"] - first["elapsed_s"], 3),
            "tokens_per_s": (last["tokens"] - first["tokens"]) / (last["elapsed_s"] - first["elapsed_s"]),
            "losses": [round(r["loss"], 4) for r in steps]}


def run_config(name: str, work: Path, corpus: Path, vocab: Path, args) -> dict:
    launcher, threads, batch = CONFIGS[name]
    out = work / f"run_{time.monotonic_ns()}"
    command = (["elmokit", "train"] if not launcher else [*launcher, "-m", "elmokit.cli.main", "train"]) + [
        "--corpus", str(corpus), "--vocab", str(vocab), *SHAPE, "--batch-size", str(batch),
        "--max-steps", str(args.steps), "--log-every", "1",
        "--checkpoint-every", "1000000", "--seed", "0", "--threads", str(threads), "--out", str(out)]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    started = time.perf_counter()
    subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    result = throughput(out / "metrics.jsonl", args.skip) | {"wall_s": round(time.perf_counter() - started, 1),
                                                              "command": " ".join(command[:-2] + ["--out", "RUN"])
                                                              .replace(str(corpus), "CORPUS").replace(str(vocab), "VOCAB")}
    shutil.rmtree(out, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the configurations (default: 3)")
    parser.add_argument("--configs", default=None, help="comma-separated indices of CONFIGS to run (default: all)")
    parser.add_argument("--steps", type=int, default=14, help="training steps per run (default: 14)")
    parser.add_argument("--skip", type=int, default=4, help="first steps left out of the rate (default: 4)")
    parser.add_argument("--lines", type=int, default=20_000, help="corpus lines of train.00 (default: 20000)")
    parser.add_argument("--json", default=None, help="also write the result here")
    args = parser.parse_args(argv)
    if not 0 < args.skip < args.steps:
        parser.error("--skip must be at least 1 and below --steps")
    source = SHARED / "data" / "gutenberg_en" / "train.00.txt.xz"
    if not source.exists():
        print(f"error: {source} not found (../shared beside the checkout, or ELMOKIT_SHARED)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="train_parallel_"))
    corpus, vocab = work / "corpus.txt", work / "vocab.txt"
    with lzma.open(source, "rt", encoding="utf-8") as f, open(corpus, "w", encoding="utf-8") as out:
        for _, line in zip(range(args.lines), f):
            out.write(line)
    subprocess.run(["elmokit", "vocab", "--corpus", str(corpus), "--tokenizer", "regex", "--max-size", "50000",
                    "--out", str(vocab)], check=True, stdout=subprocess.DEVNULL)
    busy_before, _ = other_cpus(3.0)
    names = list(CONFIGS) if args.configs is None else [list(CONFIGS)[int(i)] for i in args.configs.split(",")]
    rounds: dict[str, list[dict]] = {name: [] for name in names}
    for k in range(args.rounds):
        for name in names[k % len(names):] + names[: k % len(names)]:
            result = run_config(name, work, corpus, vocab, args)
            rounds[name].append(result)
            print(f"round {k + 1}: {name}: {result['tokens_per_s']:,.0f} tokens/s ({result['steps']} steps)", flush=True)
    busy_after, _ = other_cpus(3.0)
    shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(r["tokens_per_s"] for r in rounds[names[0]])
    summary = {name: {"tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in runs),
                      "speedup_over_one_thread": statistics.median(r["tokens_per_s"] for r in runs) / base,
                      "rounds": runs} for name, runs in rounds.items()}
    payload = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
               "command": "python benchmarks/bench_train_parallel.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "shape": " ".join(SHAPE), "corpus_lines": args.lines, "steps": args.steps, "skip": args.skip,
               "busy_cpus_before_after": [round(busy_before, 2), round(busy_after, 2)], "configs": summary}
    for name, s in summary.items():
        print(f"{name}: median {s['tokens_per_s_median']:,.0f} tokens/s, {s['speedup_over_one_thread']:.2f}x one thread")
    print(f"busy CPUs (whole machine, 3 s) before/after: {busy_before:.2f} / {busy_after:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
