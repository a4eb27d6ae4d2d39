"""CUDA-specific checks of the compiled CUDA variant (geglu_kernels/cuda), through its
native ops, on the GPU only.

test_native_ops.py checks the schemas' numerics and argument errors on every device;
this file targets what is particular to the CUDA kernel: the 16-byte path and its
scalar fallback (misaligned base pointers, row strides or halves that break 16-byte
alignment, widths with a tail), the tiling of rows of every length (decode shapes,
merged halves), float32 accuracy of both GELU forms, int64 indexing past 2^31
elements, in-place use, the current stream (CUDA graph capture), the device guard,
and the errors a CUDA op gives for CPU / mismatched / malformed arguments.

Unwritten outputs show as NaN: `out` arguments are poisoned, and before an op that
allocates its result the allocator is handed a NaN-filled block of the same size,
which it usually gives back (best effort: the caching allocator reuses the most
recently freed block of a size).
"""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from conftest import STORAGE_TOLERANCE, poisoned_like

pytestmark = pytest.mark.cuda

APPROXIMATE = ["none", "tanh"]
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
TOLERANCE = STORAGE_TOLERANCE
PACK = {torch.float32: 4, torch.bfloat16: 8, torch.float16: 8}  # elements per 16 bytes


@pytest.fixture(scope="module")
def ops(kernel):
    """The native op namespace of the loaded variant, which must be the compiled CUDA one."""
    ops = kernel._ops.ops
    has_cuda = hasattr(ops, "geglu") and torch._C._dispatch_has_kernel_for_dispatch_key(
        ops.geglu.default.name(), "CUDA"
    )
    if not has_cuda:
        pytest.fail(
            f"the loaded variant {Path(kernel.__file__).parent.name} has no compiled CUDA ops: "
            "run `python -m tools.build` with a CUDA torch first"
        )
    return ops


# --------------------------------------------------------------------------- helpers


def rand(shape, dtype, seed, scale=2.0):
    """Fresh random values on the GPU (never zeros), rounded to `dtype`."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)).to(dtype)


def gelu64(x, approximate):
    return F.gelu(x.double(), approximate=approximate)


def gelu_grad64(x, approximate):
    x = x.double().detach().requires_grad_()
    (grad,) = torch.autograd.grad(F.gelu(x, approximate=approximate).sum(), x)
    return grad


def assert_close(actual, expected, dtype=None, **tol):
    assert not torch.isnan(actual).any(), "NaN in the result: elements were not written"
    torch.testing.assert_close(actual.double(), expected.double(), **(tol or TOLERANCE[dtype]))


def poison_allocator(shape, dtype, count=1):
    """Free `count` NaN-filled blocks the size of the next results, so that the op most
    likely gets them back and any element it fails to write stays NaN."""
    blocks = [torch.full(shape, float("nan"), dtype=dtype, device="cuda") for _ in range(count)]
    del blocks


def geglu_checked(ops, gate, up, approximate, dtype):
    poison_allocator(gate.shape, dtype)
    out = ops.geglu(gate, up, approximate)
    assert out.shape == gate.shape and out.dtype == dtype and out.is_cuda and out.is_contiguous()
    assert_close(out, gelu64(gate, approximate) * up.double(), dtype)


def backward_checked(ops, grad_out, gate, up, approximate, dtype):
    poison_allocator(gate.shape, dtype, count=2)
    grad_gate, grad_up = ops.geglu_backward(grad_out, gate, up, approximate)
    for g in (grad_gate, grad_up):
        assert g.shape == gate.shape and g.dtype == dtype and g.is_contiguous()
    dy = grad_out.double()
    assert_close(grad_gate, dy * up.double() * gelu_grad64(gate, approximate), dtype)
    assert_close(grad_up, dy * gelu64(gate, approximate), dtype)


def merged_checked(ops, out, x, approximate, dtype):
    d = x.shape[-1] // 2
    (ops.gelu_tanh_and_mul if approximate == "tanh" else ops.gelu_and_mul)(out, x)
    assert_close(out, gelu64(x[..., :d], approximate) * x[..., d:].double(), dtype)


def gelu_checked(ops, out, x, approximate, dtype):
    (ops.gelu_tanh if approximate == "tanh" else ops.gelu)(out, x)
    assert_close(out, gelu64(x, approximate), dtype)


# --------------------------------------------------------------------------- 16-byte path / fallback

# Widths: below one pack, odd, not a multiple of the pack, a pack multiple, wide.
WIDTHS = [1, 3, 7, 13, 67, 200, 1029]
# How the operands sit in memory (see `operands`).
LAYOUTS = ["contiguous", "misaligned", "aligned_row_stride", "one_row_misaligned"]


def operands(layout, rows, width, dtype, seed):
    """(gate, up, grad_out) of shape [rows, width] in `layout`:
    contiguous          dense: collapses to one long row, 16-byte path with a tail;
    misaligned          x[:, 1:] of a wider tensor: base 1 element past 16-byte
                        alignment, so the scalar path must be taken;
    aligned_row_stride  x[:, :width] of rows padded to a pack multiple: 16-byte path
                        per row, with a scalar tail when width % pack != 0;
    one_row_misaligned  a 1-row view at element offset 3 (collapsed row, scalar path)."""
    pack = PACK[dtype]
    tensors = []
    for k in range(3):
        s = seed + k
        if layout == "contiguous":
            t = rand((rows, width), dtype, s)
        elif layout == "misaligned":
            t = rand((rows, width + 1), dtype, s)[:, 1:]
        elif layout == "aligned_row_stride":
            stride = (width + pack - 1) // pack * pack + pack
            t = rand((rows, stride), dtype, s)[:, :width]
        else:
            t = rand((rows * width + 3,), dtype, s)[3:].view(rows, width)[:1]
        tensors.append(t)
    return tensors


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_geglu_layouts(ops, dtype, layout):
    for width in WIDTHS:
        gate, up, grad_out = operands(layout, 5, width, dtype, seed=width)
        for approximate in APPROXIMATE:
            geglu_checked(ops, gate, up, approximate, dtype)
            backward_checked(ops, grad_out, gate, up, approximate, dtype)
            out_buffer = poisoned_like(torch.empty(gate.shape[0], width + 1, dtype=dtype, device="cuda"))
            out = out_buffer[:, 1:] if layout == "misaligned" else out_buffer[:, :width]
            gelu_checked(ops, out, gate, approximate, dtype)
            # Only the view was written.
            rest = out_buffer[:, :1] if layout == "misaligned" else out_buffer[:, width:]
            assert torch.isnan(rest).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_merged_halves_alignment(ops, dtype):
    """x = [gate | up]: the up half is 16-byte aligned only when d is a pack multiple;
    a sliced merged input shifts both halves; out may be a row-strided slice."""
    pack = PACK[dtype]
    for d in [1, 3, 7, 13, 67, pack, 4 * pack, 200 * pack + 1]:
        for approximate in APPROXIMATE:
            x = rand((6, 2 * d), dtype, seed=d)
            merged_checked(ops, poisoned_like(torch.empty(6, d, dtype=dtype, device="cuda")), x, approximate, dtype)
            shifted = rand((6, 2 * d + 1), dtype, seed=d + 1)[:, 1:]
            out = poisoned_like(torch.empty(6, d + pack, dtype=dtype, device="cuda"))[:, :d]
            merged_checked(ops, out, shifted, approximate, dtype)
            x3 = rand((2, 3, 2 * d), dtype, seed=d + 2)
            merged_checked(ops, poisoned_like(torch.empty(2, 3, d, dtype=dtype, device="cuda")), x3, approximate, dtype)


# --------------------------------------------------------------------------- tiling

# (rows, width): shapes that take different tilings: a decode step (few long rows:
# small tiles so every SM gets blocks), one row, rows of several tiles with a tail,
# many short rows, and a merged row half of 3072 (128 threads x 3 packs).
TILING_SHAPES = [(16, 24576), (1, 1 << 20), (1, (1 << 20) + 5), (3, 4 * 256 * 8 * 2 + 8 + 3), (4096, 24), (8, 3072)]


@pytest.mark.parametrize("shape", TILING_SHAPES, ids=str)
def test_tilings(ops, shape):
    dtype = torch.bfloat16
    rows, width = shape
    gate, up, grad_out = (rand(shape, dtype, seed=k) for k in range(3))
    geglu_checked(ops, gate, up, "tanh", dtype)
    backward_checked(ops, grad_out, gate, up, "none", dtype)
    # The same shapes as halves of a merged input and as a column slice (row-wise tiles).
    x = rand((rows, 2 * width), dtype, seed=3)
    merged_checked(ops, poisoned_like(torch.empty(shape, dtype=dtype, device="cuda")), x, "tanh", dtype)
    wide = rand((rows, width + 16), dtype, seed=4)
    geglu_checked(ops, wide[:, :width], wide[:, 16:], "none", dtype)


def test_three_dims_and_single_row(ops):
    dtype = torch.float16
    for shape in [(2, 3, 517), (1, 1, 9), (1, 4096), (7,)]:
        gate, up, grad_out = (rand(shape, dtype, seed=k) for k in range(3))
        geglu_checked(ops, gate, up, "tanh", dtype)
        backward_checked(ops, grad_out, gate, up, "tanh", dtype)
        gelu_checked(ops, poisoned_like(gate), gate, "none", dtype)


# --------------------------------------------------------------------------- float32 accuracy


@pytest.mark.parametrize("approximate", APPROXIMATE)
def test_float32_accuracy(ops, approximate):
    """~1e-6 relative against float64 where the value is not tiny. The forward is eager's
    formula (test_activation_matches_eager.py), whose 1 + erf(x) and 1 + tanh(u) cancel
    for x < -3: there the error is absolute (~1e-7 |x|). The multipliers stay in
    [0.5, 1.5] so that they do not scale the absolute error where gelu or its derivative
    crosses zero."""
    x = torch.linspace(-6.0, 6.0, 1 << 20, device="cuda", dtype=torch.float32)
    g = torch.Generator(device="cuda").manual_seed(5)
    scale = 0.5 + torch.rand(x.shape, generator=g, device="cuda")
    atol = 1e-7 if approximate == "tanh" else 2e-6  # the backward's sigmoid form
    forward_atol = 2e-6
    grad_atol = 1e-6 if approximate == "tanh" else 4e-6
    out = poisoned_like(x)
    (ops.gelu_tanh if approximate == "tanh" else ops.gelu)(out, x)
    assert_close(out, gelu64(x, approximate), rtol=4e-6, atol=forward_atol)
    expected = gelu64(x, approximate) * scale.double()
    assert_close(ops.geglu(x, scale, approximate), expected, rtol=5e-6, atol=2 * forward_atol)
    grad_gate, grad_up = ops.geglu_backward(scale, x, torch.ones_like(x), approximate)
    assert_close(grad_gate, scale.double() * gelu_grad64(x, approximate), rtol=5e-6, atol=grad_atol)
    assert_close(grad_up, expected, rtol=5e-6, atol=2 * atol)


def test_float32_tanh_form_negative_tail(ops):
    """The backward's sigmoid(2u) from exp(-|2u|) keeps relative accuracy where 1 + tanh(u)
    cancels; what remains is the rounding of the exponent's argument, ~|2u| * 6e-8. The
    forward is eager's 0.5 x (1 + tanh(u)), which cancels there: its bits are the
    contract (test_activation_matches_eager.py), checked here against F.gelu."""
    x = torch.linspace(-9.0, -3.0, 1 << 16, device="cuda", dtype=torch.float32)
    out = poisoned_like(x)
    ops.gelu_tanh(out, x)
    assert torch.equal(out, F.gelu(x, approximate="tanh"))
    # The float64 reference must avoid the same cancellation: x * sigmoid(2u).
    x64 = x.double().requires_grad_()
    u = 0.7978845608028654 * (x64 + 0.044715 * x64**3)
    ref = x64 * torch.sigmoid(2 * u)
    (ref_grad,) = torch.autograd.grad(ref.sum(), x64)
    grad_gate, _ = ops.geglu_backward(torch.ones_like(x), x, torch.ones_like(x), "tanh")
    assert_close(grad_gate, ref_grad, rtol=3e-5, atol=0.0)


# --------------------------------------------------------------------------- in place, streams, devices


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_gelu_in_place(ops, dtype):
    """out is input: each element is read before it is written, by the same thread."""
    for layout in ["contiguous", "misaligned"]:
        x = operands(layout, 9, 1029, dtype, seed=6)[0]
        expected = gelu64(x, "tanh")
        ops.gelu_tanh(x, x)
        assert_close(x, expected, dtype)


def test_launches_on_the_current_stream(ops):
    """Kernels launched on another stream than the current one break CUDA graph capture
    (or are missing from the graph); replays must recompute from the new inputs."""
    dtype = torch.bfloat16
    gate, up, grad_out = (rand((64, 1000), dtype, seed=k) for k in range(3))
    x = rand((64, 2000), dtype, seed=4)
    out_merged = torch.empty(64, 1000, dtype=dtype, device="cuda")

    def step():
        out = ops.geglu(gate, up, "tanh")
        grad_gate, grad_up = ops.geglu_backward(grad_out, gate, up, "none")
        ops.gelu_and_mul(out_merged, x)
        return out, grad_gate, grad_up

    # Warm up on a side stream first: the first launch of a kernel may load its module,
    # which a capturing stream does not allow.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, grad_gate, grad_up = step()
    for seed in (10, 20):
        for k, t in enumerate((gate, up, grad_out, x)):
            t.copy_(rand(t.shape, dtype, seed=seed + k))
        for result in (out, grad_gate, grad_up, out_merged):
            result.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, gelu64(gate, "tanh") * up.double(), dtype)
        assert_close(grad_gate, grad_out.double() * up.double() * gelu_grad64(gate, "none"), dtype)
        assert_close(grad_up, grad_out.double() * gelu64(gate, "none"), dtype)
        assert_close(out_merged, gelu64(x[:, :1000], "none") * x[:, 1000:].double(), dtype)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_tensors_on_another_device_than_the_current_one(ops):
    """The op runs on its tensors' device (device guard), not on the current device."""
    dtype = torch.float32
    with torch.cuda.device(0):
        gate, up = (rand((33, 517), dtype, seed=k).to("cuda:1") for k in range(2))
        out = ops.geglu(gate, up, "tanh")
        assert out.device == gate.device
        out_g, out_u = ops.geglu_backward(up, gate, up, "none")
        assert out_g.device == gate.device
        y = poisoned_like(gate)
        ops.gelu(y, gate)
    assert_close(out.cpu(), (gelu64(gate, "tanh") * up.double()).cpu(), dtype)
    assert_close(out_u.cpu(), (up.double() * gelu64(gate, "none")).cpu(), dtype)
    assert_close(y.cpu(), gelu64(gate, "none").cpu(), dtype)


# --------------------------------------------------------------------------- beyond 2^31 elements


def need_free_memory(nbytes):
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info()
    if free < nbytes * 1.1:
        pytest.skip(f"needs {nbytes / 2**30:.1f} GiB of free GPU memory, {free / 2**30:.1f} GiB free")


def test_large_flat_gelu_tanh_over_2_31_elements(ops):
    """One dense row of 2^31 + 64Ki elements: pack and element indices pass int32."""
    n = 2**31 + 64 * 1024
    need_free_memory(5 * n)  # x, out (bf16) and isnan's bool temporary
    try:
        x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        out = poisoned_like(x)
        ops.gelu_tanh(out, x)
        assert not torch.isnan(out).any(), "elements were not written"
        # Spot checks against float64 on a few windows, the end and the 2^31 boundary included.
        for start in (0, 2**30 + 12345, 2**31 - 4096, n - 8192):
            sl = slice(start, start + 8192)
            assert_close(out[sl], gelu64(x[sl], "tanh"), torch.bfloat16)
    finally:
        x = out = None
        torch.cuda.empty_cache()


def test_large_row_strided_geglu_over_2_31_elements(ops):
    """[2^16 + 1, 2^15] column slice of a padded buffer: row * row_stride passes 2^31,
    and the rows do not collapse (row stride 2^15 + 8). Forward and backward."""
    rows, width, stride = 2**16 + 1, 2**15, 2**15 + 8
    dtype = torch.bfloat16
    need_free_memory(2 * (rows * stride + 4 * rows * width) + rows * width)  # bf16 tensors + a bool temporary
    try:
        gate = torch.randn(rows, stride, device="cuda", dtype=dtype)[:, :width]
        up = torch.randn(rows, width, device="cuda", dtype=dtype)
        poison_allocator(up.shape, dtype)
        out = ops.geglu(gate, up, "tanh")
        assert not torch.isnan(out).any(), "elements were not written"
        sample = torch.tensor([0, 1, 2**15, 2**16 - 1, 2**16], device="cuda")
        g, u = gate[sample], up[sample]
        assert_close(out[sample], gelu64(g, "tanh") * u.double(), dtype)
        out = None
        grad_gate, grad_up = ops.geglu_backward(up, gate, up, "none")  # grad_out = up
        assert not torch.isnan(grad_gate).any() and not torch.isnan(grad_up).any()
        assert_close(grad_gate[sample], u.double() * u.double() * gelu_grad64(g, "none"), dtype)
        assert_close(grad_up[sample], u.double() * gelu64(g, "none"), dtype)
    finally:
        gate = up = out = grad_gate = grad_up = None
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- bad input
# The CUDA ops raise ValueError (TORCH_CHECK_VALUE) naming the op and the argument.


def both(*words):
    """A pytest.raises `match` pattern: every word appears in the message (any order)."""
    return "(?is)" + "".join(f"(?=.*{w})" for w in words)


def test_cpu_tensor_to_cuda_op(ops):
    g, c = torch.ones(4, 8, device="cuda"), torch.ones(4, 8)
    with pytest.raises(ValueError, match=both("geglu", "up", "CUDA")):
        ops.geglu(g, c, "tanh")
    with pytest.raises(ValueError, match=both("geglu", "gate", "CUDA")):
        ops.geglu(c, g, "tanh")
    with pytest.raises(ValueError, match=both("geglu_backward", "grad_out", "CUDA")):
        ops.geglu_backward(c, g, g, "tanh")
    with pytest.raises(ValueError, match=both("gelu", "input", "CUDA")):
        ops.gelu(g, c)
    with pytest.raises(ValueError, match=both("gelu_tanh_and_mul", "out", "CUDA")):
        ops.gelu_tanh_and_mul(torch.empty(4, 4), g)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_devices_mismatch(ops):
    g0, g1 = torch.ones(4, 8, device="cuda:0"), torch.ones(4, 8, device="cuda:1")
    with pytest.raises(ValueError, match=both("up", "device")):
        ops.geglu(g0, g1, "tanh")
    with pytest.raises(ValueError, match=both("out", "device")):
        ops.gelu(g1, g0)


def test_wrong_dtypes(ops):
    for dtype in (torch.float64, torch.int32):
        x = torch.ones(4, 8, dtype=dtype, device="cuda")
        with pytest.raises(ValueError, match=both("gate", "dtype", "float32")):
            ops.geglu(x, x, "tanh")
        with pytest.raises(ValueError, match=both("input", "dtype")):
            ops.gelu(x, x)
    g = torch.ones(4, 8, device="cuda")
    with pytest.raises(ValueError, match=both("up", "dtype")):
        ops.geglu(g, g.half(), "none")
    with pytest.raises(ValueError, match=both("gate", "dtype")):
        ops.geglu_backward(g, g.bfloat16(), g, "none")
    with pytest.raises(ValueError, match=both("out", "dtype")):
        ops.gelu_and_mul(torch.empty(4, 4, device="cuda", dtype=torch.half), g)


def test_shapes_and_approximate(ops):
    g = torch.ones(4, 8, device="cuda")
    with pytest.raises(ValueError, match=both("input", "even")):
        ops.gelu_and_mul(torch.empty(4, 3, device="cuda"), torch.ones(4, 7, device="cuda"))
    with pytest.raises(ValueError, match=both("out", "shape")):
        ops.gelu_tanh_and_mul(torch.empty(4, 8, device="cuda"), g)
    with pytest.raises(ValueError, match=both("up", "shape")):
        ops.geglu(g, torch.ones(4, 9, device="cuda"), "tanh")
    with pytest.raises(ValueError, match=both("approximate", "tanh", "none", "sigmoid")):
        ops.geglu(g, g, "sigmoid")
    with pytest.raises(ValueError, match=both("geglu_backward", "approximate")):
        ops.geglu_backward(g, g, g, "")


def test_bad_strides(ops):
    x = torch.ones(8, 6, device="cuda")
    with pytest.raises(ValueError, match=both("gate", "stride 1")):
        ops.geglu(x.t(), x.t(), "none")
    with pytest.raises(ValueError, match=both("grad_out", "stride 1")):
        ops.geglu_backward(torch.ones(6, 8, device="cuda").t(), x, x, "none")
    y = torch.ones(2, 3, 8, device="cuda")[:, :2, :]  # leading dims do not collapse
    with pytest.raises(ValueError, match=both("up", "row stride")):
        ops.geglu(torch.ones(2, 2, 8, device="cuda"), y, "tanh")
    with pytest.raises(ValueError, match=both("out", "overlapping")):
        ops.gelu(torch.empty(1, 6, device="cuda").expand(8, 6), x)
    # out aliasing exactly the gate half of the merged input it reads: each element is
    # read before it is written, by the same thread, so this is a valid in-place call.
    m = torch.randn(4, 16, device="cuda")
    expected = torch.nn.functional.gelu(m[:, :8].double()) * m[:, 8:].double()
    ops.gelu_and_mul(m[:, :8], m)
    assert_close(m[:, :8], expected, torch.float32)
