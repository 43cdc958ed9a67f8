/*
 * probe_common.cuh -- what the probes share: a CUDA error check for main(),
 * the SPEC 6 timing loop (the L2 flushed before every call, device events
 * around it, the median) and the per-warp ring's slice copy.  Not part of
 * the library.
 */
#ifndef KVC_PROBE_COMMON_CUH
#define KVC_PROBE_COMMON_CUH
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

/* In main(): print the failing call and return 1. */
#define CK(x)                                                                                       \
    do {                                                                                            \
        cudaError_t e_ = (x);                                                                       \
        if (e_ != cudaSuccess) {                                                                    \
            printf("CUDA %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);               \
            return 1;                                                                               \
        }                                                                                           \
    } while (0)

/* Median time in us of launch() over rep calls (after 3 untimed ones),
 * flush(i) before call i. */
template <class Flush, class F>
static double probe_median_us(Flush flush, F launch, cudaEvent_t e0, cudaEvent_t e1, int rep) {
    std::vector<float> t;
    for (int i = -3; i < rep; i++) {
        flush(i);
        cudaEventRecord(e0);
        launch();
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i >= 0) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2] * 1e3;
}

__device__ __forceinline__ unsigned su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

/* Wait for the phase of parity ph of mbarrier bar. */
__device__ __forceinline__ void probe_wait(unsigned long long *bar, unsigned ph) {
    asm volatile("{\n .reg .pred P1;\n W_%=:\n mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n @!P1 bra W_%=;\n}" ::"r"(
                     su32(bar)),
                 "r"(ph)
                 : "memory");
}

/* Lane 0: an arrival on mbarrier bar that expects `bytes` of copies. */
__device__ __forceinline__ void probe_expect(unsigned long long *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(su32(bar)), "r"(bytes) : "memory");
}
/* One bulk copy of `bytes` from global src to shared dst, completing on bar. */
__device__ __forceinline__ void probe_copy(void *dst, const void *src, unsigned bytes, unsigned long long *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     su32(dst)),
                 "l"(src), "r"(bytes), "r"(su32(bar))
                 : "memory");
}

/* Warp w of `warps` (lane l): its ns stages of 1024 floats in dynamic shared
 * memory sm ([warps][ns] stages, then [warps][ns] mbarriers), the barriers
 * initialised. */
__device__ __forceinline__ void probe_warp_ring(unsigned char *sm, int warps, int ns, int w, int l, float **stg,
                                                unsigned long long **bar) {
    *stg = (float *)sm + w * ns * 1024;
    *bar = (unsigned long long *)(sm + warps * ns * 4096) + w * ns;
    if (l == 0)
        for (int s = 0; s < ns; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(su32(*bar + s)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncwarp();
}

/* Warp (lane l): segment q of its ring of ns stages into v (values) and c
 * (scores), 2 dims per lane; on return the stage may be refilled. */
__device__ __forceinline__ void probe_take(const float *stg, unsigned long long *bar, unsigned q, int ns, int l,
                                           float2 v[8], float2 c[8]) {
    const int s = (int)(q % ns);
    probe_wait(bar + s, (q / ns) & 1u);
    const float2 *sv = (const float2 *)(stg + s * 1024);
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = sv[i * 32 + l], c[i] = sv[256 + i * 32 + l];
    __syncwarp();
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* Warp (lane l): stage s of stg (8 rows x (64 values, 64 scores) of slice sl)
 * <- page `page` of sc ([pages][8 rows][1024 floats]), 16 lanes x one
 * 256-byte bulk copy, completing on bar[s]. */
__device__ __forceinline__ void issue(const float *sc, float *stg, unsigned long long *bar, int s, int page, int sl,
                                      int l) {
    if (l == 0) probe_expect(bar + s, 4096);
    __syncwarp();
    if (l < 16) {
        const int i = l & 7, kind = l >> 3;
        probe_copy(stg + s * 1024 + kind * 512 + i * 64, sc + (size_t)page * 8192 + i * 1024 + kind * 512 + sl * 64,
                   256, bar + s);
    }
}
#endif
