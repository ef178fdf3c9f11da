__global__ void k(int *p) { int unused_variable = 3; p[0] = 1; }
int host_warning() { int x; return 0; }
