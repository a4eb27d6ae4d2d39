// The row kernels compiled for AVX-512 (ATen's CPU capability "AVX512": F, BW, VL, DQ).
//
// build.toml's compiler flags apply to every file, and the module must load on any
// x86-64 CPU, so the instruction set is raised for this file only, with a target
// pragma around the kernels (ATen compiles its own AVX2 kernel files the same way,
// with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma). geglu_cpu.cpp calls into this table only when ATen
// reports AVX512. List this file after geglu_cpu.cpp and geglu_cpu_avx2.cpp in build.toml: where an
// inline function from a shared header is emitted in several files, the linker keeps
// the first copy, which must be the baseline one.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#define CPU_CAPABILITY AVX512
#define CPU_CAPABILITY_AVX512

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#include "geglu_cpu_kernels.h"
#pragma GCC pop_options

namespace geglu_cpu {
namespace {
// Runs at load time on every CPU, hence outside the AVX-512 region: it only stores the
// address of a constant table.
const bool kRegistered = (register_kernels(Isa::kAvx512, &kKernelTable), true);
} // namespace
} // namespace geglu_cpu

#endif
