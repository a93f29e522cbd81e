"""JSON bodies: float32 arrays written as the shortest decimal that reads back to the same float32,
and never a number JSON cannot carry (``NaN``, ``Infinity``): ``NonFinite`` is raised instead.

``dumps`` takes what the routes build: dicts, lists, strings, ints, Python floats (written by
``repr``, the shortest double) and numpy arrays or scalars (float32: numpy's shortest float32 form,
``np.float32(0.1)`` -> ``0.1``, where ``float(np.float32(0.1))`` would give ``0.10000000149011612``).
Non-ASCII characters are escaped, so any string a client sent (even a lone surrogate) can be echoed.

Speed: numpy's shortest float32 form (Dragon4, about 0.4 us a number) would cost more than the rest of
a small request. float32 arrays are written by orjson instead (Ryu, about 20 ns a number), whose digits
are the same shortest round-trip digits and whose layout is numpy's for 1e-4 <= |x| < 1e6; the few
numbers outside that band (``0.00001`` there, ``1e-05`` here) are rewritten one by one in numpy's form.
"""

from __future__ import annotations

import json
import math

import numpy as np
import orjson


class NonFinite(ValueError):
    """A value to be written is NaN or infinite."""


_string = json.JSONEncoder(ensure_ascii=True).encode

# orjson lays out a float32 as numpy does for 1e-4 <= |x| < 1e6 (positional); outside that band (and a
# margin around its edges, so that no rounding at an edge matters) a number is written by numpy.
_SMALL, _LARGE = np.float32(2e-4), np.float32(5e5)


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
    if a.dtype == np.float32 and a.size:
        return _float32_array(a)
    if a.ndim == 1:
        return "[" + ",".join(a.astype(str).tolist()) + "]"
    return "[" + ",".join(_array(row) for row in a) + "]"


def _float32_array(a: np.ndarray) -> str:
    """A finite, non-empty float32 array, nested as its shape, each number in numpy's shortest form."""
    a = np.ascontiguousarray(a)
    flat = a.reshape(-1)
    magnitude = np.abs(flat)
    odd = np.flatnonzero(((magnitude < _SMALL) & (flat != 0)) | (magnitude >= _LARGE))
    if not len(odd):
        return orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY).decode("ascii")
    # Mark the odd numbers NaN, which orjson writes as null (nothing else is: the array is finite), and put
    # numpy's form of each in its place, in order.
    marked = a.copy()
    marked.reshape(-1)[odd] = np.nan
    pieces = orjson.dumps(marked, option=orjson.OPT_SERIALIZE_NUMPY).decode("ascii").split("null")
    numbers = flat[odd].astype(str).tolist()
    out = [pieces[0]]
    for number, piece in zip(numbers, pieces[1:]):
        out += (number, piece)
    return "".join(out)


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
        if len(obj) > 1 and _same_float32_arrays(obj):  # /embed's vectors: written as one array, one pass
            return _array(np.stack(obj))
        return "[" + ",".join(_value(v) for v in obj) + "]"
    raise TypeError(f"cannot write {type(obj).__name__} as JSON")


def _same_float32_arrays(items) -> bool:
    first = items[0]
    if type(first) is not np.ndarray or first.dtype != np.float32 or not first.ndim:
        return False
    return all(type(a) is np.ndarray and a.dtype == np.float32 and a.shape == first.shape for a in items)


def dumps(obj) -> bytes:
    """``obj`` as compact JSON bytes (ASCII); ``NonFinite`` if any number is NaN or infinite."""
    return _value(obj).encode("ascii")
