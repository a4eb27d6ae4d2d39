#pragma once
// What the two bf16/fp16 gate/up launchers share: geglu_gemm_sm90.cu (the engine) and
// geglu_swapab_sm90.cu (swap-AB, a few tokens) take the same C arguments (their ABIs,
// geglu_gemm_sm90.h and geglu_swapab_sm90.h, have one signature), hence one params-cache
// key, the same shape checks, and the same GeGLU epilogue arguments (out, ldo, the two
// biases, the GELU form). Their stride and alignment checks differ (16-byte vector stores
// in the engine's epilogue, 2-byte ones in swap-AB's): the engine's, and its launch, are
// here for its two launchers (the product's and the tuner's, tools/sm90_gemm).
//
// Host code; include after sm90_launcher.cuh.

#include <cstdint>
#include <cstring>

#include "cute/tensor.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"

#include "sm90/common/sm90_launcher.cuh"

namespace gate_up_launch {

struct LaunchArgs {  // the params-cache key: zeroed, padding included, before it is filled
  const void* x;
  int64_t M, K, ldx;
  const void* wg;
  const void* wu;
  int64_t ldw;
  const void* bg;
  const void* bu;
  void* out;
  int64_t H, ldo;
  int approximate;
  int swizzle;  // the engine's tile scheduler max_swizzle_size (1, 2, 4, 8); 0 in swap-AB
  int raster;   // the engine's raster order: 0 heuristic, 1 along M, 2 along N
};

// The checks both ABIs start with (a caller with M == 0 then returns GEGLU_SM90_OK). 2H
// is an int32 extent of the problem: its N in the engine, its M in swap-AB.
inline int check_shapes(int dtype, int64_t M, int64_t K, int64_t H, int64_t ldx, int64_t ldw, int64_t ldo) {
  if (int status = sm90_launcher::check_dtype_and_extents(dtype, M, 2 * H, K)) return status;
  if (ldx < K || ldw < K || ldo < H) return GEGLU_SM90_ERR_SHAPE;
  return GEGLU_SM90_OK;
}

// The engine's operand rules (geglu_gemm_sm90.h), after check_shapes: 16-byte rows and
// pointers for x, the weights and out, 4-byte biases. The swap-AB kernel's are looser.
inline int check_engine_operands(int64_t K, int64_t ldx, int64_t ldw, int64_t ldo, const void* x,
                                 const void* w_gate, const void* w_up, const void* out, const void* b_gate,
                                 const void* b_up) {
  const int64_t elem = 2;
  if ((K * elem) % 16 || (ldx * elem) % 16 || (ldw * elem) % 16 || (ldo * elem) % 16) {
    return GEGLU_SM90_ERR_STRIDE;
  }
  auto misaligned = [](const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15u) != 0; };
  if (misaligned(x) || misaligned(w_gate) || misaligned(w_up) || misaligned(out)) return GEGLU_SM90_ERR_ALIGN;
  if ((reinterpret_cast<uintptr_t>(b_gate) & 3u) || (reinterpret_cast<uintptr_t>(b_up) & 3u)) {
    return GEGLU_SM90_ERR_ALIGN;
  }
  return GEGLU_SM90_OK;
}

// The key of one call, the ABI's arguments in its order (swizzle and raster 0).
inline void make_key(LaunchArgs* a, const void* x, int64_t M, int64_t K, int64_t ldx, const void* w_gate,
                     const void* w_up, int64_t ldw, const void* b_gate, const void* b_up, void* out, int64_t H,
                     int64_t ldo, int approximate) {
  std::memset(a, 0, sizeof *a);
  a->x = x, a->M = M, a->K = K, a->ldx = ldx;
  a->wg = w_gate, a->wu = w_up, a->ldw = ldw, a->bg = b_gate, a->bu = b_up;
  a->out = out, a->H = H, a->ldo = ldo;
  a->approximate = approximate ? 1 : 0;
}

// GegluEpilogueArguments or SwapAbArguments from the key.
template <class Element, class EpilogueArguments>
void set_epilogue(EpilogueArguments& ep, LaunchArgs const& a) {
  ep.ptr_out = static_cast<Element*>(a.out);
  ep.ldo = a.ldo;
  ep.bias_g = static_cast<Element const*>(a.bg);
  ep.bias_u = static_cast<Element const*>(a.bu);
  ep.approximate = a.approximate;
}

// Launches one of the engine's GegluGemm kernels (geglu_gemm_sm90.cuh) for the key on the
// current device: the product's variants (geglu_gemm_sm90.cu) and the tuner's
// (tools/sm90_gemm/geglu_gemm_sm90_tuning.cu).
template <class Gemm>
int launch_engine(LaunchArgs const& a, cudaStream_t stream) {
  using Element = typename Gemm::Epilogue::Element;
  constexpr int cm = cute::size<0>(typename Gemm::ClusterShape{});
  constexpr int cn = cute::size<1>(typename Gemm::ClusterShape{});
  auto fill = [](auto& args, LaunchArgs const& a) {
    using cute::Int;
    args.problem_shape = cute::make_shape(int(a.M), int(2 * a.H), int(a.K), 1);
    auto& ml = args.mainloop;
    ml.ptr_A = static_cast<Element const*>(a.x);
    ml.dA = cute::make_stride(a.ldx, Int<1>{}, a.M * a.ldx);
    ml.ptr_Bg = static_cast<Element const*>(a.wg);
    ml.ptr_Bu = static_cast<Element const*>(a.wu);
    ml.dB = cute::make_stride(a.ldw, Int<1>{}, a.H * a.ldw);
    set_epilogue<Element>(args.epilogue, a);
    args.scheduler.max_swizzle_size = a.swizzle;
    using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
    args.scheduler.raster_order = a.raster == 1 ? Raster::AlongM : a.raster == 2 ? Raster::AlongN : Raster::Heuristic;
  };
  return sm90_launcher::launch_gemm_on_current_device<typename Gemm::Kernel, cm, cn>(a, stream, fill);
}

}  // namespace gate_up_launch
