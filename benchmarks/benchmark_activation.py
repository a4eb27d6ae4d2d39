"""`kernels benchmark ./` workloads: the public geglu / geglu_backward (tanh form, bf16)
at the MLP shapes of SHAPES below (blog, Gemma-2B, Gemma-7B, and Gemma-7B's hidden at
16 tokens: decode).

The runner sets self.kernel (the loaded variant) and self.device, calls
setup_<w>, runs benchmark_<w> once, and checks self.out against verify_<w>() with
torch.allclose(atol=1e-2). Inputs are uniform in [-1.25, 1.25] so that every output
stays below 2 in magnitude, where one bf16 ulp (2^-7) is within that tolerance: the
kernel and the float32 reference may round a value on a rounding boundary to
neighbouring bf16 values.
"""

import torch
import torch.nn.functional as F

from kernels.benchmark import Benchmark

# workload: (tokens, hidden) of the [tokens, hidden] gate/up tensors
SHAPES = {
    "blog": (8192, 3072),
    "gemma2b": (4096, 16384),
    "gemma7b": (4096, 24576),
    "decode": (16, 24576),
}
DTYPE = torch.bfloat16


def _uniform(shape, device, generator):
    return ((torch.rand(shape, generator=generator, device=device) * 2 - 1) * 1.25).to(DTYPE)


def _inputs(bench, shape):
    g = torch.Generator(device=bench.device).manual_seed(0)
    bench.gate = _uniform(shape, bench.device, g)
    bench.up = _uniform(shape, bench.device, g)
    bench.grad_out = _uniform(shape, bench.device, g)


def per_shape(cls):
    """Adds setup_<w> / benchmark_<w> / verify_<w> for every workload of SHAPES (the
    runner finds workloads by these method names): the inputs of that shape, then the
    class's _run and _reference."""

    def add(name, shape):
        setattr(cls, f"setup_{name}", lambda self: _inputs(self, shape))
        setattr(cls, f"benchmark_{name}", lambda self: self._run())
        setattr(cls, f"verify_{name}", lambda self: self._reference())

    for name, shape in SHAPES.items():
        add(name, shape)
    return cls


def _gelu_and_grad(gate):
    x = gate.float().requires_grad_()
    y = F.gelu(x, approximate="tanh")
    (dy,) = torch.autograd.grad(y, x, torch.ones_like(y))
    return y.detach(), dy


@per_shape
class GegluForward(Benchmark):
    """out = gelu_tanh(gate) * up: reads 2 tensors, writes 1."""

    seed = 0

    def _run(self):
        self.out = self.kernel.geglu(self.gate, self.up, "tanh")

    def _reference(self):
        y, _ = _gelu_and_grad(self.gate)
        return (y * self.up.float()).to(DTYPE)


@per_shape
class GegluBackward(Benchmark):
    """(grad_gate, grad_up) of gelu_tanh(gate) * up: reads 3 tensors, writes 2.

    The runner compares one tensor, self.out = grad_gate; verify also checks grad_up
    itself and raises on a mismatch."""

    seed = 0

    def _run(self):
        self.grad_gate, self.grad_up = self.kernel.geglu_backward(self.grad_out, self.gate, self.up, "tanh")
        self.out = self.grad_gate

    def _reference(self):
        y, dy = _gelu_and_grad(self.gate)
        grad_out = self.grad_out.float()
        grad_up = (grad_out * y).to(DTYPE)
        if not torch.allclose(self.grad_up, grad_up, atol=1e-2):
            raise RuntimeError("geglu_backward: grad_up differs from the float32 reference")
        return (grad_out * self.up.float() * dy).to(DTYPE)
