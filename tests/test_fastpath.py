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
