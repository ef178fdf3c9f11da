// A small translation unit with what makes nvcc's outputs depend on its module_id:
// internal-linkage device entities, a __constant__, a template and a host function.
#include <cstdio>
#include "scale.h"

static __device__ int hidden_counter;
__constant__ float gain = 2.0f;

namespace {
__device__ float twice(float x) { return scale(x, gain); }
}

template <int N>
__global__ void fill(float *out) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) out[i] = twice(static_cast<float>(i));
    if (i == 0) atomicAdd(&hidden_counter, 1);
}

__global__ void hello() { printf("hello from %d\n", threadIdx.x); }

int launch(float *out) {
    fill<256><<<1, 256>>>(out);
    hello<<<1, 1>>>();
    return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
