"""GEMMs with bias / GELU / GeGLU (linear.py, triton_kernels/gemm.py, gemm_configs.py),
forward and backward, against float64 autograd of the eager formulas.

Routes (linear.py's docstring): torch's GEMMs (F.linear, torch._addmm_activation on
CUDA) plus the package's differentiable geglu for every call that needs gradients or
runs on CPU (under torch.compile with gradients, torch's F.gelu * up); the fused Triton gate/up GEMM (`_geglu_linear_fused`) only for no-grad
CUDA calls. A compiled variant runs geglu_mlp and linear_bias_gelu as one native op
each (`_geglu_mlp`, `_linear_bias_gelu`: checks, routing and launches in C++); the
tests run both the native and the Python routes (`mlp_route`).

Without a GPU the public functions therefore never reach Triton; the kernel itself is
tested directly (`geglu_forward` and the `_geglu_linear_fused` op) under the Triton
interpreter on CPU tensors: conftest sets TRITON_INTERPRET=1 before anything imports
triton. The interpreter computes bf16 tl.dot wrongly (triton 3.9), so those tests run
float16 and float32 at small shapes; the interpreter's launch-table row uses tiny
tiles and sends M <= 64 through split-K and 64 < M <= 256 through the TMA kernel, so
every kernel runs. On a GPU the same tests run natively, plus the cuda-marked ones:
the shape grid, >2**31 elements, no recompilation for new token counts, cuBLASLt's
GELU epilogue, the down projection's bias + residual.
"""

import pytest
import torch
import torch.nn.functional as F

from conftest import HAS_CUDA, compiled_count, inductor_graphs_backend, poisoned_like

DEV = "cuda" if HAS_CUDA else "cpu"
# Public functions: every float dtype on either device (no Triton on CPU). Kernels:
# bfloat16 only natively (the interpreter's bf16 dot is wrong).
DTYPES = [torch.float16, torch.float32, torch.bfloat16]
KERNEL_DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if HAS_CUDA else [])


def tol(dtype) -> float:
    """Largest |error| allowed, relative to the largest |reference| element: rounding of
    the stored result and of the float16/bfloat16 intermediates the backward GEMMs
    read (as eager autograd rounds them); float32 runs as TF32 on the GPU."""
    return {
        torch.float32: 5e-3 if HAS_CUDA else 1e-4,
        torch.float16: 5e-3,
        torch.bfloat16: 3e-2,
    }[dtype]


def assert_close(actual, expected, dtype, what=""):
    assert actual.shape == expected.shape, (what, actual.shape, expected.shape)
    assert actual.isfinite().all(), f"{what}: non-finite elements (unwritten or overflowed)"
    err = (actual.double() - expected.double()).abs().max().item()
    scale = expected.double().abs().max().item()
    assert err <= tol(dtype) * max(scale, 1e-3), f"{what}: max error {err:.3g} vs max |ref| {scale:.3g}"


def rand(shape, dtype, scale=1.0, seed=0, device=DEV):
    """Fresh standard-normal values (never zeros); weights get scale 1/sqrt(fan_in) so
    pre-activations are O(1), where GELU bends."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def weight(n, k, dtype, seed, device=DEV):
    return rand((n, k), dtype, scale=k**-0.5, seed=seed, device=device)


def leaf(t):
    return None if t is None else t.detach().clone().requires_grad_()


def ref64(t):
    return None if t is None else t.detach().double().requires_grad_()


def grads_of(out, upstream, inputs):
    """d(sum(out * upstream)) / d(inputs), None for None inputs."""
    present = [t for t in inputs if t is not None]
    got = iter(torch.autograd.grad(out, present, upstream))
    return [None if t is None else next(got) for t in inputs]


def ref_geglu(x, wg, wu, bg, bu, approximate):
    return F.gelu(F.linear(x, wg, bg), approximate=approximate) * F.linear(x, wu, bu)


def check_grads(actual, expected, dtype, names):
    for a, e, name in zip(actual, expected, names):
        if e is None:
            assert a is None, name
        else:
            assert_close(a, e, dtype, f"grad {name}")


def check_linear_bias_gelu(kernel, x, w, b, dy, approximate, dtype, grad=True):
    """linear_bias_gelu's output (and, with grad, its grads of x, weight, bias; b may be
    None) against float64 autograd of gelu(linear(x, w, b))."""
    r = [ref64(t) for t in (x, w, b)]
    ref = F.gelu(F.linear(*r), approximate=approximate)
    if not grad:
        with torch.no_grad():
            y = kernel.linear_bias_gelu(x, w, b, approximate=approximate)
        assert y.dtype == dtype and y.grad_fn is None
        assert_close(y, ref, dtype, "forward (no grad)")
        return
    y = kernel.linear_bias_gelu(x, w, b, approximate=approximate)
    assert y.dtype == dtype
    got = grads_of(y, dy, [x, w, b])
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "weight", "bias"])


@pytest.fixture(scope="module")
def tg(kernel):
    """The Triton GEMM module (triton_kernels/gemm.py) of the loaded variant."""
    mod = getattr(kernel.linear, "triton_gemm", None)
    if mod is None:
        pytest.skip("triton is not installed")
    if not HAS_CUDA and not mod.INTERPRET:
        pytest.fail("the kernel package was imported before TRITON_INTERPRET=1 was set")
    return mod


@pytest.fixture(params=["native", "composition"])
def mlp_route(request, kernel, monkeypatch):
    """The two routes of geglu_mlp / linear_bias_gelu: the native ops `_geglu_mlp` and
    `_linear_bias_gelu` (compiled variants) and the Python routes (noarch variants,
    torch.compile with gradients): autograd over F.linear + geglu + F.linear."""
    lin = kernel.linear
    if request.param == "native":
        if DEV not in lin._NATIVE_MLP_DEVICE_TYPES:
            pytest.skip(f"this variant has no compiled training MLP for {DEV}")
    else:
        monkeypatch.setattr(lin, "_NATIVE_MLP_FLAG", None)
    return request.param


# --------------------------------------------------------------------------- public functions

# (shape of x, N, dtype, bias, approximate, weight layout). x's last dim is K.
# Layouts: "split" (w_gate, w_up), "merged" (one [2N, K] weight and a [2N] bias),
# "merged-split-bias" (one weight, separate [N] biases, b_up given alone when bias="up").
GEGLU_CASES = [
    ((1, 40), 24, torch.float16, "both", "tanh", "split"),
    ((7, 40), 72, torch.float32, "none", "none", "split"),
    ((16, 72), 24, torch.float16, "both", "none", "merged"),
    ((64, 40), 24, torch.float32, "both", "tanh", "merged-split-bias"),
    ((100, 36), 40, torch.bfloat16, "gate", "none", "split"),
    ((33, 40), 24, torch.bfloat16, "up", "tanh", "merged-split-bias"),
    ((2, 5, 40), 24, torch.float32, "both", "none", "merged"),
]


def _case_id(case):
    shape, n, dtype, bias, approx, *rest = case
    tag = "x".join(map(str, shape)) + f"-N{n}-{str(dtype)[6:]}-bias_{bias}-{approx}"
    return tag + (f"-{rest[0]}" if rest else "")


def _biases(which, n, dtype, seed=4):
    bg = rand((n,), dtype, seed=seed) if which in ("both", "gate") else None
    bu = rand((n,), dtype, seed=seed + 1) if which in ("both", "up") else None
    return bg, bu


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("case", GEGLU_CASES, ids=_case_id)
def test_geglu_linear_forward_backward(kernel, case, grad):
    """Every weight/bias layout, both GELUs, 2-d and 3-d x. With grad: the autograd
    composition, all grads (merged parameters get the concatenated grads); without:
    the fused Triton GEMM on CUDA, the composition on CPU."""
    shape, n, dtype, which_bias, approximate, layout = case
    k = shape[-1]
    x = leaf(rand(shape, dtype, seed=1))
    wg, wu = leaf(weight(n, k, dtype, 2)), leaf(weight(n, k, dtype, 3))
    bg, bu = (leaf(b) for b in _biases(which_bias, n, dtype))
    dy = rand((*shape[:-1], n), dtype, seed=6)
    if layout == "merged":
        w = leaf(torch.cat([wg, wu]))
        b = leaf(torch.cat([bg, bu])) if which_bias == "both" else None  # the merged-bias form
        args, inputs = (x, w, None, b, None), [x, w, b]
    elif layout == "merged-split-bias":
        w = leaf(torch.cat([wg, wu]))
        args, inputs = (x, w, None, bg, bu), [x, w, bg, bu]
    else:
        args, inputs = (x, wg, wu, bg, bu), [x, wg, wu, bg, bu]

    r = [ref64(t) for t in (x, wg, wu, bg, bu)]
    ref = ref_geglu(*r, approximate)
    with torch.set_grad_enabled(grad):
        y = kernel.geglu_linear(*args, approximate=approximate)
    assert y.dtype == dtype
    assert_close(y, ref, dtype, "forward")
    if not grad:
        assert y.grad_fn is None
        return
    got = grads_of(y, dy, inputs)
    rx, rwg, rwu, rbg, rbu = grads_of(ref, dy.double(), r)
    if layout == "merged":
        expected = [rx, torch.cat([rwg, rwu]), torch.cat([rbg, rbu]) if which_bias == "both" else None]
    elif layout == "merged-split-bias":
        expected = [rx, torch.cat([rwg, rwu]), rbg, rbu]
    else:
        expected = [rx, rwg, rwu, rbg, rbu]
    check_grads(got, expected, dtype, ["x", "w_gate", "w_up", "b_gate", "b_up"][: len(expected)])


LINEAR_CASES = [
    ((1, 40), 24, torch.float16, True, "tanh"),
    ((7, 40), 72, torch.float32, True, "none"),
    ((64, 72), 24, torch.float32, False, "tanh"),
    ((100, 40), 72, torch.bfloat16, True, "none"),
    ((3, 4, 40), 24, torch.float16, False, "none"),
    ((2, 3, 40), 24, torch.bfloat16, True, "tanh"),
]


@pytest.mark.parametrize("grad", [True, False], ids=["grad", "no_grad"])
@pytest.mark.parametrize("case", LINEAR_CASES, ids=_case_id)
def test_linear_bias_gelu_forward_backward(kernel, case, grad):
    """Without grad, tanh + bias on CUDA: cuBLASLt's GELU_BIAS epilogue; every other
    call F.linear + F.gelu, differentiable."""
    shape, n, dtype, has_bias, approximate = case
    x = leaf(rand(shape, dtype, seed=1))
    w = leaf(weight(n, shape[-1], dtype, 2))
    b = leaf(rand((n,), dtype, seed=3)) if has_bias else None
    dy = rand((*shape[:-1], n), dtype, seed=4)
    check_linear_bias_gelu(kernel, x, w, b, dy, approximate, dtype, grad=grad)


@pytest.mark.parametrize("case", LINEAR_CASES[:4], ids=_case_id)
def test_linear_bias_forward_backward(kernel, case):
    shape, n, dtype, has_bias, _ = case
    x = leaf(rand(shape, dtype, seed=1))
    w = leaf(weight(n, shape[-1], dtype, 2))
    b = leaf(rand((n,), dtype, seed=3)) if has_bias else None
    dy = rand((*shape[:-1], n), dtype, seed=4)
    y = kernel.linear_bias(x, w, b)
    got = grads_of(y, dy, [x, w, b])
    r = [ref64(t) for t in (x, w, b)]
    ref = F.linear(*r)
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "weight", "bias"])


# (shape of x, hidden, out, dtype, biases present (gate, up, down), residual, merged)
MLP_CASES = [
    ((7, 40), 24, 40, torch.float32, (True, True, True), True, False),
    ((16, 40), 72, 24, torch.float16, (False, False, False), False, False),
    ((2, 3, 40), 24, 40, torch.float16, (False, True, True), True, True),
    ((100, 40), 24, 40, torch.float32, (True, False, False), False, True),
    ((5, 40), 24, 40, torch.bfloat16, (True, True, False), True, False),
]


def _mlp_id(c):
    return f"{'x'.join(map(str, c[0]))}-{str(c[3])[6:]}-b{''.join('1' if b else '0' for b in c[4])}-res{int(c[5])}-merged{int(c[6])}"


@pytest.mark.parametrize("case", MLP_CASES, ids=_mlp_id)
def test_geglu_mlp_forward_backward(kernel, case, mlp_route):
    """Both training routes give the float64 grads of every operand (merged weight:
    its halves' grads; split biases with a merged weight; residual)."""
    shape, hidden, d_out, dtype, which_bias, has_res, merged = case
    k = shape[-1]
    x = leaf(rand(shape, dtype, seed=1))
    wg, wu = leaf(weight(hidden, k, dtype, 2)), leaf(weight(hidden, k, dtype, 3))
    wd = leaf(weight(d_out, hidden, dtype, 4))
    bg, bu, bd = (leaf(rand((m,), dtype, seed=5 + i)) if on else None for i, (m, on) in enumerate(zip((hidden, hidden, d_out), which_bias)))
    res = leaf(rand((*shape[:-1], d_out), dtype, seed=9)) if has_res else None
    dy = rand((*shape[:-1], d_out), dtype, seed=10)
    biases = None if not any(which_bias) else (bg, bu, bd)
    if merged:
        w = leaf(torch.cat([wg, wu]))
        y = kernel.geglu_mlp(x, w, None, wd, biases=biases, residual=res, approximate="tanh")
        got = grads_of(y, dy, [x, w, wd, bg, bu, bd, res])
        got = [got[0], got[1][:hidden], got[1][hidden:], *got[2:]]
    else:
        y = kernel.geglu_mlp(x, wg, wu, wd, biases=biases, residual=res, approximate="tanh")
        got = grads_of(y, dy, [x, wg, wu, wd, bg, bu, bd, res])
    names = {type(y.grad_fn).__name__} | {type(f).__name__ for f, _ in y.grad_fn.next_functions if f is not None}
    # The native route's autograd node: linear._GegluMlpTrain (its ops: `_geglu_mlp_train`
    # forward, `_geglu_mlp_backward` backward).
    native_node = any("GegluMlpTrain" in n for n in names)
    assert native_node == (mlp_route == "native"), names

    r = [ref64(t) for t in (x, wg, wu, wd, bg, bu, bd, res)]
    rx, rwg, rwu, rwd, rbg, rbu, rbd, rres = r
    ref = F.linear(ref_geglu(rx, rwg, rwu, rbg, rbu, "tanh"), rwd, rbd)
    if rres is not None:
        ref = ref + rres
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "w_down", "b_gate", "b_up", "b_down", "residual"])

    with torch.no_grad():  # inference: the fused GEMM (CUDA) or the composition
        y_inf = kernel.geglu_mlp(x, *((w, None) if merged else (wg, wu)), wd, biases=biases, residual=res, approximate="tanh")
    assert_close(y_inf, ref, dtype, "forward (no grad)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_native_ops_on_strided_3d_inputs(kernel, dtype):
    """The native ops flatten [..., K] inputs to [M, K] without the dispatcher where the
    leading dimensions collapse to one row stride (a view), and through a reshape copy
    where they do not: both give the reference, and so do a residual that does not
    collapse and operands that start past their storage's first element."""
    base = rand((3, 4, 72), dtype, seed=1)
    x_view = base[..., 8:48]  # leading dims collapse, row stride 72 > K = 40
    x_copy = rand((4, 3, 40), dtype, seed=2).transpose(0, 1)  # leading dims do not collapse
    # Weights and bias as views that start past their storage's first element.
    wg = rand((24, 56), dtype, scale=40**-0.5, seed=3)[:, 16:]
    wu, wd = weight(24, 40, dtype, 4), rand((48, 24), dtype, scale=24**-0.5, seed=5)[8:]
    bd = rand((50,), dtype, seed=6)[10:]
    res = rand((4, 3, 40), dtype, seed=7).transpose(0, 1)
    for x in (x_view, x_copy):
        with torch.no_grad():
            y = kernel.geglu_mlp(x, wg, wu, wd, biases=(None, None, bd), residual=res)
            z = kernel.linear_bias_gelu(x, wg, bd[:24], approximate="none")
        rx, rwg, rwu, rwd, rbd, rres = (ref64(t) for t in (x, wg, wu, wd, bd, res))
        assert y.shape == (3, 4, 40) and z.shape == (3, 4, 24)
        assert_close(y, F.linear(ref_geglu(rx, rwg, rwu, None, None, "tanh"), rwd, rbd) + rres, dtype, "geglu_mlp")
        assert_close(z, F.gelu(F.linear(rx, rwg, rbd[:24])), dtype, "linear_bias_gelu")


@pytest.mark.cuda
@pytest.mark.skipif(not HAS_CUDA or torch.cuda.device_count() < 2, reason="needs 2 GPUs")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_layer_ops_on_another_device_than_the_current_one(kernel, dtype):
    """geglu_mlp (inference and training) and linear_bias_gelu on cuda:1 while cuda:0 is
    current: the native ops make their operands' device current (their GEMMs go to
    the device's kernels without the dispatcher's guard) and give the reference."""
    dev = "cuda:1"
    x, wg, wu, wd = rand((9, 40), dtype, seed=1, device=dev), *(weight(24, 40, dtype, s, device=dev) for s in (2, 3)), weight(40, 24, dtype, 4, device=dev)
    bd, dy = rand((40,), dtype, seed=5, device=dev), rand((9, 40), dtype, seed=6, device=dev)
    rx, rwg, rwu, rwd, rbd = (ref64(t) for t in (x, wg, wu, wd, bd))
    ref = F.linear(ref_geglu(rx, rwg, rwu, None, None, "tanh"), rwd, rbd) + rx
    with torch.cuda.device(0):
        with torch.no_grad():
            y = kernel.geglu_mlp(x, wg, wu, wd, biases=(None, None, bd), residual=x)
            z = kernel.linear_bias_gelu(x, wg, bd[:24], approximate="tanh")
        xl, wgl = leaf(x), leaf(wg)
        yl = kernel.geglu_mlp(xl, wgl, wu, wd, biases=(None, None, bd), residual=xl)
        got = grads_of(yl, dy, [xl, wgl])
    assert y.device == yl.device == z.device == torch.device(dev)
    assert_close(y, ref, dtype, "geglu_mlp")
    assert_close(yl, ref, dtype, "geglu_mlp, grad")
    assert_close(z, F.gelu(F.linear(rx, rwg, rbd[:24]), approximate="tanh"), dtype, "linear_bias_gelu")
    check_grads(got, grads_of(ref, dy.double(), [rx, rwg]), dtype, ["x", "w_gate"])


def test_geglu_mlp_partial_training(kernel, mlp_route):
    """Frozen parts get no grad; training only w_down / b_down still takes the
    training route and gives their grads."""
    dtype = torch.float32
    x = rand((9, 40), dtype, seed=1)
    wg, wu, wd = weight(24, 40, dtype, 2), weight(24, 40, dtype, 3), leaf(weight(40, 24, dtype, 4))
    bd = leaf(rand((40,), dtype, seed=5))
    y = kernel.geglu_mlp(x, wg, wu, wd, biases=(None, None, bd))
    dy = rand((9, 40), dtype, seed=6)
    got = grads_of(y, dy, [wd, bd])
    r = [ref64(t) for t in (wd, bd)]
    ref = F.linear(ref_geglu(x.double(), wg.double(), wu.double(), None, None, "tanh"), *r)
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["w_down", "b_down"])
    assert wg.grad is None and x.grad is None


def test_empty_zero_k_and_meta_inputs(kernel):
    """No tokens: empty results with the right shape, and zero weight grads; K == 0:
    the GEMMs contribute nothing, so geglu_linear is gelu(b_gate) * b_up; meta tensors
    infer shapes (composition on meta, the ops' fakes under compile)."""
    x = torch.empty((0, 40), device=DEV, requires_grad=True)
    wg, wu, wd = weight(24, 40, torch.float32, 1), weight(24, 40, torch.float32, 2), weight(40, 24, torch.float32, 3)
    wg.requires_grad_()
    y = kernel.geglu_mlp(x, wg, wu, wd)
    assert y.shape == (0, 40)
    y.sum().backward()
    assert (wg.grad == 0).all()
    assert kernel.linear_bias_gelu(x, wd.t().contiguous()).shape == (0, 24)
    with torch.no_grad():
        assert kernel.geglu_linear(x, wg, wu).shape == (0, 24)

    dtype = torch.float32
    x0 = torch.empty((3, 0), device=DEV, dtype=dtype)
    bg, bu = rand((24,), dtype, seed=4), rand((24,), dtype, seed=5)
    w0 = torch.empty((24, 0), device=DEV, dtype=dtype)
    expected = (F.gelu(bg.double(), approximate="tanh") * bu.double()).expand(3, 24)
    with torch.no_grad():
        assert_close(kernel.geglu_linear(x0, w0, w0, bg, bu), expected, dtype, "K == 0")
        assert_close(kernel.linear_bias_gelu(x0, w0, bg), F.gelu(bg.double(), approximate="tanh").expand(3, 24), dtype, "K == 0")

    m = torch.empty((2, 5, 40), device="meta", dtype=torch.bfloat16)
    wm = torch.empty((48, 40), device="meta", dtype=torch.bfloat16)
    wdm = torch.empty((32, 24), device="meta", dtype=torch.bfloat16)
    assert kernel.geglu_mlp(m, wm, None, wdm).shape == (2, 5, 32)
    assert kernel.geglu_linear(m, wm).shape == (2, 5, 24)
    assert kernel.linear_bias_gelu(m, wm).shape == (2, 5, 48)


def test_addmm_activation_gelu_form_on_cpu():
    """torch._addmm_activation(use_gelu=True) applies the EXACT (erf) GELU on CPU, the
    tanh form only on CUDA (cuBLASLt epilogue; test_cuda_addmm_activation_is_tanh):
    why linear_bias_gelu sends only CUDA tanh-GELU calls there."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g, dtype=torch.float64) * 2
    w = torch.randn(48, 32, generator=g, dtype=torch.float64) * 0.5
    b = torch.randn(48, generator=g, dtype=torch.float64)
    pre = torch.addmm(b, x, w.t())
    y = torch._addmm_activation(b, x, w.t(), use_gelu=True)
    assert (y - F.gelu(pre)).abs().max() < 1e-12
    assert (y - F.gelu(pre, approximate="tanh")).abs().max() > 1e-4


# --------------------------------------------------------------------------- routing


class _Recorder:
    """Stands in for a module (F, torch) or an op namespace in linear.py's globals:
    calls of the watched attributes are counted, everything else passes through."""

    def __init__(self, real, watched, calls):
        self._real, self._watched, self._calls = real, watched, calls

    def __getattr__(self, name):
        attr = getattr(self._real, name)
        if name not in self._watched:
            return attr

        def counted(*args, **kwargs):
            self._calls.append(name)
            return attr(*args, **kwargs)

        counted.default = counted  # an op called through its overload: the same call
        return counted


@pytest.fixture
def routes(kernel, monkeypatch):
    """Calls of each route's entry point, by name, in call order."""
    lin = kernel.linear
    calls = []
    monkeypatch.setattr(lin, "F", _Recorder(F, {"linear"}, calls))
    monkeypatch.setattr(lin, "torch", _Recorder(torch, {"_addmm_activation", "addmm"}, calls))
    monkeypatch.setattr(
        lin,
        "ops",
        _Recorder(lin.ops, {"_geglu_mlp", "_geglu_mlp_train", "_linear_bias_gelu", "_geglu_linear", "_geglu_linear_fused"}, calls),
    )
    impl = lin._fused_gate_up_impl

    def fused(*args):
        calls.append("_fused_gate_up_impl")
        return impl(*args)

    monkeypatch.setattr(lin, "_fused_gate_up_impl", fused)
    return calls


def test_routes_taken_by_the_public_functions(kernel, routes, monkeypatch):
    """Which route each public call takes on this device. A compiled variant runs
    geglu_mlp, geglu_linear and linear_bias_gelu as one native op each (the inference ops;
    geglu_mlp also with grad); without
    one (the noarch variant), the Python routes: CPU never Triton, never _addmm_activation
    (its CPU GELU is erf); CUDA the fused GEMM and cuBLASLt's GELU epilogue only without grad."""
    lin = kernel.linear
    cuda = DEV == "cuda"
    dtype = torch.float32
    # float32 takes the fused (TF32) kernel only while torch allows TF32 matmuls
    # (test_cuda_float32_follows_torch_tf32_switch checks the switch itself).
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    x = rand((9, 40), dtype, seed=1)
    wg, wu, wd = weight(24, 40, dtype, 2), weight(24, 40, dtype, 3), weight(40, 24, dtype, 4)
    wm, b = torch.cat([wg, wu]), rand((24,), dtype, seed=5)
    req = lambda t: t.detach().requires_grad_()  # noqa: E731
    fused = ["_fused_gate_up_impl"] if cuda else ["linear", "linear"]
    fused_merged = ["_fused_gate_up_impl"] if cuda else ["linear"]

    def check(native):
        mlp = (lambda python: ["_geglu_mlp"]) if native else (lambda python: python)
        # Calls that need gradients: `_geglu_mlp_train` (inside linear._GegluMlpTrain).
        mlp_grad = (lambda python: ["_geglu_mlp_train"]) if native else (lambda python: python)
        lbg = (lambda python: ["_linear_bias_gelu"]) if native else (lambda python: python)
        gate_up = (lambda python: ["_geglu_linear"]) if native else (lambda python: python)
        cases = [
            ("linear_bias", lambda: kernel.linear_bias(x, wg, b), ["linear"]),
            ("linear_bias_gelu tanh+bias", lambda: kernel.linear_bias_gelu(x, wg, b), lbg(["_addmm_activation"] if cuda else ["linear"])),
            # `_linear_bias_gelu` is an inference op: with gradients, the composition.
            ("linear_bias_gelu tanh+bias, grad", lambda: kernel.linear_bias_gelu(req(x), wg, b), ["linear"]),
            ("linear_bias_gelu exact", lambda: kernel.linear_bias_gelu(x, wg, b, approximate="none"), lbg(["linear"])),
            ("geglu_linear", lambda: kernel.geglu_linear(x, wg, wu), gate_up(fused)),
            ("geglu_linear merged", lambda: kernel.geglu_linear(x, wm), gate_up(fused_merged)),
            ("geglu_linear, grad", lambda: kernel.geglu_linear(x, req(wg), wu), ["linear", "linear"]),
            ("geglu_linear merged, grad", lambda: kernel.geglu_linear(req(x), wm), ["linear"]),
            ("geglu_mlp", lambda: kernel.geglu_mlp(x, wg, wu, wd), mlp(fused + ["linear"])),
            ("geglu_mlp + residual", lambda: kernel.geglu_mlp(x, wm, None, wd, residual=x), mlp(fused_merged + ["addmm"])),
            ("geglu_mlp, grad", lambda: kernel.geglu_mlp(req(x), wg, wu, wd), mlp_grad(["linear"] * 3)),
            # only the residual needs grad: the gate/up half takes its inference route
            ("geglu_mlp, residual grad", lambda: kernel.geglu_mlp(x, wm, None, wd, residual=req(x)), mlp_grad(fused_merged + ["addmm"])),
            # an empty problem needing grad: the composition (autograd over torch's GEMMs)
            ("geglu_mlp, empty, grad", lambda: kernel.geglu_mlp(req(x[:0]), wg, wu, wd), ["linear"] * 3),
        ]
        if cuda:  # the fused kernel reads unit-column-stride operands only
            cases.append(("geglu_linear, transposed w_up", lambda: kernel.geglu_linear(x, wg, wu.t().contiguous().t()), gate_up(["linear", "linear"])))
        for what, call, expected in cases:
            routes.clear()
            call()
            assert routes == expected, (what, native)

    check(DEV in lin._NATIVE_MLP_DEVICE_TYPES)
    # A variant without the compiled module (noarch) runs the Python routes.
    monkeypatch.setattr(lin, "_NATIVE_MLP_FLAG", None)
    check(False)


# name: (the call on x and the weights, its GEMMs in the forward graph)
COMPILED_GRAD_CALLS = {
    "geglu_mlp": (lambda k, x, wg, wu, wd: k.geglu_mlp(x, wg, wu, wd), 3),
    "geglu_mlp merged + residual": (lambda k, x, wg, wu, wd: k.geglu_mlp(x, torch.cat([wg, wu]), None, wd, residual=x), 2),
    "geglu_linear": (lambda k, x, wg, wu: k.geglu_linear(x, wg, wu, approximate="none"), 2),
}


@pytest.mark.parametrize("x_shape", [(5, 40), (2, 3, 40)], ids=["2d", "3d"])
@pytest.mark.parametrize("call", list(COMPILED_GRAD_CALLS))
def test_torch_compile_with_grad_traces_torch_ops_alone(kernel, call, x_shape):
    """Under torch.compile a call that needs gradients is traced as torch's ops alone,
    F.linear, F.gelu, a product, F.linear, on x as given, as the eager module is: no op
    of this package reaches Inductor (the native MLP op would hide its kernels, the geglu
    op and its backward are opaque calls it could not fuse the GeGLU into), no graph
    break; the values and gradients are the eager route's."""
    fn, forward_gemms = COMPILED_GRAD_CALLS[call]
    dtype = torch.float32
    x = leaf(rand(x_shape, dtype, seed=1))
    wg, wu, wd = (leaf(weight(24, 40, dtype, 2)), leaf(weight(24, 40, dtype, 3)), leaf(weight(40, 24, dtype, 4)))
    inputs = [x, wg, wu, wd][: fn.__code__.co_argcount - 1]
    y_eager = fn(kernel, *inputs)
    dy = rand(y_eager.shape, dtype, seed=6)
    want = grads_of(y_eager, dy, inputs)

    torch._dynamo.reset()
    graphs = {}
    compiled = torch.compile(lambda *a: fn(kernel, *a), fullgraph=True, backend=inductor_graphs_backend(graphs))
    y = compiled(*inputs)
    got = grads_of(y, dy, inputs)
    torch._dynamo.reset()

    namespace = kernel.linear.add_op_namespace_prefix("").rstrip(":")
    traced = [op for kind in ("forward", "backward") for g in graphs[kind] for op in g]
    assert not [op for op in traced if namespace in op], traced
    assert len(graphs["forward"]) == 1
    assert sum(n for op, n in graphs["forward"][0].items() if op in ("aten.mm.default", "aten.addmm.default")) == forward_gemms
    assert_close(y, y_eager, dtype, "forward")
    check_grads(got, want, dtype, ["x", "w_gate", "w_up", "w_down"][: len(inputs)])


def _saved_activation_numel(fn, inputs):
    """Elements autograd saves for backward beyond the inputs themselves (weights and x
    are saved by reference; counted once per storage)."""
    seen = {t.untyped_storage().data_ptr() for t in inputs if t is not None}
    total = [0]

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            total[0] += t.untyped_storage().nbytes() // t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total[0]


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged"])
def test_training_saves_x_pre_activations_and_h(kernel, mlp_route, merged):
    """What the docstrings promise autograd keeps: geglu_linear saves x and the
    pre-activations (2 * tokens * hidden elements); geglu_mlp also h, the down GEMM's
    input (3 * tokens * hidden, against eager's 4)."""
    dtype = torch.float32
    tokens, hidden = 9, 24
    x = leaf(rand((tokens, 40), dtype, seed=1))
    wg, wu, wd = leaf(weight(hidden, 40, dtype, 2)), leaf(weight(hidden, 40, dtype, 3)), leaf(weight(40, hidden, dtype, 4))
    w_gate, w_up = (leaf(torch.cat([wg, wu])), None) if merged else (wg, wu)
    inputs = [x, w_gate, w_up, wd]
    saved = _saved_activation_numel(lambda: kernel.geglu_mlp(x, w_gate, w_up, wd), inputs)
    assert saved == 3 * tokens * hidden
    if mlp_route == "composition":  # geglu_linear has one training route
        saved = _saved_activation_numel(lambda: kernel.geglu_linear(x, w_gate, w_up), inputs)
        assert saved == 2 * tokens * hidden


# --------------------------------------------------------------------------- the fused kernel


def _cfg(tg, kernel_kind, bm, bn, bk, split=1):
    return tg.gemm_configs.GemmConfig(kernel_kind, bm, bn, bk, 2, 4, 2, split)


def _kernel_configs(tg):
    """Explicit launches: tile, tile with split-K (+ reduce), a wide-N tile, TMA."""
    cfgs = [("tile", 16, 16, 16, 1), ("tile", 32, 16, 32, 3), ("tile", 16, 32, 16, 1)]
    if tg.TensorDescriptor is not None:
        cfgs.append(("tma", 16, 16, 16, 1))
    if HAS_CUDA:  # tensor-core tile shapes as the GPU table uses them
        cfgs += [("tile", 64, 64, 64, 1), ("tile", 16, 64, 128, 4)]
        if tg._device_info(torch.device("cuda")).tma:
            cfgs.append(("tma", 128, 128, 64, 1))
    return cfgs


def _gate_up_operands(dtype, m, k, n, which_bias, merged, seed=1):
    """x, w_gate, w_up (views of one [2n, k] weight when merged), biases."""
    x = rand((m, k), dtype, seed=seed)
    if merged:
        w = weight(2 * n, k, dtype, seed + 1)
        wg, wu = w[:n], w[n:]
    else:
        wg, wu = weight(n, k, dtype, seed + 1), weight(n, k, dtype, seed + 2)
    bg, bu = _biases(which_bias, n, dtype, seed=seed + 3)
    return x, wg, wu, bg, bu


def _ref_fused(x, wg, wu, bg, bu, approximate):
    d = lambda t: None if t is None else t.double()  # noqa: E731
    return ref_geglu(d(x), d(wg), d(wu), d(bg), d(bu), approximate)


# (M, K, dtype, kernel and split the table row gives). N = 24: ragged against BLOCK_N.
TABLE_CASES = [
    (5, 40, torch.float16, "tile", 2),  # m16 row: split-K + reduce (K=40 ragged against BLOCK_K)
    (50, 40, torch.float32, "tile", 2),  # m64 row
    (100, 40, torch.float16, "tma", 1),  # m256 row: the persistent TMA kernel (80-byte rows)
    (100, 36, torch.float16, "tile", 1),  # m256 row, 72-byte rows: TMA cannot read them, tile serves
    (300, 40, torch.float32, "tile", 1),  # large row: automatic split-K resolves to none (enough tiles)
]


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("case", TABLE_CASES, ids=lambda c: f"M{c[0]}-K{c[1]}-{str(c[2])[6:]}-{c[3]}")
def test_geglu_forward_launch_table_rows(tg, case, approximate):
    """geglu_forward with the launch table (config=None): each M bucket of this
    device's row picks the kernel it names and writes every element of a NaN-poisoned
    output. On CPU, the "interpreter" row's split-K, TMA and tile paths."""
    m, k, dtype, kind, split = case
    x, wg, wu, bg, bu = _gate_up_operands(dtype, m, k, 24, "both", merged=False)
    if not HAS_CUDA:
        cfg = tg.select_config(x, wg, wu)
        assert (cfg.kernel, cfg.split_k) == (kind, split), cfg
    out = tg.geglu_forward(x, wg, wu, bg, bu, approximate, out=poisoned_like(torch.empty((m, 24), dtype=dtype, device=DEV)))
    assert_close(out, _ref_fused(x, wg, wu, bg, bu, approximate), dtype, "table launch")


@pytest.mark.parametrize(
    "dtype, approximate, which_bias, merged",
    [
        (torch.float16, "tanh", "both", False),
        (torch.float32, "none", "none", True),
        (torch.float16, "none", "gate", True),
        (torch.float32, "tanh", "up", False),
    ],
    ids=lambda v: str(v)[6:] if isinstance(v, torch.dtype) else str(v),
)
def test_geglu_forward_every_kernel_poisoned_output(tg, dtype, approximate, which_bias, merged):
    """Each explicit launch (tile, split-K + reduce, TMA) writes every element of a
    NaN-poisoned [M, N] output, with M, N and K (=40) all ragged against the tiles,
    separate or merged (row-offset views of one weight) gate/up weights, either bias
    or both or none, both GELUs."""
    m, k, n = 21, 40, 24
    x, wg, wu, bg, bu = _gate_up_operands(dtype, m, k, n, which_bias, merged)
    ref = _ref_fused(x, wg, wu, bg, bu, approximate)
    for c in _kernel_configs(tg):
        cfg = _cfg(tg, *c)
        out = tg.geglu_forward(x, wg, wu, bg, bu, approximate, config=cfg, out=poisoned_like(ref.to(dtype)))
        assert_close(out, ref, dtype, f"{cfg}")


def test_geglu_forward_row_strided_operands(tg):
    """Operands and output with row strides wider than their rows (column slices of
    bigger buffers): the kernels use each tensor's own row stride and write only the
    output's columns (the rest of its poisoned buffer stays NaN)."""
    dtype = torch.float16
    m, k, n = 19, 40, 24
    x = rand((m, 56), dtype, seed=1)[:, :k]
    w = weight(2 * n, 48, dtype, 2)[:, :k]
    wg, wu = w[:n], w[n:]
    bg, bu = rand((n,), dtype, seed=3), rand((n,), dtype, seed=4)
    ref = _ref_fused(x, wg, wu, bg, bu, "tanh")
    for c in _kernel_configs(tg):
        cfg = _cfg(tg, *c)
        buf = torch.full((m, 40), float("nan"), dtype=dtype, device=DEV)
        out = tg.geglu_forward(x, wg, wu, bg, bu, "tanh", config=cfg, out=buf[:, :n])
        assert_close(out, ref, dtype, f"{cfg}")
        assert buf[:, n:].isnan().all(), f"{cfg} wrote outside its output"


@pytest.mark.parametrize("dtype", KERNEL_DTYPES, ids=lambda d: str(d)[6:])
def test_fused_op_opcheck_and_compile(kernel, tg, dtype):
    """The registered `_geglu_linear_fused` op (what no-grad CUDA calls take under
    torch.compile / for subclasses): schema, fake tensor, AOT dispatch, and a
    fullgraph compile, on split and merged-view weights. On CPU its kernel runs in
    the interpreter."""
    op = kernel._ops.ops._geglu_linear_fused
    x, wg, wu, bg, _ = _gate_up_operands(dtype, 6, 40, 24, "gate", merged=False)
    _, mg, mu, _, _ = _gate_up_operands(dtype, 6, 40, 24, "none", merged=True)
    for args in ((x, wg, wu, bg, None, "tanh"), (x, mg, mu, None, None, "none")):
        torch.library.opcheck(op.default, args)
        assert_close(op(*args), _ref_fused(*args), dtype, "op")
    compiled = torch.compile(lambda *a: op(*a), fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    assert_close(compiled(x, wg, wu, bg, None, "tanh"), _ref_fused(x, wg, wu, bg, None, "tanh"), dtype, "compiled op")


def test_launch_table_is_complete(tg):
    gc = tg.gemm_configs
    rows = {name for _, name in gc.M_BUCKETS} | {"large"}
    assert rows == {"m16", "m64", "m256", "large"}
    for arch, table in gc.TABLE.items():
        assert set(table) == rows, arch
        for key, cfg in table.items():
            assert cfg.kernel in ("tile", "tma"), (arch, key)
            for v in (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps):
                assert v >= 1 and v & (v - 1) == 0, (arch, key, cfg)
            assert cfg.block_m >= 16 and cfg.block_n >= 16 and cfg.block_k >= 16, (arch, key, cfg)
            assert cfg.kernel == "tile" or cfg.split_k == 1, (arch, key, cfg)
            assert gc.lookup(arch, {"m16": 16, "m64": 64, "m256": 256, "large": 257}[key]) is cfg
    assert gc.arch_key((9, 0)) == "9.0" and gc.arch_key((10, 0)) == "9.0"
    assert gc.arch_key((8, 0)) == "8.0" and gc.arch_key((8, 9)) == "8.6" and gc.arch_key((7, 5)) == "default"
    assert gc.arch_key(None) == "interpreter"
    assert [gc.m_bucket(m) for m in (1, 16, 17, 64, 65, 256, 257, 8192)] == [
        "m16", "m16", "m64", "m64", "m256", "m256", "large", "large",
    ]  # fmt: skip


def test_tuner_rewrites_the_table_block(tmp_path, monkeypatch):
    """tools/tune_gemm.py writes the block in the shipped layout: unchanged rows give
    the same text, a tuned row round-trips (the file stays importable), nothing else moves."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from tools import tune_gemm

    gc = tune_gemm.load_source_configs()
    src = tune_gemm.CONFIGS_PY.read_text()
    begin = src.index("\n", src.index("# BEGIN TABLE")) + 1
    assert src[begin : src.index("# END TABLE")] == tune_gemm.format_table(gc, gc.TABLE, gc.TUNED)

    copy = tmp_path / "gemm_configs.py"
    copy.write_text(src)
    monkeypatch.setattr(tune_gemm, "CONFIGS_PY", copy)
    table = {arch: dict(rows) for arch, rows in gc.TABLE.items()}
    tuned_cfg = gc.GemmConfig("tma", 128, 64, 64, 4, 4, 4, 1, False)
    table["9.0"]["large"] = tuned_cfg
    tune_gemm.rewrite_table(gc, table, {"9.0": "test GPU"})
    new = tune_gemm.load_source_configs()
    assert new.TABLE["9.0"]["large"] == tuned_cfg and new.TUNED == {"9.0": "test GPU"}
    assert {a: r for a, r in new.TABLE.items() if a != "9.0"} == {a: r for a, r in gc.TABLE.items() if a != "9.0"}
    assert copy.read_text().split("# BEGIN TABLE")[0] == src.split("# BEGIN TABLE")[0]


def test_auto_split_k(tg):
    """Decode shapes get enough K slices to fill the SMs; big grids and short K get none."""
    cfg = tg.gemm_configs.GemmConfig("tile", 16, 64, 128, 1, 4, 4, 0)
    assert tg.auto_split_k(16, 3072, 24576, cfg, 132) == 5  # 48 tiles -> 240 programs, 91% of 2 waves
    assert tg.auto_split_k(16, 24576, 3072, cfg, 132) == 1  # 384 tiles
    assert tg.auto_split_k(1, 64, 256, cfg, 132) == 1  # only 2 K tiles: not worth it
    assert tg.auto_split_k(1, 64, 16384, cfg, 132) == 16


# --------------------------------------------------------------------------- errors


def test_bad_inputs_raise_clear_errors(kernel, mlp_route):
    """The same message whether the native op's C++ checks or the Python checks catch it."""
    x = torch.randn(4, 40)
    w = torch.randn(24, 40)
    wd = torch.randn(40, 24)
    cases = [
        (lambda: kernel.linear_bias_gelu(x.long(), w), ValueError, "x must have dtype"),
        (lambda: kernel.linear_bias_gelu([1.0], w), TypeError, "x must be a torch.Tensor"),
        (lambda: kernel.linear_bias(x, "w", None), TypeError, "weight must be a torch.Tensor"),
        (lambda: kernel.linear_bias_gelu(x, w.half()), ValueError, "weight must have the dtype of x"),
        (lambda: kernel.linear_bias_gelu(x, torch.randn(24, 41)), ValueError, "weight must be a 2-d [out_features, 40]"),
        (lambda: kernel.linear_bias_gelu(x, w[None]), ValueError, "weight must be a 2-d"),
        (lambda: kernel.linear_bias_gelu(x, w, torch.randn(25)), ValueError, "bias must have shape (24,)"),
        (lambda: kernel.linear_bias_gelu(x, w, approximate="fast"), ValueError, "approximate must be one of"),
        (lambda: kernel.linear_bias_gelu(x, w, approximate=None), TypeError, "approximate must be a str"),
        (lambda: kernel.linear_bias(x, w.to("meta"), None), ValueError, "weight must be on the device of x"),
        (lambda: kernel.linear_bias(x, w, torch.randn(24).half()), ValueError, "bias must have the dtype of x"),
        (lambda: kernel.geglu_linear(x, w, torch.randn(25, 40)), ValueError, "w_up must have shape (24, 40)"),
        (lambda: kernel.geglu_linear(x, w, w.half()), ValueError, "w_up must have the dtype of x"),
        (lambda: kernel.geglu_linear(x, torch.randn(25, 40)), ValueError, "w_gate must have an even number of rows"),
        (lambda: kernel.geglu_linear(x, w, None, torch.randn(24), torch.randn(24)), ValueError, "b_gate must have shape (12,)"),
        (lambda: kernel.geglu_linear(x, w, None, torch.randn(12), torch.randn(13)), ValueError, "b_up must have shape (12,)"),
        (lambda: kernel.geglu_linear(x, w, w, b_up=torch.randn(12)), ValueError, "b_up must have shape (24,)"),
        (lambda: kernel.geglu_mlp(x, w, w, torch.randn(40, 25)), ValueError, "w_down must be a 2-d [out_features, 24]"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, biases=(None, None)), TypeError, "biases must be None or a tuple"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, biases=(None, None, torch.randn(24))), ValueError, "b_down must have shape (40,)"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, residual=torch.randn(4, 24)), ValueError, "residual must have shape (4, 40)"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, residual=torch.randn(4, 40).half()), ValueError, "residual must have the dtype of x"),
        (lambda: kernel.geglu_mlp(x.long(), w, w, wd), ValueError, "x must have dtype float32/float16/bfloat16, got torch.int64"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, approximate="fast"), ValueError, "approximate must be one of ('tanh', 'none'), got 'fast'"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, approximate=None), TypeError, "approximate must be a str"),
        (lambda: kernel.geglu_mlp(x, "w", w, wd), TypeError, "w_gate must be a torch.Tensor"),
        (lambda: kernel.geglu_mlp(x, w, w, wd.to("meta")), ValueError, "w_down must be on the device of x (cpu), got meta"),
        (lambda: kernel.geglu_mlp(x, w, None, wd), ValueError, "w_down must be a 2-d [out_features, 12]"),
        (lambda: kernel.geglu_mlp(x, w, w.half(), wd), ValueError, "w_up must have the dtype of x (torch.float32), got torch.float16"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, biases=(torch.randn(24, 1), None, None)), ValueError, "b_gate must have shape (24,), got (24, 1)"),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc) as info:
            fn()
        assert msg in str(info.value), (msg, str(info.value))


# --------------------------------------------------------------------------- op registration


def test_opcheck_native_training_mlp(kernel):
    """The per-layer native ops: schema, fake (registered in linear.py), autograd
    registration, AOT dispatch. `_geglu_mlp` and `_linear_bias_gelu` (inference ops),
    and `_geglu_mlp_train` / `_geglu_mlp_backward` (the two halves of linear._GegluMlpTrain,
    which owns the autograd: the ops themselves carry none); split and merged weights,
    merged and partial biases, residual."""
    if DEV not in kernel.linear._NATIVE_MLP_DEVICE_TYPES:
        pytest.skip(f"this variant has no compiled training MLP for {DEV}")
    dtype = torch.float32
    x = rand((5, 40), dtype, seed=1)
    wg, wu, wd = weight(24, 40, dtype, 2), weight(24, 40, dtype, 3), weight(40, 24, dtype, 4)
    b24, b40, b48 = rand((24,), dtype, seed=5), rand((40,), dtype, seed=6), rand((48,), dtype, seed=7)
    res = rand((5, 40), dtype, seed=8)
    wm = torch.cat([wg, wu])
    op = kernel._ops.ops._geglu_mlp.default
    torch.library.opcheck(op, (x, wg, wu, wd, b24, None, b40, res, "tanh"))
    torch.library.opcheck(op, (x, wm, None, wd, None, b24, b40, None, "none"))
    lbg = kernel._ops.ops._linear_bias_gelu.default
    torch.library.opcheck(lbg, (x, wg, b24, "tanh"))
    torch.library.opcheck(lbg, (rand((2, 3, 40), dtype, seed=9), wg, None, "none"))
    op = kernel._ops.ops._geglu_mlp_train.default
    # Its backward, one native call (bit i of `needs`: x, w_gate, w_up, w_down, b_gate, b_up, b_down).
    bwd = kernel._ops.ops._geglu_mlp_backward.default
    with torch.no_grad():
        y, pre, h = op(x, wg, wu, wd, b24, b24, b40, None, "tanh")
        ym, prem, hm = op(x, wm, None, wd, b48, None, None, None, "none")
    torch.library.opcheck(bwd, (torch.ones_like(y), x, wg, wu, wd, b24, pre, h, 0b1111111, "tanh"))
    torch.library.opcheck(bwd, (torch.ones_like(ym), x, wm, None, wd, b48, prem, hm, 0b0011011, "none"))
    torch.library.opcheck(bwd, (torch.ones_like(y), x, wg, wu, wd, None, pre, h, 0b0001000, "tanh"))
    for args in (
        (x, wg, wu, wd, b24, None, b40, res, "tanh"),
        (x, wm, None, wd, b48, None, None, None, "none"),
        (x, wm, None, wd, None, b24, b40, res, "tanh"),
    ):
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("grad", [True, False], ids=["train", "inference"])
def test_torch_compile_fullgraph(kernel, grad):
    """geglu_mlp, geglu_linear and linear_bias_gelu compile with no graph break
    (fullgraph=True raises on one), forward and backward; inference on CUDA traces the
    fused op. CPU: aot_eager (the same graph without inductor's C++ toolchain); GPU: inductor."""
    torch._dynamo.reset()
    dtype = torch.float32 if not HAS_CUDA else torch.bfloat16
    make = leaf if grad else (lambda t: t)
    x = make(rand((2, 5, 40), dtype, seed=1))
    wg, wu, wd = make(weight(24, 40, dtype, 2)), make(weight(24, 40, dtype, 3)), make(weight(40, 24, dtype, 4))
    bd = make(rand((40,), dtype, seed=5))

    def block(x, wg, wu, wd, bd):
        h = kernel.geglu_mlp(x, wg, wu, wd, biases=(None, None, bd), residual=x)
        g = kernel.geglu_linear(h, wg, wu, approximate="none")
        return kernel.linear_bias_gelu(g, wd, bd, approximate="tanh")

    compiled = torch.compile(block, fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    with torch.set_grad_enabled(grad):
        y = compiled(x, wg, wu, wd, bd)
        y_eager = block(x, wg, wu, wd, bd)
    assert_close(y, y_eager.detach(), dtype, "compiled forward")
    if grad:
        dy = rand(y.shape, dtype, seed=6)
        inputs = [x, wg, wu, wd, bd]
        check_grads(grads_of(y, dy, inputs), grads_of(y_eager, dy, inputs), dtype, ["x", "wg", "wu", "wd", "bd"])


# --------------------------------------------------------------------------- GPU only

GRID_M = [1, 7, 64, 1000, 4096, 8192]
GRID_KN = [(64, 64), (64, 16384), (16384, 64), (768, 3072), (3000, 1000)]


@pytest.mark.cuda
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kn", GRID_KN, ids=lambda kn: f"K{kn[0]}-N{kn[1]}")
@pytest.mark.parametrize("m", GRID_M)
def test_cuda_grid_geglu_linear(kernel, m, kn, dtype, grad):
    """No grad: the fused Triton GEMM (every table row and split-K); grad: the
    composition, all grads."""
    k, n = kn
    x = leaf(rand((m, k), dtype, seed=1))
    wg, wu = leaf(weight(n, k, dtype, 2)), leaf(weight(n, k, dtype, 3))
    bg, bu = leaf(rand((n,), dtype, seed=4)), leaf(rand((n,), dtype, seed=5))
    inputs = [x, wg, wu, bg, bu]
    r = [ref64(t) for t in inputs]
    ref = ref_geglu(*r, "tanh")
    with torch.set_grad_enabled(grad):
        y = kernel.geglu_linear(x, wg, wu, bg, bu, approximate="tanh")
    assert_close(y, ref, dtype, "forward")
    if grad:
        dy = rand((m, n), dtype, seed=6)
        got = grads_of(y, dy, inputs)
        check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "b_gate", "b_up"])


@pytest.mark.cuda
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kn", GRID_KN, ids=lambda kn: f"K{kn[0]}-N{kn[1]}")
@pytest.mark.parametrize("m", GRID_M)
def test_cuda_grid_linear_bias_gelu(kernel, m, kn, dtype, approximate, grad):
    """No grad, tanh: cuBLASLt's GELU_BIAS epilogue at every size; otherwise
    F.linear + F.gelu."""
    k, n = kn
    x = leaf(rand((m, k), dtype, seed=1))
    w, b = leaf(weight(n, k, dtype, 2)), leaf(rand((n,), dtype, seed=3))
    dy = rand((m, n), dtype, seed=4)
    check_linear_bias_gelu(kernel, x, w, b, dy, approximate, dtype, grad=grad)


@pytest.mark.cuda
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("m", [16, 4096])
def test_cuda_mlp_gemma_shape(kernel, m, grad):
    """Gemma-7B-like MLP (3072 -> 24576 -> 3072), merged weight, residual, bf16:
    inference (fused GEMM) and training (the compiled op or the composition)."""
    dtype = torch.bfloat16
    x = leaf(rand((m, 3072), dtype, seed=1))
    w = leaf(weight(2 * 24576, 3072, dtype, 2))
    wd = leaf(weight(3072, 24576, dtype, 3))
    res = rand((m, 3072), dtype, seed=4)
    r = [ref64(t) for t in (x, w, wd)]
    ref = F.linear(ref_geglu(r[0], r[1][:24576], r[1][24576:], None, None, "tanh"), r[2]) + res.double()
    with torch.set_grad_enabled(grad):
        y = kernel.geglu_mlp(x, w, None, wd, residual=res)
    assert_close(y, ref, dtype, "forward")
    if grad:
        dy = rand((m, 3072), dtype, seed=5)
        check_grads(grads_of(y, dy, [x, w, wd]), grads_of(ref, dy.double(), r), dtype, ["x", "w", "w_down"])


@pytest.mark.cuda
@pytest.mark.parametrize("allow_tf32", [False, True], ids=["fp32", "tf32"])
def test_cuda_float32_follows_torch_tf32_switch(kernel, allow_tf32, monkeypatch):
    """float32 geglu_linear computes as torch's matmuls do: full float32 while
    torch.backends.cuda.matmul.allow_tf32 is off (its default), TF32 (the native op's
    cuBLAS GEMM, or the noarch variant's Triton kernel) when it is on. At K = 768 TF32
    inputs leave a ~1e-3 relative error, full float32 ~1e-6, so the first bound fails if
    a TF32 kernel serves the call."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", allow_tf32)
    x = rand((64, 768), torch.float32, seed=1)
    wg, wu = weight(512, 768, torch.float32, 2), weight(512, 768, torch.float32, 3)
    with torch.no_grad():
        y = kernel.geglu_linear(x, wg, wu)
    ref = ref_geglu(x.double(), wg.double(), wu.double(), None, None, "tanh")
    err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
    assert err < (5e-3 if allow_tf32 else 1e-5), err


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", [1, 64])  # M == 1: PyTorch's non-Lt fallback; M > 1: the cuBLASLt epilogue
def test_cuda_addmm_activation_is_tanh(m, dtype, monkeypatch):
    """The claim linear_bias_gelu rests on: on CUDA torch._addmm_activation(use_gelu=True)
    is the tanh GELU. float32 without TF32 separates tanh from erf (up to ~5e-4 apart);
    in half precision rounding hides the difference, so there it is only checked close."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    x = rand((m, 256), dtype, seed=1) * 2
    w, b = weight(512, 256, dtype, 2), rand((512,), dtype, seed=3)
    y = torch._addmm_activation(b, x, w.t(), use_gelu=True)
    pre = F.linear(x.double(), w.double(), b.double())
    assert y.dtype == dtype
    assert_close(y, F.gelu(pre, approximate="tanh"), dtype, "addmm_activation vs tanh GELU")
    if dtype == torch.float32:
        tanh_err = (y.double() - F.gelu(pre, approximate="tanh")).abs().max().item()
        erf_err = (y.double() - F.gelu(pre)).abs().max().item()
        assert tanh_err < 1e-4 < erf_err, (tanh_err, erf_err)


@pytest.mark.cuda
@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m", [1, 16, 4096])
def test_cuda_mlp_down_bias_and_residual(kernel, m, dtype, grad):
    """geglu_mlp's down projection on cuBLAS with bias and residual (addmm(bias) + an
    in-place residual add), output dtype = input dtype, all grads."""
    x = leaf(rand((m, 768), dtype, seed=1))
    wg, wu, wd = leaf(weight(3072, 768, dtype, 2)), leaf(weight(3072, 768, dtype, 3)), leaf(weight(768, 3072, dtype, 4))
    bg, bd = leaf(rand((3072,), dtype, seed=5)), leaf(rand((768,), dtype, seed=6))
    res = leaf(rand((m, 768), dtype, seed=7))
    inputs = [x, wg, wu, wd, bg, bd, res]
    r = [ref64(t) for t in inputs]
    ref = F.linear(ref_geglu(r[0], r[1], r[2], r[4], None, "tanh"), r[3], r[5]) + r[6]
    with torch.set_grad_enabled(grad):
        y = kernel.geglu_mlp(x, wg, wu, wd, biases=(bg, None, bd), residual=res)
    assert y.dtype == dtype
    assert_close(y, ref, dtype, "forward")
    if grad:
        dy = rand((m, 768), dtype, seed=8)
        got = grads_of(y, dy, inputs)
        check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "w_down", "b_gate", "b_down", "residual"])


@pytest.mark.cuda
@pytest.mark.parametrize("kernel_kind", ["table", "tile"])
def test_cuda_more_than_2_31_elements(tg, kernel_kind):
    """x with > 2**31 elements (x offsets need int64), and an output with > 2**31
    elements; checked on the last rows, where 32-bit offsets would wrap."""
    dtype = torch.bfloat16
    cfg = None if kernel_kind == "table" else tg.gemm_configs.GemmConfig("tile", 128, 64, 64, 8, 4, 3)
    m, k, n = (1 << 31) // 4096 + 300, 4096, 64
    x = torch.randn((m, k), device="cuda", dtype=dtype)
    wg, wu, b = weight(n, k, dtype, 2), weight(n, k, dtype, 3), rand((n,), dtype, seed=4)
    y = tg.geglu_forward(x, wg, wu, b, None, "tanh", config=cfg)
    tail = slice(m - 300, m)
    assert_close(y[tail], _ref_fused(x[tail], wg, wu, b, None, "tanh"), dtype, "big x")
    del x, y

    m, k, n = (1 << 31) // 32768 + 64, 64, 32768
    x = rand((m, k), dtype, seed=5)
    wg, wu = weight(n, k, dtype, 6), weight(n, k, dtype, 7)
    y = tg.geglu_forward(x, wg, wu, None, None, "none", config=cfg)
    tail = slice(m - 64, m)
    assert_close(y[tail], _ref_fused(x[tail], wg, wu, None, None, "none"), dtype, "big out")


@pytest.mark.cuda
def test_cuda_new_token_counts_do_not_recompile(kernel, tg, monkeypatch):
    """Within an M bucket a new token count reuses the compiled Triton kernels (M is not
    specialized on; K and N stay fixed as for one layer). geglu_linear's route in a
    variant without the native ops (noarch), with float32 under TF32 as bf16 would take."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    monkeypatch.setattr(kernel.linear, "_NATIVE_MLP_FLAG", None)
    dtype = torch.float32
    wg, wu = weight(3072, 768, dtype, 1), weight(3072, 768, dtype, 2)

    def run(m):
        with torch.no_grad():
            kernel.geglu_linear(rand((m, 768), dtype, seed=m), wg, wu)

    kernels = (tg._geglu_tile_kernel, tg._geglu_tma_kernel, tg._geglu_splitk_reduce_kernel)
    for m in (1, 16, 17, 64, 65, 256, 300, 8192):  # one (or two) per bucket and 16-alignment class
        run(m)
    warm = [compiled_count(k) for k in kernels]
    for m in (3, 9, 33, 50, 100, 200, 1000, 4096, 5000):
        run(m)
    assert sum(warm) > 0, "the Triton kernels never ran: the test would prove nothing"
    assert [compiled_count(k) for k in kernels] == warm
