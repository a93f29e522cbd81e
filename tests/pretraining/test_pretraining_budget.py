"""`elmokit pretrain --max-seconds`: a compute budget in CPU-seconds of training steps. The run stops at the
first step boundary at or after the budget (checked against its own logged CPU clock), records the stop,
and a budget-stopped run resumed without the budget ends bit-identical to one that never stopped."""

from __future__ import annotations

import json

import pytest
from pretraining_testkit import need_transformers, write_document_corpus
from train_helpers import one_thread

need_transformers()

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from elmokit.cli.main import main  # noqa: E402
from elmokit.engine.run_folder import read_metrics  # noqa: E402
from elmokit.pretraining.run import PretrainConfig, learning_rate, pretrain  # noqa: E402

TIMING = ("tokens_per_s", "elapsed_s", "cpu_s")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.txt"
    write_document_corpus(path, documents=5, seed=7)
    return path


def _config(**changes) -> PretrainConfig:
    base = dict(objective="bert", preset="tiny", max_steps=5, batch_size=3, vocab_size=250, max_tokens=24, log_every=1,
                checkpoint_every=4, lr=2e-3)
    return PretrainConfig(**{**base, **changes})


def _run(run_dir, corpus, config, resume=False):
    with one_thread():
        return pretrain(run_dir, corpus=str(corpus), config=config, resume=resume, command="test", progress=False)


@pytest.mark.slow  # three pretraining runs (~4 s): the default suite stays under a minute; CI runs -m slow
def test_a_budget_stop_is_a_step_boundary_and_resuming_past_it_is_bit_identical(tmp_path, corpus):
    config = _config()
    straight = _run(tmp_path / "straight", corpus, config)
    config = config.replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))  # the same tokenizer
    stopped = _run(tmp_path / "split", corpus, config.replace(max_seconds=1e-9))  # over budget after one step
    assert stopped.step == 1 and (tmp_path / "split" / "model" / "config.json").exists()
    budget = json.loads((tmp_path / "split" / "training.json").read_text())["budget"]
    assert budget["stopped_by_budget"] is True and budget["step"] == 1 and budget["cpu_s"] > 0
    state = json.loads((tmp_path / "split" / "checkpoints" / "step_00000001" / "state.json").read_text())
    assert state["cpu_s"] == pytest.approx(budget["cpu_s"], abs=1e-3)
    resumed = _run(tmp_path / "split", corpus, config, resume=True)  # no budget now: on to max_steps
    assert resumed.step == straight.step == 5 and resumed.tokens == straight.tokens
    assert "budget" not in json.loads((tmp_path / "split" / "training.json").read_text())
    untimed = [[{k: v for k, v in e.items() if k not in TIMING} for e in read_metrics(tmp_path / run)]
               for run in ("straight", "split")]
    assert untimed[0] == untimed[1]
    cpu = [e["cpu_s"] for e in read_metrics(tmp_path / "split")]
    assert cpu == sorted(cpu) and cpu[0] == pytest.approx(budget["cpu_s"], abs=1e-3)  # the clock carried over
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000005" / name))
        b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000005" / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_a_budget_alone_ends_at_the_first_step_past_it_with_a_constant_rate_after_warmup(tmp_path, corpus, capsys):
    out = tmp_path / "run"
    with one_thread():
        code = main(["pretrain", "--objective", "gpt", "--corpus", str(corpus), "--out", str(out), "--preset", "tiny",
                     "--max-seconds", "0.15", "--warmup-steps", "2", "--batch-size", "3", "--vocab-size", "250",
                     "--max-tokens", "24", "--log-every", "1", "--lr", "1e-3", "--threads", "1"])
    assert code == 0, capsys.readouterr().err
    metrics = [e for e in read_metrics(out) if "loss" in e]
    cpu = [e["cpu_s"] for e in metrics]
    assert len(metrics) >= 2 and cpu[-2] < 0.15 <= cpu[-1]  # the step before the stop was under budget
    record = json.loads((out / "training.json").read_text())
    assert record["budget"]["stopped_by_budget"] and record["budget"]["step"] == metrics[-1]["step"]
    assert record["budget"]["tokens"] == metrics[-1]["tokens"]
    config = PretrainConfig.from_dict(record["pretraining"])
    assert config.decay_steps is None
    assert [e["lr"] for e in metrics] == [learning_rate(config, e["step"]) for e in metrics]
    assert [e["lr"] for e in metrics][:3] == pytest.approx([5e-4, 1e-3, 1e-3])
    assert "CPU-seconds of training steps (budget --max-seconds 0.15)" in (out / "model" / "README.md").read_text()


def test_a_budget_must_be_a_positive_finite_number_and_is_one_way_to_say_how_long(capsys):
    with pytest.raises(ValueError, match="max_seconds must be a finite number > 0"):
        PretrainConfig(objective="gpt", max_seconds=float("nan"))
    with pytest.raises(ValueError, match="give max_steps, epochs or max_seconds"):
        PretrainConfig(objective="gpt")
    assert PretrainConfig(objective="gpt", max_seconds=3).decay_steps is None
    with pytest.raises(SystemExit):
        main(["pretrain", "--objective", "gpt", "--corpus", "x", "--out", "y", "--max-seconds", "0"])
    assert "--max-seconds" in capsys.readouterr().err


@pytest.mark.slow  # an end-to-end run of 2-4 s; the default suite stays under a minute, CI runs it with -m slow
def test_ernie_stages_are_thirds_of_max_steps_and_a_resumed_run_keeps_its_stage(tmp_path, corpus):
    """`pretrain` hands the run's first max_steps to ERNIE (thirds: basic, phrase, entity) and checkpoints its
    batch counter, so 6 straight steps and 1 + 3 + 2 (a budget stop, then two resumes) run the same stages and
    end bit-identical."""
    config = _config(objective="ernie", max_steps=6, checkpoint_every=3)
    _run(tmp_path / "straight", corpus, config)
    stages = [e["stage"] for e in read_metrics(tmp_path / "straight")]
    assert stages == [0, 0, 1, 1, 2, 2]
    config = config.replace(tokenizer_dir=str(tmp_path / "straight" / "tokenizer"))
    _run(tmp_path / "split", corpus, config.replace(max_seconds=1e-9))  # stops after step 1 ...
    _run(tmp_path / "split", corpus, config.replace(max_steps=4), resume=True)  # ... to step 4 ...
    _run(tmp_path / "split", corpus, config, resume=True)  # ... to 6
    assert [e["stage"] for e in read_metrics(tmp_path / "split")] == stages
    a = load_file(str(tmp_path / "straight" / "checkpoints" / "step_00000006" / "model.safetensors"))
    b = load_file(str(tmp_path / "split" / "checkpoints" / "step_00000006" / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)
