__global__ void k(int *p) { p[0] = undefined_device_name; }
int f() { return undefined_host_name; }
