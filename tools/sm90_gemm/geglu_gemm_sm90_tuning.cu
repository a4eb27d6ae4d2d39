// Tuning build of the Hopper GEMM engine: the product launcher
// (geglu_kernels/cuda/geglu_gemm_sm90.cu, C ABI of geglu_gemm_sm90.h) with eight more
// kernel variants that the shape pick does not use, for check_and_bench.py and
// ncu_probe.py to compare against. Variants 0-3 are the product's (same numbers); the
// no-store bit (config bit 16) is compiled in as well. Built by build.sh; never part of
// a release.
//
// X(id, name, BM, BN, schedule, cluster M[, cluster N]), as in the product table. The
// ids are the ones this tool's results use since the product kept three variants
// (benchmarks/results/gemm_sm90_h100.log predates it: match by name).
#define GEGLU_SM90_TUNING_VARIANTS(X)                                                          \
  X(4, "coop_128x(2x128)x64_c1", 128, 128, KernelTmaWarpSpecializedCooperative, 1)             \
  X(5, "pingpong_128x(2x64)x64_c1", 128, 64, KernelTmaWarpSpecializedPingpong, 1)              \
  X(6, "coop_256x(2x64)x64_c1", 256, 64, KernelTmaWarpSpecializedCooperative, 1)               \
  X(7, "pingpong_64x(2x128)x64_c2", 64, 128, KernelTmaWarpSpecializedPingpong, 2)              \
  X(8, "coop_256x(2x64)x64_c2", 256, 64, KernelTmaWarpSpecializedCooperative, 2)               \
  X(9, "pingpong_128x(2x64)x64_c1x2", 128, 64, KernelTmaWarpSpecializedPingpong, 1, 2)         \
  X(10, "pingpong_128x(2x64)x64_c2x2", 128, 64, KernelTmaWarpSpecializedPingpong, 2, 2)         \
  X(11, "coop_128x(2x128)x64_c2x2", 128, 128, KernelTmaWarpSpecializedCooperative, 2, 2)

#include "geglu_gemm_sm90.cu"
