// For the host side of the report (-ccbin clang++): host_heavy<N> is instantiated exactly 24
// times, in host code only, each with a Chain 40 deep of its own.

template <int N, int Depth>
struct HostChain {
    static constexpr unsigned long value = HostChain<N, Depth - 1>::value * 5u + N;
};
template <int N>
struct HostChain<N, 0> {
    static constexpr unsigned long value = N;
};

template <int N>
unsigned long host_heavy() { return HostChain<N, 40>::value % 1009u; }

#define K4(n) host_heavy<n>() + host_heavy<n + 1>() + host_heavy<n + 2>() + host_heavy<n + 3>()

unsigned long host_sum() { return K4(0) + K4(4) + K4(8) + K4(12) + K4(16) + K4(20); }

__global__ void host_heavy_kernel(int* out) { out[0] = 1; }
