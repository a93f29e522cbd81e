"""The hand-written BPTT of ProjectedLSTM (elmokit.nn.lstm_bptt) against finite differences
(gradcheck) and against autograd through the plain per-step loop (the recurrence written out).

Tiny odd shapes: B=3, T=7, I=5, D=6, P=4; ragged lengths with an empty and a one-step row.
"""

from __future__ import annotations

import copy

import pytest
import torch

import elmokit.nn.lstm as lstm_module
from elmokit.nn.lstm import ProjectedLSTM
from elmokit.nn.lstm_bptt import ProjectedLSTMFunction, _clip_mask

B, T, I, D, P = 3, 7, 5, 6, 4
LENGTHS = [(4, 7, 0), (1, 7, 5), (7, 7, 7)]
CLIPS = [(None, None), (0.3, 0.2), (3.0, 3.0)]  # none; binding often; binding rarely


@pytest.fixture
def training_path():
    """Set elmokit.nn.lstm.TRAINING_PATH for one test, restoring it after."""
    before = lstm_module.TRAINING_PATH

    def use(path):
        lstm_module.TRAINING_PATH = path

    yield use
    lstm_module.TRAINING_PATH = before


def make_lstm(clips, dtype, seed=0):
    torch.manual_seed(seed)
    module = ProjectedLSTM(I, D, P, cell_clip=clips[0], proj_clip=clips[1]).to(dtype)
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.7)  # large enough that the clips bind
    return module


def run(module, path, inputs, lengths, state, weights, set_path):
    """outputs, final h, c and every gradient of a fixed random linear function of them."""
    set_path(path)
    inputs = inputs.clone().requires_grad_(True)
    state = tuple(s.clone().requires_grad_(True) for s in state) if state is not None else None
    module.zero_grad(set_to_none=True)
    outputs, (h, c) = module(inputs, torch.tensor(lengths), state)
    ((outputs * weights[0]).sum() + (h * weights[1]).sum() + (c * weights[2]).sum()).backward()
    grads = {"inputs": inputs.grad, **{n: p.grad for n, p in module.named_parameters()}}
    if state is not None:
        grads.update(h0=state[0].grad, c0=state[1].grad)
    return {"outputs": outputs, "h": h, "c": c}, grads, outputs.grad_fn


def random_case(dtype, with_state, seed=1):
    g = torch.Generator().manual_seed(seed)
    inputs = torch.randn(B, T, I, generator=g, dtype=dtype)
    state = (torch.randn(B, P, generator=g, dtype=dtype), torch.randn(B, D, generator=g, dtype=dtype)) if with_state else None
    weights = (torch.randn(B, T, P, generator=g, dtype=dtype), torch.randn(B, P, generator=g, dtype=dtype),
               torch.randn(B, D, generator=g, dtype=dtype))
    return inputs, state, weights


def gradcheck_args(clips, lengths):
    module = make_lstm(clips, torch.float64)
    inputs, state, _ = random_case(torch.float64, True)
    args = [inputs, torch.tensor(lengths), *state, module.input_linear.weight, module.input_linear.bias,
            module.hidden_linear.weight, module.projection.weight]
    return [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]


@pytest.mark.parametrize("lengths, clips", list(zip(LENGTHS, [CLIPS[1], CLIPS[0], CLIPS[2]])))
def test_gradcheck_float64(lengths, clips):
    """Finite differences along random directions (gradcheck's fast mode: seconds, not minutes)."""
    args = gradcheck_args(clips, lengths)
    function = lambda *a: ProjectedLSTMFunction.apply(*a, *clips)  # noqa: E731
    assert torch.autograd.gradcheck(function, args, eps=1e-6, atol=1e-7, fast_mode=True)


@pytest.mark.slow
def test_gradcheck_float64_full_jacobian():
    """Every entry of the Jacobian (~1 minute on a busy 2-core machine)."""
    clips = (0.3, 0.2)
    args = gradcheck_args(clips, LENGTHS[0])
    assert torch.autograd.gradcheck(lambda *a: ProjectedLSTMFunction.apply(*a, *clips), args, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("clips", CLIPS)
@pytest.mark.parametrize("lengths", LENGTHS)
def test_equals_autograd_loop_float64(clips, lengths, with_state, training_path):
    module = make_lstm(clips, torch.float64)
    inputs, state, weights = random_case(torch.float64, with_state)
    plain, plain_grads, plain_fn = run(module, "autograd", inputs, lengths, state, weights, training_path)
    fused, fused_grads, fused_fn = run(module, "fused", inputs, lengths, state, weights, training_path)
    assert "ProjectedLSTMFunction" in type(fused_fn).__name__ and "ProjectedLSTMFunction" not in type(plain_fn).__name__
    for name in plain:  # the forward pass does the same operations in the same order
        assert torch.equal(plain[name], fused[name]), name
    assert plain_grads.keys() == fused_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-12, atol=1e-12, msg=name)
    if clips == (0.3, 0.2):  # the clips really bind, on every row that runs
        assert (fused["outputs"].abs() == 0.2).sum() >= 5
        assert (fused["c"].abs() == 0.3).any() or min(lengths) == 0


@pytest.mark.parametrize("clips", CLIPS)
def test_equals_autograd_loop_float32(clips, training_path):
    module = make_lstm(clips, torch.float32)
    inputs, state, weights = random_case(torch.float32, True)
    plain, plain_grads, _ = run(module, "autograd", inputs, (4, 7, 0), state, weights, training_path)
    fused, fused_grads, _ = run(module, "fused", inputs, (4, 7, 0), state, weights, training_path)
    for name in plain:
        assert torch.equal(plain[name], fused[name]), name
    for name, grad in plain_grads.items():
        scale = grad.abs().max().item()
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-5, atol=1e-6 * max(1.0, scale), msg=name)


@pytest.mark.parametrize("which", ["cell", "projection"])
def test_clip_gradient_passes_at_the_boundary_as_clamp_does(which, training_path):
    """A clip set to a value the recurrence reaches exactly: torch.clamp passes the gradient at
    the boundary (and stops it outside), and so must the hand-written backward."""
    values = torch.tensor([-2.0, -1.0, -0.5, 0.0, 1.0, 1.5], dtype=torch.float64, requires_grad=True)
    values.clamp(-1.0, 1.0).sum().backward()
    assert values.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 1.0, 0.0]
    assert _clip_mask(values.detach(), 1.0).tolist() == values.grad.tolist()

    module = make_lstm((None, None), torch.float64)
    inputs, state, weights = random_case(torch.float64, True)
    training_path("fused")
    with torch.no_grad():
        _, (h, c) = module(inputs, torch.tensor([1, 7, 5]), state)  # row 0: h, c after step 0
    if which == "cell":
        module.cell_clip = boundary = abs(c[0, 0].item())
    else:
        module.proj_clip = boundary = abs(h[0, 1].item())
    plain, plain_grads, _ = run(module, "autograd", inputs, (1, 7, 5), state, weights, training_path)
    fused, fused_grads, _ = run(module, "fused", inputs, (1, 7, 5), state, weights, training_path)
    reached = fused["c"][0, 0] if which == "cell" else fused["h"][0, 1]
    assert reached.abs().item() == boundary
    for name, grad in plain_grads.items():
        torch.testing.assert_close(fused_grads[name], grad, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("clips", [(None, None), (0.3, 0.2)])
def test_a_rows_outputs_and_gradients_do_not_depend_on_the_other_rows(clips, training_path):
    """Each row alone, and the batch in another order, give the row's outputs and its input and
    initial-state gradients bit for bit (float32)."""
    training_path("fused")
    module = make_lstm(clips, torch.float32)
    inputs, state, weights = random_case(torch.float32, True)
    lengths = (4, 7, 0)
    batch, batch_grads, _ = run(module, "fused", inputs, lengths, state, weights, training_path)
    flip = [2, 0, 1]
    flipped, flipped_grads, _ = run(module, "fused", inputs[flip], [lengths[i] for i in flip],
                                    tuple(s[flip] for s in state), tuple(w[flip] for w in weights), training_path)
    for row in range(B):
        alone, alone_grads, _ = run(module, "fused", inputs[row : row + 1], [lengths[row]],
                                    tuple(s[row : row + 1] for s in state), tuple(w[row : row + 1] for w in weights),
                                    training_path)
        where = flip.index(row)
        for name in ("outputs", "h", "c"):
            assert torch.equal(alone[name][0], batch[name][row]), (row, name)
            assert torch.equal(flipped[name][where], batch[name][row]), (row, name)
        for name in ("inputs", "h0", "c0"):
            assert torch.equal(alone_grads[name][0], batch_grads[name][row]), (row, name)
            assert torch.equal(flipped_grads[name][where], batch_grads[name][row]), (row, name)


def test_saturated_gates_give_finite_gradients(training_path):
    """Gate pre-activations below -88 overflow exp(-x) in float32: autograd through
    1 / (1 + exp(-x)) gave 0 * inf = NaN; both paths now differentiate the gate as s (1 - s),
    the true 0 (the plain loop through ``functional.sigmoid``'s own backward)."""
    module = make_lstm((3.0, 3.0), torch.float32)
    with torch.no_grad():
        module.input_linear.bias.fill_(-100.0)
        module.input_linear.bias[D : 2 * D] = 0.5  # j (tanh) stays moderate
    inputs, state, weights = random_case(torch.float32, False)
    _, exact_grads, _ = run(copy.deepcopy(module).double(), "autograd", inputs.double(), (4, 7, 0), None,
                            tuple(w.double() for w in weights), training_path)  # float64: no overflow
    for path in ("autograd", "fused"):
        _, grads, _ = run(module, path, inputs, (4, 7, 0), None, weights, training_path)
        for name, grad in exact_grads.items():
            assert torch.isfinite(grads[name]).all(), (path, name)
            torch.testing.assert_close(grads[name].double(), grad, rtol=1e-5, atol=1e-6, msg=f"{path} {name}")


def test_path_selection(training_path):
    module = make_lstm((3.0, 3.0), torch.float32)
    inputs = torch.randn(B, T, I)
    lengths = torch.tensor([4, 7, 0])
    training_path("fused")
    outputs, _ = module(inputs, lengths)  # parameters require grad: training
    assert "ProjectedLSTMFunction" in type(outputs.grad_fn).__name__
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast: the plain loop's per-op casts
        outputs, _ = module(inputs, lengths)
        assert "ProjectedLSTMFunction" not in type(outputs.grad_fn).__name__
    with torch.no_grad():  # inference: the prepared path
        outputs, _ = module(inputs, lengths)
        assert outputs.grad_fn is None
    training_path("autograd")
    outputs, _ = module(inputs, lengths)
    assert "ProjectedLSTMFunction" not in type(outputs.grad_fn).__name__
    training_path("cudnn")
    with pytest.raises(ValueError, match="TRAINING_PATH must be one of"):
        module(inputs, lengths)


@pytest.mark.parametrize("rows", [1, 15, 16, 37, 64, 65, 130])
@pytest.mark.parametrize("width", [16, 20])
def test_products_written_in_place_are_the_invariant_products_bit_for_bit(rows, width):
    """The forward's projection and the backward's dh are written into slices of larger buffers
    (``_linear_into``, ``_matmul_into``); where that skips the padding of ``invariant_linear`` /
    ``invariant_matmul`` the result must still be theirs, bit for bit, at any row offset."""
    from elmokit.nn.functional import invariant_linear, invariant_matmul, pad_columns
    from elmokit.nn.lstm_bptt import _linear_into, _matmul_into

    g = torch.Generator().manual_seed(rows * 100 + width)
    x = torch.randn(rows, 48, generator=g)
    weight = torch.randn(width, 48, generator=g)  # (out, in), as nn.Linear stores it
    buffer = torch.full((rows + 9, width), float("nan"))
    written = _linear_into(x, weight, buffer[5 : 5 + rows])
    assert torch.equal(written, invariant_linear(x, weight)) and torch.equal(buffer[5 : 5 + rows], written)
    assert buffer[:5].isnan().all() and buffer[5 + rows :].isnan().all(), "only the slice is written"

    stored = torch.randn(48, width, generator=g)  # (in, out): the backward multiplies by W as stored
    buffer = torch.full((rows + 9, width), float("nan"))
    _matmul_into(x, pad_columns(stored), buffer[3 : 3 + rows])
    assert torch.equal(buffer[3 : 3 + rows], invariant_matmul(x, stored))
    assert buffer[:3].isnan().all() and buffer[3 + rows :].isnan().all()
