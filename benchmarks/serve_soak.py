"""Soak test of `elmokit serve`: many requests with a fixed seed, every response checked, the
server's memory watched.

    python benchmarks/serve_soak.py                          # 10,000 requests, default model
    python benchmarks/serve_soak.py --requests 2000 --clients 4

Starts `elmokit serve --model MODEL --port 0` in its own process and sends `--requests` POSTs to
`/v1/elmo` from `--clients` threads: each request 1-3 sentences of a fixed sample (gutenberg_en
test text) and one layer, drawn with `--seed`. Every response is compared bit for bit (float32)
with `Embedder.embed` of the same sentences in this process (the sample embedded once; the server
batches requests differently, so equality also checks that batching changes no bit). The server's
RSS is sampled every 0.5 s (psutil); growth = (median RSS of the last 10% of the run - median RSS
after the first 10%) / the latter. Target (issue 15): every response correct, growth < 5%.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from datetime import date
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from serve_load import sample_sentences, start_server  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="default", help="model to serve (default: the shipped one)")
    parser.add_argument("--requests", type=int, default=10_000, help="requests to send (default 10000)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client threads (default 8)")
    parser.add_argument("--seed", type=int, default=15, help="seed of the requests (default 15)")
    parser.add_argument("--sample", type=int, default=300, help="sentences in the fixed sample (default 300)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads, server and oracle (default 1)")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "serve_soak.json"), help="JSON results")
    args = parser.parse_args()

    import httpx
    import psutil
    import torch

    from elmokit import Embedder

    torch.set_num_threads(args.threads)
    sample = [s.split() for s in sample_sentences(args.sample)]
    oracle_model = Embedder.load(args.model)
    oracle = oracle_model.embed(sample)  # (L+1, n, D) per sentence
    num_layers = oracle_model.num_layers
    rng = np.random.default_rng(args.seed)
    plan = [(rng.choice(len(sample), size=int(rng.integers(1, 4))).tolist(), int(rng.integers(0, num_layers)))
            for _ in range(args.requests)]

    process, url = start_server(args.model, args.threads)
    server = psutil.Process(process.pid)
    rss: list[tuple[int, int]] = []  # (requests done, RSS bytes)
    done = [0]
    wrong: list[str] = []
    stop = threading.Event()
    lock = threading.Lock()

    def sample_rss() -> None:
        while not stop.is_set():
            rss.append((done[0], server.memory_info().rss))
            stop.wait(0.5)

    def client(worker: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:
            for number in range(worker, args.requests, args.clients):
                indices, layer = plan[number]
                body = {"tokens": [sample[i] for i in indices], "layers": [layer]}
                response = http.post("/v1/elmo", json=body)
                if response.status_code != 200:
                    wrong.append(f"request {number}: status {response.status_code}")
                else:
                    for item, i in zip(response.json()["data"], indices):
                        got = np.asarray(item["layers"][0], dtype=np.float32)
                        if not np.array_equal(got, oracle[i][layer]):
                            wrong.append(f"request {number}: sentence {i} layer {layer} differs "
                                         f"(max {np.abs(got - oracle[i][layer]).max():.3g})")
                with lock:
                    done[0] += 1

    watcher = threading.Thread(target=sample_rss, daemon=True)
    watcher.start()
    started = time.perf_counter()
    try:
        threads = [threading.Thread(target=client, args=(w,)) for w in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        seconds = time.perf_counter() - started
        stop.set()
        watcher.join()
        process.terminate()
        process.wait(60)
    first = [b for n, b in rss if n <= args.requests * 0.1 and n > 0] or [rss[0][1]]
    last = [b for n, b in rss if n >= args.requests * 0.9]
    base, end = float(np.median(first)), float(np.median(last))
    result = {"date": date.today().isoformat(), "machine": f"{platform.machine()} {os.cpu_count()} CPUs",
              "command": " ".join(["python", *sys.argv]), "model": args.model, "requests": args.requests,
              "done": done[0], "clients": args.clients, "seed": args.seed, "seconds": round(seconds, 1),
              "wrong": len(wrong), "first_wrong": wrong[:5], "rss_after_first_10pct_mb": round(base / 2**20, 1),
              "rss_last_10pct_mb": round(end / 2**20, 1), "rss_max_mb": round(max(b for _, b in rss) / 2**20, 1),
              "rss_growth_pct": round(100 * (end - base) / base, 2), "rss_samples": len(rss),
              # median RSS (MB) in each tenth of the run: a plateau or a steady climb
              "rss_by_tenth_mb": [round(float(np.median([b for n, b in rss if k * args.requests / 10 <= n
                                                         < (k + 1) * args.requests / 10] or [0])) / 2**20, 1)
                                  for k in range(10)]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0 if not wrong and done[0] == args.requests else 1


if __name__ == "__main__":
    sys.exit(main())
