#ifdef __CUDA_ARCH__
#error device-side error only
#endif
__global__ void k(int *p) { p[0] = 1; }
