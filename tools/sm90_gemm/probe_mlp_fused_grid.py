"""Probe: the one-kernel MLP's time against its persistent grid's size
(mlp_fused_grid_probe.cu, built as .sm90dev/libmlp_fused_grid_probe.so by `build_lib.sh
tools/sm90_gemm/mlp_fused_grid_probe.cu libmlp_fused_grid_probe`).

At Gemma-7B the kernel has 576 work units of equal size for 132 CTAs (4.36 rounds): if
the partly filled last round is what keeps it from the read rate, a grid that every CTA
fills evenly (96 CTAs: 6 rounds; 115: 5.01) is as fast or faster. Each grid's result is
checked first against the full grid's (the same sums in the same order: equal bits).
CUDA graphs, medians of 5 interleaved rounds; PROBE_SHAPES / PROBE_TOKENS narrow the
grid of shapes (harness.decode_grid), PROBE_CTAS lists the grids (default: the SM count
and the divisors-and-near-divisors of each shape's unit count).

    python tools/sm90_gemm/probe_mlp_fused_grid.py [--out DIR]
"""

from __future__ import annotations

import argparse
import ctypes
import os

import torch

from check_linear import graph_rounds, read_bandwidth
from harness import ROOT, decode_grid, log, log_device, log_rows, mlp_weights, save_results, token_operands


class Probe:
    def __init__(self, path):
        L = self.L = ctypes.CDLL(path)
        i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
        L.geglu_mlp_fused_sm90_workspace_bytes.argtypes = [i64, i64, i64]
        L.geglu_mlp_fused_sm90_workspace_bytes.restype = i64
        L.geglu_mlp_fused_sm90_units.argtypes = [i64, i64, i64]
        L.geglu_mlp_fused_sm90_units.restype = i64
        L.geglu_mlp_fused_sm90_ctas.argtypes = [vp, i64, i64, i64, vp, vp, i64, vp, i64, vp, i64, vp, vp, ci, ci, vp,
                                                ci]

    def __call__(self, x, wg, wu, wd, h, y, ws, ctas):
        M, D, H = x.shape[0], x.shape[1], wg.shape[0]
        rc = self.L.geglu_mlp_fused_sm90_ctas(
            x.data_ptr(), M, D, x.stride(0), wg.data_ptr(), wu.data_ptr(), wg.stride(0), wd.data_ptr(), wd.stride(0),
            h.data_ptr(), H, y.data_ptr(), ws.data_ptr(), 0, 1, torch.cuda.current_stream().cuda_stream, ctas)
        if rc != 0:
            raise RuntimeError(f"probe launch with {ctas} CTAs: status {rc}")


def grids(n_units, sms):
    env = os.environ.get("PROBE_CTAS")
    if env:
        return [int(c) for c in env.split(",")]
    # The SM count, then the largest grid below it for each whole number of rounds.
    out = [sms]
    rounds = -(-n_units // sms)
    for r in (rounds, rounds + 1, rounds + 2):
        c = -(-n_units // r)
        if c < sms and c not in out:
            out.append(c)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--lib", default=os.path.join(ROOT, ".sm90dev", "libmlp_fused_grid_probe.so"))
    a = ap.parse_args()
    probe = Probe(a.lib)
    log_device()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    bw_read = read_bandwidth()
    res, fails = {"bw_read": bw_read}, 0
    shapes, token_counts = decode_grid("PROBE", "1,16")
    for name, d, H in shapes:
        wg, wu, wd = mlp_weights(d, H)
        for M in token_counts:
            x, h, _, y = token_operands(M, d, H)
            ws = torch.empty(max(probe.L.geglu_mlp_fused_sm90_workspace_bytes(M, d, H), 16), dtype=torch.uint8,
                             device="cuda")
            n = probe.L.geglu_mlp_fused_sm90_units(M, d, H)
            cands, want = {}, None
            for c in grids(n, sms):
                y.fill_(float("nan"))
                probe(x, wg, wu, wd, h, y, ws, c)
                torch.cuda.synchronize()
                if want is None:
                    want = y.clone()
                elif not torch.equal(y, want):
                    fails += 1
                    log(f"  FAIL {name} M={M}: {c} CTAs differ from {sms}")
                cands[f"{c} CTAs ({n / c:.2f} rounds)"] = lambda c=c: probe(x, wg, wu, wd, h, y, ws, c)
            floor = 3 * d * H * 2 / bw_read * 1e6
            log(f"{name} M={M}: {n} units; read-bandwidth floor {floor:.1f} us")
            log_rows(f"{name} M={M}", graph_rounds(cands), lambda k: floor, res)
    save_results(a.out, "probe_mlp_fused_grid", res)
    raise SystemExit(1 if fails else 0)


if __name__ == "__main__":
    main()
