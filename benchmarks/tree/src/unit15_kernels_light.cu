#define TREE_NS unit15
#include "kernels_light.cuh"
