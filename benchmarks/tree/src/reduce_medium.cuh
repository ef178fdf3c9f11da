// A middle-weight unit: one Thrust reduction over a user functor.
#pragma once
#include <thrust/device_vector.h>
#include <thrust/transform_reduce.h>

namespace TREE_NS {
struct Square {
    __host__ __device__ float operator()(float x) const { return x * x; }
};
float run(const thrust::device_vector<float> &v) {
    return thrust::transform_reduce(v.begin(), v.end(), Square(), 0.0f, thrust::plus<float>());
}
}  // namespace TREE_NS
