#define TREE_NS unit12
#include "kernels_light.cuh"
