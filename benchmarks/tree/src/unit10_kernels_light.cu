#define TREE_NS unit10
#include "kernels_light.cuh"
