// The row kernels compiled for AVX-512 (ATen's CPU capability "AVX512": F, BW, VL,
// DQ), the same way as geglu_cpu_avx2.cpp (see there). geglu_cpu.cpp calls into this
// table only when ATen reports AVX512. List this file after geglu_cpu.cpp and
// geglu_cpu_avx2.cpp in build.toml.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)

#define CPU_CAPABILITY AVX512
#define CPU_CAPABILITY_AVX512

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
// g++ does not define __AVX2__ & co. for a target pragma (it changes code generation
// only), but sleef.h, which ATen's Vectorized calls into, declares its vector
// functions only under them: define them for that one header.
#define __AVX__ 1
#define __AVX2__ 1
#define __FMA__ 1
#define __AVX512F__ 1
#include <sleef.h>
#undef __AVX__
#undef __AVX2__
#undef __FMA__
#undef __AVX512F__
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
