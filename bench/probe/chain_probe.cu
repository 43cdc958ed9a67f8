// chain_probe.cu -- what the index chain costs a bare read (issue 16).
// Every exact, general implementation of the call must, before its first
// state-row load, read the boundary token index, then that token's request
// and position, then the request's block-table entry: three dependent loads
// from index arrays that the SPEC 6 flush has left in DRAM.  rd_chain<D> is
// the floor's read (tools/read_floor.cuh) whose every CTA first walks D
// dependent loads through cold arrays and starts its grid-stride range only
// after them; against the plain floor (D = 0) in the same run, timed as
// SPEC 6 times a call (L2 flushed by a write of 4 x L2, events, median).
// Build: nvcc -O3 -arch=sm_90 chain_probe.cu -o chain_probe
#include "../../tools/read_floor.cuh"
#include "probe_common.cuh"

#define LEVEL_INTS (1 << 22) /* 16 MiB between the levels' arrays */

template <int D>
__global__ void rd_chain(const float4 *p, size_t n, const int *idx, float *sink) {
    int j = (int)(blockIdx.x & 1023);
#pragma unroll
    for (int k = 0; k < D; k++) j = idx[(size_t)k * LEVEL_INTS + j]; /* each value < 1024 */
    const size_t start = blockIdx.x * (size_t)blockDim.x + threadIdx.x + (size_t)(j >> 30); /* (j >> 30) == 0 */
    float acc = 0.f;
    for (size_t i = start; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = __ldcs(p + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *sink = acc;
}

int main() {
    int sms = 132, l2 = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    const size_t fl = (size_t)l2 * 4, big = (size_t)512 << 20;
    char *f, *p;
    int *idx;
    float *sink;
    CK(cudaMalloc(&f, fl));
    CK(cudaMalloc(&p, big));
    CK(cudaMalloc(&idx, (size_t)4 * LEVEL_INTS * sizeof(int)));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(p, 0x3c, big));
    std::vector<int> h((size_t)4 * LEVEL_INTS);
    for (size_t i = 0; i < h.size(); i++) h[i] = (int)((i * 2654435761u) >> 22) & 1023;
    CK(cudaMemcpy(idx, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    auto T = [&](auto launch) {
        return probe_median_us([&](int i) { cudaMemsetAsync(f, i & 0xFF, fl); }, launch, e0, e1, 100);
    };
    const unsigned g = sms * 8;
    printf("the floor's read after D dependent loads per CTA (write flush, median of 100; x = against D = 0 in the same round)\n");
    printf("%8s %6s %10s %10s %10s %10s %8s %8s %8s\n", "MB", "round", "D=0 us", "D=1", "D=2", "D=3", "x1", "x2", "x3");
    for (size_t b : {(size_t)32 << 20, (size_t)128 << 20, (size_t)256 << 20, big})
        for (int round = 0; round < 2; round++) {
            const size_t n = b / 16;
            const double t0 = T([&] { read_kernel<<<g, 512>>>((const float4 *)p, n, sink); });
            const double t1 = T([&] { rd_chain<1><<<g, 512>>>((const float4 *)p, n, idx, sink); });
            const double t2 = T([&] { rd_chain<2><<<g, 512>>>((const float4 *)p, n, idx, sink); });
            const double t3 = T([&] { rd_chain<3><<<g, 512>>>((const float4 *)p, n, idx, sink); });
            printf("%8zu %6d %10.1f %10.1f %10.1f %10.1f %8.3f %8.3f %8.3f\n", b >> 20, round, t0, t1, t2, t3, t1 / t0,
                   t2 / t0, t3 / t0);
        }
    CK(cudaGetLastError());
    return 0;
}
