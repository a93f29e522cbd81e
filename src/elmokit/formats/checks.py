"""Checks every weight file reader applies to the arrays it read (no elmokit imports: any reader may use them)."""

from __future__ import annotations

import numpy as np


def describe_non_finite(array) -> str | None:
    """``None`` if every value of ``array`` is finite, else e.g. ``"3 non-finite values (first: nan at (0, 2))"``."""
    values = np.asarray(array)
    if not np.issubdtype(values.dtype, np.floating):
        return None
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())} non-finite value{'s' if bad.sum() > 1 else ''} (first: {values[first]} at {first})"
