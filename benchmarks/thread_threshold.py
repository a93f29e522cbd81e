"""Where a second CPU thread starts to pay: the biLM presets' forward pass at 1..N threads.

    python benchmarks/thread_threshold.py --out thread_threshold.json

For each preset (tiny, compact, small) the median of ``--repeats`` forward passes over a batch of 16 sentences
of 20 tokens, at each thread count from 1 to the cores this process may run on. ``elmokit.cli.common``'s
``SMALL_MODEL_PARAMETERS`` is the size below which the gain of more threads is small; run it on an idle machine
and on one whose cores are shared to see both sides of the choice.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path

import torch

from elmokit.bilm import PRESETS, BiLM
from elmokit.cli.common import SMALL_MODEL_PARAMETERS, available_cores
from elmokit.io import atomic_path
from elmokit.text.chars import batch_to_ids


def forward_seconds(model: BiLM, ids: torch.Tensor, threads: int, repeats: int) -> float:
    torch.set_num_threads(threads)
    with torch.inference_mode():
        model(ids)  # kernel set-up for these shapes
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            model(ids)
            times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,compact,small", help="comma-separated biLM presets (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=5, help="forward passes per setting, median kept (default: %(default)s)")
    parser.add_argument("--out", default=None, help="write the JSON record here (default: print only)")
    args = parser.parse_args(argv)
    ids = batch_to_ids([[f"w{i}{j}" for j in range(20)] for i in range(16)])
    counts = list(range(1, available_cores() + 1))
    rows = []
    for name in args.presets.split(","):
        model = BiLM(PRESETS[name]).eval()
        seconds = {threads: forward_seconds(model, ids, threads, args.repeats) for threads in counts}
        row = {"preset": name, "parameters": sum(p.numel() for p in model.parameters()),
               "ms": {str(t): round(1000 * s, 2) for t, s in seconds.items()},
               "best_threads": min(seconds, key=seconds.get)}
        rows.append(row)
        print(f"{name}: {row['parameters']:,} parameters, " + ", ".join(f"{t} thread(s) {ms} ms" for t, ms in row["ms"].items()),
              file=sys.stderr)
    record = {"benchmark": "thread_threshold", "command": shlex.join(["python", "benchmarks/thread_threshold.py",
                                                                      *(argv if argv is not None else sys.argv[1:])]),
              "date": datetime.date.today().isoformat(), "machine": platform.processor() or platform.machine(),
              "cores_available": len(counts), "load_average_1min": os.getloadavg()[0],
              "small_model_parameters": SMALL_MODEL_PARAMETERS, "rows": rows}
    if args.out:
        with atomic_path(args.out) as tmp:
            Path(tmp).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    else:
        print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
