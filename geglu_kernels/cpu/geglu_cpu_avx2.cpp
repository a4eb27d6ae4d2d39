// The row kernels compiled for AVX2 + FMA (ATen's CPU capability "AVX2").
//
// build.toml's compiler flags apply to every file, and the module must load on any
// x86-64 CPU, so the instruction set is raised for this file only, with a target
// pragma around the kernels (ATen builds its own AVX2 kernel files with -mavx2 -mfma
// per file). geglu_cpu.cpp calls into this table only when ATen reports AVX2 or
// better. The kernels have internal linkage; should an inline function of a shared
// header still be emitted here and in geglu_cpu.cpp, the linker keeps the first copy,
// so list this file after geglu_cpu.cpp in build.toml. With compilers other than GCC
// on x86-64 the file is empty and the baseline kernels serve.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
// g++ does not define __AVX2__ & co. for a target pragma (it changes code generation
// only), but sleef.h, which ATen's Vectorized calls into, declares its vector
// functions only under them: define them for that one header.
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#include <sleef.h>
#undef __AVX__
#undef __AVX2__
#undef __FMA__
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
