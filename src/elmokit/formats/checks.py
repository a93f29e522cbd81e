"""Checks every weight file reader and writer applies to its arrays (only the foundation imported: any reader may use them)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from elmokit.errors import UserError


class NonFiniteWeights(UserError):
    """Weights about to be written hold NaN or infinity (a diverged run); nothing was written."""


def describe_non_finite(array) -> str | None:
    """``None`` if every value of ``array`` is finite, else e.g. ``"3 non-finite values (first: nan at (0, 2))"``.
    ``array``: anything numpy reads, or a torch tensor (of any float dtype, on any device)."""
    if hasattr(array, "detach"):  # a torch tensor: test it where it is, copy only a bad one
        if not array.is_floating_point() or bool(array.detach().isfinite().all()):
            return None
        array = array.detach().float().cpu().numpy()
    values = np.asarray(array)
    if not np.issubdtype(values.dtype, np.floating):
        return None
    bad = ~np.isfinite(values)
    if not bad.any():
        return None
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return f"{int(bad.sum())} non-finite value{'s' if bad.sum() > 1 else ''} (first: {values[first]} at {first})"


def refuse_non_finite(tensors: Mapping[str, object], target: str | os.PathLike) -> None:
    """Raise ``NonFiniteWeights`` naming ``target`` and the first tensor that holds NaN or infinity:
    call it before writing ``target``, so that no file of non-finite weights is ever written."""
    for name, value in tensors.items():
        problem = describe_non_finite(value)
        if problem:
            raise NonFiniteWeights(f"{os.fspath(target)}: not written: tensor {name!r} holds {problem}; the model "
                                   "diverged: train again with a lower learning rate (or from the last finite checkpoint)")


class NonFiniteFile(UserError):
    """A weight file read holds NaN or infinity: refused at load (every output computed from it would be NaN)."""


def refuse_non_finite_read(tensors: Mapping[str, object], path: str | os.PathLike) -> Mapping[str, object]:
    """Return ``tensors`` read from ``path``, or raise ``NonFiniteFile`` naming the file and the first
    tensor that holds NaN or infinity."""
    for name, value in tensors.items():
        problem = describe_non_finite(value)
        if problem:
            raise NonFiniteFile(f"{os.fspath(path)}: tensor {name!r} holds {problem}; refusing a damaged model: "
                                "train it again, or copy it again from where it was trained")
    return tensors
