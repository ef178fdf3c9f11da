#include "common.cuh"

// Called from particles.cu: needs separable compilation.
__device__ float spring_force(float x, float k) { return -k * x; }
