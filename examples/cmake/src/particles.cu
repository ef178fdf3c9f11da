#include "common.cuh"

extern __device__ float spring_force(float x, float k);

__global__ void step_kernel(int n, float *x, float *v, float k, float dt) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        v[i] += spring_force(x[i], k) * dt;
        x[i] += v[i] * dt;
    }
}

void step(int n, float *x, float *v, float k, float dt) {
    step_kernel<<<blocks_for(n), kBlock>>>(n, x, v, k, dt);
}
