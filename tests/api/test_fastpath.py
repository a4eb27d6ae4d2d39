"""The public functions skip custom-op dispatch only where nothing needs the op.

In linear.py the one Python custom op is the fused gate/up GEMM `_geglu_linear_fused`
(no-grad CUDA calls): eager calls run its implementation directly, compile tracing,
meta tensors and tensor subclasses go through the op. It has no autograd formula,
so calls that need gradients must never reach it (they take the composition).
"""

import pytest
import torch

from conftest import HAS_CUDA

DEV = "cuda" if HAS_CUDA else "cpu"


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


def test_subclasses_and_meta_take_the_op(kernel):
    fp = kernel._fastpath
    x = torch.randn(3, 4)
    assert fp.all_plain(x, None, torch.nn.Parameter(torch.randn(2)))
    assert fp.eager_call_ok(x, None, torch.nn.Parameter(torch.randn(2)))
    assert not fp.eager_call_ok(torch.empty(3, device="meta"))
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(x)
        assert not fp.all_plain(fake), "fake tensors need the op's fake implementation"
        assert not fp.eager_call_ok(fake)


def _operands(dtype, device=DEV):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 64, generator=g).to(device, dtype)
    wg, wu = ((torch.randn(48, 64, generator=g) * 0.1).to(device, dtype) for _ in range(2))
    wd = (torch.randn(64, 48, generator=g) * 0.1).to(device, dtype)
    return x, wg, wu, wd


def test_inference_and_training_routes_agree(kernel):
    """geglu_mlp without grad (direct fused call on CUDA, composition on CPU) and with
    grad (compiled training op or composition) compute the same values."""
    dtype = torch.float16 if HAS_CUDA else torch.float32
    x, wg, wu, wd = _operands(dtype)
    with torch.no_grad():
        direct = kernel.geglu_mlp(x, wg, wu, wd)
    trained = kernel.geglu_mlp(x, wg.requires_grad_(), wu, wd)
    assert trained.requires_grad
    torch.testing.assert_close(direct, trained.detach(), rtol=2e-3, atol=2e-3)


def test_fused_op_matches_its_direct_call_and_has_no_autograd(kernel):
    """The op and the implementation it wraps give identical results (on CPU the kernel
    runs in the Triton interpreter, float32 tensors); the op has no autograd formula,
    which is why calls needing gradients are routed to the composition."""
    lin = kernel.linear
    if lin.triton_gemm is None:
        pytest.skip("triton is not installed")
    if not HAS_CUDA and not lin.triton_gemm.INTERPRET:
        pytest.fail("the kernel package was imported before TRITON_INTERPRET=1 was set")
    x, wg, wu, _ = _operands(torch.float16 if HAS_CUDA else torch.float32)
    b = wg[:, 0].contiguous()
    args = (x, wg, wu, b, None, "tanh")
    direct = lin._fused_gate_up_impl(*args)
    via_op = kernel._ops.ops._geglu_linear_fused(*args)
    torch.testing.assert_close(direct, via_op, rtol=0, atol=0)

    y = kernel._ops.ops._geglu_linear_fused(x.requires_grad_(), wg, wu, b, None, "tanh")
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()


@pytest.mark.cuda
def test_cuda_fused_gate_up_goes_through_the_op_only_when_needed(kernel, monkeypatch):
    """In a variant without the native ops (noarch), where geglu_linear's no-grad CUDA
    route is the Triton kernel: an eager call runs its implementation directly; where the
    fast path is refused (compile, meta, subclasses) it calls the registered op, with the
    same result. float32 operands with TF32 allowed, as the Triton kernel computes them."""
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)  # float32's fused route needs TF32 allowed
    lin = kernel.linear
    monkeypatch.setattr(lin, "_NATIVE_MLP_FLAG", None)
    calls = []
    impl, ops = lin._fused_gate_up_impl, lin.ops

    def direct(*args):
        calls.append("direct")
        return impl(*args)

    class Ops:
        def __getattr__(self, name):
            if name == "_geglu_linear_fused":
                calls.append("op")
            return getattr(ops, name)

    monkeypatch.setattr(lin, "_fused_gate_up_impl", direct)
    monkeypatch.setattr(lin, "ops", Ops())
    x, wg, wu, _ = _operands(torch.float32)
    with torch.no_grad():
        y_direct = kernel.geglu_linear(x, wg, wu)
        assert calls == ["direct"]
        monkeypatch.setattr(lin, "direct_call_ok", lambda *tensors: False)
        y_op = kernel.geglu_linear(x, wg, wu)
    assert calls == ["direct", "op"]
    torch.testing.assert_close(y_direct, y_op, rtol=0, atol=0)
