"""On a Hopper GPU: does Triton's warp specialization speed up the product's persistent
TMA gate/up kernel (issue 11 item 2, "add warp specialization where Triton offers it")?

The product kernel (`triton_kernels/gemm.py: _geglu_tma_kernel`) copied with
`tl.range(..., warp_specialize=True)` on its K loop or on its tile loop, same launch
table row, same inputs (bf16), checked against the product's output, then timed in
interleaved rounds with do_bench medians. A variant the compiler refuses is reported
as such.

    python tools/triton_ws_probe.py [--build build] [--rounds 3]
"""

import argparse
import statistics
from pathlib import Path

import torch
import triton
import triton.language as tl

SHAPES = {  # name: (M, K, H)
    "blog": (8192, 768, 3072),
    "gemma2b": (4096, 2048, 16384),
    "gemma7b": (4096, 3072, 24576),
}

# Filled from the loaded product module before the first launch (Triton resolves a
# kernel's globals when it compiles it).
_tile_coords = None
_geglu_epilogue = None


@triton.jit(do_not_specialize=["M"])
def _geglu_tma_ws_kernel(
    x_desc, wg_desc, wu_desc, M, N, K, b_gate_ptr, b_up_ptr, out_ptr, stride_om,
    HAS_BIAS_GATE: tl.constexpr, HAS_BIAS_UP: tl.constexpr, APPROX_TANH: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr, FLATTEN: tl.constexpr, WS_TILES: tl.constexpr, WS_K: tl.constexpr,
):  # fmt: skip
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile_id_c = start - NUM_SMS
    for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=FLATTEN, warp_specialize=WS_TILES):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in tl.range(k_tiles, warp_specialize=WS_K):
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
            HAS_BIAS_GATE, HAS_BIAS_UP, APPROX_TANH,
        )  # fmt: skip


def launch(tg, x, wg, wu, out, cfg, ws_tiles, ws_k, flatten):
    from triton.tools.tensor_descriptor import TensorDescriptor

    m, k = x.shape
    n = wg.shape[0]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    x_desc = TensorDescriptor(x, [m, k], [x.stride(0), 1], [bm, bk])
    wg_desc, wu_desc = (TensorDescriptor(w, [n, k], [w.stride(0), 1], [bn, bk]) for w in (wg, wu))
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    grid = (min(sms, triton.cdiv(m, bm) * triton.cdiv(n, bn)),)
    _geglu_tma_ws_kernel[grid](
        x_desc, wg_desc, wu_desc, m, n, k, None, None, out, out.stride(0), HAS_BIAS_GATE=False, HAS_BIAS_UP=False,
        APPROX_TANH=True, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=cfg.group_m, NUM_SMS=sms, FLATTEN=flatten,
        WS_TILES=ws_tiles, WS_K=ws_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
    )  # fmt: skip
    return out


def main() -> None:
    global _tile_coords, _geglu_epilogue
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    from kernels import get_local_kernel

    tg = get_local_kernel(Path(a.build)).linear.triton_gemm
    _tile_coords, _geglu_epilogue = tg._tile_coords, tg._geglu_epilogue
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}")
    g = torch.Generator(device="cpu").manual_seed(0)
    for name, (m, k, h) in SHAPES.items():
        x = (torch.rand(m, k, generator=g) * 2 - 1).to(torch.bfloat16).cuda()
        w = ((torch.rand(2 * h, k, generator=g) * 2 - 1) * k**-0.5).to(torch.bfloat16).cuda()
        wg, wu = w[:h], w[h:]
        cfg = tg.select_config(x, wg, wu)
        ref = tg.geglu_forward(x, wg, wu, None, None, "tanh", config=cfg)
        fns = {"product": lambda: tg.geglu_forward(x, wg, wu, None, None, "tanh", config=cfg)}
        for label, ws_tiles, ws_k, flatten in [
            ("ws_k", False, True, cfg.flatten),
            ("ws_tiles", True, False, cfg.flatten),
            ("ws_tiles_flat", True, False, True),
        ]:
            out = torch.full_like(ref, float("nan"))
            fn = lambda out=out, t=ws_tiles, kk=ws_k, f=flatten: launch(tg, x, wg, wu, out, cfg, t, kk, f)  # noqa: E731
            try:
                fn()
                torch.cuda.synchronize()
                err = (out.float() - ref.float()).abs().max().item()
                ok = err <= 2e-2 * ref.float().abs().max().item()
                print(f"  {name} {label}: max |diff| vs product {err:.3g} {'ok' if ok else 'WRONG'}")
                if ok:
                    fns[label] = fn
            except Exception as e:  # noqa: BLE001 - report what the compiler refuses
                print(f"  {name} {label}: refused ({type(e).__name__}: {str(e).splitlines()[0][:150]})")
        times = {key: [] for key in fns}
        for _ in range(a.rounds):
            for key, fn in fns.items():
                times[key].append(triton.testing.do_bench(fn, warmup=25, rep=200))
        flops = 2 * m * k * 2 * h
        base = statistics.median(times["product"])
        cells = [
            f"{key} {statistics.median(t) * 1e3:7.1f} us {flops / statistics.median(t) / 1e9:5.0f} TF/s "
            f"({base / statistics.median(t):.3f}x)"
            for key, t in times.items()
        ]
        print(f"{name:8s} M{m} K{k} H{h} {cfg.kernel} {cfg.block_m}x{cfg.block_n}x{cfg.block_k} "
              f"w{cfg.num_warps} s{cfg.num_stages}: " + "  ".join(cells))  # fmt: skip


if __name__ == "__main__":
    main()
