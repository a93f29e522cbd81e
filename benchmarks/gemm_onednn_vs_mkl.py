"""torch's fp32 CPU matrix product (MKL) against oneDNN's (``fused.linear``'s kernel) on the shapes of a
pretraining step: CPU-seconds per product, the ratio, and whether the two agree.

    python benchmarks/gemm_onednn_vs_mkl.py                 # 1 and 2 threads (~1 CPU-minute)

The shapes are those of a `mini` step (batch 32 x 128 = 4096 rows, hidden 128, feed-forward 512, vocabulary
8,000): each linear layer's forward (rows x in by in x out), both backward products, the tied head's products,
and one square 2048^3 product for the kernel's peak. MKL: ``torch.mm`` into a preallocated output (so that
page faults of a fresh output do not count against it); oneDNN: ``torch.ops.mkldnn._linear_pointwise`` on the
same plain tensors (its output is allocated each call, a cost it carries). Medians of ``--repeats`` calls after
one warm-up; process CPU time. On a shared machine the ratio is what means something; the record keeps the
load average and the CPU's family and vector instruction sets (MKL's kernel choice depends on the vendor).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

# name -> (a rows, a cols) x (b cols): a (M, K) @ b (K, N)
SHAPES = {
    "2048^3": (2048, 2048, 2048),
    "qkv forward 4096x128 @ 128x384": (4096, 128, 384),
    "ffn up forward 4096x128 @ 128x512": (4096, 128, 512),
    "ffn down forward 4096x512 @ 512x128": (4096, 512, 128),
    "ffn up weight grad 512x4096 @ 4096x128": (512, 4096, 128),
    "ffn up input grad 4096x512 @ 512x128": (4096, 512, 128),
    "head forward 4096x128 @ 128x8000": (4096, 128, 8000),
    "head input grad 4096x8000 @ 8000x128": (4096, 8000, 128),
    "head weight grad 8000x4096 @ 4096x128": (8000, 4096, 128),
}


def cpu_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "gemm_onednn_vs_mkl.json"))
    args = parser.parse_args(argv)
    from pretrain_vs_trainer import cpu_details, machine

    from elmokit.io import write_json
    from elmokit.pretraining.fused import HAVE_ONEDNN, _onednn

    if not HAVE_ONEDNN:
        sys.exit("this torch build has no oneDNN (torch.ops.mkldnn._linear_pointwise)")
    load_before = os.getloadavg()
    generator = torch.Generator().manual_seed(0)
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        for name, (m, k, n) in SHAPES.items():
            a, b = torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator)
            out = torch.empty(m, n)
            bt = b.t()  # oneDNN's weight operand is (out, in): b's transposed view, no copy
            mkl = cpu_seconds(lambda a=a, b=b, out=out: torch.mm(a, b, out=out), args.repeats)
            dnnl = cpu_seconds(lambda a=a, bt=bt: _onednn(a, bt), args.repeats)
            difference = float((_onednn(a, bt) - a @ b).abs().max() / (a @ b).abs().max())
            rows.append({"threads": threads, "shape": name, "mkl_s": mkl, "onednn_s": dnnl, "onednn_over_mkl": dnnl / mkl,
                         "mkl_gflop_per_cpu_s": 2 * m * k * n / mkl / 1e9, "onednn_gflop_per_cpu_s": 2 * m * k * n / dnnl / 1e9,
                         "max_relative_difference": difference})
            print(f"{threads} thread(s)  {name:42s} MKL {mkl * 1e3:7.2f} ms  oneDNN {dnnl * 1e3:7.2f} ms  "
                  f"{dnnl / mkl:.2f}x  ({2 * m * k * n / mkl / 1e9:.0f} / {2 * m * k * n / dnnl / 1e9:.0f} GFLOP per CPU-s)")
    record = {"command": "python " + " ".join([os.path.relpath(__file__, REPO), *(argv if argv is not None else sys.argv[1:])]),
              "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
              "cpu": cpu_details(), "cpus": os.cpu_count(), "torch": torch.__version__,
              "load": {"loadavg_before": load_before, "loadavg_after": os.getloadavg()},
              "clock": "process CPU time per product, median of the repeats", "rows": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, record, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
