"""The Triton gate/up GEMM with the GeGLU epilogue (triton_kernels/gemm.py) against a
float64 reference: out = gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up).

Every kernel (one tile per program, split-K + the reduce kernel, the persistent TMA
kernel), unit and odd sizes, grids of several tiles in M, N and K, K ragged against
BLOCK_K and not, merged (row-offset views of one weight) and separate weights, each
bias or both or none, both GELUs, row-strided operands, the launch table's rows;
outputs NaN-poisoned first, so an element a kernel fails to write shows.

Without a GPU the kernels run under Triton's interpreter on CPU tensors (conftest
sets TRITON_INTERPRET=1 before anything imports triton), on small shapes and tiny
tiles: float16 and float32 only, as the interpreter's bfloat16 tl.dot returns garbage
(triton 3.9). Interpreted float32 is exact float32 math, so both dtypes are held to
conftest's storage tolerance. On a GPU the same tests run natively, bfloat16 too, plus
tensor-core tile shapes; there float32 operands enter tl.dot as TF32 (the kernel's
documented float32 mode), so float32 adds a bound for TF32's 10-bit mantissas.
The routes of the public functions to this kernel: tests/api/test_linear.py.
"""

import importlib

import pytest
import torch
import torch.nn.functional as F

from conftest import HAS_CUDA, STORAGE_TOLERANCE, poisoned_like

DEV = "cuda" if HAS_CUDA else "cpu"
DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if HAS_CUDA else [])
APPROX = ["tanh", "none"]


@pytest.fixture(scope="module")
def tg(kernel):
    """triton_kernels/gemm.py of the variant `kernels` loaded (every variant ships it)."""
    try:
        mod = importlib.import_module(f"{kernel.__name__}.triton_kernels.gemm")
    except ImportError as e:  # the module imports triton unconditionally
        pytest.skip(f"triton is not installed: {e}")
    if not HAS_CUDA and not mod.INTERPRET:
        pytest.fail("the kernel package was imported before TRITON_INTERPRET=1 was set")
    return mod


def rand(shape, dtype, scale=1.0, seed=0):
    """Fresh normal values (never all zeros) made in float64, then stored in dtype."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(device=DEV, dtype=dtype)


def operands(m, n, k, dtype, bias, merged, seed=1):
    """x [m, k]; w_gate, w_up [n, k] (row-offset views of one [2n, k] weight when
    merged), scaled 1/sqrt(k) so pre-activations are O(1), where GELU bends; biases."""
    x = rand((m, k), dtype, seed=seed)
    if merged:
        w = rand((2 * n, k), dtype, scale=k**-0.5, seed=seed + 1)
        wg, wu = w[:n], w[n:]
    else:
        wg = rand((n, k), dtype, scale=k**-0.5, seed=seed + 1)
        wu = rand((n, k), dtype, scale=k**-0.5, seed=seed + 2)
    bg = rand((n,), dtype, seed=seed + 3) if bias in ("both", "gate") else None
    bu = rand((n,), dtype, seed=seed + 4) if bias in ("both", "up") else None
    return x, wg, wu, bg, bu


def assert_matches_float64(out, x, wg, wu, bg, bu, approximate):
    """out against the float64 formula on the same stored operands: conftest's
    storage tolerance per element (float32 math throughout, then one rounding to the
    output dtype). Float32 on a GPU adds the TF32 input error: each operand keeps 10
    mantissa bits (rounded or truncated), so every product is off by < 2**-9 of its
    size, the gate and up sums by < 2**-9 * (|x| @ |w|.T), and the output by at most
    max|gelu'| (< 1.13) * |up| * e_gate + |gelu(gate)| * e_up + 1.13 * e_gate * e_up;
    twice that is allowed."""
    d = lambda t: None if t is None else t.double()  # noqa: E731
    gate, up = F.linear(d(x), d(wg), d(bg)), F.linear(d(x), d(wu), d(bu))
    ref = F.gelu(gate, approximate=approximate) * up
    tol = STORAGE_TOLERANCE[out.dtype]
    allowed = tol["atol"] + tol["rtol"] * ref.abs()
    if out.is_cuda and out.dtype == torch.float32:
        e_gate = 2.0**-9 * (d(x).abs() @ d(wg).abs().T)
        e_up = 2.0**-9 * (d(x).abs() @ d(wu).abs().T)
        act = F.gelu(gate, approximate=approximate).abs()
        allowed = allowed + 2 * (1.13 * up.abs() * e_gate + act * e_up + 1.13 * e_gate * e_up)
    assert out.shape == ref.shape
    assert not out.isnan().any(), f"{int(out.isnan().sum())} of {out.numel()} elements unwritten (NaN)"
    err = (out.double() - ref).abs()
    worst = int((err / allowed).argmax())
    i, j = divmod(worst, ref.shape[1])
    assert (err <= allowed).all(), (
        f"{int((err > allowed).sum())} elements off; worst [{i}, {j}]: {out[i, j].item()!r} vs {ref[i, j].item()!r}"
    )


# Explicit launches: GemmConfig(kernel, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps,
# num_stages, split_k). Tiny tiles give grids of several tiles at small sizes.
CONFIGS = {
    "tile": ("tile", 16, 16, 16, 1, 4, 1, 1),
    "tile-splitk3": ("tile", 16, 16, 16, 2, 4, 1, 3),  # 3 K slices + the reduce kernel, grouped order
    "tma": ("tma", 16, 16, 16, 2, 4, 1, 1),  # persistent: 3 programs loop over the tiles (interpreter)
}
if HAS_CUDA:  # tensor-core tile shapes as the GPU launch table uses them
    CONFIGS |= {
        "tile-64": ("tile", 64, 64, 64, 8, 4, 3, 1),
        "tile-splitk4-decode": ("tile", 16, 64, 128, 1, 4, 3, 4),
        "tma-128": ("tma", 128, 128, 64, 8, 8, 3, 1),
    }

# (M, N, K, bias, merged weights). K % 8 == 0 gives TMA-readable rows in both dtypes.
CASES = {
    "unit-1x1x1": (1, 1, 1, "none", False),  # rows of 2-4 bytes: TMA cannot read them, tile serves
    "ragged-21x24x40": (21, 24, 40, "both", False),  # M, N, K ragged against the tiles
    "even-48x32x64": (48, 32, 64, "gate", True),  # whole tiles only (EVEN_K)
    "odd-37x53x29": (37, 53, 29, "up", True),  # every size odd
    "decode-5x70x200": (5, 70, 200, "both", True),  # a few rows, 13 K tiles (splits of 5, 5, 3)
}


def config(tg, name):
    return tg.gemm_configs.GemmConfig(*CONFIGS[name])


@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_every_kernel_matches_float64(tg, dtype, cfg_name, case, approximate):
    m, n, k, bias, merged = CASES[case]
    cfg = config(tg, cfg_name)
    x, wg, wu, bg, bu = operands(m, n, k, dtype, bias, merged)
    ran = tg.select_config(x, wg, wu, cfg)
    if cfg.kernel == "tile":
        assert (ran.kernel, ran.split_k) == ("tile", cfg.split_k), ran
    elif k % 8 == 0 and tg._device_info(x.device).tma:
        assert ran.kernel == "tma", ran  # not silently the tile kernel
    out = tg.geglu_forward(x, wg, wu, bg, bu, approximate, config=cfg, out=poisoned_like(torch.empty((m, n), dtype=dtype, device=DEV)))
    assert_matches_float64(out, x, wg, wu, bg, bu, approximate)


@pytest.mark.parametrize("cfg_name", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_row_strided_operands_leave_padding_alone(tg, dtype, cfg_name):
    """x, the weights and the output are column slices of wider buffers (row stride >
    width; x and out start mid-row): each is read or written with its own row stride,
    and the output buffer's other columns stay NaN."""
    m, n, k = 19, 24, 40
    x = rand((m, k + 24), dtype, seed=1)[:, 8 : 8 + k]  # 16-byte aligned: TMA can read it
    w = rand((2 * n, k + 8), dtype, scale=k**-0.5, seed=2)[:, :k]
    wg, wu = w[:n], w[n:]
    bg, bu = rand((n,), dtype, seed=3), rand((n,), dtype, seed=4)
    buf = torch.full((m, n + 13), float("nan"), dtype=dtype, device=DEV)
    out = tg.geglu_forward(x, wg, wu, bg, bu, "tanh", config=config(tg, cfg_name), out=buf[:, 5 : 5 + n])
    assert_matches_float64(out, x, wg, wu, bg, bu, "tanh")
    assert buf[:, :5].isnan().all() and buf[:, 5 + n :].isnan().all(), "wrote outside its output"


@pytest.mark.parametrize("m", [5, 50, 100, 300])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_launch_table_rows(tg, dtype, m):
    """config=None: the launch table's row for M on this device. Under the interpreter
    the rows send M <= 64 through split-K, 64 < M <= 256 through the TMA kernel and
    larger M through the tile kernel with the automatic split-K (none: enough tiles)."""
    n, k = 24, 40
    x, wg, wu, bg, bu = operands(m, n, k, dtype, "both", merged=True, seed=m)
    if not HAS_CUDA:
        row = tg.gemm_configs.lookup("interpreter", m)
        expected = {5: ("tile", 2), 50: ("tile", 2), 100: ("tma", 1), 300: ("tile", 1)}[m]
        assert row.kernel == expected[0]
        ran = tg.select_config(x, wg, wu)
        assert (ran.kernel, ran.split_k) == expected, ran
    out = tg.geglu_forward(x, wg, wu, bg, bu, "none", out=poisoned_like(torch.empty((m, n), dtype=dtype, device=DEV)))
    assert_matches_float64(out, x, wg, wu, bg, bu, "none")
