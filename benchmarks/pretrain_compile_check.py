"""Does ``torch.compile`` (inductor, CPU) pay for GPT-2's pretraining step? Compile time, step CPU time against
eager in one interleaved run, and whether the compiled step repeats itself bit for bit (what a resumed run
needs) and matches eager.

    python benchmarks/pretrain_compile_check.py            # GPT-2 mini, 32 x 128, 2 threads (~1 min)

The compiled part is the transformer body (``model.transformer``); the loss is `elmokit pretrain`'s
(``heads.causal_lm_model_loss``, the fused LM head), GPT-2's GeLU fused as in the run (``fused.py``).
The batch is random token ids (the speed does not depend on the text). Compile time is wall time (inductor
compiles in worker processes, which the process CPU clock does not see; set
TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 for a cold compile: inductor caches compiled graphs across runs).
On a shared machine only the ratio compiled / eager of the same run means anything; the record keeps the load average.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="mini")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6, help="steps of each, alternating (medians)")
    parser.add_argument("--out", default=str(REPO / "docs" / "benchmarks" / "pretrain_compile_check.json"))
    args = parser.parse_args(argv)
    from pretrain_vs_trainer import machine

    from elmokit.io import atomic_path
    from elmokit.pretraining.fused import fuse_activations
    from elmokit.pretraining.heads import causal_lm_model_loss
    from elmokit.pretraining.models import build_model

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()

    def make():
        model = build_model("gpt2", args.preset, vocab_size=8000, seed=0)
        fuse_activations(model)
        return model.train()

    ids = torch.randint(0, 8000, (32, 128), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    eager, compiled = make(), make()
    compiled.transformer = torch.compile(compiled.transformer)

    def step(model, seed=None):
        if seed is not None:
            torch.manual_seed(seed)
        out = causal_lm_model_loss(model, ids, mask, ids)
        out.mean.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        return out.mean.detach(), grads

    started = time.perf_counter()
    step(compiled, 5)
    compile_wall = time.perf_counter() - started
    times = {"eager": [], "compiled": []}
    for r in range(args.rounds):
        pairs = [("eager", eager), ("compiled", compiled)]
        for name, model in (pairs if r % 2 else pairs[::-1]):
            before = time.process_time()
            step(model)
            times[name].append(time.process_time() - before)
    (l1, g1), (l2, g2), (l3, _) = step(compiled, 7), step(compiled, 7), step(eager, 7)
    repeat = bool(torch.equal(l1, l2) and all(torch.equal(a, b) for a, b in zip(g1, g2)))
    median = {k: statistics.median(v) for k, v in times.items()}
    record = {
        "command": "python " + " ".join([os.path.relpath(__file__, REPO), *(argv if argv is not None else sys.argv[1:])]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "cpus": os.cpu_count(), "threads": args.threads, "torch": torch.__version__, "preset": args.preset,
        "load": {"loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                 "note": "shared machine: only the ratio compiled / eager of this run means anything"},
        "compile_and_first_step_wall_s": compile_wall,
        "inductor_caches_disabled": os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES") == "1",
        "step_cpu_s_median": median, "step_cpu_s": times,
        "compiled_over_eager_step_cpu": median["compiled"] / median["eager"],
        "compiled_step_repeats_bit_for_bit": repeat,
        "compiled_vs_eager_loss_same_seed": [float(l1), float(l3)],
    }
    out = Path(args.out)
    with atomic_path(out) as tmp:
        Path(tmp).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: record[k] for k in ("compile_and_first_step_wall_s", "step_cpu_s_median",
                                              "compiled_over_eager_step_cpu", "compiled_step_repeats_bit_for_bit",
                                              "compiled_vs_eager_loss_same_seed")}, indent=1))


if __name__ == "__main__":
    main()
