// Internal linkage only: cudafe++'s module_id then has a random part, so the one a speculative
// cicc makes always differs and fast_nvcc reruns cicc.  cicc warns (#177) and nvcc prints the
// warning once: so must fast_nvcc, whichever of the two cicc runs it forwards.
static __global__ void unused(int *p) { p[0] = 1; }
