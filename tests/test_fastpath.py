"""The public functions skip custom-op dispatch only where nothing needs the op."""

import torch

from conftest import HAS_CUDA


def test_direct_call_only_without_autograd_compile_or_meta(kernel):
    ok = kernel._fastpath.direct_call_ok
    x = torch.randn(3, 4)
    w = torch.randn(4, 4, requires_grad=True)
    assert ok(x, None)
    assert not ok(x, w), "a tensor that requires grad needs the op's autograd"
    with torch.no_grad():
        assert ok(x, w)
    assert not ok(torch.empty(3, 4, device="meta")), "meta tensors need the op's fake"
    seen = []

    def f(t):
        seen.append(ok(t))
        return t * 2

    torch.compile(f, backend="eager", fullgraph=True)(x)
    assert seen == [False], "under torch.compile the op must be traced"


def test_fast_path_matches_the_op(kernel):
    """Same result with and without grad (the direct call and the registered op)."""
    dev = "cuda" if HAS_CUDA else "cpu"
    dtype = torch.float16 if HAS_CUDA else torch.float32
    x = torch.randn(5, 64, device=dev, dtype=dtype)
    wg, wu = (torch.randn(48, 64, device=dev, dtype=dtype) * 0.1 for _ in range(2))
    wd = torch.randn(64, 48, device=dev, dtype=dtype) * 0.1
    with torch.no_grad():
        direct = kernel.geglu_mlp(x, wg, wu, wd)
    via_op = kernel.geglu_mlp(x, wg.requires_grad_(), wu, wd)
    torch.testing.assert_close(direct, via_op.detach(), rtol=2e-3, atol=2e-3)


def test_subclasses_and_meta_take_the_op(kernel):
    ok = kernel._fastpath.eager_call_ok
    x = torch.randn(3, 4)
    assert ok(x, None, torch.nn.Parameter(torch.randn(2)))
    assert not ok(torch.empty(3, device="meta"))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        assert not ok(fake), "fake tensors need the op's fake implementation"


def _backward_names(t, depth=4):
    names, frontier = set(), [t.grad_fn]
    for _ in range(depth):
        nxt = []
        for fn in frontier:
            if fn is not None:
                names.add(type(fn).__name__)
                nxt += [f for f, _ in fn.next_functions]
        frontier = nxt
    return names


def test_eager_autograd_runs_the_ops_backward_without_the_op(kernel, monkeypatch):
    """In eager autograd the fused GEMMs run their op's forward/backward as a plain
    torch.autograd.Function (no dispatcher hop); with that path disabled they go
    through the registered op. Same code either way: same values and grads. (The
    Python route: arch variants' compiled training MLP is tested in test_linear.)"""
    lin = kernel.linear
    monkeypatch.setattr(lin, "_NATIVE_MLP_DEVICE_TYPES", frozenset())
    dev = "cuda" if HAS_CUDA else "cpu"
    dtype = torch.float16 if HAS_CUDA else torch.float32
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(2, 5, 64, device=dev, dtype=dtype, generator=g).requires_grad_()
    wg, wu = ((torch.randn(48, 64, device=dev, dtype=dtype, generator=g) * 0.1).requires_grad_() for _ in range(2))
    wd = (torch.randn(64, 48, device=dev, dtype=dtype, generator=g) * 0.1).requires_grad_()
    dy = torch.randn(2, 5, 64, device=dev, dtype=dtype, generator=g)
    params = (x, wg, wu, wd)

    def run():
        y = kernel.geglu_mlp(x, wg, wu, wd)
        z = kernel.linear_bias_gelu(y, wd.t(), None)
        return y, z, _backward_names(z, depth=8), torch.autograd.grad((y, z), params, (dy, torch.ones_like(z)))

    y, z, names, grads = run()
    assert {"geglu_mlp_trainBackward", "linear_epilogueBackward"} <= names, names
    assert not any(n.startswith("GeneratedBackwardFor") for n in names), names
    monkeypatch.setattr(lin, "eager_call_ok", lambda *tensors: False)
    y_op, z_op, names_op, grads_op = run()
    assert not {"geglu_mlp_trainBackward", "linear_epilogueBackward"} & names_op, names_op
    torch.testing.assert_close(y, y_op, rtol=0, atol=0)
    torch.testing.assert_close(z, z_op, rtol=0, atol=0)
    for a, b in zip(grads, grads_op):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
