#pragma once
// Included by every source: touching it must rebuild every object (the depfiles work).
#include <cuda_runtime.h>

constexpr int kBlock = 256;

__host__ __device__ inline int blocks_for(int n) { return (n + kBlock - 1) / kBlock; }
