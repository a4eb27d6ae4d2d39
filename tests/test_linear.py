"""Fused GEMMs (linear.py, triton_gemm.py, gemm_configs.py): bias / GELU / GeGLU in the
epilogue, forward and backward, against float64 autograd of the eager formulas.

Without a GPU the Triton kernels run under the Triton interpreter on CPU tensors:
TRITON_INTERPRET=1 is set below, at collection, before the session fixture imports
the kernel package (triton.jit reads the variable when it decorates a kernel), as in
test_triton_activation.py. The interpreter computes bf16 tl.dot wrongly (triton 3.9),
so on CPU the kernels are checked in float16 and float32 at small shapes; the
interpreter's launch table row uses tiny tiles and sends M <= 64 through split-K and
64 < M <= 256 through the TMA kernel, so every kernel runs. On a GPU the same tests
run natively (bf16 too), plus the cuda-marked ones: the full shape grid, >2**31
elements, torch.compile with inductor, no recompilation for new token counts.
"""

import os

import pytest
import torch
import torch.nn.functional as F

from conftest import HAS_CUDA, poisoned_like

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEV = "cuda" if HAS_CUDA else "cpu"
DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if HAS_CUDA else [])


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


def weight(n, k, dtype, seed):
    return rand((n, k), dtype, scale=k**-0.5, seed=seed)


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


def check_linear_bias_gelu(kernel, x, w, b, dy, approximate, dtype):
    """linear_bias_gelu's output and its grads of x, weight, bias (b may be None)
    against float64 autograd of gelu(linear(x, w, b))."""
    y = kernel.linear_bias_gelu(x, w, b, approximate=approximate)
    assert y.dtype == dtype
    got = grads_of(y, dy, [x, w, b])
    r = [ref64(t) for t in (x, w, b)]
    ref = F.gelu(F.linear(*r), approximate=approximate)
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "weight", "bias"])


@pytest.fixture(scope="module")
def tg(kernel):
    """The Triton GEMM module of the loaded variant."""
    mod = getattr(kernel.linear, "triton_gemm", None)
    if mod is None:
        pytest.skip("triton is not installed")
    if not HAS_CUDA and not mod.INTERPRET:
        pytest.fail("the kernel package was imported before TRITON_INTERPRET=1 was set")
    return mod


# --------------------------------------------------------------------------- public ops

# (shape of x, K, N, dtype, bias, approximate, merged weight). x's last dim is K.
# Small M goes through split-K; M=100 through the TMA kernel (K=40: 16-byte rows)
# or, with K=36 in float16 (72-byte rows, no TMA), the tile kernel; M=300 the tile
# kernel without split.
GEGLU_CASES = [
    ((1, 40), 24, torch.float16, True, "tanh", False),
    ((7, 40), 72, torch.float32, False, "none", False),
    ((16, 72), 24, torch.float16, True, "none", True),
    ((64, 40), 24, torch.float32, True, "tanh", True),
    ((100, 40), 24, torch.float16, True, "tanh", False),
    ((100, 36), 40, torch.float16, False, "none", False),
    ((300, 40), 24, torch.float32, True, "tanh", False),
    ((2, 5, 40), 24, torch.float32, True, "none", True),
]


def _case_id(case):
    shape, n, dtype, bias, approx, *rest = case
    tag = "x".join(map(str, shape)) + f"-N{n}-{str(dtype)[6:]}-{'bias' if bias else 'nobias'}-{approx}"
    return tag + ("-merged" if rest and rest[0] else "")


@pytest.fixture(params=["cublas", "triton"])
def train_gate_up(request, kernel, monkeypatch):
    """Both training forwards: cuBLAS gate/up + elementwise GeGLU (the default), and the
    fused Triton kernel writing h and the pre-activations."""
    monkeypatch.setattr(kernel.linear, "TRAIN_GATE_UP_ON_CUBLAS", request.param == "cublas")
    return request.param


@pytest.mark.parametrize("case", GEGLU_CASES, ids=_case_id)
def test_geglu_linear_forward_backward(tg, kernel, case, train_gate_up):
    shape, n, dtype, has_bias, approximate, merged = case
    k = shape[-1]
    x = leaf(rand(shape, dtype, seed=1))
    wg, wu = leaf(weight(n, k, dtype, 2)), leaf(weight(n, k, dtype, 3))
    bg = leaf(rand((n,), dtype, seed=4)) if has_bias else None
    bu = leaf(rand((n,), dtype, seed=5)) if has_bias else None
    dy = rand((*shape[:-1], n), dtype, seed=6)
    if merged:
        w = leaf(torch.cat([wg, wu]))
        b = leaf(torch.cat([bg, bu])) if has_bias else None  # the merged-bias form
        y = kernel.geglu_linear(x, w, None, b_gate=b, approximate=approximate)
        inputs = [x, w, b]
    else:
        y = kernel.geglu_linear(x, wg, wu, bg, bu, approximate=approximate)
        inputs = [x, wg, wu, bg, bu]
    got = grads_of(y, dy, inputs)

    r = [ref64(t) for t in (x, wg, wu, bg, bu)]
    ref = ref_geglu(*r, approximate)
    assert_close(y, ref, dtype, "forward")
    rx, rwg, rwu, rbg, rbu = grads_of(ref, dy.double(), r)
    if merged:
        expected = [rx, torch.cat([rwg, rwu]), torch.cat([rbg, rbu]) if has_bias else None]
    else:
        expected = [rx, rwg, rwu, rbg, rbu]
    check_grads(got, expected, dtype, ["x", "w_gate", "w_up", "b_gate", "b_up"])


LINEAR_CASES = [
    ((1, 40), 24, torch.float16, True, "tanh"),
    ((7, 40), 72, torch.float32, True, "none"),
    ((64, 72), 24, torch.float32, False, "tanh"),
    ((100, 40), 72, torch.float16, True, "none"),
    ((3, 4, 40), 24, torch.float16, False, "none"),
]


@pytest.mark.parametrize("case", LINEAR_CASES, ids=_case_id)
def test_linear_bias_gelu_forward_backward(kernel, tg, case):
    shape, n, dtype, has_bias, approximate = case
    x = leaf(rand(shape, dtype, seed=1))
    w = leaf(weight(n, shape[-1], dtype, 2))
    b = leaf(rand((n,), dtype, seed=3)) if has_bias else None
    dy = rand((*shape[:-1], n), dtype, seed=4)
    y = kernel.linear_bias_gelu(x, w, b, approximate=approximate)
    got = grads_of(y, dy, [x, w, b])
    r = [ref64(t) for t in (x, w, b)]
    ref = F.gelu(F.linear(*r), approximate=approximate)
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "weight", "bias"])


@pytest.mark.parametrize("case", LINEAR_CASES[:3], ids=_case_id)
def test_linear_bias_forward_backward(kernel, tg, case):
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
]


@pytest.mark.parametrize("case", MLP_CASES, ids=lambda c: f"{c[0]}-{str(c[3])[6:]}-b{c[4]}-res{c[5]}-merged{c[6]}")
def test_geglu_mlp_forward_backward(kernel, tg, case, train_gate_up):
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

    r = [ref64(t) for t in (x, wg, wu, wd, bg, bu, bd, res)]
    rx, rwg, rwu, rwd, rbg, rbu, rbd, rres = r
    ref = F.linear(ref_geglu(rx, rwg, rwu, rbg, rbu, "tanh"), rwd, rbd)
    if rres is not None:
        ref = ref + rres
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "w_down", "b_gate", "b_up", "b_down", "residual"])


@pytest.mark.parametrize("merged", [False, True])
def test_recompute_in_backward_mode(kernel, tg, monkeypatch, merged):
    """RECOMPUTE_IN_BACKWARD=True: only x is saved and the backward recomputes gate/up
    with the fused backward-epilogue GEMM; same grads as the default saving path."""
    monkeypatch.setattr(kernel.linear, "RECOMPUTE_IN_BACKWARD", True)
    dtype = torch.float32
    x = leaf(rand((2, 9, 40), dtype, seed=1))
    wg, wu, wd = leaf(weight(24, 40, dtype, 2)), leaf(weight(24, 40, dtype, 3)), leaf(weight(40, 24, dtype, 4))
    bg, bu = leaf(rand((24,), dtype, seed=5)), leaf(rand((24,), dtype, seed=6))
    dy = rand((2, 9, 40), dtype, seed=7)
    if merged:
        w = leaf(torch.cat([wg, wu]))
        y = kernel.geglu_mlp(x, w, None, wd, biases=(bg, bu, None))
        got = grads_of(y, dy, [x, w, wd, bg, bu])
        got = [got[0], got[1][:24], got[1][24:], *got[2:]]
    else:
        y = kernel.geglu_mlp(x, wg, wu, wd, biases=(bg, bu, None))
        got = grads_of(y, dy, [x, wg, wu, wd, bg, bu])
    r = [ref64(t) for t in (x, wg, wu, wd, bg, bu)]
    ref = F.linear(ref_geglu(r[0], r[1], r[2], r[4], r[5], "tanh"), r[3])
    assert_close(y, ref, dtype, "mlp forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "w_down", "b_gate", "b_up"])

    dh = rand((2, 9, 24), dtype, seed=8)
    h = kernel.geglu_linear(x, wg, wu, bg, bu, approximate="none")
    got = grads_of(h, dh, [x, wg, wu, bg, bu])
    r = [ref64(t) for t in (x, wg, wu, bg, bu)]
    ref = ref_geglu(*r, "none")
    assert_close(h, ref, dtype, "geglu_linear forward")
    check_grads(got, grads_of(ref, dh.double(), r), dtype, ["x", "w_gate", "w_up", "b_gate", "b_up"])


@pytest.mark.parametrize("case", MLP_CASES, ids=lambda c: f"{c[0]}-{str(c[3])[6:]}-b{c[4]}-res{c[5]}-merged{c[6]}")
def test_native_training_mlp_matches_the_python_route(kernel, monkeypatch, case):
    """Arch variants run geglu_mlp's training call as the compiled op geglu_mlp_cublas
    (C++ autograd node; torch-ext/geglu_mlp.cpp). It computes what the Python cuBLAS
    route computes with the same ops, so values and grads are identical; opcheck
    passes on it (schema, fake, autograd registration, AOT dispatch)."""
    lin = kernel.linear
    if DEV not in lin._NATIVE_MLP_DEVICE_TYPES:
        pytest.skip(f"this variant has no compiled module for {DEV} (noarch): the Python route serves it")
    shape, hidden, d_out, dtype, which_bias, has_res, merged = case
    k = shape[-1]
    x = leaf(rand(shape, dtype, seed=1))
    wg, wu = weight(hidden, k, dtype, 2), weight(hidden, k, dtype, 3)
    wd = leaf(weight(d_out, hidden, dtype, 4))
    bg, bu, bd = (leaf(rand((m,), dtype, seed=5 + i)) if on else None for i, (m, on) in enumerate(zip((hidden, hidden, d_out), which_bias)))
    res = leaf(rand((*shape[:-1], d_out), dtype, seed=9)) if has_res else None
    dy = rand((*shape[:-1], d_out), dtype, seed=10)
    w_gate, w_up = (leaf(torch.cat([wg, wu])), None) if merged else (leaf(wg), leaf(wu))
    inputs = [t for t in (x, w_gate, w_up, wd, bg, bu, bd, res) if t is not None]

    def run():
        y = kernel.geglu_mlp(x, w_gate, w_up, wd, biases=(bg, bu, bd), residual=res, approximate="tanh")
        return y, grads_of(y, dy, inputs)

    y, grads = run()
    nodes = [y.grad_fn] + [f for f, _ in y.grad_fn.next_functions]  # the op's node, or a view of it
    assert "CppFunction" in {type(f).__name__ for f in nodes}, "the compiled op did not run"
    monkeypatch.setattr(lin, "_NATIVE_MLP_DEVICE_TYPES", frozenset())
    y_py, grads_py = run()
    torch.testing.assert_close(y, y_py, rtol=0, atol=0)
    for got, want in zip(grads, grads_py):
        torch.testing.assert_close(got, want, rtol=0, atol=0)

    rows = lambda t: None if t is None else t.reshape(-1, t.shape[-1])  # noqa: E731
    args = (rows(x), w_gate, w_up, wd, bg, bu, bd, rows(res), "none")
    torch.library.opcheck(kernel._ops.ops.geglu_mlp_cublas.default, args)


def test_geglu_mlp_partial_training(kernel, tg):
    """Frozen parts get no grad; training only w_down uses the h saved by the forward."""
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


def test_empty_and_meta_inputs(kernel, tg):
    """No tokens: empty results with the right shape, and zero weight grads; meta
    tensors go through the fake implementations (shape inference)."""
    x = torch.empty((0, 40), device=DEV, requires_grad=True)
    wg, wu, wd = weight(24, 40, torch.float32, 1), weight(24, 40, torch.float32, 2), weight(40, 24, torch.float32, 3)
    wg.requires_grad_()
    y = kernel.geglu_mlp(x, wg, wu, wd)
    assert y.shape == (0, 40)
    y.sum().backward()
    assert (wg.grad == 0).all()
    assert kernel.linear_bias_gelu(x, wd.t().contiguous()).shape == (0, 24)

    m = torch.empty((2, 5, 40), device="meta", dtype=torch.bfloat16)
    wm = torch.empty((48, 40), device="meta", dtype=torch.bfloat16)
    wdm = torch.empty((32, 24), device="meta", dtype=torch.bfloat16)
    assert kernel.geglu_mlp(m, wm, None, wdm).shape == (2, 5, 32)
    assert kernel.geglu_linear(m, wm).shape == (2, 5, 24)


# --------------------------------------------------------------------------- CPU fallback


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_eager_fallback(kernel, monkeypatch, dtype):
    """CPU tensors outside the interpreter run the eager float32 composite (what layers
    use on CPU; a forward that saves gate/up for backward runs torch's GEMMs and the
    CPU GeGLU kernel): same results and grads, bfloat16 included."""
    tgm = getattr(kernel.linear, "triton_gemm", None)
    if tgm is not None:
        monkeypatch.setattr(tgm, "INTERPRET", False)
    x = leaf(rand((2, 3, 40), dtype, seed=1, device="cpu"))
    wg, wu = leaf(weight(24, 40, dtype, 2).cpu()), leaf(weight(24, 40, dtype, 3).cpu())
    wd, bd = leaf(weight(40, 24, dtype, 4).cpu()), leaf(rand((40,), dtype, seed=5, device="cpu"))
    res = leaf(rand((2, 3, 40), dtype, seed=6, device="cpu"))
    dy = rand((2, 3, 40), dtype, seed=7, device="cpu")
    y = kernel.geglu_mlp(x, wg, wu, wd, biases=(None, None, bd), residual=res, approximate="none")
    got = grads_of(y, dy, [x, wg, wu, wd, bd, res])
    r = [ref64(t) for t in (x, wg, wu, wd, bd, res)]
    ref = F.linear(ref_geglu(r[0], r[1], r[2], None, None, "none"), r[3], r[4]) + r[5]
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "w_down", "b_down", "residual"])

    g = kernel.linear_bias_gelu(x, wd.t().contiguous().detach(), None, approximate="tanh")
    assert_close(g, F.gelu(F.linear(r[0], r[3].t()), approximate="tanh"), dtype, "linear_bias_gelu")


# --------------------------------------------------------------------------- routing (linear._gemm_backend)

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32


def test_gemm_backend_decisions(kernel, monkeypatch):
    """The routing table itself (pure function of kind, device, dtype, tokens): decided
    for CUDA tensors too, without a GPU. See linear.py's docstring for the measurements."""
    lin = kernel.linear
    route = lin._gemm_backend
    has_triton = lin.triton_gemm is not None
    interp = has_triton and lin.triton_gemm.INTERPRET
    fused = "triton" if has_triton else None
    # bias / residual epilogues: cuBLAS everywhere, every size and dtype
    for dev in ("cuda", "cpu"):
        for m in (1, 16, 300, 8192):
            for dt in (F16, BF16, F32):
                assert route("linear", dev, dt, m, "none", True) == "cublas"
                assert route("linear", dev, dt, m, "none", False) == "cublas"
    if has_triton:
        # tanh GELU with a bias: cuBLASLt's GELU epilogue on CUDA, any size
        for m in (1, 16, 256, 257, 8192):
            for dt in (F16, BF16, F32):
                assert route("linear", "cuda", dt, m, "gelu_tanh", True) == "cublas"
        # exact GELU, or tanh without bias: cuBLAS + elementwise up to CUBLAS_GELU_MAX_TOKENS, Triton above
        for act, bias in (("gelu", True), ("gelu", False), ("gelu_tanh", False)):
            assert route("linear", "cuda", BF16, 1, act, bias) == "cublas"
            assert route("linear", "cuda", BF16, lin.CUBLAS_GELU_MAX_TOKENS, act, bias) == "cublas"
            assert route("linear", "cuda", BF16, lin.CUBLAS_GELU_MAX_TOKENS + 1, act, bias) == "triton"
        assert route("linear_gelu_grad", "cuda", BF16, 64) == "cublas"
        assert route("linear_gelu_grad", "cuda", BF16, lin.CUBLAS_GELU_MAX_TOKENS + 1) == "triton"
        # the two-accumulator GeGLU GEMM stays on Triton at every size
        for m in (1, 16, 64, 256, 8192):
            assert route("geglu", "cuda", BF16, m) == "triton"
    # CPU never takes _addmm_activation (its GELU there is exact erf); fused kinds run
    # interpreted Triton (float16/float32 under TRITON_INTERPRET=1) or the eager composite
    for act in ("gelu", "gelu_tanh"):
        assert route("linear", "cpu", F32, 8, act, True) == ("triton" if interp else "eager")
        assert route("linear", "cpu", BF16, 8, act, True) == "eager"
    assert route("geglu", "cpu", BF16, 8) == "eager"
    assert route("geglu", "cpu", F16, 8) == ("triton" if interp else "eager")
    # a training forward (gate/up saved anyway): cuBLAS GEMMs + elementwise GeGLU, unless
    # TRAIN_GATE_UP_ON_CUBLAS is off, then the same as "geglu"
    for dev, dt in (("cuda", BF16), ("cpu", F32), ("cpu", BF16)):
        assert route("geglu_train", dev, dt, 8192) == "cublas"
    monkeypatch.setattr(lin, "TRAIN_GATE_UP_ON_CUBLAS", False)
    for dev, dt, m in (("cuda", BF16, 8192), ("cuda", F16, 1), ("cpu", F16, 8), ("cpu", BF16, 8)):
        assert route("geglu_train", dev, dt, m) == route("geglu", dev, dt, m)
    # geglu_mlp's backward through w_down: cuBLAS + elementwise unless FUSED_SAVED_BACKWARD
    for dev, dt in (("cuda", BF16), ("cpu", F32), ("cpu", BF16)):
        assert route("geglu_saved_grad", dev, dt, 8192) == "cublas"
    monkeypatch.setattr(lin, "FUSED_SAVED_BACKWARD", True)
    assert route("geglu_saved_grad", "cuda", BF16, 8192) == (fused or "cublas")
    assert route("geglu_saved_grad", "cpu", BF16, 8) == "cublas"  # no Triton for bf16 on CPU
    with pytest.raises(ValueError, match="kind must be one of"):
        route("conv", "cuda", BF16, 8)
    # empty problems: eager composite whatever the kind
    empty = torch.empty((0, 40))
    assert lin._backend_for("linear", empty, torch.empty((24, 40))) == "eager"
    assert lin._backend_for("linear", torch.empty((3, 0)), torch.empty((24, 0))) == "eager"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cublas_linear_helper(kernel, dtype):
    """_cublas_linear / _cublas_linear_gelu_grad, the code the cuBLAS routes run, on CPU
    tensors (torch.addmm is the same call there; only the CUDA-only _addmm_activation
    line is left to the cuda tests): every activation with and without bias and
    residual, result in x's dtype."""
    lin = kernel.linear
    x = rand((9, 40), dtype, seed=1, device="cpu")
    w = weight(24, 40, dtype, 2).cpu()
    b = rand((24,), dtype, seed=3, device="cpu")
    res = rand((9, 24), dtype, seed=4, device="cpu")
    dy = rand((9, 24), dtype, seed=5, device="cpu")
    for act in ("none", "gelu", "gelu_tanh"):
        for bias in (None, b):
            for residual in (None, res):
                pre = F.linear(x.double(), w.double(), None if bias is None else bias.double())
                ref = pre if act == "none" else F.gelu(pre, approximate="tanh" if act == "gelu_tanh" else "none")
                if residual is not None:
                    ref = ref + residual.double()
                y = lin._cublas_linear(x, w, bias, residual, act)
                assert y.dtype == dtype
                assert_close(y, ref, dtype, f"{act} bias={bias is not None} residual={residual is not None}")
        if act == "none":
            continue
        approximate = "tanh" if act == "gelu_tanh" else "none"
        for bias in (None, b):
            pre = ref64(F.linear(x.double(), w.double(), None if bias is None else bias.double()))
            (dpre_ref,) = torch.autograd.grad(F.gelu(pre, approximate=approximate), [pre], dy.double())
            dpre, db = lin._cublas_linear_gelu_grad(dy, x, w, bias, approximate, True)
            assert dpre.dtype == dtype and db.dtype == torch.float32
            assert_close(dpre, dpre_ref, dtype, f"gelu grad {approximate}")
            assert_close(db, dpre_ref.sum(0), dtype, f"gelu bias grad {approximate}")


def test_addmm_activation_gelu_form_on_cpu():
    """torch._addmm_activation(use_gelu=True) applies the EXACT (erf) GELU on CPU, the
    tanh form only on CUDA (cuBLASLt epilogue; test_cuda_addmm_activation_is_tanh):
    why the router sends only CUDA tanh-GELU linears there."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=g, dtype=torch.float64) * 2
    w = torch.randn(48, 32, generator=g, dtype=torch.float64) * 0.5
    b = torch.randn(48, generator=g, dtype=torch.float64)
    pre = torch.addmm(b, x, w.t())
    y = torch._addmm_activation(b, x, w.t(), use_gelu=True)
    assert (y - F.gelu(pre)).abs().max() < 1e-12
    assert (y - F.gelu(pre, approximate="tanh")).abs().max() > 1e-4


def _spy(monkeypatch, module, name):
    calls = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_routes_taken_by_the_public_api(kernel, tg, monkeypatch):
    """The public functions call the routes the table names: linear_bias and the down
    projection on cuBLAS, geglu_mlp's backward through cuBLAS + the elementwise GeGLU
    backward (or the fused op with FUSED_SAVED_BACKWARD). The Python route: the
    compiled training op of arch variants is tested on its own (above)."""
    lin = kernel.linear
    monkeypatch.setattr(lin, "_NATIVE_MLP_DEVICE_TYPES", frozenset())
    dtype = torch.float32
    cublas = _spy(monkeypatch, lin, "_cublas_linear")
    saved = _spy(monkeypatch, lin, "_cublas_geglu_saved_grad")
    fused = _spy(monkeypatch, lin, "_geglu_mlp_grad")
    x = leaf(rand((9, 40), dtype, seed=1))
    wg, wu, wd = leaf(weight(24, 40, dtype, 2)), leaf(weight(24, 40, dtype, 3)), leaf(weight(40, 24, dtype, 4))
    kernel.linear_bias(x, wd.t(), None)
    assert cublas == ["_cublas_linear"]
    y = kernel.geglu_mlp(x, wg, wu, wd, residual=x)
    assert cublas == ["_cublas_linear"] * 2
    y.sum().backward()
    assert saved == ["_cublas_geglu_saved_grad"] and fused == []
    monkeypatch.setattr(lin, "FUSED_SAVED_BACKWARD", True)
    kernel.geglu_mlp(x, wg, wu, wd).sum().backward()
    assert saved == ["_cublas_geglu_saved_grad"] and fused == ["_geglu_mlp_grad"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_fused_saved_backward_mode(kernel, tg, monkeypatch, dtype):
    """FUSED_SAVED_BACKWARD=True: geglu_mlp's backward through the fused Triton kernel
    (GeGLU backward in the epilogue of grad @ w_down); same grads as the default."""
    monkeypatch.setattr(kernel.linear, "FUSED_SAVED_BACKWARD", True)
    x = leaf(rand((2, 9, 40), dtype, seed=1))
    w = leaf(weight(48, 40, dtype, 2))
    wd = leaf(weight(40, 24, dtype, 4))
    bg, bd = leaf(rand((48,), dtype, seed=5)), leaf(rand((40,), dtype, seed=6))
    dy = rand((2, 9, 40), dtype, seed=7)
    y = kernel.geglu_mlp(x, w, None, wd, biases=(bg, None, bd), approximate="none")
    got = grads_of(y, dy, [x, w, wd, bg, bd])
    r = [ref64(t) for t in (x, w, wd, bg, bd)]
    ref = F.linear(ref_geglu(r[0], r[1][:24], r[1][24:], r[3][:24], r[3][24:], "none"), r[2], r[4])
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w", "w_down", "b_gate", "b_down"])


def test_gelu_linear_cublas_route_end_to_end(kernel, monkeypatch):
    """linear_bias_gelu through the cuBLAS route (forced: on CPU the router picks it
    only for CUDA tensors), forward and backward, float16 and bfloat16."""
    lin = kernel.linear
    original = lin._gemm_backend

    def cublas_linear_kinds(kind, *args, **kwargs):
        return "cublas" if kind.startswith("linear") else original(kind, *args, **kwargs)

    monkeypatch.setattr(lin, "_gemm_backend", cublas_linear_kinds)
    for dtype in (torch.float16, torch.bfloat16):
        for approximate, has_bias in (("tanh", True), ("none", False)):
            x = leaf(rand((3, 5, 40), dtype, seed=1, device="cpu"))
            w = leaf(weight(24, 40, dtype, 2).cpu())
            b = leaf(rand((24,), dtype, seed=3, device="cpu")) if has_bias else None
            dy = rand((3, 5, 24), dtype, seed=4, device="cpu")
            check_linear_bias_gelu(kernel, x, w, b, dy, approximate, dtype)


# --------------------------------------------------------------------------- kernels directly


def _cfg(tg, kernel_kind, bm, bn, bk, split=1):
    return tg.GemmConfig(kernel_kind, bm, bn, bk, 2, 4, 2, split)


def _kernel_configs(tg):
    cfgs = [("tile", 16, 16, 16, 1), ("tile", 32, 16, 32, 3), ("tile", 16, 32, 16, 1)]
    if tg.TensorDescriptor is not None:
        cfgs.append(("tma", 16, 16, 16, 1))
    if HAS_CUDA:  # tensor-core tile shapes as the GPU table uses them
        cfgs += [("tile", 64, 64, 64, 1), ("tile", 16, 64, 128, 4)]
        if tg._device_info(torch.device("cuda")).tma:
            cfgs.append(("tma", 128, 128, 64, 1))
    return cfgs


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_kernels_every_epilogue_poisoned_outputs(tg, approximate):
    """Every epilogue under every kernel (tile, split-K + reduce, TMA) writes every
    element of NaN-poisoned outputs, with K (=40) not a multiple of BLOCK_K and M, N
    not multiples of the tiles."""
    dtype = torch.float16
    m, k, n = 21, 40, 24
    x = rand((m, k), dtype, seed=1)
    wg, wu = weight(n, k, dtype, 2), weight(n, k, dtype, 3)
    bg, bu = rand((n,), dtype, seed=4), rand((n,), dtype, seed=5)
    res, dy = rand((m, n), dtype, seed=6), rand((m, n), dtype, seed=7)
    x64, wg64, wu64, bg64, bu64 = (t.double() for t in (x, wg, wu, bg, bu))
    g, u = F.linear(x64, wg64, bg64), F.linear(x64, wu64, bu64)
    act = F.gelu(g, approximate=approximate)
    gr = ref64(g)
    (dact,) = torch.autograd.grad(F.gelu(gr, approximate=approximate), gr, torch.ones_like(g))
    gelu_name = "gelu_tanh" if approximate == "tanh" else "gelu"
    for c in _kernel_configs(tg):
        cfg = _cfg(tg, *c)
        out = tg.linear_forward(x, wg, bg, res, "none", config=cfg, out=poisoned_like(res))
        assert_close(out, g + res.double(), dtype, f"linear {cfg}")
        out = tg.linear_forward(x, wg, bg, None, gelu_name, config=cfg, out=poisoned_like(res))
        assert_close(out, act, dtype, f"gelu {cfg}")
        out = tg.geglu_forward(x, wg, wu, bg, bu, approximate, config=cfg, out=poisoned_like(res))
        assert_close(out, act * u, dtype, f"geglu {cfg}")
        dpre, db = tg.linear_gelu_backward(dy, x, wg, bg, approximate, True, config=cfg, out=poisoned_like(res))
        assert_close(dpre, dy.double() * dact, dtype, f"gelu grad {cfg}")
        assert_close(db, (dy.double() * dact).sum(0), dtype, f"gelu bias grad {cfg}")
        dgu, h, db = tg.geglu_backward(
            dy, x, wg, wu, bg, None, approximate, True, True, config=cfg,
            out=torch.full((m, 2 * n), float("nan"), dtype=dtype, device=DEV), h=poisoned_like(res),
        )  # fmt: skip
        u_nb = F.linear(x64, wu64)  # b_up=None in this call
        ref_dgu = torch.cat([dy.double() * u_nb * dact, dy.double() * act], 1)
        assert_close(dgu, ref_dgu, dtype, f"geglu grad {cfg}")
        assert_close(h, act * u_nb, dtype, f"geglu h {cfg}")
        assert_close(db, ref_dgu.sum(0), dtype, f"geglu bias grad {cfg}")
        # geglu_mlp's backward GEMM: grad_h = dy2 @ w_down with the GeGLU backward on
        # the saved [gate | up] in the epilogue (w_down reaches the kernel transposed).
        wd = weight(k, n, dtype, 8)  # [out=K, hidden=N]
        dy2 = rand((m, k), dtype, seed=9)
        pre_buf = torch.full((m, 2 * n), float("nan"), dtype=dtype, device=DEV)
        tg.geglu_forward(x, wg, wu, bg, bu, approximate, config=cfg, out=poisoned_like(res), pre=pre_buf)
        assert_close(pre_buf, torch.cat([g, u], 1), dtype, f"geglu pre-activations {cfg}")
        dgu, h, db = tg.geglu_saved_backward(
            dy2, pre_buf, wd, approximate, True, True, config=cfg,
            out=torch.full((m, 2 * n), float("nan"), dtype=dtype, device=DEV), h=poisoned_like(res),
        )  # fmt: skip
        g_s, u_s = pre_buf[:, :n].double(), pre_buf[:, n:].double()
        gs = ref64(g_s)
        (dact_s,) = torch.autograd.grad(F.gelu(gs, approximate=approximate), gs, torch.ones_like(g_s))
        dh = dy2.double() @ wd.double()
        ref_dgu = torch.cat([dh * u_s * dact_s, dh * F.gelu(g_s, approximate=approximate)], 1)
        assert_close(dgu, ref_dgu, dtype, f"saved geglu grad {cfg}")
        assert_close(h, F.gelu(g_s, approximate=approximate) * u_s, dtype, f"saved geglu h {cfg}")
        assert_close(db, ref_dgu.sum(0), dtype, f"saved geglu bias grad {cfg}")


def test_kernels_strided_and_merged_operands(tg):
    """The tile kernel reads any strides (x with column stride 2, a weight given as a
    transposed view); the merged-weight halves are views at a row offset."""
    dtype = torch.float32
    x_wide = rand((13, 80), dtype, seed=1)
    x = x_wide[:, ::2]  # stride (80, 2)
    w_t = weight(40, 24, dtype, 2)  # [K, N] buffer; its .t() is an [N, K] view with stride (1, 24)
    w_merged = weight(48, 40, dtype, 3)
    cfg = _cfg(tg, "tile", 16, 16, 16)
    out = tg.linear_forward(x, w_t.t(), None, None, "none", config=cfg)
    assert_close(out, x.double() @ w_t.double(), dtype, "strided x, transposed weight")
    out = tg.geglu_forward(x, w_merged[:24], w_merged[24:], None, None, "tanh")
    ref = ref_geglu(x.double(), w_merged[:24].double(), w_merged[24:].double(), None, None, "tanh")
    assert_close(out, ref, dtype, "merged halves")


def test_launch_table_is_complete(tg):
    gc = tg.gemm_configs
    rows = [name for _, name in gc.M_BUCKETS] + ["large"]
    for arch, table in gc.TABLE.items():
        assert set(table) == {(kind, r) for kind in gc.KINDS for r in rows}, arch
        for key, cfg in table.items():
            assert cfg.kernel in ("tile", "tma"), (arch, key)
            for v in (cfg.block_m, cfg.block_n, cfg.block_k, cfg.num_warps):
                assert v >= 1 and v & (v - 1) == 0, (arch, key, cfg)
            assert cfg.block_m >= 16 and cfg.block_n >= 16 and cfg.block_k >= 16, (arch, key, cfg)
            assert cfg.kernel == "tile" or cfg.split_k == 1, (arch, key, cfg)
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

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
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
    table["9.0"][("two", "large")] = tuned_cfg
    tune_gemm.rewrite_table(gc, table, {"9.0": "test GPU"})
    new = tune_gemm.load_source_configs()
    assert new.TABLE["9.0"][("two", "large")] == tuned_cfg and new.TUNED == {"9.0": "test GPU"}
    assert {a: r for a, r in new.TABLE.items() if a != "9.0"} == {a: r for a, r in gc.TABLE.items() if a != "9.0"}
    assert copy.read_text().split("# BEGIN TABLE")[0] == src.split("# BEGIN TABLE")[0]


def test_auto_split_k(tg):
    """Decode shapes get enough K slices to fill the SMs; big grids and short K get none."""
    cfg = tg.GemmConfig("tile", 16, 64, 128, 1, 4, 4, 0)
    assert tg.auto_split_k(16, 3072, 24576, cfg, 132) == 5  # 48 tiles -> 240 programs, 91% of 2 waves
    assert tg.auto_split_k(16, 24576, 3072, cfg, 132) == 1  # 384 tiles
    assert tg.auto_split_k(1, 64, 256, cfg, 132) == 1  # only 2 K tiles: not worth it
    assert tg.auto_split_k(1, 64, 16384, cfg, 132) == 16


# --------------------------------------------------------------------------- errors


def test_bad_inputs_raise_clear_errors(kernel):
    x = torch.randn(4, 40)
    w = torch.randn(24, 40)
    wd = torch.randn(40, 24)
    cases = [
        (lambda: kernel.linear_bias_gelu(x.long(), w), ValueError, "x must have dtype"),
        (lambda: kernel.linear_bias_gelu([1.0], w), TypeError, "x must be a torch.Tensor"),
        (lambda: kernel.linear_bias_gelu(x, w.half()), ValueError, "weight must have the dtype of x"),
        (lambda: kernel.linear_bias_gelu(x, torch.randn(24, 41)), ValueError, "weight must be a 2-d [out_features, 40]"),
        (lambda: kernel.linear_bias_gelu(x, w[None]), ValueError, "weight must be a 2-d"),
        (lambda: kernel.linear_bias_gelu(x, w, torch.randn(25)), ValueError, "bias must have shape (24,)"),
        (lambda: kernel.linear_bias_gelu(x, w, approximate="fast"), ValueError, "approximate must be one of"),
        (lambda: kernel.linear_bias(x, w.to("meta"), None), ValueError, "weight must be on the device of x"),
        (lambda: kernel.geglu_linear(x, w, torch.randn(25, 40)), ValueError, "w_up must have shape (24, 40)"),
        (lambda: kernel.geglu_linear(x, torch.randn(25, 40)), ValueError, "w_gate must have an even number of rows"),
        (lambda: kernel.geglu_linear(x, w, None, torch.randn(24), torch.randn(24)), ValueError, None),
        (lambda: kernel.geglu_linear(x, w, w, b_up=torch.randn(12)), ValueError, "b_up must have shape (24,)"),
        (lambda: kernel.geglu_mlp(x, w, w, torch.randn(40, 25)), ValueError, "w_down must be a 2-d [out_features, 24]"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, biases=(None, None)), TypeError, "biases must be None or a tuple"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, biases=(None, None, torch.randn(24))), ValueError, "b_down must have shape (40,)"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, residual=torch.randn(4, 24)), ValueError, "residual must have shape (4, 40)"),
        (lambda: kernel.geglu_mlp(x, w, w, wd, residual=torch.randn(4, 40).half()), ValueError, "residual must have the dtype of x"),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc) as info:
            fn()
        if msg is not None:
            assert msg in str(info.value), (msg, str(info.value))


# --------------------------------------------------------------------------- op registration


def test_opcheck_ops(kernel, tg, monkeypatch):
    """Schema, fake tensors, autograd registration and AOT dispatch of every op. On
    CPU the ops run their eager composite here (registration does not depend on the
    backend, and opcheck runs each op many times: slow in the interpreter), except
    one case that goes through the interpreted kernels; on a GPU, Triton throughout."""
    from torch.library import opcheck

    ops = kernel.linear
    dtype = torch.float32
    x = rand((5, 40), dtype, seed=1)
    wg, wu, wd = weight(24, 40, dtype, 2), weight(24, 40, dtype, 3), weight(40, 24, dtype, 4)
    b24, b40, b48 = rand((24,), dtype, seed=5), rand((40,), dtype, seed=6), rand((48,), dtype, seed=7)
    wm = torch.cat([wg, wu])
    dy24, res = rand((5, 24), dtype, seed=8), rand((5, 40), dtype, seed=9)
    pre = rand((5, 48), dtype, seed=10)
    L = leaf
    cases = [
        (ops._linear_epilogue.op, (L(x), L(wg), L(b24), L(dy24), "gelu_tanh")),
        (ops._linear_gelu_grad.op, (dy24, x, wg, b24, "none", True)),
        (ops._geglu_linear.op, (L(x), L(wm), None, L(b48), None, "none")),
        (ops._geglu_linear_train.op, (L(x), L(wg), L(wu), L(b24), None, "tanh")),
        (ops._geglu_linear_grad.op, (dy24, x, wg, wu, b24, b24, "tanh", True, True)),
        (ops._geglu_mlp.op, (L(x), L(wg), L(wu), L(wd), L(b24), None, L(b40), L(res), "tanh")),
        (ops._geglu_mlp_train.op, (L(x), L(wm), None, L(wd), None, None, L(b40), L(res), "none")),
        (ops._geglu_mlp_grad.op, (res, pre, wd, "tanh", True, True)),
    ]
    opcheck(*cases[-1])  # the Triton kernels (interpreted on CPU)
    monkeypatch.setattr(tg, "INTERPRET", False)
    for op, args in cases:
        opcheck(op, args)


def test_torch_compile_fullgraph(kernel, tg):
    """geglu_mlp and linear_bias_gelu compile with no graph break (fullgraph=True
    raises on one), forward and backward. CPU: aot_eager (traces the same graph
    without needing inductor's C++ toolchain); GPU: inductor."""
    torch._dynamo.reset()
    dtype = torch.float32 if not HAS_CUDA else torch.bfloat16
    x = leaf(rand((2, 5, 40), dtype, seed=1))
    wg, wu, wd = leaf(weight(24, 40, dtype, 2)), leaf(weight(24, 40, dtype, 3)), leaf(weight(40, 24, dtype, 4))
    bd = leaf(rand((40,), dtype, seed=5))

    def block(x, wg, wu, wd, bd):
        h = kernel.geglu_mlp(x, wg, wu, wd, biases=(None, None, bd), residual=x)
        return kernel.linear_bias_gelu(h, wd.t(), None, approximate="none")

    compiled = torch.compile(block, fullgraph=True, backend="inductor" if HAS_CUDA else "aot_eager")
    y = compiled(x, wg, wu, wd, bd)
    y_eager = block(x, wg, wu, wd, bd)
    assert_close(y, y_eager.detach(), dtype, "compiled forward")
    dy = rand(y.shape, dtype, seed=6)
    inputs = [x, wg, wu, wd, bd]
    check_grads(grads_of(y, dy, inputs), grads_of(y_eager, dy, inputs), dtype, ["x", "wg", "wu", "wd", "bd"])


# --------------------------------------------------------------------------- GPU only

GRID_M = [1, 7, 16, 64, 1000, 8192]
GRID_KN = [(64, 64), (64, 16384), (16384, 64), (768, 3072), (3000, 1000)]


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kn", GRID_KN, ids=lambda kn: f"K{kn[0]}-N{kn[1]}")
@pytest.mark.parametrize("m", GRID_M)
def test_cuda_grid_geglu_linear(kernel, tg, m, kn, dtype):
    k, n = kn
    x = leaf(rand((m, k), dtype, seed=1))
    wg, wu = leaf(weight(n, k, dtype, 2)), leaf(weight(n, k, dtype, 3))
    bg, bu = leaf(rand((n,), dtype, seed=4)), leaf(rand((n,), dtype, seed=5))
    dy = rand((m, n), dtype, seed=6)
    y = kernel.geglu_linear(x, wg, wu, bg, bu, approximate="tanh")
    inputs = [x, wg, wu, bg, bu]
    got = grads_of(y, dy, inputs)
    r = [ref64(t) for t in inputs]
    ref = ref_geglu(*r, "tanh")
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "b_gate", "b_up"])


@pytest.mark.cuda
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kn", GRID_KN, ids=lambda kn: f"K{kn[0]}-N{kn[1]}")
@pytest.mark.parametrize("m", GRID_M)
def test_cuda_grid_linear_bias_gelu(kernel, tg, m, kn, dtype, approximate):
    """Exact GELU: cuBLAS + elementwise up to 256 tokens, Triton above; tanh with a
    bias: cuBLASLt's GELU epilogue at every size."""
    k, n = kn
    x = leaf(rand((m, k), dtype, seed=1))
    w, b = leaf(weight(n, k, dtype, 2)), leaf(rand((n,), dtype, seed=3))
    dy = rand((m, n), dtype, seed=4)
    check_linear_bias_gelu(kernel, x, w, b, dy, approximate, dtype)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["save_pre", "fused_bwd", "recompute"])
@pytest.mark.parametrize("m", [16, 4096])
def test_cuda_mlp_gemma_shape(kernel, tg, monkeypatch, m, mode):
    """Gemma-7B-like MLP (3072 -> 24576 -> 3072), merged weight, residual, bf16, in
    every backward mode (cuBLAS + elementwise, fused kernel, recompute)."""
    monkeypatch.setattr(kernel.linear, "RECOMPUTE_IN_BACKWARD", mode == "recompute")
    monkeypatch.setattr(kernel.linear, "FUSED_SAVED_BACKWARD", mode == "fused_bwd")
    dtype = torch.bfloat16
    x = leaf(rand((m, 3072), dtype, seed=1))
    w = leaf(weight(2 * 24576, 3072, dtype, 2))
    wd = leaf(weight(3072, 24576, dtype, 3))
    res = rand((m, 3072), dtype, seed=4)
    y = kernel.geglu_mlp(x, w, None, wd, residual=res)
    dy = rand((m, 3072), dtype, seed=5)
    got = grads_of(y, dy, [x, w, wd])
    r = [ref64(t) for t in (x, w, wd)]
    ref = F.linear(ref_geglu(r[0], r[1][:24576], r[1][24576:], None, None, "tanh"), r[2]) + res.double()
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w", "w_down"])


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", [1, 64])  # M == 1: PyTorch's non-Lt fallback; M > 1: the cuBLASLt epilogue
def test_cuda_addmm_activation_is_tanh(m, dtype, monkeypatch):
    """The claim the router rests on: on CUDA torch._addmm_activation(use_gelu=True) is
    the tanh GELU. float32 without TF32 separates tanh from erf (up to ~5e-4 apart);
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
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m", [1, 16, 4096])
def test_cuda_mlp_down_bias_and_residual(kernel, tg, m, dtype):
    """geglu_mlp's down projection on cuBLAS with bias and residual (addmm(bias) + an
    in-place residual add), output dtype = input dtype, all grads."""
    x = leaf(rand((m, 768), dtype, seed=1))
    wg, wu, wd = leaf(weight(3072, 768, dtype, 2)), leaf(weight(3072, 768, dtype, 3)), leaf(weight(768, 3072, dtype, 4))
    bg, bd = leaf(rand((3072,), dtype, seed=5)), leaf(rand((768,), dtype, seed=6))
    res = leaf(rand((m, 768), dtype, seed=7))
    y = kernel.geglu_mlp(x, wg, wu, wd, biases=(bg, None, bd), residual=res)
    assert y.dtype == dtype
    dy = rand((m, 768), dtype, seed=8)
    inputs = [x, wg, wu, wd, bg, bd, res]
    got = grads_of(y, dy, inputs)
    r = [ref64(t) for t in inputs]
    ref = F.linear(ref_geglu(r[0], r[1], r[2], r[4], None, "tanh"), r[3], r[5]) + r[6]
    assert_close(y, ref, dtype, "forward")
    check_grads(got, grads_of(ref, dy.double(), r), dtype, ["x", "w_gate", "w_up", "w_down", "b_gate", "b_down", "residual"])


@pytest.mark.cuda
@pytest.mark.parametrize("kernel_kind", ["table", "tile"])
def test_cuda_more_than_2_31_elements(tg, kernel_kind):
    """x with > 2**31 elements (x offsets need int64), and an output with > 2**31
    elements; checked on the last rows, where 32-bit offsets would wrap."""
    dtype = torch.bfloat16
    cfg = None if kernel_kind == "table" else tg.GemmConfig("tile", 128, 64, 64, 8, 4, 3)
    m, k, n = (1 << 31) // 4096 + 300, 4096, 64
    x = torch.randn((m, k), device="cuda", dtype=dtype)
    w, b = weight(n, k, dtype, 2), rand((n,), dtype, seed=3)
    y = tg.linear_forward(x, w, b, None, "gelu_tanh", config=cfg)
    tail = slice(m - 300, m)
    ref = F.gelu(F.linear(x[tail].double(), w.double(), b.double()), approximate="tanh")
    assert_close(y[tail], ref, dtype, "big x")
    del x, y

    m, k, n = (1 << 31) // 32768 + 64, 64, 32768
    x = rand((m, k), dtype, seed=4)
    w = weight(n, k, dtype, 5)
    y = tg.linear_forward(x, w, None, None, "none", config=cfg)
    tail = slice(m - 64, m)
    assert_close(y[tail], F.linear(x[tail].double(), w.double()), dtype, "big out")


def _compiled_count(jit_fn) -> int:
    caches = getattr(jit_fn, "device_caches", None)
    if caches is None:
        pytest.skip("this triton's JITFunction has no device_caches")
    return sum(len(entry[0]) for entry in caches.values())


@pytest.mark.cuda
def test_cuda_new_token_counts_do_not_recompile(kernel, tg):
    """Within an M bucket a new token count reuses the compiled kernels (M is not
    specialized on; K and N stay fixed as for one layer)."""
    dtype = torch.bfloat16
    wg, wu, wd = weight(3072, 768, dtype, 1), weight(3072, 768, dtype, 2), weight(768, 3072, dtype, 3)

    def run(m):
        kernel.geglu_mlp(rand((m, 768), dtype, seed=m), wg, wu, wd)

    kernels = (tg._gemm_tile_kernel, tg._gemm_tma_kernel, tg._splitk_reduce_kernel)
    for m in (1, 16, 17, 64, 65, 256, 300, 8192):  # one (or two) per bucket and 16-alignment class
        run(m)
    warm = [_compiled_count(k) for k in kernels]
    for m in (3, 9, 33, 50, 100, 200, 1000, 4096, 5000):
        run(m)
    assert [_compiled_count(k) for k in kernels] == warm
