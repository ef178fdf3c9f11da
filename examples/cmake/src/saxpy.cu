#include "common.cuh"

__global__ void saxpy_kernel(int n, float a, const float *x, float *y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

void saxpy(int n, float a, const float *x, float *y) {
    saxpy_kernel<<<blocks_for(n), kBlock>>>(n, a, x, y);
}
