"""One forward's GPU lane per rung, stacked: rungs as rows, kernels as boxes in time,
each labelled with a short kernel name (the full names are in the traces and the JSON).

    python benchmarks/plot_kernel_lanes.py ladder.json ladder.png   # re-render a summary

matplotlib is optional (the package does not need it): without it `plot_lanes` says so
and draws nothing.
"""

import json
import re
import sys

# Colours by what a kernel does, so the fusion reads at a glance.
_COLOURS = {"gemm": "#4C72B0", "fused": "#55A868", "elementwise": "#DD8452", "other": "#8C8C8C"}


def short_kernel_name(name: str) -> str:
    """A few words for a kernel or op name: the package's kernels by what they are,
    other GEMM kernels (cuBLAS's nvjet / xmma / gemm names) as "cuBLAS GEMM", ATen's
    elementwise kernels by their functor, Inductor's by their fused ops, templates and
    namespaces stripped from the rest."""
    low = name.lower()
    if low.startswith(("memcpy", "memset")):
        return name.split(" ")[0]
    if low.startswith("triton_") or "cpp_fused" in low:  # Inductor: triton_poi_fused_gelu_mul_0
        fused = re.search(r"fused_(\w+?)(?:_\d+)?$", name)
        # The view ops Inductor folds into a kernel's name (_unsafe_view_gelu_mul) say nothing.
        ops = re.sub(r"_?unsafe_view_?|^view_|_view(?=_|$)", "", fused.group(1)) if fused else ""
        return f"inductor {ops}" if ops else name
    if "::" in name and "<" not in name and "(" not in name and " " not in name:  # a dispatcher op
        return name.split("::")[-1]
    if "geglu" in low:  # before the GEMM rule: the Hopper engine's kernel is a CUTLASS template
        if "cutlass" in low:
            return "geglu GEMM (sm90)"
        if "geglu_cuda::" in name:
            return "geglu kernel"
        if name in ("_geglu_tile_kernel", "_geglu_tma_kernel"):  # triton_kernels/gemm.py
            return "geglu GEMM (Triton)"
        if name == "_geglu_splitk_reduce_kernel":
            return "geglu split-K reduce"
        if name.startswith("_geglu_tanh_forward"):  # liger_kernel/ops/geglu.py
            return "Liger geglu"
    if "elementwise_kernel" in low or "vectorized" in low:
        for functor, short in (("gelu", "gelu"), ("mul", "mul"), ("add", "add"), ("copy", "copy")):
            if functor in low:
                return f"aten {short}"
        return "aten elementwise"
    if "nvjet" in low or "xmma" in low or "gemm" in low:  # nvjet_*, sm90_xmma_*, ampere_*gemm*, cutlass_80_*
        return "cuBLAS GEMM"
    base = re.sub(r"^void\s+", "", name)
    base = re.split(r"[<(]", base, maxsplit=1)[0]
    base = base.split("::")[-1]
    return re.sub(r"_kernel$", "", base.lstrip("_"))[:32]


def kernel_kind(name: str) -> str:
    low = name.lower()
    if "geglu" in low or "fused" in low:
        return "fused"
    if "gemm" in low or "nvjet" in low or "xmma" in low or low.endswith(("::mm", "::linear", "::addmm")):
        return "gemm"
    if "elementwise" in low or "gelu" in low or "mul" in low:
        return "elementwise"
    return "other"


def plot_lanes(rows, path, title: str = "") -> bool:
    """rows: [(rung name, [{"name", "start_us", "duration_us"}])], drawn top to bottom
    into a PNG at `path`. Returns False (having said why) where matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display on the GPU machine or in CI
        import matplotlib.pyplot as plt
    except ImportError as e:
        print(f"plot skipped: matplotlib is not installed ({e})")
        return False
    span = max((ev["start_us"] + ev["duration_us"] for _, lane in rows for ev in lane), default=1.0)
    fig, ax = plt.subplots(figsize=(12, 0.8 + 0.7 * len(rows)))
    for i, (rung, lane) in enumerate(rows):
        y = len(rows) - 1 - i
        for ev in lane:
            kind = kernel_kind(ev["name"])
            ax.broken_barh([(ev["start_us"], ev["duration_us"])], (y - 0.35, 0.7),
                           facecolors=_COLOURS[kind], edgecolor="black", linewidth=0.5)  # fmt: skip
            if ev["duration_us"] > 0.04 * span:  # a label only where it fits
                ax.text(ev["start_us"] + ev["duration_us"] / 2, y, short_kernel_name(ev["name"]),
                        ha="center", va="center", fontsize=7, color="white", clip_on=True)  # fmt: skip
        ax.text(span * 1.01, y, f"{len(lane)}", va="center", fontsize=8)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([rung for rung, _ in reversed(rows)])
    ax.set_xlim(0, span * 1.05)
    ax.set_xlabel("us from the forward's first kernel (right: kernels per forward)")
    ax.set_title(title, fontsize=9, loc="left")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in _COLOURS.values()]
    ax.legend(handles, list(_COLOURS), loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=7, ncol=4,
              frameon=False)  # fmt: skip
    fig.savefig(path, dpi=150, bbox_inches="tight")  # the legend below the axes included
    plt.close(fig)
    print(f"wrote {path}")
    return True


def rows_from_summary(summary: dict) -> list:
    """The lanes of a profile_mlp_ladder.py JSON summary, ran rungs only."""
    return [(r["name"], r["one_forward"]) for r in summary["rungs"] if "one_forward" in r]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__)
        return 2
    summary = json.loads(open(argv[0]).read())
    return 0 if plot_lanes(rows_from_summary(summary), argv[1], summary.get("title", "")) else 1


if __name__ == "__main__":
    sys.exit(main())
