"""Training runs end to end: the tiny preset learns, the golden curve, exact resume (also after a
real kill -9), the run folder's records, export to both formats, CLI errors."""

import json
import os
import signal
import subprocess
import sys
import time

import h5py
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from train_helpers import GOLDEN_CURVE, GOLDEN_TRAINING, TINY_CORPUS, run_tiny, tiny_vocab

from elmokit.cli.main import main
from elmokit.engine.run_folder import resumable_fields
from elmokit.evaluation.perplexity import perplexity
from elmokit.formats import load_bilm, load_original
from elmokit.lm import LanguageModel
from elmokit.text.chars import batch_to_ids
from elmokit.text.corpus import Corpus
from elmokit.training.config import TrainingConfig
from elmokit.training.trainer import read_metrics

REPO = TINY_CORPUS.parents[2]


def final_weights(run_dir):
    steps = sorted((run_dir / "checkpoints").iterdir())
    return load_file(str(steps[-1] / "model.safetensors"))


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_golden_loss_curve(tmp_path):
    """Fixed seed, tiny preset, 30 CPU steps. Regenerate only in a commit that explains why:
    PYTHONPATH=src:tests python tests/train_helpers.py"""
    expected = [tuple(map(float, line.split())) for line in GOLDEN_CURVE.read_text().splitlines() if not line.startswith("#")]
    result = run_tiny(tmp_path / "run")
    got = [(e["step"], e["loss"]) for e in result.history if "loss" in e]
    assert [s for s, _ in got] == [s for s, _ in expected]
    np.testing.assert_allclose([l for _, l in got], [l for _, l in expected], rtol=1e-4)


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_tiny_preset_learns(tmp_path):
    result = run_tiny(tmp_path / "run", max_steps=60, log_every=1, checkpoint_every=100)
    losses = [e["loss"] for e in result.history if "loss" in e]
    assert np.mean(losses[-10:]) < 0.75 * np.mean(losses[:5])


def test_resume_is_bit_exact(tmp_path):
    """Stopped at step 7 (mid-epoch, mid-shuffle), resumed to 16 == 16 uninterrupted; with
    dropout and the sampled softmax, so RNG states and negatives must be restored too."""
    changes = dict(softmax="sampled", n_negative_samples=10, checkpoint_every=5)
    run_tiny(tmp_path / "straight", max_steps=16, **changes)
    run_tiny(tmp_path / "stopped", max_steps=7, **changes)
    result = run_tiny(tmp_path / "stopped", max_steps=16, resume=True, **changes)
    assert result.step == 16
    assert_same_weights(final_weights(tmp_path / "straight"), final_weights(tmp_path / "stopped"))
    straight = [e for e in read_metrics(tmp_path / "straight")]
    assert read_metrics(tmp_path / "stopped") == [
        {**e, "elapsed_s": f["elapsed_s"], "tokens_per_s": f["tokens_per_s"]}
        for e, f in zip(straight, read_metrics(tmp_path / "stopped"))
    ], "metrics.jsonl reads as one run"


@pytest.mark.slow  # several seconds: run by CI with -m slow
def test_resume_after_kill_9_is_bit_exact(tmp_path):
    vocab = tiny_vocab(tmp_path)
    args = ["--corpus", str(TINY_CORPUS), "--vocab", str(vocab), "--preset", "tiny", "--set", "dropout=0.1",
            "--batch-size", "6", "--shuffle-buffer", "16", "--checkpoint-every", "3", "--threads", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"}
    cli = [sys.executable, "-m", "elmokit.cli.main", "train"]
    killed = tmp_path / "killed"
    process = subprocess.Popen(cli + args + ["--out", str(killed), "--max-steps", "100000"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not list((killed / "checkpoints").glob("step_*")) and time.monotonic() < deadline:
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGKILL
    last = max(int(p.name.split("_")[1]) for p in (killed / "checkpoints").glob("step_*"))
    target = last + 7
    resumed = subprocess.run(cli + ["--out", str(killed), "--resume", "--max-steps", str(target)], env=env,
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr
    run_tiny(tmp_path / "straight", max_steps=target, checkpoint_every=3)  # the same run, in this process
    assert_same_weights(final_weights(tmp_path / "straight"), final_weights(killed))


def test_run_folder_records_everything(tmp_path):
    run = tmp_path / "run"
    result = run_tiny(run, max_steps=4, checkpoint_every=2, keep_checkpoints=1)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_00000004"], "only the newest kept"
    record = json.loads((run / "training.json").read_text())
    assert record["training"]["max_steps"] == 4 and record["softmax"] == "full"
    assert record["corpus"]["files"][0]["path"].endswith("tiny_corpus.txt")
    assert json.loads((run / "config.json").read_text())["dropout"] == 0.1
    assert (run / "command.txt").read_text().strip().endswith("test")
    assert [e["step"] for e in read_metrics(run)] == [1, 2, 3, 4]
    state = json.loads((run / "checkpoints" / "step_00000004" / "state.json").read_text())
    assert state["step"] == 4 and state["tokens"] == result.tokens and set(state["position"]) == {"epoch", "shard", "offset"}
    card = (result.model_dir / "README.md").read_text()
    assert "tiny_corpus.txt" in card and '"kind": "whitespace"' in card and "training tokens" in card


def test_export_native_and_original_give_identical_outputs(tmp_path):
    result = run_tiny(tmp_path / "run", max_steps=5)
    model_dir = result.model_dir
    expected = {"config.json", "model.safetensors", "lm.safetensors", "vocab.txt", "README.md"}
    assert {p.name for p in model_dir.iterdir()} >= expected
    lm, vocab, info = LanguageModel.load(model_dir)
    inference = load_bilm(model_dir)  # ignores the LM head files
    assert main(["convert", str(model_dir), str(tmp_path / "original")]) == 0
    with h5py.File(tmp_path / "original" / "weights.hdf5") as f:
        names = []
        f.visit(names.append)
    assert not any("softmax" in n for n in names), "the original format has no softmax"
    original = load_original(tmp_path / "original" / "options.json", tmp_path / "original" / "weights.hdf5")
    ids = batch_to_ids([["The", "cat", "sees", "a", "fish", "."], ["Hello"], ["a", "b", "c"]])
    with torch.no_grad():
        expected = lm.bilm(ids).layers
        assert torch.equal(inference(ids).layers, expected)
        assert torch.equal(original(ids).layers, expected)
    assert info["tokenizer"] == GOLDEN_TRAINING.tokenizer
    assert main(["perplexity", "--model", str(model_dir), "--corpus", str(TINY_CORPUS), "--json"]) == 0


def test_perplexity_cli_reports_all_three(tmp_path, capsys):
    result = run_tiny(tmp_path / "run", max_steps=3)
    capsys.readouterr()
    assert main(["perplexity", "--model", str(result.model_dir), "--corpus", str(TINY_CORPUS), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lm, vocab, _ = LanguageModel.load(result.model_dir)
    direct = perplexity(lm, vocab, Corpus(str(TINY_CORPUS)))
    assert out["forward"] == pytest.approx(direct.forward) and out["backward"] == pytest.approx(direct.backward)
    assert out["average"] == pytest.approx((direct.forward * direct.backward) ** 0.5)
    assert out["num_targets"] == 370 + 48


def test_cli_errors_name_the_problem_and_the_fix(tmp_path, capsys):
    vocab = tiny_vocab(tmp_path)
    base = ["train", "--corpus", str(TINY_CORPUS), "--vocab", str(vocab), "--preset", "tiny", "--threads", "1"]
    assert main(base + ["--out", str(tmp_path / "r"), "--max-steps", "2", "--batch-size", "8"]) == 0
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "r"), "--max-steps", "2"]) == 2
    assert "already holds a run; pass --resume" in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "r"), "--max-steps", "4", "--resume", "--lr", "0.1"]) == 2
    err = capsys.readouterr().err
    assert "training.lr: saved 0.2, requested 0.1" in err
    may_change = err.split("(only ")[1].split(" may change)")[0].split(", ")
    assert set(may_change) == resumable_fields(TrainingConfig) and "max_steps" in may_change and "lr" not in may_change
    assert main(base + ["--out", str(tmp_path / "s"), "--max-steps", "2", "--set", "lstm_size=3"]) == 2
    assert "unknown field(s) ['lstm_size']" in capsys.readouterr().err
    assert main(base + ["--out", str(tmp_path / "t")]) == 2
    assert "give max_steps or epochs" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path / "u"), "--corpus", str(tmp_path / "nothing*.txt"), "--vocab", str(vocab),
                 "--preset", "tiny", "--max-steps", "1"]) == 2
    assert "matches no file" in capsys.readouterr().err
    # resuming with no other flag takes everything from the run folder
    assert main(["train", "--out", str(tmp_path / "r"), "--resume", "--max-steps", "3", "--threads", "1"]) == 0
    assert json.loads((tmp_path / "r" / "checkpoints" / "step_00000003" / "state.json").read_text())["step"] == 3


def test_epochs_stop_at_the_end_of_the_corpus(tmp_path):
    result = run_tiny(tmp_path / "run", max_steps=None, epochs=2, batch_size=10)
    assert result.step == 10  # 48 sentences: 5 batches per epoch (the last one of 8)
    assert result.tokens == 2 * 370


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_bf16_autocast_trains(tmp_path):
    """The optional bf16 mode runs on the CPU and still learns (loss stays finite and falls)."""
    result = run_tiny(tmp_path / "run", max_steps=20, bf16=True, checkpoint_every=100)
    losses = [e["loss"] for e in result.history if "loss" in e]
    assert all(np.isfinite(losses)) and np.mean(losses[-5:]) < np.mean(losses[:5])
    lm, _, _ = LanguageModel.load(result.model_dir)
    assert lm.softmax_weight.dtype == torch.float32, "weights stay float32"


def test_batches_by_tokens(tmp_path):
    result = run_tiny(tmp_path / "run", max_steps=6, batch_tokens=40, checkpoint_every=100)
    tokens = [e["tokens"] for e in result.history if "loss" in e]
    steps = np.diff([0] + tokens)
    assert np.all(steps <= 40) and np.all(steps > 25)  # tiny_corpus sentences have 6-11 tokens
