// bound_probe.cu -- how close to the read floor can any kernel come that must
// first follow kvcompress's index chain?  (issue 16; not part of the library)
//
// A call cannot ask for a state byte before it knows where the byte is:
// boundary index -> (request, position) of that token -> block-table entry ->
// rows.  This probe times kernels that do exactly that and then only read
// the window rows (no arithmetic: the rows are summed), against the bare
// read of SPEC 6 (tools/read_floor.cuh) of the same bytes, same flush, same
// loop.  The cheapest chained variant of a case is a lower bound, for these
// read methods, on any implementation of it, exact or not.
//
// Variants (block size 8: one page per 8-row segment; K segments per item):
//   T<chain>/K : per-warp TMA ring (the library's ring kernel's data path):
//                a warp streams (output, 64-dim slice, K-segment chunk)
//                items, 16 lanes x one 256-byte cp.async.bulk per segment
//                into 2 stages of 4 KiB, the next item's chain one level per
//                segment; 16 warps per SM.
//   L<chain>/K : one 256-thread CTA per (output, K-segment chunk), every
//                16-byte load of the chunk issued at once (K x 8 per thread),
//                as many CTAs per SM as fit (the engines' structure).
//   B<chain>/K : one warp per (output, K-segment chunk): K bulk copies of
//                whole 32 KiB pages into shared memory, then the wait (the
//                fewest instructions any read can take).
//   P<n|e><NS>/K: one 512-thread CTA per (output, K-segment chunk), NS
//                whole-page stages; n: no arithmetic, e: SPEC 3's exact
//                segment arithmetic on every dim (no tree: a running merge).
//   L3e<t>/K  : one 256 K-thread CTA per (output, K-segment chunk), lane =
//                one segment, its 16 loads at once, then SPEC 3's exact
//                segment arithmetic, lanes merged in shared memory; t = 0: c
//                kept (no tail), t = 1: chunk states, ticket and the last
//                CTA's tree merge (the library's chunk tail, no finaliser).
//                L3e2: the tail as release-stored tags per segment and merger
//                CTAs at the end of the grid (no ticket, no fence in the
//                segment CTAs).  Run with the argument `exact` (only these
//                and references).  L3e3: the states stored plainly and
//                merged by a second kernel (one CTA per output).
//   Sx<t>      : one 256-thread CTA per (output, 64-dim slice), warp = two
//                segments, all loads at once; the warps' states merged in
//                shared memory; t = 1: c and its sum of squares to global
//                memory, a ticket per output, the last slice CTA scales c;
//                t = 2: the 8 slice CTAs of an output are a cluster: partial
//                sums through distributed shared memory, one cluster barrier,
//                each slice scales its own c, non-finite flags to rank 0;
//                t = 3 (SxFp, argument `join`): c and its sums to global
//                memory and nothing else, a second kernel (sxf, started by
//                programmatic dependent launch) scales: no CTA waits.
//   W2/8       : one cluster of two 512-thread CTAs per output (C = 128),
//                a CTA = half the window: one segment in registers, seven by
//                page bulk copies into shared memory, all at once; the
//                halves joined through distributed shared memory.
//   chain 0: the pages are computed (no index loads): the read method alone;
//   chain 3: the library's three dependent index loads first.
// Build: nvcc -O3 -arch=sm_90a -std=c++17 -fmad=false -Isrc/core bench/probe/bound_probe.cu -o bound_probe
#include <algorithm>
#include <cstring>
#include <cstdio>
#include <random>
#include <vector>
#include <cuda_runtime.h>

#include "kvc_canon.h"
#include "../../tools/read_floor.cuh"
#include "probe_common.cuh"


struct Prob {
    const float *sc;         // [pages][8 rows][1024]: 512 values, 512 scores
    const int *table;        // [reqs][tstride] page ids
    const long long *bidx;   // [nout] boundary token of each output
    const int *t2r;          // [tokens] request of each token
    const long long *pos;    // [tokens] position of each token
    int tstride, C, S, K;    // window C rows = S segments; K segments per item
    int nout;
    float *out;              // one float per (item, lane): keeps the loads
    float *ws;               // ldge with a tail: [nout][S / K][3][512] chunk states
    unsigned *tk;            // ldge with a tail: [nout] tickets (zeroed before each call)
};



/* The library's index chain for chunk ch (K segments) of output o: boundary
 * token -> its request and position -> the block-table entry of the chunk's
 * first segment (three dependent loads). */
__device__ __forceinline__ const int *chunk_row(const Prob &P, int o, int ch, int K) {
    const long long b = __ldg(P.bidx + o);
    const int r = __ldg(P.t2r + b);
    const long long p = __ldg(P.pos + b);
    return P.table + (size_t)r * P.tstride + (p - P.C + 1) / 8 + ch * K;
}

/* The next item's chain, one level per call (lvl 0..2); chain 0: one step. */
template <int CHAIN>
struct chain_state {
    int lvl, o, ch;
    long long b, p;
    int r, pg0, pg1; /* lane l: the pages of segments l and 32 + l of the item */
    __device__ __forceinline__ void start(int o_, int ch_) { lvl = 0, o = o_, ch = ch_; }
    __device__ __forceinline__ bool done() const { return lvl >= (CHAIN ? 3 : 1); }
    __device__ __forceinline__ void step(const Prob &P, int l) {
        if (done()) return;
        if (!CHAIN) {
            pg0 = o * P.S + ch * P.K + l;
            pg1 = pg0 + 32;
        } else if (lvl == 0) b = __ldg(P.bidx + o);
        else if (lvl == 1) r = __ldg(P.t2r + b), p = __ldg(P.pos + b);
        else {
            const int *row = P.table + (size_t)r * P.tstride + (p - P.C + 1) / 8 + ch * P.K;
            pg0 = l < P.K ? __ldg(row + l) : 0;
            pg1 = l + 32 < P.K ? __ldg(row + 32 + l) : 0;
        }
        lvl++;
    }
};

template <int CHAIN, int WARPS>
__global__ __launch_bounds__(WARPS * 32, 1) void ring(Prob P) {
    constexpr int NS = 2;
    extern __shared__ __align__(128) unsigned char sm[];
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    float *stg;
    unsigned long long *bar;
    probe_warp_ring(sm, WARPS, NS, w, l, &stg, &bar);
    const int nch = P.S / P.K, nitems = P.nout * nch * 8, TW = gridDim.x * WARPS;
    int it = w * gridDim.x + blockIdx.x;
    if (it >= nitems) return;
    chain_state<CHAIN> cs;
    cs.start(it / (8 * nch), (it / 8) % nch);
    while (!cs.done()) cs.step(P, l);
    int pg0 = cs.pg0, pg1 = cs.pg1, sl = it & 7;
    auto page = [&](int a0, int a1, int j) { return j < 32 ? __shfl_sync(~0u, a0, j) : __shfl_sync(~0u, a1, j - 32); };
    unsigned q = 0;
    for (int s = 0; s < NS; s++) issue(P.sc, stg, bar, s, page(pg0, pg1, s), sl, l); /* K >= NS */
    for (;;) {
        const int itn = it + TW;
        const bool hasn = itn < nitems;
        const int sln = itn & 7;
        if (hasn) cs.start(itn / (8 * nch), (itn / 8) % nch);
        float acc = 0.f;
        for (int j = 0; j < P.K; j++) {
            if (hasn) cs.step(P, l);
            const int s = (int)(q % NS);
            float2 v[8], c[8];
            probe_take(stg, bar, q, NS, l, v, c);
            q++;
            const int jj = j + NS;
            if (jj < P.K) issue(P.sc, stg, bar, s, page(pg0, pg1, jj), sl, l);
            else if (hasn) { /* into the next item: its chain must be done now */
                while (!cs.done()) cs.step(P, l);
                issue(P.sc, stg, bar, s, page(cs.pg0, cs.pg1, jj - P.K), sln, l);
            }
#pragma unroll
            for (int i = 0; i < 8; i++) acc += v[i].x + v[i].y + c[i].x + c[i].y;
        }
        if (acc == 1234.5f) P.out[(size_t)it * 32 + l] = acc;
        if (!hasn) break;
        it = itn, sl = sln, pg0 = cs.pg0, pg1 = cs.pg1;
    }
}

/* One CTA per (output, chunk of K segments): every load first. */
template <int CHAIN, int K>
__global__ __launch_bounds__(256) void ldg(Prob P) {
    const int nch = P.S / K, o = blockIdx.x / nch, ch = blockIdx.x % nch, t = threadIdx.x;
    int pg[K];
    if (CHAIN) {
        const int *row = chunk_row(P, o, ch, K);
#pragma unroll
        for (int j = 0; j < K; j++) pg[j] = __ldg(row + j);
    } else {
#pragma unroll
        for (int j = 0; j < K; j++) pg[j] = o * P.S + ch * K + j;
    }
    float4 v[K * 8];
#pragma unroll
    for (int j = 0; j < K; j++)
#pragma unroll
        for (int i = 0; i < 8; i++) { /* volatile: every load issued before the first add */
            const float4 *a = (const float4 *)(P.sc + (size_t)pg[j] * 8192) + i * 256 + t;
            float4 &x = v[j * 8 + i];
            asm volatile("ld.global.cs.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w) : "l"(a));
        }
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < K * 8; i++) acc += v[i].x + v[i].y + v[i].z + v[i].w;
    if (acc == 1234.5f) P.out[(size_t)blockIdx.x * 256 + t] = acc;
}

/* The exact segment state of 2 dims from 8 rows (SPEC 3). */
__device__ __forceinline__ void seg_state2(const float2 v[8], const float2 c[8], float m[2], float d[2], float n[2]) {
    m[0] = c[0].x, m[1] = c[0].y;
#pragma unroll
    for (int i = 1; i < 8; i++) m[0] = kvc_max(m[0], c[i].x), m[1] = kvc_max(m[1], c[i].y);
    d[0] = d[1] = n[0] = n[1] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        kvc_seg_step(m[0], c[i].x, v[i].x, &d[0], &n[0]);
        kvc_seg_step(m[1], c[i].y, v[i].y, &d[1], &n[1]);
    }
    kvc_seg_close(m[0], &d[0], &n[0]);
    kvc_seg_close(m[1], &d[1], &n[1]);
}

/* The S segment states of output o (records [S][3][512] at ws, thread q:
 * dims 2q, 2q+1) merged in tree order, 8 at a time; c to out. */
__device__ __forceinline__ void merge_states(const Prob &P, const float *ws, int nst, int o, int q) {
    for (int j = 0; j < 2; j++) { /* one dim at a time: 8 states in 24 registers */
        float M = 0.f, D = 0.f, N = 0.f;
        for (int k0 = 0; k0 < nst; k0 += 8) {
            const int nk = nst - k0 < 8 ? nst - k0 : 8;
            float a[8][3];
#pragma unroll
            for (int k = 0; k < 8; k++)
                if (k < nk) {
                    const float *cs = ws + (k0 + k) * 1536 + 2 * q + j;
                    a[k][0] = __ldcg(cs), a[k][1] = __ldcg(cs + 512), a[k][2] = __ldcg(cs + 1024);
                }
#pragma unroll
            for (int w = 1; w < 8; w *= 2)
#pragma unroll
                for (int k = 0; k + w < 8; k += 2 * w)
                    if (k + w < nk) kvc_merge(&a[k][0], &a[k][1], &a[k][2], a[k + w][0], a[k + w][1], a[k + w][2]);
            if (k0 == 0) M = a[0][0], D = a[0][1], N = a[0][2];
            else kvc_merge(&M, &D, &N, a[0][0], a[0][1], a[0][2]);
        }
        P.out[(size_t)o * 512 + 2 * q + j] = KVC_DIV(N, D);
    }
}

/* Page pg's segment state of dims 2q, 2q + 1: its 16 loads at once, then
 * SPEC 3's arithmetic. */
__device__ __forceinline__ void page_state2(const Prob &P, int pg, int q, float m[2], float d[2], float n[2]) {
    const float2 *row = (const float2 *)(P.sc + (size_t)pg * 8192);
    float2 v[8], c[8];
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = __ldcs(row + i * 512 + q), c[i] = __ldcs(row + i * 512 + 256 + q);
    seg_state2(v, c, m, d, n);
}

/* One CTA of 256 K threads per (output, K-segment chunk), lane l of 256
 * threads = segment l of the chunk: thread q loads dims 2q, 2q+1 of its 8
 * rows (16 8-byte loads at once), then SPEC 3's segment arithmetic; the K
 * lane states merge in tree order through shared memory.  TAIL 0: c kept;
 * TAIL 1: the chunk state to global memory, a ticket per output, and the
 * output's last CTA merges the S / K chunk states in tree order (8 at a time)
 * and writes c (the library's chunk tail without its finaliser). */
template <int K, int TAIL, int MINB>
__global__ __launch_bounds__(256 * K, MINB) void ldge(Prob P) {
    __shared__ float lst[K > 1 ? K / 2 : 1][6][256];
    __shared__ unsigned ticket;
    const int nch = P.S / K, o = blockIdx.x / nch, ch = blockIdx.x % nch, t = threadIdx.x, q = t & 255, l = t >> 8;
    const int pg = __ldg(chunk_row(P, o, ch, K) + l);
    float m[2], d[2], n[2];
    page_state2(P, pg, q, m, d, n);
#pragma unroll
    for (int w = 1; w < K; w *= 2) {
        float *x = &lst[l / (2 * w)][0][0];
        if (l % (2 * w) == w)
            for (int j = 0; j < 2; j++) x[j * 256 + q] = m[j], x[(2 + j) * 256 + q] = d[j], x[(4 + j) * 256 + q] = n[j];
        __syncthreads();
        if (l % (2 * w) == 0)
            for (int j = 0; j < 2; j++) kvc_merge(&m[j], &d[j], &n[j], x[j * 256 + q], x[(2 + j) * 256 + q], x[(4 + j) * 256 + q]);
        __syncthreads();
    }
    if (!TAIL) {
        const float x = KVC_DIV(n[0], d[0]) + KVC_DIV(n[1], d[1]);
        if (l == 0 && x == 1234.5f) P.out[(size_t)blockIdx.x * 256 + q] = x;
        return;
    }
    float *ws = P.ws + (size_t)o * nch * 1536;
    if (l == 0)
        for (int j = 0; j < 2; j++) {
            float *cs = ws + ch * 1536 + 2 * q + j;
            cs[0] = m[j], cs[512] = d[j], cs[1024] = n[j];
        }
    __threadfence();
    __syncthreads();
    if (t == 0) ticket = atomicAdd(P.tk + o, 1u);
    __syncthreads();
    if (ticket != (unsigned)nch - 1 || l != 0) return;
    __threadfence();
    merge_states(P, ws, nch, o, q);
}

/* Segment ch of output o (one page), thread q = dims 2q, 2q + 1: its 16
 * loads at once, SPEC 3's segment state, stored plainly at record
 * o S + ch of P.ws ([3][512] floats). */
__device__ __forceinline__ void seg_state_store(const Prob &P, int o, int ch, int q) {
    const int pg = __ldg(chunk_row(P, o, ch, 1));
    float m[2], d[2], n[2];
    page_state2(P, pg, q, m, d, n);
    float *rec = P.ws + ((size_t)o * P.S + ch) * 1536 + 2 * q;
    for (int j = 0; j < 2; j++) rec[j] = m[j], rec[512 + j] = d[j], rec[1024 + j] = n[j];
}

/* L3e2: L3e0/1 whose CTAs publish their segment state and leave at once: the
 * 6 state floats of each thread, then its tag word (the call's epoch) by a
 * release store, no ticket.  CTAs nout S .. + M - 1 of the grid (after every
 * segment CTA, at most one per SM, so that they cannot crowd the segment
 * CTAs out) are mergers: merger m takes outputs m, m + M, ..., waits for
 * each segment's tags (acquire loads), then merges the S states in tree
 * order and writes c. */
template <int MINB>
__global__ __launch_bounds__(256, MINB) void ldgt(Prob P, unsigned epoch, int M) {
    const int nsegs = P.nout * P.S, q = threadIdx.x;
    if ((int)blockIdx.x < nsegs) {
        const int o = blockIdx.x / P.S, ch = blockIdx.x % P.S;
        seg_state_store(P, o, ch, q);
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(P.tk + (size_t)blockIdx.x * 256 + q), "r"(epoch) : "memory");
        return;
    }
    for (int o = blockIdx.x - nsegs; o < P.nout; o += M) {
        for (int k = 0; k < P.S; k++) {
            const unsigned *tg = P.tk + ((size_t)o * P.S + k) * 256 + q;
            for (;;) {
                unsigned x;
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(x) : "l"(tg) : "memory");
                if (x == epoch) break;
                __nanosleep(200);
            }
        }
        merge_states(P, P.ws + (size_t)o * P.S * 1536, P.S, o, q);
    }
}

/* L3e3: L3e0/1 whose CTAs store their segment state and leave (no fence,
 * no ticket); a second kernel (mrg, one CTA per output) merges the S states
 * in tree order and writes c after the kernel boundary. */
template <int MINB>
__global__ __launch_bounds__(256, MINB) void ldgs(Prob P) {
    const int o = blockIdx.x / P.S, ch = blockIdx.x % P.S, q = threadIdx.x;
    seg_state_store(P, o, ch, q);
}
__global__ __launch_bounds__(256) void mrg(Prob P) {
    merge_states(P, P.ws + (size_t)blockIdx.x * P.S * 1536, P.S, blockIdx.x, threadIdx.x);
}

/* Sx<t>: one 256-thread CTA per (output, 64-dim slice), C = 128: warp w
 * loads its two segments 2w, 2w + 1 of the slice (2 dims per lane, 32 loads
 * at once), reduces them (SPEC 3) and merges them; the 8 warp states merge
 * in tree order through shared memory, giving c of the slice.  t = 0: c
 * kept; t = 1: c (256 B) and its sum of squares to global memory, a ticket
 * per output, and the output's last slice CTA reads the 8 slices' c and
 * sums, applies the RMS scale and writes the 512 results (the finaliser's
 * reads and writes without its quantisation). */
template <int TAIL, int MINB>
__global__ __launch_bounds__(256, MINB) void slx(Prob P) {
    __shared__ float xs[8][6][32];
    if (TAIL == 3) asm volatile("griddepcontrol.launch_dependents;");
    const int o = blockIdx.x >> 3, sl = blockIdx.x & 7, t = threadIdx.x, w = t >> 5, l = t & 31;
    const int *tr = chunk_row(P, o, 0, 0);
    const int pg0 = __ldg(tr + 2 * w), pg1 = __ldg(tr + 2 * w + 1);
    float2 v[2][8], c[2][8];
#pragma unroll
    for (int k = 0; k < 2; k++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float2 *r = (const float2 *)(P.sc + (size_t)(k ? pg1 : pg0) * 8192 + i * 1024) + 32 * sl + l;
            v[k][i] = __ldcs(r), c[k][i] = __ldcs(r + 256);
        }
    float m[2], d[2], n[2], mb[2], db[2], nb[2];
    seg_state2(v[0], c[0], m, d, n);
    seg_state2(v[1], c[1], mb, db, nb);
    for (int j = 0; j < 2; j++) kvc_merge(&m[j], &d[j], &n[j], mb[j], db[j], nb[j]);
#pragma unroll
    for (int lv = 1; lv < 8; lv *= 2) {
        if (w % (2 * lv) == lv)
            for (int j = 0; j < 2; j++) xs[w][j][l] = m[j], xs[w][2 + j][l] = d[j], xs[w][4 + j][l] = n[j];
        __syncthreads();
        if (w % (2 * lv) == 0)
            for (int j = 0; j < 2; j++) kvc_merge(&m[j], &d[j], &n[j], xs[w + lv][j][l], xs[w + lv][2 + j][l], xs[w + lv][4 + j][l]);
        __syncthreads();
    }
    if (TAIL == 2) { /* the cluster join: every warp waits at the cluster barriers */
        __shared__ float pss[8];
        __shared__ int pbad[8];
        float c0 = 0.f, c1 = 0.f;
        if (w == 0) {
            c0 = KVC_DIV(n[0], d[0]), c1 = KVC_DIV(n[1], d[1]);
            float ss = KVC_ADD(KVC_MUL(c0, c0), KVC_MUL(c1, c1));
            for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(~0u, ss, k));
            if (l < 8) { /* slice sl's partial sum into every rank's pss[sl] */
                unsigned a = su32(&pss[sl]), ra;
                asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(l));
                asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(ra), "f"(ss) : "memory");
            }
        }
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
        int bad = 0;
        if (w == 0) {
        const float tot = KVC_ADD(KVC_ADD(KVC_ADD(pss[0], pss[1]), KVC_ADD(pss[2], pss[3])),
                                  KVC_ADD(KVC_ADD(pss[4], pss[5]), KVC_ADD(pss[6], pss[7])));
        const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(tot, 0x1p-9f), 1e-6f)));
        const float y0 = KVC_MUL(c0, rr), y1 = KVC_MUL(c1, rr);
        P.out[(size_t)o * 512 + 64 * sl + 2 * l] = y0, P.out[(size_t)o * 512 + 64 * sl + 2 * l + 1] = y1;
        bad = __any_sync(~0u, !(y0 == y0) || !(y1 == y1));
        if (l == 0) { /* the slice's non-finite flag to rank 0, then only rank 0 waits */
            unsigned a = su32(&pbad[sl]), ra;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(0));
            asm volatile("st.shared::cluster.u32 [%0], %1;" ::"r"(ra), "r"(bad) : "memory");
        }
        __syncwarp();
        }
        asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
        if (sl == 0) {
            asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
            int any = 0;
            for (int k = 0; k < 8; k++) any |= pbad[k];
            if (any && t == 0) P.out[(size_t)o * 512] = 0.f;
        }
        return;
    }
    if (w != 0) return;
    const float c0 = KVC_DIV(n[0], d[0]), c1 = KVC_DIV(n[1], d[1]);
    if (!TAIL) {
        if (c0 + c1 == 1234.5f) P.out[(size_t)blockIdx.x * 64 + 2 * l] = c0;
        return;
    }
    float ss = KVC_ADD(KVC_MUL(c0, c0), KVC_MUL(c1, c1));
    for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(~0u, ss, k));
    float *rec = P.ws + (size_t)o * 520;
    rec[64 * sl + 2 * l] = c0, rec[64 * sl + 2 * l + 1] = c1;
    if (l == 0) rec[512 + sl] = ss;
    if (TAIL == 3) return; /* sxf scales after the kernel boundary */
    __threadfence();
    unsigned tk = 0;
    if (l == 0) tk = atomicAdd(P.tk + o, 1u);
    tk = __shfl_sync(~0u, tk, 0);
    if (tk != 7) return;
    __threadfence();
    float s8[8];
    for (int k = 0; k < 8; k++) s8[k] = __ldcg(rec + 512 + k);
    const float tot = KVC_ADD(KVC_ADD(KVC_ADD(s8[0], s8[1]), KVC_ADD(s8[2], s8[3])), KVC_ADD(KVC_ADD(s8[4], s8[5]), KVC_ADD(s8[6], s8[7])));
    const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(tot, 0x1p-9f), 1e-6f)));
    for (int k = 0; k < 16; k++) P.out[(size_t)o * 512 + 32 * k + l] = KVC_MUL(__ldcg(rec + 32 * k + l), rr);
}

/* Sx2: slx with the cluster join (clusters of the 8 slice CTAs of an output). */
/* A launch of `blocks` CTAs of `threads` in clusters of n (at: its attribute). */
static cudaLaunchConfig_t cluster_cfg(int blocks, int threads, size_t smem, unsigned n, cudaLaunchAttribute *at) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    at->id = cudaLaunchAttributeClusterDimension;
    at->val.clusterDim.x = n, at->val.clusterDim.y = at->val.clusterDim.z = 1;
    cfg.attrs = at, cfg.numAttrs = 1;
    return cfg;
}

static void launch_slx2(const Prob &P, int nout) {
    cudaLaunchAttribute at;
    cudaLaunchConfig_t cfg = cluster_cfg(nout * 8, 256, 0, 8, &at);
    static bool told;
    if (!told) {
        int nc = 0;
        cudaOccupancyMaxActiveClusters(&nc, slx<2, 4>, &cfg);
        printf(" [Sx2: %d clusters of 8 resident]", nc);
        told = true;
    }
    cudaLaunchKernelEx(&cfg, slx<2, 4>, P);
}


/* SxFp's second kernel (one CTA per output, after slx<3> by programmatic
 * dependent launch): the RMS scale of the 8 slices' c from their sums. */
__global__ __launch_bounds__(512) void sxf(Prob P) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const int o = blockIdx.x, t = threadIdx.x;
    const float *rec = P.ws + (size_t)o * 520;
    float s8[8];
    for (int k = 0; k < 8; k++) s8[k] = __ldcg(rec + 512 + k);
    const float tot = KVC_ADD(KVC_ADD(KVC_ADD(s8[0], s8[1]), KVC_ADD(s8[2], s8[3])), KVC_ADD(KVC_ADD(s8[4], s8[5]), KVC_ADD(s8[6], s8[7])));
    const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(tot, 0x1p-9f), 1e-6f)));
    P.out[(size_t)o * 512 + t] = KVC_MUL(__ldcg(rec + t), rr);
}
/* SxFp: slx<3> and its scale kernel sxf after a programmatic dependent launch. */
static void launch_slxf(const Prob &P, int nout) {
    slx<3, 4><<<nout * 8, 256>>>(P);
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(nout);
    cfg.blockDim = dim3(512);
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &at, cfg.numAttrs = 1;
    cudaLaunchKernelEx(&cfg, sxf, P);
}

/* One warp per (output, chunk of K segments): K whole-page bulk copies
 * (32 KiB each) into shared memory, then the wait; as many per SM as fit. */
template <int CHAIN, int K>
__global__ __launch_bounds__(32) void bulk(Prob P) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ unsigned long long bar;
    const int nch = P.S / K, o = blockIdx.x / nch, ch = blockIdx.x % nch, l = threadIdx.x;
    if (l == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(su32(&bar)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        probe_expect(&bar, K * 32768);
    }
    __syncwarp();
    if (l < K) {
        const int pg = CHAIN ? __ldg(chunk_row(P, o, ch, K) + l) : o * P.S + ch * K + l;
        probe_copy(sm + l * 32768, P.sc + (size_t)pg * 8192, 32768, &bar);
    }
    probe_wait(&bar, 0);
    const float x = ((const float *)sm)[l * 64 + ch];
    if (x == 1234.5f) P.out[(size_t)blockIdx.x * 32 + l] = x;
}

template <int CHAIN, int K>
static void launch_bulk(const Prob &P) {
    static bool set;
    if (!set) cudaFuncSetAttribute(bulk<CHAIN, K>, cudaFuncAttributeMaxDynamicSharedMemorySize, K * 32768), set = true;
    bulk<CHAIN, K><<<P.nout * (P.S / K), 32, K * 32768>>>(P);
}

/* Thread 0: a whole page (32 KiB) into a stage, completing on bar. */
__device__ __forceinline__ void page_fill(unsigned char *dst, const float *src, unsigned long long *bar) {
    probe_expect(bar, 32768);
    probe_copy(dst, src, 32768, bar);
}

/* One 512-thread CTA per (output, CH-segment chunk): NS stages of one whole
 * page (32 KiB) each, all issued at once after the chain and refilled as the
 * 16 warps finish a page; thread t reduces dim t of each page (MODE 1: the
 * exact SPEC 3 segment step and a running kvc_merge; MODE 0: a sum). */
template <int MODE, int NS>
__global__ __launch_bounds__(512, 1) void pages(Prob P) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ unsigned long long bar[NS];
    __shared__ int pg[64];
    const int CH = P.K, nch = P.S / CH, o = blockIdx.x / nch, ch = blockIdx.x % nch, t = threadIdx.x;
    if (t < 32) {
        const int *row = chunk_row(P, o, ch, CH);
        for (int j = t; j < CH; j += 32) pg[j] = __ldg(row + j);
        __syncwarp();
        if (t == 0) {
            for (int s = 0; s < NS; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(su32(bar + s)));
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            for (int s = 0; s < NS && s < CH; s++) page_fill(sm + s * 32768, P.sc + (size_t)pg[s] * 8192, bar + s);
        }
    }
    __syncthreads();
    float M = 0.f, D = 0.f, N = 0.f;
    for (int j = 0; j < CH; j++) {
        const int s = j % NS;
        const unsigned ph = (j / NS) & 1u;
        probe_wait(bar + s, ph);
        const float *st = (const float *)(sm + s * 32768);
        float v[8], c[8];
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = st[i * 1024 + t], c[i] = st[i * 1024 + 512 + t];
        __syncthreads(); /* every warp has read stage s */
        if (t == 0 && j + NS < CH) {
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            page_fill(sm + s * 32768, P.sc + (size_t)pg[j + NS] * 8192, bar + s);
        }
        if (MODE == 0) {
#pragma unroll
            for (int i = 0; i < 8; i++) N += v[i] + c[i];
        } else {
            float m = c[0];
#pragma unroll
            for (int i = 1; i < 8; i++) m = kvc_max(m, c[i]);
            float d = 0.f, n = 0.f;
#pragma unroll
            for (int i = 0; i < 8; i++) kvc_seg_step(m, c[i], v[i], &d, &n);
            kvc_seg_close(m, &d, &n);
            if (j == 0) M = m, D = d, N = n;
            else kvc_merge(&M, &D, &N, m, d, n);
        }
    }
    const float x = MODE ? KVC_DIV(N, D) : N + M;
    if (x == 1234.5f) P.out[(size_t)blockIdx.x * 512 + t] = x;
}

/* W2 (C = 128): one cluster of 2 CTAs (512 threads, one per SM) per output,
 * rank r = window half r (8 segments, 256 KiB): segment 0 of the half into
 * registers, segments 1-7 by whole-page bulk copies into 224 KiB of shared
 * memory, all issued at once; thread t reduces dim t of each segment as it
 * lands (SPEC 3, binary counter in registers).  Rank 1 leaves its half's
 * state in its shared memory, one cluster barrier, rank 0 reads it
 * (distributed shared memory), merges (left, right), and scales c by the RMS
 * of the 512 dims (block reduction); a second barrier keeps rank 1 alive
 * until then.  The whole 8k case in one wave, the join on chip. */
__global__ __launch_bounds__(512, 1) void w2(Prob P) {
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ unsigned long long bar[7];
    __shared__ float red[16];
    const int o = blockIdx.x >> 1, rank = blockIdx.x & 1, t = threadIdx.x;
    const int *tr = chunk_row(P, o, rank, 8);
    if (t == 0) {
        for (int s = 0; s < 7; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(su32(bar + s)));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (t < 7) page_fill(sm + t * 32768, P.sc + (size_t)__ldg(tr + 1 + t) * 8192, bar + t);
    const float *r0 = P.sc + (size_t)__ldg(tr) * 8192;
    float v[8], c[8];
#pragma unroll
    for (int i = 0; i < 8; i++) v[i] = __ldcs(r0 + i * 1024 + t), c[i] = __ldcs(r0 + i * 1024 + 512 + t);
    float L[3][3], T[3]; /* binary counter: levels 0-2 of (m, d, n) */
    auto seg = [&](const float *vv, const float *cc, float &m, float &d, float &n) {
        m = cc[0];
        for (int i = 1; i < 8; i++) m = kvc_max(m, cc[i]);
        d = n = 0.f;
        for (int i = 0; i < 8; i++) kvc_seg_step(m, cc[i], vv[i], &d, &n);
        kvc_seg_close(m, &d, &n);
    };
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float S[3];
        if (j > 0) {
            probe_wait(bar + j - 1, 0);
            const float *st = (const float *)(sm + (j - 1) * 32768);
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = st[i * 1024 + t], c[i] = st[i * 1024 + 512 + t];
        }
        seg(v, c, S[0], S[1], S[2]);
        bool carry = true; /* segment j closes the subtrees of its trailing one bits */
#pragma unroll
        for (int lv = 0; lv < 3; lv++)
            if (carry) {
                if ((j >> lv) & 1) {
                    kvc_merge(&L[lv][0], &L[lv][1], &L[lv][2], S[0], S[1], S[2]);
                    S[0] = L[lv][0], S[1] = L[lv][1], S[2] = L[lv][2];
                } else {
                    L[lv][0] = S[0], L[lv][1] = S[1], L[lv][2] = S[2];
                    carry = false;
                }
            }
        if (carry) T[0] = S[0], T[1] = S[1], T[2] = S[2];
    }
    float *half = (float *)sm; /* stage 0 (consumed): this half's state [3][512] */
    __syncthreads();
    half[t] = T[0], half[512 + t] = T[1], half[1024 + t] = T[2];
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (rank == 0) {
        unsigned a = su32(half), ra;
        asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(1));
        float mb, db, nb;
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(mb) : "r"(ra + 4 * t));
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(db) : "r"(ra + 4 * (512 + t)));
        asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(nb) : "r"(ra + 4 * (1024 + t)));
        kvc_merge(&T[0], &T[1], &T[2], mb, db, nb);
    }
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    if (rank != 0) return;
    const float cc = KVC_DIV(T[2], T[1]);
    float ss = KVC_MUL(cc, cc);
    for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(~0u, ss, k));
    if ((t & 31) == 0) red[t >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
    for (int k = 0; k < 16; k++) tot = KVC_ADD(tot, red[k]);
    const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(tot, 0x1p-9f), 1e-6f)));
    P.out[(size_t)o * 512 + t] = KVC_MUL(cc, rr);
}
static void launch_w2(const Prob &P, int nout) {
    static bool set;
    if (!set) cudaFuncSetAttribute(w2, cudaFuncAttributeMaxDynamicSharedMemorySize, 7 * 32768), set = true;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t cfg = cluster_cfg(nout * 2, 512, 7 * 32768, 2, &at);
    cudaLaunchKernelEx(&cfg, w2, P);
}

template <int MODE, int NS>
static void launch_pages(const Prob &P) {
    static bool set;
    if (!set)
        cudaFuncSetAttribute(pages<MODE, NS>, cudaFuncAttributeMaxDynamicSharedMemorySize, NS * 32768), set = true;
    pages<MODE, NS><<<P.nout * (P.S / P.K), 512, NS * 32768>>>(P);
}


/* Random state values in [-2, 2) and scores in [-4, 4) (join mode: its bytes are compared). */
__global__ void fill_rand(float *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        const float u = (h >> 8) * 0x1p-24f; /* [0, 1) */
        p[i] = (i & 512) ? 8.f * u - 4.f : 4.f * u - 2.f; /* scores in [-4, 4), values in [-2, 2) */
    }
}

static char *g_flush;
static size_t g_fl;
template <class F>
static double time_us(F launch, cudaEvent_t e0, cudaEvent_t e1, int rep = 50) {
    return probe_median_us([](int i) { cudaMemsetAsync(g_flush, i & 0xFF, g_fl); }, launch, e0, e1, rep);
}

template <int CHAIN>
static void launch_ring(const Prob &P, int sms) {
    constexpr int WARPS = 16;
    const int smem = WARPS * 2 * 4096 + WARPS * 2 * 8;
    static bool set;
    if (!set) cudaFuncSetAttribute(ring<CHAIN, WARPS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem), set = true;
    ring<CHAIN, WARPS><<<sms, WARPS * 32, smem>>>(P);
}

int main(int argc, char **argv) {
    const bool exact_only = argc > 1 && !strcmp(argv[1], "exact"); /* the ldge variants and their references */
    const bool join_only = argc > 1 && !strcmp(argv[1], "join");   /* SxFp and its references (C = 128) */
    int sms = 132, l2 = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    g_fl = (size_t)l2 * 4;
    CK(cudaMalloc(&g_flush, g_fl));
    const int max_tokens = 131072, total_pages = max_tokens / 8;
    float *sc, *out, *sink;
    CK(cudaMalloc(&sc, (size_t)total_pages * 8192 * 4));
    CK(cudaMemset(sc, 0, (size_t)total_pages * 8192 * 4));
    if (join_only) fill_rand<<<4096, 256>>>(sc, (size_t)total_pages * 8192);
    float *out2a;
    CK(cudaMalloc(&out2a, (size_t)max_tokens * 512 * 4));
    CK(cudaMalloc(&out, (size_t)max_tokens * 512 * 4));
    CK(cudaMalloc(&sink, 4));
    float *ws;
    unsigned *tk;
    CK(cudaMalloc(&ws, (size_t)total_pages * 1536 * 4));
    CK(cudaMalloc(&tk, (size_t)total_pages * 1024));
    CK(cudaMemset(tk, 0, (size_t)total_pages * 1024));
    unsigned epoch = 0;
    int *dtab, *dt2r;
    long long *dbidx, *dpos;
    CK(cudaMalloc(&dtab, total_pages * 4));
    CK(cudaMalloc(&dt2r, max_tokens * 4));
    CK(cudaMalloc(&dpos, max_tokens * 8));
    CK(cudaMalloc(&dbidx, max_tokens * 8));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::mt19937 rng(7);
    struct Case { int reqs, tokens; } cases[] = {{1, 8192}, {4, 32768}, {8, 65536}, {8, 131072}};
    printf("x_floor of each variant (T = TMA ring, L = all loads first; chain levels; K segments per item)\n");
    printf("%-7s %-7s %4s %9s |\n", "tokens", "layout", "C", "floor_us");
    for (int layout = 0; layout < 2; layout++)
        for (int C : {128, 512})
            if (!join_only || C == 128)
            for (auto cs : cases) {
                const int per_req = cs.tokens / cs.reqs, ppr = per_req / 8, nout = cs.tokens / C, S = C / 8;
                std::vector<int> tab(cs.reqs * ppr), t2r(cs.tokens);
                std::vector<long long> pos(cs.tokens), bidx(nout);
                for (int i = 0; i < (int)tab.size(); i++) tab[i] = i;
                if (layout) std::shuffle(tab.begin(), tab.end(), rng);
                for (int b = 0; b < cs.tokens; b++) t2r[b] = b / per_req, pos[b] = b % per_req;
                for (int o = 0; o < nout; o++) bidx[o] = (long long)o * C + C - 1;
                CK(cudaMemcpy(dtab, tab.data(), tab.size() * 4, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dt2r, t2r.data(), cs.tokens * 4, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dpos, pos.data(), cs.tokens * 8, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dbidx, bidx.data(), nout * 8, cudaMemcpyHostToDevice));
                const size_t bytes = (size_t)nout * C * 4096;
                const double fl =
                    time_us([&] { read_kernel<<<sms * 8, 512>>>((const float4 *)sc, bytes / 16, sink); }, e0, e1);
                printf("%-7d %-7s %4d %9.1f |", cs.tokens, layout ? "shuffle" : "contig", C, fl);
                Prob P{sc, dtab, dbidx, dt2r, dpos, ppr, C, S, 0, nout, out, ws, tk};
                auto run = [&](const char *name, int K, auto fn) {
                    P.K = K;
                    const double t = time_us(fn, e0, e1);
                    printf(" %s/%d %.3f", name, K, t / fl);
                };
                if (join_only) { /* SxFp's bytes against slx<1>'s */
                    auto tz = [&] { cudaMemsetAsync(tk, 0, nout * 4); };
                    float *keep = P.out;
                    run("L3e0/5x", 1, [&] { ldge<1, 0, 5><<<nout * S, 256>>>(P); });
                    run("Sx0/4x", 16, [&] { slx<0, 4><<<nout * 8, 256>>>(P); });
                    run("Sx1/4x", 16, [&] { tz(), slx<1, 4><<<nout * 8, 256>>>(P); });
                    P.out = out2a;
                    run("SxFp/4x", 16, [&] { launch_slxf(P, nout); });
                    P.out = keep;
                    CK(cudaDeviceSynchronize());
                    std::vector<unsigned> ha((size_t)nout * 512), hr((size_t)nout * 512);
                    CK(cudaMemcpy(hr.data(), out, ha.size() * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(ha.data(), out2a, ha.size() * 4, cudaMemcpyDeviceToHost));
                    size_t da = 0;
                    for (size_t i = 0; i < ha.size(); i++) da += ha[i] != hr[i];
                    printf(" | SxFp bytes vs Sx1: %zu of %zu differ\n", da, ha.size());
                    fflush(stdout);
                    continue;
                }
                if (exact_only) {
                    auto tz = [&] { cudaMemsetAsync(tk, 0, nout * 4); };
                    run("L3", 1, [&] { ldg<3, 1><<<nout * S, 256>>>(P); });
                    if (C == 128) {
                        run("L3e0", 1, [&] { ldge<1, 0, 4><<<nout * S, 256>>>(P); });
                        run("L3e0/6x", 1, [&] { ldge<1, 0, 6><<<nout * S, 256>>>(P); });
                        run("L3e0", 2, [&] { ldge<2, 0, 2><<<nout * S / 2, 512>>>(P); });
                        run("L3e1", 1, [&] { tz(), ldge<1, 1, 4><<<nout * S, 256>>>(P); });
                        run("L3e1", 2, [&] { tz(), ldge<2, 1, 2><<<nout * S / 2, 512>>>(P); });
                        const int M = nout < sms ? nout : sms;
                        run("Sx0/4x", 16, [&] { slx<0, 4><<<nout * 8, 256>>>(P); });
                        run("Sx0/3x", 16, [&] { slx<0, 3><<<nout * 8, 256>>>(P); });
                        run("Sx1/4x", 16, [&] { tz(), slx<1, 4><<<nout * 8, 256>>>(P); });
                        run("Sx1/3x", 16, [&] { tz(), slx<1, 3><<<nout * 8, 256>>>(P); });
                        run("Sx2/4x", 16, [&] { launch_slx2(P, nout); });
                        run("W2", 8, [&] { launch_w2(P, nout); });
                        run("L3e3/6x", 1, [&] { ldgs<6><<<nout * S, 256>>>(P), mrg<<<nout, 256>>>(P); });
                        run("L3e3/5x", 1, [&] { ldgs<5><<<nout * S, 256>>>(P), mrg<<<nout, 256>>>(P); });
                        run("L3e3/4x", 1, [&] { ldgs<4><<<nout * S, 256>>>(P), mrg<<<nout, 256>>>(P); });
                        run("L3e0/5x", 1, [&] { ldge<1, 0, 5><<<nout * S, 256>>>(P); });
                        run("L3e2/5x", 1, [&] { ldgt<5><<<nout * S + M, 256>>>(P, ++epoch, M); });
                    } else {
                        run("L3e0", 4, [&] { ldge<4, 0, 1><<<nout * S / 4, 1024>>>(P); });
                        run("L3e1", 4, [&] { tz(), ldge<4, 1, 1><<<nout * S / 4, 1024>>>(P); });
                    }
                    run("P3e3", 8, [&] { launch_pages<1, 3>(P); });
                    printf("\n");
                    fflush(stdout);
                    continue;
                }
                for (int K : {S / 4, S / 2, S}) {
                    if (K < 1) continue;
                    run("T0", K, [&] { launch_ring<0>(P, sms); });
                    run("T3", K, [&] { launch_ring<3>(P, sms); });
                }
                run("L0", 2, [&] { ldg<0, 2><<<nout * (S / 2), 256>>>(P); });
                run("L3", 2, [&] { ldg<3, 2><<<nout * (S / 2), 256>>>(P); });
                run("L0", 4, [&] { ldg<0, 4><<<nout * (S / 4), 256>>>(P); });
                run("L3", 4, [&] { ldg<3, 4><<<nout * (S / 4), 256>>>(P); });
                run("L3", 1, [&] { ldg<3, 1><<<nout * S, 256>>>(P); });
                run("B0", 1, [&] { launch_bulk<0, 1>(P); });
                run("B3", 1, [&] { launch_bulk<3, 1>(P); });
                run("B0", 2, [&] { launch_bulk<0, 2>(P); });
                run("B3", 2, [&] { launch_bulk<3, 2>(P); });
                run("B3", 4, [&] { launch_bulk<3, 4>(P); });
                run("P3n6", 8, [&] { launch_pages<0, 6>(P); });
                run("P3e6", 8, [&] { launch_pages<1, 6>(P); });
                run("P3n3", 8, [&] { launch_pages<0, 3>(P); });
                run("P3e3", 8, [&] { launch_pages<1, 3>(P); });
                run("P3e3", 4, [&] { launch_pages<1, 3>(P); });
                run("P3e2", 4, [&] { launch_pages<1, 2>(P); });
                run("P3e3", 16, [&] { launch_pages<1, 3>(P); });
                printf("\n");
                fflush(stdout);
            }
    printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
