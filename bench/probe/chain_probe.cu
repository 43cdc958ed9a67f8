// chain_probe.cu -- what the index chain costs a bare read (issue 16).
// Every exact, general implementation of the call must, before its first
// state-row load, read the boundary token index, then that token's request
// and position, then the request's block-table entry: three dependent loads
// from index arrays that the SPEC 6 flush has left in DRAM.  rd_chain<D> is
// the floor's read (tools/read_floor.cuh) whose every CTA first walks D
// dependent loads through cold arrays and starts its grid-stride range only
// after them; against the plain floor (D = 0) in the same run, timed as
// SPEC 6 times a call (L2 flushed by a write of 4 x L2, events, median).
//
// With `join` it times, after the chain, the least join of a window's parts
// (a window = 512 KiB of the read, as at C = 128), each form with no
// arithmetic, records or checks: rd_chain_flag + join_kernel (every CTA
// stores a flag, a PDL kernel of one 128-thread CTA per output polls its 8
// producers, stores 584 bytes, waits for the read's end and counts itself:
// the library's finisher), rd_chain_ticket (fence, ticket, the last producer
// stores), rd_window (one CTA per window, no join), rd_split (8 CTAs per
// window: no join, one cluster barrier, or the finaliser's two cluster
// exchanges), the last two also with 60 FMAs per 16 bytes loaded (about the
// exact arithmetic's issue).  `window` times rd_window and rd_split with the
// FMAs alone.
// Build: nvcc -O3 -arch=sm_90 chain_probe.cu -o chain_probe
#include "../../tools/read_floor.cuh"
#include "probe_common.cuh"
#include <cstring>
#include <cooperative_groups.h>

#define LEVEL_INTS (1 << 22) /* 16 MiB between the levels' arrays */

/* D dependent loads through the index arrays, starting from the CTA's index
 * (every value < 1024, so the result's bit 30 is 0: a zero offset the
 * compiler cannot drop). */
template <int D>
__device__ __forceinline__ int chain_walk(const int *idx) {
    int j = (int)(blockIdx.x & 1023);
#pragma unroll
    for (int k = 0; k < D; k++) j = idx[(size_t)k * LEVEL_INTS + j];
    return j >> 30;
}

/* The floor's grid-stride read of n float4 from element start. */
__device__ __forceinline__ float grid_read(const float4 *p, size_t n, size_t start) {
    float acc = 0.f;
    for (size_t i = start; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float4 v = __ldcs(p + i);
        acc += v.x + v.y + v.z + v.w;
    }
    return acc;
}

template <int D>
__global__ void rd_chain(const float4 *p, size_t n, const int *idx, float *sink) {
    const float acc = grid_read(p, n, blockIdx.x * (size_t)blockDim.x + threadIdx.x + chain_walk<D>(idx));
    if (acc == 1234.5f) *sink = acc;
}

template <int D>
__global__ void rd_chain_flag(const float4 *p, size_t n, const int *idx, float *sink, unsigned *flag, unsigned ep) {
    asm volatile("griddepcontrol.launch_dependents;");
    const float acc = grid_read(p, n, blockIdx.x * (size_t)blockDim.x + threadIdx.x + chain_walk<D>(idx));
    if (acc == 1234.5f) *sink = acc;
    __syncthreads();
    if (threadIdx.x == 0) asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(flag + blockIdx.x), "r"(ep) : "memory");
}

/* One CTA of 128 threads per output: its 8 producers' flags, then 584 bytes. */
__global__ void join_kernel(const unsigned *flag, unsigned nprod, unsigned ep, unsigned *out, unsigned long long *cnt) {
    const unsigned o = blockIdx.x, t = threadIdx.x;
    int ready = 0;
    do {
        unsigned f = ep;
        if (t < 8) asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(f) : "l"(flag + (8 * o + t) % nprod) : "memory");
        ready = __syncthreads_and(f == ep);
        if (!ready) __nanosleep(128);
    } while (!ready);
    out[o * 146 + t] = ep ^ t;
    if (t < 18) out[o * 146 + 128 + t] = ep;
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (t == 0) atomicAdd(cnt, 1ull);
}

/* Split windows joined by a ticket in the same kernel: producer b feeds
 * output b % nout; after its range it fences and takes a ticket, and the
 * last producer of an output stores the 584 bytes and resets the count. */
template <int D>
__global__ void rd_chain_ticket(const float4 *p, size_t n, const int *idx, float *sink, unsigned *cnt, unsigned nout,
                                unsigned *out) {
    const float acc = grid_read(p, n, blockIdx.x * (size_t)blockDim.x + threadIdx.x + chain_walk<D>(idx));
    if (acc == 1234.5f) *sink = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned o = blockIdx.x % nout, np = gridDim.x / nout + (o < gridDim.x % nout);
        __threadfence();
        if (atomicAdd(cnt + o, 1u) == np - 1) {
            for (int t = 0; t < 146; t++) out[o * 146 + t] = t;
            cnt[o] = 0;
        }
    }
}

/* A dependent FMA chains per float4 (A / 4 in each of 4 chains): about the
 * exact segment arithmetic's issue cost at A = 60 (~30 instructions per
 * value-score pair, two pairs per 16 bytes). */
template <int A>
__device__ __forceinline__ float arith(float4 v) {
#pragma unroll
    for (int k = 0; k < A / 4; k++)
        v.x = fmaf(v.x, 1.0001f, 0.5f), v.y = fmaf(v.y, 1.0001f, 0.5f), v.z = fmaf(v.z, 1.0001f, 0.5f),
        v.w = fmaf(v.w, 1.0001f, 0.5f);
    return v.x + v.y + v.z + v.w;
}

/* A CTA's contiguous part: NB batches of 8 loads of 16 bytes a thread (the
 * CTA's T threads side by side), A FMAs per load. */
template <int A, int NB, int T>
__device__ __forceinline__ float part_read(const float4 *w) {
    float acc = 0.f;
    for (int b = 0; b < NB; b++) {
        float4 v[8];
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = __ldcs(w + (b * 8 + i) * T);
#pragma unroll
        for (int i = 0; i < 8; i++) acc += A ? arith<A>(v[i]) : v[i].x + v[i].y + v[i].z + v[i].w;
    }
    return acc;
}

/* One CTA per window (512 KiB, 512 threads, 64 loads of 16 bytes each in
 * batches of 8), the chain first, the 584 bytes last: no join. */
template <int A>
__global__ void __launch_bounds__(512, 4) rd_window(const float4 *p, const int *idx, float *sink, unsigned *out) {
    const float acc = part_read<A, 8, 512>(p + (size_t)blockIdx.x * 32768 + threadIdx.x + chain_walk<3>(idx));
    if (acc == 1234.5f) *sink = acc;
    __syncthreads();
    if (threadIdx.x < 146) out[blockIdx.x * 146 + threadIdx.x] = threadIdx.x;
}

/* A window split over 8 CTAs (64 KiB each: 256 threads, 16 loads of 16
 * bytes in two batches, A FMAs per load), the chain first in each.
 * CL = 0: no join (rank 0 stores the 584 bytes); 1: the 8 CTAs one cluster,
 * joined by one cluster barrier, rank 0 stores; 2: the join a finaliser
 * needs -- each rank's sum to every rank through distributed shared memory,
 * a barrier, each rank stores its 73 bytes, its flag to rank 0, a second
 * barrier, then rank 0 stores the flags' word. */
template <int CL, int A>
__global__ void __launch_bounds__(256, 4) rd_split(const float4 *p, const int *idx, float *sink, unsigned *out) {
    __shared__ float sums[8];
    __shared__ int flags[8];
    const float acc = part_read<A, 2, 256>(p + (size_t)blockIdx.x * 4096 + threadIdx.x + chain_walk<3>(idx));
    if (acc == 1234.5f) *sink = acc;
    const unsigned o = blockIdx.x >> 3, r = blockIdx.x & 7, t = threadIdx.x;
    if (CL == 2) {
        namespace cg = cooperative_groups;
        cg::cluster_group cl = cg::this_cluster();
        if (t < 8) *cl.map_shared_rank(&sums[r], t) = acc;
        cl.sync();
        float ss = 0.f;
        for (int k = 0; k < 8; k++) ss += sums[k];
        if (t < 18) out[o * 146 + 18 * r + t] = (unsigned)ss;
        if (t == 0) *cl.map_shared_rank(&flags[r], 0) = ss == 1234.5f;
        cl.sync();
        if (r == 0 && t == 0) out[o * 146 + 144] = flags[0] | flags[7];
        return;
    }
    if (CL == 1) {
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    } else {
        __syncthreads();
    }
    if (r == 0 && t < 146) out[o * 146 + t] = t;
}

int main(int argc, char **argv) {
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
    if (argc > 1 && !strcmp(argv[1], "window")) { /* the window and split forms with the arithmetic */
        unsigned *out;
        CK(cudaMalloc(&out, (size_t)1024 * 146 * 4));
        printf("one CTA per 512 KiB window (no join) against 8 CTAs of 64 KiB per window (no join), with 60 FMAs per\n"
               "16 bytes, after the chain (write flush, median of 100; x = against the plain floor in the same round)\n");
        printf("%6s %5s %8s %8s %8s %7s %7s\n", "MB", "round", "D=0 us", "window+a", "split+a", "x3wa", "x3sa");
        for (size_t b : {(size_t)32 << 20, (size_t)128 << 20, (size_t)256 << 20, big})
            for (int round = 0; round < 2; round++) {
                const unsigned nout = (unsigned)(b >> 19);
                const double t0 = T([&] { read_kernel<<<g, 512>>>((const float4 *)p, b / 16, sink); });
                const double twa = T([&] { rd_window<60><<<nout, 512>>>((const float4 *)p, idx, sink, out); });
                const double tsa = T([&] { rd_split<0, 60><<<nout * 8, 256>>>((const float4 *)p, idx, sink, out); });
                printf("%6zu %5d %8.1f %8.1f %8.1f %7.3f %7.3f\n", b >> 20, round, t0, twa, tsa, twa / t0, tsa / t0);
            }
        CK(cudaDeviceSynchronize());
        CK(cudaGetLastError());
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "join")) {
        unsigned *flag, *out, ep = 0;
        unsigned long long *cnt;
        CK(cudaMalloc(&flag, g * 4));
        CK(cudaMemset(flag, 0, g * 4));
        CK(cudaMalloc(&out, (size_t)1024 * 146 * 4));
        CK(cudaMemset(out, 0, (size_t)1024 * 146 * 4));
        CK(cudaMalloc(&cnt, 8));
        auto joined = [&](auto prod, size_t n, unsigned nout) {
            ep++;
            prod<<<g, 512>>>((const float4 *)p, n, idx, sink, flag, ep);
            cudaLaunchConfig_t c = {};
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
            at[0].val.programmaticStreamSerializationAllowed = 1;
            c.gridDim = nout, c.blockDim = 128, c.attrs = at, c.numAttrs = 1;
            cudaLaunchKernelEx(&c, join_kernel, (const unsigned *)flag, g, ep, out, cnt);
        };
        unsigned *cnt32;
        CK(cudaMalloc(&cnt32, 4096 * 4));
        CK(cudaMemset(cnt32, 0, 4096 * 4));
        printf("the floor's read, D dependent loads first, then the least join of a 512 KiB output's parts\n"
               "(write flush, median of 100; x = against the plain floor D = 0 in the same round):\n"
               "  x3  the chain alone;  x0j / x3j  + flags and a PDL kernel of one 128-thread CTA per output that\n"
               "  polls its 8 producers and stores 584 bytes;  x3t  + a ticket per output, the last producer stores;\n"
               "  x3w  one 512-thread CTA per output window, no join;  x3s  8 CTAs of 64 KiB per window, no join;\n"
               "  x3c  the same 8 CTAs as one cluster, joined by a cluster barrier;  +a: with 60 FMAs per 16 bytes\n"
               "  (about the exact arithmetic's issue);  x3fa  the cluster with the finaliser's two exchanges\n");
        printf("%6s %5s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %7s %7s %7s %7s %7s %7s %7s %7s %7s %7s\n", "MB",
               "round", "D=0 us", "D=3", "D=0+join", "D=3+join", "ticket", "window", "split", "cluster", "split+a",
               "clus+a", "fin+a", "x3", "x0j", "x3j", "x3t", "x3w", "x3s", "x3c", "x3sa", "x3ca", "x3fa");
        for (size_t b : {(size_t)32 << 20, (size_t)128 << 20, (size_t)256 << 20, big})
            for (int round = 0; round < 2; round++) {
                const size_t n = b / 16;
                const unsigned nout = (unsigned)(b >> 19);
                const double t0 = T([&] { read_kernel<<<g, 512>>>((const float4 *)p, n, sink); });
                const double t3 = T([&] { rd_chain<3><<<g, 512>>>((const float4 *)p, n, idx, sink); });
                const double t0j = T([&] { joined(rd_chain_flag<0>, n, nout); });
                const double t3j = T([&] { joined(rd_chain_flag<3>, n, nout); });
                const double t3t = T([&] { rd_chain_ticket<3><<<g, 512>>>((const float4 *)p, n, idx, sink, cnt32, nout, out); });
                const double t3w = T([&] { rd_window<0><<<nout, 512>>>((const float4 *)p, idx, sink, out); });
                auto clu = [&](auto k) {
                    cudaLaunchConfig_t c = {};
                    cudaLaunchAttribute at[1];
                    at[0].id = cudaLaunchAttributeClusterDimension;
                    at[0].val.clusterDim.x = 8, at[0].val.clusterDim.y = 1, at[0].val.clusterDim.z = 1;
                    c.gridDim = nout * 8, c.blockDim = 256, c.attrs = at, c.numAttrs = 1;
                    cudaLaunchKernelEx(&c, k, (const float4 *)p, (const int *)idx, sink, out);
                };
                const double t3s = T([&] { rd_split<0, 0><<<nout * 8, 256>>>((const float4 *)p, idx, sink, out); });
                const double t3c = T([&] { clu(rd_split<1, 0>); });
                const double t3sa = T([&] { rd_split<0, 60><<<nout * 8, 256>>>((const float4 *)p, idx, sink, out); });
                const double t3ca = T([&] { clu(rd_split<1, 60>); });
                const double t3fa = T([&] { clu(rd_split<2, 60>); });
                printf("%6zu %5d %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %8.1f %7.3f %7.3f %7.3f %7.3f "
                       "%7.3f %7.3f %7.3f %7.3f %7.3f %7.3f\n",
                       b >> 20, round, t0, t3, t0j, t3j, t3t, t3w, t3s, t3c, t3sa, t3ca, t3fa, t3 / t0, t0j / t0,
                       t3j / t0, t3t / t0, t3w / t0, t3s / t0, t3c / t0, t3sa / t0, t3ca / t0, t3fa / t0);
            }
        CK(cudaDeviceSynchronize());
        CK(cudaGetLastError());
        return 0;
    }
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
