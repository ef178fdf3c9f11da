#define TREE_NS unit01
#include "sort_heavy.cuh"
