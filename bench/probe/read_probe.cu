// read_probe.cu -- what a plain streaming read reaches on this GPU at the
// sizes of the benchmark cases, timed as SPEC 6 times a call (L2 flushed by
// writing a 4x-L2 buffer, device events, median), and with the L2 flushed by
// READING a 4x-L2 buffer instead (no dirty lines to write back during the
// timed kernel).  Build: nvcc -O3 -arch=sm_90 read_probe.cu -o read_probe
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

#include "../../tools/read_floor.cuh" /* read_kernel: the floor kvcompress bench times */
#include "probe_common.cuh"
#define rd read_kernel
// 4 independent 16-byte loads per thread per iteration
__global__ void rd4(const float4 *p, size_t n, float *sink) {
    float acc = 0.f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        float4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
        acc += a.x + b.y + c.z + d.w;
    }
    for (; i < n; i += stride) acc += __ldcs(p + i).x;
    if (acc == 1234.5f) *sink = acc;
}

// The floor's read in a shuffled block order: float4 i of the logical
// buffer is read from block perm[i / bf4] (bf4 float4s per block), as a
// shuffled block table places a request's blocks.
__global__ void rd_gather(const float4 *p, size_t n, const int *perm, int bf4_shift, float *sink) {
    float acc = 0.f;
    const size_t m = ((size_t)1 << bf4_shift) - 1;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = __ldcs(p + (((size_t)__ldg(perm + (i >> bf4_shift)) << bf4_shift) | (i & m)));
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *sink = acc;
}

// The benchmark's access pattern without arithmetic: CTA b reads its own
// window of R rows of 4 KiB (rows [b*R, b*R+R)), STEP rows per step (8 = a
// segment), each thread one 8-byte (T=512) or 16-byte (T=256) piece per row.
template <int T, int STEP = 8>
__global__ void win(const float *p, long long R, float *sink) {
    const char *base = (const char *)p + (size_t)blockIdx.x * R * 4096;
    float acc = 0.f;
    for (long long r = 0; r < R; r += STEP) {
        float v[STEP];
#pragma unroll
        for (int i = 0; i < STEP; i++) {
            const char *row = base + (r + i) * 4096;
            if (T == 512) { float2 x = __ldcs((const float2 *)row + threadIdx.x); v[i] = x.x + x.y; }
            else { float4 x = __ldcs((const float4 *)row + threadIdx.x); v[i] = x.x + x.w; }
        }
#pragma unroll
        for (int i = 0; i < STEP; i++) acc += v[i];
    }
    if (acc == 1234.5f) *sink = acc;
}

// TMA ring: NST stages of 8 rows (32 KiB) in shared memory, thread 0 issues
// one 4 KiB cp.async.bulk per row into stage (g + NST - 1) % NST, every thread
// waits on the stage's mbarrier, touches its 8 bytes of each row, then a
// __syncthreads frees the stage.  No arithmetic to speak of.
__device__ __forceinline__ unsigned smem_u32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
template <int NST, int T, bool HINT = false>
__global__ void tma_ring(const float *p, long long R, float *sink) {
    extern __shared__ __align__(128) unsigned char sm[];
    float *st = (float *)sm;
    unsigned long long *bar = (unsigned long long *)(sm + NST * 32768);
    const char *base = (const char *)p + (size_t)blockIdx.x * R * 4096;
    const int S = (int)(R / 8);
    if (threadIdx.x == 0)
        for (int s = 0; s < NST; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + s)));
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    auto issue = [&](int g) {
        if (threadIdx.x != 0 || g >= S) return;
        const int s = g % NST;
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar + s)), "r"(32768) : "memory");
        unsigned long long pol;
        asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
        for (int i = 0; i < 8; i++) {
            if (HINT)
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], 4096, [%2], %3;"
                             ::"r"(smem_u32(st + s * 8192 + i * 1024)), "l"(base + ((size_t)g * 8 + i) * 4096),
                             "r"(smem_u32(bar + s)), "l"(pol) : "memory");
            else
                asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 4096, [%2];"
                             ::"r"(smem_u32(st + s * 8192 + i * 1024)), "l"(base + ((size_t)g * 8 + i) * 4096),
                             "r"(smem_u32(bar + s)) : "memory");
        }
    };
    for (int g = 0; g < NST - 1; g++) issue(g);
    float acc = 0.f;
    for (int g = 0; g < S; g++) {
        const int s = g % NST;
        const unsigned ph = (unsigned)(g / NST) & 1u;
        asm volatile("{\n .reg .pred P1;\n WAIT_%=:\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n @!P1 bra WAIT_%=;\n}"
                     ::"r"(smem_u32(bar + s)), "r"(ph) : "memory");
        const float *sd = st + s * 8192;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            if (T == 512) { float2 x = ((const float2 *)(sd + i * 1024))[threadIdx.x]; acc += x.x + x.y; }
            else { float4 x = ((const float4 *)(sd + i * 1024))[threadIdx.x]; acc += x.x + x.w; }
        }
        __syncthreads();
        if (threadIdx.x == 0) asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        issue(g + NST - 1);
    }
    if (acc == 1234.5f) *sink = acc;
}

/* Median time of launch() over 50 calls, the L2 flushed before each by
 * writing (SPEC 6) or, flush_by_read, by reading the flush buffer. */
template <class F>
static double time_us(F launch, void *f, size_t fl, bool flush_by_read, int sms, float *sink, cudaEvent_t e0,
                      cudaEvent_t e1) {
    auto flush = [&](int i) {
        if (flush_by_read) rd<<<sms * 8, 512>>>((const float4 *)f, fl / 16, sink);
        else cudaMemsetAsync(f, i & 0xFF, fl);
    };
    return probe_median_us(flush, launch, e0, e1, 50);
}

int main() {
    int sms = 132, l2 = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    size_t fl = (size_t)l2 * 4, big = (size_t)2 << 30;
    char *f, *p;
    float *sink;
    cudaMalloc(&f, fl);
    cudaMalloc(&p, big);
    cudaMalloc(&sink, 4);
    cudaMemset(p, 0x3c, big);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    auto T = [&](auto launch, bool by_read = false) { return time_us(launch, f, fl, by_read, sms, sink, e0, e1); };
    const float *pf = (const float *)p;

    printf("L2 %d MB, flush buffer %zu MB\n", l2 >> 20, fl >> 20);
    printf("plain streaming read\n%10s %8s %8s %12s %12s\n", "MB", "kernel", "flush", "median_us", "GB/s");
    size_t sizes[] = {(size_t)32 << 20, (size_t)128 << 20, (size_t)256 << 20, (size_t)512 << 20, big};
    for (size_t b : sizes)
        for (int k = 0; k < 2; k++)
            for (int how = 0; how < 2; how++) {
                const double us = T(
                    [&] {
                        if (k == 0) rd<<<sms * 8, 512>>>((const float4 *)p, b / 16, sink);
                        else rd4<<<sms * 4, 512>>>((const float4 *)p, b / 16, sink);
                    },
                    how == 1);
                printf("%10zu %8s %8s %12.1f %12.1f\n", b >> 20, k ? "rd4" : "rd", how ? "read" : "write", us,
                       b / us / 1e3);
            }

    printf("\nshuffled 32 KiB blocks (a block of 8 rows of 4 KiB; write flush), against the plain read\n");
    int *perm;
    const size_t nblk_max = ((size_t)512 << 20) >> 15;
    cudaMalloc(&perm, nblk_max * sizeof(int));
    for (size_t b : {(size_t)32 << 20, (size_t)128 << 20, (size_t)256 << 20, (size_t)512 << 20}) {
        const size_t nb = b >> 15;
        std::vector<int> id(nb), sh(nb);
        for (size_t i = 0; i < nb; i++) id[i] = sh[i] = (int)i;
        unsigned long long x = 0x9E3779B97F4A7C15ull ^ nb;
        for (size_t i = nb - 1; i >= 1; i--) { /* Fisher-Yates, xorshift */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            std::swap(sh[i], sh[x % (i + 1)]);
        }
        for (int round = 0; round < 2; round++)
            for (const std::vector<int> *v : {&id, &sh}) { /* the identity: the gather's own cost */
                cudaMemcpy(perm, v->data(), nb * sizeof(int), cudaMemcpyHostToDevice);
                const double g = T([&] { rd_gather<<<sms * 8, 512>>>((const float4 *)p, b / 16, perm, 11, sink); });
                const double r = T([&] { rd<<<sms * 8, 512>>>((const float4 *)p, b / 16, sink); });
                printf("%6zu MB round %d %-8s gather %7.1f us, plain %7.1f us: x %.3f\n", b >> 20, round,
                       v == &sh ? "shuffled" : "identity", g, r, g / r);
            }
    }

    printf("\nwindow pattern (write flush): rows per CTA R\n");
    for (long long rows : {131072LL, 8192LL})
        for (long long R : {32LL, 128LL, 1024LL}) {
            const unsigned g = (unsigned)(rows / R);
            const double a = T([&] { win<512><<<g, 512>>>(pf, R, sink); });
            const double b = T([&] { win<256><<<g, 256>>>(pf, R, sink); });
            const double c = T([&] { win<512, 16><<<g, 512>>>(pf, R, sink); });
            printf("rows %6lld R %5lld: T512x8 %7.1f us %6.0f GB/s | T256x8 %7.1f us | T512x16 %7.1f us\n", rows, R, a,
                   rows * 4096.0 / a / 1e3, b, c);
        }

    printf("\nTMA ring, NST 3, 256 threads (write flush): L2 hint none vs evict_first\n");
    cudaFuncSetAttribute(tma_ring<3, 256, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 32768 + 64);
    cudaFuncSetAttribute(tma_ring<3, 256, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, 3 * 32768 + 64);
    for (long long rows : {131072LL, 32768LL, 8192LL}) {
        const long long R = rows >= 32768 ? 128 : 32;
        const unsigned g = (unsigned)(rows / R);
        const double a = T([&] { tma_ring<3, 256, false><<<g, 256, 3 * 32768 + 64>>>(pf, R, sink); });
        const double b = T([&] { tma_ring<3, 256, true><<<g, 256, 3 * 32768 + 64>>>(pf, R, sink); });
        printf("rows %6lld R %4lld: no hint %7.1f us %6.0f GB/s | evict_first %7.1f us %6.0f GB/s\n", rows, R, a,
               rows * 4096.0 / a / 1e3, b, rows * 4096.0 / b / 1e3);
    }
    printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
