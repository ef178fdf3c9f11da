#define TREE_NS unit14
#include "kernels_light.cuh"
