// A source with no external definition (everything in an anonymous namespace, run from a static
// initializer): cudafe++ gives its module_id a process id, so nvcc itself does not reproduce it,
// and a cicc that makes its own module_id can never match nvcc's.  Three Thrust sorts.
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <cstdint>

namespace {
struct Particle { float x, y, z; int id; };
struct ByDistance {
    __host__ __device__ bool operator()(const Particle &a, const Particle &b) const {
        return a.x * a.x + a.y * a.y + a.z * a.z < b.x * b.x + b.y * b.y + b.z * b.z;
    }
};
int work() {
    thrust::device_vector<Particle> particles(1000);
    thrust::sort(particles.begin(), particles.end(), ByDistance());
    thrust::device_vector<std::uint64_t> keys(1000);
    thrust::device_vector<float> values(1000);
    thrust::stable_sort_by_key(keys.begin(), keys.end(), values.begin(), thrust::greater<std::uint64_t>());
    thrust::device_vector<double> d(1000);
    thrust::sort(d.begin(), d.end());
    return 0;
}
int dummy = work();
}  // namespace
