// The demo's source: a small particle step with a Thrust reduction, compiled for three
// architectures. Enough device code that nvcc's phases take a visible time.
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/transform_reduce.h>

#include <cstdio>

struct Particle {
    float x, v;
};

__global__ void step(Particle *p, int n, float k, float dt) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        p[i].v -= k * p[i].x * dt;
        p[i].x += p[i].v * dt;
    }
}

struct KineticEnergy {
    __host__ __device__ float operator()(const Particle &p) const { return 0.5f * p.v * p.v; }
};

int main() {
    const int n = 1 << 20;
    thrust::device_vector<Particle> particles(n);
    step<<<(n + 255) / 256, 256>>>(thrust::raw_pointer_cast(particles.data()), n, 0.5f, 0.01f);
    float energy = thrust::transform_reduce(particles.begin(), particles.end(), KineticEnergy(), 0.0f,
                                            thrust::plus<float>());
    std::printf("kinetic energy %f\n", energy);
    return 0;
}
