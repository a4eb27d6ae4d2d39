// The block-scaled FP8 GeGLU MLP's GEMMs for Hopper (sm_90a): kernel types and the C
// launchers of fp8_mlp_sm90.h. The gate/up GEMM is fp8_geglu_sm90.cuh's mainloop and
// epilogue; the down GEMM is CUTLASS's blockwise-scaled FP8 GEMM as its builders make it,
// with the residual as the epilogue's source (beta = 1).

#include "sm90/fp8/fp8_mlp_sm90.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "sm90/fp8/fp8_geglu_sm90.cuh"
#include "sm90/common/sm90_status.h"
#include "sm90/common/sm90_launcher.cuh"

namespace fp8_sm90 {

using E4m3 = cutlass::float_e4m3_t;
// 1x128 activation scales (M-major), 128x128 weight scales (K-major).
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::MN, cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
using Schedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum;

LayoutSFA activation_scale_layout(int M, int K, int64_t ld) {
  return LayoutSFA{make_shape(make_shape(Int<1>{}, int32_t(M)), make_shape(Int<128>{}, int32_t(K / 128)), int32_t(1)),
                   make_stride(make_stride(_0{}, _1{}), make_stride(_0{}, int32_t(ld)), int32_t(ld * (K / 128)))};
}

LayoutSFB weight_scale_layout(int N, int K) {
  return LayoutSFB{make_shape(make_shape(Int<128>{}, int32_t(N / 128)), make_shape(Int<128>{}, int32_t(K / 128)), int32_t(1)),
                   make_stride(make_stride(_0{}, int32_t(K / 128)), make_stride(_0{}, _1{}), int32_t((N / 128) * (K / 128)))};
}

// ------------------------------------------------------------------ gate/up + GeGLU + quantize h
// 128 rows x (128 gate + 128 up) columns per tile; m64n128k32 wgmmas, Cooperative: the two
// warp groups on one tile, 64 rows each. CUTLASS 4.3 and newer (the release builds' 4.4)
// take 128- or 256-row tiles only in the blockwise-scaled mainloop: Pingpong's 64-row
// tiles, faster at 17-64 tokens under CUTLASS 4.2 (Gemma-7B, 16 tokens: 72.5 against 77.8
// us, H100, 2026-11-27, benchmarks/results/h100_2026-11-27/excerpts.log [check_fp8_mlp_h100]), do not compile there.
struct GateUpGemm {
  static constexpr int BM = 128;
  static constexpr int Stages = 4;  // 4 stages of 16 KB A + 32 KB B (+ scales)
  using KernelSchedule = cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum;
  using TileShape = Shape<Int<BM>, _256, _128>;
  using ClusterShape = Shape<_1, _1, _1>;
  using TiledMma = decltype(make_tiled_mma(
      GMMA::ss_op_selector<E4m3, E4m3, float, Shape<_64, _128, _128>, GMMA::Major::K, GMMA::Major::K>(),
      Layout<Shape<Int<BM / 64>, _1, _1>>{}));
  using SmemLayoutAtom =
      decltype(cutlass::gemm::collective::detail::ss_smem_selector<GMMA::Major::K, E4m3, _128, _128>());
  using MainloopBase = cutlass::gemm::collective::CollectiveMma<
      cutlass::gemm::MainloopSm90TmaGmmaWarpSpecializedBlockwiseFP8<Stages, ClusterShape, KernelSchedule>, TileShape,
      E4m3, cute::tuple<cute::Stride<int64_t, _1, int64_t>, LayoutSFA>,
      E4m3, cute::tuple<cute::Stride<int64_t, _1, int64_t>, LayoutSFB>, TiledMma,
      SM90_TMA_LOAD, SmemLayoutAtom, void, cute::identity,
      SM90_TMA_LOAD, SmemLayoutAtom, void, cute::identity>;
  using Mainloop = Fp8GegluMainloopSm90<MainloopBase>;
  using Epilogue = Fp8GegluEpilogue<128>;
  using CollectiveEpilogue = cutlass::epilogue::collective::detail::Sm90TmaWarpSpecializedAdapter<Epilogue>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, CollectiveEpilogue,
                                                      cutlass::gemm::PersistentScheduler>;
};


struct GateUpArgs {  // the params-cache key: zeroed, padding included, before it is filled
  const void* xq;
  const float* sx;
  int64_t ld_sx, M, K;
  const void* wg;
  const float* sg;
  const void* wu;
  const float* su;
  int64_t H;
  void* hq;
  float* sh;
  int64_t ld_sh;
  int approximate;
};

// The key of one call: zeroed, padding included, then filled.
GateUpArgs gate_up_args(const void* xq, const float* sx, int64_t ld_sx, int64_t M, int64_t K, const void* wg,
                        const float* sg, const void* wu, const float* su, int64_t H, void* hq, float* sh,
                        int64_t ld_sh, int approximate) {
  GateUpArgs a;
  std::memset(&a, 0, sizeof(a));
  a.xq = xq; a.sx = sx; a.ld_sx = ld_sx; a.M = M; a.K = K;
  a.wg = wg; a.sg = sg; a.wu = wu; a.su = su; a.H = H;
  a.hq = hq; a.sh = sh; a.ld_sh = ld_sh; a.approximate = approximate ? 1 : 0;
  return a;
}

// GateUpArgs into the gate/up GEMM's arguments.
struct FillGateUp {
  template <class Arguments>
  void operator()(Arguments& args, GateUpArgs const& a) const {
    args.problem_shape = make_shape(int(a.M), int(2 * a.H), int(a.K), 1);
    auto& ml = args.mainloop;
    ml.ptr_A = static_cast<E4m3 const*>(a.xq);
    ml.dA = make_stride(a.K, Int<1>{}, a.M * a.K);
    ml.ptr_Bg = static_cast<E4m3 const*>(a.wg);
    ml.ptr_Bu = static_cast<E4m3 const*>(a.wu);
    ml.dB = make_stride(a.K, Int<1>{}, a.H * a.K);
    ml.ptr_SFA = a.sx;
    ml.layout_SFA = activation_scale_layout(int(a.M), int(a.K), a.ld_sx);
    ml.ptr_SFBg = a.sg;
    ml.ptr_SFBu = a.su;
    ml.ld_sfb = a.K / 128;
    auto& ep = args.epilogue;
    ep.ptr_hq = static_cast<uint8_t*>(a.hq);
    ep.ldh = a.H;
    ep.ptr_sh = a.sh;
    ep.ld_sh = a.ld_sh;
    ep.approximate = a.approximate;
  }
};

template <class Gemm>
int run_gate_up(GateUpArgs const& a, cudaStream_t stream) {
  return sm90_launcher::launch_gemm_on_current_device<typename Gemm::Kernel>(a, stream, FillGateUp{});
}

// ------------------------------------------------------------------ down (+ residual)
template <class Element, class TileScheduler = cutlass::gemm::PersistentScheduler, int kClusterN = 1>
struct Down {
  static constexpr int kClusterColumns = kClusterN;
  using TileShape = Shape<_128, _128, _128>;
  using ClusterShape = Shape<_1, Int<kClusterN>, _1>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      Element, cutlass::layout::RowMajor, 8,  // C: the residual
      Element, cutlass::layout::RowMajor, 8,  // D: out
      cutlass::epilogue::TmaWarpSpecializedCooperative,
      cutlass::epilogue::fusion::LinearCombination<Element, float, Element, float>>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      E4m3, cute::tuple<cutlass::layout::RowMajor, LayoutSFA>, 16,
      E4m3, cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, 16,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<
          static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      Schedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, CollectiveEpilogue,
                                                      TileScheduler>;
};

// The down projection's routes by token count (H100, 2026-11-27, benchmarks/results/h100_2026-11-27/excerpts.log [check_fp8_mlp_h100]):
// at up to kStreamKTokens, a weight read, stream-K (Gemma-7B, 16 tokens: 57.1 us against
// 79.3: its 128-column tiles are 24 for 132 SMs, so K is split across CTAs and the last of
// a tile sums the partials); above, data-parallel tiles. The ops send 1-16 tokens to the
// decode kernels (fp8_decode_sm90.cu), so stream-K serves 17-64 from them.
constexpr int64_t kStreamKTokens = 64;
template <class Element>
using DownStreamK = Down<Element, cutlass::gemm::StreamKScheduler>;
// Above kStreamKTokens with 16 or more 128-column output tiles, clusters of two along N
// share each h tile by TMA multicast, halving h's L2 reads (h is the large operand: K =
// hidden): Gemma-7B / Gemma-2B at 4096 tokens 549.1 / 236.5 us against 593.8 / 242.4,
// the blog shape's 6 tiles 40.2 against 38.8 (H100, 2026-11-27, benchmarks/results/h100_2026-11-27/excerpts.log [check_fp8_mlp_h100];
// 2 x 1 clusters 559.0 / 239.2 / 41.0, Pingpong 64 x 128 tiles 808-848 at Gemma-7B); on an
// H200 even (552.7 / 245.7 against 551.1 / 249.0).
constexpr int64_t kWideDownColumns = 16 * 128;
template <class Element>
using DownWide = Down<Element, cutlass::gemm::PersistentScheduler, 2>;

struct DownArgs {  // the params-cache key
  const void* hq;
  const float* sh;
  int64_t ld_sh, M, H;
  const void* wd;
  const float* sd;
  int64_t N;
  const void* residual;
  void* out;
  void* workspace;  // the stream-K kernel's
};

// The key of one call (workspace: the stream-K kernel's, else null).
DownArgs down_args(const void* hq, const float* sh, int64_t ld_sh, int64_t M, int64_t H, const void* wd,
                   const float* sd, int64_t N, const void* residual, void* out, void* workspace) {
  DownArgs a;
  std::memset(&a, 0, sizeof(a));
  a.hq = hq; a.sh = sh; a.ld_sh = ld_sh; a.M = M; a.H = H;
  a.wd = wd; a.sd = sd; a.N = N; a.residual = residual; a.out = out; a.workspace = workspace;
  return a;
}

// DownArgs into a down GEMM's arguments (Element: the output's).
template <class Element>
struct FillDown {
  template <class Arguments>
  void operator()(Arguments& args, DownArgs const& a) const {
    args.problem_shape = make_shape(int(a.M), int(a.N), int(a.H), 1);
    auto& ml = args.mainloop;
    ml.ptr_A = static_cast<E4m3 const*>(a.hq);
    ml.dA = make_stride(a.H, Int<1>{}, a.M * a.H);
    ml.ptr_B = static_cast<E4m3 const*>(a.wd);
    ml.dB = make_stride(a.H, Int<1>{}, a.N * a.H);
    ml.ptr_SFA = a.sh;
    // The scales' rows padded to ld_sh (a multiple of 4, as CUTLASS's TMA check asks); the
    // rows past M are never written and only reach output rows that are not stored.
    ml.layout_SFA = activation_scale_layout(int(a.ld_sh), int(a.H), a.ld_sh);
    ml.ptr_SFB = a.sd;
    ml.layout_SFB = weight_scale_layout(int(a.N), int(a.H));
    auto& ep = args.epilogue;
    ep.thread.alpha = 1.0f;
    // Without a residual, beta = 0 and C is never read (the out pointer stands in).
    ep.thread.beta = a.residual != nullptr ? 1.0f : 0.0f;
    ep.ptr_C = static_cast<Element const*>(a.residual != nullptr ? a.residual : a.out);
    ep.dC = make_stride(a.N, Int<1>{}, a.M * a.N);
    ep.ptr_D = static_cast<Element*>(a.out);
    ep.dD = make_stride(a.N, Int<1>{}, a.M * a.N);
  }
};

template <class Gemm, class Element>
int run_down(DownArgs const& a, cudaStream_t stream) {
  return sm90_launcher::launch_gemm_on_current_device<typename Gemm::Kernel, 1, Gemm::kClusterColumns>(
      a, stream, FillDown<Element>{}, a.workspace);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }
bool aligned4(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 3u) == 0; }
bool size_ok(int64_t v) { return v >= 128 && v % 128 == 0 && v < (int64_t(1) << 31); }
bool ld_ok(int64_t ld, int64_t M) { return ld >= M && ld % 4 == 0 && ld < (int64_t(1) << 31); }

}  // namespace fp8_sm90

extern "C" int geglu_fp8_sm90_gate_up(const void* xq, const float* sx, int64_t ld_sx, int64_t M, int64_t K,
                                      const void* wg, const float* sg, const void* wu, const float* su, int64_t H,
                                      void* hq, float* sh, int64_t ld_sh, int approximate, void* stream) {
  using namespace fp8_sm90;
  if (M < 0 || M >= (int64_t(1) << 31) || !size_ok(K) || !size_ok(H) || !ld_ok(ld_sx, M) || !ld_ok(ld_sh, M)) {
    return GEGLU_SM90_ERR_SHAPE;
  }
  if (M == 0) return GEGLU_SM90_OK;
  if (!aligned16(xq) || !aligned16(wg) || !aligned16(wu) || !aligned16(hq) || !aligned16(sx) || !aligned4(sg) ||
      !aligned4(su) || !aligned4(sh)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  const GateUpArgs a = gate_up_args(xq, sx, ld_sx, M, K, wg, sg, wu, su, H, hq, sh, ld_sh, approximate);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return run_gate_up<GateUpGemm>(a, s);
}

extern "C" int64_t geglu_fp8_sm90_workspace_bytes(int64_t M, int64_t H, int64_t N) {
  using namespace fp8_sm90;
  if (M > kStreamKTokens || M <= 0) return 0;
  const DownArgs d = down_args(nullptr, nullptr, (M + 3) / 4 * 4, M, H, nullptr, nullptr, N, nullptr, nullptr, nullptr);
  return int64_t(sm90_launcher::gemm_workspace_bytes_on_current_device<DownStreamK<cutlass::bfloat16_t>::Kernel>(
      d, FillDown<cutlass::bfloat16_t>{}));
}

extern "C" int geglu_fp8_sm90_down(const void* hq, const float* sh, int64_t ld_sh, int64_t M, int64_t H,
                                   const void* wd, const float* sd, int64_t N, const void* residual, void* out,
                                   int dtype, void* workspace, void* stream) {
  using namespace fp8_sm90;
  if (dtype != GEGLU_SM90_BF16 && dtype != GEGLU_SM90_FP16) return GEGLU_SM90_ERR_DTYPE;
  if (M < 0 || M >= (int64_t(1) << 31) || !size_ok(H) || !size_ok(N) || !ld_ok(ld_sh, M)) return GEGLU_SM90_ERR_SHAPE;
  if (M == 0) return GEGLU_SM90_OK;
  if (!aligned16(hq) || !aligned16(wd) || !aligned16(out) || !aligned16(sh) || !aligned4(sd) ||
      (residual != nullptr && !aligned16(residual)) || !aligned16(workspace)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  const bool stream_k = M <= kStreamKTokens;
  const DownArgs a = down_args(hq, sh, ld_sh, M, H, wd, sd, N, residual, out, stream_k ? workspace : nullptr);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  const bool bf16 = dtype == GEGLU_SM90_BF16;
  if (stream_k) {
    return bf16 ? run_down<DownStreamK<cutlass::bfloat16_t>, cutlass::bfloat16_t>(a, s)
                : run_down<DownStreamK<cutlass::half_t>, cutlass::half_t>(a, s);
  }
  if (N >= kWideDownColumns) {
    return bf16 ? run_down<DownWide<cutlass::bfloat16_t>, cutlass::bfloat16_t>(a, s)
                : run_down<DownWide<cutlass::half_t>, cutlass::half_t>(a, s);
  }
  return bf16 ? run_down<Down<cutlass::bfloat16_t>, cutlass::bfloat16_t>(a, s)
              : run_down<Down<cutlass::half_t>, cutlass::half_t>(a, s);
}
