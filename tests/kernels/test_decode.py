"""The small-M ("decode") kernels (geglu_kernels/cuda/geglu_decode.cu) through their
internal ops `_geglu_decode_gate_up` and `_geglu_decode_linear`, on a GPU only:

- gate/up: gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up), tanh and exact GELU;
- down: h @ w.T + bias + residual;

against float64 references on fresh random inputs, M = 1..64 over K and N that are not
multiples of the kernels' tiles (K = 8 * odd, N = 8 * odd), separate and merged (view)
weights, with and without biases and residual, bfloat16 and float16; the plans that
split K within a block and across blocks (workspace + counters); > 2^31-element
weights; CUDA-graph capture and replay; determinism; and the argument errors.

The ops allocate their result: before each call the allocator is handed a NaN-filled
block of the same size, which it usually gives back, so unwritten elements show.
"""

import pytest
import torch
import torch.nn.functional as F

from conftest import STORAGE_TOLERANCE

pytestmark = pytest.mark.cuda

DTYPES = [torch.bfloat16, torch.float16]
GRID_M = [1, 2, 7, 16, 33, 64]
# (K, N): K = 8 * odd (a tail after the last 32-k step), N = 8 * odd (a partial row tile);
# the last two split K across blocks (K >= 4096 on few rows).
GRID_KN = [(136, 104), (2056, 296), (520, 1032), (4104, 72), (16392, 136)]


@pytest.fixture(scope="module")
def ops(kernel):
    ops = kernel._ops.ops
    if not hasattr(ops, "_geglu_decode_gate_up"):
        pytest.fail("the loaded variant lacks _geglu_decode_gate_up: build the CUDA variant with `python -m tools.build`")
    return ops


def rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)).to(dtype)


def ref_gate_up(x, wg, wu, bg, bu, approximate):
    x64 = x.double()
    g = x64 @ wg.double().t() + (0 if bg is None else bg.double())
    u = x64 @ wu.double().t() + (0 if bu is None else bu.double())
    return F.gelu(g, approximate=approximate) * u


def ref_linear(h, w, bias, residual):
    y = h.double() @ w.double().t()
    if bias is not None:
        y = y + bias.double()
    if residual is not None:
        y = y + residual.double()
    return y


def assert_close(actual, expected, dtype):
    """The storage dtype's rounding of the result plus float32 sums of bf16/fp16 products
    (scaled by the result's magnitude)."""
    tol = STORAGE_TOLERANCE[dtype]
    scale = expected.abs().max().item() + 1e-6
    assert not torch.isnan(actual).any(), "unwritten (NaN) elements in the result"
    torch.testing.assert_close(actual.double(), expected, rtol=tol["rtol"], atol=tol["atol"] + 2e-3 * scale)


def poison_allocator(m, n, dtype):
    torch.full((m, n), float("nan"), device="cuda", dtype=dtype)  # freed at once, reused by the op


def gate_up_operands(m, k, n, dtype, merged, has_bg, has_bu, seed):
    x = rand((m, k), dtype, seed)
    if merged:
        w = rand((2 * n, k), dtype, seed + 1, scale=k**-0.5)
        wg, wu = w[:n], w[n:]
    else:
        wg, wu = rand((n, k), dtype, seed + 1, scale=k**-0.5), rand((n, k), dtype, seed + 2, scale=k**-0.5)
    bg = rand((n,), dtype, seed + 3) if has_bg else None
    bu = rand((n,), dtype, seed + 4) if has_bu else None
    return x, wg, wu, bg, bu


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kn", GRID_KN, ids=lambda kn: f"K{kn[0]}-N{kn[1]}")
@pytest.mark.parametrize("m", GRID_M)
def test_gate_up_grid(ops, m, kn, dtype):
    k, n = kn
    i = GRID_M.index(m) * len(GRID_KN) + GRID_KN.index(kn) + DTYPES.index(dtype)
    approximate = ["tanh", "none"][i % 2]
    has_bg, has_bu = [(False, False), (True, True), (True, False), (False, True)][i // 2 % 4]
    x, wg, wu, bg, bu = gate_up_operands(m, k, n, dtype, i % 3 == 0, has_bg, has_bu, seed=i)
    poison_allocator(m, n, dtype)
    y = ops._geglu_decode_gate_up(x, wg, wu, bg, bu, approximate)
    assert y.shape == (m, n) and y.dtype == dtype
    assert_close(y, ref_gate_up(x, wg, wu, bg, bu, approximate), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kn", GRID_KN, ids=lambda kn: f"K{kn[0]}-N{kn[1]}")
@pytest.mark.parametrize("m", GRID_M)
def test_linear_grid(ops, m, kn, dtype):
    k, n = kn
    i = GRID_M.index(m) * len(GRID_KN) + GRID_KN.index(kn) + DTYPES.index(dtype)
    has_bias, has_res = [(False, False), (True, True), (True, False), (False, True)][i % 4]
    h = rand((m, k), dtype, i)
    w = rand((n, k), dtype, i + 1, scale=k**-0.5)
    bias = rand((n,), dtype, i + 2) if has_bias else None
    residual = rand((m, n), dtype, i + 3) if has_res else None
    poison_allocator(m, n, dtype)
    y = ops._geglu_decode_linear(h, w, bias, residual)
    assert y.shape == (m, n) and y.dtype == dtype
    assert_close(y, ref_linear(h, w, bias, residual), dtype)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("biases", ["none", "gate", "up", "both"])
@pytest.mark.parametrize("merged", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gate_up_every_option(ops, approximate, biases, merged, dtype):
    m, k, n = 16, 1032, 520
    x, wg, wu, bg, bu = gate_up_operands(m, k, n, dtype, merged, biases in ("gate", "both"), biases in ("up", "both"), 7)
    poison_allocator(m, n, dtype)
    assert_close(ops._geglu_decode_gate_up(x, wg, wu, bg, bu, approximate), ref_gate_up(x, wg, wu, bg, bu, approximate), dtype)


@pytest.mark.parametrize("m", [1, 16, 64])
def test_decode_model_shapes(ops, m):
    """Gemma-2B-sized gate/up (merged weight) and down GEMMs: the plans the benchmark times."""
    dtype, k, n = torch.bfloat16, 2048, 16384
    x, wg, wu, bg, bu = gate_up_operands(m, k, n, dtype, True, False, False, 100 + m)
    h = ops._geglu_decode_gate_up(x, wg, wu, None, None, "tanh")
    assert_close(h, ref_gate_up(x, wg, wu, None, None, "tanh"), dtype)
    w_down = rand((k, n), dtype, 200 + m, scale=n**-0.5)
    residual = rand((m, k), dtype, 300 + m)
    assert_close(ops._geglu_decode_linear(h, w_down, None, residual), ref_linear(h, w_down, None, residual), dtype)


def test_up_before_gate_and_row_strided_x(ops):
    """w_up at a lower address than w_gate; x a column slice (row stride > K)."""
    m, k, n, dtype = 9, 264, 88, torch.float16
    w = rand((2 * n, k), dtype, 21, scale=k**-0.5)
    x = rand((m, k + 64), dtype, 22)[:, :k]
    wg, wu = w[n:], w[:n]
    assert_close(ops._geglu_decode_gate_up(x, wg, wu, None, None, "tanh"), ref_gate_up(x, wg, wu, None, None, "tanh"), dtype)
    res = rand((m, 2 * n + 8), dtype, 23)[:, 8 : n + 8]  # residual with a row stride, unit column stride
    wd = rand((n, k), dtype, 24, scale=k**-0.5)
    assert_close(ops._geglu_decode_linear(x, wd, None, res), ref_linear(x, wd, None, res), dtype)


def test_deterministic(ops):
    """Split-K partial sums are added in a fixed order: equal inputs, equal bits."""
    dtype = torch.bfloat16
    h, w = rand((33, 16392), dtype, 31), rand((136, 16392), dtype, 32, scale=16392**-0.5)
    first = ops._geglu_decode_linear(h, w, None, None)
    for _ in range(3):
        assert torch.equal(ops._geglu_decode_linear(h, w, None, None), first)


def test_more_than_2_31_elements(ops):
    """A weight with > 2^31 elements: checked on its last rows, where 32-bit offsets wrap."""
    dtype, k = torch.bfloat16, 4096
    n = (1 << 31) // k + 200
    try:
        w = torch.empty((n, k), device="cuda", dtype=dtype)
    except torch.OutOfMemoryError:
        pytest.skip("not enough GPU memory for a 4 GiB weight")
    w[-400:] = rand((400, k), dtype, 41, scale=k**-0.5)
    w[:-400].fill_(1.0)
    h = rand((5, k), dtype, 42)
    y = ops._geglu_decode_linear(h, w, None, None)
    assert_close(y[:, -400:], ref_linear(h, w[-400:], None, None), dtype)
    wg, wu = w[: n // 2], w[n // 2 : 2 * (n // 2)]
    g = ops._geglu_decode_gate_up(h, wg, wu, None, None, "none")
    tail = slice(n // 2 - 100, n // 2)
    assert_close(g[:, tail], ref_gate_up(h, wg[tail], wu[tail], None, None, "none"), dtype)
    del w


def test_cuda_graph_capture_and_replay(ops):
    """gate/up + down (with the cross-block split's workspace and zeroed counters) captured
    once; replays on new inputs match eager calls bit for bit."""
    dtype, m, k, hidden = torch.bfloat16, 16, 4104, 1032
    x = rand((m, k), dtype, 51)
    w = rand((2 * hidden, k), dtype, 52, scale=k**-0.5)
    wd = rand((k, hidden), dtype, 53, scale=hidden**-0.5)
    wd_narrow = rand((72, 16392), dtype, 54, scale=16392**-0.5)
    h2 = rand((m, 16392), dtype, 55)
    res = rand((m, k), dtype, 56)

    def step():
        h = ops._geglu_decode_gate_up(x, w[:hidden], w[hidden:], None, None, "tanh")
        return ops._geglu_decode_linear(h, wd, None, res), ops._geglu_decode_linear(h2, wd_narrow, None, None)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, y2 = step()
    for seed in (60, 70):
        for i, t in enumerate((x, res, h2)):
            t.copy_(rand(t.shape, dtype, seed + i))
        y.fill_(float("nan"))
        y2.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        e, e2 = step()
        assert torch.equal(y, e) and torch.equal(y2, e2)
        hidden_ref = ref_gate_up(x, w[:hidden], w[hidden:], None, None, "tanh").to(dtype)
        assert_close(y, ref_linear(hidden_ref, wd, None, res), dtype)
        assert_close(y2, ref_linear(h2, wd_narrow, None, None), dtype)


def test_bad_input_raises(ops):
    dtype = torch.bfloat16
    x, wg, wu = rand((16, 64), dtype, 61), rand((32, 64), dtype, 62), rand((32, 64), dtype, 63)
    gu, lin = ops._geglu_decode_gate_up, ops._geglu_decode_linear
    with pytest.raises(ValueError, match="x must be bfloat16 or float16"):
        gu(x.float(), wg.float(), wu.float(), None, None, "tanh")
    with pytest.raises(ValueError, match="w_up"):
        gu(x, wg, wu[:16], None, None, "tanh")
    with pytest.raises(ValueError, match="w_gate"):
        gu(x, wg.half(), wu, None, None, "tanh")
    with pytest.raises(ValueError, match="approximate"):
        gu(x, wg, wu, None, None, "erf")
    with pytest.raises(ValueError, match="b_gate"):
        gu(x, wg, wu, rand((31,), dtype, 64), None, "tanh")
    with pytest.raises(ValueError, match="b_up"):
        gu(x, wg, wu, None, rand((32,), dtype, 64).cpu(), "tanh")
    with pytest.raises(ValueError, match="w_gate"):
        gu(x, wg.cpu(), wu, None, None, "tanh")
    with pytest.raises(ValueError, match="at most 64"):
        gu(rand((65, 64), dtype, 65), wg, wu, None, None, "tanh")
    with pytest.raises(ValueError, match="w_gate"):
        gu(x, rand((64, 32), dtype, 66).t(), wu, None, None, "tanh")  # not unit column stride
    with pytest.raises(ValueError, match="row stride"):
        gu(x, rand((32, 128), dtype, 67)[:, :64], wu, None, None, "tanh")  # strides differ
    with pytest.raises(ValueError, match="residual"):
        lin(x, wg, None, rand((16, 31), dtype, 68))
    with pytest.raises(ValueError, match="bias"):
        lin(x, wg, rand((33,), dtype, 69), None)
    with pytest.raises(ValueError, match="w"):
        lin(x, rand((32, 65), dtype, 70), None, None)
    with pytest.raises(ValueError, match="h must be 2-d"):
        lin(x[0], wg, None, None)
    # Kernel limits (RuntimeError naming the operand): 16-byte alignment.
    buf = rand((16 * 64 + 1,), dtype, 71)
    with pytest.raises(RuntimeError, match="x must be 16-byte aligned"):
        gu(buf[1:].view(16, 64), wg, wu, None, None, "tanh")
    with pytest.raises(RuntimeError, match="h must be 16-byte aligned"):
        lin(rand((16, 60), dtype, 72), rand((32, 60), dtype, 73), None, None)
