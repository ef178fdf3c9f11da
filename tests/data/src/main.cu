#include <cstdio>
int launch(float *out);
int main() {
    float *out = nullptr;
    cudaMalloc(&out, 256 * sizeof(float));
    int rc = launch(out);
    cudaFree(out);
    std::printf("done %d\n", rc);
    return 0;
}
