// The row kernels compiled for AVX2 + FMA (ATen's CPU capability "AVX2").
//
// build.toml's compiler flags apply to every file, and the module must load on any
// x86-64 CPU, so the instruction set is raised for this file only, with a target
// pragma around the kernels (ATen compiles its own AVX2 kernel files the same way,
// with -mavx2 -mfma per file). geglu_cpu.cpp calls into this table only when ATen
// reports AVX2 or better. List this file after geglu_cpu.cpp in build.toml: where an
// inline function from a shared header is emitted in several files, the linker keeps
// the first copy, which must be the baseline one.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "geglu_cpu_kernels.h"
#pragma GCC pop_options

namespace geglu_cpu {
namespace {
// Runs at load time on every CPU, hence outside the AVX2 region: it only stores the
// address of a constant table.
const bool kRegistered = (register_kernels(Isa::kAvx2, &kKernelTable), true);
} // namespace
} // namespace geglu_cpu

#endif
