#define TREE_NS unit04
#include "reduce_medium.cuh"
