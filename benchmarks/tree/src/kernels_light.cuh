// A light unit: a few plain kernels.
#pragma once
namespace TREE_NS {
__global__ void scale(float *x, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
__global__ void axpy(const float *x, float *y, int n, float a) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
void run(float *x, float *y, int n) {
    scale<<<(n + 255) / 256, 256>>>(x, n, 2.0f);
    axpy<<<(n + 255) / 256, 256>>>(x, y, n, 0.5f);
}
}  // namespace TREE_NS
