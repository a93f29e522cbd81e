"""Load test of `elmokit serve`: locust (headless, 127.0.0.1 only) at 1, 8 and 32 clients, against
the library's own throughput on the same sentences.

    python benchmarks/serve_load.py                       # default model, 20 s per level
    python benchmarks/serve_load.py --users 1,8 --run-time 10 --threads 2

Starts `elmokit serve --model MODEL --port 0 --threads T` in its own process, posts to TEI's
`/embed` (a pooled vector per text, so the response is small and the measure is the service:
parsing, batching, the model, pooling) requests of `--per-request` sentences drawn in a fixed order
from a fixed sample of the gutenberg_en test text, and reads locust's statistics: requests/s, p50
and p99 latency. Sentences/s = requests/s x per-request; tokens/s = sentences/s x the sample's mean
tokens per sentence. The library's throughput is `Embedder.embed` on the same sample in batches of
64 with the same thread count, in this process (with the server stopped). Writes JSON to --out and
prints a markdown table. Target: the server at 32 clients at least 90% of the library.

Like for like (``--pinned``): the server runs with 1 torch thread pinned to one core, the library
(a child process) with 1 thread on the same core, and the load generator (this process: a light
asyncio HTTP/1.1 client on keep-alive connections, not locust) pinned to another core, so neither
side shares its core with the clients. Measures sentences/s at each level (default 1 and 32 clients)
and p50 latency, against the library's sentences/s (batches of 64) and the p50 of its single call
on one request's sentences. Needs 2 cores; on a machine where other work runs the numbers are not
an idle measurement (the record says what ran).

    python benchmarks/serve_load.py --pinned --run-time 10 --out /tmp/serve_pinned.json
"""

from __future__ import annotations

import argparse
import csv
import json
import lzma
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from elmokit.data_paths import shared_data  # noqa: E402

LOCUSTFILE = '''
import itertools, json, os
from locust import HttpUser, constant, task

SAMPLE = json.loads(open(os.environ["ELMOKIT_LOAD_SAMPLE"], encoding="utf-8").read())
PER_REQUEST = int(os.environ["ELMOKIT_LOAD_PER_REQUEST"])
COUNTER = itertools.count()


class Client(HttpUser):
    wait_time = constant(0)

    def on_start(self):
        self.position = next(COUNTER) * 97  # each client starts elsewhere in the sample, in a fixed order

    @task
    def embed(self):
        texts = [SAMPLE[(self.position + i) % len(SAMPLE)] for i in range(PER_REQUEST)]
        self.position += PER_REQUEST
        with self.client.post("/embed", json={"inputs": texts}, catch_response=True) as response:
            if response.status_code != 200 or len(response.json()) != PER_REQUEST:
                response.failure(f"status {response.status_code}")
'''


def sample_sentences(n: int, min_tokens: int = 5, max_tokens: int = 40) -> list[str]:
    """The first ``n`` lines of the gutenberg_en test text with min..max tokens (a fixed sample)."""
    path = shared_data("gutenberg_en", "test.txt.xz")
    if not path.exists():
        raise SystemExit(f"needs {path} (the shared data folder; set ELMOKIT_SHARED)")
    out = []
    with lzma.open(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            tokens = line.split()
            if min_tokens <= len(tokens) <= max_tokens:
                out.append(" ".join(tokens))
                if len(out) == n:
                    break
    return out


def start_server(model: str, threads: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "elmokit.cli.main", "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
         "--threads", str(threads), "--log-level", "warning", "--max-queue", "1024"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    deadline = time.monotonic() + 120
    for line in process.stderr:
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if match:
            return process, match.group(1)
        if time.monotonic() > deadline:
            break
    process.kill()
    raise SystemExit("the server did not start")


def run_locust(url: str, users: int, run_time: int, workdir: Path, env: dict) -> dict:
    prefix = workdir / f"u{users}"
    subprocess.run(
        ["locust", "-f", str(workdir / "locustfile.py"), "--headless", "-u", str(users), "-r", str(users),
         "--run-time", f"{run_time}s", "--host", url, "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING",
         "--stop-timeout", "10"],
        check=False, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=run_time + 120)
    with open(f"{prefix}_stats.csv", newline="") as handle:
        row = next(r for r in csv.DictReader(handle) if r["Name"] == "Aggregated")
    return {"users": users, "requests": int(row["Request Count"]), "failures": int(row["Failure Count"]),
            "requests_per_s": float(row["Requests/s"]), "p50_ms": float(row["50%"]), "p99_ms": float(row["99%"])}


def library_throughput(model: str, sentences: list[list[str]], threads: int, seconds: float) -> float:
    """Sentences/s of ``Embedder.embed`` in batches of 64, repeated for about ``seconds`` after a warm-up."""
    import torch

    from elmokit import Embedder

    torch.set_num_threads(threads)
    embedder = Embedder.load(model, batch_size=64)
    embedder.embed(sentences[:64])  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for start in range(0, len(sentences), 64):
            embedder.embed(sentences[start:start + 64])
            done += len(sentences[start:start + 64])
    return done / (time.perf_counter() - started)


# ---- like for like: pinned cores, a light load generator -------------------------------------------


def pin(core: int) -> None:
    os.sched_setaffinity(0, {core})


def start_pinned_server(model: str, core: int) -> tuple[subprocess.Popen, str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "elmokit.cli.main", "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
         "--threads", "1", "--log-level", "warning", "--max-queue", "1024"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"},
        preexec_fn=lambda: pin(core))
    deadline = time.monotonic() + 120
    for line in process.stderr:
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if match:
            url = match.group(1)
            while time.monotonic() < deadline:  # bound before the app is up: wait for /health
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5) as answer:
                        if answer.status == 200:
                            return process, url
                except OSError:
                    time.sleep(0.05)
            break
        if time.monotonic() > deadline:
            break
    process.kill()
    raise SystemExit("the server did not start")


async def _client(port: int, bodies: list[bytes], stop_at: float, latencies: list[float], errors: list[int]) -> None:
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = 0
    try:
        while time.perf_counter() < stop_at:
            body = bodies[i % len(bodies)]
            i += 1
            started = time.perf_counter()
            writer.write(b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
            await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if not head.startswith(b"HTTP/1.1 200"):
                errors.append(int(head[9:12]))
    finally:
        writer.close()


def load_level(url: str, users: int, seconds: float, sample: list[str], per_request: int) -> dict:
    """``users`` keep-alive clients posting to /embed for ``seconds``: sentences/s, p50, p99."""
    import asyncio

    import numpy as np

    port = int(url.rsplit(":", 1)[1])
    bodies = [json.dumps({"inputs": [sample[(start + i) % len(sample)] for i in range(per_request)]}).encode()
              for start in range(0, len(sample), per_request)]
    latencies: list[float] = []
    errors: list[int] = []

    async def run():
        stop_at = time.perf_counter() + seconds
        await asyncio.gather(*(_client(port, bodies[u * 7 % len(bodies):] + bodies[:u * 7 % len(bodies)], stop_at,
                                       latencies, errors) for u in range(users)))

    started = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - started
    ms = np.asarray(latencies) * 1000
    return {"users": users, "requests": len(latencies), "failures": len(errors),
            "sentences_per_s": len(latencies) * per_request / elapsed,
            "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def library_pinned(model: str, sample: list[str], per_request: int, seconds: float) -> dict:
    """In a child pinned to the server's core (1 thread): sentences/s in batches of 64, and the p50 of
    one call on a request's sentences."""
    import numpy as np
    import torch

    from elmokit import Embedder

    torch.set_num_threads(1)
    embedder = Embedder.load(model, batch_size=64)
    sentences = [s.split() for s in sample]
    embedder.embed(sentences[:64])  # warm-up
    done, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        for start in range(0, len(sentences), 64):
            embedder.embed(sentences[start:start + 64])
            done += len(sentences[start:start + 64])
    throughput = done / (time.perf_counter() - started)
    calls, started = [], time.perf_counter()
    while time.perf_counter() - started < seconds / 2 or len(calls) < 20:
        start = (len(calls) * per_request) % len(sentences)
        began = time.perf_counter()
        embedder.embed(sentences[start:start + per_request])
        calls.append(time.perf_counter() - began)
    return {"sentences_per_s": throughput, "single_call_p50_ms": float(np.percentile(np.asarray(calls) * 1000, 50))}


def pinned(args, sample: list[str]) -> dict:
    server_core, load_core = (int(c) for c in args.cores.split(","))
    if len(os.sched_getaffinity(0) & {server_core, load_core}) < 2:
        raise SystemExit(f"--pinned needs cores {args.cores} (this process may use {sorted(os.sched_getaffinity(0))})")
    library = json.loads(subprocess.run(
        [sys.executable, __file__, "--library-child", "--model", args.model, "--run-time", str(args.run_time),
         "--per-request", str(args.per_request), "--sample", str(args.sample)],
        check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        preexec_fn=lambda: pin(server_core)).stdout.strip().splitlines()[-1])
    pin(load_core)
    process, url = start_pinned_server(args.model, server_core)
    levels = []
    try:
        load_level(url, 2, 3, sample, args.per_request)  # warm-up
        for users in (int(u) for u in args.users.split(",")):
            levels.append(load_level(url, users, args.run_time, sample, args.per_request))
            print(json.dumps(levels[-1]), file=sys.stderr)
    finally:
        process.terminate()
        process.wait(60)
    by_users = {level["users"]: level for level in levels}
    return {"mode": "pinned", "server_core": server_core, "load_core": load_core, "threads": 1,
            "levels": levels, "library": library,
            "ratio_at_32": by_users[32]["sentences_per_s"] / library["sentences_per_s"] if 32 in by_users else None,
            "p50_minus_library_at_1_ms": by_users[1]["p50_ms"] - library["single_call_p50_ms"] if 1 in by_users else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="model to serve (default: the shipped one)")
    parser.add_argument("--users", default="1,8,32", help="concurrent clients per level (default 1,8,32)")
    parser.add_argument("--run-time", type=int, default=20, help="seconds per level (default 20)")
    parser.add_argument("--per-request", type=int, default=4, help="sentences per request (default 4)")
    parser.add_argument("--sample", type=int, default=512, help="sentences in the fixed sample (default 512)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads, server and library (default 2)")
    parser.add_argument("--out", default=None, help="JSON results (default docs/benchmarks/serve_load.json, or "
                        "serve_pinned.json with --pinned)")
    parser.add_argument("--pinned", action="store_true", help="like for like: server and library 1 thread on one "
                        "core, the load generator on another (default users 1,32)")
    parser.add_argument("--cores", default="0,1", help="with --pinned: the server's core, the load generator's")
    parser.add_argument("--note", default="", help="recorded with the results (e.g. what else ran on the machine)")
    parser.add_argument("--library-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    sample = sample_sentences(args.sample)
    if args.library_child:
        print(json.dumps(library_pinned(args.model, sample, args.per_request, args.run_time)))
        return 0
    if args.pinned:
        if args.users == "1,8,32":
            args.users = "1,32"
        load_before = os.getloadavg()  # what else ran: an idle machine reads near 0 before a run
        result = {"date": date.today().isoformat(), "machine": f"{platform.machine()} {os.cpu_count()} CPUs "
                  f"({platform.processor() or platform.platform()})", "command": " ".join(["python", *sys.argv]),
                  "model": args.model, "per_request": args.per_request, "sample_sentences": len(sample),
                  "note": args.note, **pinned(args, sample),
                  "load_average_before": [round(x, 2) for x in load_before],
                  "load_average_after": [round(x, 2) for x in os.getloadavg()]}
        out = Path(args.out or REPO / "docs" / "benchmarks" / "serve_pinned.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
        print("| clients | requests | sentences/s | p50 ms | p99 ms | vs library |")
        print("|---:|---:|---:|---:|---:|---:|")
        for level in result["levels"]:
            print(f"| {level['users']} | {level['requests']} | {level['sentences_per_s']:.1f} | {level['p50_ms']:.1f} | "
                  f"{level['p99_ms']:.1f} | {level['sentences_per_s'] / result['library']['sentences_per_s']:.0%} |")
        print(f"| library (1 thread, same core) | | {result['library']['sentences_per_s']:.1f} | "
              f"{result['library']['single_call_p50_ms']:.1f} (one call) | | 100% |")
        print(f"load average (1, 5, 15 min) before {result['load_average_before']}, after {result['load_average_after']}")
        return 0
    args.out = args.out or str(REPO / "docs" / "benchmarks" / "serve_load.json")
    mean_tokens = sum(len(s.split()) for s in sample) / len(sample)
    workdir = Path(tempfile.mkdtemp(prefix="elmokit-load-"))
    (workdir / "locustfile.py").write_text(LOCUSTFILE)
    (workdir / "sample.json").write_text(json.dumps(sample))
    env = {**os.environ, "ELMOKIT_LOAD_SAMPLE": str(workdir / "sample.json"),
           "ELMOKIT_LOAD_PER_REQUEST": str(args.per_request)}
    process, url = start_server(args.model, args.threads)
    levels = []
    try:
        run_locust(url, 2, 5, workdir, env)  # warm-up: the token cache and the allocator
        for users in (int(u) for u in args.users.split(",")):
            level = run_locust(url, users, args.run_time, workdir, env)
            level["sentences_per_s"] = level["requests_per_s"] * args.per_request
            level["tokens_per_s"] = level["sentences_per_s"] * mean_tokens
            levels.append(level)
            print(json.dumps(level), file=sys.stderr)
    finally:
        process.terminate()
        process.wait(60)
    library = library_throughput(args.model, [s.split() for s in sample], args.threads, args.run_time)
    result = {"date": date.today().isoformat(), "machine": f"{platform.machine()} {os.cpu_count()} CPUs "
              f"({platform.processor() or platform.platform()})", "command": " ".join(["python", *sys.argv]),
              "model": args.model, "threads": args.threads, "per_request": args.per_request,
              "sample_sentences": len(sample), "mean_tokens": round(mean_tokens, 2), "levels": levels,
              "library_sentences_per_s": library, "library_tokens_per_s": library * mean_tokens}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print("| clients | requests | failures | sentences/s | tokens/s | p50 ms | p99 ms | vs library |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for level in levels:
        print(f"| {level['users']} | {level['requests']} | {level['failures']} | {level['sentences_per_s']:.1f} | "
              f"{level['tokens_per_s']:.0f} | {level['p50_ms']:.0f} | {level['p99_ms']:.0f} | "
              f"{level['sentences_per_s'] / library:.0%} |")
    print(f"| library (`Embedder.embed`, batches of 64) | | | {library:.1f} | {library * mean_tokens:.0f} | | | 100% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
