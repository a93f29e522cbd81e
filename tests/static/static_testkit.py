"""Helpers for the static-vector tests: a tiny synthetic corpus."""

from __future__ import annotations

import random

ANIMALS = ["cat", "dog", "horse", "cow", "sheep", "goat", "mouse"]
VERBS = ["runs", "eats", "sleeps", "jumps", "walks"]
PLACES = ["field", "barn", "house", "garden", "river"]


def tiny_lines(n_lines: int = 211, seed: int = 3) -> list[str]:
    """Oddly sized, deterministic, a little structured: 'the <animal> <verb> in the <place> .'"""
    rng = random.Random(seed)
    lines = []
    for i in range(n_lines):
        words = ["The", rng.choice(ANIMALS), rng.choice(VERBS), "in", "the", rng.choice(PLACES) + "."]
        if i % 7 == 0:
            words += ["And", "the", rng.choice(ANIMALS), rng.choice(VERBS), "!"]
        lines.append(" ".join(words))
        if i % 13 == 0:
            lines.append("")  # blank lines are skipped
    return lines

from testkit import need_shared  # noqa: E402,F401  (one definition for every test folder)
