"""Helpers for the ELMo tests: where ../shared is, tiny options, random original-format weight files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ELMOKIT_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "fixtures"


def need_shared(*parts: str) -> Path:
    """The path under ../shared, or skip the test saying what is missing."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"needs {path} (the shared data folder beside the checkout, or set ELMOKIT_SHARED)")
    return path


def tiny_options(
    *,
    filters=((1, 3), (2, 5), (4, 7)),
    activation="relu",
    n_highway=1,
    char_dim=3,
    lstm_dim=11,
    projection_dim=5,
    n_layers=2,
    cell_clip=3.0,
    proj_clip=3.0,
    skip=True,
    n_characters=262,
) -> dict:
    """Oddly sized options.json so that a swapped axis fails loudly."""
    return {
        "lstm": {"dim": lstm_dim, "projection_dim": projection_dim, "n_layers": n_layers,
                 "cell_clip": cell_clip, "proj_clip": proj_clip, "use_skip_connections": skip},
        "char_cnn": {"embedding": {"dim": char_dim}, "filters": [list(f) for f in filters],
                     "n_highway": n_highway, "n_characters": n_characters,
                     "max_characters_per_token": 50, "activation": activation},
    }


def random_tf_weights(options: dict, seed: int = 0, scale: float = 0.5) -> dict[str, np.ndarray]:
    """Random weights named and shaped as bilm-tf's dump (spec §3.2), written from the spec."""
    rng = np.random.default_rng(seed)
    cnn, lstm = options["char_cnn"], options["lstm"]
    E, P, D = cnn["embedding"]["dim"], lstm["projection_dim"], lstm["dim"]
    F = sum(n for _, n in cnn["filters"])

    def r(*shape):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    w = {"char_embed": r(261, E)}
    for i, (width, n) in enumerate(cnn["filters"]):
        w[f"CNN/W_cnn_{i}"], w[f"CNN/b_cnn_{i}"] = r(1, width, E, n), r(n)
    for k in range(cnn.get("n_highway") or 0):
        for name in ("carry", "transform"):
            w[f"CNN_high_{k}/W_{name}"], w[f"CNN_high_{k}/b_{name}"] = r(F, F) / np.sqrt(F), r(F)
    if F != P:
        w["CNN_proj/W_proj"], w["CNN_proj/b_proj"] = r(F, P) / np.sqrt(F), r(P)
    for d in (0, 1):
        for layer in range(lstm.get("n_layers", 1)):
            cell = f"RNN_{d}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"
            w[f"{cell}/W_0"], w[f"{cell}/B"], w[f"{cell}/W_P_0"] = r(2 * P, 4 * D), r(4 * D), r(D, P)
    return {name: value.astype(np.float32) for name, value in w.items()}  # the format is float32


def write_original_files(directory: Path, options: dict, weights: dict) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    options_path, weights_path = directory / "options.json", directory / "weights.hdf5"
    options_path.write_text(json.dumps(options))
    with h5py.File(weights_path, "w") as f:
        for name, value in weights.items():
            f.create_dataset(name, data=value)
    return options_path, weights_path


def model_snapshot(bilm):
    """Everything Embedder/Elmo used to change on the caller's model."""
    return {
        "training": bilm.training,
        "stateful": bilm.stateful,
        "precision": bilm.precision,
        "token_cache": bilm.token_cache,
        "params": {n: (p.requires_grad, p.dtype, p.detach().clone()) for n, p in bilm.named_parameters()},
    }


def assert_unchanged(bilm, before) -> None:
    """``bilm`` is as ``model_snapshot`` saw it: mode, precision, cache, every parameter."""
    import torch

    after = model_snapshot(bilm)
    for key in ("training", "stateful", "precision"):
        assert after[key] == before[key], key
    assert after["token_cache"] is before["token_cache"], "token_cache"
    for name, (requires_grad, dtype, value) in before["params"].items():
        now = after["params"][name]
        assert (now[0], now[1]) == (requires_grad, dtype), name
        assert torch.equal(now[2], value), name


def write_lines(path, lines):
    """Write one line per item (UTF-8, newline-terminated); returns the path."""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def load_benchmark(name: str, module_name: str | None = None):
    """The module of ``benchmarks/<name>.py``, executed under ``module_name`` (benchmarks are scripts,
    not a package) and registered in ``sys.modules`` under it, as an import would (dataclasses need it)."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(module_name or f"benchmark_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_two_ranks(worker, args: tuple, timeout_s: float = 180.0) -> None:
    """Run ``worker(rank, *args)`` in two spawned processes (a data-parallel test) and wait for both,
    failing after ``timeout_s``; a rank still alive then is killed."""
    import time

    import torch.multiprocessing as mp

    context = mp.start_processes(worker, args=args, nprocs=2, join=False, start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=1):
            assert time.monotonic() < deadline, "DDP test timed out"
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
