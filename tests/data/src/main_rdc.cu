int run_triple(int *p);
int main() {
    int *p = nullptr;
    cudaMalloc(&p, 32 * sizeof(int));
    run_triple(p);
    cudaFree(p);
    return 0;
}
