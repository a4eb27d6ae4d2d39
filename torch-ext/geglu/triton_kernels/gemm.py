"""Triton gate/up GEMM with the GeGLU in its epilogue:

    out = gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up)        [M, hidden]

Each x tile feeds two accumulators, a gate tile and an up tile of BLOCK_N columns;
only [M, hidden] is written, so the [M, 2*hidden] pre-activations never reach memory.

Kernels:

- `_geglu_tma_kernel`: persistent (one program per SM looping over output tiles in
  grouped order for L2 reuse), operands streamed by TMA descriptors (sm90+). TMA
  zero-fills out-of-bounds boxes, so ragged M/N/K need no masks in the K loop.
- `_geglu_tile_kernel`: one output tile per program, pointer loads (any strides,
  any alignment, Ampere). With split_k > 1 each program covers a slice of K and
  writes float32 partials; `_geglu_splitk_reduce_kernel` sums them and runs the
  epilogue. That is the decode path: at M <= 64 the GEMM is bound by reading the
  weights once, and split-K keeps every SM streaming when N alone gives too few tiles.

Math: float32 accumulation; float16/bfloat16 operands feed the tensor cores as is;
float32 operands use TF32 tensor-core inputs (tl.dot's default), so the routes send
float32 here only while torch.backends.cuda.matmul.allow_tf32 is on, as torch's own
matmuls would use TF32 then. Offsets are int64, so operands beyond 2**31 elements index correctly.

Launch parameters come from `gemm_configs.TABLE` (no autotuning at run time); M is
never specialized on, so a new token count does not recompile. Under
TRITON_INTERPRET=1 (set before import) the kernels run on CPU tensors through
Triton's interpreter: the CPU tests call `geglu_forward` that way.
"""

import warnings
from contextlib import nullcontext
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import gemm_configs
from .activation import _gelu
from .gemm_configs import GemmConfig

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # triton < 3.4: no host-side TMA descriptors, tile kernel only
    TensorDescriptor = None

# The split-K reduction's tile.
_REDUCE_BLOCK_M = 16
_REDUCE_BLOCK_N = 128


# --------------------------------------------------------------------------- device code


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of a linear tile id in grouped order: GROUP_M consecutive M
    tiles walk the N tiles together, so a band of weight tiles stays in L2."""
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile_id // tiles_per_group) * GROUP_M
    group_size = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % tiles_per_group) % group_size
    pid_n = (tile_id % tiles_per_group) // group_size
    return pid_m, pid_n


@triton.jit
def _geglu_epilogue(
    acc_g, acc_u, offs_m, offs_n, M, N, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
    HAS_BIAS_GATE: tl.constexpr, HAS_BIAS_UP: tl.constexpr, APPROXIMATE_TANH: tl.constexpr,
):  # fmt: skip
    """gelu(acc_g + b_gate) * (acc_u + b_up) for the float32 tile at rows offs_m,
    columns offs_n; row/column tails masked here."""
    mask_n = offs_n < N
    if HAS_BIAS_GATE:
        acc_g = acc_g + tl.load(b_gate_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS_UP:
        acc_u = acc_u + tl.load(b_up_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    y = _gelu(acc_g, APPROXIMATE_TANH) * acc_u
    mask = (offs_m < M)[:, None] & mask_n[None, :]
    out = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M", "split_k", "stride_ws_split", "stride_ws_acc"])
def _geglu_tile_kernel(
    x_ptr, wg_ptr, wu_ptr, ws_ptr, split_k, M, N, K, stride_xm, stride_wgn, stride_wun, stride_ws_split, stride_ws_acc,
    b_gate_ptr, b_up_ptr, out_ptr, stride_om,
    HAS_BIAS_GATE: tl.constexpr, HAS_BIAS_UP: tl.constexpr, APPROXIMATE_TANH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PARTIALS: tl.constexpr,  # split_k > 1: write float32 partials, the reduce kernel finishes
    EVEN_K: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    split = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_x = (offs_m < M)[:, None]
    mask_w = (offs_n < N)[:, None]
    rows = offs_m.to(tl.int64)
    cols = offs_n.to(tl.int64)

    k_tiles = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles, split_k)
    k_first = split * k_per_split
    k_last = tl.minimum(k_first + k_per_split, k_tiles)
    k_start = (k_first * BLOCK_K).to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + (k_start + offs_k)[None, :]
    wg_ptrs = wg_ptr + cols[:, None] * stride_wgn + (k_start + offs_k)[None, :]
    wu_ptrs = wu_ptr + cols[:, None] * stride_wun + (k_start + offs_k)[None, :]
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(k_first, k_last):
        if EVEN_K:
            a = tl.load(x_ptrs, mask=mask_x, other=0.0)
            bg = tl.load(wg_ptrs, mask=mask_w, other=0.0)
            bu = tl.load(wu_ptrs, mask=mask_w, other=0.0)
        else:
            k_mask = (offs_k < K - kt * BLOCK_K)[None, :]
            a = tl.load(x_ptrs, mask=mask_x & k_mask, other=0.0)
            bg = tl.load(wg_ptrs, mask=mask_w & k_mask, other=0.0)
            bu = tl.load(wu_ptrs, mask=mask_w & k_mask, other=0.0)
        acc_g = tl.dot(a, tl.trans(bg), acc_g)
        acc_u = tl.dot(a, tl.trans(bu), acc_u)
        x_ptrs += BLOCK_K
        wg_ptrs += BLOCK_K
        wu_ptrs += BLOCK_K

    if PARTIALS:
        # float32 partials [split_k, 2, M, N] (gate, up); the reduce kernel runs the epilogue.
        mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        ws = ws_ptr + split.to(tl.int64) * stride_ws_split + rows[:, None] * N + offs_n[None, :]
        tl.store(ws, acc_g, mask=mask)
        tl.store(ws + stride_ws_acc, acc_u, mask=mask)
    else:
        _geglu_epilogue(
            acc_g, acc_u, offs_m, offs_n, M, N, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
            HAS_BIAS_GATE, HAS_BIAS_UP, APPROXIMATE_TANH,
        )  # fmt: skip


@triton.jit(do_not_specialize=["M", "split_k", "stride_ws_split", "stride_ws_acc"])
def _geglu_splitk_reduce_kernel(
    ws_ptr, split_k, stride_ws_split, stride_ws_acc, M, N, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
    HAS_BIAS_GATE: tl.constexpr, HAS_BIAS_UP: tl.constexpr, APPROXIMATE_TANH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    ws = ws_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(split_k):  # walk the slices by pointer increments: 64-bit addresses
        acc_g += tl.load(ws, mask=mask, other=0.0)
        acc_u += tl.load(ws + stride_ws_acc, mask=mask, other=0.0)
        ws += stride_ws_split
    _geglu_epilogue(
        acc_g, acc_u, offs_m, offs_n, M, N, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
        HAS_BIAS_GATE, HAS_BIAS_UP, APPROXIMATE_TANH,
    )  # fmt: skip


@triton.jit(do_not_specialize=["M"])
def _geglu_tma_kernel(
    x_desc, wg_desc, wu_desc, M, N, K, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
    HAS_BIAS_GATE: tl.constexpr, HAS_BIAS_UP: tl.constexpr, APPROXIMATE_TANH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr,
):  # fmt: skip
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    # The epilogue recomputes its tile's coordinates from a second counter rather than
    # carrying them across the K loop (as Triton's persistent matmul tutorial does).
    tile_id_c = start - NUM_SMS
    for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = x_desc.load([off_m, off_k])
            acc_g = tl.dot(a, wg_desc.load([off_n, off_k]).T, acc_g)
            acc_u = tl.dot(a, wu_desc.load([off_n, off_k]).T, acc_u)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _tile_coords(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        _geglu_epilogue(
            acc_g, acc_u, offs_m, offs_n, M, N, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
            HAS_BIAS_GATE, HAS_BIAS_UP, APPROXIMATE_TANH,
        )  # fmt: skip


INTERPRET = type(_geglu_tile_kernel).__name__ == "InterpretedFunction"
# Programs of the persistent kernel under the interpreter: a few, so the tile loop runs.
_INTERPRETER_SMS = 3


# --------------------------------------------------------------------------- host side


class _Device:
    """What the launcher needs to know about a GPU (cached per device)."""

    def __init__(self, device: torch.device):
        if device.type == "cuda" and not INTERPRET:
            index = device.index if device.index is not None else torch.cuda.current_device()
            props = torch.cuda.get_device_properties(index)
            self.capability: Optional[Tuple[int, int]] = (props.major, props.minor)
            self.num_sms = props.multi_processor_count
            try:  # what a kernel may opt into (227 KB on Hopper), as Triton checks it
                self.smem = triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"]
            except Exception:  # noqa: BLE001 - an older driver interface
                self.smem = getattr(props, "shared_memory_per_block_optin", 0) or 99 * 1024
            self.tma = TensorDescriptor is not None and props.major >= 9 and torch.version.hip is None
        else:
            self.capability = None
            self.num_sms = _INTERPRETER_SMS
            self.smem = 1 << 30
            self.tma = TensorDescriptor is not None
        self.arch = gemm_configs.arch_key(self.capability)


_DEVICES = {}
_TMA_BROKEN = set()  # dtypes whose TMA kernel failed to build: the tile kernel serves them
_STAGES_FIT = {}  # (config, dtype, arch) -> num_stages that fit shared memory


def _device_info(device: torch.device) -> _Device:
    key = (device.type, device.index)
    if key not in _DEVICES:
        _DEVICES[key] = _Device(device)
    return _DEVICES[key]


def _tma_ready(t: torch.Tensor) -> bool:
    """TMA reads a 2-d row-major matrix: 16-byte aligned base, unit column stride,
    16-byte aligned row stride, rows not overlapping."""
    size = t.element_size()
    return (
        t.stride(1) == 1 and t.stride(0) >= t.shape[1] and t.data_ptr() % 16 == 0 and (t.stride(0) * size) % 16 == 0
    )


def _smem_bytes(cfg: GemmConfig, elem: int) -> int:
    return cfg.num_stages * (cfg.block_m + 2 * cfg.block_n) * cfg.block_k * elem


def select_config(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, config: Optional[GemmConfig] = None):
    """The launch table's row for this call (or `config`, as the tuner and tests pass),
    adjusted to the operands: the TMA kernel only where TMA can read every operand,
    the stage count within shared memory, the automatic split-K resolved."""
    dev = _device_info(x.device)
    m, k = x.shape
    cfg = gemm_configs.lookup(dev.arch, m) if config is None else config
    if cfg.kernel == "tma" and not (
        dev.tma and x.dtype not in _TMA_BROKEN and _tma_ready(x) and _tma_ready(w_gate) and _tma_ready(w_up)
    ):
        cfg = cfg._replace(kernel="tile", split_k=1)
    fit_key = (cfg, x.dtype, dev.arch)
    if fit_key not in _STAGES_FIT:
        stages = cfg.num_stages
        while stages > 1 and _smem_bytes(cfg._replace(num_stages=stages), x.element_size()) > dev.smem:
            stages -= 1
        _STAGES_FIT[fit_key] = stages
    cfg = cfg._replace(num_stages=_STAGES_FIT[fit_key])
    if cfg.kernel == "tile" and cfg.split_k == 0:
        cfg = cfg._replace(split_k=auto_split_k(m, w_gate.shape[0], k, cfg, dev.num_sms))
    return cfg


def auto_split_k(m: int, n: int, k: int, cfg: GemmConfig, num_sms: int) -> int:
    """K slices for a grid too small to fill the GPU: the fewest that give at least one
    program per SM with >= 90% of the last wave busy (the best fill if none does),
    each slice keeping >= 4 K tiles so the float32 partials stay small next to the
    weight read; at most 16."""
    tiles = triton.cdiv(m, cfg.block_m) * triton.cdiv(n, cfg.block_n)
    max_split = min(16, triton.cdiv(k, cfg.block_k) // 4)
    if tiles >= num_sms or max_split <= 1:
        return 1

    def fill(split):
        programs = tiles * split
        return programs / (triton.cdiv(programs, num_sms) * num_sms)

    for split in range(2, max_split + 1):
        if tiles * split >= num_sms and fill(split) >= 0.9:
            return split
    return max(range(1, max_split + 1), key=lambda s: (fill(s), s))


def _with_fewer_stages(run, cfg: GemmConfig) -> None:
    """Launch; on shared-memory exhaustion retry with one stage fewer (the epilogue's
    layout conversions need scratch beyond the pipeline buffers that _smem_bytes counts)."""
    while True:
        try:
            run(cfg)
            return
        except triton.runtime.errors.OutOfResources:
            if cfg.num_stages <= 1:
                raise
            cfg = cfg._replace(num_stages=cfg.num_stages - 1)


def geglu_forward(x, w_gate, w_up, b_gate, b_up, approximate: str, config: Optional[GemmConfig] = None, out=None):
    """gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up) as [M, hidden].

    x: [M, K] with unit column stride; w_gate, w_up: [hidden, K] with unit column
    stride (views of one merged weight are fine); biases [hidden] or None; every size
    >= 1 (callers route empty problems elsewhere). `out`: an optional preallocated
    [M, hidden] result with unit column stride (tests pass NaN-poisoned ones)."""
    m, k = x.shape
    n = w_gate.shape[0]
    if out is None:
        out = torch.empty((m, n), device=x.device, dtype=x.dtype)
    cfg = select_config(x, w_gate, w_up, config)
    flags = dict(HAS_BIAS_GATE=b_gate is not None, HAS_BIAS_UP=b_up is not None, APPROXIMATE_TANH=approximate == "tanh")
    epilogue_args = (b_gate, b_up, out, out.stride(0))
    # Triton launches on the current device; switch only when the tensors live elsewhere.
    on_other_gpu = x.device.type == "cuda" and x.device.index != torch.cuda.current_device()
    with torch.cuda.device(x.device) if on_other_gpu else nullcontext():
        if cfg.kernel == "tma":
            try:
                _launch_tma(x, w_gate, w_up, epilogue_args, cfg, flags)
                return out
            except Exception as e:  # noqa: BLE001 - a compiler that cannot build the TMA kernel
                if config is not None or INTERPRET:
                    raise
                warnings.warn(f"geglu: the TMA GEMM kernel failed ({type(e).__name__}: {e}); using the tile kernel")
                _TMA_BROKEN.add(x.dtype)
                cfg = select_config(x, w_gate, w_up)
        _launch_tile(x, w_gate, w_up, epilogue_args, cfg, flags)
    return out


def _launch_tma(x, w_gate, w_up, epilogue_args, cfg: GemmConfig, flags) -> None:
    dev = _device_info(x.device)
    m, k = x.shape
    n = w_gate.shape[0]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    x_desc = TensorDescriptor(x, [m, k], [x.stride(0), 1], [bm, bk])
    wg_desc, wu_desc = (TensorDescriptor(w, [n, k], [w.stride(0), 1], [bn, bk]) for w in (w_gate, w_up))
    grid = (min(dev.num_sms, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)

    def run(c):
        _geglu_tma_kernel[grid](
            x_desc, wg_desc, wu_desc, m, n, k, *epilogue_args, **flags, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
            GROUP_M=c.group_m, NUM_SMS=dev.num_sms, FLATTEN=c.flatten, num_warps=c.num_warps, num_stages=c.num_stages,
        )  # fmt: skip

    _with_fewer_stages(run, cfg)


def _launch_tile(x, w_gate, w_up, epilogue_args, cfg: GemmConfig, flags) -> None:
    m, k = x.shape
    n = w_gate.shape[0]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    split = max(cfg.split_k, 1)
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    ws = torch.empty((split, 2, m, n), device=x.device, dtype=torch.float32) if split > 1 else None
    stride_split, stride_acc = (0, 0) if ws is None else (ws.stride(0), ws.stride(1))

    def run(c):
        _geglu_tile_kernel[(tiles, split)](
            x, w_gate, w_up, ws, split, m, n, k, x.stride(0), w_gate.stride(0), w_up.stride(0), stride_split,
            stride_acc, *epilogue_args, **flags, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=c.group_m,
            PARTIALS=split > 1, EVEN_K=k % bk == 0, num_warps=c.num_warps, num_stages=c.num_stages,
        )  # fmt: skip

    _with_fewer_stages(run, cfg)
    if split > 1:  # the reduce kernel runs the epilogue, on tiles of its own
        grid = (triton.cdiv(m, _REDUCE_BLOCK_M), triton.cdiv(n, _REDUCE_BLOCK_N))
        _geglu_splitk_reduce_kernel[grid](
            ws, split, stride_split, stride_acc, m, n, *epilogue_args, **flags,
            BLOCK_M=_REDUCE_BLOCK_M, BLOCK_N=_REDUCE_BLOCK_N, num_warps=4,
        )  # fmt: skip
