"""The gate/up GEMM with ONE tl.dot per K step (issue 11, item 2): an experiment beside
the product's two-dot tile kernel (torch-ext/geglu/triton_kernels/gemm.py).

The product kernel keeps two [BLOCK_M, BLOCK_N] accumulators and runs two dots per K
step, one against a gate tile and one against an up tile. Here one [BLOCK_M,
2*BLOCK_N] accumulator holds both: its B tile has 2*BLOCK_N rows that interleave gate
and up rows (g0, u0, g1, u1, ...), so one dot of twice the width does the work, and the
epilogue splits the accumulator back into gate and up with a reshape to [BM, BN, 2].
Two ways to build the interleaved B tile:

- "view": one tl.load of the [2*BLOCK_N, BLOCK_K] tile through an interleaved view of
  the weights: row r reads row r // 2 of w_gate, or of w_up when r is odd, whose
  address is w_gate's plus `up_offset` elements (the distance between the two
  weights, any sign: a merged weight's up half, or a separate tensor). Nothing is
  shuffled in registers.
- "join": the product's two loads, then tl.join + permute + reshape into one tile (a
  layout conversion the compiler may route through shared memory).

Everything else is the product's: launch table, split-K partials layout
([split, 2, M, N]) and its reduce kernel, the GeGLU epilogue, int64 offsets. `bind(tg)`
takes the product module (the loaded variant's `linear.triton_gemm`) and makes its jit
helpers callable from these kernels; the product keeps the two-dot kernel until
bench.py shows this one faster on a GPU.
"""

import torch
import triton
import triton.language as tl

_tg = None  # the product module, set by bind()


def bind(tg) -> None:
    """Use the product module `tg`'s helpers: the Triton JIT resolves a kernel's callees
    among its module's globals when it compiles, so they are placed here."""
    global _tg, _tile_coords, _geglu_epilogue
    _tg = tg
    _tile_coords, _geglu_epilogue = tg._tile_coords, tg._geglu_epilogue


_tile_coords = _geglu_epilogue = None  # bound to the product's jit functions by bind()


@triton.jit(do_not_specialize=["M", "split_k", "stride_ws_split", "stride_ws_acc", "up_offset"])
def _geglu_one_dot_kernel(
    x_ptr, wg_ptr, wu_ptr, up_offset, ws_ptr, split_k, M, N, K, stride_xm, stride_wn, stride_ws_split, stride_ws_acc,
    b_gate_ptr, b_up_ptr, out_ptr, stride_om,
    HAS_BIAS_GATE: tl.constexpr, HAS_BIAS_UP: tl.constexpr, APPROX_TANH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    PARTIALS: tl.constexpr, EVEN_K: tl.constexpr, VIEW_LOAD: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = _tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    split = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = offs_m.to(tl.int64)
    mask_x = (offs_m < M)[:, None]

    k_tiles = tl.cdiv(K, BLOCK_K)
    k_per_split = tl.cdiv(k_tiles, split_k)
    k_first = split * k_per_split
    k_last = tl.minimum(k_first + k_per_split, k_tiles)
    k_start = (k_first * BLOCK_K).to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + (k_start + offs_k)[None, :]
    if VIEW_LOAD:
        # Row r of the B tile: weight row offs_n[r // 2] of gate (r even) or up (r odd).
        r = tl.arange(0, 2 * BLOCK_N)
        w_row = pid_n * BLOCK_N + r // 2
        mask_w = (w_row < N)[:, None]
        w_off = w_row.to(tl.int64) * stride_wn + (r % 2).to(tl.int64) * up_offset
        w_ptrs = wg_ptr + w_off[:, None] + (k_start + offs_k)[None, :]
    else:
        cols = offs_n.to(tl.int64)
        mask_w = (offs_n < N)[:, None]
        wg_ptrs = wg_ptr + cols[:, None] * stride_wn + (k_start + offs_k)[None, :]
        wu_ptrs = wu_ptr + cols[:, None] * stride_wn + (k_start + offs_k)[None, :]
    acc = tl.zeros((BLOCK_M, 2 * BLOCK_N), dtype=tl.float32)
    for kt in range(k_first, k_last):
        k_mask = (offs_k < K - kt * BLOCK_K)[None, :]
        a = tl.load(x_ptrs, mask=mask_x if EVEN_K else mask_x & k_mask, other=0.0)
        if VIEW_LOAD:
            b = tl.load(w_ptrs, mask=mask_w if EVEN_K else mask_w & k_mask, other=0.0)
            w_ptrs += BLOCK_K
        else:
            bg = tl.load(wg_ptrs, mask=mask_w if EVEN_K else mask_w & k_mask, other=0.0)
            bu = tl.load(wu_ptrs, mask=mask_w if EVEN_K else mask_w & k_mask, other=0.0)
            b = tl.reshape(tl.permute(tl.join(bg, bu), (0, 2, 1)), (2 * BLOCK_N, BLOCK_K))
            wg_ptrs += BLOCK_K
            wu_ptrs += BLOCK_K
        acc = tl.dot(a, tl.trans(b), acc)
        x_ptrs += BLOCK_K
    acc_g, acc_u = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N, 2)))

    if PARTIALS:  # the product's [split_k, 2, M, N] layout: its reduce kernel finishes
        mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
        ws = ws_ptr + split.to(tl.int64) * stride_ws_split + rows[:, None] * N + offs_n[None, :]
        tl.store(ws, acc_g, mask=mask)
        tl.store(ws + stride_ws_acc, acc_u, mask=mask)
    else:
        _geglu_epilogue(
            acc_g, acc_u, offs_m, offs_n, M, N, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
            HAS_BIAS_GATE, HAS_BIAS_UP, APPROX_TANH,
        )  # fmt: skip


def geglu_forward_one_dot(x, w_gate, w_up, b_gate, b_up, approximate: str, b_tile: str = "view", config=None, out=None):
    """The product's geglu_forward contract (x [M, K], weights [hidden, K] with unit
    column stride and one row stride, separate or views of one merged weight; biases
    [hidden] or None) on the one-dot kernel. b_tile: "view" or "join" (module
    docstring). config: a product GemmConfig; its "tile" form is used whatever its
    kernel (the one-dot kernel has no TMA form yet)."""
    if _tg is None:
        raise RuntimeError("one_dot_gemm: call bind(kernel.linear.triton_gemm) first")
    if b_tile not in ("view", "join"):
        raise ValueError(f"b_tile must be 'view' or 'join', got {b_tile!r}")
    if w_gate.stride(0) != w_up.stride(0) or w_gate.dtype != w_up.dtype:
        raise ValueError("w_gate and w_up must share dtype and row stride (one interleaved view reads both)")
    m, k = x.shape
    n = w_gate.shape[0]
    cfg = _tg.select_config(x, w_gate, w_up, config)
    if cfg.kernel != "tile":
        cfg = cfg._replace(kernel="tile", split_k=0)
        cfg = _tg.select_config(x, w_gate, w_up, cfg)
    if out is None:
        out = torch.empty((m, n), device=x.device, dtype=x.dtype)
    elem = w_gate.element_size()
    up_offset = (w_up.data_ptr() - w_gate.data_ptr()) // elem  # elements, any sign
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    split = max(cfg.split_k, 1)
    ws = torch.empty((split, 2, m, n), device=x.device, dtype=torch.float32) if split > 1 else None
    stride_split, stride_acc = (0, 0) if ws is None else (ws.stride(0), ws.stride(1))
    flags = dict(HAS_BIAS_GATE=b_gate is not None, HAS_BIAS_UP=b_up is not None, APPROX_TANH=approximate == "tanh")
    epilogue_args = (b_gate, b_up, out, out.stride(0))
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn), split)
    _geglu_one_dot_kernel[grid](
        x, w_gate, w_up, up_offset, ws, split, m, n, k, x.stride(0), w_gate.stride(0), stride_split, stride_acc,
        *epilogue_args, **flags, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m,
        PARTIALS=split > 1, EVEN_K=k % bk == 0, VIEW_LOAD=b_tile == "view",
        num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    if split > 1:
        grid = (triton.cdiv(m, _tg._REDUCE_BLOCK_M), triton.cdiv(n, _tg._REDUCE_BLOCK_N))
        _tg._geglu_splitk_reduce_kernel[grid](
            ws, split, stride_split, stride_acc, m, n, *epilogue_args, **flags,
            BLOCK_M=_tg._REDUCE_BLOCK_M, BLOCK_N=_tg._REDUCE_BLOCK_N, num_warps=4,
        )  # fmt: skip
    return out
