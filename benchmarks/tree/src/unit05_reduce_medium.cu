#define TREE_NS unit05
#include "reduce_medium.cuh"
