// The FP8 MLP library (geglu_kernels/cuda/fp8_mlp_sm90.cu, included whole) plus an entry
// that runs the gate/up GEMM as a chosen variant, for check_fp8_mlp.py's comparison:
// variant 0 Cooperative 128 x (128 + 128), 1 Pingpong 64 x (128 + 128).
//   tools/sm90_gemm/build_lib.sh tools/sm90_gemm/fp8_gate_up_variants.cu libfp8_mlp_sm90 \
//       geglu_kernels/cuda/fp8_quantize_rows.cu
#include "fp8_mlp_sm90.cu"

extern "C" int geglu_fp8_sm90_gate_up_variant(int variant, const void* xq, const float* sx, int64_t ld_sx, int64_t M,
                                              int64_t K, const void* wg, const float* sg, const void* wu,
                                              const float* su, int64_t H, void* hq, float* sh, int64_t ld_sh,
                                              int approximate, void* stream) {
  using namespace fp8_sm90;
  GateUpArgs a;
  std::memset(&a, 0, sizeof(a));
  a.xq = xq; a.sx = sx; a.ld_sx = ld_sx; a.M = M; a.K = K;
  a.wg = wg; a.sg = sg; a.wu = wu; a.su = su; a.H = H;
  a.hq = hq; a.sh = sh; a.ld_sh = ld_sh; a.approximate = approximate ? 1 : 0;
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  return variant == 1 ? run_gate_up<GateUpPingpong>(a, s) : run_gate_up<GateUpCooperative>(a, s);
}
