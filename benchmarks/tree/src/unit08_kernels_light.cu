#define TREE_NS unit08
#include "kernels_light.cuh"
