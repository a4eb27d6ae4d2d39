"""torch.vmap over the activation functions: the values of a loop over the batch.

The out= functions compute through eager's ops under vmap (batched tensors have no
storage for a kernel) and write the batched `out` with copy_; geglu, geglu_merged and
geglu_backward run their ops per example through torch's batching fallback, and
per-example gradients (vmap of grad) are eager's.
"""

import pytest
import torch
import torch.nn.functional as F

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
APPROX = ["none", "tanh"]
TOL = dict(rtol=2e-6, atol=2e-6)
# torch warns that the compiled ops have no batching rule of their own (the fallback
# loops over the batch); that is the documented behaviour, not a failure.
pytestmark = pytest.mark.filterwarnings("ignore:.*batching rule")


def eager_and_mul(x, approximate):
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]


def rand(*shape, device, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).mul(3).to(device)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("device", DEVICES)
def test_out_functions_under_vmap(kernel, device, approximate):
    and_mul = kernel.gelu_tanh_and_mul if approximate == "tanh" else kernel.gelu_and_mul
    gelu = kernel.gelu_tanh if approximate == "tanh" else kernel.gelu
    x = rand(5, 3, 32, device=device, seed=1)
    out = torch.full((5, 3, 16), float("nan"), device=device)
    version = out._version
    result = torch.vmap(and_mul)(out, x)
    torch.testing.assert_close(out, eager_and_mul(x, approximate), **TOL)
    torch.testing.assert_close(result, out, rtol=0, atol=0)
    assert out._version > version, "the write must bump out's version counter"
    out = torch.full_like(x, float("nan"))
    torch.vmap(gelu)(out, x)
    torch.testing.assert_close(out, F.gelu(x, approximate=approximate), **TOL)
    # vmap over dim 1 of x and out (strided per-example views)
    out = torch.full((3, 5, 16), float("nan"), device=device)
    torch.vmap(and_mul, in_dims=(1, 1))(out.transpose(0, 1), x)
    torch.testing.assert_close(out.transpose(0, 1), eager_and_mul(x, approximate), **TOL)


@pytest.mark.parametrize("device", DEVICES)
def test_out_function_under_vmap_checks_its_arguments(kernel, device):
    x = rand(4, 3, 16, device=device, seed=2)
    with pytest.raises(ValueError, match="out must have shape"):
        torch.vmap(kernel.gelu_and_mul)(torch.empty(4, 3, 5, device=device), x)
    with pytest.raises(ValueError, match="x"):
        torch.vmap(kernel.gelu_and_mul)(torch.empty(4, 3, 7, device=device), rand(4, 3, 15, device=device, seed=3))


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("device", DEVICES)
def test_differentiable_functions_under_vmap(kernel, device, approximate):
    x = rand(6, 4, 40, device=device, seed=4)
    gate, up = x[..., :20], x[..., 20:]
    dy = rand(6, 4, 20, device=device, seed=5)
    expected = eager_and_mul(x, approximate)
    torch.testing.assert_close(torch.vmap(kernel.geglu_merged)(x, approximate=approximate), expected, **TOL)
    torch.testing.assert_close(torch.vmap(kernel.geglu)(gate, up, approximate=approximate), expected, **TOL)
    grad_gate, grad_up = torch.vmap(kernel.geglu_backward)(dy, gate, up, approximate=approximate)
    g, u = gate.clone().requires_grad_(), up.clone().requires_grad_()
    (F.gelu(g, approximate=approximate) * u).backward(dy)
    torch.testing.assert_close(grad_gate, g.grad, rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(grad_up, u.grad, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("device", DEVICES)
def test_per_example_gradients(kernel, device, approximate):
    """torch.func.vmap(torch.func.grad(...)): per-example gradients, eager's values."""
    x = rand(5, 3, 24, device=device, seed=6)
    w = rand(3, 12, device=device, seed=7)

    def loss(row):
        return (kernel.geglu_merged(row, approximate) * w).sum()

    grads = torch.func.vmap(torch.func.grad(loss))(x)
    xe = x.clone().requires_grad_()
    (eager_and_mul(xe, approximate) * w).sum().backward()
    torch.testing.assert_close(grads, xe.grad, rtol=2e-5, atol=2e-5)
