// A kernel that exists for some architectures only: each cicc writes another stub.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__global__ void only_on_sm90(float *out) { out[0] = 1.0f; }
#endif

__global__ void everywhere(float *out) { out[1] = 2.0f; }

void launch(float *out) {
    everywhere<<<1, 1>>>(out);
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    only_on_sm90<<<1, 1>>>(out);
#endif
}
