"""Probe (one run, then deleted; its log: benchmarks/results/stable_abi/train_autograd_probe_h100.log):
host cost of the training MLP's autograd glue. The version-tied build (C++ node) vs
the stable-ABI build with torch.library.register_autograd on `_geglu_mlp_train` (as
linear.py had it when this ran) vs a plain torch.autograd.Function around the same
native ops. Run from the repo root with build-tied/ and build-stable/ present."""
import statistics, time
from pathlib import Path
import torch
from kernels import get_local_kernel

tied = get_local_kernel(Path("build-tied").resolve())
st = get_local_kernel(Path("build-stable").resolve())
ops = st._ops.ops


class Train(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, wg, wu, wd, bg, bu, bd, res, approx):
        y, pre, h = ops._geglu_mlp_train.default(x, wg, wu, wd, bg, bu, bd, res, approx)
        ctx.save_for_backward(x, wg, wu, wd, bg, pre, h)
        ctx.approx = approx
        return y

    @staticmethod
    def backward(ctx, grad):
        x, wg, wu, wd, bg, pre, h = ctx.saved_tensors
        need = ctx.needs_input_grad
        needs = sum(1 << i for i in range(7) if need[i])
        g = grad.reshape(-1, grad.shape[-1])
        if not g.is_contiguous():
            g = g.contiguous()
        x2 = x if x.dim() == 2 else x.reshape(-1, x.shape[-1])
        grads = ops._geglu_mlp_backward.default(g, x2, wg, wu, wd, bg, pre, h, needs, ctx.approx)
        dx = grads[0] if grads[0] is None or x.dim() == 2 else grads[0].view(x.shape)
        return (dx, *grads[1:], grad if need[7] else None, None)


def wall(fn, n):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn()
    torch.cuda.synchronize(); return (time.perf_counter() - t) / n * 1e6


for name, m, d, h in [("tiny", 1, 64, 256), ("blog", 8192, 768, 3072)]:
    r = lambda *s: torch.randn(*s, device="cuda", dtype=torch.bfloat16)
    x, wg, wu, wd = (t.requires_grad_() for t in (r(m, d), r(h, d) * d**-0.5, r(h, d) * d**-0.5, r(d, h) * h**-0.5))
    dy = r(m, d)
    def step(f):
        def s():
            y = f(x, wg, wu, wd)
            y.backward(dy)
            for t in (x, wg, wu, wd): t.grad = None
        return s
    def fwd(f):
        def s():
            f(x, wg, wu, wd)
        return s
    fns = {
        "tied": lambda x, wg, wu, wd: tied.geglu_mlp(x, wg, wu, wd, residual=x),
        "stable register_autograd": lambda x, wg, wu, wd: st.geglu_mlp(x, wg, wu, wd, residual=x),
        "stable autograd.Function": lambda x, wg, wu, wd: Train.apply(x, wg, wu, wd, None, None, None, x, "tanh"),
    }
    for kind, wrap in (("fwd only", fwd), ("step", step)):
        res = {k: [] for k in fns}
        for k, f in fns.items():
            for _ in range(5): wrap(f)()
        for _ in range(7):
            for k, f in fns.items(): res[k].append(wall(wrap(f), 50))
        for k, v in res.items():
            print(f"{name:5s} {kind:9s} {k:26s} {statistics.median(v):8.1f} us [{min(v):.1f}-{max(v):.1f}]")
