"""Data parallelism: 2 CPU processes (gloo on the loopback interface) train exactly like one process on the
same global batch - same losses and weights after a few steps, up to float summation order."""


import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from testkit import run_two_ranks
from train_helpers import ddp_worker, run_tiny, tiny_vocab

from elmokit.bilm import PRESETS
from elmokit.training.trainer import read_metrics


@pytest.mark.slow  # several seconds: run by CI with -m slow
def test_two_processes_match_one_process_on_the_same_global_batch(tmp_path, monkeypatch):
    """Sampled softmax (both ranks must draw the same negatives), 4 steps of 6 sentences = 3 per
    rank. Dropout off: its masks are drawn per rank and cannot match one process's."""
    changes = dict(max_steps=4, batch_size=6, softmax="sampled", n_negative_samples=12, checkpoint_every=100)
    model = PRESETS["tiny"]
    tiny_vocab(tmp_path)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    single = run_tiny(tmp_path / "single", model=model, **changes)

    # A file rendezvous: no port to pick and lose to another process (gloo's own connections use
    # ports the OS assigns on the loopback interface).
    init_method = f"file://{tmp_path / 'rendezvous'}"
    run_two_ranks(ddp_worker, (2, init_method, str(tmp_path / "ddp"), model.to_dict(), changes))

    ddp_metrics = [e for e in read_metrics(tmp_path / "ddp") if "loss" in e]
    np.testing.assert_allclose([e["loss"] for e in ddp_metrics], [e["loss"] for e in single.history], rtol=1e-6)
    a = load_file(str(tmp_path / "single" / "checkpoints" / "step_00000004" / "model.safetensors"))
    b = load_file(str(tmp_path / "ddp" / "checkpoints" / "step_00000004" / "model.safetensors"))
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-6, atol=1e-6, msg=name)
