"""JSON bodies: float32 arrays written as the shortest decimal that reads back to the same float32,
and never a number JSON cannot carry (``NaN``, ``Infinity``): ``NonFinite`` is raised instead.

``dumps`` takes what the routes build: dicts, lists, strings, ints, Python floats (written by
``repr``, the shortest double) and numpy arrays or scalars (float32: numpy's shortest float32 form,
``np.float32(0.1)`` -> ``0.1``, where ``float(np.float32(0.1))`` would give ``0.10000000149011612``).
Non-ASCII characters are escaped, so any string a client sent (even a lone surrogate) can be echoed.
"""

from __future__ import annotations

import json
import math

import numpy as np


class NonFinite(ValueError):
    """A value to be written is NaN or infinite."""


_string = json.JSONEncoder(ensure_ascii=True).encode


def _array(a: np.ndarray) -> str:
    if a.ndim == 0:
        return _scalar(a)
    if a.dtype.kind == "f":
        if not np.isfinite(a).all():
            raise NonFinite(f"a {a.shape} array holds NaN or infinite values")
        if a.dtype not in (np.float32, np.float64):
            a = a.astype(np.float32)
    elif a.dtype.kind not in "iub":
        return _value(a.tolist())
    if a.dtype.kind == "b":
        return json.dumps(a.tolist())
    if a.ndim == 1:
        return "[" + ",".join(a.astype(str).tolist()) + "]"
    return "[" + ",".join(_array(row) for row in a) + "]"


def _scalar(x) -> str:
    x = np.asarray(x)
    if x.dtype.kind == "f":
        if not np.isfinite(x):
            raise NonFinite(f"the value {x} is not finite")
        return str(x.astype(np.float64 if x.dtype == np.float64 else np.float32).astype(str))
    return json.dumps(x.item())


def _value(obj) -> str:
    if obj is None or obj is True or obj is False or isinstance(obj, int) and not isinstance(obj, bool):
        return json.dumps(obj)
    if isinstance(obj, str):
        return _string(obj)
    if isinstance(obj, np.generic):
        return _scalar(obj)
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise NonFinite(f"the value {obj} is not finite")
        return repr(obj)
    if isinstance(obj, np.ndarray):
        return _array(obj)
    if isinstance(obj, dict):
        return "{" + ",".join(_string(str(k)) + ":" + _value(v) for k, v in obj.items()) + "}"
    if isinstance(obj, (list, tuple)):
        return "[" + ",".join(_value(v) for v in obj) + "]"
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def dumps(obj) -> bytes:
    """``obj`` as compact JSON bytes (ASCII); ``NonFinite`` if any number is NaN or infinite."""
    return _value(obj).encode("ascii")
