"""The four run configs (biLM, pretraining, distillation, CoVe) check their numbers through one rule
(``SavedConfig.require``): the same message for the same mistake, a ``UserError`` (still a ``ValueError``)."""

from __future__ import annotations

import math

import pytest

from elmokit.errors import UserError
from elmokit.pretraining.distill import DistillRunConfig
from elmokit.pretraining.run import PretrainConfig
from elmokit.training.config import TrainingConfig
from elmokit.transfer.cove_train import CoveTrainingConfig

MAKERS = {
    "train": lambda **bad: TrainingConfig(max_steps=3, **bad),
    "pretrain": lambda **bad: PretrainConfig(objective="bert", max_steps=3, **bad),
    "distill": lambda **bad: DistillRunConfig(**bad),
    "cove": lambda **bad: CoveTrainingConfig(max_steps=3, **bad),
}


@pytest.mark.parametrize("kind", MAKERS)
@pytest.mark.parametrize(("field", "value", "message"), [
    ("lr", math.nan, "lr must be a finite number > 0, got nan"),
    ("lr", -1.0, "lr must be a finite number > 0, got -1.0"),
    ("clip_norm", math.inf, "clip_norm must be a finite number > 0, got inf"),
    ("checkpoint_every", 0, "checkpoint_every must be at least 1, got 0"),
    ("log_every", True, "log_every must be at least 1, got True"),  # a bool is not a count
    ("skip_nonfinite_steps", -1, "skip_nonfinite_steps must be at least 0, got -1"),
])
def test_a_bad_number_is_the_same_user_error_in_every_run_config(kind, field, value, message):
    with pytest.raises(UserError) as caught:
        MAKERS[kind](**{field: value})
    assert str(caught.value) == message and isinstance(caught.value, ValueError)


def test_an_optional_field_left_unset_passes_and_a_set_one_is_checked():
    assert TrainingConfig(max_steps=3).epochs is None and PretrainConfig(objective="bert", epochs=2).max_seconds is None
    with pytest.raises(UserError, match=r"^epochs must be at least 1, got 0$"):
        TrainingConfig(max_steps=3, epochs=0)
    with pytest.raises(UserError, match=r"^max_seconds must be a finite number > 0, got -5$"):
        PretrainConfig(objective="bert", max_seconds=-5)
