#pragma once
// Programmatic dependent launch (sm_90) between the MLP's two GEMMs at 33-64 tokens: the
// split-K down projection (linear_swapab_sm90.cu) is launched with programmatic stream
// serialization, so its CTAs may start before the engine's gate/up (geglu_gemm_sm90.cu)
// that writes its input has finished.
// - The gate/up calls launch_dependents() as it starts: the down projection's CTAs are
//   then scheduled as SMs come free (each gate/up CTA holds its SM's shared memory to its
//   end), instead of after the whole gate/up has completed.
// - The down projection requests its first stages' weights, which no kernel before it
//   writes, then calls wait() (until the kernel before it has completed and its writes
//   are visible) before it reads x or writes anything.
// Both are no-ops in a kernel launched without the attribute or with nothing to depend on.
// (CUTLASS's own kernels issue them only when built with CUTLASS_ENABLE_GDC_FOR_SM90.)

namespace grid_dependency {

__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

__device__ __forceinline__ void wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace grid_dependency
