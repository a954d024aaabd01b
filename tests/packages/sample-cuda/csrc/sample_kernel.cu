// A real CUDA translation unit for the sample (packed into it by tests that need nvcc, e.g. the
// shared compile cache): nvcc runs cudafe++, cicc (PTX), ptxas (CUBIN) and the host compiler on
// it, the same steps as for a flash-attn kernel. An anonymous namespace gives it a module id.
#include <cuda_runtime.h>

namespace {
__device__ unsigned int calls;
}

__global__ void fa_shim_sample_scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
  if (i == 0) atomicAdd(&calls, 1u);
}

extern "C" int fa_shim_sample_launch(float* x, float factor, int n) {
  fa_shim_sample_scale<<<(n + 255) / 256, 256>>>(x, factor, n);
  return static_cast<int>(cudaGetLastError());
}
