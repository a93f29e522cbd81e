"""ULMFiT's schedules (engine/schedules.py) against eq. 2 and eq. 3 of Howard & Ruder (2018),
computed by hand here."""

import math

import pytest

from elmokit.engine.schedules import discriminative_rates, slanted_triangular, slanted_triangular_fraction


def by_hand(t, T, eta_max, cut_frac=0.1, ratio=32.0):
    """Eq. 3 written out once more, literally."""
    cut = math.floor(T * cut_frac)
    p = t / cut if t < cut else 1 - (t - cut) / (cut * (1 / cut_frac - 1))
    return eta_max * (1 + p * (ratio - 1)) / ratio


@pytest.mark.parametrize(("t", "expected"), [
    # T = 200, cut = 20, eta_max = 0.01, ratio 32: eta_0 = 0.01/32; the peak at t = cut; back to
    # 0.01/32 at t = T (p = 1 - 180/180 = 0).
    (0, 0.01 / 32),
    (10, 0.01 * (1 + 0.5 * 31) / 32),  # halfway up: p = 10/20
    (19, 0.01 * (1 + 19 / 20 * 31) / 32),
    (20, 0.01),  # the peak
    (110, 0.01 * (1 + 0.5 * 31) / 32),  # halfway down: p = 1 - 90/180
    (199, 0.01 * (1 + (1 - 179 / 180) * 31) / 32),
])
def test_stlr_matches_the_papers_formula_at_hand_picked_steps(t, expected):
    assert slanted_triangular(t, 200, 0.01) == pytest.approx(expected, rel=1e-12)
    assert slanted_triangular(t, 200, 0.01) == pytest.approx(by_hand(t, 200, 0.01), rel=1e-12)


def test_stlr_other_cut_frac_and_ratio_against_the_formula_everywhere():
    for t in range(57):
        assert slanted_triangular(t, 57, 0.004, cut_frac=0.25, ratio=10) == pytest.approx(
            by_hand(t, 57, 0.004, cut_frac=0.25, ratio=10), rel=1e-12)
    values = [slanted_triangular_fraction(t, 57, cut_frac=0.25, ratio=10) for t in range(57)]
    peak = values.index(max(values))
    assert peak == math.floor(57 * 0.25) and values[peak] == 1.0
    assert all(a < b for a, b in zip(values[:peak], values[1 : peak + 1]))  # slants up, then down
    assert all(a > b for a, b in zip(values[peak:], values[peak + 1 :]))


def test_stlr_edges_where_eq3_is_undefined_or_negative():
    # T * cut_frac < 1: eq. 3 divides by zero; cut becomes 1.
    assert slanted_triangular_fraction(0, 5) == pytest.approx(1 / 32)
    assert slanted_triangular_fraction(1, 5) == 1.0
    # T = 19: cut = 1 and cut/cut_frac = 10 < 19, where eq. 3 goes below 1/ratio (negative at the
    # end); the rate stays at eta_max / ratio instead.
    assert by_hand(18, 19, 1.0) < 0
    assert slanted_triangular_fraction(18, 19) == pytest.approx(1 / 32)
    assert min(slanted_triangular_fraction(t, 19) for t in range(19)) == pytest.approx(1 / 32)
    with pytest.raises(ValueError, match="outside"):
        slanted_triangular_fraction(19, 19)
    with pytest.raises(ValueError, match="cut_frac"):
        slanted_triangular_fraction(0, 10, cut_frac=0.0)


def test_discriminative_rates_divide_by_2_6_per_group_down_from_the_top():
    rates = discriminative_rates(0.01, 4)
    assert rates == pytest.approx([0.01 / 2.6**3, 0.01 / 2.6**2, 0.01 / 2.6, 0.01], rel=1e-12)
    assert discriminative_rates(0.004, 3, 1.0) == [0.004, 0.004, 0.004]
    with pytest.raises(ValueError):
        discriminative_rates(0.01, 0)
