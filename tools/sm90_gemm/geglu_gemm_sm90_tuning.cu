// The tuner's build of the Hopper GEMM engine: the product's collectives and kernel
// (geglu_kernels/cuda/sm90/bf16/geglu_gemm_sm90.cuh) in the product's four variants, under the same
// ids, and eight more that the shape pick does not use, behind a tuning C ABI that
// names the variant and the scheduler settings per call, for check_and_bench.py,
// ncu_probe.py and check_swap.py. Built by build.sh into
// .sm90dev/libgeglu_gemm_sm90.so; never part of a release.
//
// The tuning ABI (the product's geglu_gemm_sm90.h, plus `config` and the config queries):
//
//   int geglu_gemm_sm90(x, M, K, ldx, w_gate, w_up, ldw, b_gate, b_up, out, H, ldo,
//                       dtype, approximate, config, stream);
//   int geglu_gemm_sm90_num_configs(void);            // 12
//   const char* geglu_gemm_sm90_config_name(int);      // "" out of range
//   int geglu_gemm_sm90_pick_config(M, K, H, dtype);  // the product's pick, encoded
//   geglu_gemm_sm90_status_string, geglu_gemm_sm90_last_cuda_error: as the product's.
//
// config: -1 = the product's pick by shape. Else bits 0-7 the variant (0-11); bits 8-11
// the tile scheduler's swizzle (0: 1, c: 2^(c-1), c <= 4); bits 12-15 the raster order
// (0 heuristic, 1 along M, 2 along N); bit 16 no-store (compute, store nothing: times
// the rest); higher bits 0.

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "sm90/common/gate_up_launch.cuh"
#include "sm90/bf16/geglu_gemm_sm90.cuh"
#include "sm90/common/sm90_launcher.cuh"  // sm90_status.h: the status codes and dtype values

namespace geglu_sm90_tuning {

using namespace geglu_sm90;

// The product's epilogue with the no-store switch: a null output pointer (which the
// launcher below sets for the no-store bit; the product's launcher refuses one) runs the
// epilogue on a problem of 0 rows, so it computes every value and stores none.
template <class Element, int BN>
class NoStoreSwitchEpilogue : public GegluEpilogue<Element, BN> {
  using Base = GegluEpilogue<Element, BN>;

 public:
  using typename Base::Params;
  using typename Base::SharedStorage;

  CUTLASS_HOST_DEVICE
  NoStoreSwitchEpilogue(Params const& params_, SharedStorage const& storage = SharedStorage())
      : Base(params_, storage), nostore_(params_.ptr_out == nullptr) {}

  template <class ProblemShapeMNKL, class... Rest>
  CUTLASS_DEVICE void operator()(ProblemShapeMNKL problem_shape_mnkl, Rest&&... rest) {
    auto shape = make_shape(nostore_ ? 0 : get<0>(problem_shape_mnkl), get<1>(problem_shape_mnkl),
                            get<2>(problem_shape_mnkl), get<3>(problem_shape_mnkl));
    Base::operator()(shape, static_cast<Rest&&>(rest)...);
  }

 private:
  bool nostore_;
};

template <class Element, int BM, int BN, class Schedule, int ClusterM, int ClusterN = 1>
using TuningGemm = GegluGemm<Element, BM, BN, Schedule, ClusterM, ClusterN, NoStoreSwitchEpilogue<Element, BN>>;

// X(id, name, BM, BN, schedule, cluster M[, cluster N]), as the product's table. The ids
// are the ones this tool's results use since the product kept three variants
// (the H100 sweep of 2026-11-23, benchmarks/results/h100_2026-11-23/excerpts.log
// [gemm_sm90_h100], predates it: match by name).
#define GEGLU_SM90_TUNING_VARIANTS(X)                                                          \
  X(4, "coop_128x(2x128)x64_c1", 128, 128, KernelTmaWarpSpecializedCooperative, 1)             \
  X(5, "pingpong_128x(2x64)x64_c1", 128, 64, KernelTmaWarpSpecializedPingpong, 1)              \
  X(6, "coop_256x(2x64)x64_c1", 256, 64, KernelTmaWarpSpecializedCooperative, 1)               \
  X(7, "pingpong_64x(2x128)x64_c2", 64, 128, KernelTmaWarpSpecializedPingpong, 2)              \
  X(8, "coop_256x(2x64)x64_c2", 256, 64, KernelTmaWarpSpecializedCooperative, 2)               \
  X(9, "pingpong_128x(2x64)x64_c1x2", 128, 64, KernelTmaWarpSpecializedPingpong, 1, 2)         \
  X(10, "pingpong_128x(2x64)x64_c2x2", 128, 64, KernelTmaWarpSpecializedPingpong, 2, 2)         \
  X(11, "coop_128x(2x128)x64_c2x2", 128, 128, KernelTmaWarpSpecializedCooperative, 2, 2)

#define GEGLU_SM90_VARIANTS(X) GEGLU_SM90_PRODUCT_VARIANTS(X) GEGLU_SM90_TUNING_VARIANTS(X)

#define GEGLU_SM90_COUNT(id, name, bm, bn, sched, ...) +1
constexpr int kNumConfigs = 0 GEGLU_SM90_VARIANTS(GEGLU_SM90_COUNT);

#define GEGLU_SM90_NAME(id, name, bm, bn, sched, ...) name,
const char* const kConfigNames[] = {GEGLU_SM90_VARIANTS(GEGLU_SM90_NAME)};

using gate_up_launch::LaunchArgs;

template <class Element>
int dispatch(int variant, LaunchArgs const& a, cudaStream_t stream) {
  switch (variant) {
#define GEGLU_SM90_CASE(id, name, bm, bn, sched, ...) \
  case id:                                            \
    return gate_up_launch::launch_engine<TuningGemm<Element, bm, bn, sched, __VA_ARGS__>>(a, stream);
    GEGLU_SM90_VARIANTS(GEGLU_SM90_CASE)
#undef GEGLU_SM90_CASE
    default:
      return GEGLU_SM90_ERR_CONFIG;
  }
}

// The product's pick (pick_variant), as a config.
int pick_config(int64_t M, int64_t K, int64_t H) {
  const VariantPick p = pick_variant(M, K, H);
  int swizzle_code = 0;
  while (swizzle_code < 4 && (1 << swizzle_code) < p.swizzle) ++swizzle_code;
  if (p.swizzle > 1) ++swizzle_code;  // 2^(c-1)
  return p.variant | (swizzle_code << 8) | (p.raster << 12);
}

}  // namespace geglu_sm90_tuning

extern "C" {

const char* geglu_gemm_sm90_status_string(int status) { return sm90_launcher::status_string(status); }

int geglu_gemm_sm90_last_cuda_error(void) { return sm90_launcher::last_cuda_error(); }

int geglu_gemm_sm90_num_configs(void) { return geglu_sm90_tuning::kNumConfigs; }

const char* geglu_gemm_sm90_config_name(int config) {
  if (config < 0 || config >= geglu_sm90_tuning::kNumConfigs) return "";
  return geglu_sm90_tuning::kConfigNames[config];
}

int geglu_gemm_sm90_pick_config(int64_t M, int64_t K, int64_t H, int dtype) {
  (void)dtype;
  return geglu_sm90_tuning::pick_config(M, K, H);
}

int geglu_gemm_sm90(const void* x, int64_t M, int64_t K, int64_t ldx,
                    const void* w_gate, const void* w_up, int64_t ldw,
                    const void* b_gate, const void* b_up,
                    void* out, int64_t H, int64_t ldo,
                    int dtype, int approximate, int config, void* stream) {
  if (int status = gate_up_launch::check_shapes(dtype, M, K, H, ldx, ldw, ldo)) return status;
  if (M == 0) return GEGLU_SM90_OK;
  if (int status = gate_up_launch::check_engine_operands(K, ldx, ldw, ldo, x, w_gate, w_up, out, b_gate, b_up)) {
    return status;
  }
  if (config < 0) config = geglu_sm90_tuning::pick_config(M, K, H);
  const int variant = config & 0xff;
  const int swz_code = (config >> 8) & 0xf;  // 0: 1, else 2^(code-1)
  const int raster = (config >> 12) & 0xf;
  const int nostore = (config >> 16) & 1;
  if (variant >= geglu_sm90_tuning::kNumConfigs || swz_code > 4 || raster > 2 || (config >> 17) != 0) {
    return GEGLU_SM90_ERR_CONFIG;
  }

  geglu_sm90_tuning::LaunchArgs a;
  gate_up_launch::make_key(&a, x, M, K, ldx, w_gate, w_up, ldw, b_gate, b_up, nostore ? nullptr : out, H, ldo,
                           approximate);
  a.swizzle = swz_code == 0 ? 1 : 1 << (swz_code - 1);
  a.raster = raster;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (dtype == GEGLU_SM90_BF16) return geglu_sm90_tuning::dispatch<cutlass::bfloat16_t>(variant, a, s);
  return geglu_sm90_tuning::dispatch<cutlass::half_t>(variant, a, s);
}

}  // extern "C"
