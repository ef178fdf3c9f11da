#include "common.cuh"

template <typename T>
__global__ void sum_kernel(int n, const T *in, T *out) {
    __shared__ T partial[kBlock];
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    partial[threadIdx.x] = i < n ? in[i] : T(0);
    __syncthreads();
    for (int stride = kBlock / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}

void sum(int n, const float *in, float *out) { sum_kernel<<<blocks_for(n), kBlock>>>(n, in, out); }
void sum(int n, const int *in, int *out) { sum_kernel<<<blocks_for(n), kBlock>>>(n, in, out); }
