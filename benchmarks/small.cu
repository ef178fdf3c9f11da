// The small-compile benchmark: one trivial kernel, one architecture.
__global__ void add_one(int *p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] += 1;
}
void launch(int *p, int n) { add_one<<<(n + 255) / 256, 256>>>(p, n); }
