"""`elmokit train --init-from MODEL`: a new run starts from a trained model's weights (bilm-tf's
restart.py), takes its architecture, vocabulary and tokenizer, and refuses what cannot fit."""

import json

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import GOLDEN_MODEL, GOLDEN_TRAINING, TINY_CORPUS, run_tiny, tiny_vocab

from elmokit.training.run_config import ConfigError, resolve_run_config
from elmokit.training.trainer import read_metrics


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny model trained for 20 steps: the model a second run starts from."""
    run_dir = tmp_path_factory.mktemp("first") / "run"
    run_tiny(run_dir, max_steps=20, checkpoint_every=100)
    return run_dir / "model"


def model_weights(model_dir):
    return {**load_file(str(model_dir / "model.safetensors")), **load_file(str(model_dir / "lm.safetensors"))}


def test_start_takes_the_models_weights(trained, tmp_path):
    """At a learning rate of 1e-30 a step moves no weight of float32 size ~1e-3..1: the second run's
    model is the first's, to the bit where the weight is not tiny. A run from random weights is not."""
    run_tiny(tmp_path / "from", max_steps=1, lr=1e-30, init_from=str(trained))
    run_tiny(tmp_path / "scratch", max_steps=1, lr=1e-30)
    start, started, scratch = (model_weights(trained), model_weights(tmp_path / "from" / "model"),
                               model_weights(tmp_path / "scratch" / "model"))
    assert start.keys() == started.keys()
    for name in start:
        torch.testing.assert_close(started[name], start[name], rtol=0, atol=1e-20, msg=name)
    assert any(not torch.equal(scratch[name], start[name]) for name in start)


def test_start_continues_the_learning_curve(trained, tmp_path):
    """The second run's first losses are where the first run ended (the mean of its last five steps,
    3.16 for this seed), not where a run from random weights begins (3.79)."""
    first = [e["loss"] for e in read_metrics(trained.parent) if "loss" in e]
    again = run_tiny(tmp_path / "from", max_steps=5, log_every=1, init_from=str(trained))
    losses = [e["loss"] for e in again.history if "loss" in e]
    end, start = sum(first[-5:]) / 5, first[0]
    assert abs(sum(losses) / 5 - end) < 0.25 * (start - end)


def test_the_run_records_which_weights_it_started_from(trained, tmp_path):
    run_tiny(tmp_path / "from", max_steps=1, init_from=str(trained))
    record = json.loads((tmp_path / "from" / "training.json").read_text())
    assert record["training"]["init_from"] == str(trained)
    import hashlib

    assert record["init_from"]["model_sha256"] == hashlib.sha256((trained / "model.safetensors").read_bytes()).hexdigest()
    assert record["init_from"]["lm_sha256"] == hashlib.sha256((trained / "lm.safetensors").read_bytes()).hexdigest()


def test_resume_of_a_started_run_is_bit_exact(trained, tmp_path):
    run_tiny(tmp_path / "straight", max_steps=8, checkpoint_every=4, init_from=str(trained))
    run_tiny(tmp_path / "stopped", max_steps=4, checkpoint_every=4, init_from=str(trained))
    run_tiny(tmp_path / "stopped", max_steps=8, checkpoint_every=4, init_from=str(trained), resume=True)
    a, b = model_weights(tmp_path / "straight" / "model"), model_weights(tmp_path / "stopped" / "model")
    assert all(torch.equal(a[name], b[name]) for name in a)


def test_settings_default_to_the_models_own(trained, tmp_path):
    run = resolve_run_config(tmp_path / "new", init_from=trained, corpus=str(TINY_CORPUS), training={"max_steps": 3})
    assert run.model_config == GOLDEN_MODEL
    assert run.vocab == str(trained / "vocab.txt")
    saved_tokenizer = json.loads((trained / "lm.json").read_text())["tokenizer"]
    assert run.training.tokenizer == saved_tokenizer == GOLDEN_TRAINING.tokenizer


@pytest.mark.parametrize("change, words", [
    (dict(sets={"lstm_dim": 32}), "the architecture differs"),
    (dict(tokenizer={"kind": "regex"}), "the tokenizer"),
])
def test_a_run_that_cannot_take_the_weights_is_refused(trained, tmp_path, change, words):
    with pytest.raises(ConfigError, match=words):
        resolve_run_config(tmp_path / "new", init_from=trained, corpus=str(TINY_CORPUS), training={"max_steps": 3},
                           **change)


def test_another_vocabulary_is_refused(trained, tmp_path):
    other = tmp_path / "vocab.txt"
    other.write_text("\n".join(["<S>", "</S>", "<UNK>", "a", "b"]) + "\n")
    with pytest.raises(ConfigError, match="not the model's vocabulary"):
        resolve_run_config(tmp_path / "new", init_from=trained, corpus=str(TINY_CORPUS), vocab=other,
                           training={"max_steps": 3})


def test_a_folder_without_a_softmax_is_refused(trained, tmp_path):
    bilm_only = tmp_path / "bilm_only"
    bilm_only.mkdir()
    for name in ("config.json", "model.safetensors", "vocab.txt"):
        (bilm_only / name).write_bytes((trained / name).read_bytes())
    with pytest.raises(ConfigError, match="no lm.safetensors"):
        resolve_run_config(tmp_path / "new", init_from=bilm_only, corpus=str(TINY_CORPUS), training={"max_steps": 3})
    assert tiny_vocab(tmp_path).exists()
