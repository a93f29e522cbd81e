"""Tables of docs/benchmarks.md built from the JSON records the benchmark scripts wrote.

    python benchmarks/render_docs.py            # rewrite every generated table between its markers
    python benchmarks/render_docs.py --check    # exit 1 if a committed table differs from its records

Each row names the record it comes from and the command that made it; the machine and the date stay in
the record. Numbers are printed at the precision the record holds or rounded as the column says, never
edited by hand: change a table by changing its record (a new run) or this script.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "benchmarks.md"
RECORDS = REPO / "docs" / "benchmarks"


def record(name: str) -> dict:
    return json.loads((RECORDS / f"{name}.json").read_text(encoding="utf-8"))


def command_of(rec: dict) -> str:
    """The record's command with the environment it ran under (``environment``: variables set for it)."""
    env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in rec.get("environment", {}).items())
    return f"{env} {rec['command']}".strip()


def serve_load() -> list[str]:
    name = "serve_load"
    rec = record(name)
    library = rec["library_sentences_per_s"]
    lines = [f"Record `docs/benchmarks/{name}.json`, command `{command_of(rec)}`:", "",
             "| clients | requests | failures | sentences/s | tokens/s | p50 ms | p99 ms | vs library |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level in rec["levels"]:
        lines.append(f"| {level['users']} | {level['requests']:,} | {level['failures']} | {level['sentences_per_s']:.1f} | "
                     f"{level['tokens_per_s']:,.0f} | {level['p50_ms']:.0f} | {level['p99_ms']:.0f} | "
                     f"{100 * level['sentences_per_s'] / library:.0f}% |")
    lines.append(f"| library (`Embedder.embed`, batches of 64) | | | {library:.1f} | "
                 f"{rec['library_tokens_per_s']:,.0f} | | | 100% |")
    return lines


SOAK_RUNS = ("serve_soak", "serve_soak_malloc_arena_max2", "serve_soak_onednn_cache8", "serve_soak_jemalloc")


def serve_soak() -> list[str]:
    lines = ["| command | record | requests | wrong | seconds | RSS after the first 10% | RSS in the last 10% | growth | "
             "RSS by tenth of the run (MB) |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name in SOAK_RUNS:
        rec = record(name)
        note = f" ({rec['note']})" if rec.get("note") else ""
        lines.append(f"| `{command_of(rec)}`{note} | `{name}.json` | {rec['requests']:,} | {rec['wrong']} | "
                     f"{rec['seconds']:.1f} | "
                     f"{rec['rss_after_first_10pct_mb']:.0f} MB | {rec['rss_last_10pct_mb']:.0f} MB | "
                     f"{rec['rss_growth_pct']:.1f}% | {', '.join(str(x) for x in rec['rss_by_tenth_mb'])} |")
    return lines


def train_parallel(*names: str) -> list[str]:
    """`bench_train_parallel.py` runs: tokens/s of each configuration, the median and every round."""
    lines = ["| command | record | configuration | tokens/s, median (rounds) | vs one thread |", "|---|---|---|---:|---:|"]
    for name in names:
        rec = record(name)
        for i, (config, result) in enumerate(rec["configs"].items()):
            rounds = ", ".join(f"{r['tokens_per_s']:,.0f}" for r in result["rounds"])
            where = f"`{command_of(rec)}` | `{name}.json`" if i == 0 else "same run | "
            lines.append(f"| {where} | {config} | {result['tokens_per_s_median']:,.0f} ({rounds}) | "
                         f"{result['speedup_over_one_thread']:.2f}x |")
    return lines


def serve_pinned() -> list[str]:
    name = "serve_pinned"
    rec = record(name)
    library = rec["library"]
    note = f" ({rec['note']})" if rec.get("note") else ""
    lines = [f"Record `docs/benchmarks/{name}.json`, command `{command_of(rec)}`{note}: server and library on one "
             f"thread of core {rec['server_core']}, the load generator on core {rec['load_core']}, "
             f"{rec['per_request']} sentences a request.", "",
             "| clients | requests | failures | sentences/s | p50 ms | p99 ms | vs library |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for level in rec["levels"]:
        lines.append(f"| {level['users']} | {level['requests']:,} | {level['failures']} | {level['sentences_per_s']:.1f} | "
                     f"{level['p50_ms']:.1f} | {level['p99_ms']:.1f} | "
                     f"{100 * level['sentences_per_s'] / library['sentences_per_s']:.0f}% |")
    lines.append(f"| library (1 thread, same core) | | | {library['sentences_per_s']:.1f} | "
                 f"{library['single_call_p50_ms']:.1f} (one call) | | 100% |")
    return lines


def cli_startup() -> list[str]:
    name = "cli_startup"
    rec = record(name)
    lines = [f"Record `docs/benchmarks/{name}.json`, command `{command_of(rec)}` (each a fresh process):", "",
             "| command | median ms | min ms | max ms | runs |", "|---|---:|---:|---:|---:|"]
    for row in rec["rows"]:
        lines.append(f"| `{row['command']}` | {1000 * row['median_s']:.1f} | {1000 * row['min_s']:.1f} | "
                     f"{1000 * row['max_s']:.1f} | {row['runs']} |")
    return lines


TABLES: dict[str, Callable[[], list[str]]] = {
    "train-parallel": lambda: train_parallel("train_parallel"),
    "train-parallel-weak": lambda: train_parallel("train_parallel_weak", "train_parallel_weak_pairs"),
    "train-parallel-after-cuts": lambda: train_parallel("train_parallel_after_step_cuts"),
    "serve-load": serve_load,
    "serve-soak": serve_soak,
    "serve-pinned": serve_pinned,
    "cli-startup": cli_startup,
}


def markers(key: str) -> tuple[str, str]:
    return (f"<!-- {key}:begin (generated by benchmarks/render_docs.py from docs/benchmarks/*.json; edit the script "
            "or the records, not this) -->", f"<!-- {key}:end -->")


def render(text: str) -> str:
    """``text`` with every generated table replaced by its rendering from the records."""
    for key, build in TABLES.items():
        begin, end = markers(key)
        if text.count(begin) != 1 or text.count(end) != 1:
            raise SystemExit(f"{PAGE.relative_to(REPO)}: the markers of {key!r} must appear once each")
        head, rest = text.split(begin)
        _, tail = rest.split(end)
        text = head + begin + "\n" + "\n".join(build()) + "\n" + end + tail
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare: exit 1 if the page differs from the records")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    rendered = render(text)
    if args.check:
        if rendered != text:
            print(f"{PAGE.relative_to(REPO)} differs from its records: run python benchmarks/render_docs.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(rendered, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
