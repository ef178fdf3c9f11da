// Separable compilation: a device function defined here, called from rdc_b.cu.
__device__ int triple(int x) { return 3 * x; }
