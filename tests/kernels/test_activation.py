"""Public activation API through the loaded kernel: correctness against float64,
autograd, opcheck of every op, torch.compile without graph breaks, argument errors.

Each case is (variant fixture, tensor device, backend the dispatch must pick):
on CPU, the CPU variant on CPU tensors (native CPU ops). On a GPU machine also the
CUDA variant on CUDA tensors (native CUDA ops), the CPU variant on CUDA tensors
(Triton: it has no native CUDA kernel) and the CUDA variant on CPU tensors (eager
composite: it has no native CPU kernel), so every backend is exercised.
"""

import re

import pytest
import torch
import torch.nn.functional as F

from conftest import ACTIVATION_TOLERANCE, HAS_CUDA, poisoned_like

CASES = [("cpu_kernel", "cpu", "native")]
if HAS_CUDA:
    CASES += [("kernel", "cuda", "native"), ("cpu_kernel", "cuda", "triton"), ("kernel", "cpu", "eager")]
CASE_IDS = [f"{fixture}-{device}-{backend}" for fixture, device, backend in CASES]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
APPROX = ["tanh", "none"]
SHAPES = [(1, 8), (3, 33), (2, 5, 130), (64, 256)]


@pytest.fixture(params=CASES, ids=CASE_IDS)
def case(request):
    fixture, device, backend = request.param
    return request.getfixturevalue(fixture), device, backend


def assert_close(actual, expected, dtype):
    rtol, atol = ACTIVATION_TOLERANCE[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol)


def rand(shape, dtype, device, scale=3.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def ref_geglu(gate, up, approximate):
    return F.gelu(gate.double(), approximate=approximate) * up.double()


def ref_grads(grad_out, gate, up, approximate):
    g = gate.detach().double().requires_grad_()
    u = up.detach().double().requires_grad_()
    (F.gelu(g, approximate=approximate) * u).backward(grad_out.double())
    return g.grad, u.grad


def test_dispatch_picks_expected_backend(case):
    k, device, backend = case
    assert k.activation._backend(torch.empty(2, 2, device=device)) == backend


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu(case, dtype, approximate, shape):
    k, dev, _ = case
    gate, up = rand(shape, dtype, dev, seed=1), rand(shape, dtype, dev, seed=2)
    out = k.geglu(gate, up, approximate)
    assert out.shape == gate.shape and out.dtype == dtype and out.is_contiguous()
    assert_close(out, ref_geglu(gate, up, approximate), dtype)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu_default_is_tanh_and_row_strided_inputs(case, dtype, approximate):
    k, dev, _ = case
    gate = rand((6, 90), dtype, dev, seed=1)[:, 10:80]  # row stride 90, width 70
    up = rand((6, 75), dtype, dev, seed=2)[:, 5:]  # row stride 75
    assert not gate.is_contiguous() and not up.is_contiguous()
    assert_close(k.geglu(gate, up, approximate), ref_geglu(gate, up, approximate), dtype)
    assert_close(k.geglu(gate, up), ref_geglu(gate, up, "tanh"), dtype)
    gate3 = rand((2, 3, 90), dtype, dev, seed=3)[..., 20:]  # strides (270, 90, 1)
    up3 = rand((2, 3, 70), dtype, dev, seed=4)
    assert_close(k.geglu(gate3, up3, approximate), ref_geglu(gate3, up3, approximate), dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu_merged(case, dtype, approximate, shape):
    k, dev, _ = case
    d = shape[-1]
    x = rand(shape[:-1] + (2 * d,), dtype, dev)
    out = k.geglu_merged(x, approximate)
    assert out.shape == shape[:-1] + (d,) and out.is_contiguous()
    assert_close(out, ref_geglu(x[..., :d], x[..., d:], approximate), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_variants(case, dtype):
    """gelu_and_mul & co. write a poisoned (NaN) out, return it, and touch nothing
    outside it when it is a column slice of a wider buffer."""
    k, dev, _ = case
    d = 45
    x = rand((2, 3, 2 * d), dtype, dev)
    gate, up = x[..., :d], x[..., d:]
    for fn, approximate in ((k.gelu_and_mul, "none"), (k.gelu_tanh_and_mul, "tanh")):
        out = poisoned_like(gate)
        assert fn(out, x) is out
        assert_close(out, ref_geglu(gate, up, approximate), dtype)
        buf = torch.full((2, 3, d + 7), float("nan"), dtype=dtype, device=dev)
        fn(buf[..., 7:], x)
        assert_close(buf[..., 7:], ref_geglu(gate, up, approximate), dtype)
        assert buf[..., :7].isnan().all()
    for fn, approximate in ((k.gelu, "none"), (k.gelu_tanh, "tanh")):
        out = poisoned_like(x)
        assert fn(out, x) is out
        assert_close(out, F.gelu(x.double(), approximate=approximate), dtype)


def test_empty_and_single_element(case):
    k, dev, _ = case
    e = torch.empty(0, 6, device=dev)
    assert k.geglu(e, e).shape == (0, 6)
    assert k.geglu_merged(torch.empty(4, 0, device=dev)).shape == (4, 0)
    one = torch.tensor([[1.5]], device=dev)
    assert_close(k.geglu(one, one, "none"), ref_geglu(one, one, "none"), torch.float32)


# --------------------------------------------------------------------------- autograd


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu_autograd(case, dtype, approximate):
    k, dev, _ = case
    gate = rand((4, 3, 50), dtype, dev, seed=1).requires_grad_()
    up = rand((4, 3, 50), dtype, dev, seed=2).requires_grad_()
    w = rand((4, 3, 50), dtype, dev, scale=1.0, seed=3)
    (k.geglu(gate, up, approximate) * w).sum().backward()
    ref_gate, ref_up = ref_grads(w, gate, up, approximate)
    assert_close(gate.grad, ref_gate, dtype)
    assert_close(up.grad, ref_up, dtype)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu_merged_autograd(case, dtype, approximate):
    k, dev, _ = case
    d = 40
    x = rand((5, 2 * d), dtype, dev).requires_grad_()
    w = rand((5, d), dtype, dev, scale=1.0, seed=3)
    (k.geglu_merged(x, approximate) * w).sum().backward()
    ref_gate, ref_up = ref_grads(w, x[..., :d], x[..., d:], approximate)
    assert_close(x.grad, torch.cat([ref_gate, ref_up], -1), dtype)


def test_autograd_with_expanded_grad(case):
    """sum().backward() hands the op a stride-0 grad: the backward must cope."""
    k, dev, _ = case
    gate = rand((3, 20), torch.float32, dev, seed=1).requires_grad_()
    up = rand((3, 20), torch.float32, dev, seed=2).requires_grad_()
    k.geglu(gate, up).sum().backward()
    ref_gate, ref_up = ref_grads(torch.ones(3, 20, device=dev), gate, up, "tanh")
    assert_close(gate.grad, ref_gate, torch.float32)
    x = torch.cat([gate, up], -1).detach().requires_grad_()
    k.geglu_merged(x).sum().backward()
    assert_close(x.grad, torch.cat([ref_gate, ref_up], -1), torch.float32)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_geglu_backward(case, dtype, approximate):
    k, dev, _ = case
    shape = (2, 7, 66)
    gate, up = rand(shape, dtype, dev, seed=1), rand(shape, dtype, dev, seed=2)
    dy = rand(shape, dtype, dev, scale=1.0, seed=3)
    grad_gate, grad_up = k.geglu_backward(dy, gate, up, approximate)
    ref_gate, ref_up = ref_grads(dy, gate, up, approximate)
    assert grad_gate.shape == shape and grad_up.shape == shape
    assert_close(grad_gate, ref_gate, dtype)
    assert_close(grad_up, ref_up, dtype)


# --------------------------------------------------------------------------- opcheck


def test_opcheck_native_ops(case):
    """Schema, fake (meta) registration, autograd registration and AOT dispatch."""
    from torch.library import opcheck

    k, dev, backend = case
    if backend != "native":
        pytest.skip("no native ops for this device in this variant")
    ops = k.activation.ops
    gate, up = rand((3, 24), torch.float32, dev, seed=1), rand((3, 24), torch.float32, dev, seed=2)
    dy, x = rand((3, 24), torch.float32, dev, seed=3), rand((3, 48), torch.float32, dev, seed=4)
    cases = [
        (ops.geglu.default, (gate.clone().requires_grad_(), up.clone().requires_grad_(), "tanh")),
        (ops.geglu.default, (gate, up, "none")),
        (ops.geglu_backward.default, (dy, gate, up, "tanh")),
        (ops.geglu_backward.default, (dy, gate, up, "none")),
        (ops.gelu_and_mul.default, (torch.empty_like(gate), x)),
        (ops.gelu_tanh_and_mul.default, (torch.empty_like(gate), x)),
        (ops.gelu.default, (torch.empty_like(x), x)),
        (ops.gelu_tanh.default, (torch.empty_like(x), x)),
    ]
    for op, args in cases:
        opcheck(op, args)


# --------------------------------------------------------------------------- torch.compile


def test_torch_compile_fullgraph_no_graph_breaks(case):
    k, dev, _ = case
    from torch._dynamo.utils import counters

    def step(gate, up, x, out):
        y = k.geglu(gate, up) + k.geglu_merged(x, "none")
        k.gelu_tanh_and_mul(out, x)
        # geglu_backward is not itself differentiable: feed it plain tensors.
        grad_gate, grad_up = k.geglu_backward(y.detach(), gate.detach(), up, "tanh")
        return y, grad_gate + grad_up

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(step, fullgraph=True)
    gate = rand((8, 32), torch.float32, dev, seed=1).requires_grad_()
    up = rand((8, 32), torch.float32, dev, seed=2)
    x = rand((8, 64), torch.float32, dev, seed=3)
    out_c, out_e = poisoned_like(up), poisoned_like(up)
    y_c, g_c = compiled(gate, up, x, out_c)
    y_c.sum().backward()
    grad_c = gate.grad.clone()
    gate.grad = None
    y_e, g_e = step(gate, up, x, out_e)
    y_e.sum().backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    torch.testing.assert_close(y_c, y_e)
    torch.testing.assert_close(g_c, g_e)
    torch.testing.assert_close(out_c, out_e)
    torch.testing.assert_close(grad_c, gate.grad)


# --------------------------------------------------------------------------- bad input


def _bad_calls(k, dev):
    f32 = lambda *s: torch.randn(s, device=dev)  # noqa: E731
    other = "cpu" if dev != "cpu" else "meta"
    return [
        ("gate dtype", lambda: k.geglu(f32(2, 4).double(), f32(2, 4).double()), ValueError, r"gate.*dtype"),
        ("gate not a tensor", lambda: k.geglu([1.0], f32(2, 4)), TypeError, r"gate"),
        ("up dtype", lambda: k.geglu(f32(2, 4), f32(2, 4).half()), ValueError, r"up.*dtype"),
        ("up device", lambda: k.geglu(f32(2, 4), torch.randn(2, 4, device=other)), ValueError, r"up.*device"),
        ("up shape", lambda: k.geglu(f32(2, 4), f32(2, 5)), ValueError, r"up.*shape"),
        ("gate last stride", lambda: k.geglu(f32(4, 4).t(), f32(4, 4)), ValueError, r"gate.*stride"),
        ("up no row stride", lambda: k.geglu(f32(3, 2, 4), f32(2, 3, 4).transpose(0, 1)), ValueError, r"up.*row"),
        ("approximate value", lambda: k.geglu(f32(2, 4), f32(2, 4), "erf"), ValueError, r"approximate"),
        ("approximate type", lambda: k.geglu(f32(2, 4), f32(2, 4), None), TypeError, r"approximate"),
        ("merged odd", lambda: k.geglu_merged(f32(2, 5)), ValueError, r"x.*even"),
        ("merged 0-d", lambda: k.geglu_merged(f32()), ValueError, r"x.*dimension"),
        ("merged stride", lambda: k.geglu_merged(f32(6, 4).t()), ValueError, r"x.*stride"),
        ("out shape", lambda: k.gelu_and_mul(f32(2, 4), f32(2, 4)), ValueError, r"out.*shape"),
        ("out odd x", lambda: k.gelu_tanh_and_mul(f32(2, 2), f32(2, 5)), ValueError, r"(x|input).*even"),
        ("out dtype", lambda: k.gelu_and_mul(f32(2, 2).half(), f32(2, 4)), ValueError, r"out.*dtype"),
        ("out device", lambda: k.gelu(torch.empty(2, 4, device=other), f32(2, 4)), ValueError, r"out.*device"),
        ("out stride", lambda: k.gelu_tanh(f32(4, 2).t(), f32(2, 4)), ValueError, r"out.*stride"),
        ("out overlapping rows", lambda: k.gelu(f32(1, 4).expand(3, 4), f32(3, 4)), ValueError, r"out.*row"),
        ("x int", lambda: k.gelu(f32(2, 4), torch.ones(2, 4, dtype=torch.int32, device=dev)), ValueError, r"(x|input).*dtype"),
        ("grad_out shape", lambda: k.geglu_backward(f32(2, 3), f32(2, 4), f32(2, 4)), ValueError, r"grad_out.*shape"),
        ("grad_out dtype", lambda: k.geglu_backward(f32(2, 4).half(), f32(2, 4), f32(2, 4)), ValueError, r"grad_out.*dtype"),
    ]


def test_bad_inputs_raise_errors_naming_the_argument(case):
    k, dev, _ = case
    for what, call, exc, pattern in _bad_calls(k, dev):
        try:
            call()
        except exc as e:
            assert re.search(pattern, str(e)), f"{what}: message {str(e)!r} does not match {pattern!r}"
        else:
            pytest.fail(f"{what}: no error raised")
