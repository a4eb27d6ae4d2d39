"""The Hopper GEMM engine (geglu_kernels/cuda/sm90/bf16/geglu_gemm_sm90.cu) through the op
`_geglu_linear` (geglu_linear's inference op, which routes aligned bf16/fp16 calls to it),
on an sm_90 GPU only: gelu(x @ w_gate.T + b_gate) * (x @ w_up.T +
b_up) against a float64 reference over a grid of token counts and sizes (tails of every
tile), both GELU forms, bfloat16 and float16, biases, separate and merged (view)
weights; each of the four kernel variants the engine compiles, at the edges of the
shape pick that chooses them; the swap-AB gate/up (geglu_swapab_sm90.cu) that serves
1-32 tokens instead and, through `_geglu_mlp`, the down projections: the decode linear
(decode_sm90.cu) at 1-4 tokens and the split-K swap-AB linear (linear_swapab_sm90.cu) at
up to 32 tokens with weights of >= 48 MiB, and both GEMMs in one kernel (mlp_fused_sm90.cu)
where the output is as wide as x, at 1-32 tokens with such a weight and at 5-32 with one of
40-48 MiB;
> 2^31-element operands; bad arguments (clear errors) and calls the engine does not
take (torch's GEMM and the geglu kernel instead, never a wrong answer); and the route
geglu_linear takes to it. Then the engine's bias +
GELU GEMM (linear_gelu_sm90.cu) through linear_bias_gelu, and the table that routes
that op to it.

The op allocates its result: before each call the allocator is handed a NaN-filled
block of the same size, which it usually gives back, so unwritten elements show.
"""

import pytest
import torch
import torch.nn.functional as F

from conftest import STORAGE_TOLERANCE

pytestmark = pytest.mark.cuda

GRID_M = [1, 2, 3, 4, 5, 7, 32, 33, 64, 1000, 4096, 8192]  # <= 32: the swap-AB gate/up
GRID_KN = [(64, 64), (64, 16384), (16384, 64), (768, 3072), (3000, 1000), (2048, 16384)]
DTYPES = [torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def sm90(kernel):
    """The gate/up op, where this GPU runs the engine (the compiled CUDA variant)."""
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the Hopper engine runs on sm_90 GPUs (H100/H200) only")
    ops = kernel._ops.ops
    if not hasattr(ops, "_geglu_linear") or "cuda" not in kernel.linear._NATIVE_MLP_DEVICE_TYPES:
        pytest.fail("the loaded variant is not the compiled CUDA one: build it (docs/TESTING.md)")
    return ops._geglu_linear


def rand(shape, dtype, seed, scale=1.0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (scale * torch.randn(shape, generator=g, device="cuda", dtype=torch.float32)).to(dtype)


def reference(x, wg, wu, bg, bu, approximate):
    x64 = x.double()
    g = x64 @ wg.double().t() + (0 if bg is None else bg.double())
    u = x64 @ wu.double().t() + (0 if bu is None else bu.double())
    return F.gelu(g, approximate=approximate) * u


def assert_close(actual, expected, dtype, k, roundings=1):
    """The storage dtype's rounding of the result, plus the bf16/fp16 products summed
    over K in float32 (scaled by the result's magnitude); the second term grows with the
    `roundings` of the last GEMM's input (an MLP's h) to the storage dtype."""
    tol = STORAGE_TOLERANCE[dtype]
    scale = expected.abs().max().item() + 1e-6
    atol = tol["atol"] + 2e-3 * scale * (1 if k <= 4096 else 2) * roundings
    assert not torch.isnan(actual).any(), "unwritten (NaN) elements in the result"
    torch.testing.assert_close(actual.double(), expected, rtol=tol["rtol"], atol=atol)


def poison_allocator(m, n, dtype):
    torch.full((m, n), float("nan"), device="cuda", dtype=dtype)  # freed at once, reused by the op


def case_options(i):
    """The i-th combination of (approximate, biases, merged weight), so the grid covers all."""
    return ["tanh", "none"][i % 2], [(False, False), (True, True), (True, False), (False, True)][i // 2 % 4], i % 3 == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kn", GRID_KN, ids=lambda kn: f"K{kn[0]}-N{kn[1]}")
@pytest.mark.parametrize("m", GRID_M)
def test_grid_against_float64(sm90, m, kn, dtype):
    k, n = kn
    i = GRID_M.index(m) * len(GRID_KN) + GRID_KN.index(kn) + DTYPES.index(dtype)
    approximate, (has_bg, has_bu), merged = case_options(i)
    x = rand((m, k), dtype, 1)
    if merged:
        w = rand((2 * n, k), dtype, 2, scale=k**-0.5)
        wg, wu = w[:n], w[n:]
    else:
        wg, wu = rand((n, k), dtype, 2, scale=k**-0.5), rand((n, k), dtype, 3, scale=k**-0.5)
    bg = rand((n,), dtype, 4) if has_bg else None
    bu = rand((n,), dtype, 5) if has_bu else None
    poison_allocator(m, n, dtype)
    y = sm90(x, wg, wu, bg, bu, approximate)
    assert y.shape == (m, n) and y.dtype == dtype
    assert_close(y, reference(x, wg, wu, bg, bu, approximate), dtype, k)


# The engine's kernel variants and a shape on each side of the edges of the shape pick
# that chooses them (pick_config, geglu_gemm_sm90.cu): 32 < M <= 64 (the swap-AB gate/up
# takes M <= 32); M <= 128; x (M*K*2 bytes)
# > 20 MB; the rest. The tuning-only variants are checked by tools/sm90_gemm/check_and_bench.py.
PICKED_VARIANTS = {
    "3-pingpong_64x(2x64)_c1": [(33, 1024, 1000), (64, 1024, 1000)],
    "0-pingpong_64x(2x128)_c1": [(65, 1024, 1000), (128, 1024, 1000)],
    "1-coop_128x(2x128)_c2": [(3256, 3072, 1000), (4096, 3072, 1000)],
    "2-pingpong_128x(2x64)_c2": [(129, 1024, 1000), (3255, 3072, 1000)],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", PICKED_VARIANTS)
def test_each_kernel_variant(sm90, variant, dtype):
    for i, (m, k, n) in enumerate(PICKED_VARIANTS[variant]):
        approximate, (has_bg, has_bu), merged = case_options(i + DTYPES.index(dtype) * 2)
        x = rand((m, k), dtype, 71 + i)
        w = rand((2 * n, k), dtype, 72 + i, scale=k**-0.5)
        wg, wu = (w[:n], w[n:]) if merged else (w[:n].clone(), w[n:].clone())
        bg = rand((n,), dtype, 73) if has_bg else None
        bu = rand((n,), dtype, 74) if has_bu else None
        poison_allocator(m, n, dtype)
        assert_close(sm90(x, wg, wu, bg, bu, approximate), reference(x, wg, wu, bg, bu, approximate), dtype, k)


DECODE_TOKENS = 4  # kDecodeTokens (fused_gemm_router.cpp): the op's route to the decode linear
SWAPAB_TOKENS = 32  # kSwapAbTokens: the op's route to the swap-AB gate/up


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 8, 15, 16, 17, 31, SWAPAB_TOKENS])
def test_swapab_gate_up_odd_sizes(sm90, m, dtype):
    """The swap-AB gate/up's token counts (one tile of 16 and a partial one, two tiles)
    over K that ends mid-tile (multiples of 8, not of 64) and hidden sizes that end
    mid-tile (64 units), with a padded x row stride, every epilogue option."""
    cases = [(8, 1), (72, 13), (520, 1003), (4104, 40), (3072, 24), (1032, 9000)]
    for i, (k, n) in enumerate(cases * 2):  # each shape with two of the epilogue options
        approximate, (has_bg, has_bu), merged = case_options(i + 3 * m)
        x = rand((m, k + 16), dtype, 81 + i)[:, :k]
        w = rand((2 * n, k), dtype, 82 + i, scale=k**-0.5)
        wg, wu = (w[:n], w[n:]) if merged else (w[:n].clone(), w[n:].clone())
        bg = rand((n,), dtype, 83) if has_bg else None
        bu = rand((n,), dtype, 84) if has_bu else None
        poison_allocator(m, n, dtype)
        assert_close(sm90(x, wg, wu, bg, bu, approximate), reference(x, wg, wu, bg, bu, approximate), dtype, k)


def test_swapab_gate_up_weights_over_2_31_elements(sm90):
    """A merged weight of > 2^31 elements: the up rows (past element 2^31) and the last
    hidden units, where 32-bit row offsets would wrap."""
    dtype = torch.bfloat16
    k, n = 8192, (1 << 17) + 8  # 2n * k > 2^31
    w = torch.randn((2 * n, k), device="cuda", dtype=dtype).mul_(k**-0.5)
    x = rand((3, k), dtype, 91)
    y = sm90(x, w[:n], w[n:], None, None, "tanh")
    tail = slice(n - 100, n)
    expected = reference(x, w[:n][tail], w[n:][tail], None, None, "tanh")
    assert_close(y[:, tail], expected, dtype, k)


@pytest.mark.parametrize("approximate", ["tanh", "none"])
@pytest.mark.parametrize("biases", ["none", "gate", "up", "both"])
@pytest.mark.parametrize("merged", [False, True])
def test_every_epilogue_option(sm90, approximate, biases, merged):
    m, k, n, dtype = 300, 512, 1000, torch.bfloat16
    x = rand((m, k), dtype, 11)
    w = rand((2 * n, k), dtype, 12, scale=k**-0.5)
    wg, wu = (w[:n], w[n:]) if merged else (w[:n].clone(), w[n:].clone())
    bg = rand((n,), dtype, 13) if biases in ("gate", "both") else None
    bu = rand((n,), dtype, 14) if biases in ("up", "both") else None
    poison_allocator(m, n, dtype)
    assert_close(sm90(x, wg, wu, bg, bu, approximate), reference(x, wg, wu, bg, bu, approximate), dtype, k)


def test_up_before_gate_in_memory(sm90):
    """w_up at a lower address than w_gate (the engine must not assume their order)."""
    m, k, n, dtype = 257, 256, 384, torch.float16
    w = rand((2 * n, k), dtype, 21, scale=k**-0.5)
    x = rand((m, k), dtype, 22)
    wg, wu = w[n:], w[:n]
    assert_close(sm90(x, wg, wu, None, None, "tanh"), reference(x, wg, wu, None, None, "tanh"), dtype, k)


def test_row_strided_x(sm90):
    """x as a view whose rows are longer than K (16-byte aligned row stride)."""
    m, k, n, dtype = 100, 64, 128, torch.bfloat16
    buf = rand((m, k + 64), dtype, 31)
    x = buf[:, :k]
    wg, wu = rand((n, k), dtype, 32, scale=k**-0.5), rand((n, k), dtype, 33, scale=k**-0.5)
    assert_close(sm90(x, wg, wu, None, None, "none"), reference(x, wg, wu, None, None, "none"), dtype, k)


def test_more_than_2_31_elements(sm90):
    """x with > 2**31 elements: checked on its last rows, where 32-bit offsets would wrap."""
    dtype = torch.bfloat16
    m, k, n = (1 << 31) // 4096 + 300, 4096, 64
    x = torch.randn((m, k), device="cuda", dtype=dtype)
    wg, wu = rand((n, k), dtype, 41, scale=k**-0.5), rand((n, k), dtype, 42, scale=k**-0.5)
    y = sm90(x, wg, wu, None, None, "tanh")
    tail = slice(m - 300, m)
    assert_close(y[tail], reference(x[tail], wg, wu, None, None, "tanh"), dtype, k)


@pytest.mark.profiler
def test_bad_arguments_and_calls_the_engine_does_not_take(sm90):
    """Bad arguments raise ValueError naming them. Calls the engine cannot take (float32,
    a view at an odd element offset, which TMA cannot address, rows that are not whole
    16-byte words) run torch's GEMM and the geglu kernel instead, with the same result."""
    dtype = torch.bfloat16
    x, wg, wu = rand((16, 64), dtype, 51), rand((32, 64), dtype, 52), rand((32, 64), dtype, 53)
    with pytest.raises(ValueError, match="w_up"):
        sm90(x, wg, wu[:16], None, None, "tanh")
    with pytest.raises(ValueError, match="approximate"):
        sm90(x, wg, wu, None, None, "erf")
    with pytest.raises(ValueError, match="b_gate"):
        sm90(x, wg, wu, rand((31,), dtype, 54), None, "tanh")
    odd_view = rand((16 * 64 + 1,), dtype, 55)[1:].view(16, 64)
    k60 = rand((16, 60), dtype, 56), rand((32, 60), dtype, 57), rand((32, 60), dtype, 58)
    for what, (xx, g, u) in [("float32", (x.float(), wg.float(), wu.float())), ("odd offset", (odd_view, wg, wu)), ("K = 60", k60)]:
        names = _cuda_kernel_names(lambda: sm90(xx, g, u, None, None, "tanh"))
        assert not any("geglu_sm90" in n or "geglu_swapab" in n for n in names), (what, names)
        assert_close(sm90(xx, g, u, None, None, "tanh"), reference(xx, g, u, None, None, "tanh"), xx.dtype, xx.shape[1])


@pytest.mark.profiler
def test_linear_routes_to_the_engine_where_it_serves(sm90, kernel, monkeypatch):
    """geglu_linear without gradients: the native op, which runs the engine for aligned
    bf16/fp16 operands (the swap-AB gate/up at <= 32 tokens); with gradients, the
    composition (no native op)."""
    lin = kernel.linear
    calls = []
    real_ops = lin.ops

    class Spy:
        def __getattr__(self, name):
            op = getattr(real_ops, name)
            if name == "_geglu_linear":
                spied = lambda *a: (calls.append(name), op(*a))[1]  # noqa: E731
                spied.default = spied
                return spied
            return op

    monkeypatch.setattr(lin, "ops", Spy())
    dtype = torch.bfloat16
    x, w = rand((64, 256), dtype, 61), rand((512, 256), dtype, 62, scale=1 / 16)
    expected = reference(x, w[:256], w[256:], None, None, "tanh")
    for m, engine in [(64, "geglu_sm90"), (16, "geglu_swapab")]:
        calls.clear()
        with torch.no_grad():
            names = _cuda_kernel_names(lambda: kernel.geglu_linear(x[:m], w))
            y = kernel.geglu_linear(x[:m], w)
        assert calls == ["_geglu_linear"] * 2 and any(engine in n for n in names), (m, names)
        assert_close(y, expected[:m], dtype, 256)
    calls.clear()
    kernel.geglu_linear(x, w.requires_grad_())
    assert calls == [], "a call that needs gradients takes the composition"


def _cuda_kernel_names(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def mlp_reference(x, wg, wu, wd, bd, residual, approximate):
    y = reference(x, wg, wu, None, None, approximate) @ wd.double().t()
    return y + (0 if bd is None else bd.double()) + (0 if residual is None else residual.double())


@pytest.mark.profiler
def test_mlp_op_runs_the_engine_or_the_swapab_and_decode_kernels_where_they_serve(sm90, kernel):
    """The per-layer op _geglu_mlp picks its kernels in C++: for an aligned bf16 call the
    swap-AB gate/up at <= 32 tokens (with the decode linear as the down projection at
    <= 4; above, torch's GEMM for this small down weight, under the split-K kernel's 48
    MiB), the engine above 32 (no activation pass after either), cuBLAS + the geglu
    kernel for a misaligned x; the result matches the float64 reference each way."""
    dtype = torch.bfloat16
    x, w = rand((64, 256), dtype, 71), rand((512, 256), dtype, 72, scale=1 / 16)
    wd = rand((256, 256), dtype, 73, scale=1 / 16)
    expected = mlp_reference(x, w[:256], w[256:], wd, None, None, "tanh")
    for what, xx, gate_up, down in [
        ("aligned bf16", x, "engine", "cuBLAS"),
        ("4 tokens", x[:4].clone(), "swap-AB", "decode"),
        ("5 tokens", x[:5].clone(), "swap-AB", "cuBLAS"),
        ("32 tokens", x[:32].clone(), "swap-AB", "cuBLAS"),
        ("33 tokens", x[:33].clone(), "engine", "cuBLAS"),
        ("misaligned x", rand((64 * 256 + 1,), dtype, 74)[1:].view(64, 256), "cuBLAS", "cuBLAS"),
    ]:
        xx.copy_(x[: xx.shape[0]])
        with torch.no_grad():
            names = _cuda_kernel_names(lambda: kernel.geglu_mlp(xx, w, None, wd))
            y = kernel.geglu_mlp(xx, w, None, wd)
        ran = {
            "engine": any("geglu_sm90" in n for n in names),
            "swap-AB": any("geglu_swapab" in n for n in names),
            "decode down": any("decode_linear" in n for n in names),
            "split-K down": any("linear_swapab" in n for n in names),
        }
        expected_ran = {
            "engine": gate_up == "engine",
            "swap-AB": gate_up == "swap-AB",
            "decode down": down == "decode",
            "split-K down": False,
        }
        assert ran == expected_ran, (what, names)
        torch.testing.assert_close(y.double(), expected[: xx.shape[0]].to(y.device), atol=0.05, rtol=0.05)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", range(1, DECODE_TOKENS + 1))
def test_mlp_decode_down_projection_odd_sizes(sm90, kernel, m, dtype):
    """_geglu_mlp at 1-4 tokens (swap-AB gate/up and decode linear, h and y in one buffer): hidden
    sizes (the down projection's K) whose two segments end mid-chunk or hold one 16-byte
    word, output widths that end mid-block (y's elements not a multiple of 8, h after
    them at the next 16-byte boundary), b_down and a residual with a padded row stride,
    each alone and together, a 3-d x."""
    cases = [(8, 8, 1), (24, 16, 13), (72, 520, 41), (64, 4104, 1003), (256, 1032, 300), (128, 16392, 24)]
    for i, (k, hidden, n) in enumerate(cases):
        x = rand((1, m, k), dtype, 101 + i)
        w = rand((2 * hidden, k), dtype, 102 + i, scale=k**-0.5)
        wd = rand((n, hidden), dtype, 103 + i, scale=hidden**-0.5)
        bd = rand((n,), dtype, 104) if i % 2 == 0 else None
        residual = rand((m, n + 8), dtype, 105)[:, :n].unsqueeze(0) if i % 3 != 1 else None
        poison_allocator(m, n + hidden + 8, dtype)  # the size of the op's one buffer: y, then h
        with torch.no_grad():
            y = kernel.geglu_mlp(x, w, None, wd, (None, None, bd), residual)
        expected = mlp_reference(x[0], w[:hidden], w[hidden:], wd, bd, None if residual is None else residual[0], "tanh")
        assert y.shape == (1, m, n) and y.is_contiguous()
        assert_close(y[0], expected, dtype, hidden)


@pytest.mark.profiler
def test_mlp_decode_opcheck(sm90, kernel):
    """opcheck (schema, fake registration, AOT dispatch) of _geglu_mlp where the swap-AB
    gate/up and the decode linear run: its output is a view, at offset 0, of the one
    buffer that also holds h."""
    dtype = torch.bfloat16
    x, w = rand((1, 3, 256), dtype, 131), rand((1024, 256), dtype, 132, scale=1 / 16)
    wd, residual = rand((136, 512), dtype, 133, scale=512**-0.5), rand((1, 3, 136), dtype, 134)
    op = kernel._ops.ops._geglu_mlp.default
    with torch.no_grad():
        names = _cuda_kernel_names(lambda: op(x, w, None, wd, None, None, None, residual, "tanh"))
    assert any("geglu_swapab" in n for n in names) and any("decode_linear" in n for n in names), names
    torch.library.opcheck(op, (x, w, None, wd, None, None, None, residual, "tanh"))


def test_mlp_decode_broadcast_operands(sm90, kernel):
    """Operands the decode linear and the swap-AB gate/up do not read, broadcast with row
    stride 0 (a residual shared by the tokens; an x whose two tokens are one row), take
    torch's GEMMs with the same result, never a refusal. Their h is rounded to bf16 three
    times, as eager's is (torch's GEMM writes [gate | up], the geglu kernel rounds
    gelu(gate) before the multiply and the product), where the engine's is rounded once."""
    dtype = torch.bfloat16
    w = rand((1024, 256), dtype, 122, scale=1 / 16)
    wd = rand((200, 512), dtype, 123, scale=512**-0.5)
    for x, residual in [
        (rand((2, 256), dtype, 121), rand((200,), dtype, 124).expand(2, 200)),
        (rand((256,), dtype, 125).expand(2, 256), None),
    ]:
        with torch.no_grad():
            y = kernel.geglu_mlp(x, w, None, wd, None, residual)
        ref = mlp_reference(x, w[:512], w[512:], wd, None, residual, "tanh")
        assert_close(y, ref, dtype, 512, roundings=3)


# Down weights of >= 48 MiB (the split-K kernel's threshold, fused_gemm_router.cpp): odd sizes,
# hidden (its K) past a 64-column tile, N not a multiple of 4 (the partial sums' padded
# rows) nor of 128; and an output too wide for the decode linear's one wave at 2 tokens.
SPLITK_CASES = [(5, 8392, 3001), (16, 8392, 3001), (17, 8200, 3072), (32, 8392, 3001), (2, 4096, 6500)]


def splitk_operands(m, hidden, n, dtype, seed, k=64):
    """x [1, m, k], the merged gate/up weight, a down weight of >= 48 MiB, b_down (odd m),
    a residual with a padded row stride."""
    x = rand((1, m, k), dtype, seed)
    w = rand((2 * hidden, k), dtype, seed + 1, scale=k**-0.5)
    wd = rand((n, hidden), dtype, seed + 2, scale=hidden**-0.5)
    assert n * hidden * 2 >= 48 << 20
    bd = rand((n,), dtype, seed + 3) if m % 2 else None
    residual = rand((m, n + 8), dtype, seed + 4)[:, :n].unsqueeze(0)
    return x, w, wd, bd, residual


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", SPLITK_CASES, ids=lambda c: f"M{c[0]}-H{c[1]}-N{c[2]}")
def test_mlp_splitk_down_projection(sm90, kernel, case, dtype):
    """_geglu_mlp at up to 32 tokens with a large down weight (the swap-AB gate/up, then
    the split-K swap-AB linear; y, h and its workspace in one buffer), with b_down and a
    padded residual, against the float64 reference."""
    m, hidden, n = case
    x, w, wd, bd, residual = splitk_operands(m, hidden, n, dtype, 141)
    poison_allocator(m, n + hidden + 64 * (n + 4), dtype)  # per token: y, h, <= 32 splits' float32 partials
    with torch.no_grad():
        y = kernel.geglu_mlp(x, w, None, wd, (None, None, bd), residual)
    expected = mlp_reference(x[0], w[:hidden], w[hidden:], wd, bd, residual[0], "tanh")
    assert y.shape == (1, m, n) and y.is_contiguous()
    assert_close(y[0], expected, dtype, hidden)


@pytest.mark.profiler
@pytest.mark.parametrize("case", [SPLITK_CASES[1], SPLITK_CASES[-1]], ids=lambda c: f"M{c[0]}-H{c[1]}-N{c[2]}")
def test_mlp_splitk_route(sm90, kernel, case):
    """test_mlp_splitk_down_projection's calls run the swap-AB gate/up and the split-K
    linear and nothing else: not the decode linear (even at 2 tokens, where this output
    is too wide for its one wave), not torch's GEMM."""
    x, w, wd, bd, residual = splitk_operands(*case, torch.bfloat16, 141)
    with torch.no_grad():
        names = _cuda_kernel_names(lambda: kernel.geglu_mlp(x, w, None, wd, (None, None, bd), residual))
    assert any("geglu_swapab" in s for s in names) and any("linear_swapab" in s for s in names), names
    # Nothing else (a stream's first split-K call zeroes its arrival counters: a memset).
    assert all("geglu_swapab" in s or "linear_swapab" in s or s.startswith("Memset") for s in names), names


@pytest.mark.parametrize("k", [128, 3072], ids=["split-K", "one-kernel"])
def test_mlp_splitk_graph_replay_and_two_streams(sm90, kernel, k):
    """The split-K route (x narrower than the output) and the one-kernel MLP (x as wide)
    captured into CUDA graphs (the first call of a capture, which makes that capture's
    counters, happens inside it) and replayed with new inputs; two graphs captured on
    one stream replayed on two streams at once; calls alternating between two streams.
    Every result against the float64 reference, and opcheck of the op on this route."""
    dtype, m, hidden, n = torch.bfloat16, 8, 8192, 3072
    w = rand((2 * hidden, k), dtype, 151, scale=k**-0.5)
    wd = rand((n, hidden), dtype, 152, scale=hidden**-0.5)
    op = kernel._ops.ops._geglu_mlp.default

    def expected(x):
        return mlp_reference(x, w[:hidden], w[hidden:], wd, None, None, "tanh")

    with torch.no_grad():
        xs = [rand((m, k), dtype, 153 + i) for i in range(2)]
        op(xs[0], w, None, wd, None, None, None, None, "tanh")  # the kernels' attributes, outside the capture
        torch.cuda.synchronize()
        capture_stream, graphs, ys = torch.cuda.Stream(), [], []
        for x in xs:
            graphs.append(torch.cuda.CUDAGraph())
            with torch.cuda.graph(graphs[-1], stream=capture_stream):
                ys.append(op(x, w, None, wd, None, None, None, None, "tanh"))
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        for seed in (160, 170):
            for i, x in enumerate(xs):
                x.copy_(rand((m, k), dtype, seed + i))
                ys[i].fill_(float("nan"))
            torch.cuda.synchronize()
            for _ in range(3):  # both graphs in flight at once, each replay ordered after its last
                for g, s in zip(graphs, streams):
                    with torch.cuda.stream(s):
                        g.replay()
            torch.cuda.synchronize()
            for x, y in zip(xs, ys):
                assert_close(y, expected(x), dtype, hidden)
        xs = [rand((m, k), dtype, 180 + i) for i in range(6)]
        outs = []
        torch.cuda.synchronize()
        for i, x in enumerate(xs):
            with torch.cuda.stream(streams[i % 2]):
                outs.append(op(x, w, None, wd, None, None, None, None, "tanh"))
        torch.cuda.synchronize()
        for x, y in zip(xs, outs):
            assert_close(y, expected(x), dtype, hidden)
    torch.library.opcheck(op, (xs[0], w, None, wd, None, None, None, None, "tanh"))


# The one-kernel MLP (mlp_fused_sm90.cu) takes the calls of 1-32 tokens with a down weight
# of >= 48 MiB that maps back to x's width, as a transformer MLP's does (w_down [dim,
# hidden]), ahead of the decode linear and the split-K kernel, and those of 5-32 tokens
# with one of 40-48 MiB (Gemma-2-2B's): odd widths (dim not a multiple of 128, hidden past
# a 64-column tile), 17 tokens (two token tiles), and 2 tokens with an output too wide for
# the decode linear's one wave.
ONE_KERNEL_CASES = [(1, 3000, 8392), (2, 6504, 4104), (4, 3072, 8200), (5, 3000, 8392), (16, 3000, 8392),
                    (17, 3072, 8200), (32, 3000, 8392), (8, 2304, 9216)]


def one_kernel_operands(m, dim, hidden, dtype, seed):
    """x [1, m, dim] with a padded row stride, separate gate/up weights and biases, the down
    weight (>= 40 MiB), b_down and a residual with a padded row stride."""
    x = rand((m, dim + 8), dtype, seed)[:, :dim].unsqueeze(0)
    wg = rand((hidden, dim), dtype, seed + 1, scale=dim**-0.5)
    wu = rand((hidden, dim), dtype, seed + 2, scale=dim**-0.5)
    wd = rand((dim, hidden), dtype, seed + 3, scale=hidden**-0.5)
    assert dim * hidden * 2 >= 40 << 20
    biases = tuple(rand((n,), dtype, seed + 4 + i) for i, n in enumerate((hidden, hidden, dim)))
    residual = rand((m, dim + 8), dtype, seed + 7)[:, :dim].unsqueeze(0)
    return x, wg, wu, wd, biases, residual


def one_kernel_reference(x, wg, wu, wd, biases, residual, approximate):
    bg, bu, bd = biases
    y = reference(x, wg, wu, bg, bu, approximate) @ wd.double().t()
    return y + (0 if bd is None else bd.double()) + (0 if residual is None else residual.double())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ONE_KERNEL_CASES, ids=lambda c: f"M{c[0]}-D{c[1]}-H{c[2]}")
def test_mlp_one_kernel(sm90, kernel, case, dtype):
    """_geglu_mlp where the one-kernel MLP serves it, against the float64 reference: every
    bias, a residual, both GELUs (alternating by case), and without the optional operands."""
    m, dim, hidden = case
    approximate = "tanh" if (m + (dtype == torch.float16)) % 2 else "none"
    x, wg, wu, wd, biases, residual = one_kernel_operands(m, dim, hidden, dtype, 191)
    poison_allocator(m, dim + hidden + 64 * (dim + 4), dtype)  # per token: y, h, <= 32 splits' float32 partials
    with torch.no_grad():
        y = kernel.geglu_mlp(x, wg, wu, wd, biases, residual, approximate)
    assert y.shape == (1, m, dim) and y.is_contiguous()
    assert_close(y[0], one_kernel_reference(x[0], wg, wu, wd, biases, residual[0], approximate), dtype, hidden)
    poison_allocator(m, dim + hidden + 64 * (dim + 4), dtype)
    with torch.no_grad():
        y = kernel.geglu_mlp(x, wg, wu, wd, None, None, approximate)
    assert_close(y[0], one_kernel_reference(x[0], wg, wu, wd, (None,) * 3, None, approximate), dtype, hidden)


@pytest.mark.profiler
@pytest.mark.parametrize("case", [ONE_KERNEL_CASES[0], ONE_KERNEL_CASES[4]], ids=lambda c: f"M{c[0]}-D{c[1]}-H{c[2]}")
def test_mlp_one_kernel_route(sm90, kernel, case):
    """test_mlp_one_kernel's calls run one kernel, the fused MLP, and nothing else (a
    stream's first call zeroes its counters: a memset); with a merged gate/up weight too."""
    x, wg, wu, wd, biases, residual = one_kernel_operands(*case, torch.bfloat16, 191)
    merged = torch.cat([wg, wu])
    for args in [(wg, wu, wd, biases, residual), (merged, None, wd, (None, None, biases[2]), None)]:
        with torch.no_grad():
            names = _cuda_kernel_names(lambda: kernel.geglu_mlp(x, *args))
        assert any("mlp_fused" in s for s in names), names
        assert all("mlp_fused" in s or s.startswith("Memset") for s in names), names


@pytest.mark.profiler
def test_mlp_one_kernel_under_48_mib_only_above_the_decode_linear(sm90, kernel):
    """With Gemma-2-2B's 40.5 MiB down weight the op runs the one kernel at 5-32 tokens (8
    here) and at 1-4 (2 here) the swap-AB gate/up and the decode linear; the results
    match the float64 reference either way."""
    for m, kernels in [(8, {"mlp_fused"}), (2, {"geglu_swapab", "decode_linear"})]:
        x, wg, wu, wd, biases, residual = one_kernel_operands(m, 2304, 9216, torch.bfloat16, 197)
        with torch.no_grad():
            names = _cuda_kernel_names(lambda: kernel.geglu_mlp(x, wg, wu, wd, biases, residual))
            y = kernel.geglu_mlp(x, wg, wu, wd, biases, residual)
        ran = {k for k in ("mlp_fused", "geglu_swapab", "decode_linear", "linear_swapab") if any(k in s for s in names)}
        assert ran == kernels, (m, names)
        assert_close(y[0], one_kernel_reference(x[0], wg, wu, wd, biases, residual[0], "tanh"), torch.bfloat16, 9216)


@pytest.mark.profiler
def test_mlp_decode_down_projection_wider_than_one_wave_runs_cublas(sm90, kernel):
    """An output width whose decode-linear grid would need a second wave of blocks
    (geglu_decode_sm90_linear_max_n: at most 6 blocks of 8 rows per SM), with a down
    weight under the split-K kernel's 48 MiB, stays on torch's GEMM, with the same
    result."""
    dtype = torch.bfloat16
    n = 8 * 6 * torch.cuda.get_device_properties(0).multi_processor_count + 8
    x, w = rand((2, 256), dtype, 111), rand((1024, 256), dtype, 112, scale=1 / 16)
    wd = rand((n, 512), dtype, 113, scale=512**-0.5)
    with torch.no_grad():
        names = _cuda_kernel_names(lambda: kernel.geglu_mlp(x, w, None, wd))
        y = kernel.geglu_mlp(x, w, None, wd)
    assert any("geglu_swapab" in s for s in names) and not any("decode_linear" in s for s in names), names
    assert not any("linear_swapab" in s for s in names), names
    assert_close(y, mlp_reference(x, w[:512], w[512:], wd, None, None, "tanh"), dtype, 512)


# ------------------------------------------------------------------ bias + GELU GEMM
# linear_bias_gelu on sm_90 runs the engine's bias + GELU GEMM (linear_gelu_sm90.cu) where
# geglu_kernels/cuda/fused_gemm_router.cpp routes it: M > 128, bf16/fp16, aligned rows, either
# GELU at any K.


def linear_gelu_reference(x, w, b, approximate):
    y = x.double() @ w.double().t() + (0 if b is None else b.double())
    return F.gelu(y, approximate=approximate)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("mkn", [(129, 64, 64), (1000, 1000, 1000), (300, 1600, 136), (4096, 1024, 4096), (257, 2048, 520)],
                         ids=lambda s: "x".join(map(str, s)))
def test_linear_bias_gelu_engine_against_float64(sm90, kernel, mkn, approximate, dtype):
    m, k, n = mkn
    for i, with_bias in enumerate([True, False]):
        x = rand((m, k), dtype, 81 + i)
        w = rand((n, k), dtype, 83 + i, scale=k**-0.5)
        b = rand((n,), dtype, 85 + i) if with_bias else None
        poison_allocator(m, n, dtype)
        with torch.no_grad():
            y = kernel.linear_bias_gelu(x, w, b, approximate=approximate)
        assert y.shape == (m, n) and y.dtype == dtype
        assert_close(y, linear_gelu_reference(x, w, b, approximate), dtype, k)


@pytest.mark.profiler
@pytest.mark.parametrize(
    "what,m,k,approximate,dtype,engine",
    [
        ("exact, 256 tokens", 256, 1024, "none", torch.bfloat16, True),
        ("tanh, K 1600", 256, 1600, "tanh", torch.float16, True),
        ("tanh, K 2048", 256, 2048, "tanh", torch.bfloat16, True),
        ("128 tokens: cuBLAS", 128, 1024, "none", torch.bfloat16, False),
        ("float32: cuBLAS", 256, 1024, "none", torch.float32, False),
    ],
)
def test_linear_bias_gelu_runs_the_engine_where_it_serves(sm90, kernel, what, m, k, approximate, dtype, engine):
    """The op _linear_bias_gelu picks its kernel in C++ by the measured table; the result
    matches the float64 reference either way, and a call that needs gradients never
    takes the engine (no derivative)."""
    x, w, b = rand((m, k), dtype, 91), rand((512, k), dtype, 92, scale=k**-0.5), rand((512,), dtype, 93)
    with torch.no_grad():
        names = _cuda_kernel_names(lambda: kernel.linear_bias_gelu(x, w, b, approximate=approximate))
        y = kernel.linear_bias_gelu(x, w, b, approximate=approximate)
    assert any("bias_gelu_gemm" in n for n in names) == engine, (what, names)
    torch.testing.assert_close(y.double(), linear_gelu_reference(x, w, b, approximate), atol=0.05, rtol=0.05)
    xg = x.clone().requires_grad_()
    names = _cuda_kernel_names(lambda: kernel.linear_bias_gelu(xg, w, b, approximate=approximate))
    assert not any("bias_gelu_gemm" in n for n in names), (what, "with grad", names)
