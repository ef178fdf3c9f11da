#define TREE_NS unit11
#include "kernels_light.cuh"
