"""Learning-rate schedules, as plain functions of the step so that tests can check them by hand.

BERT's (Devlin et al. 2019, §A.2): a linear warmup, then a linear decay (:func:`warmup_linear_decay`).

The schedules of ULMFiT (Howard & Ruder 2018, "Universal Language Model Fine-tuning
for Text Classification", ACL, §3.2):

* Discriminative fine-tuning (eq. 2): every layer group l has its own rate, and
  ``eta^{l-1} = eta^l / 2.6``: the top group (the classifier head, or the LM's softmax) takes the
  peak rate, each group below it the rate of the group above divided by ``decay``.
* Slanted triangular learning rates (eq. 3): a short linear increase, then a long linear decay::

      cut = floor(T * cut_frac)
      p   = t / cut                                   if t < cut
            1 - (t - cut) / (cut * (1 / cut_frac - 1))  otherwise
      eta_t = eta_max * (1 + p * (ratio - 1)) / ratio

  Deliberate deviations, both at the edges where eq. 3 is undefined or negative: ``cut`` is at
  least 1 (for T < 1 / cut_frac eq. 3 divides by zero), and ``p`` is never below 0 (with the
  floor, ``cut / cut_frac`` can be below T, and eq. 3 would then turn the last rates negative);
  so the rate stays in ``[eta_max / ratio, eta_max]``.
"""

from __future__ import annotations

import math


def slanted_triangular_fraction(step: int, total_steps: int, *, cut_frac: float = 0.1, ratio: float = 32.0) -> float:
    """``eta_t / eta_max`` of eq. 3 at update ``step`` (0-based) of ``total_steps``: in [1/ratio, 1]."""
    if total_steps < 1:
        raise ValueError(f"the schedule needs at least one step, got total_steps={total_steps}")
    if not 0.0 < cut_frac < 1.0:
        raise ValueError(f"cut_frac must be in (0, 1), got {cut_frac}")
    if ratio < 1.0:
        raise ValueError(f"ratio must be >= 1, got {ratio}")
    if not 0 <= step < total_steps:
        raise ValueError(f"step {step} is outside the schedule's 0..{total_steps - 1}")
    cut = max(1, math.floor(total_steps * cut_frac))
    if step < cut:
        p = step / cut
    else:
        p = max(0.0, 1.0 - (step - cut) / (cut * (1.0 / cut_frac - 1.0)))
    return (1.0 + p * (ratio - 1.0)) / ratio


def slanted_triangular(step: int, total_steps: int, eta_max: float, *, cut_frac: float = 0.1,
                       ratio: float = 32.0) -> float:
    """eta_t of eq. 3 (see the module docstring)."""
    return eta_max * slanted_triangular_fraction(step, total_steps, cut_frac=cut_frac, ratio=ratio)


def discriminative_rates(top_rate: float, num_groups: int, decay: float = 2.6) -> list[float]:
    """Per-group rates, bottom group first (eq. 2's ``eta^{l-1} = eta^l / decay``):
    ``[top / decay^(n-1), ..., top / decay, top]``. ``decay`` 1 gives one rate for all groups."""
    if num_groups < 1:
        raise ValueError(f"need at least one layer group, got {num_groups}")
    if decay < 1.0:
        raise ValueError(f"the decay of discriminative rates must be >= 1, got {decay}")
    return [top_rate / decay ** (num_groups - 1 - group) for group in range(num_groups)]


def warmup_linear_decay(step: int, peak: float, warmup_steps: int, decay_steps: int | None) -> float:
    """The rate of 1-based ``step``: rising linearly to ``peak`` over ``warmup_steps``, then falling
    linearly to 0 after ``decay_steps`` (constant after the warmup without ``decay_steps``)."""
    if step <= warmup_steps:
        return peak * step / warmup_steps
    if decay_steps is None:
        return peak
    return peak * max(0.0, (decay_steps - step + 1) / max(1, decay_steps - warmup_steps + 1))
