#pragma once
// Shared by the host and the device code of the test sources.
template <typename T>
__host__ __device__ inline T scale(T value, T factor) { return value * factor; }
