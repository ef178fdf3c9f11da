#define TREE_NS unit00
#include "sort_heavy.cuh"
