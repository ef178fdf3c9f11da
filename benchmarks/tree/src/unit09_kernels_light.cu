#define TREE_NS unit09
#include "kernels_light.cuh"
