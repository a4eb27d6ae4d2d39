"""Launch table of the gate/up GEMM with the GeGLU epilogue (`gemm.py`): no
autotuning at run time.

A launch is picked by (GPU architecture, token-count bucket):

- architecture: "major.minor" of the CUDA capability, mapped by `arch_key` onto the
  rows below (Hopper 9.0, A100-class 8.0, small-shared-memory 8.6/8.9/12.x, a
  conservative default), plus "interpreter" for TRITON_INTERPRET=1 on CPU tensors
  (tiny tiles: the CPU tests run the kernels through numpy).
- M bucket (`m_bucket`): "m16", "m64", "m256", "large". Below 256 tokens the GEMM
  reads its weights once and is bound by that read, so those rows use short M tiles,
  deep K tiles and split-K (`split_k=0`: chosen from the grid so every SM is busy);
  "large" is compute bound and uses Hopper's TMA + persistent kernel.

BLOCK_N counts the columns of each accumulator: a tile computes BLOCK_N gate and
BLOCK_N up columns. N and K do not pick rows: they change only the grid (and the
automatic split-K), and Triton's own specialization (divisibility by 16) handles
alignment. M is never a compile-time key (`do_not_specialize`), so a new token count
reuses the compiled kernel of its bucket.

Num_stages is an upper bound: the launcher lowers it when a dtype's tiles (float32
doubles them) would not fit the GPU's shared memory.

`tools/tune_gemm.py` times a small candidate set per row on a GPU and rewrites the
block between the BEGIN/END markers below (only the rows of the GPU it ran on).
"""

from typing import NamedTuple, Tuple


class GemmConfig(NamedTuple):
    kernel: str  # "tma": persistent kernel fed by TMA descriptors (sm90+); "tile": one tile per program
    block_m: int
    block_n: int  # output columns per accumulator (BLOCK_N gate + BLOCK_N up columns)
    block_k: int
    group_m: int  # M tiles that share a band of weight tiles in L2 (grouped ordering)
    num_warps: int
    num_stages: int
    split_k: int = 1  # "tile" only: K slices reduced by a second kernel; 0 = automatic
    flatten: bool = True  # "tma" only: let Triton flatten the tile and K loops into one pipeline


M_BUCKETS: Tuple[Tuple[int, str], ...] = ((16, "m16"), (64, "m64"), (256, "m256"))


def m_bucket(m: int) -> str:
    for bound, name in M_BUCKETS:
        if m <= bound:
            return name
    return "large"


def arch_key(capability) -> str:
    """Table row for a CUDA capability (major, minor), or "interpreter" for None."""
    if capability is None:
        return "interpreter"
    major, minor = capability
    exact = f"{major}.{minor}"
    if exact in TABLE:
        return exact
    if major in (9, 10):  # Hopper / datacenter Blackwell: 228 KB shared memory, TMA
        return "9.0"
    if (major, minor) in ((8, 0), (8, 7)):  # A100 / Orin: 164 KB shared memory
        return "8.0"
    if major in (8, 12):  # 8.6 / 8.9 / consumer Blackwell: ~100 KB shared memory
        return "8.6"
    return "default"


def lookup(arch: str, m: int) -> GemmConfig:
    return TABLE[arch][m_bucket(m)]


C = GemmConfig

# BEGIN TABLE (rewritten by tools/tune_gemm.py)
TUNED = {'9.0': 'NVIDIA H100 80GB HBM3, triton 3.6.0, 2026-11-22'}  # arch -> how its rows were chosen (written by tools/tune_gemm.py)
TABLE = {
    "9.0": {
        "m16": C("tile", 16, 32, 256, 1, 4, 4, 0),
        "m64": C("tile", 64, 64, 128, 1, 4, 4, 0),
        "m256": C("tile", 128, 128, 64, 8, 8, 3, 0),
        "large": C("tma", 128, 128, 64, 16, 8, 3, 1, False),
    },
    "8.0": {
        "m16": C("tile", 16, 64, 128, 1, 4, 3, 0),
        "m64": C("tile", 64, 64, 64, 1, 4, 3, 0),
        "m256": C("tile", 64, 64, 32, 8, 4, 4, 0),
        "large": C("tile", 128, 64, 32, 8, 4, 4),
    },
    "8.6": {
        "m16": C("tile", 16, 64, 64, 1, 4, 2, 0),
        "m64": C("tile", 64, 64, 32, 1, 4, 2, 0),
        "m256": C("tile", 64, 64, 32, 8, 4, 3, 0),
        "large": C("tile", 64, 64, 32, 8, 4, 3),
    },
    "default": {
        "m16": C("tile", 16, 32, 64, 1, 4, 2, 0),
        "m64": C("tile", 64, 32, 32, 1, 4, 2, 0),
        "m256": C("tile", 64, 32, 32, 8, 4, 2, 0),
        "large": C("tile", 64, 32, 32, 8, 4, 2),
    },
    # TRITON_INTERPRET=1 (CPU tests): tiny tiles; small M forces split-K and 64 < M <= 256
    # the TMA kernel, so every code path runs on CPU at small sizes.
    "interpreter": {
        "m16": C("tile", 16, 16, 16, 1, 4, 1, 2),
        "m64": C("tile", 16, 16, 16, 1, 4, 1, 2),
        "m256": C("tma", 32, 16, 16, 2, 4, 1),
        "large": C("tile", 32, 16, 16, 2, 4, 1, 0),
    },
}
# END TABLE
