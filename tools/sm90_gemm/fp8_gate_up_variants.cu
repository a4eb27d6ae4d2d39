// The FP8 MLP library (geglu_kernels/cuda/sm90/fp8/fp8_mlp_sm90.cu, included whole) plus entries
// that run its GEMMs as a chosen variant, for check_fp8_mlp.py's comparison:
//   gate/up: 0 Cooperative 128 x (128 + 128), 2 stream-K Cooperative (1, Pingpong 64 x (128 + 128),
//            went with CUTLASS 4.3+, whose blockwise mainloop refuses 64-row tiles: git history);
//   down:    0 data-parallel 128 x 128, 1 stream-K, 2 in clusters of two along N (the route
//            from 16 output tiles on; the other shapes it was measured against: git history).
//   tools/sm90_gemm/build_lib.sh tools/sm90_gemm/fp8_gate_up_variants.cu libfp8_mlp_sm90 \
//       geglu_kernels/cuda/sm90/fp8/fp8_quantize_rows.cu
#include "sm90/fp8/fp8_mlp_sm90.cu"

namespace fp8_sm90 {
// Stream-K on the gate/up: lost at decode (81.5 against Pingpong's 72.5 us, Gemma-7B, 16
// tokens, H100, 2026-11-27); the down projection's gain did not carry over.
struct GateUpStreamK : GateUpGemm {
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, GateUpGemm::Mainloop,
                                                      GateUpGemm::CollectiveEpilogue, cutlass::gemm::StreamKScheduler>;
};

struct GateUpStreamKArgs : GateUpArgs {
  void* workspace;
};
}  // namespace fp8_sm90

extern "C" int geglu_fp8_sm90_gate_up_variant(int variant, const void* xq, const float* sx, int64_t ld_sx, int64_t M,
                                              int64_t K, const void* wg, const float* sg, const void* wu,
                                              const float* su, int64_t H, void* hq, float* sh, int64_t ld_sh,
                                              int approximate, void* workspace, void* stream) {
  using namespace fp8_sm90;
  const GateUpArgs a = gate_up_args(xq, sx, ld_sx, M, K, wg, sg, wu, su, H, hq, sh, ld_sh, approximate);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (variant == 2) {
    GateUpStreamKArgs b;
    std::memset(&b, 0, sizeof(b));
    static_cast<GateUpArgs&>(b) = a;
    b.workspace = workspace;
    auto fill = [](auto& args, GateUpStreamKArgs const& key) { FillGateUp{}(args, key); };
    if (sm90_launcher::gemm_workspace_bytes_on_current_device<GateUpStreamK::Kernel>(b, fill) > (size_t(64) << 20)) {
      return GEGLU_SM90_ERR_SHAPE;  // over the harness's 64 MiB
    }
    return sm90_launcher::launch_gemm_on_current_device<GateUpStreamK::Kernel>(b, s, fill, workspace);
  }
  if (variant == 1) return GEGLU_SM90_ERR_SHAPE;  // Pingpong: not built (see above)
  return run_gate_up<GateUpGemm>(a, s);
}

extern "C" int geglu_fp8_sm90_down_variant(int variant, const void* hq, const float* sh, int64_t ld_sh, int64_t M,
                                           int64_t H, const void* wd, const float* sd, int64_t N, const void* residual,
                                           void* out, void* workspace, void* stream) {
  using namespace fp8_sm90;
  const DownArgs a = down_args(hq, sh, ld_sh, M, H, wd, sd, N, residual, out, variant == 1 ? workspace : nullptr);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  using E = cutlass::bfloat16_t;
  switch (variant) {
    case 1: return run_down<DownStreamK<E>, E>(a, s);
    case 2: return run_down<DownWide<E>, E>(a, s);
    default: return run_down<Down<E>, E>(a, s);
  }
}
