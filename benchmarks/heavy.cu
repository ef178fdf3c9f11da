// A template-heavy translation unit for the benchmarks: three Thrust/CUB sorts and a reduce,
// the kind of source whose cicc, cudafe++ and host compile each take seconds.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/tuple.h>

#include <cstdint>
#include <cstdio>

struct Particle {
    float x, y, z;
    int id;
};

struct ByDistance {
    __host__ __device__ bool operator()(const Particle &a, const Particle &b) const {
        return a.x * a.x + a.y * a.y + a.z * a.z < b.x * b.x + b.y * b.y + b.z * b.z;
    }
};

struct Energy {
    __host__ __device__ double operator()(const Particle &p) const {
        return 0.5 * (double(p.x) * p.x + double(p.y) * p.y + double(p.z) * p.z);
    }
};

int sort_particles(thrust::device_vector<Particle> &particles) {
    thrust::sort(particles.begin(), particles.end(), ByDistance());
    return 0;
}

int sort_by_key(thrust::device_vector<std::uint64_t> &keys, thrust::device_vector<float> &values) {
    thrust::stable_sort_by_key(keys.begin(), keys.end(), values.begin(), thrust::greater<std::uint64_t>());
    return 0;
}

int radix_sort(const std::uint32_t *in, std::uint32_t *out, const double *vin, double *vout, int n) {
    void *temp = nullptr;
    size_t bytes = 0;
    cub::DeviceRadixSort::SortPairs(temp, bytes, in, out, vin, vout, n);
    cudaMalloc(&temp, bytes);
    cub::DeviceRadixSort::SortPairs(temp, bytes, in, out, vin, vout, n);
    cudaFree(temp);
    return 0;
}

double total_energy(const thrust::device_vector<Particle> &particles) {
    return thrust::transform_reduce(particles.begin(), particles.end(), Energy(), 0.0, thrust::plus<double>());
}

int main() {
    thrust::device_vector<Particle> particles(1 << 16);
    thrust::device_vector<std::uint64_t> keys(1 << 16);
    thrust::device_vector<float> values(1 << 16);
    thrust::sequence(keys.begin(), keys.end());
    sort_particles(particles);
    sort_by_key(keys, values);
    std::printf("%f\n", total_energy(particles));
    return 0;
}
