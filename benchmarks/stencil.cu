// The cache benchmark's source (benchmarks/cache_rebuild.py): device work in plain templated
// kernels and no CCCL, whose inline namespace names the architecture list (so that with it,
// adding a -gencode target changes every step), and a host function to compile.
#include <cstdio>

template <typename T, int R>
__global__ void stencil(const T *in, T *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < R || i >= n - R) return;
    T acc = 0;
#pragma unroll
    for (int k = -R; k <= R; ++k) {
        T w = T(1) / T(1 + (k < 0 ? -k : k));
        acc += w * in[i + k] * in[i + k] + sin(in[i + k] * w);
    }
    out[i] = acc;
}

template <typename T, int R>
void launch(const T *in, T *out, int n) {
    stencil<T, R><<<(n + 255) / 256, 256>>>(in, out, n);
}

#define INSTANTIATE(R)                                             \
    template void launch<float, R>(const float *, float *, int); \
    template void launch<double, R>(const double *, double *, int);
INSTANTIATE(1) INSTANTIATE(2) INSTANTIATE(3) INSTANTIATE(4) INSTANTIATE(5) INSTANTIATE(6)
INSTANTIATE(7) INSTANTIATE(8) INSTANTIATE(10) INSTANTIATE(12) INSTANTIATE(16) INSTANTIATE(24)

int host_report(int n) {
    std::printf("stencils over %d points\n", n);
    return n;
}
