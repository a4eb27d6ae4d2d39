// Host time of one kernel launch, plain against cooperative, for a kernel shaped like
// the decode MLP's one kernel (mlp_fused_sm90.cu): 384 threads, ~200 KB of dynamic shared
// memory (one CTA per SM), a ~1 KB parameter struct, 116 CTAs. A host profile of the
// kernelized GemmaMLP call (benchmarks/host_profile.py (git history, commit 0877889)) put
// a quarter of its host time in cudaLaunchKernelExC; this says how much of that the
// cooperative attribute costs, and the parameter struct's size (the same kernel with 64
// bytes of params).
//
//   nvcc -O2 -arch=sm_90a -o /tmp/launch_cost tools/launch_cost.cu && /tmp/launch_cost
//
// Each row: median over rounds of the mean host time of the launch calls alone, in
// bursts of 20 launches between syncs (the GPU stays close behind, no queue fills).

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

struct Params {
  char bytes[1024];
};

struct SmallParams {
  char bytes[64];
};

__global__ void __launch_bounds__(384, 1) kernel(Params p) {
  extern __shared__ char smem[];
  if (threadIdx.x == 0 && p.bytes[0] == 42) smem[0] = 1;  // never: the kernel does nothing
}

__global__ void __launch_bounds__(384, 1) small_kernel(SmallParams p) {
  extern __shared__ char smem[];
  if (threadIdx.x == 0 && p.bytes[0] == 42) smem[0] = 1;
}

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e = (x);                                                                  \
    if (e != cudaSuccess) {                                                               \
      std::printf("%s failed: %s\n", #x, cudaGetErrorString(e));                          \
      return 1;                                                                           \
    }                                                                                     \
  } while (0)

enum Mode { kChevron, kExPlain, kExCooperative, kCooperativeApi, kSmallParams, kModes };

static cudaError_t launch(Mode mode, int grid, int smem, cudaStream_t stream, Params& p) {
  void* args[] = {&p};
  switch (mode) {
    case kChevron:
      kernel<<<grid, 384, smem, stream>>>(p);
      return cudaGetLastError();
    case kCooperativeApi:
      return cudaLaunchCooperativeKernel((void*)kernel, grid, 384, args, smem, stream);
    case kSmallParams: {
      SmallParams sp{};
      small_kernel<<<grid, 384, smem, stream>>>(sp);
      return cudaGetLastError();
    }
    default: {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(grid);
      cfg.blockDim = dim3(384);
      cfg.dynamicSmemBytes = smem;
      cfg.stream = stream;
      cudaLaunchAttribute attr[1];
      if (mode == kExCooperative) {
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
      }
      return cudaLaunchKernelExC(&cfg, (void const*)kernel, args);
    }
  }
}

int main() {
  const int smem = 200 * 1024, grid = 116, burst = 20, bursts = 500, rounds = 9;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CHECK(cudaFuncSetAttribute(small_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Params p{};
  const char* names[] = {"kernel<<<>>>", "cudaLaunchKernelExC", "cudaLaunchKernelExC, cooperative",
                         "cudaLaunchCooperativeKernel", "kernel<<<>>>, 64-byte params"};
  std::vector<std::vector<double>> us(kModes);
  for (int m = 0; m < kModes; ++m) {  // warm up
    for (int i = 0; i < 100; ++i) CHECK(launch(Mode(m), grid, smem, stream, p));
  }
  CHECK(cudaStreamSynchronize(stream));
  for (int r = 0; r < rounds; ++r) {
    for (int m = 0; m < kModes; ++m) {  // interleaved
      double total = 0;
      for (int b = 0; b < bursts; ++b) {
        CHECK(cudaStreamSynchronize(stream));
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < burst; ++i) CHECK(launch(Mode(m), grid, smem, stream, p));
        total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      }
      us[m].push_back(total / (bursts * burst));
    }
  }
  std::printf("host us per launch (%d CTAs x 384 threads, %d KB smem, %zu-byte params; median of %d rounds)\n",
              grid, smem / 1024, sizeof(Params), rounds);
  for (int m = 0; m < kModes; ++m) {
    std::sort(us[m].begin(), us[m].end());
    std::printf("  %-36s %6.2f  (%.2f-%.2f)\n", names[m], us[m][rounds / 2], us[m].front(), us[m].back());
  }
  return 0;
}
