// What real build lines reach: a string-valued macro that may hold a space, fast math, and
// a host constexpr function called from device code (--expt-relaxed-constexpr).
#include <cstdio>
#ifndef GREETING
#define GREETING "none"
#endif
constexpr float half_of(float x) { return x * 0.5f; }
__global__ void scale(float *x, float s) { x[threadIdx.x] = __expf(half_of(x[threadIdx.x])) * s; }
const char *greeting() { return GREETING; }
int launch(float *x) { scale<<<1, 32>>>(x, 2.0f); std::printf("%s\n", greeting()); return 0; }
