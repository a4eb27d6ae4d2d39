// Keeps locally built modules within manylinux_2_28 (glibc <= 2.28); see also
// tools/glibc_compat.h, which rebinds symbols that have an older version.
//
// These symbols have no version older than 2.28 to bind to, so the module
// carries its own definitions. Hidden visibility makes the linker bind every
// reference inside the .so to them, so no versioned glibc symbol is imported.
//
// __libc_single_threaded (glibc 2.32): libstdc++ 11+ headers read it inline in
// __gnu_cxx::__is_single_threaded() whenever <sys/single_threaded.h> exists at
// compile time, so every object touching a shared_ptr or a refcount references
// it. The value 0 means "threads may exist": libstdc++ then always takes its
// atomic path, which is correct in every process (it only skips the
// single-threaded shortcut).
//
// arc4random (glibc 2.36): referenced by inline libstdc++ 13 code
// (std::random_device). getrandom(2) (glibc 2.25) gives the same guarantees.
//
// kernel-builder's release builds use an old sysroot and need none of this; only
// the local builder (tools/build.py) links this file.
#include <cstdint>
#include <sys/random.h>

extern "C" {
__attribute__((visibility("hidden"))) char __libc_single_threaded = 0;

__attribute__((visibility("hidden"))) uint32_t arc4random(void) noexcept {
  uint32_t value;
  while (getrandom(&value, sizeof value, 0) != static_cast<ssize_t>(sizeof value)) {
  }
  return value;
}
}
