// A cheap neighbour: twice<T> twice more, and no heavy<N>.
template <typename T>
__device__ T twice(T x) { return x + x; }

__global__ void light_kernel(float* out, int* n) {
    out[0] = twice(out[1]);
    n[0] = twice(n[1]);
}
