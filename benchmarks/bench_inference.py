"""Inference speed of the original ELMo architecture on this machine: elmokit vs the reference's
algorithm (``reference_style.py``), measured in one run, each in its own process for peak memory.

    python benchmarks/bench_inference.py                 # original architecture, 2 threads
    python benchmarks/bench_inference.py --preset small --batches 5

Weights are random (seeded; 1/sqrt(fan_in) scale, highway carry bias -2 as at initialisation),
which changes nothing about speed. Sentences are 20-30 tokens cut from the gutenberg_en test
text (``../shared/data``), or from a fixed synthetic vocabulary when that is absent.
Reports real tokens/s (boundary tokens and padding are computed but not counted), seconds per
batch (median of the measured batches after one warm-up), the process's peak RSS, and each
implementation's error against the first over every real token of every batch (max |diff| and
the minimum per-token cosine similarity, per layer).

Implementations: ``reference-style`` (the reference's algorithm), ``elmokit`` (exact, no cache),
``elmokit-cache`` (exact + token-vector LRU cache), ``elmokit-bf16`` / ``elmokit-bf16-cache``
(the fast path).
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO.parent / "shared"))
TOKEN = re.compile(r"\w+|[^\w\s]")


def benchmark_sentences(count: int, seed: int = 0) -> list[list[str]]:
    import random

    rng = random.Random(seed)
    source = SHARED / "data" / "gutenberg_en" / "test.txt.xz"
    words: list[str] = []
    if source.exists():
        with lzma.open(source, "rt", encoding="utf-8") as handle:
            for line in handle:
                words.extend(TOKEN.findall(line))
                if len(words) > 40 * count:
                    break
    else:
        vocab = [f"w{i}" for i in range(5000)] + ["the", "of", ".", ","]
        words = [rng.choice(vocab) for _ in range(40 * count)]
    sentences, position = [], 0
    for _ in range(count):
        length = rng.randint(20, 30)
        sentences.append(words[position : position + length])
        position += length
    return sentences


def random_model(preset: str, directory: Path) -> None:
    import torch

    from elmokit import PRESETS, BiLM, save_native

    torch.manual_seed(0)
    bilm = BiLM(PRESETS[preset])
    with torch.no_grad():
        for name, p in bilm.named_parameters():
            if p.dim() > 1:
                p.normal_(0, 1 / p.shape[-1] ** 0.5 if "convs" not in name else 1 / (p.shape[1] * p.shape[2]) ** 0.5)
            else:
                p.normal_(0, 0.1)
            if ".carry." in name and name.endswith("bias"):
                p.fill_(-2.0)
        bilm.token_encoder.char_embedding.weight[0].zero_()
    save_native(bilm, directory)


def run_child(args: argparse.Namespace) -> None:
    """Measure one implementation; print one JSON line."""
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from elmokit import batch_to_ids, load_bilm
    from elmokit.bilm import add_boundaries, remove_boundaries

    bilm = load_bilm(args.model_dir)
    if args.impl == "reference-style":
        sys.path.insert(0, str(Path(__file__).parent))
        from reference_style import ReferenceStyleELMo

        reference = ReferenceStyleELMo(bilm.config, bilm.state_dict())
        del bilm

        def forward(ids):
            ids_b, mask = add_boundaries(ids)
            return remove_boundaries(reference(ids_b, mask.sum(1)), mask)

    else:
        # elmokit, elmokit-cache, elmokit-bf16, elmokit-bf16-cache
        bilm.set_precision("bf16" if "bf16" in args.impl else "fp32")
        if args.impl.endswith("-cache"):
            bilm.enable_token_cache(20_000)

        def forward(ids):
            with torch.inference_mode():
                output = bilm(ids, keep_boundaries=False)
            return output.layers, output.mask

    sentences = benchmark_sentences(args.batch_size * (args.batches + 1))
    batches = [sentences[i * args.batch_size : (i + 1) * args.batch_size] for i in range(args.batches + 1)]
    times = []
    for index, batch in enumerate(batches):
        ids = batch_to_ids(batch)
        start = time.perf_counter()
        layers, mask = forward(ids)
        elapsed = time.perf_counter() - start
        # Written out at once so that the harness's copies of the outputs never count in the
        # process's peak memory.
        np.savez(f"{args.output_npy}.{index}.npz", layers=layers.numpy(), mask=mask.numpy())
        del layers, mask
        if index > 0:  # batch 0 is the warm-up
            times.append(elapsed)
    tokens = statistics.mean(sum(len(s) for s in b) for b in batches[1:])
    median = statistics.median(times)
    print(json.dumps({
        "impl": args.impl,
        "seconds_per_batch": median,
        "all_seconds": times,
        "tokens_per_batch": tokens,
        "tokens_per_second": tokens / median,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="original", help="architecture from elmokit.PRESETS (default: original)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=3, help="measured batches after one warm-up (default 3)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--impls", default="reference-style,elmokit,elmokit-cache,elmokit-bf16-cache",
                        help="comma-separated, run in this order; errors and speed-ups are against the first")
    parser.add_argument("--model", default=None, help="benchmark this model folder (or 'default') instead of random weights")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--impl", help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", help=argparse.SUPPRESS)
    parser.add_argument("--output-npy", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.impl:
        return run_child(args)

    import numpy as np
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "model"
        if args.model:
            from elmokit.formats import resolve_model_path

            model_dir = resolve_model_path(args.model)
        else:
            random_model(args.preset, model_dir)
        results = []
        for impl in args.impls.split(","):
            command = [sys.executable, __file__, "--impl", impl, "--model-dir", str(model_dir),
                       "--output-npy", str(Path(tmp) / f"{impl}.npy"), "--batch-size", str(args.batch_size),
                       "--batches", str(args.batches), "--threads", str(args.threads)]
            line = subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
            results.append(json.loads(line))
            print(f"{impl:>16}: {results[-1]['tokens_per_second']:8.0f} tokens/s   "
                  f"{results[-1]['seconds_per_batch']:.3f} s/batch   peak RSS {results[-1]['peak_rss_gb']:.2f} GB", flush=True)
        impls = args.impls.split(",")
        outputs = {impl: [np.load(Path(tmp) / f"{impl}.npy.{i}.npz") for i in range(args.batches + 1)] for impl in impls}
        errors = {impl: compare(outputs[impls[0]], outputs[impl], args.batches + 1) for impl in impls[1:]}
    base = results[0]["tokens_per_second"]
    summary = {
        "preset": args.model or args.preset, "batch_size": args.batch_size, "threads": args.threads, "batches": args.batches,
        "torch": torch.__version__, "cpu": _cpu_name(), "date": time.strftime("%Y-%m-%d"),
        "error_vs_first": errors, "results": results,
        "speedup_vs_first": {r["impl"]: r["tokens_per_second"] / base for r in results},
    }
    for impl, error in errors.items():
        print(f"{impl} vs {impls[0]}: max |diff| {error['max_abs_diff']:.2e}, "
              f"min per-token cosine {error['min_token_cosine']:.6f} over {error['tokens']} tokens x layers")
    for r in results[1:]:
        print(f"{r['impl']} / {results[0]['impl']}: {r['tokens_per_second'] / base:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


def compare(reference, other, num_batches: int) -> dict:
    """Error of ``other`` against ``reference`` over every real token of every batch and layer."""
    import numpy as np

    max_abs, min_cos, count = 0.0, 1.0, 0
    for index in range(num_batches):
        mask = reference[index]["mask"]
        a = reference[index]["layers"][:, mask]  # (layers, tokens, dim)
        b = other[index]["layers"][:, mask]
        max_abs = max(max_abs, float(np.abs(a - b).max()))
        cosine = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
        min_cos, count = min(min_cos, float(cosine.min())), count + cosine.size
    return {"max_abs_diff": max_abs, "min_token_cosine": min_cos, "tokens": count}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip() + f" ({os.cpu_count()} cores visible)"
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
