"""What the ctypes check/bench scripts here share: the repository root (the libraries
are under ROOT/.sm90dev), one log, printed as it is written and saved whole at the
end, so a script and the helpers it imports from another one write to the same file,
and the operands and error measure of their float64 checks."""

import datetime
import json
import os
import statistics

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_lines: list[str] = []


def log(*a):
    s = " ".join(str(x) for x in a)
    print(s, flush=True)
    _lines.append(s)


def save_log(path: str) -> None:
    with open(path, "w") as f:
        f.write("\n".join(_lines) + "\n")


def graph_time(fn, reps=20):
    """fn captured `reps` times in one CUDA graph (after a warm-up on a side stream): a
    function that replays the graph once and returns us per call."""
    fn()
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()

    def once():
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) * 1000 / reps

    return once


def graph_rounds(cands, rounds=5, skip_failures=False):
    """Each candidate captured (graph_time) and replayed in `rounds` interleaved rounds:
    {name: [us per call, one per round]}. skip_failures: a candidate whose capture
    fails is logged and left out instead of raising."""
    timers = {}
    for k, f in cands.items():
        try:
            timers[k] = graph_time(f)
        except Exception as e:  # noqa: BLE001
            if not skip_failures:
                raise
            log(f"  {k}: failed {e}")
    samples = {k: [] for k in timers}
    for _ in range(rounds):
        for k, t in timers.items():
            samples[k].append(t())
    return samples


def read_bandwidth(copy=False):
    """Bytes/s of an int64 sum over 1 GiB (the read rate the weight-read floors use) and,
    with copy=True, of a 1 GiB device-to-device copy (read + write bytes): medians of 10
    graph replays of 5 calls each."""
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    rd = graph_time(lambda: big.view(torch.int64).sum(), reps=5)
    bw_read = (1 << 30) / (statistics.median(rd() for _ in range(10)) * 1e-6)
    if not copy:
        log(f"read bandwidth (int64 sum of 1 GiB): {bw_read / 1e12:.3f} TB/s")
        return bw_read
    dst = torch.empty_like(big)
    cp = graph_time(lambda: dst.copy_(big), reps=5)
    bw_copy = 2 * (1 << 30) / (statistics.median(cp() for _ in range(10)) * 1e-6)
    log(f"read bandwidth (int64 sum of 1 GiB): {bw_read / 1e12:.3f} TB/s; copy: {bw_copy / 1e12:.3f} TB/s")
    return bw_read, bw_copy


def save_results(out_dir: str, stem: str, results) -> None:
    """The log as out_dir/stem.log and `results` as out_dir/stem.json."""
    os.makedirs(out_dir, exist_ok=True)
    save_log(os.path.join(out_dir, stem + ".log"))
    with open(os.path.join(out_dir, stem + ".json"), "w") as f:
        json.dump(results, f, indent=1)


# The Gemma MLPs the decode checks time: (name, model width, hidden width).
GEMMA_SHAPES = (("gemma2b", 2048, 16384), ("gemma2-2b", 2304, 9216), ("gemma7b", 3072, 24576),
                ("gemma2-9b", 3584, 14336), ("gemma2-27b", 4608, 36864))


def decode_grid(prefix, tokens):
    """(GEMMA_SHAPES, token counts) as {prefix}_SHAPES / {prefix}_TOKENS narrow them (comma
    lists in the environment; `tokens` is the default token list, "1,4,16"). A
    {prefix}_SHAPES entry name=d:H adds a shape of model width d and hidden width H."""
    names = os.environ.get(f"{prefix}_SHAPES")
    entries = names.split(",") if names else []
    shapes = tuple(s for s in GEMMA_SHAPES if not names or s[0] in entries)
    for e in entries:
        if "=" in e:
            name, dims = e.split("=")
            d, H = dims.split(":")
            shapes += ((name, int(d), int(H)),)
    return shapes, tuple(int(m) for m in os.environ.get(f"{prefix}_TOKENS", tokens).split(","))


def mlp_weights(d, H, dtype=torch.bfloat16):
    """(w_gate, w_up, w_down) of a decode MLP: gate and up the two row halves of one merged
    [2H, d] weight (as the op reads a merged weight), down [d, H]; scaled for O(1) outputs."""
    wm = torch.randn(2 * H, d, device="cuda").mul_(d ** -0.5).to(dtype)
    return wm[:H], wm[H:], torch.randn(d, H, device="cuda").mul_(H ** -0.5).to(dtype)


def token_operands(M, d, H, dtype=torch.bfloat16):
    """(x [M, d], h [M, H], residual [M, d], out [M, d]) of M tokens."""
    x, h, r = (torch.randn(rows, cols, device="cuda").to(dtype) for rows, cols in ((M, d), (M, H), (M, d)))
    return x, h, r, torch.empty(M, d, device="cuda", dtype=dtype)


def padded(rows, cols, pad, dtype, scale=1.0):
    """A fresh random [rows, cols] matrix on the GPU whose row stride is cols + pad."""
    return torch.randn(rows, cols + pad, device="cuda").mul_(scale).to(dtype)[:, :cols]


def rel_err(y, ref):
    """max |y - ref| / max |ref|, ref a float64 tensor."""
    return ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def check_linear_case(linear, M, K, N, pad, dtype):
    """One float64 check of linear(x, w, out, bias, residual) -> rc (0: computed): rows padded
    by `pad` elements, a bias where pad, a residual where pad or M is odd, the output
    poisoned with NaN. Returns (rc, relative error; inf where the call refused)."""
    x = padded(M, K, pad, dtype)
    w = padded(N, K, pad, dtype, K ** -0.5)
    b = torch.randn(N, device="cuda").to(dtype) if pad else None
    r = padded(M, N, pad, dtype) if pad or M % 2 else None
    out = torch.full((M, N + pad), float("nan"), device="cuda", dtype=dtype)[:, :N]
    rc = linear(x, w, out, b, r)
    torch.cuda.synchronize()
    ref = x.double() @ w.double().t()
    ref = ref + (b.double() if b is not None else 0) + (r.double() if r is not None else 0)
    return rc, (rel_err(out, ref) if rc == 0 else float("inf"))


def log_device():
    log(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"{datetime.date.today()}")


def log_rows(title, samples, floor_of, res, width=32):
    """Each candidate's median us per call, its range over the rounds and its share of
    the weight-read floor floor_of(label) (us); the samples go to res["title label"]."""
    for k, v in samples.items():
        med, floor = statistics.median(v), floor_of(k)
        log(f"  {k:{width}s} {med:8.1f} us ({min(v):.1f}-{max(v):.1f})  {floor / med:.0%} of read, "
            f"{med / floor:.3f}x floor")
        res[f"{title} {k}"] = v
