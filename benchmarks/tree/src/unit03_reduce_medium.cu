#define TREE_NS unit03
#include "reduce_medium.cuh"
