// The first external definition differs between the host and the device compilation,
// so cudafe++'s module_id and a cicc-generated one differ: fast_nvcc must rerun cicc.
#ifndef __CUDA_ARCH__
int host_only_first() { return 42; }
#endif
__global__ void after(int *p) { p[0] = 1; }
