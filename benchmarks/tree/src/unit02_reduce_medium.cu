#define TREE_NS unit02
#include "reduce_medium.cuh"
