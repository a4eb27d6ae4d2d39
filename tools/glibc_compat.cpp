// Keeps locally built modules within manylinux_2_28 (glibc <= 2.28).
//
// libstdc++ 11+ headers read glibc's `__libc_single_threaded` (added in glibc
// 2.32) inline, in __gnu_cxx::__is_single_threaded(), whenever
// <sys/single_threaded.h> exists at compile time. Compiled against glibc 2.36
// every object that touches a shared_ptr or a refcount then references
// `__libc_single_threaded@GLIBC_2.32`, and the module fails to load on older
// systems. kernel-builder avoids this with an old sysroot; we cannot fetch one,
// so instead the module carries its own definition. Hidden visibility makes the
// linker bind every reference inside the .so to it, so no versioned glibc symbol
// is imported. The value 0 means "threads may exist": libstdc++ then always
// takes its atomic path, which is correct in every process (it only skips the
// single-threaded shortcut). Only the local builder (tools/build.py) links this
// file; release builds from kernel-builder do not need it.
extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;
}
