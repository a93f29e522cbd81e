"""Parts of the training step, timed alone (one thread, median of repeats), for before/after comparisons.

    python benchmarks/bench_step_parts.py [--json out.json]

Run it in two checkouts to compare code (it uses only functions both sides have; ``invariant_matmul``
is timed where it exists). The parts, at the default model's shape:

* ``recurrent_product_*``: the LSTM backward's per-step product dgates_t W_h, n x 2048 times
  2048 x 128, as ``invariant_linear(x, W^T)`` (the weight transposed once) and as
  ``invariant_matmul(x, W)`` (the weight as stored), for n = 8, 32, 64 rows;
* ``lstm_backward_ms``: one ``ProjectedLSTMFunction`` backward, 64 sentences of 5-22 steps, input 128,
  2048 gates, projection 128;
* ``sampled_softmax_ms``: forward + backward of the sampled softmax, 2,816 rows x 128 against 4,096
  candidates of a 50,000-word vocabulary (the gradients of all 50,000 rows, as in training).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def median_time(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from elmokit.lm import Candidates, sampled_softmax_nll
    from elmokit.nn import functional, lstm_bptt

    g = torch.Generator().manual_seed(0)
    result: dict = {"threads": 1, "torch": torch.__version__}
    weight = torch.randn(2048, 128, generator=g) * 0.05  # W_h (4D, P)
    weight_t = weight.t().contiguous()
    for n in (8, 32, 64):
        x = torch.randn(n, 2048, generator=g)
        with torch.no_grad():
            result[f"recurrent_product_linear_us_n{n}"] = 1e6 * median_time(
                lambda x=x: functional.invariant_linear(x, weight_t), 201)
            if hasattr(functional, "invariant_matmul"):
                result[f"recurrent_product_matmul_us_n{n}"] = 1e6 * median_time(
                    lambda x=x: functional.invariant_matmul(x, weight), 201)

    B, T, I, D, P = 64, 22, 128, 512, 128
    lengths = torch.randint(5, T + 1, (B,), generator=g)
    inputs = torch.randn(B, T, I, generator=g, requires_grad=True)
    params = [(torch.randn(4 * D, I, generator=g) * 0.05).requires_grad_(), torch.zeros(4 * D, requires_grad=True),
              (torch.randn(4 * D, P, generator=g) * 0.05).requires_grad_(),
              (torch.randn(P, D, generator=g) * 0.05).requires_grad_()]
    backward_times = []

    def lstm_once():
        for p in [inputs, *params]:
            p.grad = None
        out, _ = lstm_bptt.projected_lstm(inputs, lengths, None, *params, 3.0, 3.0)
        start = time.perf_counter()
        out.sum().backward()
        backward_times.append(time.perf_counter() - start)

    for _ in range(13):
        lstm_once()
    result["lstm_backward_ms"] = 1e3 * statistics.median(backward_times[2:])

    hidden = torch.randn(2816, 128, generator=g, requires_grad=True)
    softmax_weight = (torch.randn(50_000, 128, generator=g) * 0.1).requires_grad_()
    softmax_bias = torch.zeros(50_000, requires_grad=True)
    targets = torch.randint(0, 50_000, (2816,), generator=g)
    candidates = Candidates.draw(50_000, 4096, seed=0, step=0)

    def softmax_once():
        hidden.grad = softmax_weight.grad = softmax_bias.grad = None
        sampled_softmax_nll(hidden, targets, softmax_weight, softmax_bias, candidates).sum().backward()

    result["sampled_softmax_ms"] = 1e3 * median_time(softmax_once, 9)
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
