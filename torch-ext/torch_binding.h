#pragma once
// The ops of the native module, as torch_binding.cpp registers them: each backend's
// activation ops (common/activation_ops.h) and the per-layer ops (ops/layer_ops.h,
// implemented in geglu_kernels/ops/ over the backend's fused GEMM hooks).

#include "common/activation_ops.h"
#include "ops/layer_ops.h"
