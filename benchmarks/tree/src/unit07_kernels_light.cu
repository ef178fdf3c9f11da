#define TREE_NS unit07
#include "kernels_light.cuh"
