"""How fast the command line answers: `elmokit --version`, `--help` and a few subcommands' `--help`, each run
as a fresh process several times; the median and the spread of wall seconds, in a JSON record (machine,
command, date).

    python benchmarks/cli_startup.py --runs 15 --out docs/benchmarks/cli_startup.json

Targets: `--version` and `--help` under 0.3 s; any subcommand's `--help` under 1 s (on an idle machine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (["--version"], ["--help"], ["tag", "train", "--help"], ["pretrain", "--help"], ["train", "--help"],
            ["eval", "glue", "--help"], ["serve", "--help"], ["embed", "--help"])


def elmokit_command() -> list[str]:
    found = shutil.which("elmokit")
    return [found] if found else [sys.executable, "-m", "elmokit.cli.main"]


def time_runs(argv: list[str], runs: int, warmup: int) -> list[float]:
    seconds = []
    for i in range(warmup + runs):
        started = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        if i >= warmup:
            seconds.append(time.perf_counter() - started)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="timed runs per command (default: 15)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default: 2)")
    parser.add_argument("--out", default=None, help="JSON record to write (default: print only)")
    args = parser.parse_args()
    base = elmokit_command()
    rows = []
    for words in COMMANDS:
        seconds = time_runs(base + words, args.runs, args.warmup)
        rows.append({"command": "elmokit " + " ".join(words), "median_s": round(statistics.median(seconds), 4),
                     "min_s": round(min(seconds), 4), "max_s": round(max(seconds), 4), "runs": len(seconds)})
        print(f"{rows[-1]['command']:<32} median {rows[-1]['median_s'] * 1000:7.1f} ms "
              f"(min {rows[-1]['min_s'] * 1000:.1f}, max {rows[-1]['max_s'] * 1000:.1f})", flush=True)
    record = {"date": datetime.date.today().isoformat(), "machine": f"{platform.machine()} {os.cpu_count()} CPUs "
              f"({platform.platform()})", "command": "python benchmarks/cli_startup.py " + shlex.join(sys.argv[1:]),
              "load_average": os.getloadavg(), "python": platform.python_version(), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
