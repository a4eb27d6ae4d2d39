"""Draws the headline comparisons from the committed results as PNGs under docs/.

    python benchmarks/render_figures.py            # every figure
    python benchmarks/render_figures.py --check    # read the summaries, draw nothing

Reads `benchmarks/results/<card>_<date>/summary.json` (each written from that folder's
logs) and writes:
- docs/mlp_prefill_h100.png: the MLP layer against eager, torch.compile, Liger and
  cuBLAS's GEMMs alone per shape (newest H100 run);
- docs/decode_mlp_floor.png: the decode MLP against the weight-read floor, plain calls
  and CUDA-graph replay (the newest run with decode rows, per card);
- docs/generate_vs_eager.png: `generate()` with kernelized layers, Liger and
  torch.compile, each against eager (the newest model-level run);
- docs/fp8_mlp_h100.png: the FP8 MLP (geglu_mlp_fp8) beside bf16 eager, the bf16 layer,
  torch composed FP8 and the FP8 GEMMs alone per shape (newest H100 run with FP8 rows).

Each figure's title names the card and the date of its run. matplotlib is optional
(the package does not need it): without it the script says so and draws nothing.
"""

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DOCS = REPO / "docs"

# One colour per row across the figures.
COLOURS = {
    "eager": "#8C8C8C",
    "torch.compile": "#DD8452",
    "liger": "#C44E52",
    "cublas": "#4C72B0",
    "geglu": "#55A868",
}
LABELS = {
    "eager": "eager",
    "torch.compile": "torch.compile",
    "liger": "Liger",
    "cublas": "cuBLAS GEMMs alone",
    "geglu": "geglu",
}


def summaries():
    """{folder: summary} of every run folder, in name order."""
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*/summary.json"))}


def newest(runs, key, device_prefix=None):
    """The newest summary holding `key` (optionally on a device whose name starts so)."""
    found = [
        s for s in runs.values() if key in s and (device_prefix is None or s["device"].startswith(device_prefix))
    ]
    if not found:
        raise SystemExit(f"no summary.json under {RESULTS} holds {key!r}")
    return max(found, key=lambda s: s["date"])


def card(summary):
    return summary["device"].removeprefix("NVIDIA ")


def pretty(size):
    return size.replace("gemma", "Gemma").upper().replace("GEMMA", "Gemma")


def versions(summary):
    return f"torch {summary['torch']}, triton {summary['triton']}, bf16"


def prefill_mlp(plt, run):
    """(a) The MLP forward per shape, us, and geglu's speedup over eager."""
    rows = run["mlp_forward"]["rows"]
    series = [("eager", "eager"), ("torch.compile", "torch.compile"), ("liger", "liger"),
              ("cublas", "cublas_gemms_alone"), ("geglu", "geglu")]
    fig, axes = plt.subplots(1, len(rows), figsize=(12, 4.2))
    for ax, row in zip(axes, rows):
        values = [row[key] for _, key in series]
        bars = ax.bar(range(len(series)), values, color=[COLOURS[name] for name, _ in series])
        for bar, value in zip(bars, values):
            ratio = row["eager"] / value
            ax.annotate(f"{value:.0f}\n{ratio:.2f}x", (bar.get_x() + bar.get_width() / 2, value),
                        ha="center", va="bottom", fontsize=7.5)
        ax.set_title(row["shape"], fontsize=9)
        ax.set_xticks(range(len(series)), [LABELS[name] for name, _ in series], rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, max(values) * 1.22)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("us per forward (lower is better)")
    fig.suptitle(f"GeGLU MLP forward, {card(run)}, {run['date']} ({versions(run)}); labels: us, speedup over eager",
                 fontsize=10)
    fig.tight_layout()
    return fig


def decode_floor(plt, runs):
    """(b) The decode MLP as a multiple of the weight-read floor, per card's newest run."""
    chosen = {}
    for s in runs.values():
        if "decode_mlp" in s:
            name = card(s)
            if name not in chosen or s["date"] > chosen[name]["date"]:
                chosen[name] = s
    picked = sorted(chosen.values(), key=lambda s: s["device"], reverse=True)  # H200 first
    series = [("eager", "eager"), ("torch.compile", "compile"), ("liger", "liger"), ("cublas", "cublas"), ("geglu", "geglu")]
    sizes = sorted({r["size"] for s in picked for r in s["decode_mlp"]["rows"]}, reverse=True)
    top = 2.0  # plain calls of the host-bound rows reach 4.6x: marked at the top, value written
    fig, axes = plt.subplots(len(picked), len(sizes), figsize=(5.2 * len(sizes), 3.8 * len(picked)), squeeze=False)
    for ax, (run, size) in zip(axes.flat, [(s, size) for s in picked for size in sizes]):
        rows = [r for r in run["decode_mlp"]["rows"] if r["size"] == size]
        width = 0.8 / len(series)
        for i, (name, key) in enumerate(series):
            xs = [t + (i - len(series) / 2 + 0.5) * width for t in range(len(rows))]
            graph = [r[f"{key}_graph"] / r["floor_us"] for r in rows]
            plain = [r[f"{key}_plain"] / r["floor_us"] for r in rows]
            ax.bar(xs, graph, width, color=COLOURS[name], label=LABELS[name])
            ax.scatter(xs, [min(v, top) for v in plain], marker="_", s=60, color="black", linewidths=1.2, zorder=3,
                       label="plain calls" if i == 0 else None)
            for x, v in zip(xs, plain):
                if v > top:
                    ax.annotate(f"{v:.1f}", (x, top), ha="center", va="top", fontsize=6, rotation=90,
                                xytext=(0, -4), textcoords="offset points")
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_xticks(range(len(rows)), [f"{r['tokens']} token{'s' if r['tokens'] > 1 else ''}" for r in rows])
        ax.set_title(f"{pretty(size)}, {card(run)}, {run['date']}\nfloor {rows[0]['floor_us']:.1f} us "
                     f"({run['copy_bandwidth_tbps']:.2f} TB/s)", fontsize=9)
        ax.set_ylim(0.9, top + 0.05)
        ax.grid(axis="y", alpha=0.3)
    for row in axes:
        row[0].set_ylabel("time / floor (bars: CUDA graph)")
    axes[0][0].legend(fontsize=7.5, loc="upper left", ncol=2)
    fig.suptitle("Decode: a GemmaMLP layer call against the weight-read floor (1.0 = the weights read at the copy rate)",
                 fontsize=10)
    fig.tight_layout()
    return fig


def generate_ratios(plt, run):
    """(c) generate() tokens/s against eager: kernelized (geglu), Liger, torch.compile."""
    gen = run["generate"]
    # Rows a longer run on another card of the same kind replaces (the first ran on a busy host).
    longer = gen.get("gemma-2b_dynamic_9_rounds", {})
    replaced = {tuple(k) for k in longer.get("replaces", [])}
    nine = {(r["size"], r["cache"], r["batch"]): r for r in longer.get("rows", [])}
    rows = []
    for r in gen["rows"]:
        key = (r["size"], r["cache"], r["batch"])
        rows.append({**r, **nine[key]} if key in replaced else r)
    series = [("geglu", "geglu_vs_eager"), ("liger", "liger_vs_eager"), ("torch.compile", "torch.compile_vs_eager")]
    fig, ax = plt.subplots(figsize=(11, 4.2))
    width = 0.8 / len(series)
    for i, (name, key) in enumerate(series):
        xs = [j + (i - len(series) / 2 + 0.5) * width for j in range(len(rows))]
        values = [r.get(key) for r in rows]
        ax.bar([x for x, v in zip(xs, values) if v is not None], [v for v in values if v is not None], width,
               color=COLOURS[name], label=LABELS[name] if name != "geglu" else "geglu (kernelized)")
        for x, v in zip(xs, values):
            if v is not None:
                ax.annotate(f"{v:.2f}", (x, v), ha="center", va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(rows)), [f"{pretty(r['size'])}\n{r['cache']}, batch {r['batch']}" for r in rows],
                  fontsize=8)
    ax.set_ylabel("tokens/s vs eager (higher is better)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(f"generate() against eager, 8 Gemma decoder layers, 64 new tokens, {card(run)}, {run['date']} "
                 f"({versions(run)})\nstatic cache: compiled by generate() (no torch.compile row); "
                 f"{longer.get('note', '')}", fontsize=9)
    fig.tight_layout()
    return fig


FP8_SERIES = (
    ("bf16 eager", "#8C8C8C"),
    ("bf16 geglu", "#55A868"),
    ("torch composed FP8", "#DD8452"),
    ("FP8 GEMMs alone", "#4C72B0"),
    ("ours FP8", "#2E7D32"),
)


def fp8_mlp(plt, run):
    """(d) The FP8 MLP per shape, us, and its speedup over the bf16 layer."""
    rows = [r for r in run["fp8_mlp_forward"]["rows"] if not r["shape"].startswith("gemma2b_")]
    fig, axes = plt.subplots(1, len(rows), figsize=(14, 4.2))
    for ax, row in zip(axes, rows):
        values = [row[name] for name, _ in FP8_SERIES]
        bars = ax.bar(range(len(values)), values, color=[colour for _, colour in FP8_SERIES])
        for bar, value in zip(bars, values):
            ax.annotate(f"{value:.0f}\n{row['bf16 geglu'] / value:.2f}x", (bar.get_x() + bar.get_width() / 2, value),
                        ha="center", va="bottom", fontsize=7)
        if "fp8_weight_read_floor" in row:
            ax.axhline(row["fp8_weight_read_floor"], color="black", lw=0.8, ls="--")
        ax.set_title(row["shape"].replace("_", " "), fontsize=8.5)
        names = [name.replace("ours FP8", "geglu FP8") for name, _ in FP8_SERIES]
        ax.set_xticks(range(len(values)), names, rotation=35, ha="right", fontsize=7.5)
        ax.set_ylim(0, max(values) * 1.25)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("us per forward (lower is better)")
    fig.suptitle(f"FP8 GeGLU MLP (128x128 block-scaled weights), {card(run)}, {run['date']} (torch {run['torch']}); "
                 "labels: us, speedup over the bf16 layer; dashed: FP8 weight-read floor", fontsize=9.5)
    fig.tight_layout()
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="read the summaries, draw nothing")
    parser.add_argument("--out", type=Path, default=DOCS, help="where the PNGs go (default docs/)")
    args = parser.parse_args()
    runs = summaries()
    prefill = newest(runs, "mlp_forward", device_prefix="NVIDIA H100")
    model = newest(runs, "generate")
    fp8 = newest(runs, "fp8_mlp_forward", device_prefix="NVIDIA H100")
    print(f"prefill MLP: {prefill['folder']}; decode: {[s['folder'] for s in runs.values() if 'decode_mlp' in s]}; "
          f"generate(): {model['folder']}")
    if args.check:
        return 0
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no figures drawn (pip install matplotlib)")
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    for name, fig in (
        ("mlp_prefill_h100.png", prefill_mlp(plt, prefill)),
        ("decode_mlp_floor.png", decode_floor(plt, runs)),
        ("generate_vs_eager.png", generate_ratios(plt, model)),
        ("fp8_mlp_h100.png", fp8_mlp(plt, fp8)),
    ):
        path = args.out / name
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        print(f"wrote {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
