// Force-included (-include) into every translation unit the local builder
// compiles, so that modules built on a new glibc stay within manylinux_2_28
// (glibc <= 2.28), as kernel-builder's old sysroot guarantees for release builds.
//
// Some glibc functions got a new symbol version after 2.28 although an older,
// equivalent version is still exported. Binding our references to the old
// version keeps the module loadable on old systems and runs the same code:
//  - pthread_once moved from libpthread into libc in glibc 2.34 (new version
//    GLIBC_2.34); the GLIBC_2.2.5 version is the same function.
//  - glibc 2.38 redirects strtoul & co. to __isoc23_* under _GNU_SOURCE (which
//    g++ always defines) to accept C23's "0b" prefix; nothing we compile parses
//    binary literals, so the pre-C23 functions are equivalent for us.
// Symbols with no older version (__libc_single_threaded, arc4random) are
// defined, hidden, in tools/glibc_compat.cpp.
#pragma once
#if defined(__linux__) && defined(__x86_64__) && !defined(__CUDA_ARCH__)
#include <features.h>
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 34)
__asm__(".symver pthread_once, pthread_once@GLIBC_2.2.5");
#endif
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 38)
__asm__(".symver __isoc23_strtol, strtol@GLIBC_2.2.5");
__asm__(".symver __isoc23_strtoul, strtoul@GLIBC_2.2.5");
__asm__(".symver __isoc23_strtoll, strtoll@GLIBC_2.2.5");
__asm__(".symver __isoc23_strtoull, strtoull@GLIBC_2.2.5");
#endif
#endif
