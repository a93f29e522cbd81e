"""The JSON writer: float32 arrays in numpy's shortest float32 form (the oracle: numpy's ``str`` of each
value, which Dragon4 makes the shortest decimal that reads back to the same float32), nested as the
array, for any finite value: random bit patterns, and every float32 near the edges of the band where
the fast writer's layout and numpy's agree (1e-4 and 1e6)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("orjson", reason="needs the serve extra: pip install 'elmokit[serve]'")

from elmokit.serve.encode import NonFinite, dumps  # noqa: E402


def numpy_form(a: np.ndarray) -> str:
    if a.ndim == 1:
        return "[" + ",".join(str(x) for x in a) + "]"
    return "[" + ",".join(numpy_form(row) for row in a) + "]"


def finite_bit_patterns(n: int, seed: int) -> np.ndarray:
    values = np.random.default_rng(seed).integers(0, 2**32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return values[np.isfinite(values)]


def around(value: float, ulps: int) -> np.ndarray:
    """Every float32 within ``ulps`` steps of ``value``, both signs."""
    middle = int(np.float32(value).view(np.uint32))
    values = np.arange(middle - ulps, middle + ulps, dtype=np.uint32).view(np.float32)
    return np.concatenate([values, -values])


@pytest.mark.parametrize("values", [
    pytest.param(finite_bit_patterns(200_000, 0), id="random-bits"),
    pytest.param(np.concatenate([around(v, 3000) for v in (1e-4, 2e-4, 5e5, 1e6)]), id="band-edges"),
    pytest.param(np.array([0.0, -0.0, 1.0, 0.1, 1e-45, -1e-45, 3.4028235e38, 1.1754944e-38, 123456789.0, 1e-5],
                          dtype=np.float32), id="special"),
])
def test_float32_numbers_are_numpys_shortest_form(values):
    written = dumps(values).decode("ascii")
    assert written == numpy_form(values)
    read_back = np.asarray(json.loads(written), dtype=np.float64).astype(np.float32)
    assert np.array_equal(read_back.view(np.uint32), values.view(np.uint32))  # bit for bit, -0.0 included


@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 4), (1, 1), (4, 1, 2), (7,)])
def test_arrays_nest_as_their_shape(shape):
    values = finite_bit_patterns(4 * int(np.prod(shape)), 1)[: int(np.prod(shape))].reshape(shape)
    assert dumps(values).decode() == numpy_form(values)
    small = (values / np.float32(3e38)).astype(np.float32)  # mostly tiny: nearly every number rewritten by numpy
    assert dumps(small).decode() == numpy_form(small)


def test_views_structures_and_empty_arrays():
    base = np.arange(24, dtype=np.float32).reshape(4, 6) / np.float32(7)
    for view in (base[:, ::2], base.T, base[1:3, 1:]):  # not C-contiguous
        assert dumps(view).decode() == numpy_form(view)
    nested = dumps([base[0], {"x": base[1, :2], "n": 3}]).decode()
    assert nested == "[" + numpy_form(base[0]) + ',{"x":' + numpy_form(base[1, :2]) + ',"n":3}]'
    assert dumps(np.zeros((0,), np.float32)) == b"[]"
    assert dumps(np.zeros((2, 0), np.float32)) == b"[[],[]]"
    assert dumps(np.array([1.5, 2.25], dtype=">f4")) == b"[1.5,2.25]"  # big-endian input


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_are_refused(bad):
    with pytest.raises(NonFinite):
        dumps([np.array([0.5, bad], dtype=np.float32)])
