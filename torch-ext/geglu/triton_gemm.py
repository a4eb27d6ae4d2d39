"""Triton GEMMs with the epilogue fused: out = epilogue(x @ W.T), W in nn.Linear layout.

Epilogues (`EPILOGUE`, a compile-time constant):

    LINEAR      out = acc + bias [+ residual]
    GELU        out = gelu(acc + bias) [+ residual]
    GEGLU       out = gelu(acc_g + b_g) * (acc_u + b_u)            two accumulators
                optionally also writes the pre-activations [g | u] (aux output),
                which the training path saves for backward
    GELU_GRAD   out = grad * gelu'(acc + bias)                    backward of GELU
    GEGLU_GRAD  out[:, :N] = grad * u * gelu'(g),                 backward of GEGLU,
                out[:, N:] = grad * gelu(g),                      recomputing
                g = acc_g + b_g, u = acc_u + b_u from x;          g and u from x
                optionally h = gelu(g) * u (aux output: what geglu_mlp's down
                projection needs for its weight gradient)
    GEGLU_GRAD_SAVED  the same outputs, where the GEMM is grad_h = grad @ w_down
                (acc = grad_h) and g, u are read from the saved pre-activations:
                geglu_mlp's whole GeGLU backward rides on its down-projection GEMM.

Bias gradients (column sums of what the *_GRAD epilogues write) come out of the same
epilogue as float32 partial sums per M tile, summed on the host (deterministic, no
atomics).

Kernels:

- `_gemm_tma_kernel`: persistent (one program per SM looping over output tiles in
  grouped order for L2 reuse), operands streamed by TMA descriptors (sm90+). TMA
  zero-fills out-of-bounds boxes, so ragged M/N/K need no masks in the K loop.
- `_gemm_tile_kernel`: one output tile per program, pointer loads (any strides,
  any alignment, Ampere). With split_k > 1 each program covers a slice of K and
  writes float32 partials; `_splitk_reduce_kernel` sums them and runs the epilogue.
  That is the decode path: at M <= 64 the GEMM is bound by reading the weight once,
  and split-K keeps every SM streaming when N alone gives too few tiles.

Math: float32 accumulation; float16/bfloat16 operands feed the tensor cores as is;
float32 operands use TF32 tensor-core inputs (tl.dot's default), so float32 results
carry TF32 rounding (~1e-3 relative), as torch does with allow_tf32=True. Offsets are
int64, so operands beyond 2**31 elements index correctly.

Launch parameters come from `gemm_configs.TABLE` (no autotuning at run time); M is
never specialized on, so a new token count does not recompile.

The module imports triton unconditionally: `linear.py` imports it only when triton
is installed. Under TRITON_INTERPRET=1 (set before import) the kernels run on CPU
tensors through Triton's interpreter; the CPU tests use that.
"""

import warnings
from contextlib import nullcontext
from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from . import gemm_configs
from .gemm_configs import GemmConfig
from .triton_activation import _gelu, _gelu_and_grad

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # triton < 3.4: no host-side TMA descriptors, tile kernel only
    TensorDescriptor = None

LINEAR, GELU, GEGLU, GELU_GRAD, GEGLU_GRAD, GEGLU_GRAD_SAVED = range(6)
_LINEAR = tl.constexpr(LINEAR)
_GELU = tl.constexpr(GELU)
_GEGLU = tl.constexpr(GEGLU)
_GELU_GRAD = tl.constexpr(GELU_GRAD)
_GEGLU_GRAD = tl.constexpr(GEGLU_GRAD)
_GEGLU_GRAD_SAVED = tl.constexpr(GEGLU_GRAD_SAVED)

# Rows of the split-K reduction's tile. Its epilogue writes bias-gradient partials
# per tile of this height.
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
def _epilogue(
    acc,
    acc2,
    offs_m,
    offs_n,
    tile_m,
    M,
    N,
    bias_ptr,
    bias2_ptr,
    res_ptr,
    stride_rm,
    src_ptr,
    stride_sm,
    out_ptr,
    out2_ptr,
    stride_om,
    aux_ptr,
    stride_auxm,
    dbias_ptr,
    dbias2_ptr,
    stride_dbm,
    EPILOGUE: tl.constexpr,
    TWO_ACC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_BIAS2: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    APPROX_TANH: tl.constexpr,
    WRITE_AUX: tl.constexpr,
    BIAS_GRAD: tl.constexpr,
):
    """Everything after the K loop, shared by the three kernels. acc/acc2: float32
    [BLOCK_M, BLOCK_N] tiles at rows offs_m, columns offs_n (acc2 only with TWO_ACC).
    Row/column tails are masked here; every elementwise operand has unit column stride."""
    mask_m = offs_m < M
    mask_n = offs_n < N
    mask = mask_m[:, None] & mask_n[None, :]
    rows = offs_m.to(tl.int64)[:, None]
    cols = offs_n[None, :]
    if HAS_BIAS:
        acc = acc + tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    if HAS_BIAS2:
        acc2 = acc2 + tl.load(bias2_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    if EPILOGUE == _LINEAR:
        y = acc
    elif EPILOGUE == _GELU:
        y = _gelu(acc, APPROX_TANH)
    elif EPILOGUE == _GEGLU:
        y = _gelu(acc, APPROX_TANH) * acc2
        if WRITE_AUX:  # pre-activations [g | u], saved for backward
            pre = aux_ptr + rows * stride_auxm + cols
            tl.store(pre, acc.to(aux_ptr.dtype.element_ty), mask=mask)
            tl.store(pre + N, acc2.to(aux_ptr.dtype.element_ty), mask=mask)
    elif EPILOGUE == _GELU_GRAD:
        dy = tl.load(src_ptr + rows * stride_sm + cols, mask=mask, other=0.0).to(tl.float32)
        _, dact = _gelu_and_grad(acc, APPROX_TANH)
        y = dy * dact
    else:  # the GeGLU backward epilogues: y = d gate, y2 = d up
        if EPILOGUE == _GEGLU_GRAD:  # acc, acc2 = recomputed gate, up; src = grad_h
            dy = tl.load(src_ptr + rows * stride_sm + cols, mask=mask, other=0.0).to(tl.float32)
            g = acc
            u = acc2
        else:  # _GEGLU_GRAD_SAVED: acc = grad_h; src = saved [gate | up]
            dy = acc
            saved = src_ptr + rows * stride_sm + cols
            g = tl.load(saved, mask=mask, other=0.0).to(tl.float32)
            u = tl.load(saved + N, mask=mask, other=0.0).to(tl.float32)
        act, dact = _gelu_and_grad(g, APPROX_TANH)
        y = dy * u * dact
        y2 = dy * act
        tl.store(out2_ptr + rows * stride_om + cols, y2.to(out2_ptr.dtype.element_ty), mask=mask)
        if WRITE_AUX:  # h = gelu(gate) * up
            tl.store(aux_ptr + rows * stride_auxm + cols, (act * u).to(aux_ptr.dtype.element_ty), mask=mask)
        if BIAS_GRAD:
            part2 = tl.sum(tl.where(mask, y2, 0.0), axis=0)
            tl.store(dbias2_ptr + tile_m * stride_dbm + offs_n, part2, mask=mask_n)
    if HAS_RESIDUAL:
        y = y + tl.load(res_ptr + rows * stride_rm + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows * stride_om + cols, y.to(out_ptr.dtype.element_ty), mask=mask)
    if BIAS_GRAD:
        part = tl.sum(tl.where(mask, y, 0.0), axis=0)
        tl.store(dbias_ptr + tile_m * stride_dbm + offs_n, part, mask=mask_n)


@triton.jit(do_not_specialize=["M", "split_k", "stride_ws_split", "stride_ws_acc"])
def _gemm_tile_kernel(
    x_ptr,
    w_ptr,
    w2_ptr,
    ws_ptr,
    split_k,
    M,
    N,
    K,
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_w2n,
    stride_w2k,
    stride_ws_split,
    stride_ws_acc,
    bias_ptr,
    bias2_ptr,
    res_ptr,
    stride_rm,
    src_ptr,
    stride_sm,
    out_ptr,
    out2_ptr,
    stride_om,
    aux_ptr,
    stride_auxm,
    dbias_ptr,
    dbias2_ptr,
    stride_dbm,
    EPILOGUE: tl.constexpr,
    TWO_ACC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_BIAS2: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    APPROX_TANH: tl.constexpr,
    WRITE_AUX: tl.constexpr,
    BIAS_GRAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    PARTIALS: tl.constexpr,  # split_k > 1: write float32 partials, the reduce kernel finishes
    EVEN_K: tl.constexpr,
):
    pid_m, pid_n = _tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    split = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Masks, not clamped indices, at the M / N edges: with a transposed weight view
    # (w_down.t()) N is the contiguous dimension, and masks keep the loads vectorized
    # (Triton knows N's divisibility) without reading past the edge.
    mask_x = (offs_m < M)[:, None]
    mask_w = (offs_n < N)[:, None]
    rows = offs_m.to(tl.int64)
    cols = offs_n.to(tl.int64)

    k_tiles = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles, split_k)
    k_first = split * k_per_split
    k_last = tl.minimum(k_first + k_per_split, k_tiles)
    k_start = (k_first * BLOCK_K).to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + (k_start + offs_k)[None, :] * stride_xk
    w_ptrs = w_ptr + cols[:, None] * stride_wn + (k_start + offs_k)[None, :] * stride_wk
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if TWO_ACC:
        w2_ptrs = w2_ptr + cols[:, None] * stride_w2n + (k_start + offs_k)[None, :] * stride_w2k
        acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc2 = acc  # unused
    for kt in range(k_first, k_last):
        if EVEN_K:
            a = tl.load(x_ptrs, mask=mask_x, other=0.0)
            b = tl.load(w_ptrs, mask=mask_w, other=0.0)
        else:
            k_mask = (offs_k < K - kt * BLOCK_K)[None, :]
            a = tl.load(x_ptrs, mask=mask_x & k_mask, other=0.0)
            b = tl.load(w_ptrs, mask=mask_w & k_mask, other=0.0)
        acc = tl.dot(a, tl.trans(b), acc)
        if TWO_ACC:
            if EVEN_K:
                b2 = tl.load(w2_ptrs, mask=mask_w, other=0.0)
            else:
                b2 = tl.load(w2_ptrs, mask=mask_w & k_mask, other=0.0)
            acc2 = tl.dot(a, tl.trans(b2), acc2)
            w2_ptrs += BLOCK_K * stride_w2k
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    if PARTIALS:
        # float32 partials [split_k, n_acc, M, N]; the reduce kernel runs the epilogue.
        mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        ws = ws_ptr + split.to(tl.int64) * stride_ws_split + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(ws, acc, mask=mask)
        if TWO_ACC:
            tl.store(ws + stride_ws_acc, acc2, mask=mask)
    else:
        _epilogue(
            acc, acc2, offs_m, offs_n, pid_m, M, N,
            bias_ptr, bias2_ptr, res_ptr, stride_rm, src_ptr, stride_sm,
            out_ptr, out2_ptr, stride_om, aux_ptr, stride_auxm, dbias_ptr, dbias2_ptr, stride_dbm,
            EPILOGUE, TWO_ACC, HAS_BIAS, HAS_BIAS2, HAS_RESIDUAL, APPROX_TANH, WRITE_AUX, BIAS_GRAD,
        )  # fmt: skip


@triton.jit(do_not_specialize=["M", "split_k", "stride_ws_split", "stride_ws_acc"])
def _splitk_reduce_kernel(
    ws_ptr,
    split_k,
    stride_ws_split,
    stride_ws_acc,
    M,
    N,
    bias_ptr,
    bias2_ptr,
    res_ptr,
    stride_rm,
    src_ptr,
    stride_sm,
    out_ptr,
    out2_ptr,
    stride_om,
    aux_ptr,
    stride_auxm,
    dbias_ptr,
    dbias2_ptr,
    stride_dbm,
    EPILOGUE: tl.constexpr,
    TWO_ACC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_BIAS2: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    APPROX_TANH: tl.constexpr,
    WRITE_AUX: tl.constexpr,
    BIAS_GRAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_m = tl.program_id(0)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    ws = ws_ptr + offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(split_k):  # walk the slices by pointer increments: 64-bit addresses
        acc += tl.load(ws, mask=mask, other=0.0)
        if TWO_ACC:
            acc2 += tl.load(ws + stride_ws_acc, mask=mask, other=0.0)
        ws += stride_ws_split
    _epilogue(
        acc, acc2, offs_m, offs_n, pid_m, M, N,
        bias_ptr, bias2_ptr, res_ptr, stride_rm, src_ptr, stride_sm,
        out_ptr, out2_ptr, stride_om, aux_ptr, stride_auxm, dbias_ptr, dbias2_ptr, stride_dbm,
        EPILOGUE, TWO_ACC, HAS_BIAS, HAS_BIAS2, HAS_RESIDUAL, APPROX_TANH, WRITE_AUX, BIAS_GRAD,
    )  # fmt: skip


@triton.jit(do_not_specialize=["M"])
def _gemm_tma_kernel(
    x_desc,
    w_desc,
    w2_desc,
    M,
    N,
    K,
    bias_ptr,
    bias2_ptr,
    res_ptr,
    stride_rm,
    src_ptr,
    stride_sm,
    out_ptr,
    out2_ptr,
    stride_om,
    aux_ptr,
    stride_auxm,
    dbias_ptr,
    dbias2_ptr,
    stride_dbm,
    EPILOGUE: tl.constexpr,
    TWO_ACC: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_BIAS2: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    APPROX_TANH: tl.constexpr,
    WRITE_AUX: tl.constexpr,
    BIAS_GRAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    FLATTEN: tl.constexpr,
    W_T: tl.constexpr,  # the weight descriptors cover W.T ([K, N] row-major, e.g. w_down for grad @ w_down)
):
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
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if TWO_ACC:
            acc2 = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        else:
            acc2 = acc  # unused
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = x_desc.load([off_m, off_k])
            if W_T:
                acc = tl.dot(a, w_desc.load([off_k, off_n]), acc)
            else:
                acc = tl.dot(a, w_desc.load([off_n, off_k]).T, acc)
            if TWO_ACC:
                if W_T:
                    acc2 = tl.dot(a, w2_desc.load([off_k, off_n]), acc2)
                else:
                    acc2 = tl.dot(a, w2_desc.load([off_n, off_k]).T, acc2)
        tile_id_c += NUM_SMS
        pid_m, pid_n = _tile_coords(tile_id_c, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        _epilogue(
            acc, acc2, offs_m, offs_n, pid_m, M, N,
            bias_ptr, bias2_ptr, res_ptr, stride_rm, src_ptr, stride_sm,
            out_ptr, out2_ptr, stride_om, aux_ptr, stride_auxm, dbias_ptr, dbias2_ptr, stride_dbm,
            EPILOGUE, TWO_ACC, HAS_BIAS, HAS_BIAS2, HAS_RESIDUAL, APPROX_TANH, WRITE_AUX, BIAS_GRAD,
        )  # fmt: skip


INTERPRET = type(_gemm_tile_kernel).__name__ == "InterpretedFunction"
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
_TMA_BROKEN = set()  # (kind, transposed weights, dtype) whose TMA kernel failed to build: tile kernel
_STAGES_FIT = {}  # (config, dtype, kind, arch) -> num_stages that fit shared memory


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


def _weights_transposed(weights) -> bool:
    """True when the [N, K] weights are transposed views of row-major [K, N] matrices
    (grad @ w_down hands w_down.t()): the kernels then read tiles of W.T."""
    return all(w.stride(0) == 1 and w.stride(1) != 1 for w in weights)


def _smem_bytes(cfg: GemmConfig, elem: int, n_acc: int) -> int:
    return cfg.num_stages * (cfg.block_m + n_acc * cfg.block_n) * cfg.block_k * elem


def kind_of(epilogue: int) -> str:
    """The launch-table kind of an epilogue (see gemm_configs)."""
    if epilogue in (GEGLU, GEGLU_GRAD):
        return "two"
    return "bwd" if epilogue == GEGLU_GRAD_SAVED else "one"


def select_config(x: torch.Tensor, weights, n_out: int, kind: str, config: Optional[GemmConfig] = None) -> GemmConfig:
    """The launch table's row for this call (or `config`, as the tuner and tests pass),
    adjusted to the operands: the TMA kernel only where TMA can read every operand,
    the stage count within shared memory, the automatic split-K resolved."""
    dev = _device_info(x.device)
    m, k = x.shape
    cfg = gemm_configs.lookup(dev.arch, kind, m) if config is None else config
    if cfg.kernel == "tma":
        w_t = _weights_transposed(weights)
        if not (
            dev.tma
            and (kind, w_t, x.dtype) not in _TMA_BROKEN
            and _tma_ready(x)
            and all(_tma_ready(w.t() if w_t else w) for w in weights)
        ):
            cfg = cfg._replace(kernel="tile", split_k=1)
    fit_key = (cfg, x.dtype, kind, dev.arch)
    if fit_key not in _STAGES_FIT:
        stages = cfg.num_stages
        while stages > 1 and _smem_bytes(cfg._replace(num_stages=stages), x.element_size(), len(weights)) > dev.smem:
            stages -= 1
        _STAGES_FIT[fit_key] = stages
    cfg = cfg._replace(num_stages=_STAGES_FIT[fit_key])
    if cfg.kernel == "tile" and cfg.split_k == 0:
        cfg = cfg._replace(split_k=auto_split_k(m, n_out, k, cfg, dev.num_sms))
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


class _Operands:
    """Epilogue operands of one launch (None where the epilogue does not use one).
    src: the elementwise input (upstream grad, or the saved [gate | up]); aux: the
    extra output (pre-activations in the forward, h in the backward)."""

    def __init__(self, *, out, out2=None, bias=None, bias2=None, residual=None, src=None, aux=None, bias_grad=False):
        self.out, self.out2, self.bias, self.bias2 = out, out2, _unit_col(bias), _unit_col(bias2)
        self.residual, self.src, self.aux, self.bias_grad = _unit_col(residual), _unit_col(src), aux, bias_grad
        self.dbias = self.dbias2 = None

    def alloc_bias_grad(self, tiles_m: int, n: int):
        """float32 column sums per M tile: [tiles_m, n], or [tiles_m, 2n] for the GeGLU
        backward's two outputs (gate columns first)."""
        if self.bias_grad:
            two = self.out2 is not None
            parts = torch.empty((tiles_m, 2 * n if two else n), device=self.out.device, dtype=torch.float32)
            self.dbias, self.dbias2 = parts, (parts[:, n:] if two else None)

    def args(self):
        return (
            self.bias, self.bias2, self.residual, _row_stride(self.residual), self.src, _row_stride(self.src),
            self.out, self.out2, self.out.stride(0), self.aux, _row_stride(self.aux),
            self.dbias, self.dbias2, _row_stride(self.dbias),
        )  # fmt: skip


def _row_stride(t: Optional[torch.Tensor]) -> int:
    return 0 if t is None else t.stride(0)


def _unit_col(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """The epilogue reads elementwise operands with unit column stride."""
    return t if t is None or t.stride(-1) == 1 else t.contiguous()


def _launch(x, weights, epilogue: int, ops: _Operands, approximate: str, config: Optional[GemmConfig]):
    """Run one fused GEMM; returns the float32 bias gradient (sum over M) when asked."""
    m, k = x.shape
    n = weights[0].shape[0]
    kind = kind_of(epilogue)
    cfg = select_config(x, weights, n, kind, config)
    flags = dict(
        EPILOGUE=epilogue,
        TWO_ACC=len(weights) == 2,
        HAS_BIAS=ops.bias is not None,
        HAS_BIAS2=ops.bias2 is not None,
        HAS_RESIDUAL=ops.residual is not None,
        APPROX_TANH=approximate == "tanh",
        WRITE_AUX=ops.aux is not None,
        BIAS_GRAD=ops.bias_grad,
    )
    # Triton launches on the current device; switch only when the tensors live elsewhere.
    on_other_gpu = x.device.type == "cuda" and x.device.index != torch.cuda.current_device()
    with torch.cuda.device(x.device) if on_other_gpu else nullcontext():
        if cfg.kernel == "tma":
            try:
                _launch_tma(x, weights, ops, cfg, flags, m, n, k)
            except Exception as e:  # noqa: BLE001 - a compiler that cannot build the TMA kernel
                if config is not None or INTERPRET:
                    raise
                warnings.warn(f"geglu: the TMA GEMM kernel failed ({type(e).__name__}: {e}); using the tile kernel")
                _TMA_BROKEN.add((kind, _weights_transposed(weights), x.dtype))
                _launch_tile(x, weights, ops, select_config(x, weights, n, kind), flags, m, n, k)
        else:
            _launch_tile(x, weights, ops, cfg, flags, m, n, k)
    return None if ops.dbias is None else ops.dbias.sum(0)


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


def _launch_tma(x, weights, ops: _Operands, cfg: GemmConfig, flags, m: int, n: int, k: int) -> None:
    dev = _device_info(x.device)
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    w_t = _weights_transposed(weights)
    x_desc = TensorDescriptor(x, [m, k], [x.stride(0), 1], [bm, bk])
    if w_t:
        w_descs = [TensorDescriptor(w.t(), [k, n], [w.stride(1), 1], [bk, bn]) for w in weights]
    else:
        w_descs = [TensorDescriptor(w, [n, k], [w.stride(0), 1], [bn, bk]) for w in weights]
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    ops.alloc_bias_grad(triton.cdiv(m, bm), n)
    grid = (min(dev.num_sms, tiles),)

    def run(c):
        _gemm_tma_kernel[grid](
            x_desc, w_descs[0], w_descs[1] if len(w_descs) == 2 else None, m, n, k, *ops.args(),
            **flags, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=c.group_m, NUM_SMS=dev.num_sms,
            FLATTEN=c.flatten, W_T=w_t, num_warps=c.num_warps, num_stages=c.num_stages,
        )  # fmt: skip

    _with_fewer_stages(run, cfg)


def _launch_tile(x, weights, ops: _Operands, cfg: GemmConfig, flags, m: int, n: int, k: int) -> None:
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    split = max(cfg.split_k, 1)
    w, w2 = weights[0], (weights[1] if len(weights) == 2 else None)
    n_acc = len(weights)
    tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
    if split > 1:  # the reduce kernel runs the epilogue, on tiles of its own height
        ws = torch.empty((split, n_acc, m, n), device=x.device, dtype=torch.float32)
        stride_split, stride_acc = ws.stride(0), ws.stride(1)
        ops.alloc_bias_grad(triton.cdiv(m, _REDUCE_BLOCK_M), n)
    else:
        ws, stride_split, stride_acc = None, 0, 0
        ops.alloc_bias_grad(triton.cdiv(m, bm), n)

    def run(c):
        _gemm_tile_kernel[(tiles, split)](
            x, w, w2, ws, split, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
            0 if w2 is None else w2.stride(0), 0 if w2 is None else w2.stride(1), stride_split, stride_acc,
            *ops.args(), **flags, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=c.group_m,
            PARTIALS=split > 1, EVEN_K=k % bk == 0, num_warps=c.num_warps, num_stages=c.num_stages,
        )  # fmt: skip

    _with_fewer_stages(run, cfg)
    if split > 1:
        grid = (triton.cdiv(m, _REDUCE_BLOCK_M), triton.cdiv(n, _REDUCE_BLOCK_N))
        _splitk_reduce_kernel[grid](
            ws, split, stride_split, stride_acc, m, n, *ops.args(), **flags,
            BLOCK_M=_REDUCE_BLOCK_M, BLOCK_N=_REDUCE_BLOCK_N, num_warps=4,
        )  # fmt: skip


# --------------------------------------------------------------------------- entry points
# x is [M, K] (callers flatten leading dims); weights are [N, K] (nn.Linear layout);
# every size is >= 1 (callers route empty problems to the eager composite).
# `out`, `pre`, `h`: optional preallocated contiguous results (tests pass NaN-poisoned
# ones); the functions allocate what is not given.


def _result(out: Optional[torch.Tensor], shape, like: torch.Tensor) -> torch.Tensor:
    return torch.empty(shape, device=like.device, dtype=like.dtype) if out is None else out


def linear_forward(x, weight, bias, residual, activation: str, config: Optional[GemmConfig] = None, out=None):
    """activation(x @ weight.T + bias) + residual; activation "none" | "gelu" | "gelu_tanh"."""
    out = _result(out, (x.shape[0], weight.shape[0]), x)
    epilogue = LINEAR if activation == "none" else GELU
    _launch(x, (weight,), epilogue, _Operands(out=out, bias=bias, residual=residual), _tanh(activation), config)
    return out


def _tanh(activation: str) -> str:
    return "tanh" if activation == "gelu_tanh" else "none"


def geglu_forward(
    x, w_gate, w_up, b_gate, b_up, approximate: str, config: Optional[GemmConfig] = None, out=None, pre=None
):
    """gelu(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up), [M, hidden]. With `pre`
    ([M, 2*hidden]) also stores the pre-activations [gate | up] there."""
    out = _result(out, (x.shape[0], w_gate.shape[0]), x)
    ops = _Operands(out=out, bias=b_gate, bias2=b_up, aux=pre)
    _launch(x, (w_gate, w_up), GEGLU, ops, approximate, config)
    return out


def linear_gelu_backward(grad, x, weight, bias, approximate: str, bias_grad: bool, config=None, out=None):
    """(grad * gelu'(x @ weight.T + bias), float32 column sums of it or None)."""
    dpre = _result(out, (x.shape[0], weight.shape[0]), x)
    ops = _Operands(out=dpre, bias=bias, src=grad, bias_grad=bias_grad)
    return dpre, _launch(x, (weight,), GELU_GRAD, ops, approximate, config)


def geglu_backward(
    grad_h, x, w_gate, w_up, b_gate, b_up, approximate: str, want_h: bool, bias_grad: bool, config=None, out=None, h=None
):
    """Recompute g = x @ w_gate.T + b_gate, u = x @ w_up.T + b_up and return
    (d_gate_up [M, 2*hidden] = [grad_h * u * gelu'(g) | grad_h * gelu(g)],
     h = gelu(g) * u or None, float32 [2*hidden] column sums of d_gate_up or None)."""
    m, hidden = x.shape[0], w_gate.shape[0]
    dgu = _result(out, (m, 2 * hidden), x)
    h = _result(h, (m, hidden), x) if want_h else None
    ops = _Operands(out=dgu, out2=dgu[:, hidden:], bias=b_gate, bias2=b_up, src=grad_h, aux=h, bias_grad=bias_grad)
    return dgu, h, _launch(x, (w_gate, w_up), GEGLU_GRAD, ops, approximate, config)


def geglu_saved_backward(
    grad, pre, w_down, approximate: str, want_h: bool, bias_grad: bool, config=None, out=None, h=None
):
    """geglu_mlp's backward through its down projection in one GEMM: grad_h = grad @
    w_down, with the GeGLU backward in the epilogue on the saved pre = [gate | up].
    Returns (d_gate_up [M, 2*hidden], h = gelu(gate) * up or None, float32 column
    sums of d_gate_up or None)."""
    m, hidden = grad.shape[0], w_down.shape[1]
    dgu = _result(out, (m, 2 * hidden), grad)
    h = _result(h, (m, hidden), grad) if want_h else None
    ops = _Operands(out=dgu, out2=dgu[:, hidden:], src=pre, aux=h, bias_grad=bias_grad)
    return dgu, h, _launch(grad, (w_down.t(),), GEGLU_GRAD_SAVED, ops, approximate, config)
