"""The two properties batch invariance rests on, checked on the machine the tests run on."""

import pytest
import torch

from elmokit.nn.functional import MIN_GEMM_ROWS, PreparedWeight, invariant_linear, sigmoid


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


def test_sigmoid_does_not_depend_on_position():
    x = torch.randn(50_000, generator=torch.Generator().manual_seed(0)) * 6
    whole = sigmoid(x)
    pieces = torch.cat([sigmoid(x[i : i + 7]) for i in range(0, 7_000, 7)])
    assert torch.equal(pieces, whole[:7_000])
    # and it is the logistic function, against float64
    torch.testing.assert_close(whole.double(), torch.sigmoid(x.double()), atol=1e-7, rtol=0)
    assert sigmoid(torch.tensor([-1000.0, 1000.0])).tolist() == [0.0, 1.0]


@pytest.mark.parametrize("in_dim, out_dim", [(5, 44), (6, 5), (124, 124), (512, 2048), (2048, 4096), (512, 16384)])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_prepared_products_do_not_depend_on_the_batch(in_dim, out_dim, threads, precision):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        generator = torch.Generator().manual_seed(in_dim + out_dim)
        weight = torch.randn(out_dim, in_dim, generator=generator) / in_dim**0.5
        bias = torch.randn(out_dim, generator=generator)
        prepared = PreparedWeight(weight, bias, precision=precision)
        x = torch.randn(40, in_dim, generator=generator)
        with torch.inference_mode():
            alone = torch.cat([prepared(x[i : i + 1]) for i in range(40)])
            for rows in (1, 2, 3, 7, 15, 16, 17, 40):
                order = torch.randperm(40, generator=generator)[:rows]
                assert torch.equal(prepared(x[order]), alone[order]), rows
        tolerance = 1e-5 if precision == "fp32" else 5e-2
        torch.testing.assert_close(alone, x @ weight.T + bias, atol=tolerance * 10, rtol=tolerance)
    finally:
        torch.set_num_threads(previous)
