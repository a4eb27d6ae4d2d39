"""Per-block timeline of the FP8 decode kernels (fp8_decode_sm90.cu built with
-DGEGLU_FP8_TIMELINE): when each block of the gate/up and the down starts, gets its first
stage and ends, relative to the gate/up's first block, for one call after a clean 512 MB
read and for the last of calls back to back.

    tools/sm90_gemm/build_lib.sh tools/sm90_gemm/fp8_gate_up_variants.cu libfp8_timeline \\
        geglu_kernels/cuda/fp8_quantize_rows.cu geglu_kernels/cuda/fp8_decode_sm90.cu -DGEGLU_FP8_TIMELINE
    FP8_LIB=libfp8_timeline.so python tools/sm90_gemm/timeline_fp8_decode.py"""

import ctypes
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("FP8_LIB", "libfp8_timeline.so")
import check_fp8_mlp as c  # noqa: E402

c.lib.geglu_fp8_timeline.argtypes = [ctypes.c_void_p]


def fetch():
    buf = torch.zeros(2, 4096, 4, dtype=torch.int64)
    torch.cuda.synchronize()
    assert c.lib.geglu_fp8_timeline(ctypes.c_void_p(buf.data_ptr())) == 0
    return buf


def pct(v):
    v = sorted(v)
    return " ".join(f"{v[min(len(v) - 1, int(q * len(v)))]:6.1f}" for q in (0, 0.1, 0.5, 0.9, 0.99)) + f" {v[-1]:6.1f}"


def report(tag, buf, m):
    gu_blocks = m.H // 64
    stages_gu = m.d // 128
    t = buf.double()
    gu = t[0, :gu_blocks]
    # the down's grid as down_grid() in fp8_decode_sm90.cu
    k_blocks, tiles = m.H // 128, m.d // 128
    splits = max(1, min(k_blocks, 2 * torch.cuda.get_device_properties(0).multi_processor_count // tiles))
    split_blocks = -(-k_blocks // splits)
    dn = t[1, :tiles * (-(-k_blocks // split_blocks))]
    t0 = gu[:, 0].min()
    c.log(f"{tag}: M={m.M} d={m.d} H={m.H}; times in us from the gate/up's first block start; percentiles 0/10/50/90/99/max")
    for name, k in (("gate/up", gu), ("down", dn)):
        for col, what in ((0, "start"), (1, "first stage"), (2, "end")):
            c.log(f"  {name:8s} {what:12s}: " + pct(((k[:, col] - t0) / 1e3).tolist()))
    bytes_gu = 2 * 64 * 128 * stages_gu
    rate = bytes_gu / ((gu[:, 2] - gu[:, 1]) * 1e-9) / 1e9
    c.log(f"  gate/up block rate first->end GB/s: " + pct(rate.tolist()) + f"; blocks {gu_blocks}, all blocks' sum at median "
          f"{rate.median().item() * gu_blocks / 1e3:.2f} TB/s")
    # by SM: the latest end of each SM's gate/up blocks
    sms = {}
    for row in gu.tolist():
        sms.setdefault(int(row[3]), []).append((row[2] - t0) / 1e3)
    last = sorted(max(v) for v in sms.values())
    c.log(f"  gate/up per-SM last end: " + pct(last) + f" ({len(sms)} SMs)")


def main():
    torch.manual_seed(0)
    c.log(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    flush = torch.empty(512 << 18, device="cuda")
    flush.fill_(1.0)
    for M, d, H in ((1, 3072, 24576), (16, 3072, 24576), (1, 2048, 16384)):
        m = c.Fp8Mlp(M, d, H)
        for _ in range(3):
            m.run_decode()
        flush.sum()
        m.run_decode()
        report("clean", fetch(), m)
        for _ in range(20):
            m.run_decode()
        report("back to back", fetch(), m)


if __name__ == "__main__":
    main()
