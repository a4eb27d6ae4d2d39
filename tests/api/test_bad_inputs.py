"""Every call is right or raises a clear error: bad and edge inputs as a user tries them.

Each case asserts the exact outcome: a value checked against float64 (or an exact
value where float32 has one), or an error type with a message that names the argument.
Classes: out= writes under autograd (version counters, tensors that require grad), the
GELU slope at extreme inputs (every backend: native CPU / CUDA, Triton, the torch-op
composite), double backward, the layers under autograd, and arguments that torch's
internals would otherwise reject with their own messages (None weights, sparse and
nested tensors, bytes, swapped arguments, tracing). CPU and CUDA; the CUDA cases are
marked and reported as skipped without a GPU.
"""

import copy
import importlib.util
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import HAS_CUDA, REPO

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
APPROX = ["tanh", "none"]
# (function, merged input, approximate)
OUT_FUNCTIONS = [
    ("gelu_and_mul", True, "none"),
    ("gelu_tanh_and_mul", True, "tanh"),
    ("gelu", False, "none"),
    ("gelu_tanh", False, "tanh"),
]
OUT_IDS = [f[0] for f in OUT_FUNCTIONS]


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(params=["compiled", "noarch"])
def lib(device, request):
    """The compiled variant that serves `device`'s tensors, or the noarch `torch-cuda`
    variant (Triton on CUDA, the torch-op composite on CPU), imported from build/."""
    if request.param == "compiled":
        return request.getfixturevalue("kernel" if device == "cuda" else "cpu_kernel")
    return _noarch()


def _noarch():
    name = "_geglu_noarch_bad_inputs"
    if name in sys.modules:
        return sys.modules[name]
    path = REPO / "build" / "torch-cuda"
    if not (path / "__init__.py").is_file():
        pytest.fail("build/torch-cuda is missing: run `python -m tools.build`")
    spec = importlib.util.spec_from_file_location(name, path / "__init__.py", submodule_search_locations=[str(path)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def randn(*shape, device="cpu", dtype=torch.float32, seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=g).to(device=device, dtype=dtype)
    return t.requires_grad_(requires_grad)


def rel_err(out, ref) -> float:
    out, ref = out.double(), ref.double()
    return ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def gelu_ref(x, merged, approximate):
    """float64 reference of the out= functions."""
    x = x.double()
    if merged:
        d = x.shape[-1] // 2
        return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]
    return F.gelu(x, approximate=approximate)


def out_call_args(device, merged, rows=5, d=8, seed=0):
    x = randn(rows, 2 * d if merged else d, device=device, seed=seed)
    return x, torch.full((rows, d), float("nan"), device=device)


# --------------------------------------------------------------------------- out= writes


@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_out_write_invalidates_a_saved_tensor(lib, device, name, merged, approximate):
    """`out` saved for a backward, then overwritten: backward raises, as after any
    in-place torch op, instead of computing a gradient from the new values."""
    x, out = out_call_args(device, merged)
    out.normal_()
    a = randn(*out.shape, device=device, seed=1, requires_grad=True)
    y = a * out  # saves out for a's gradient
    version = out._version
    assert getattr(lib, name)(out, x) is out
    assert out._version > version
    torch.testing.assert_close(out.double(), gelu_ref(x, merged, approximate), rtol=2e-5, atol=2e-5)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_out_write_into_a_view_invalidates_its_base(lib, device, name, merged, approximate):
    x, _ = out_call_args(device, merged)
    base = randn(x.shape[0], 16, device=device, seed=2)
    a = randn(*base.shape, device=device, seed=3, requires_grad=True)
    y = a * base
    getattr(lib, name)(base[:, :8], x)  # a row-strided view of base
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("leaf", [True, False], ids=["leaf", "non-leaf"])
@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_out_that_requires_grad_is_refused(lib, device, name, merged, approximate, leaf):
    x, _ = out_call_args(device, merged)
    w = randn(x.shape[0], 8, device=device, seed=4, requires_grad=True)
    out = w if leaf else w * 1
    before = out.detach().clone()
    with pytest.raises(ValueError, match=f"{name}: out requires grad"):
        getattr(lib, name)(out, x)
    assert torch.equal(out.detach(), before)


@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_out_that_requires_grad_is_written_under_no_grad(lib, device, name, merged, approximate):
    """As in eager torch: outside grad mode a leaf may be written (initialization)."""
    x, _ = out_call_args(device, merged)
    w = randn(x.shape[0], 8, device=device, seed=5, requires_grad=True)
    with torch.no_grad():
        getattr(lib, name)(w, x)
    torch.testing.assert_close(w.detach().double(), gelu_ref(x, merged, approximate), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_input_that_requires_grad_is_refused(lib, device, name, merged, approximate):
    """The out= functions are not differentiable: an input that needs a gradient would
    silently get none, so grad mode refuses it and names the differentiable route."""
    x, out = out_call_args(device, merged)
    x.requires_grad_()
    instead = "geglu_merged" if merged else "torch.nn.functional.gelu"
    with pytest.raises(ValueError, match=rf"{name}: x requires grad.*{instead}"):
        getattr(lib, name)(out, x)
    with torch.no_grad():
        getattr(lib, name)(out, x)
    torch.testing.assert_close(out.double(), gelu_ref(x.detach(), merged, approximate), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_out_write_in_inference_mode(lib, device, name, merged, approximate):
    with torch.inference_mode():
        x, out = out_call_args(device, merged)
        getattr(lib, name)(out, x)
    torch.testing.assert_close(out.double(), gelu_ref(x, merged, approximate), rtol=2e-5, atol=2e-5)


def test_swapped_out_and_input_are_named(lib, device):
    x, out = out_call_args(device, merged=True)
    with pytest.raises(ValueError, match="look swapped"):
        lib.gelu_and_mul(x, out)
    with pytest.raises(ValueError, match="look swapped"):
        lib.gelu_tanh_and_mul(x, out)


def test_out_partially_overlapping_input_is_refused(lib, device):
    x = randn(4, 16, device=device)
    with pytest.raises(ValueError, match="overlaps"):
        lib.gelu_and_mul(x[:, 4:12], x)


@pytest.mark.parametrize("half", ["gate", "up"])
def test_out_may_be_a_half_of_the_input(lib, device, half):
    """In place: out is exactly the gate or the up half of x (the CUDA and Triton kernels
    read each element before writing it); the compiled CPU kernel refuses it by name."""
    x = randn(4, 16, device=device, seed=3)
    ref = gelu_ref(x, True, "tanh")
    out = x[:, :8] if half == "gate" else x[:, 8:]
    if device == "cpu" and "cpu" in lib.activation.NATIVE_DEVICE_TYPES:
        with pytest.raises(ValueError, match="`out` partially overlaps `input`"):
            lib.gelu_tanh_and_mul(out, x)
        return
    lib.gelu_tanh_and_mul(out, x)
    torch.testing.assert_close(out.double(), ref, rtol=2e-5, atol=2e-5)


def test_out_of_another_device_or_dtype_is_refused(lib, device):
    x, out = out_call_args(device, merged=True)
    with pytest.raises(ValueError, match="out must have the dtype of"):
        lib.gelu_and_mul(out.half(), x)
    if device == "cuda":
        with pytest.raises(ValueError, match="out must be"):
            lib.gelu_and_mul(out.cpu(), x)


# --------------------------------------------------------------------------- extreme inputs

# Past |g| = 1.8e19, g * g overflows. The largest positive gate is 1.5e38: eager's exact
# GELU (the composite's forward) forms 2g on the way, which overflows from 1.7e38.
EXTREMES = {
    torch.float32: [-3e38, -1e30, -1e12, -1e3, -20.0, 20.0, 1e3, 1e12, 1e30, 1.5e38],
    torch.bfloat16: [-3e38, -1e30, -1e12, -1e3, -20.0, 20.0, 1e3, 1e12, 1e30, 1.5e38],
    torch.float16: [-6e4, -1e3, -20.0, 20.0, 1e3, 6e4],
}


def saturated(gate):
    """gelu(g) and its slope where they are exactly 0 and 0 (g < 0) or g and 1 (g > 0)."""
    g = gate.double()
    positive = g > 0
    return torch.where(positive, g, 0.0), positive.double()


def backends(lib, device):
    """The backward computations that can serve `device`'s tensors, as
    (name, fn(grad_out, gate, up, approximate) -> (grad_gate, grad_up), fn forward)."""
    act = lib.activation
    found = [
        ("kernel", lib.geglu_backward, lib.geglu),
        ("composite", act._eager_geglu_backward, act._eager_geglu),
    ]
    ta = lib.triton_kernels.activation
    # Triton runs CUDA tensors, and CPU tensors in its interpreter (set by conftest without a GPU).
    if ta.HAS_TRITON and (device == "cuda" or type(ta._forward_kernel).__name__ == "InterpretedFunction"):

        def triton_backward(grad_out, gate, up, approximate):
            grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(up)
            ta.geglu_backward(grad_gate, grad_up, grad_out, gate, up, approximate)
            return grad_gate, grad_up

        def triton_forward(gate, up, approximate):
            out = torch.empty_like(gate)
            ta.geglu_forward(out, gate, up, approximate)
            return out

        found.append(("triton", triton_backward, triton_forward))
    return found


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", list(EXTREMES), ids=str)
def test_gelu_and_slope_saturate_at_extreme_inputs(lib, device, dtype, approximate):
    """Far from 0, gelu is 0 or g and its slope 0 or 1 exactly: no NaN (0 * inf), no
    exploding or wrong-signed slope, on every backend."""
    gate = torch.tensor(EXTREMES[dtype], device=device, dtype=dtype).reshape(2, -1)
    up = torch.full_like(gate, 0.5)
    dy = torch.full_like(gate, 0.5)
    value, slope = saturated(gate)
    for name, backward, forward in backends(lib, device):
        grad_gate, grad_up = backward(dy, gate, up, approximate)
        assert torch.equal(grad_gate.double(), 0.25 * slope), f"{name}: grad_gate {grad_gate.tolist()}"
        assert torch.equal(grad_up.double(), 0.5 * value), f"{name}: grad_up {grad_up.tolist()}"
        y = forward(gate, up, approximate)
        assert torch.equal(y.double(), 0.5 * value), f"{name}: forward {y.tolist()}"


@pytest.mark.parametrize("approximate", APPROX)
def test_slope_is_continuous_through_the_saturation(lib, device, approximate):
    """Dense gates across [-14, 14] (the saturation switches at |g| = 10) against float64."""
    gate = torch.linspace(-14, 14, 4001, device=device).reshape(1, -1)
    up, dy = torch.ones_like(gate), torch.ones_like(gate)
    g64 = gate.double().requires_grad_()
    F.gelu(g64, approximate=approximate).sum().backward()
    for name, backward, _ in backends(lib, device):
        grad_gate, _ = backward(dy, gate, up, approximate)
        err = (grad_gate.double() - g64.grad).abs().max().item()
        assert err < 2e-6, f"{name}: max error {err}"


@pytest.mark.parametrize("approximate", APPROX)
def test_nan_gate_gives_nan(lib, device, approximate):
    gate = torch.tensor([[float("nan"), 1.0, -1.0]], device=device)
    up, dy = torch.ones_like(gate), torch.ones_like(gate)
    for name, backward, forward in backends(lib, device):
        grad_gate, grad_up = backward(dy, gate, up, approximate)
        assert grad_gate[0, 0].isnan() and grad_up[0, 0].isnan(), name
        assert forward(gate, up, approximate)[0, 0].isnan(), name
        assert not grad_gate[0, 1:].isnan().any(), name


# --------------------------------------------------------------------------- double backward


def second_order(fn, inputs):
    """d/d inputs of sum_i <grad_i, v_i>, the first gradients taken with create_graph."""
    y = fn(*inputs)
    v = randn(*y.shape, device=y.device, seed=11).to(y.dtype)
    first = torch.autograd.grad(y, inputs, v, create_graph=True)
    weights = [randn(*g.shape, device=g.device, seed=12 + i).to(g.dtype) for i, g in enumerate(first)]
    total = sum((g * w).sum() for g, w in zip(first, weights))
    # allow_unused: a bias or residual that adds to the output has a constant first
    # gradient, so no second-order one (None in the reference too).
    return first, torch.autograd.grad(total, inputs, allow_unused=True)


def check_second_order(ours_fn, ref_fn, tensors, tol):
    ours = [t.detach().clone().requires_grad_() for t in tensors]
    ref = [t.detach().double().requires_grad_() for t in tensors]
    first, second = second_order(ours_fn, ours)
    first_ref, second_ref = second_order(ref_fn, ref)
    for i, (a, b) in enumerate(zip(first, first_ref)):
        assert rel_err(a, b) < tol, f"first-order gradient {i}: {rel_err(a, b)}"
    for i, (a, b) in enumerate(zip(second, second_ref)):
        if b is None:
            assert a is None or not a.any(), f"second-order gradient {i} should be 0"
            continue
        assert a is not None, f"second-order gradient {i} is missing"
        assert rel_err(a, b) < tol, f"second-order gradient {i}: {rel_err(a, b)}"


def geglu_ref(gate, up, approximate):
    return F.gelu(gate, approximate=approximate) * up


@pytest.mark.parametrize("approximate", APPROX)
def test_double_backward_geglu(lib, device, approximate):
    gate, up = randn(6, 24, device=device, seed=1), randn(6, 24, device=device, seed=2)
    check_second_order(
        lambda g, u: lib.geglu(g, u, approximate), lambda g, u: geglu_ref(g, u, approximate), [gate, up], 1e-4
    )


@pytest.mark.parametrize("approximate", APPROX)
def test_double_backward_geglu_merged(lib, device, approximate):
    x = randn(6, 48, device=device, seed=3)
    check_second_order(
        lambda x: lib.geglu_merged(x, approximate),
        lambda x: geglu_ref(x[..., :24], x[..., 24:], approximate),
        [x],
        1e-4,
    )


@pytest.mark.parametrize("approximate", APPROX)
def test_geglu_backward_is_differentiable(lib, device, approximate):
    """geglu_backward itself under autograd (a gradient penalty): its gradients are the
    second derivatives of geglu."""
    dy, gate, up = (randn(6, 24, device=device, seed=s) for s in (4, 5, 6))

    def ref(dy, gate, up):
        return torch.autograd.grad(geglu_ref(gate, up, approximate), (gate, up), dy, create_graph=True)

    ours = [t.clone().requires_grad_() for t in (dy, gate, up)]
    refs = [t.double().requires_grad_() for t in (dy, gate, up)]
    got = lib.geglu_backward(*ours, approximate)
    want = ref(*refs)
    w = [randn(6, 24, device=device, seed=7), randn(6, 24, device=device, seed=8)]
    g_ours = torch.autograd.grad(sum((a * b).sum() for a, b in zip(got, w)), ours)
    g_ref = torch.autograd.grad(sum((a * b.double()).sum() for a, b in zip(want, w)), refs)
    for i, (a, b) in enumerate(zip(got + g_ours, want + g_ref)):
        assert rel_err(a, b) < 1e-4, f"output {i}: {rel_err(a, b)}"


@pytest.mark.parametrize("merged", [False, True], ids=["split", "merged-weight"])
def test_double_backward_geglu_linear(lib, device, merged):
    x = randn(5, 32, device=device, seed=1)
    wg, wu = randn(40, 32, device=device, seed=2) / 6, randn(40, 32, device=device, seed=3) / 6
    bg, bu = randn(40, device=device, seed=4), randn(40, device=device, seed=5)

    def ref(x, wg, wu, bg, bu):
        return geglu_ref(F.linear(x, wg, bg), F.linear(x, wu, bu), "tanh")

    if merged:
        check_second_order(
            lambda x, w, b: lib.geglu_linear(x, w, None, b),
            lambda x, w, b: ref(x, w[:40], w[40:], b[:40], b[40:]),
            [x, torch.cat([wg, wu]), torch.cat([bg, bu])],
            1e-4,
        )
    else:
        check_second_order(
            lambda *a: lib.geglu_linear(*a), ref, [x, wg, wu, bg, bu], 1e-4
        )


@pytest.mark.parametrize("biases", [False, True], ids=["no-bias", "bias+residual"])
def test_double_backward_geglu_mlp(lib, device, biases):
    x = randn(2, 3, 32, device=device, seed=1)
    wg, wu = randn(48, 32, device=device, seed=2) / 6, randn(48, 32, device=device, seed=3) / 6
    wd = randn(32, 48, device=device, seed=4) / 7
    tensors = [x, wg, wu, wd]
    if biases:
        tensors += [randn(48, device=device, seed=5), randn(48, device=device, seed=6), randn(32, device=device, seed=7)]
        tensors += [randn(2, 3, 32, device=device, seed=8)]

    def ours(x, wg, wu, wd, *rest):
        if not rest:
            return lib.geglu_mlp(x, wg, wu, wd)
        bg, bu, bd, res = rest
        return lib.geglu_mlp(x, wg, wu, wd, biases=(bg, bu, bd), residual=res)

    def ref(x, wg, wu, wd, *rest):
        bg, bu, bd, res = rest if rest else (None, None, None, None)
        y = F.linear(geglu_ref(F.linear(x, wg, bg), F.linear(x, wu, bu), "tanh"), wd, bd)
        return y if res is None else y + res

    check_second_order(ours, ref, tensors, 1e-4)


def test_first_order_mlp_backward_still_runs_the_kernels(lib, device, monkeypatch):
    """Without create_graph the native training node's backward runs, not the
    recomputation that double backward takes."""
    lin = lib.linear
    if device not in lin._NATIVE_MLP_DEVICE_TYPES:
        pytest.skip(f"this variant has no native training MLP for {device}")
    calls = []
    monkeypatch.setattr(lin, "_differentiable_mlp_backward", lambda *a: calls.append(a))
    x = randn(4, 32, device=device, requires_grad=True)
    w = [randn(48, 32, device=device, seed=2) / 6, randn(48, 32, device=device, seed=3) / 6]
    lib.geglu_mlp(x, *w, randn(32, 48, device=device, seed=4) / 7).sum().backward()
    assert x.grad is not None and not calls


# --------------------------------------------------------------------------- layers


@pytest.mark.parametrize("layer,approximate", [("GeluTanh", "tanh"), ("Gelu", "none")])
def test_activation_layer_keeps_the_gradient(lib, device, layer, approximate):
    """y = x + act(x): x's gradient includes act's, as with the original module."""
    x = randn(4, 33, device=device, requires_grad=True)
    y = x + getattr(lib.layers, layer)()(x)
    y.backward(torch.ones_like(y))
    x64 = x.detach().double().requires_grad_()
    (x64 + F.gelu(x64, approximate=approximate)).sum().backward()
    assert rel_err(x.grad, x64.grad) < 2e-5
    with torch.no_grad():  # the kernel route
        assert rel_err(getattr(lib.layers, layer)()(x), F.gelu(x64.detach(), approximate=approximate)) < 2e-5


@pytest.mark.parametrize("layer,approximate", [("GeluTanhAndMul", "tanh"), ("GeluAndMul", "none")])
def test_merged_activation_layer_keeps_the_gradient(lib, device, layer, approximate):
    x = randn(4, 32, device=device, requires_grad=True)
    y = getattr(lib.layers, layer)()(x) + x[..., :16]
    y.backward(torch.ones_like(y))
    x64 = x.detach().double().requires_grad_()
    (geglu_ref(x64[..., :16], x64[..., 16:], approximate) + x64[..., :16]).sum().backward()
    assert rel_err(x.grad, x64.grad) < 2e-5


def test_activation_layer_runs_torch_on_sparse_and_nested_inputs(lib, device):
    """What the original module does (torch's GELU), not a kernel error."""
    x = randn(3, 8, device=device)
    nested = torch.nested.nested_tensor([x[:1], x[1:]], layout=torch.jagged)
    got = lib.layers.GeluTanh()(nested)
    for a, b in zip(got.unbind(), F.gelu(nested, approximate="tanh").unbind()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("kind", ["gemma", "t5", "bert"])
def test_inference_kernelized_model_gives_the_input_gradient(lib, device, kind):
    """A model kernelized with Mode.INFERENCE, run in grad mode (a saliency map): the
    input's gradient is the original model's."""
    sys.path.insert(0, str(REPO))
    import example
    from kernels import Mode

    original = example.tiny_model(kind).to(device).eval()
    kernelized = example.kernelize_with_geglu(
        copy.deepcopy(original), mode=Mode.INFERENCE, layer=lambda n: example.local_layer(n, path=Path(REPO))
    )
    ids = torch.randint(0, 100, (2, 7), generator=torch.Generator().manual_seed(0)).to(device)
    grads = []
    for model in (original, kernelized):
        embeds = model.get_input_embeddings()(ids).detach().requires_grad_()
        extra = {"decoder_input_ids": ids} if kind == "t5" else {}
        out = model(inputs_embeds=embeds, **extra).logits
        out.square().sum().backward()
        assert embeds.grad is not None, type(model).__name__
        grads.append(embeds.grad)
    assert rel_err(grads[1], grads[0]) < (1e-4 if device == "cpu" else 2e-3)


# --------------------------------------------------------------------------- clear errors


def test_missing_weights_are_named(lib, device):
    x, w, wd = randn(4, 8, device=device), randn(16, 8, device=device), randn(8, 16, device=device)
    with pytest.raises(TypeError, match="w_down must be a torch.Tensor, got NoneType"):
        lib.geglu_mlp(x, w, w, None)
    with pytest.raises(TypeError, match="w_gate must be a torch.Tensor, got NoneType"):
        lib.geglu_mlp(x, None, w, wd)
    with pytest.raises(TypeError, match="weight must be a torch.Tensor, got NoneType"):
        lib.linear_bias_gelu(x, None, None)
    with pytest.raises(TypeError, match="x must be a torch.Tensor, got NoneType"):
        lib.geglu_mlp(None, w, w, wd)


def layout_cases(device):
    x = randn(4, 8, device=device, seed=1)
    cases = [("sparse_coo", x.to_sparse()), ("jagged nested", torch.nested.nested_tensor([x[:1], x[1:]], layout=torch.jagged))]
    if device == "cpu":  # strided nested tensors and CSR: CPU constructors
        cases.append(("sparse_csr", x.to_sparse_csr()))
        cases.append(("nested", torch.nested.nested_tensor([x[:1], x[1:]])))
    return x, cases


def calls_taking(bad, x, lib):
    """Each public function with `bad` in the place of one dense tensor argument."""
    w, wd, b = torch.ones(16, 8, device=x.device) / 8, torch.ones(8, 16, device=x.device) / 16, torch.ones(16, device=x.device)
    return {
        "geglu gate": lambda: lib.geglu(bad, x),
        "geglu up": lambda: lib.geglu(x, bad),
        "geglu_merged": lambda: lib.geglu_merged(bad),
        "geglu_backward": lambda: lib.geglu_backward(bad, x, x),
        "gelu_and_mul input": lambda: lib.gelu_and_mul(torch.empty(4, 4, device=x.device), bad),
        "gelu out": lambda: lib.gelu(bad, x),
        "gelu_tanh input": lambda: lib.gelu_tanh(torch.empty_like(x), bad),
        "linear_bias": lambda: lib.linear_bias(bad, w, b),
        "linear_bias_gelu": lambda: lib.linear_bias_gelu(bad, w, b),
        "geglu_linear": lambda: lib.geglu_linear(bad, w, w),
        "geglu_mlp x": lambda: lib.geglu_mlp(bad, w, w, wd),
        "geglu_mlp residual": lambda: lib.geglu_mlp(x, w, w, wd, residual=bad),
    }


def test_sparse_and_nested_tensors_are_refused_by_name(lib, device):
    x, cases = layout_cases(device)
    for kind, bad in cases:
        for call, fn in calls_taking(bad, x, lib).items():
            with pytest.raises(ValueError, match=r"must be a dense \(strided\) tensor") as err:
                fn()
            assert "Could not run" not in str(err.value), f"{kind}, {call}"


@pytest.mark.parametrize("approximate", [b"tanh", 1, None])
def test_approximate_must_be_a_str(lib, device, approximate):
    x = randn(4, 8, device=device)
    w, wd = torch.ones(16, 8, device=device) / 8, torch.ones(8, 16, device=device) / 16
    calls = {
        "geglu": lambda: lib.geglu(x, x, approximate=approximate),
        "geglu_merged": lambda: lib.geglu_merged(x, approximate=approximate),
        "geglu_backward": lambda: lib.geglu_backward(x, x, x, approximate=approximate),
        "geglu_linear": lambda: lib.geglu_linear(x, w, w, approximate=approximate),
        "geglu_mlp": lambda: lib.geglu_mlp(x, w, w, wd, approximate=approximate),
        "linear_bias_gelu": lambda: lib.linear_bias_gelu(x, w, None, approximate=approximate),
    }
    for name, fn in calls.items():
        with pytest.raises(TypeError, match="approximate must be a str"):
            fn()


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.complex64, torch.bool], ids=str)
def test_unsupported_dtypes_are_named(lib, device, dtype):
    x = torch.ones(4, 8, device=device, dtype=dtype)
    with pytest.raises(ValueError, match=r"must have dtype"):
        lib.geglu(x, x)
    with pytest.raises(ValueError, match=r"must have dtype"):
        lib.gelu_tanh_and_mul(torch.empty(4, 4, device=device, dtype=dtype), x)
    with pytest.raises(ValueError, match=r"must have dtype"):
        lib.geglu_mlp(x, torch.ones(16, 8, device=device, dtype=dtype), None, torch.ones(8, 8, device=device, dtype=dtype))


def test_zero_dim_and_mismatched_inputs_are_named(lib, device):
    x = randn(4, 8, device=device)
    with pytest.raises(ValueError, match="at least one dimension|at least 1 dimension"):
        lib.geglu(x[0, 0], x[0, 0])
    with pytest.raises(ValueError, match="up must have the shape of gate|up must have shape"):
        lib.geglu(x, x[:, :4])
    with pytest.raises(ValueError, match="up must have the dtype of gate"):
        lib.geglu(x, x.half())


# --------------------------------------------------------------------------- tracing, threads, compile


def write_then_double(fn):
    """A function that writes `fn(out, x)` into a fresh [rows, 8] out and returns 2 * out."""

    def f(x):
        out = torch.empty(x.shape[0], 8, device=x.device)
        fn(out, x)
        return out * 2

    return f


@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_jit_trace_of_out_functions(lib, device, name, merged, approximate):
    x, _ = out_call_args(device, merged)
    traced = torch.jit.trace(write_then_double(getattr(lib, name)), (x,), check_trace=False)
    x2, _ = out_call_args(device, merged, seed=7)
    torch.testing.assert_close(traced(x2).double(), 2 * gelu_ref(x2, merged, approximate), rtol=2e-5, atol=2e-5)


def test_jit_trace_of_an_activation_layer(lib, device):
    layer = lib.layers.GeluTanh()
    x = randn(3, 8, device=device)
    with torch.no_grad():
        traced = torch.jit.trace(layer, (x,), check_trace=False)
        x2 = randn(3, 8, device=device, seed=3)
        torch.testing.assert_close(traced(x2).double(), F.gelu(x2.double(), approximate="tanh"), rtol=2e-5, atol=2e-5)


def test_concurrent_calls_from_threads(lib, device):
    inputs = [(randn(64, 96, device=device, seed=2 * i), randn(64, 96, device=device, seed=2 * i + 1)) for i in range(8)]
    results, errors = [None] * len(inputs), []

    def work(i):
        try:
            for _ in range(10):
                results[i] = lib.geglu(*inputs[i], "tanh")
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for (gate, up), y in zip(inputs, results):
        assert rel_err(y, geglu_ref(gate.double(), up.double(), "tanh")) < 2e-5


@pytest.mark.parametrize("name,merged,approximate", OUT_FUNCTIONS, ids=OUT_IDS)
def test_compiled_out_function(lib, device, name, merged, approximate):
    torch.compiler.reset()  # one code object for every case: no recompile limit across them
    compiled = torch.compile(
        write_then_double(getattr(lib, name)), fullgraph=True, backend="inductor" if device == "cuda" else "aot_eager"
    )
    x, _ = out_call_args(device, merged, seed=9)
    torch.testing.assert_close(compiled(x).double(), 2 * gelu_ref(x, merged, approximate), rtol=2e-5, atol=2e-5)
