#define TREE_NS unit13
#include "kernels_light.cuh"
