"""The two properties batch invariance rests on, checked on the machine the tests run on."""

import numpy as np
import pytest
import torch

from elmokit.nn import functional
from elmokit.nn.functional import (
    MAX_MATMUL_BLOCK_ROWS,
    MIN_GEMM_ROWS,
    PreparedWeight,
    invariant_linear,
    invariant_matmul,
    sigmoid,
)

# "bf16" runs the CPU's own bf16 path (oneDNN kernels where the CPU has them, else the emulation);
# "bf16-emulated" forces the emulation, so that both bf16 paths are covered on any CPU.
PRECISIONS = ["fp32", "bf16", "bf16-emulated"]


def prepare(weight, bias, precision, monkeypatch):
    if precision == "bf16-emulated":
        monkeypatch.setattr(functional, "_native_bf16", False)
        prepared = PreparedWeight(weight, bias, precision="bf16")
        assert prepared.emulated
        return prepared
    return PreparedWeight(weight, bias, precision=precision)


@pytest.mark.parametrize("in_dim, out_dim", [(5, 44), (6, 5), (15, 5), (124, 124), (16, 256), (512, 2048)])
@pytest.mark.parametrize("threads", [1, 2])
def test_linear_row_results_do_not_depend_on_the_batch(in_dim, out_dim, threads):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(in_dim)
        weight = torch.randn(out_dim, in_dim, generator=generator)
        bias = torch.randn(out_dim, generator=generator)
        x = torch.randn(70, in_dim, generator=generator)
        alone = torch.cat([invariant_linear(x[i : i + 1], weight, bias) for i in range(70)])
        for rows in (1, 3, MIN_GEMM_ROWS - 1, MIN_GEMM_ROWS, 33, 70):
            order = torch.randperm(70, generator=generator)[:rows]
            assert torch.equal(invariant_linear(x[order], weight, bias), alone[order]), rows
        assert torch.equal(invariant_linear(x.view(7, 10, in_dim), weight, bias).view(70, -1), alone)
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("in_dim, out_dim", [(6, 5), (5, 44), (128, 512), (2048, 128), (4096, 256)])
@pytest.mark.parametrize("threads", [1, 2])
def test_matmul_row_results_do_not_depend_on_the_batch(in_dim, out_dim, threads):
    """x @ W with W stored (in, out), the LSTM backward's layout: each row alone (padded) equals
    the row in any batch, across the row blocks; and the values are x @ W (float64 oracle)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(in_dim + out_dim)
        weight = torch.randn(in_dim, out_dim, generator=generator)
        x = torch.randn(200, in_dim, generator=generator)
        alone = torch.cat([invariant_matmul(x[i : i + 1], weight) for i in range(200)])
        for rows in (1, MIN_GEMM_ROWS - 1, MIN_GEMM_ROWS, 33, MAX_MATMUL_BLOCK_ROWS, MAX_MATMUL_BLOCK_ROWS + 1, 200):
            order = torch.randperm(200, generator=generator)[:rows]
            assert torch.equal(invariant_matmul(x[order], weight), alone[order]), rows
        exact = x.double() @ weight.double()
        torch.testing.assert_close(alone.double(), exact, rtol=1e-4, atol=1e-4 * in_dim**0.5)
        assert invariant_matmul(x[:0], weight).shape == (0, out_dim)
    finally:
        torch.set_num_threads(previous)


def test_sigmoid_does_not_depend_on_position():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(0)) * 6
    whole = sigmoid(x)
    pieces = torch.cat([sigmoid(x[i : i + 7]) for i in range(0, 7_000, 7)])
    assert torch.equal(pieces, whole[:7_000])
    # and it is the logistic function, against float64
    torch.testing.assert_close(whole.double(), torch.sigmoid(x.double()), atol=1e-7, rtol=0)
    assert sigmoid(torch.tensor([-1000.0, 1000.0])).tolist() == [0.0, 1.0]


def test_sigmoid_gradient_is_s_times_one_minus_s_even_where_exp_overflows():
    """Float64 oracle: d sigmoid / dx = e^-x / (1 + e^-x)^2 (numpy, exact to float32 here). The gate of
    a highway layer whose pre-activation fell below -88 once gave NaN gradients (inf x 0)."""
    x64 = np.array([-1000.0, -200.0, -89.0, -88.0, -30.0, -1.5, 0.0, 0.7, 30.0, 89.0, 1000.0])
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp(-x64)
        expected = np.where(np.isinf(e), 0.0, e / (1.0 + e) ** 2)
    x = torch.tensor(x64, dtype=torch.float32, requires_grad=True)
    value = functional.sigmoid(x)
    value.sum().backward()
    assert torch.isfinite(x.grad).all()
    # float32 rounds s to 1 beyond x ~ 17, so s (1 - s) is 0 there, like torch.sigmoid's own backward
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-6, atol=1e-7)
    with torch.no_grad():  # the same values with and without autograd
        assert torch.equal(functional.sigmoid(x.detach()), value.detach())


@pytest.mark.parametrize("in_dim, out_dim", [(5, 44), (6, 5), (124, 124), (512, 2048), (2048, 4096), (512, 16384)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_prepared_products_do_not_depend_on_the_batch(in_dim, out_dim, threads, precision, monkeypatch):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(in_dim + out_dim)
        weight = torch.randn(out_dim, in_dim, generator=generator) / in_dim**0.5
        bias = torch.randn(out_dim, generator=generator)
        prepared = prepare(weight, bias, precision, monkeypatch)
        # bf16: up to 80 rows, as on CPUs with AMX oneDNN's bf16 kernel changes above ~32 rows (BF16_MAX_BLOCK_ROWS)
        n = 80 if precision == "bf16" else 40
        x = torch.randn(n, in_dim, generator=generator)
        with torch.inference_mode():
            alone = torch.cat([prepared(x[i : i + 1]) for i in range(n)])
            for rows in (r for r in (1, 2, 3, 7, 15, 16, 17, 33, 40, 65, 80) if r <= n):
                order = torch.randperm(n, generator=generator)[:rows]
                assert torch.equal(prepared(x[order]), alone[order]), rows
        tolerance = 1e-5 if precision == "fp32" else 5e-2
        torch.testing.assert_close(alone, x @ weight.T + bias, atol=tolerance * 10, rtol=tolerance)
    finally:
        torch.set_num_threads(previous)


def bf16_rounded(a: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), by bit arithmetic: independent of torch."""
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def test_bf16_rounding_oracle():
    values = np.array([1.0, 1 + 2**-8, 1 + 2**-7, 1 + 3 * 2**-8, -3.0, 1 + 2**-8 + 2**-20, 2**-7 + 2**-16], dtype=np.float32)
    assert bf16_rounded(values).tolist() == [1.0, 1.0, 1 + 2**-7, 1 + 2**-6, -3.0, 1 + 2**-7, 2**-7]


@pytest.mark.parametrize("precision", ["bf16", "bf16-emulated"])
def test_bf16_products_are_exact_products_of_bf16_operands(precision, monkeypatch):
    """The bf16 contract on every CPU: weights and inputs rounded to bf16, products summed in fp32,
    the bias added in fp32. So the result lies within fp32 summation error of the float64 product of
    the bf16-rounded operands (for any summation order: (n + 2) * 2^-24 * sum of |terms|), and is
    really rounded (far from the fp32 product). oneDNN's native kernel also returns the product
    (before the bias) rounded to bf16: up to 2^-8 of its size more."""
    generator = torch.Generator().manual_seed(37)
    in_dim, out_dim = 129, 37
    weight = torch.randn(out_dim, in_dim, generator=generator)
    bias = torch.randn(out_dim, generator=generator)
    x = torch.randn(23, in_dim, generator=generator)
    prepared = prepare(weight, bias, precision, monkeypatch)
    with torch.inference_mode():
        out = prepared(x).double().numpy()
    xr, wr = bf16_rounded(x.numpy()).astype(np.float64), bf16_rounded(weight.numpy()).astype(np.float64)
    oracle = xr @ wr.T + bias.numpy()
    summation = (in_dim + 2) * 2.0**-24 * (np.abs(xr) @ np.abs(wr).T + np.abs(bias.numpy()))
    bound = summation if prepared.emulated else summation + 2.0**-8 * np.abs(xr @ wr.T)
    assert (np.abs(out - oracle) <= bound).all()
    exact = x.double().numpy() @ weight.double().numpy().T + bias.numpy()
    assert (np.abs(out - exact) > summation).mean() > 0.5, "the operands really are rounded to bf16"


def test_bf16_backend_is_probed_once_and_named(monkeypatch):
    monkeypatch.setattr(functional, "_native_bf16", None)
    backend = functional.bf16_backend()
    assert backend in ("onednn", "emulated")
    assert functional._native_bf16 is (backend == "onednn")
    assert PreparedWeight(torch.ones(16, 16), precision="bf16").emulated is (backend == "emulated")
    assert not PreparedWeight(torch.ones(16, 16), precision="fp32").emulated


def test_invariant_scores_tie_identical_rows_and_keep_prefixes():
    rng = np.random.default_rng(1)
    rows = rng.standard_normal((1001, 37)).astype(np.float32)
    rows[500] = rows[3]
    rows[999] = rows[3]
    queries = rng.standard_normal((5, 37)).astype(np.float32)
    scores = functional.invariant_scores(rows, queries)
    assert scores.shape == (1001, 5) and scores.dtype == np.float32
    assert np.array_equal(scores[3], scores[500]) and np.array_equal(scores[3], scores[999])
    for k in (1, 17, 501):
        assert np.array_equal(functional.invariant_scores(rows[:k], queries), scores[:k]), k
    np.testing.assert_allclose(scores, rows.astype(np.float64) @ queries.T.astype(np.float64), atol=1e-4)
