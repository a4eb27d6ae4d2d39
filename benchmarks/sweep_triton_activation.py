"""Check the Triton activation's launch table on the GPU at hand (a benchmark, not a test).

    python benchmarks/sweep_triton_activation.py

Times forward/backward at the blog shape (8192 x 3072, bf16) against a device copy of
the same bytes, and the table's tile (triton_kernels/activation.py, _LAUNCH_TABLE) against a small
sweep of tiles. If a swept tile beats the table's by more than 5%, it says which entry
to change.
"""

import os
from pathlib import Path

import torch
import triton.testing

REPO = Path(__file__).resolve().parent.parent


def bench_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3


def main() -> None:
    os.environ.setdefault("LOCAL_KERNELS", f"org/geglu={REPO}")
    from kernels import get_kernel

    ta = get_kernel("org/geglu", version=1).triton_kernels.activation
    rows, width, dtype = 8192, 3072, torch.bfloat16
    gate, up, dy = (torch.randn(rows, width, device="cuda", dtype=dtype) * 3 for _ in range(3))
    out, gg, gu = (torch.empty_like(gate) for _ in range(3))
    nbytes = gate.numel() * gate.element_size()
    src = torch.empty(3 * nbytes // 2, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    t_copy = bench_us(lambda: dst.copy_(src))  # reads + writes 3 tensors' worth, as forward does
    copy_bw = 3 * nbytes / t_copy
    t_fwd = bench_us(lambda: ta.geglu_forward(out, gate, up, "tanh"))
    t_bwd = bench_us(lambda: ta.geglu_backward(gg, gu, dy, gate, up, "tanh"))
    print(f"copy      {t_copy:7.1f} us  {copy_bw / 1e6:.2f} TB/s")
    print(f"forward   {t_fwd:7.1f} us  {3 * nbytes / t_fwd / 1e6:.2f} TB/s  {3 * nbytes / t_fwd / copy_bw:.1%} of copy")
    print(f"backward  {t_bwd:7.1f} us  {5 * nbytes / t_bwd / 1e6:.2f} TB/s  {5 * nbytes / t_bwd / copy_bw:.1%} of copy")

    def launch(block_m, block_n, warps):
        col_blocks = -(-width // block_n)
        grid = (-(-rows // block_m) * col_blocks,)
        ta._forward_kernel[grid](
            gate, up, out, rows, width, col_blocks, width, width, width,
            APPROXIMATE_TANH=True, HAS_UP=True, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps,
        )

    sweep = {}
    for block_m, block_n in [(16, 256), (8, 512), (4, 1024), (32, 256), (8, 1024)]:
        for warps in (4, 8):
            sweep[(block_m, block_n, warps)] = bench_us(lambda: launch(block_m, block_n, warps))
    best = min(sweep, key=sweep.get)
    cfg = tuple(ta.launch_config(width, dtype))
    ours = sweep.get(cfg, t_fwd)
    print("sweep (us):", {k: round(v, 1) for k, v in sorted(sweep.items(), key=lambda kv: kv[1])})
    verdict = "keep" if ours <= 1.05 * sweep[best] else f"change the table entry to {best}"
    print(f"table tile {cfg}: {ours:.1f} us; best {best}: {sweep[best]:.1f} us -> {verdict}")


if __name__ == "__main__":
    main()
