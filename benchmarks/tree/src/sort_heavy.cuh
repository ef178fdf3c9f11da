// A template-heavy unit: Thrust sorts and a transform_reduce over a user type (the long pole).
#pragma once
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>

namespace TREE_NS {
struct Item {
    float key;
    int value;
};
struct ByKey {
    __host__ __device__ bool operator()(const Item &a, const Item &b) const { return a.key < b.key; }
};
struct Weight {
    __host__ __device__ double operator()(const Item &i) const { return double(i.key) * i.value; }
};
double run(thrust::device_vector<Item> &items, thrust::device_vector<unsigned long long> &keys,
                  thrust::device_vector<float> &values) {
    thrust::sort(items.begin(), items.end(), ByKey());
    thrust::stable_sort_by_key(keys.begin(), keys.end(), values.begin());
    return thrust::transform_reduce(items.begin(), items.end(), Weight(), 0.0, thrust::plus<double>());
}
}  // namespace TREE_NS
