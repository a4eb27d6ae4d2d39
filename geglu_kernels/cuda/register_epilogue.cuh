#pragma once
// What a register-level epilogue of the Hopper kernels here (GegluEpilogue,
// SwapAbEpilogue, SplitKEpilogue) shows CUTLASS 3.x besides its operator(): the
// collective-epilogue interface the sm90 warp-specialized kernels and
// Sm90TmaWarpSpecializedAdapter read, for an epilogue with no shared memory, no
// workspace and no source tensor C, whose Params are its Arguments as given.
//
// Device and host code; include after the CUTLASS headers.

#include <cstddef>
#include <cstdint>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace sm90_epilogue {

template <class Element, class Arguments_, class StrideCD>
class RegisterEpilogue {
 public:
  // Names the kernels read (their C/D typedefs); C is never loaded.
  using ElementC = Element;
  using ElementD = Element;
  using StrideC = StrideCD;
  using StrideD = StrideCD;
  using GmemTiledCopyC = void;
  using GmemTiledCopyD = void;
  struct SharedStorage {};
  using TensorStorage = SharedStorage;
  using Arguments = Arguments_;
  using Params = Arguments_;

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const&, Arguments const& args, void*) {
    return args;
  }
  template <class ProblemShape>
  static size_t get_workspace_size(ProblemShape const&, Arguments const&) {
    return 0;
  }
  template <class ProblemShape>
  static cutlass::Status initialize_workspace(ProblemShape const&, Arguments const&, void*, cudaStream_t,
                                              cutlass::CudaHostAdapter* = nullptr) {
    return cutlass::Status::kSuccess;
  }
  template <class ProblemShape>
  static bool can_implement(ProblemShape const&, Arguments const&) {
    return true;
  }

  CUTLASS_HOST_DEVICE explicit RegisterEpilogue(Params const& params_) : params(params_) {}
  CUTLASS_DEVICE bool is_source_needed() { return false; }

 protected:
  Params params;
};

}  // namespace sm90_epilogue
