// warp_ring_probe.cu -- does a per-warp TMA ring reach the read floor with
// the exact arithmetic?  (issue 16; not part of the library)
//
// Work item = (output, 64-dimension slice) of a C = 128 window (16 segments
// of 8 rows, block size 8: one page per segment).  Each warp streams its own
// items: per segment, 16 lanes each issue one 256-byte cp.async.bulk (the 8
// rows' value and score slices) into one of the warp's NS shared-memory
// stages, completion on the stage's mbarrier; the warp reads the stage into
// registers, refills it with the segment NS ahead (crossing into its next
// item, whose indices it loaded during this one), reduces, and pushes the
// state into a register binary counter.  No CTA barrier anywhere.  Writes c
// (num/den) of every (output, dim); the finaliser is left out.
//
// MODE 0: SPEC 3 exact (kvc_canon.h); 1: hardware exp (SPEC 8 style);
// 2: no arithmetic (sums), the data path alone.  Exact c is compared bit
// for bit with a one-thread-per-dimension reference of SPEC 3.
// Build: nvcc -O3 -arch=sm_90a -fmad=false -Isrc/core bench/probe/warp_ring_probe.cu
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>
#include <cuda_runtime.h>

#include "kvc_canon.h"
#include "../../tools/read_floor.cuh"
#include "probe_common.cuh"


constexpr int SEGS = 16; // C = 128
struct Prob {
    const float *sc;   // [pages][8 rows][1024]: 512 values, 512 scores
    const int *table;  // [reqs][tstride] page ids
    int tstride;
    const int *oreq;   // [nout]
    const int *opos;   // [nout] window start (multiple of 128)
    int nout;
    float *c;          // [nout][512]
};


struct st2 {
    float m[2], d[2], n[2];
};

template <int MODE>
__device__ __forceinline__ void mrg(st2 &a, const st2 &b) {
#pragma unroll
    for (int k = 0; k < 2; k++) {
        if (MODE == 2) {
            a.n[k] += b.n[k];
        } else if (MODE == 0) {
            kvc_merge(&a.m[k], &a.d[k], &a.n[k], b.m[k], b.d[k], b.n[k]);
        } else {
            const float m = kvc_max(a.m[k], b.m[k]);
            const int amax = (a.m[k] == m);
            float f;
            asm("ex2.approx.f32 %0, %1;" : "=f"(f) : "f"(KVC_MUL(KVC_SUB(amax ? b.m[k] : a.m[k], m), KVC_LOG2E)));
            kvc_merge_scaled(&a.m[k], &a.d[k], &a.n[k], b.d[k], b.n[k], m, amax, f);
        }
    }
}


template <int MODE, int NS, int WARPS, int MINB = 1, int MAPG = 0>
__global__ __launch_bounds__(WARPS * 32, MINB) void ring(Prob P) {
    extern __shared__ __align__(128) unsigned char sm[];
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
    float *stg;
    unsigned long long *bar;
    probe_warp_ring(sm, WARPS, NS, w, l, &stg, &bar);
    const int nitems = P.nout * 8, TW = gridDim.x * WARPS;
    /* MAPG: the 8 slices of an output on 8 warps of one CTA (the library's groups) */
    int it = MAPG ? ((blockIdx.x * (WARPS / 8) + w / 8) * 8 + w % 8) : w * gridDim.x + blockIdx.x;
    if (it >= nitems) return;
    int sl = it & 7;
    int pg;
    {
        const int o = it >> 3, req = P.oreq[o], pos = P.opos[o];
        pg = l < 16 ? P.table[req * P.tstride + pos / 8 + l] : 0;
    }
#pragma unroll
    for (int s = 0; s < NS; s++) issue(P.sc, stg, bar, s, __shfl_sync(~0u, pg, s), sl, l);
    unsigned q = 0;
    for (;;) {
        const int itn = it + TW;
        const bool hasn = itn < nitems;
        int sln = itn & 7, reqn = 0, posn = 0, pgn = 0;
        if (hasn) {
            reqn = __ldg(P.oreq + (itn >> 3));
            posn = __ldg(P.opos + (itn >> 3));
        }
        st2 L0, L1, L2, L3;
#pragma unroll 1
        for (int j = 0; j < SEGS; j++) {
            if (j == 4 && hasn && l < 16) pgn = __ldg(P.table + reqn * P.tstride + posn / 8 + l);
            const int s = (int)(q % NS);
            float2 v[8], sc[8];
            probe_take(stg, bar, q, NS, l, v, sc);
            const int jj = j + NS;
            if (jj < SEGS) issue(P.sc, stg, bar, s, __shfl_sync(~0u, pg, jj), sl, l);
            else {
                const int pj = __shfl_sync(~0u, pgn, jj - SEGS);
                if (hasn) issue(P.sc, stg, bar, s, pj, sln, l);
            }
            q++;
            st2 S;
            if (MODE == 2) {
                float a = 0.f, b = 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    a += v[i].x + sc[i].x;
                    b += v[i].y + sc[i].y;
                }
                S.m[0] = S.m[1] = 0.f;
                S.d[0] = S.d[1] = 1.f;
                S.n[0] = a;
                S.n[1] = b;
            } else {
                float m0 = sc[0].x, m1 = sc[0].y;
#pragma unroll
                for (int i = 1; i < 8; i++) {
                    m0 = kvc_max(m0, sc[i].x);
                    m1 = kvc_max(m1, sc[i].y);
                }
                float d0 = 0.f, n0 = 0.f, d1 = 0.f, n1 = 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    if (MODE == 0) {
                        kvc_seg_step(m0, sc[i].x, v[i].x, &d0, &n0);
                        kvc_seg_step(m1, sc[i].y, v[i].y, &d1, &n1);
                    } else {
                        float e0, e1;
                        asm("ex2.approx.f32 %0, %1;" : "=f"(e0) : "f"(KVC_MUL(KVC_SUB(sc[i].x, m0), KVC_LOG2E)));
                        asm("ex2.approx.f32 %0, %1;" : "=f"(e1) : "f"(KVC_MUL(KVC_SUB(sc[i].y, m1), KVC_LOG2E)));
                        d0 = KVC_ADD(d0, e0);
                        n0 = __fmaf_rn(e0, v[i].x, n0);
                        d1 = KVC_ADD(d1, e1);
                        n1 = __fmaf_rn(e1, v[i].y, n1);
                    }
                }
                kvc_seg_close(m0, &d0, &n0);
                kvc_seg_close(m1, &d1, &n1);
                S.m[0] = m0, S.m[1] = m1, S.d[0] = d0, S.d[1] = d1, S.n[0] = n0, S.n[1] = n1;
            }
            if (!(j & 1)) L0 = S;
            else {
                mrg<MODE>(L0, S);
                if (!(j & 2)) L1 = L0;
                else {
                    mrg<MODE>(L1, L0);
                    if (!(j & 4)) L2 = L1;
                    else {
                        mrg<MODE>(L2, L1);
                        if (!(j & 8)) L3 = L2;
                        else mrg<MODE>(L3, L2);
                    }
                }
            }
        }
        const int o = it >> 3;
        float2 cv;
        cv.x = KVC_DIV(L3.n[0], L3.d[0]);
        cv.y = KVC_DIV(L3.n[1], L3.d[1]);
        reinterpret_cast<float2 *>(P.c + (size_t)o * 512 + sl * 64)[l] = cv;
        if (!hasn) break;
        it = itn;
        sl = sln;
        pg = pgn;
    }
}

// SPEC 3 written plainly: one thread per (output, dim).
__global__ void ref_kernel(Prob P) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= P.nout * 512) return;
    const int o = t / 512, d = t % 512, req = P.oreq[o], pos = P.opos[o];
    float M[6], Dn[6], Nm[6];
    int sizes[6], top = -1;
    for (int j = 0; j < SEGS; j++) {
        const float *pgp = P.sc + (size_t)P.table[req * P.tstride + pos / 8 + j] * 8192;
        float m = pgp[512 + d];
        for (int i = 1; i < 8; i++) m = kvc_max(m, pgp[i * 1024 + 512 + d]);
        float dn = 0.f, nm = 0.f;
        for (int i = 0; i < 8; i++) kvc_seg_step(m, pgp[i * 1024 + 512 + d], pgp[i * 1024 + d], &dn, &nm);
        kvc_seg_close(m, &dn, &nm);
        top++;
        M[top] = m, Dn[top] = dn, Nm[top] = nm, sizes[top] = 1;
#define RMERGE(a, b) kvc_merge(&M[a], &Dn[a], &Nm[a], M[b], Dn[b], Nm[b])
        KVC_TREE_PUSH(sizes, top, RMERGE);
    }
    KVC_TREE_FOLD(top, RMERGE);
    P.c[t] = KVC_DIV(Nm[0], Dn[0]);
}

__global__ void fill(float *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)(i * 2654435761u) ^ (unsigned)(i >> 13) * 2246822519u;
        h ^= h >> 15;
        h *= 2654435761u;
        h ^= h >> 13;
        const float u = (h & 0xFFFFFF) * (1.0f / 16777216.0f);
        p[i] = ((i & 1023) >= 512) ? u * 12.0f - 6.0f : u * 4.0f - 2.0f; // scores in [-6, 6), values in [-2, 2)
    }
}

static char *g_flush;
static size_t g_fl;
template <class F>
static double time_us(F launch, cudaEvent_t e0, cudaEvent_t e1, int rep = 30) {
    return probe_median_us([](int i) { cudaMemsetAsync(g_flush, i & 0xFF, g_fl); }, launch, e0, e1, rep);
}

template <int MODE, int NS, int WARPS, int MINB = 1, int MAPG = 0>
static int launch_cfg(const Prob &P, int sms) {
    const int smem = WARPS * NS * 4096 + WARPS * NS * 8;
    static int per = 0; /* set once, outside the timed calls */
    if (!per) {
        cudaFuncSetAttribute(ring<MODE, NS, WARPS, MINB, MAPG>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, ring<MODE, NS, WARPS, MINB, MAPG>, WARPS * 32, smem);
    }
    ring<MODE, NS, WARPS, MINB, MAPG><<<sms * per, WARPS * 32, smem>>>(P);
    return per;
}

int main() {
    int sms = 132, l2 = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    g_fl = (size_t)l2 * 4;
    CK(cudaMalloc(&g_flush, g_fl));
    const int total_pages = 131072 / 8;
    float *sc;
    CK(cudaMalloc(&sc, (size_t)total_pages * 8192 * 4));
    fill<<<sms * 8, 512>>>(sc, (size_t)total_pages * 8192);
    float *c, *cref;
    CK(cudaMalloc(&c, 1024 * 512 * 4));
    CK(cudaMalloc(&cref, 1024 * 512 * 4));
    int *dtab, *dreq, *dpos;
    CK(cudaMalloc(&dtab, total_pages * 4));
    CK(cudaMalloc(&dreq, 1024 * 4));
    CK(cudaMalloc(&dpos, 1024 * 4));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float *sink;
    CK(cudaMalloc(&sink, 4));
    std::mt19937 rng(7);
    struct Case { int reqs, tokens; } cases[] = {{1, 8192}, {4, 32768}, {8, 65536}, {8, 131072}};
    printf("%-8s %-7s %9s | %s\n", "tokens", "layout", "floor_us", "x_floor per variant (MODE/NS/WARPS: exact-check)");
    for (int layout = 0; layout < 2; layout++)
        for (auto cs : cases) {
            const int per_req = cs.tokens / cs.reqs, ppr = per_req / 8, nout = cs.tokens / 128;
            std::vector<int> tab(cs.reqs * ppr), rq(nout), ps(nout);
            for (int i = 0; i < (int)tab.size(); i++) tab[i] = i;
            if (layout) std::shuffle(tab.begin(), tab.end(), rng);
            for (int o = 0; o < nout; o++) {
                rq[o] = o / (per_req / 128);
                ps[o] = (o % (per_req / 128)) * 128;
            }
            CK(cudaMemcpy(dtab, tab.data(), tab.size() * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dreq, rq.data(), nout * 4, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dpos, ps.data(), nout * 4, cudaMemcpyHostToDevice));
            Prob P{sc, dtab, ppr, dreq, dpos, nout, c};
            Prob R = P;
            R.c = cref;
            ref_kernel<<<(nout * 512 + 255) / 256, 256>>>(R);
            CK(cudaDeviceSynchronize());
            std::vector<unsigned> hr(nout * 512), hc(nout * 512);
            CK(cudaMemcpy(hr.data(), cref, nout * 2048, cudaMemcpyDeviceToHost));
            const size_t bytes = (size_t)nout * 128 * 4096;
            const double fl = time_us([&] { read_kernel<<<sms * 8, 512>>>((const float4 *)sc, bytes / 16, sink); }, e0, e1);
            printf("%-8d %-7s %9.1f |", cs.tokens, layout ? "shuffle" : "contig", fl);
            auto run = [&](const char *name, auto fn) {
                CK(cudaMemset(c, 0xFF, nout * 2048));
                fn();
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(hc.data(), c, nout * 2048, cudaMemcpyDeviceToHost));
                int bad = 0;
                for (int i = 0; i < nout * 512; i++) bad += hc[i] != hr[i];
                const double t = time_us(fn, e0, e1);
                printf(" %s %.3f%s", name, t / fl, bad ? (bad == nout * 512 ? "" : "(DIFF)") : "(eq)");
                return 0;
            };
            run("E/2/16", [&] { launch_cfg<0, 2, 16>(P, sms); });
            run("E/2/16g", [&] { launch_cfg<0, 2, 16, 1, 1>(P, sms); });
            run("H/2/16", [&] { launch_cfg<1, 2, 16>(P, sms); });
            run("H/2/16g", [&] { launch_cfg<1, 2, 16, 1, 1>(P, sms); });
            run("N/2/16g", [&] { launch_cfg<2, 2, 16, 1, 1>(P, sms); });
            printf("\n");
            fflush(stdout);
        }
    printf("last error: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
}
