// The known answer for the device-trace report: heavy<N> is instantiated exactly 40 times per
// architecture (N = 0..39, once each) and costs the front end more than any other template, by
// far: 0.7 s against 11 ms for the costliest of the headers' (<cmath>'s __hyperg), so that a
// loaded machine's preemption inside one span cannot rank another first (it once did, at 49 ms).

template <int N, int Depth>
struct Chain {
    static constexpr unsigned long value = Chain<N, Depth - 1>::value * 3u + N;
};
template <int N>
struct Chain<N, 0> {
    static constexpr unsigned long value = N;
};

// Constant evaluation inside each heavy<N>: it makes heavy<N> far costlier than any template of
// the headers (a function, not a template: no instantiation spans of its own).
__host__ __device__ constexpr unsigned long spin(unsigned long seed, int steps) {
    for (int i = 0; i < steps; ++i) seed = seed * 6364136223846793005ul + 1442695040888963407ul;
    return seed;
}

template <int N>
__device__ float heavy(float x) {
    // Each heavy<N> instantiates a Chain 60 deep of its own: 61 classes per heavy<N>.
    constexpr unsigned long c = Chain<N, 60>::value + spin(N, 100000);
    return x * static_cast<float>(c % 97u) + N;
}

template <typename T>
__device__ T twice(T x) { return x + x; }

#define H4(n) heavy<n>(x) + heavy<n + 1>(x) + heavy<n + 2>(x) + heavy<n + 3>(x)
#define H20(n) H4(n) + H4(n + 4) + H4(n + 8) + H4(n + 12) + H4(n + 16)

__global__ void expensive_kernel(float* out) {
    float x = out[1];
    out[0] = H20(0) + H20(20) + twice(out[2]);
}
