"""Plain SGD and the plateau decay of the learning rate (Zaremba et al.'s and Kim et al.'s PTB recipe):
the update is lr x the clipped gradient, the decay follows the rule restated here, and a resumed run
continues the schedule bit-exactly."""

import math

import pytest
import torch
from safetensors.torch import load_file
from train_helpers import GOLDEN_MODEL, TINY_CORPUS, run_tiny

from elmokit.engine.run_folder import RunFolder
from elmokit.training.config import TrainingConfig
from elmokit.training.trainer import read_metrics

PLATEAU = dict(optimizer="sgd", lr=1.0, clip_norm=5.0, valid_corpus=[str(TINY_CORPUS)], valid_every=2,
               valid_sentences=8, lr_decay=0.5, log_every=1, checkpoint_every=5)


def checkpoint_weights(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / f"step_{step:08d}" / "model.safetensors"))


def test_one_sgd_step_moves_the_weights_by_lr_times_the_clip(tmp_path):
    """With the gradient clipped to norm c, plain SGD moves the weights by exactly lr x c (Adagrad would
    divide each coordinate by sqrt(accumulator + g^2): with the tiny accumulator set here, by ~|g|)."""
    start = run_tiny(tmp_path / "start", max_steps=2, checkpoint_every=2)
    lr, clip = 0.5, 1e-2
    model = GOLDEN_MODEL.replace(dropout=0.0)
    before = checkpoint_weights(tmp_path / "start", 2)  # what the model folder holds
    result = run_tiny(tmp_path / "sgd", model=model, optimizer="sgd", lr=lr, clip_norm=clip, max_steps=1,
                      initial_accumulator=1e-6, checkpoint_every=1, init_from=str(start.model_dir))
    (logged,) = [e for e in result.history if "grad_norm" in e]
    assert logged["grad_norm"] > 10 * clip  # the clip is active
    after = checkpoint_weights(tmp_path / "sgd", 1)
    assert set(after) == set(before)
    moved = math.sqrt(sum(float(((after[k].double() - before[k].double()) ** 2).sum()) for k in after))
    assert moved == pytest.approx(lr * clip, rel=1e-3)


def test_the_learning_rate_halves_when_validation_stalls(tmp_path):
    result = run_tiny(tmp_path / "run", max_steps=24, lr_decay_min_gain=2.0, **PLATEAU)
    valid = [(e["step"], e["valid_ppl"]) for e in result.history if "valid_ppl" in e]
    decays = [(e["step"], e["lr"]) for e in result.history if "lr" in e]
    # the rule, restated: decay when a validation is not below (the previous one - min_gain)
    expected, lr, previous = [], 1.0, None
    for step, ppl in valid:
        if previous is not None and not ppl < previous - 2.0:
            lr *= 0.5
            expected.append((step, lr))
        previous = ppl
    assert len(valid) == 12
    assert decays == expected
    assert 0 < len(decays) < len(valid) - 1  # both outcomes happened: the test is not vacuous


def test_resumed_sgd_run_continues_the_schedule_exactly(tmp_path):
    run_tiny(tmp_path / "straight", max_steps=16, lr_decay_min_gain=2.0, **PLATEAU)
    run_tiny(tmp_path / "stopped", max_steps=7, lr_decay_min_gain=2.0, **PLATEAU)
    run_tiny(tmp_path / "stopped", max_steps=16, lr_decay_min_gain=2.0, resume=True, **PLATEAU)
    a, b = checkpoint_weights(tmp_path / "straight", 16), checkpoint_weights(tmp_path / "stopped", 16)
    assert all(torch.equal(a[k], b[k]) for k in a)
    lr_records = [e for e in read_metrics(tmp_path / "straight") if "lr" in e]
    assert {e["step"] < 7 for e in lr_records} == {True, False}  # decays before and after the stop
    assert lr_records == [e for e in read_metrics(tmp_path / "stopped") if "lr" in e]


@pytest.mark.parametrize("changes, message", [
    (dict(optimizer="adam"), "optimizer must be adagrad or sgd"),
    (dict(lr_decay=1.5), "lr_decay must be in"),
    (dict(lr_decay=0.5), "give valid_corpus too"),
    (dict(lr_decay_min_gain=-1.0), "lr_decay_min_gain"),
])
def test_bad_schedule_settings_are_refused(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainingConfig(max_steps=1, **changes)


def test_a_version_1_training_record_reads_as_adagrad_without_decay():
    record = TrainingConfig(max_steps=3).to_dict()
    for name in ("optimizer", "lr_decay", "lr_decay_min_gain"):
        del record[name]
    record["format_version"] = 1
    config = TrainingConfig.from_dict(record)
    assert (config.optimizer, config.lr_decay) == ("adagrad", 1.0)


def test_the_plateau_rule_switched_on_at_resume_acts_from_the_next_validation(tmp_path):
    """An Adagrad run resumed with the plateau rule: the first validation after the resume sets the baseline,
    the learning rate halves only after it, and the run record then holds the rule (and stays readable).
    min_gain 1e9 makes every later validation a plateau, so the decays are known in advance."""
    adagrad = dict(lr=0.2, log_every=1, checkpoint_every=2, keep_checkpoints=5)
    decay = dict(valid_corpus=[str(TINY_CORPUS)], valid_every=2, valid_sentences=8, lr_decay=0.5,
                 lr_decay_min_gain=1e9)
    run_tiny(tmp_path / "constant", max_steps=8, **adagrad)
    run_tiny(tmp_path / "switched", max_steps=4, **adagrad)
    result = run_tiny(tmp_path / "switched", max_steps=10, resume=True, **adagrad, **decay)
    validated = [e["step"] for e in result.history if "valid_ppl" in e]
    decays = [(e["step"], e["lr"]) for e in read_metrics(tmp_path / "switched") if "lr" in e and "loss" not in e]
    assert validated == [6, 8, 10]
    assert decays == [(8, 0.1), (10, 0.05)]
    # up to the first decay the updates are the constant run's, bit for bit
    a, b = checkpoint_weights(tmp_path / "constant", 8), checkpoint_weights(tmp_path / "switched", 8)
    assert all(torch.equal(a[k], b[k]) for k in a)
    saved = RunFolder.open(tmp_path / "switched", kind="train", resume=True).saved("training", TrainingConfig.from_dict)
    # the record now holds the rule, and stays readable
    assert (saved.lr_decay, saved.lr_decay_min_gain, saved.valid_every) == (0.5, 1e9, 2)
