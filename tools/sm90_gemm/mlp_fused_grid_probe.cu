// Probe (tools only): the one-kernel MLP (geglu_kernels/cuda/sm90/decode/mlp_fused_sm90.cu) with its
// persistent grid set to `ctas` CTAs instead of one per SM. The question it answers: is
// the last, partly filled round of work units what keeps the kernel from the read rate?
// At Gemma-7B 576 equal units fill 132 CTAs 4.36 times, so 48 CTAs run a fifth unit while
// 84 idle; with 96 or 115 CTAs every CTA runs 6 or 5 (probe_mlp_fused_grid.py times it).
//
//   tools/sm90_gemm/build_lib.sh tools/sm90_gemm/mlp_fused_grid_probe.cu libmlp_fused_grid_probe

#include "sm90/decode/mlp_fused_sm90.cu"

namespace {

struct ProbeArgs {  // the params-cache key: the call and the grid
  mlp_fused::LaunchArgs call;
  int64_t ctas;
};

template <class Element>
int run_probe(ProbeArgs const& a, int device, cudaStream_t stream) {
  using Kernel = typename mlp_fused::FusedGemm<Element>::Kernel;
  auto make = [device](ProbeArgs const& p) {
    return mlp_fused::make_arguments<Element>(p.call, device, int(p.ctas));
  };
  return sm90_launcher::status_of(
      sm90_launcher::Runner<Kernel, 1, 1, ProbeArgs, /*Cooperative=*/true>::run(a, device, stream, make));
}

}  // namespace

// The kernel's work units for a call of these sizes (what the grid divides).
extern "C" int64_t geglu_mlp_fused_sm90_units(int64_t M, int64_t D, int64_t H) {
  const mlp_fused::Units u = mlp_fused::units_of(M, D, H);
  return int64_t(u.per_token_tile()) * u.token_tiles;
}

// geglu_mlp_fused_sm90's arguments (the caller passes valid ones: no checks here) and ctas.
extern "C" int geglu_mlp_fused_sm90_ctas(const void* x, int64_t M, int64_t D, int64_t ldx, const void* w_gate,
                                         const void* w_up, int64_t ldw, const void* w_down, int64_t ldwd, void* h,
                                         int64_t H, void* out, void* workspace, int dtype, int approximate,
                                         void* stream, int ctas) {
  int device = 0;
  if (sm90_launcher::current_sm90_device(&device) == nullptr) return GEGLU_SM90_ERR_DEVICE;
  const mlp_fused::Units u = mlp_fused::units_of(M, D, H);
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  int* c = tile_counters::get(device, s, u.counters());
  if (c == nullptr) return GEGLU_SM90_ERR_CUDA;
  ProbeArgs a;
  std::memset(&a, 0, sizeof a);
  a.call.x = x, a.call.wg = w_gate, a.call.wu = w_up, a.call.wd = w_down;
  a.call.M = M, a.call.D = D, a.call.H = H;
  a.call.ldx = ldx, a.call.ldw = ldw, a.call.ldwd = ldwd, a.call.ldh = H, a.call.ldo = D;
  a.call.h = h, a.call.out = out;
  a.call.partials = static_cast<float*>(workspace);
  a.call.counters = c;
  a.call.approximate = approximate;
  a.ctas = ctas;
  if (dtype == GEGLU_SM90_BF16) return run_probe<cutlass::bfloat16_t>(a, device, s);
  return run_probe<cutlass::half_t>(a, device, s);
}
