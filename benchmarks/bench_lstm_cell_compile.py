"""The LSTM cell's elementwise work, eager against inductor (``torch.compile``, CPU backend): speed,
compile time and whether the floats are the same.

    python benchmarks/bench_lstm_cell_compile.py [--rows 64] [--cell 512] [--tokens 1408] [--json out.json]
    python benchmarks/bench_lstm_cell_compile.py --smoke     # tiny sizes, a few repeats

One thread; per-call CPU time (``time.process_time``, what other processes take does not count), median
of repeats. The parts, at the biLM step's shapes (``bench_training.py --set lstm_dim=512``: 64 rows a
step, D = 512, 1,408 tokens a direction and layer):

* ``cell_forward``: one step's elementwise half, the training path's own ``lstm_bptt.cell_step``
  (eager: the three sigmoids, tanh twice, the cell update and clip, m = o tanh c) against the same
  step written as one function for inductor (``dynamic=True``: one graph for every row count);
* ``backward_coefficients``: the backward's gate coefficients for all tokens at once (i (1 - i) j,
  ...: products and differences only), eager against compiled;
* ``call_overhead``: a compiled ``a * b + 1`` on (rows, D) against eager;
* ``exp``, ``tanh``: largest error in units in the last place against float64, eager and compiled.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from elmokit.io import write_json  # noqa: E402


def cpu_us(fn, repeats: int, inner: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.process_time()
        for _ in range(inner):
            fn()
        times.append((time.process_time() - start) / inner * 1e6)
    return statistics.median(times)


def compiled(fn):
    """fn for inductor, one graph for any row count."""
    return torch.compile(fn, dynamic=True, fullgraph=True)


def first_call_s(fn, *args) -> float:
    """The first call's seconds: for a compiled function, tracing + code generation + g++."""
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def cell_textbook(step, c_prev, cell_clip: float):
    """The recurrence's elementwise half as expressions (module docstring of elmokit.nn.lstm)."""
    i, j, f, o = step.chunk(4, dim=1)
    i = 1.0 / (1.0 + torch.exp(-i))
    j = torch.tanh(j)
    f = 1.0 / (1.0 + torch.exp(-(f + 1.0)))
    o = 1.0 / (1.0 + torch.exp(-o))
    raw = f * c_prev + i * j
    cell = raw.clamp(-cell_clip, cell_clip)
    tanh_cell = torch.tanh(cell)
    return torch.cat([i, j, f, o], dim=1), raw, cell, tanh_cell, o * tanh_cell


def coefficients(acts, cell_prev, tanh_cell):
    """The backward's k (N, 4D) and k_c (N, D), the same operations as lstm_bptt's backward."""
    i, j, f, o = acts.chunk(4, dim=1)
    k = torch.cat([j * (i * (1 - i)), i * (1 - j * j), cell_prev * (f * (1 - f)), tanh_cell * (o * (1 - o))], dim=1)
    return k, o * (1 - tanh_cell * tanh_cell)


def max_ulp(values: torch.Tensor, reference: np.ndarray) -> float:
    got = values.double().numpy()
    spacing = np.spacing(np.abs(reference).astype(np.float32)).astype(np.float64)
    return float((np.abs(got - reference) / spacing).max())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64, help="rows of a step (default 64)")
    parser.add_argument("--cell", type=int, default=512, help="cell size D (default 512)")
    parser.add_argument("--tokens", type=int, default=1408, help="tokens of the backward's all-steps part (default 1408)")
    parser.add_argument("--repeats", type=int, default=15, help="timed repeats (default 15)")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and few repeats: checks that it runs")
    parser.add_argument("--json", default=None, help="also write the result here")
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.cell, args.tokens, args.repeats = 5, 8, 20, 3
    import bench_training

    from elmokit.nn.lstm_bptt import cell_step

    torch.set_num_threads(1)
    n, D, N = args.rows, args.cell, args.tokens
    g = torch.Generator().manual_seed(0)
    pre = torch.randn(n, 4 * D, generator=g) * 2
    c_prev = torch.randn(n, D, generator=g)
    work, outs = pre.clone(), [torch.empty(n, D) for _ in range(4)]

    def eager_cell():
        work.copy_(pre)
        return cell_step(work, c_prev, *outs, 3.0)

    fused_cell = compiled(cell_textbook)
    result: dict = {"date": datetime.date.today().isoformat(), "machine": bench_training.machine(),
                    "torch": torch.__version__, "threads": 1,
                    "command": "python " + " ".join(["benchmarks/bench_lstm_cell_compile.py"] + sys.argv[1:]),
                    "shapes": {"rows": n, "cell": D, "tokens": N}}
    compile_s = first_call_s(fused_cell, pre, c_prev, 3.0)
    fused_cell(pre[: max(1, n - 3)], c_prev[: max(1, n - 3)], 3.0)  # another row count: no recompile
    eager_cell()
    eager_out = (work, outs[0], outs[2], outs[3])
    acts, raw, _, tanh_cell, memory = fused_cell(pre, c_prev, 3.0)
    copy_us = cpu_us(lambda: work.copy_(pre), args.repeats, 20)
    result["cell_forward"] = {
        "eager_us": cpu_us(eager_cell, args.repeats, 20) - copy_us,
        "compiled_us": cpu_us(lambda: fused_cell(pre, c_prev, 3.0), args.repeats, 20),
        "compile_s": compile_s,
        "bit_identical": {name: bool(torch.equal(a, b)) for name, a, b in
                          zip(("activations", "cell_raw", "tanh_cell", "memory"), eager_out, (acts, raw, tanh_cell, memory))},
        "max_abs_diff_memory": float((eager_out[3] - memory).abs().max()),
    }

    acts_all = torch.rand(N, 4 * D, generator=g)
    cell_prev_all, tanh_all = torch.randn(N, D, generator=g), torch.rand(N, D, generator=g) * 2 - 1
    fused_coefficients = compiled(coefficients)
    compile_s = first_call_s(fused_coefficients, acts_all, cell_prev_all, tanh_all)
    same = all(torch.equal(a, b) for a, b in zip(coefficients(acts_all, cell_prev_all, tanh_all),
                                                  fused_coefficients(acts_all, cell_prev_all, tanh_all)))
    result["backward_coefficients"] = {
        "eager_us": cpu_us(lambda: coefficients(acts_all, cell_prev_all, tanh_all), args.repeats, 3),
        "compiled_us": cpu_us(lambda: fused_coefficients(acts_all, cell_prev_all, tanh_all), args.repeats, 3),
        "compile_s": compile_s, "bit_identical": same}

    a, b = torch.randn(n, D, generator=g), torch.randn(n, D, generator=g)

    def tiny(x, y):
        return x * y + 1

    fused_tiny = compiled(tiny)
    fused_tiny(a, b)
    result["call_overhead"] = {"eager_us": cpu_us(lambda: tiny(a, b), args.repeats, 50),
                               "compiled_us": cpu_us(lambda: fused_tiny(a, b), args.repeats, 50)}

    x = torch.randn(1 << (10 if args.smoke else 16), generator=g) * 10
    for name, fn, ref in (("exp", torch.exp, np.exp), ("tanh", torch.tanh, np.tanh)):
        reference = ref(x.double().numpy())
        fused = compiled(fn)
        result[name] = {"eager_max_ulp": max_ulp(fn(x), reference), "compiled_max_ulp": max_ulp(fused(x), reference),
                        "identical_fraction": float((fn(x) == fused(x)).float().mean())}
    print(json.dumps(result, indent=1))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.json, result, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
