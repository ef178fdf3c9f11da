#define TREE_NS unit06
#include "kernels_light.cuh"
