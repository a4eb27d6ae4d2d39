"""Triton GeGLU kernels (triton_kernels/activation.py) and their custom ops.

On a machine without a GPU the kernels run under the Triton interpreter on CPU
tensors: TRITON_INTERPRET=1 is set below, at collection, which precedes the session
fixture that imports the kernel package (triton.jit reads the variable when it
decorates a kernel). On a GPU machine the same tests run natively on CUDA tensors,
plus the cuda-marked ones (large shapes, compilation count, speed).
"""

import os

import pytest
import torch
import torch.nn.functional as F

from conftest import ACTIVATION_TOLERANCE, HAS_CUDA, compiled_count, poisoned_like

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

DEV = "cuda" if HAS_CUDA else "cpu"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
APPROX = ["tanh", "none"]
# Odd widths, a single row, 3-D, every width bucket of the launch table; grids of
# several row blocks (300 rows of a narrow bucket's 128-256-row tiles) and of several
# row and column blocks at once (wide bucket: 8-16-row, 256-column tiles).
SMALL_SHAPES = [(1, 1), (1, 7), (5, 16), (3, 33), (2, 3, 65), (9, 130), (4, 300), (300, 5), (37, 601)]


def assert_close(actual, expected, dtype):
    rtol, atol = ACTIVATION_TOLERANCE[dtype]
    torch.testing.assert_close(actual.double(), expected.double(), rtol=rtol, atol=atol, equal_nan=True)


def rand(shape, dtype, device=DEV, scale=3.0, seed=0):
    """Fresh values covering both tails of GELU (never zeros)."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(device=device, dtype=dtype)


def ref_geglu(gate, up, approximate):
    return F.gelu(gate.double(), approximate=approximate) * up.double()


def ref_geglu_grads(grad_out, gate, up, approximate):
    """float64 autograd of the eager formula."""
    g = gate.double().requires_grad_()
    u = up.double().requires_grad_()
    (F.gelu(g, approximate=approximate) * u).backward(grad_out.double())
    return g.grad, u.grad


@pytest.fixture(scope="module")
def ta(kernel):
    """The Triton module of the loaded variant (every variant ships it)."""
    mod = kernel.triton_kernels.activation
    if not mod.HAS_TRITON:
        pytest.skip("triton is not installed")
    if not HAS_CUDA and type(mod._forward_kernel).__name__ != "InterpretedFunction":
        pytest.fail("the kernel package was imported before TRITON_INTERPRET=1 was set")
    return mod


@pytest.fixture(scope="module")
def ops(kernel):
    return kernel.activation.ops


# --------------------------------------------------------------------------- launchers


@pytest.mark.parametrize("shape", SMALL_SHAPES)
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_forward_matches_float64(ta, dtype, approximate, shape):
    gate, up = rand(shape, dtype, seed=1), rand(shape, dtype, seed=2)
    out = poisoned_like(gate)
    ta.geglu_forward(out, gate, up, approximate)
    assert_close(out, ref_geglu(gate, up, approximate), dtype)


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_plain_gelu_forward(ta, dtype, approximate):
    x = rand((6, 70), dtype)
    out = poisoned_like(x)
    ta.geglu_forward(out, x, None, approximate)
    assert_close(out, F.gelu(x.double(), approximate=approximate), dtype)


@pytest.mark.parametrize("shape", SMALL_SHAPES)
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_matches_float64_autograd(ta, dtype, approximate, shape):
    gate, up, dy = rand(shape, dtype, seed=1), rand(shape, dtype, seed=2), rand(shape, dtype, scale=1.0, seed=3)
    grad_gate, grad_up = poisoned_like(gate), poisoned_like(up)
    ta.geglu_backward(grad_gate, grad_up, dy, gate, up, approximate)
    ref_gate, ref_up = ref_geglu_grads(dy, gate, up, approximate)
    assert_close(grad_gate, ref_gate, dtype)
    assert_close(grad_up, ref_up, dtype)


@pytest.mark.parametrize("rows, width, pad", [(5, 37, 11), (37, 300, 9)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_row_strided_operands_leave_padding_alone(ta, dtype, rows, width, pad):
    """Inputs and outputs are column slices of wider buffers (row stride > width), in
    one tile and in a grid of row and column blocks: results match, and the padding
    columns of the outputs stay NaN."""
    gate = rand((rows, width + pad), dtype, seed=1)[:, pad:]
    up = rand((rows, width + 3), dtype, seed=2)[:, :width]
    dy = rand((rows, 2 * width), dtype, scale=1.0, seed=3)[:, width:]
    out_buf = torch.full((rows, width + pad), float("nan"), dtype=dtype, device=DEV)
    out = out_buf[:, :width]
    ta.geglu_forward(out, gate, up, "tanh")
    assert_close(out, ref_geglu(gate, up, "tanh"), dtype)
    assert out_buf[:, width:].isnan().all()

    gg_buf = torch.full((rows, width + pad), float("nan"), dtype=dtype, device=DEV)
    gu_buf = torch.full((rows, width + pad), float("nan"), dtype=dtype, device=DEV)
    ta.geglu_backward(gg_buf[:, pad:], gu_buf[:, :width], dy, gate, up, "none")
    ref_gate, ref_up = ref_geglu_grads(dy, gate, up, "none")
    assert_close(gg_buf[:, pad:], ref_gate, dtype)
    assert_close(gu_buf[:, :width], ref_up, dtype)
    assert gg_buf[:, :pad].isnan().all() and gu_buf[:, width:].isnan().all()


@pytest.mark.parametrize("approximate", APPROX)
def test_extreme_inputs_stay_finite(ta, approximate):
    """Large |gate| must not overflow exp into inf/NaN; NaN in gate propagates."""
    gate = torch.tensor([[-200.0, -50.0, -9.0, -1e-3, 0.0, 1e-3, 9.0, 50.0, 200.0, float("nan")]], device=DEV)
    up = torch.full_like(gate, 2.0)
    dy = torch.ones_like(gate)
    out = poisoned_like(gate)
    ta.geglu_forward(out, gate, up, approximate)
    grad_gate, grad_up = poisoned_like(gate), poisoned_like(gate)
    ta.geglu_backward(grad_gate, grad_up, dy, gate, up, approximate)
    assert out[0, :-1].isfinite().all() and grad_gate[0, :-1].isfinite().all() and grad_up[0, :-1].isfinite().all()
    assert out[0, -1].isnan() and grad_gate[0, -1].isnan() and grad_up[0, -1].isnan()
    ref_gate, ref_up = ref_geglu_grads(dy[:, :-1], gate[:, :-1], up[:, :-1], approximate)
    assert_close(out[:, :-1], ref_geglu(gate[:, :-1], up[:, :-1], approximate), torch.float32)
    assert_close(grad_gate[:, :-1], ref_gate, torch.float32)
    assert_close(grad_up[:, :-1], ref_up, torch.float32)


def test_empty_tensors_launch_nothing(ta):
    gate = torch.empty((0, 8), device=DEV)
    ta.geglu_forward(torch.empty_like(gate), gate, gate, "tanh")
    ta.geglu_backward(torch.empty_like(gate), torch.empty_like(gate), gate, gate, gate, "tanh")


# --------------------------------------------------------------------------- launch table


def test_launch_table_covers_every_bucket_and_dtype(ta):
    """One table decides every launch: each (bucket, dtype) present, power-of-two tiles
    whose width covers the bucket, and tiles of the same number of bytes."""
    buckets = list(ta._WIDTH_BUCKETS) + ["wide"]
    for bucket in buckets:
        for dtype in DTYPES:
            cfg = ta._LAUNCH_TABLE[(bucket, dtype)]
            for v in (cfg.block_m, cfg.block_n, cfg.num_warps):
                assert v > 0 and v & (v - 1) == 0, (bucket, dtype, cfg)
            if bucket != "wide":
                assert cfg.block_n >= bucket
            assert cfg.block_m * cfg.block_n * dtype.itemsize == 8192, (bucket, dtype, cfg)
    assert len(ta._LAUNCH_TABLE) == len(buckets) * len(DTYPES)
    for width in (1, 16, 17, 128, 129, 3072, 24576):
        cfg = ta.launch_config(width, torch.bfloat16)
        grid, col_blocks = ta.launch_grid(8192, width, cfg)
        assert col_blocks * cfg.block_n >= width > (col_blocks - 1) * cfg.block_n
        assert grid[0] * cfg.block_m * cfg.block_n >= 8192 * width


# --------------------------------------------------------------------------- custom ops


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
def test_triton_ops_autograd_matches_float64(ops, ta, dtype, approximate):
    """loss.backward through geglu_triton and geglu_merged_triton."""
    gate = rand((3, 2, 40), dtype, seed=1).requires_grad_()
    up = rand((3, 2, 40), dtype, seed=2).requires_grad_()
    w = rand((3, 2, 40), dtype, scale=1.0, seed=3)
    (ops._geglu_triton(gate, up, approximate) * w).sum().backward()
    ref_gate, ref_up = ref_geglu_grads(w, gate.detach(), up.detach(), approximate)
    assert_close(gate.grad, ref_gate, dtype)
    assert_close(up.grad, ref_up, dtype)

    x = rand((3, 2, 80), dtype, seed=4).requires_grad_()
    y = ops._geglu_merged_triton(x, approximate)
    assert_close(y, ref_geglu(x[..., :40].detach(), x[..., 40:].detach(), approximate), dtype)
    (y * w).sum().backward()
    ref_gate, ref_up = ref_geglu_grads(w, x[..., :40].detach(), x[..., 40:].detach(), approximate)
    assert_close(x.grad, torch.cat([ref_gate, ref_up], -1), dtype)


def test_triton_out_ops_write_in_place(ops, ta):
    x = rand((4, 2 * 24), torch.bfloat16)
    out_buf = torch.full((4, 30), float("nan"), dtype=torch.bfloat16, device=DEV)
    ops._gelu_and_mul_triton(out_buf[:, :24], x, "none")
    assert_close(out_buf[:, :24], ref_geglu(x[:, :24], x[:, 24:], "none"), torch.bfloat16)
    assert out_buf[:, 24:].isnan().all()
    out = poisoned_like(x)
    ops._gelu_triton(out, x, "tanh")
    assert_close(out, F.gelu(x.double(), approximate="tanh"), torch.bfloat16)


def test_opcheck_triton_ops(ops, ta):
    """Schema, fake, autograd registration and AOT dispatch of every Triton op."""
    from torch.library import opcheck

    gate = rand((3, 24), torch.float32, seed=1)
    up = rand((3, 24), torch.float32, seed=2)
    dy = rand((3, 24), torch.float32, seed=3)
    x = rand((3, 48), torch.float32, seed=4)
    cases = [
        (ops._geglu_triton.default, (gate.clone().requires_grad_(), up.clone().requires_grad_(), "tanh")),
        (ops._geglu_triton.default, (gate, up, "none")),
        (ops._geglu_backward_triton.default, (dy, gate, up, "tanh")),
        (ops._geglu_merged_triton.default, (x.clone().requires_grad_(), "none")),
        (ops._geglu_merged_backward_triton.default, (dy, x, "tanh")),
        (ops._gelu_and_mul_triton.default, (torch.empty_like(gate), x, "tanh")),
        (ops._gelu_triton.default, (torch.empty_like(x), x, "none")),
    ]
    for op, args in cases:
        opcheck(op, args)


# --------------------------------------------------------------------------- GPU only


@pytest.mark.cuda
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4096, 3072), (333, 3001), (2, 1000, 200), (16, 24576), (70000, 16)])
def test_cuda_large_shapes(ta, dtype, approximate, shape):
    gate, up = rand(shape, dtype, seed=1), rand(shape, dtype, seed=2)
    dy = rand(shape, dtype, scale=1.0, seed=3)
    out = poisoned_like(gate)
    ta.geglu_forward(out, gate, up, approximate)
    assert_close(out, ref_geglu(gate, up, approximate), dtype)
    grad_gate, grad_up = poisoned_like(gate), poisoned_like(up)
    ta.geglu_backward(grad_gate, grad_up, dy, gate, up, approximate)
    ref_gate, ref_up = ref_geglu_grads(dy, gate, up, approximate)
    assert_close(grad_gate, ref_gate, dtype)
    assert_close(grad_up, ref_up, dtype)


@pytest.mark.cuda
def test_cuda_merged_strided_large(ops, ta):
    """Merged form on a column slice of a wider buffer (row stride 2d + 64)."""
    d = 3072
    x = rand((1024, 2 * d + 64), torch.bfloat16)[:, 32 : 32 + 2 * d]
    y = ops._geglu_merged_triton(x, "tanh")
    assert_close(y, ref_geglu(x[:, :d], x[:, d:], "tanh"), torch.bfloat16)
    dy = rand((1024, d), torch.bfloat16, scale=1.0, seed=5)
    gx = ops._geglu_merged_backward_triton(dy, x, "tanh")
    ref_gate, ref_up = ref_geglu_grads(dy, x[:, :d], x[:, d:], "tanh")
    assert_close(gx, torch.cat([ref_gate, ref_up], -1), torch.bfloat16)


@pytest.mark.cuda
def test_cuda_second_device_stream(ta):
    """The launcher targets the tensors' device, not the current one."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    gate = rand((64, 256), torch.bfloat16, device="cuda:1")
    out = poisoned_like(gate)
    ta.geglu_forward(out, gate, gate, "tanh")
    assert_close(out, ref_geglu(gate, gate, "tanh"), torch.bfloat16)


@pytest.mark.cuda
@pytest.mark.slow
def test_cuda_more_than_2_31_elements(ta):
    """int64 offsets: a [rows, 4096] bf16 tensor past 2**31 elements (4.3 GB each;
    ~22 GB for forward + backward). Checked on the first and last rows."""
    rows, width = 2**31 // 4096 + 8, 4096
    assert rows * width > 2**31
    torch.manual_seed(0)
    gate = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    up = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(gate)
    ta.geglu_forward(out, gate, up, "tanh")
    for sl in (slice(0, 4), slice(rows - 16, rows)):
        assert_close(out[sl], ref_geglu(gate[sl], up[sl], "tanh"), torch.bfloat16)
    grad_gate, grad_up = torch.empty_like(gate), torch.empty_like(gate)
    ta.geglu_backward(grad_gate, grad_up, out, gate, up, "none")
    for sl in (slice(0, 4), slice(rows - 16, rows)):
        ref_gate, ref_up = ref_geglu_grads(out[sl], gate[sl], up[sl], "none")
        assert_close(grad_gate[sl], ref_gate, torch.bfloat16)
        assert_close(grad_up[sl], ref_up, torch.bfloat16)


@pytest.mark.cuda
def test_cuda_new_shapes_do_not_recompile(ta):
    """After one shape per (width bucket, 16-alignment) class, other widths and row
    counts in the same classes reuse the compiled kernels."""
    dtype = torch.bfloat16

    def run(rows, width):
        gate, up = rand((rows, width), dtype), rand((rows, width), dtype, seed=2)
        out, gg, gu = torch.empty_like(gate), torch.empty_like(gate), torch.empty_like(gate)
        ta.geglu_forward(out, gate, up, "tanh")
        ta.geglu_backward(gg, gu, out, gate, up, "tanh")

    # Each class: (bucket, width % 16 == 0).
    for rows, width in [(64, 3072), (64, 3000), (64, 64), (64, 50), (64, 128), (64, 100)]:
        run(rows, width)
    warm_fwd, warm_bwd = compiled_count(ta._forward_kernel), compiled_count(ta._backward_kernel)
    for rows, width in [(1, 2048), (8192, 4096), (17, 24576), (3, 3001), (100, 1000), (5, 48), (77, 60), (1, 112), (9, 99)]:
        run(rows, width)
    assert compiled_count(ta._forward_kernel) == warm_fwd
    assert compiled_count(ta._backward_kernel) == warm_bwd
