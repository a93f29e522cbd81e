"""The engine's StepLoop on its own, with a hand-written step function: what it logs, when it saves, where it
stops (max steps, epochs, a budget) and the one non-finite policy, counted by hand."""

from __future__ import annotations

import math

import pytest

from elmokit.engine.run_folder import MetricsLog, read_metrics
from elmokit.engine.steps import NonFiniteError, StepLoop, StepOutcome


def _loop(tmp_path, losses, *, epochs_of=None, **changes):
    saved = []

    def save():  # what write_checkpoint leaves, as far as the loop looks
        saved.append(loop.step)
        (tmp_path / "checkpoints" / f"step_{loop.step:08d}").mkdir(parents=True)
        (tmp_path / "checkpoints" / f"step_{loop.step:08d}" / "state.json").write_text("{}")

    batches = iter([(i, (epochs_of or (lambda i: 0))(i)) for i in range(len(losses))])
    loop = StepLoop(batches=batches, step_fn=lambda i, step: StepOutcome(losses[i], 1.0, 10 + i, {"part": losses[i] / 2}),
                    save=save, metrics=MetricsLog(tmp_path / "metrics.jsonl"),
                    checkpoints=tmp_path / "checkpoints", max_steps=changes.pop("max_steps", None),
                    epochs=changes.pop("epochs", None), log_every=2, checkpoint_every=3, progress=False, **changes)
    return loop, saved


def test_logs_every_n_saves_every_m_and_the_final_save_once(tmp_path):
    loop, saved = _loop(tmp_path, [5.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.25], max_steps=7)
    loop.run()
    loop.save_final()
    logged = read_metrics(tmp_path)
    assert [e["step"] for e in logged] == [2, 4, 6, 7]  # every 2, and the last step
    assert [e["loss"] for e in logged] == [4.0, 2.0, 0.5, 0.25] and logged[0]["part"] == 2.0
    assert [e["tokens"] for e in logged] == [21, 21 + 25, 21 + 25 + 29, 21 + 25 + 29 + 16]
    assert saved == [3, 6, 7] and loop.last_loss == 0.25
    loop.save_final()
    assert saved == [3, 6, 7]  # already written


def test_stops_at_the_epoch_limit_and_at_a_budget(tmp_path):
    loop, _ = _loop(tmp_path, [1.0] * 6, epochs_of=lambda i: i // 2, epochs=2)
    loop.run()
    assert loop.step == 4
    (tmp_path / "b").mkdir()
    loop, saved = _loop(tmp_path / "b", [1.0] * 6, should_stop=lambda: loop.step == 2)
    loop.run()
    assert loop.step == 2 and loop.stopped and [e["step"] for e in read_metrics(tmp_path / "b")] == [2]


@pytest.mark.parametrize("allowed", [0, 1])
def test_a_non_finite_step_stops_naming_it_or_is_skipped_and_counted(tmp_path, allowed):
    loop, saved = _loop(tmp_path, [3.0, 2.0, 1.0, math.nan, 0.5, 0.25], max_steps=6, skip_nonfinite_steps=allowed)
    if not allowed:
        with pytest.raises(NonFiniteError, match="step 4: non-finite loss .*step_00000003, holds finite weights"):
            loop.run()
        assert saved == [3] and loop.step == 4
        return
    loop.run()
    metrics = read_metrics(tmp_path)
    assert {"step": 4, "skipped": "non-finite loss", "skipped_nonfinite": 1, "tokens": 10 + 11 + 12 + 13} in metrics
    assert [e["skipped_nonfinite"] for e in metrics if "loss" in e] == [0, 1] and loop.skipped == 1 and loop.step == 6
