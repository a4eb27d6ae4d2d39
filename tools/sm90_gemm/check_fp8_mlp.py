"""Checks and times the block-scaled FP8 GeGLU MLP kernels (fp8_mlp_sm90.h) through
ctypes, before and apart from the torch op: x quantized per 1x128 group, the gate/up
GEMM with the GeGLU and h's quantization in its epilogue, the down GEMM; and at up to 4
tokens the weight-streaming decode kernels (fp8_decode_sm90.cu) in their place.

    tools/sm90_gemm/build_lib.sh tools/sm90_gemm/fp8_gate_up_variants.cu libfp8_mlp_sm90 \
        geglu_kernels/cuda/sm90/fp8/fp8_quantize_rows.cu geglu_kernels/cuda/sm90/decode/fp8_decode_sm90.cu
    python tools/sm90_gemm/check_fp8_mlp.py [out_dir]
    FP8_DECODE_ONLY=1 python tools/sm90_gemm/check_fp8_mlp.py   # the decode kernels' checks and rows
    FP8_PREFILL_ONLY=1 python tools/sm90_gemm/check_fp8_mlp.py  # the prefill GEMMs and their variants
    FP8_DECODE_NCU=1 ncu --clock-control none -k regex:"^(gate_up|down)" python tools/sm90_gemm/check_fp8_mlp.py
    FP8_LIB=libother.so ...   # a library built under another name in .sm90dev/ (a variant to compare)

Correctness: against float64 math on the dequantized weights and the same activation
quantization (torch ops here), h's bytes and scales compared to the reference's, and
the reference's own error against the unquantized float64 MLP for scale. Speed, one
process, same inputs, `do_bench` medians after warm-up (us): bf16 cuBLAS GEMMs alone,
FP8 GEMMs alone (two rowwise-scaled torch._scaled_mm on already-quantized operands: the
FP8 ceiling), ours (3 launches)."""

import ctypes
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import ROOT, log, save_results  # noqa: E402

E4M3 = torch.float8_e4m3fn
lib = ctypes.CDLL(os.path.join(ROOT, ".sm90dev", os.environ.get("FP8_LIB", "libfp8_mlp_sm90.so")))
P, I64, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
lib.geglu_fp8_quantize_rows.argtypes = [P, I64, I64, I64, I, P, P, I64, P]
lib.geglu_fp8_sm90_gate_up.argtypes = [P, P, I64, I64, I64, P, P, P, P, I64, P, P, I64, I, P]
lib.geglu_fp8_sm90_down.argtypes = [P, P, I64, I64, I64, P, P, I64, P, P, I, P, P]
lib.geglu_fp8_decode_workspace_bytes.argtypes = [I64, I64, I64]
lib.geglu_fp8_decode_workspace_bytes.restype = I64
lib.geglu_fp8_decode_gate_up.argtypes = [P, P, I64, I64, I64, P, P, P, P, I64, P, P, I64, I, P, P]
lib.geglu_fp8_decode_down.argtypes = [P, P, I64, I64, I64, P, P, I64, P, P, I, P, P]
DECODE_MAX_M = 16
lib.geglu_fp8_sm90_workspace_bytes.argtypes = [I64, I64, I64]
lib.geglu_fp8_sm90_workspace_bytes.restype = I64
lib.geglu_fp8_sm90_gate_up_variant.argtypes = [I] + lib.geglu_fp8_sm90_gate_up.argtypes[:-1] + [P, P]
lib.geglu_fp8_sm90_down_variant.argtypes = [I, P, P, I64, I64, I64, P, P, I64, P, P, P, P]


def stream():
    return ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)


def quantize_1x128(v):
    """(q, scale [rows, cols/128]) by the kernels' rule, in torch ops."""
    g = v.float().unflatten(-1, (-1, 128))
    amax = g.abs().amax(-1)
    # amax / 448 correctly rounded, as the kernels divide: torch divides by a Python
    # scalar as a multiply by its reciprocal, one ulp off at times, which moves exact
    # ties of bf16 inputs (x / scale = 184.0 between e4m3's 176 and 192).
    scale = torch.where(amax > 0, amax / torch.full_like(amax, 448.0), torch.ones_like(amax))
    q = (g / scale.unsqueeze(-1)).clamp(-448, 448).to(E4M3)
    return q.flatten(-2), scale


def dequant_rows(q, s):
    return (q.double().unflatten(-1, (-1, 128)) * s.double().unsqueeze(-1)).flatten(-2)


def quantize_blocks(w):
    """A bf16 weight [R, C] to e4m3 with one scale per 128x128 block (Transformers' rule)."""
    R, C = w.shape
    b = w.float().reshape(R // 128, 128, C // 128, 128)
    amax = b.abs().amax(dim=(1, 3)).clamp(min=1e-12)
    scale = amax / 448.0
    q = (b / scale[:, None, :, None]).clamp(-448, 448).to(E4M3).reshape(R, C)
    return q, scale.contiguous()


def dequant_blocks(q, s):
    R, C = q.shape
    return (q.double().reshape(R // 128, 128, C // 128, 128) * s.double()[:, None, :, None]).reshape(R, C)


class Fp8Mlp:
    def __init__(self, M, d, H, dtype=torch.bfloat16):
        self.M, self.d, self.H, self.dtype = M, d, H, dtype
        self.ld = (M + 3) // 4 * 4
        self.x = torch.randn(M, d, device="cuda").to(dtype)
        self.wg_bf = (torch.randn(H, d, device="cuda") * d**-0.5).to(dtype)
        self.wu_bf = (torch.randn(H, d, device="cuda") * d**-0.5).to(dtype)
        self.wd_bf = (torch.randn(d, H, device="cuda") * H**-0.5).to(dtype)
        self.wg, self.sg = quantize_blocks(self.wg_bf)
        self.wu, self.su = quantize_blocks(self.wu_bf)
        self.wd, self.sd = quantize_blocks(self.wd_bf)
        self.xq = torch.empty(M, d, device="cuda", dtype=E4M3)
        self.sx = torch.empty(d // 128, self.ld, device="cuda")
        self.hq = torch.empty(M, H, device="cuda", dtype=E4M3)
        self.sh = torch.empty(H // 128, self.ld, device="cuda")
        self.out = torch.empty(M, d, device="cuda", dtype=dtype)
        self.dws = torch.empty(max(lib.geglu_fp8_decode_workspace_bytes(M, H, d), 16), device="cuda",
                               dtype=torch.uint8)  # the decode kernels' workspace
        ws = max(lib.geglu_fp8_sm90_workspace_bytes(M, H, d), 64 << 20)  # the variants run stream-K at any M
        self.ws = torch.empty(ws, device="cuda", dtype=torch.uint8)

    def quantize_x(self):
        dt = 0 if self.dtype == torch.bfloat16 else 1
        st = lib.geglu_fp8_quantize_rows(self.x.data_ptr(), self.d, self.M, self.d, dt, self.xq.data_ptr(),
                                         self.sx.data_ptr(), self.ld, stream())
        assert st == 0, f"quantize status {st}"

    def decode_gate_up(self, approximate=1):
        st = lib.geglu_fp8_decode_gate_up(self.xq.data_ptr(), self.sx.data_ptr(), self.ld, self.M, self.d,
                                          self.wg.data_ptr(), self.sg.data_ptr(), self.wu.data_ptr(),
                                          self.su.data_ptr(), self.H, self.hq.data_ptr(), self.sh.data_ptr(),
                                          self.ld, approximate, self.dws.data_ptr(), stream())
        assert st == 0, f"decode gate_up status {st}"

    def decode_down(self, residual=None):
        dt = 0 if self.dtype == torch.bfloat16 else 1
        st = lib.geglu_fp8_decode_down(self.hq.data_ptr(), self.sh.data_ptr(), self.ld, self.M, self.H,
                                       self.wd.data_ptr(), self.sd.data_ptr(), self.d,
                                       None if residual is None else residual.data_ptr(), self.out.data_ptr(), dt,
                                       self.dws.data_ptr(), stream())
        assert st == 0, f"decode down status {st}"

    def run_decode(self, residual=None, approximate=1):
        """The decode route: x's quantization, then the two weight-streaming kernels."""
        self.quantize_x()
        self.decode_gate_up(approximate)
        self.decode_down(residual)
        return self.out

    def run(self, residual=None, approximate=1):
        s = stream()
        dt = 0 if self.dtype == torch.bfloat16 else 1
        self.quantize_x()
        st = lib.geglu_fp8_sm90_gate_up(self.xq.data_ptr(), self.sx.data_ptr(), self.ld, self.M, self.d,
                                        self.wg.data_ptr(), self.sg.data_ptr(), self.wu.data_ptr(),
                                        self.su.data_ptr(), self.H, self.hq.data_ptr(), self.sh.data_ptr(),
                                        self.ld, approximate, s)
        assert st == 0, f"gate_up status {st}"
        st = lib.geglu_fp8_sm90_down(self.hq.data_ptr(), self.sh.data_ptr(), self.ld, self.M, self.H,
                                     self.wd.data_ptr(), self.sd.data_ptr(), self.d,
                                     None if residual is None else residual.data_ptr(), self.out.data_ptr(), dt,
                                     self.ws.data_ptr(), s)
        assert st == 0, f"down status {st}"
        return self.out

    def reference(self, residual=None, approximate="tanh"):
        """float64 math on the dequantized weights, x and h quantized by the same rule
        (h's quantization from float32 h, as the kernel's epilogue has it); and the
        unquantized float64 MLP."""
        xq, sx = quantize_1x128(self.x)
        xd = dequant_rows(xq, sx)
        gate = xd @ dequant_blocks(self.wg, self.sg).T
        up = xd @ dequant_blocks(self.wu, self.su).T
        h = (F.gelu(gate, approximate=approximate) * up).float()
        hq, sh = quantize_1x128(h)
        y = dequant_rows(hq, sh) @ dequant_blocks(self.wd, self.sd).T
        x64 = self.x.double()
        y_exact = (F.gelu(x64 @ self.wg_bf.double().T, approximate=approximate) * (x64 @ self.wu_bf.double().T)) @ self.wd_bf.double().T
        if residual is not None:
            y = y + residual.double()
            y_exact = y_exact + residual.double()
        return y, y_exact, xq, sx, hq, sh


def rel(a, b):
    return ((a.double() - b).norm() / b.norm()).item()


def check(M, d, H, residual=False, approximate=1, dtype=torch.bfloat16, decode=False):
    m = Fp8Mlp(M, d, H, dtype)
    res = torch.randn(M, d, device="cuda").to(dtype) if residual else None
    m.out.fill_(float("nan"))
    m.hq.fill_(float("nan"))
    m.sh.fill_(float("nan"))
    m.dws.fill_(255)  # NaN as float32
    y = (m.run_decode if decode else m.run)(res, approximate).clone()
    torch.cuda.synchronize()
    ref, exact, xq, sx, hq, sh = m.reference(res, "tanh" if approximate else "none")
    e_ours, e_ref, e_exact = rel(y, ref), rel(ref.to(dtype), exact), rel(y, exact)
    xq_diff = (m.xq.view(torch.uint8) != xq.view(torch.uint8)).float().mean().item()
    sx_err = (m.sx[:, :M].T - sx).abs().max().item()
    hq_diff = (m.hq.view(torch.uint8) != hq.view(torch.uint8)).float().mean().item()
    sh_rel = ((m.sh[:, :M].T - sh).abs() / sh).max().item()
    # Hopper's FP8 wgmma accumulates each 128-deep block at reduced precision (~1e-4
    # relative), so about 1% of h's bytes land one e4m3 step from the float64 reference's;
    # the bound: well under the quantization error itself, and the accuracy target
    # (within 2x of the reference's own error against the unquantized MLP).
    ok = (e_ours < 0.35 * e_ref and e_exact < 2 * e_ref and torch.isfinite(y).all().item()
          and xq_diff == 0 and sx_err == 0)
    log(f"check{' decode' if decode else ''} M={M:5d} d={d:5d} H={H:5d} res={int(residual)} tanh={approximate} {str(dtype)[6:]}: "
        f"err vs ref {e_ours:.2e}, vs exact {e_exact:.2e} (ref vs exact {e_ref:.2e}); x bytes differ {xq_diff:.1e}, "
        f"h bytes differ {hq_diff:.1e}, h scale rel {sh_rel:.1e} -> {'ok' if ok else 'FAIL'}")
    return dict(M=M, d=d, H=H, decode=decode, residual=residual, approximate=approximate, err=e_ours, err_exact=e_exact, ref_err=e_ref,
                h_bytes_differ=hq_diff, ok=bool(ok))


def gate_up_variant(m, variant):
    return lib.geglu_fp8_sm90_gate_up_variant(variant, m.xq.data_ptr(), m.sx.data_ptr(), m.ld, m.M, m.d,
                                              m.wg.data_ptr(), m.sg.data_ptr(), m.wu.data_ptr(), m.su.data_ptr(), m.H,
                                              m.hq.data_ptr(), m.sh.data_ptr(), m.ld, 1, m.ws.data_ptr(), stream())


def down_variant(m, variant):
    return lib.geglu_fp8_sm90_down_variant(variant, m.hq.data_ptr(), m.sh.data_ptr(), m.ld, m.M, m.H,
                                           m.wd.data_ptr(), m.sd.data_ptr(), m.d, None, m.out.data_ptr(),
                                           m.ws.data_ptr(), stream())


def check_variants(M, d, H):
    """Each gate/up variant's h against the Cooperative one's (the same bytes but for a
    rare one-step difference where an accumulation order differs), and the stream-K down
    projection against the data-parallel one."""
    m = Fp8Mlp(M, d, H)
    m.run()
    assert gate_up_variant(m, 0) == 0 and down_variant(m, 0) == 0  # the reference: Cooperative, data-parallel
    torch.cuda.synchronize()
    hq, sh, y = m.hq.clone(), m.sh.clone(), m.out.clone()
    res = {}
    for variant, name in ((2, "stream-K"),):
        m.hq.fill_(float("nan"))
        st = gate_up_variant(m, variant)
        torch.cuda.synchronize()
        res[name] = (m.hq.view(torch.uint8) == hq.view(torch.uint8)).float().mean().item()
        assert st == 0, (name, st)
    m.hq.copy_(hq)
    m.sh.copy_(sh)
    down_err = {}
    for variant, name in ((1, "stream-K"), (2, "down cluster 1x2"))[:2 if M > DECODE_MAX_M else 1]:
        m.out.fill_(float("nan"))
        st = down_variant(m, variant)
        torch.cuda.synchronize()
        down_err[name] = rel(m.out, y.double()) if st == 0 else float("inf")
    ok = res["stream-K"] > 0.999 and all(e < 1e-2 for e in down_err.values())
    log(f"variants M={M} d={d} H={H}: h bytes equal to cooperative's: stream-K {res['stream-K']:.6f}; "
        "down variants vs data-parallel "
        + ", ".join(f"{name} {e:.2e}" for name, e in down_err.items()) + f" -> {'ok' if ok else 'FAIL'}")
    return dict(M=M, d=d, H=H, **res, down_err=down_err, ok=bool(ok))


def edge_rows():
    """Zero rows, a row with one huge value, an inf row and a NaN row."""
    m = Fp8Mlp(8, 256, 256)
    m.x[1] = 0
    m.x[2, 5] = 3e4
    m.x[3, 7] = float("inf")
    m.x[4, 9] = float("nan")
    y = m.run().clone()
    torch.cuda.synchronize()
    ref = m.reference()[0]
    finite_rows = [0, 1, 2, 5, 6, 7]
    e = rel(y[finite_rows], ref[finite_rows])
    zero_ok = torch.isfinite(y[1]).all().item() and (m.sx[:, 1] == 1).all().item()
    nan_rows = [torch.isnan(y[r]).any().item() for r in (3, 4)]
    log(f"edge rows: finite rows err {e:.2e}; zero row finite with scale 1: {zero_ok}; "
        f"inf row -> NaN: {nan_rows[0]}, NaN row -> NaN: {nan_rows[1]}")
    return dict(err=e, zero_ok=bool(zero_ok), inf_nan=nan_rows, ok=bool(e < 0.05 and zero_ok and all(nan_rows)))


def bench(M, d, H):
    from triton.testing import do_bench

    m = Fp8Mlp(M, d, H)
    x, wg, wu, wd = m.x, m.wg_bf, m.wu_bf, m.wd_bf
    wgu = torch.cat([wg, wu])
    # FP8 GEMMs alone: rowwise scales, operands already quantized.
    xq = x.float().clamp(-448, 448).to(E4M3)
    wgu_q = wgu.float().mul(8).clamp(-448, 448).to(E4M3)
    wd_q = wd.float().mul(8).clamp(-448, 448).to(E4M3)
    hq_in = torch.randn(M, H, device="cuda").to(E4M3)
    sa = torch.ones(M, 1, device="cuda")
    sb1 = torch.ones(1, 2 * H, device="cuda")
    sb2 = torch.ones(1, d, device="cuda")

    def fp8_gemms():
        torch._scaled_mm(xq, wgu_q.T, scale_a=sa, scale_b=sb1, out_dtype=torch.bfloat16)
        torch._scaled_mm(hq_in, wd_q.T, scale_a=sa, scale_b=sb2, out_dtype=torch.bfloat16)

    def bf16_gemms():
        torch.mm(x, wgu.T)
        torch.mm(torch.empty(M, H, device="cuda", dtype=torch.bfloat16), wd.T)

    s = stream()
    dt = 0

    def quant():
        lib.geglu_fp8_quantize_rows(m.x.data_ptr(), d, M, d, dt, m.xq.data_ptr(), m.sx.data_ptr(), m.ld, s)

    def gate_up():
        lib.geglu_fp8_sm90_gate_up(m.xq.data_ptr(), m.sx.data_ptr(), m.ld, M, d, m.wg.data_ptr(), m.sg.data_ptr(),
                                   m.wu.data_ptr(), m.su.data_ptr(), H, m.hq.data_ptr(), m.sh.data_ptr(), m.ld, 1, s)

    def down():
        lib.geglu_fp8_sm90_down(m.hq.data_ptr(), m.sh.data_ptr(), m.ld, M, H, m.wd.data_ptr(), m.sd.data_ptr(), d,
                                None, m.out.data_ptr(), dt, m.ws.data_ptr(), s)

    def gate_up_streamk():
        assert gate_up_variant(m, 2) == 0

    def gate_up_coop():
        assert gate_up_variant(m, 0) == 0

    def down_dp():
        assert down_variant(m, 0) == 0

    def down_streamk():
        assert down_variant(m, 1) == 0

    def down_clusters():
        assert down_variant(m, 2) == 0

    decode_rows, prefill_rows = (), ()
    if M <= DECODE_MAX_M:
        decode_rows = (("decode route", m.run_decode), ("decode: gate/up", m.decode_gate_up),
                       ("decode: down", m.decode_down))
    else:
        prefill_rows = (("down cluster 1x2", down_clusters),)
    rows = {}
    for name, fn in decode_rows + (("bf16 cuBLAS GEMMs alone", bf16_gemms), ("FP8 GEMMs alone", fp8_gemms), ("ours FP8", m.run),
                     ("ours: quantize x", quant), ("ours: gate/up", gate_up), ("gate/up cooperative", gate_up_coop),
                     ("gate/up stream-K", gate_up_streamk),
                     ("ours: down", down), ("down data-parallel", down_dp), ("down stream-K", down_streamk)) + prefill_rows:
        fn()
        torch.cuda.synchronize()
        rows[name] = do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3
    flops = 2 * M * d * 3 * H
    ceiling = rows["FP8 GEMMs alone"]
    floor = ""
    if M <= DECODE_MAX_M:
        bw = copy_bandwidth()
        floor_us = 3 * d * H / bw * 1e6
        rows["weight-read floor"] = floor_us
        floor = (f"; floor {floor_us:.1f} us (copy {bw / 1e12:.2f} TB/s): decode route {rows['decode route'] / floor_us:.2f}x, "
                 f"gate/up {rows['decode: gate/up'] / (floor_us * 2 / 3):.2f}x, down {rows['decode: down'] / (floor_us / 3):.2f}x")
    log(f"bench M={M:5d} d={d:5d} H={H:5d}: " + ", ".join(f"{k} {v:8.1f} us" for k, v in rows.items())
        + f"; ours {flops / rows['ours FP8'] / 1e6:.0f} TFLOP/s, {rows['ours FP8'] / ceiling:.2f}x FP8 GEMMs alone" + floor)
    return dict(M=M, d=d, H=H, **rows)


def copy_bandwidth():
    """Device-to-device copy rate of a 1 GiB buffer, bytes read + written per second (as
    benchmarks/compare_fp8_mlp.py): the weight-read floor's rate."""
    from triton.testing import do_bench

    a = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    b = torch.empty_like(a)
    ms = do_bench(lambda: b.copy_(a), warmup=10, rep=100, return_mode="median")
    return 2 * a.numel() / (ms * 1e-3)


def cold_us(fn, reps=100, flush_mb=512):
    """Median time of fn after a read of flush_mb MB (L2 holds clean lines, as in a model
    where the weights before were read evict-first), on CUDA events."""
    flush = torch.empty(flush_mb << 18, device="cuda")
    flush.fill_(1.0)
    times = []
    for _ in range(reps):
        flush.sum()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return sorted(times)[len(times) // 2]


def back_to_back_us(fn, calls=50):
    """Mean time of fn over `calls` calls in a row (no flush: the PDL chain overlaps each
    call's start with the tail of the one before)."""
    for _ in range(3):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(calls):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) * 1e3 / calls


def decode_timings(M, d, H):
    """The decode kernels, the GEMM route and a copy of the same bytes timed three ways:
    do_bench (its L2 flush writes 256 MB, so the kernel starts with the L2 full of dirty
    lines to write back), after a clean flush, and back to back. (clean64: after a 64 MB
    read, ~20 us of GPU work, which the host's ctypes call path outlasts: the host's time,
    not the kernels'.)"""
    from triton.testing import do_bench

    m = Fp8Mlp(M, d, H)
    floor = 3 * d * H / copy_bandwidth() * 1e6
    rows = {}
    # The floor's own kernel for scale: a copy moving the weights' bytes (half read, half written).
    src = torch.empty(3 * d * H // 2, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    for name, fn in (("copy of the weights' bytes", lambda: dst.copy_(src)), ("decode route", m.run_decode),
                     ("decode: gate/up", m.decode_gate_up), ("decode: down", m.decode_down), ("GEMM route", m.run)):
        fn()
        torch.cuda.synchronize()
        rows[name] = dict(do_bench=do_bench(fn, warmup=50, rep=300, return_mode="median") * 1e3,
                          clean=cold_us(fn), clean64=cold_us(fn, flush_mb=64), back_to_back=back_to_back_us(fn))
    share = {"copy of the weights' bytes": 1.0, "decode route": 1.0, "decode: gate/up": 2 / 3,
             "decode: down": 1 / 3, "GEMM route": 1.0}
    log(f"timings M={M} d={d} H={H}, floor {floor:.1f} us: " + "; ".join(
        f"{k}: " + ", ".join(f"{t} {v:.1f} ({v / (floor * share[k]):.2f}x)" for t, v in r.items())
        for k, r in rows.items()))
    return dict(M=M, d=d, H=H, floor_us=floor, rows=rows)


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".sm90dev")
    torch.manual_seed(0)
    log(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}")
    if os.environ.get("FP8_DECODE_NCU"):  # one decode-route call per size, for Nsight Compute
        for M, d, H in ((1, 3072, 24576), (4, 3072, 24576)):
            Fp8Mlp(M, d, H).run_decode()
        torch.cuda.synchronize()
        return
    if os.environ.get("FP8_DIAGNOSE"):
        diagnose(7)
        diagnose(64)
        return
    checks = []
    for M in (1, 2, 3, 4, 7, 8, 9, 16):
        checks.append(check(M, 768, 3072, decode=True))
    checks.append(check(1, 3072, 24576, decode=True, residual=True))
    checks.append(check(16, 3072, 24576, decode=True, residual=True, approximate=0))
    checks.append(check(4, 2048, 16384, decode=True, approximate=0))
    checks.append(check(3, 384, 640, decode=True, residual=True, dtype=torch.float16))
    checks.append(check(12, 384, 640, decode=True, residual=True, dtype=torch.float16))
    checks.append(check(2, 128, 128, decode=True))
    if os.environ.get("FP8_PREFILL_ONLY"):  # the prefill GEMMs and their variants
        ok = check_variants(4096, 3072, 24576)["ok"]
        for M, d, H in ((8192, 768, 3072), (4096, 2048, 16384), (4096, 3072, 24576)):
            bench(M, d, H)
        log("ALL OK" if ok else "SOME FAILED")
        return
    if os.environ.get("FP8_DECODE_ONLY"):
        # FP8_DECODE_SHAPES="MxDxH,...": other shapes (e.g. the same tiles over twice the K).
        shapes = [tuple(map(int, v.split("x"))) for v in os.environ.get("FP8_DECODE_SHAPES", "").split(",") if v]
        for M, d, H in shapes or ((1, 3072, 24576), (16, 3072, 24576), (1, 2048, 16384), (16, 2048, 16384)):
            decode_timings(M, d, H)
        log("ALL OK" if all(c["ok"] for c in checks) else "SOME FAILED")
        return
    for M in (1, 7, 16, 64, 129, 1000):
        checks.append(check(M, 768, 3072))
    checks.append(check(129, 128, 128))
    checks.append(check(64, 384, 640, residual=True))
    checks.append(check(200, 768, 3072, approximate=0))
    checks.append(check(200, 768, 3072, residual=True, dtype=torch.float16))
    checks.append(check(4096, 2048, 16384))
    checks.append(check(16, 3072, 24576))
    checks.append(check_variants(1000, 768, 3072))
    checks.append(check_variants(16, 3072, 24576))
    checks.append(check_variants(1, 2048, 16384))
    edge = edge_rows()
    benches = []
    for M, d, H in ((8192, 768, 3072), (4096, 2048, 16384), (4096, 3072, 24576), (16, 3072, 24576),
                    (1, 3072, 24576), (16, 2048, 16384)):
        benches.append(bench(M, d, H))
    ok = all(c["ok"] for c in checks) and edge["ok"]
    log("ALL OK" if ok else "SOME FAILED")
    save_results(out_dir, "check_fp8_mlp", dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                                                checks=checks, edge=edge, bench=benches))


def diagnose(M=64, d=768, H=3072):
    """Where the kernels and the torch reference part: x's bytes, then h from the kernel's
    own quantized x (so that x's differences do not carry into h)."""
    m = Fp8Mlp(M, d, H)
    m.run()
    torch.cuda.synchronize()
    xq, sx = quantize_1x128(m.x)
    bad = (m.xq.view(torch.uint8) != xq.view(torch.uint8)).nonzero()
    log(f"diagnose x: {len(bad)} of {m.x.numel()} bytes differ; scale max abs diff {(m.sx[:, :M].T - sx).abs().max().item():.3e}")
    for r, c in bad[:8].tolist():
        s_k = m.sx[c // 128, r].item()
        v = m.x[r, c].float().item()
        log(f"  x[{r},{c}]={v!r} scale k={s_k!r} t={sx[r, c // 128].item()!r} x/s={v / s_k!r} "
            f"q k={m.xq[r, c].float().item()} t={xq[r, c].float().item()}")
    xd = dequant_rows(m.xq, m.sx[:, :M].T.contiguous())
    gate = xd @ dequant_blocks(m.wg, m.sg).T
    up = xd @ dequant_blocks(m.wu, m.su).T
    h = (F.gelu(gate, approximate="tanh") * up).float()
    hq, sh = quantize_1x128(h)
    hk = dequant_rows(m.hq, m.sh[:, :M].T.contiguous())
    diff = (m.hq.view(torch.uint8) != hq.view(torch.uint8))
    rel_h = ((hk - h.double()).abs() / h.double().abs().clamp(min=1e-30))
    log(f"diagnose h (from the kernel's x): {diff.float().mean().item():.2e} bytes differ; h scale rel max "
        f"{((m.sh[:, :M].T - sh).abs() / sh).max().item():.2e}; |h_kernel - h| / |h| median {rel_h.median().item():.2e}, "
        f"99.9% {rel_h.flatten().kthvalue(int(rel_h.numel() * 0.999)).values.item():.2e}")
    rows, cols = diff.nonzero()[:6].T.tolist() if diff.any() else ([], [])
    for r, c in zip(rows, cols):
        log(f"  h[{r},{c}] ref {h[r, c].item()!r} kernel deq {hk[r, c].item()!r} scale k={m.sh[c // 128, r].item()!r} "
            f"t={sh[r, c // 128].item()!r}")
    # per tile position: does the error depend on the row within a 128-row tile or the column block?
    err_rows = rel_h.median(dim=1).values
    log("  median rel error by row (first 20): " + " ".join(f"{v:.1e}" for v in err_rows[:20].tolist()))
    err_cols = rel_h.median(dim=0).values.unflatten(0, (-1, 8)).median(dim=1).values
    log("  median rel error by 8-column block (first 32): " + " ".join(f"{v:.1e}" for v in err_cols[:32].tolist()))


if __name__ == "__main__":
    main()
