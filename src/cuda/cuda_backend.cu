/*
 * cuda_backend.cu -- the CUDA backend.  Same bytes as the CPU backend: every
 * float operation goes through kvc_canon.h, which uses the _rn intrinsics
 * (never contracted) on the device.
 *
 * Work decomposition (one launch per call):
 *   - DG = 512 / DPT "dimension groups" of DPT consecutive dims cover the 512
 *     dims; a thread loads DPT values and DPT scores per row (one 8-byte load
 *     each for DPT = 2).  Few registers per thread -> many resident warps:
 *     the kernel is latency-bound, so occupancy is what keeps HBM busy.
 *   - The window's S = ceil(rows / 8) segments are cut into CHUNKS that are
 *     complete, aligned subtrees of the canonical tree: floor(S / CH) chunks
 *     of CH segments, then one chunk per set bit of S % CH (descending).
 *   - A CTA (DG x L threads) reduces one chunk of one output: it first
 *     resolves the chunk's row addresses into shared memory (one thread per
 *     row, which also checks that row's physical block), then lane l of a
 *     dimension group reduces a complete subtree of segments in registers
 *     (full, aligned segments: one branch-free body, subtree_full), and the
 *     L lane states merge in tree order through shared memory.
 *   - With one chunk per output the CTA finalises directly; otherwise chunk
 *     states go to a workspace and the last CTA of the output (ticket
 *     counter) merges them in canonical order and finalises.
 *   - Index values are checked on the device (kvc_check.h); a bad output is
 *     skipped and the first error is recorded in the status word.
 *
 * Windows of one segment (C <= 8, or C <= 4 with overlap) go to a second
 * kernel, compress_small_kernel: a CTA takes K outputs (K sized for one full
 * wave), resolves all their checks and rows in parallel, then reduces and
 * finalises them in turn with the next output's loads in flight.
 *
 * bench/NOTES.md records every version with its prediction and measurement,
 * including the experiments that were removed (a cp.async / TMA ring kernel:
 * commit d61d9d4).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "kvc_canon.h"
#include "kvc_check.h"
#include "kvc_internal.h"

/* Tuning knobs (compile time; bench/NOTES.md has the measurements). */
#ifndef KVC_CUDA_DPT
#define KVC_CUDA_DPT 2         /* dims per thread: 1 or 2                  */
#endif
#ifndef KVC_CUDA_MINB
#define KVC_CUDA_MINB 2        /* resident CTAs per SM asked of the compiler */
#endif
#ifndef KVC_CUDA_LDHINT
#define KVC_CUDA_LDHINT 0      /* state loads: 0 __ldcs (streaming), 1 __ldg */
#endif
#ifndef KVC_CUDA_CHDIV
#define KVC_CUDA_CHDIV 132     /* chunk size ~ total segments / CHDIV (v15; v13-14: 264, v7-v12: 528) */
#endif
#if KVC_CUDA_LDHINT == 1
#define KVC_LD(p) __ldg(p)
#else
#define KVC_LD(p) __ldcs(p)
#endif
#ifndef KVC_CUDA_SPECIALIZE
#define KVC_CUDA_SPECIALIZE 1  /* one kernel per full-chunk size (v14)       */
#endif
#define DPT KVC_CUDA_DPT
#define DG (512 / DPT)         /* threads per lane                         */
#ifndef KVC_CUDA_LANES
#define KVC_CUDA_LANES 2       /* lanes per CTA (DPT 2): 1 or 2             */
#endif
#define MAX_LANES (DPT == 2 ? KVC_CUDA_LANES : 1) /* lanes per CTA          */
#define MAX_CH 16              /* segments per chunk (32 = 16 per lane measured
                                  25% slower at 131k, C >= 256: bench/NOTES.md) */
#define MAX_CHUNK_ROWS (8 * MAX_CH)
#define STACK_MAX 48           /* chunk-merge stack depth (any S < 2^47)   */
#define NSTATE (3 * DPT)       /* floats of one thread's state             */
#define BAD_BIT 0x80000000u



/* Diagnostic phase trace (build with -DKVC_CUDA_TRACE; never in a release
 * build): thread 0 of each CTA stamps %globaltimer and clock64 at phase
 * boundaries of compress_kernel; the benchmark kit prints a summary
 * (tools/kit/kvc_kit_cuda.cu; bench/NOTES.md, session 4). */
#ifdef KVC_CUDA_TRACE
#define KVC_TRACE_CTAS 16384
__device__ unsigned long long g_kvc_trace[KVC_TRACE_CTAS * 8], g_kvc_clk[KVC_TRACE_CTAS * 8];
#define TR(k)                                                                                          \
    do {                                                                                               \
        if (threadIdx.x == 0 && blockIdx.x < KVC_TRACE_CTAS) {                                         \
            unsigned long long t_;                                                                     \
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_));                                     \
            g_kvc_trace[blockIdx.x * 8 + (k)] = t_;                                                    \
            g_kvc_clk[blockIdx.x * 8 + (k)] = clock64();                                               \
        }                                                                                              \
    } while (0)
/* clear != 0: zero the stamps; else copy n of each array to t and c. */
extern "C" int kvc_cuda_trace_copy(unsigned long long *t, unsigned long long *c, size_t n, int clear) {
    if (clear) {
        static unsigned long long z[KVC_TRACE_CTAS * 8];
        return cudaMemcpyToSymbol(g_kvc_trace, z, sizeof z) != cudaSuccess ||
               cudaMemcpyToSymbol(g_kvc_clk, z, sizeof z) != cudaSuccess;
    }
    if (n > KVC_TRACE_CTAS * 8) n = KVC_TRACE_CTAS * 8;
    return cudaMemcpyFromSymbol(t, g_kvc_trace, n * 8) != cudaSuccess ||
           cudaMemcpyFromSymbol(c, g_kvc_clk, n * 8) != cudaSuccess;
}
#else
#define TR(k) ((void)0)
#endif

struct stv {
    float m[DPT], d[DPT], n[DPT];
};

__device__ __forceinline__ void st_merge(stv &a, const stv &b) {
#pragma unroll
    for (int j = 0; j < DPT; j++) kvc_merge(&a.m[j], &a.d[j], &a.n[j], b.m[j], b.d[j], b.n[j]);
}

/* Per-launch constants (one struct, passed by value). */
struct launch_params {
    kvc_args a;                 /* resolved args (device pointers)               */
    kvc_device_status *status;  /* device status word                            */
    unsigned *tickets;          /* [num_outputs] arrival counters (zeroed)       */
    float *chunk_states;        /* [num_outputs][nchunk][3][512]                 */
    long long rows;             /* window rows: C or 2C                          */
    long long nseg;             /* segments per window                           */
    long long nchunk;           /* chunks per output                             */
    long long ch;               /* full chunk size in segments                   */
    int lanes;                  /* L                                             */
    int uniform;                /* all chunks full, nchunk a power of 2 <= 8 L   */
    int vec;                    /* 8-byte loads allowed (alignment)              */
    int fast;                   /* vec and no overlap: straight-line full segments */
    int small_k;                /* one-segment windows: outputs per CTA            */
};

/* Row addresses of the CTA's chunk: element offsets of the row's value and
 * score halves, or -1 for a masked (overlap, position < 0) row. */
struct row_table {
    long long voff[MAX_CHUNK_ROWS];
    long long soff[MAX_CHUNK_ROWS];
    int bad;                /* a row's physical block is out of range */
    long long bad_g;        /* its value                              */
};

/* Resolve the chunk's rows (one thread per row, in parallel) and check each
 * row's physical block: the device's half of the PHYSICAL_BLOCK check.
 * rt->bad must be 0 on entry. */
__device__ void fill_rows(const launch_params &P, const kvc_out_info &inf, long long r0, int nrows, row_table *rt) {
    const kvc_args &a = P.a;
    const long long C = a.compress_ratio;
    for (int t = threadIdx.x; t < nrows; t += blockDim.x) {
        int vo, so;
        const long long pos = kvc_window_row(inf.p, C, a.overlap == KVC_OVERLAP_ON, r0 + t, &vo, &so);
        if (pos < 0) {
            rt->voff[t] = rt->soff[t] = -1;
            continue;
        }
        const long long l = pos / a.block_size;
        const long long blk = a.block_table[inf.r * a.block_table_stride + l];
        if (blk < 0 || blk >= a.num_blocks) {
            if (atomicCAS(&rt->bad, 0, 1) == 0) rt->bad_g = blk;
            rt->voff[t] = rt->soff[t] = -1;
            continue;
        }
        const long long base = kvc_state_row_offset(&a, blk, pos);
        rt->voff[t] = base + vo;
        rt->soff[t] = base + so;
    }
}

/* A segment's data for one thread: 8 rows x (value, score) x DPT dims. */
struct seg_data {
    float v[KVC_SEG][DPT], s[KVC_SEG][DPT];
};

/* Issue the loads of local rows [lr, lr + n) (no use of the data yet).
 * RT: any table with voff[] / soff[] (row_table, small_rows). */
template <class RT>
__device__ __forceinline__ void seg_load(const launch_params &P, const RT *rt, int lr, int n, int q, seg_data &x) {
    const float *base = P.a.state_cache;
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        if (i < n) {
            const long long vo = rt->voff[lr + i], so = rt->soff[lr + i];
            if (vo < 0) {
#pragma unroll
                for (int j = 0; j < DPT; j++) {
                    x.v[i][j] = 0.0f;
                    x.s[i][j] = KVC_NEG_INF;
                }
            } else if (DPT == 2 && P.vec) {
                float2 a = KVC_LD(reinterpret_cast<const float2 *>(base + vo) + q);
                float2 b = KVC_LD(reinterpret_cast<const float2 *>(base + so) + q);
                x.v[i][0] = a.x;
                x.v[i][DPT - 1] = a.y;
                x.s[i][0] = b.x;
                x.s[i][DPT - 1] = b.y;
            } else if (DPT == 1) {
                x.v[i][0] = KVC_LD(base + vo + q);
                x.s[i][0] = KVC_LD(base + so + q);
            } else {
#pragma unroll
                for (int j = 0; j < DPT; j++) {
                    x.v[i][j] = base[vo + DPT * q + j];
                    x.s[i][j] = base[so + DPT * q + j];
                }
            }
        }
    }
}

/* The canonical segment reduction of loaded data (n rows); after_row(i)
 * runs once row i's values and scores are consumed (seg_compute_roll). */
template <class AfterRow>
__device__ __forceinline__ stv seg_reduce_rows(const seg_data &x, int n, AfterRow after_row) {
    stv st;
#pragma unroll
    for (int j = 0; j < DPT; j++) {
        st.m[j] = x.s[0][j];
        st.d[j] = 0.0f;
        st.n[j] = 0.0f;
    }
#pragma unroll
    for (int i = 1; i < KVC_SEG; i++)
        if (i < n)
#pragma unroll
            for (int j = 0; j < DPT; j++) st.m[j] = kvc_max(st.m[j], x.s[i][j]);
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        if (i < n)
#pragma unroll
            for (int j = 0; j < DPT; j++) kvc_seg_step(st.m[j], x.s[i][j], x.v[i][j], &st.d[j], &st.n[j]);
        after_row(i);
    }
#pragma unroll
    for (int j = 0; j < DPT; j++) kvc_seg_close(st.m[j], &st.d[j], &st.n[j]);
    return st;
}
__device__ __forceinline__ stv seg_compute(const seg_data &x, int n) {
    return seg_reduce_rows(x, n, [](int) {});
}

__device__ __forceinline__ int seg_rows(const launch_params &P, long long sg) {
    const long long g0 = sg * KVC_SEG;
    return (int)((P.rows - g0) < KVC_SEG ? (P.rows - g0) : KVC_SEG);
}

/* The common case, as straight-line code: 8 rows, none masked (a bad block
 * skipped the output), 8-byte loads.  No per-row branches or predicates, so
 * all 16 loads issue back to back (the generic path spent ~25 instructions
 * per row on them).  Scores at value + 512 (no overlap), or, with
 * SCORES_FROM_TABLE, at the table's soff (overlap rows: the small kernel). */
template <bool SCORES_FROM_TABLE = false, class RT>
__device__ __forceinline__ void seg_load_row(const launch_params &P, const RT *rt, int lr, int q, seg_data &x, int i) {
    const float *base = P.a.state_cache;
    const float *row = base + rt->voff[lr];
    const float *srow = SCORES_FROM_TABLE ? base + rt->soff[lr] : row + 512;
    if constexpr (DPT == 2) {
        const float2 a = __ldcs(reinterpret_cast<const float2 *>(row) + q);
        const float2 b = __ldcs(reinterpret_cast<const float2 *>(srow) + q);
        x.v[i][0] = a.x;
        x.v[i][DPT - 1] = a.y;
        x.s[i][0] = b.x;
        x.s[i][DPT - 1] = b.y;
    } else {
        x.v[i][0] = __ldcs(row + q);
        x.s[i][0] = __ldcs(srow + q);
    }
}
template <bool SCORES_FROM_TABLE = false, class RT>
__device__ __forceinline__ void seg_load_full(const launch_params &P, const RT *rt, int lr, int q, seg_data &x) {
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) seg_load_row<SCORES_FROM_TABLE>(P, rt, lr + i, q, x, i);
}

/*
 * seg_compute of a full segment (8 rows), and, with NEXT, the next full
 * segment (local rows lr_next ..) loaded into x row by row: row i's loads
 * may issue as soon as row i's values and scores are consumed, with no
 * registers beyond x's own.  The compiler still places them by its own
 * register budget (mostly late in the segment), but the code between the
 * segments of a subtree is one basic block, so it can overlap each
 * segment's loads with arithmetic; the per-segment branch of the generic
 * path below prevented that (v12: 192 -> 160 us at 131k tokens).
 */
template <bool NEXT, bool SCORES_FROM_TABLE = false, class RT>
__device__ __forceinline__ stv seg_compute_roll(const launch_params &P, const RT *rt, int lr_next, int q,
                                                seg_data &x) {
    return seg_reduce_rows(x, KVC_SEG, [&](int i) {
        if (NEXT) seg_load_row<SCORES_FROM_TABLE>(P, rt, lr_next + i, q, x, i);
    });
}

/* A complete subtree of KK full segments from local row lr whose first
 * segment is already in x (loads issued); on return x holds the segment
 * after the subtree (loads in flight) when MORE.  Canonical tree order. */
template <int KK, bool MORE>
__device__ __forceinline__ stv subtree_full(const launch_params &P, const row_table *rt, int lr, int q,
                                            seg_data &x) {
    if constexpr (KK == 1) {
        return seg_compute_roll<MORE>(P, rt, lr + KVC_SEG, q, x);
    } else {
        /* (parking A in shared memory instead of registers while B is
         * reduced measured 3-5% slower: bench/NOTES.md) */
        stv A = subtree_full<KK / 2, true>(P, rt, lr, q, x);
        stv B = subtree_full<KK / 2, MORE>(P, rt, lr + (KK / 2) * KVC_SEG, q, x);
        st_merge(A, B);
        return A;
    }
}

/*
 * The generic path: a thread's complete subtree of kk (a power of two <=
 * 16) consecutive segments from segment sg (r0: the chunk's first row), any
 * rows (a partial last segment, masked overlap rows, unaligned rows).  One
 * unrolled body per kk; a runtime loop over segments measured slower (v8,
 * v9 in bench/NOTES.md).  Subtrees of full, aligned segments without
 * overlap take subtree_full instead (see subtree_rt).
 */
template <int KK>
__device__ __forceinline__ stv subtree(const launch_params &P, const row_table *rt, long long r0, long long sg,
                                       int q) {
    if constexpr (KK == 1) {
        seg_data x;
        const int n = seg_rows(P, sg);
        if (P.fast && n == KVC_SEG) {
            seg_load_full(P, rt, (int)(sg * KVC_SEG - r0), q, x);
            return seg_compute(x, KVC_SEG);
        }
        seg_load(P, rt, (int)(sg * KVC_SEG - r0), n, q, x);
        return seg_compute(x, n);
    } else {
        stv A = subtree<KK / 2>(P, rt, r0, sg, q);
        stv B = subtree<KK / 2>(P, rt, r0, sg + KK / 2, q);
        st_merge(A, B);
        return A;
    }
}

/* KF > 0: the launch guarantees that every chunk is kk = KF full segments on
 * the fast path (compress_kernel<KF>): only that body is compiled. */
template <int KF>
__device__ __forceinline__ stv subtree_rt(const launch_params &P, const row_table *rt, long long r0, long long sg,
                                          long long kk, int q) {
    if (KF > 0) {
        const int lr = (int)(sg * KVC_SEG - r0);
        seg_data x;
        seg_load_full(P, rt, lr, q, x);
        return subtree_full<(KF > 0 ? KF : 1), false>(P, rt, lr, q, x);
    }
    if (P.fast && (sg + kk) * KVC_SEG <= P.rows) { /* all kk segments full: no branches */
        const int lr = (int)(sg * KVC_SEG - r0);
        seg_data x;
        seg_load_full(P, rt, lr, q, x);
        switch (kk) {
        case 1: return subtree_full<1, false>(P, rt, lr, q, x);
        case 2: return subtree_full<2, false>(P, rt, lr, q, x);
        case 4: return subtree_full<4, false>(P, rt, lr, q, x);
        case 8: return subtree_full<8, false>(P, rt, lr, q, x);
        default: return subtree_full<16, false>(P, rt, lr, q, x);
        }
    }
    switch (kk) {
    case 1: return subtree<1>(P, rt, r0, sg, q);
    case 2: return subtree<2>(P, rt, r0, sg, q);
    case 4: return subtree<4>(P, rt, r0, sg, q);
    case 8: return subtree<8>(P, rt, r0, sg, q);
    default: return subtree<16>(P, rt, r0, sg, q); /* kk = csize / lanes <= MAX_CH */
    }
}

__device__ void record_error(kvc_device_status *st, int check, long long o, long long value) {
    if (atomicCAS(&st->status, 0, (int)KVC_ERROR_INDEX_OUT_OF_RANGE) == 0) {
        st->check = check;
        st->output = o;
        st->value = value;
    }
}

__device__ void count(int64_t *field) { atomicAdd(reinterpret_cast<unsigned long long *>(field), 1ull); }

/* OR of a flag over threads 0..127: one barrier-with-reduction (named
 * barrier 3, used for nothing else).  Every one of the 128 threads must call. */
__device__ __forceinline__ int or_across_128(int v) {
    int r;
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.s32 p, %1, 0;\n\tbar.red.or.pred q, 3, 128, p;\n\t"
                 "selp.s32 %0, 1, 0, q;\n\t}"
                 : "=r"(r)
                 : "r"(v)
                 : "memory");
    return r;
}

/* The finaliser's per-thread inputs that come from global memory: thread q's
 * 4 RMS weights and (q >= 112) the cos/sin of its 2 RoPE pairs, loaded by
 * the caller (so that a caller may load them early). */
struct fin_in {
    float w[4];
    float cs[4]; /* cos0, sin0, cos1, sin1 */
};

__device__ __forceinline__ void fin_load_weights(const launch_params &P, int q, fin_in &f) {
    if (q >= 128) return;
#pragma unroll
    for (int j = 0; j < 4; j++) f.w[j] = kvc_bf16_to_f32(P.a.rms_norm_weight[4 * q + j]);
}

__device__ __forceinline__ void fin_load_cos_sin(const launch_params &P, long long pc, int q, fin_in &f) {
    if (q < 112 || q >= 128) return;
    const float *cs = P.a.cos_sin_cache + pc * P.a.cos_sin_stride;
    const int il = P.a.cos_sin_layout == KVC_COS_SIN_INTERLEAVED;
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int jj = 2 * (q - 112) + t;
        f.cs[2 * t] = il ? cs[2 * jj] : cs[jj];
        f.cs[2 * t + 1] = il ? cs[2 * jj + 1] : cs[32 + jj];
    }
}

/*
 * Finalise one output from c[512]: called by threads 0..127 together (named
 * barrier 1), thread q holding dims 4q..4q+3.  RMS sum in the canonical
 * pairwise tree (4 leaves per thread, then warp shuffles: a + b == b + a, so
 * the shuffle order does not matter, then the 4 warp sums), NOPE groups of 16
 * threads (q < 112), RoPE pairs on q >= 112.  red: 4 floats of shared memory.
 * @return (thread 0) 1 when the output went to the non-finite slot.  The
 * caller counts it in the status word.
 */
__device__ int finalize(const launch_params &P, long long slot, const float c[4], int q, float *red,
                        const fin_in &f) {
    const kvc_args &a = P.a;
    int bad = 0;
    float sq[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        bad |= kvc_nonfinite(c[j]);
        sq[j] = KVC_MUL(c[j], c[j]);
    }
    float ss = KVC_ADD(KVC_ADD(sq[0], sq[1]), KVC_ADD(sq[2], sq[3]));
#pragma unroll
    for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(0xffffffffu, ss, k)); /* a+b == b+a */
    if ((q & 31) == 0) red[q >> 5] = ss;
    asm volatile("bar.sync 1, 128;");
    ss = KVC_ADD(KVC_ADD(red[0], red[1]), KVC_ADD(red[2], red[3]));
    const float rr = kvc_rms_scale(ss, a.rms_norm_eps);
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        y[j] = kvc_rms_apply(c[j], rr, f.w[j]);
        bad |= kvc_nonfinite(y[j]);
    }
    const int fp8 = a.nope_format == KVC_NOPE_FP8_E4M3;
    int64_t po, so;
    kvc_slot_offsets(&a, slot, &po, &so);
    uint8_t *payload = a.kv_cache + po;
    uint8_t *scales = a.kv_cache + so;
    uint8_t out[8];
    int nout = 0, e = 0;
    /* bf16 and group amax on all 128 threads: the shuffles must not diverge
     * (xor < 16 stays inside a 16-thread group; q >= 112 is RoPE, unused). */
    float z[4], amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        kvc_u16 h = kvc_bf16_bits(y[j]);
        if (q < 112) bad |= kvc_bf16_nonfinite(h);
        z[j] = kvc_bf16_to_f32(h);
        amax = fmaxf(amax, fabsf(z[j])); /* NaN only where bad is set */
    }
#pragma unroll
    for (int k = 1; k < 16; k <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, k));
    if (q < 112) { /* NOPE: groups of 16 threads */
        e = kvc_group_exponent(amax, fp8);
#pragma unroll
        for (int j = 0; j < 4; j++) out[j] = kvc_nope_code(z[j], e, fp8);
        nout = 4;
    } else { /* RoPE: 2 pairs per thread */
#pragma unroll
        for (int t = 0; t < 2; t++) {
            float uo, wo;
            kvc_rope(y[2 * t], y[2 * t + 1], f.cs[2 * t], f.cs[2 * t + 1], &uo, &wo);
            bad |= kvc_nonfinite(uo) | kvc_nonfinite(wo);
            kvc_u16 hu = kvc_bf16_bits(uo), hw = kvc_bf16_bits(wo);
            bad |= kvc_bf16_nonfinite(hu) | kvc_bf16_nonfinite(hw);
            out[4 * t + 0] = (uint8_t)(hu & 0xFF);
            out[4 * t + 1] = (uint8_t)(hu >> 8);
            out[4 * t + 2] = (uint8_t)(hw & 0xFF);
            out[4 * t + 3] = (uint8_t)(hw >> 8);
        }
        nout = 8;
    }
    /* block-wide OR over the 128 finalising threads */
    bad = or_across_128(bad);
    if (q < 112) {
        for (int j = 0; j < 4; j++) payload[4 * q + j] = bad ? 0 : out[j];
        if ((q & 15) == 0) scales[q >> 4] = bad ? 0xFF : (uint8_t)(e + 127);
    } else {
        uint8_t *rp = payload + 448 + 8 * (q - 112);
        for (int j = 0; j < nout; j++) rp[j] = bad ? (uint8_t)((j & 1) ? 0x7F : 0xC0) : out[j];
    }
    if (q == 0) scales[7] = 0;
    return bad;
}

/* Thread state <-> a [3][512] float array (shared or global). */
__device__ __forceinline__ void st_store(const stv &st, float *dst, int q) {
#pragma unroll
    for (int j = 0; j < DPT; j++) {
        dst[DPT * q + j] = st.m[j];
        dst[512 + DPT * q + j] = st.d[j];
        dst[1024 + DPT * q + j] = st.n[j];
    }
}
__device__ __forceinline__ stv st_load(const float *src, int q) {
    stv st;
#pragma unroll
    for (int j = 0; j < DPT; j++) {
        st.m[j] = __ldcg(src + DPT * q + j);
        st.d[j] = __ldcg(src + 512 + DPT * q + j);
        st.n[j] = __ldcg(src + 1024 + DPT * q + j);
    }
    return st;
}

/* Merge n consecutive chunk states (a complete subtree, n a power of two
 * <= 8): all loads are issued first, then the tree is merged in registers. */
__device__ stv merge_chunks_tree(const float *base, long long k0, int n, int q) {
    stv acc[8];
#pragma unroll
    for (int k = 0; k < 8; k++)
        if (k < n) acc[k] = st_load(base + (k0 + k) * (3 * 512), q);
#pragma unroll
    for (int w = 1; w < 8; w *= 2)
#pragma unroll
        for (int k = 0; k + w < 8; k += 2 * w)
            if (k + w < n) st_merge(acc[k], acc[k + w]);
    return acc[0];
}

/* Lane states -> lane 0 (tree order) through shared memory; all threads call. */
__device__ void merge_lanes(stv &st, int lane, int active, int q, float *smem) {
    if (active <= 1) return;
    if (lane < active) st_store(st, smem + lane * (3 * 512), q);
    __syncthreads();
    if (lane == 0) {
        stv B;
#pragma unroll
        for (int j = 0; j < DPT; j++) {
            B.m[j] = smem[3 * 512 + DPT * q + j];
            B.d[j] = smem[3 * 512 + 512 + DPT * q + j];
            B.n[j] = smem[3 * 512 + 1024 + DPT * q + j];
        }
        st_merge(st, B); /* MAX_LANES == 2 */
    }
    __syncthreads();
}

/* c = num / den of lane 0's state, handed to the 128-thread finaliser. */
__device__ void finish(const launch_params &P, const kvc_out_info &inf, const stv &st, int q, float *smem) {
    /* lane-0 threads (q < DG) write c, the first 128 read 4 each */
#pragma unroll
    for (int j = 0; j < DPT; j++) smem[DPT * q + j] = KVC_DIV(st.n[j], st.d[j]);
    asm volatile("bar.sync 2, %0;" ::"r"(DG));
    if (q >= 128) return;
    float c[4];
#pragma unroll
    for (int j = 0; j < 4; j++) c[j] = smem[4 * q + j];
    fin_in f;
    fin_load_weights(P, q, f);
    fin_load_cos_sin(P, inf.pc, q, f);
    const int bad = finalize(P, inf.slot, c, q, smem + 512, f);
    if (q == 0) {
        count(&P.status->outputs_written);
        if (bad) count(&P.status->outputs_nonfinite);
    }
}

template <int KF>
__global__ void __launch_bounds__(DG *MAX_LANES, KVC_CUDA_MINB) compress_kernel(const launch_params P) {
    extern __shared__ float smem[]; /* [MAX_LANES][3][512] states; finaliser scratch */
    __shared__ row_table rt;
    __shared__ unsigned ticket;
    const int tid = threadIdx.x, q = tid % DG, lane = tid / DG;
    const long long o = blockIdx.x / P.nchunk, j = blockIdx.x % P.nchunk;
    TR(0);

    kvc_out_info inf;
    const int chk = kvc_check_output(&P.a, o, &inf, 0);
    TR(1);
    if (chk != KVC_CHECK_NONE) {
        if (j == 0 && tid == 0) {
            record_error(P.status, chk, o, inf.value);
            count(&P.status->outputs_invalid);
        }
        return;
    }
    if (inf.slot < 0) {
        if (j == 0 && tid == 0) count(&P.status->outputs_padding);
        return;
    }
    int64_t cstart, csize;
    kvc_chunk_of(P.nseg, P.ch, j, &cstart, &csize);
    const int active = (int)(csize < P.lanes ? csize : P.lanes); /* lanes with work */
    const long long kk = csize / active;                        /* segments per lane */

    if (tid == 0) rt.bad = 0;
    __syncthreads();
    const long long r0 = cstart * KVC_SEG;
    const long long rend = (cstart + csize) * KVC_SEG < P.rows ? (cstart + csize) * KVC_SEG : P.rows;
    fill_rows(P, inf, r0, (int)(rend - r0), &rt);
    __syncthreads();
    TR(2);
    const int bad_rows = rt.bad;
    if (bad_rows && tid == 0) record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, o, rt.bad_g);

    stv st;
    if (!bad_rows) {
        if (lane < active) st = subtree_rt<KF>(P, &rt, r0, cstart + lane * kk, kk, q);
        merge_lanes(st, lane, active, q, smem);
    }
    TR(3);
    if (P.nchunk == 1) {
        if (bad_rows) {
            if (tid == 0) count(&P.status->outputs_invalid);
            return;
        }
        if (lane != 0) return;
        finish(P, inf, st, q, smem);
        return;
    }
    /* publish the chunk state; the last CTA of the output merges them */
    if (lane == 0 && !bad_rows) st_store(st, P.chunk_states + (o * P.nchunk + j) * (3 * 512), q);
    __threadfence();
    __syncthreads();
    if (tid == 0) ticket = atomicAdd(&P.tickets[o], bad_rows ? (BAD_BIT + 1u) : 1u);
    __syncthreads();
    const unsigned t = ticket;
    TR(4);
    if ((t & ~BAD_BIT) != (unsigned)(P.nchunk - 1)) return;
    __threadfence();
    if ((t & BAD_BIT) || bad_rows) { /* some chunk of this output saw a bad block */
        if (tid == 0) count(&P.status->outputs_invalid);
        return;
    }
    const float *base = P.chunk_states + o * P.nchunk * (3 * 512);
    if (P.uniform) {
        /* all chunks full and a power-of-two count: lanes merge complete subtrees */
        const int la = P.nchunk < P.lanes ? (int)P.nchunk : P.lanes;
        const int per = (int)(P.nchunk / la);
        if (lane < la) st = merge_chunks_tree(base, lane * per, per, q);
        merge_lanes(st, lane, la, q, smem);
    } else if (lane == 0) {
        /* general: canonical binary counter over chunk sizes */
        stv stack[STACK_MAX];
        long long sizes[STACK_MAX];
        int top = -1;
        for (long long k = 0; k < P.nchunk; k++) {
            int64_t s0, sz;
            kvc_chunk_of(P.nseg, P.ch, k, &s0, &sz);
            top++;
            stack[top] = st_load(base + k * (3 * 512), q);
            sizes[top] = sz;
            while (top >= 1 && sizes[top - 1] == sizes[top]) {
                st_merge(stack[top - 1], stack[top]);
                sizes[top - 1] *= 2;
                top--;
            }
        }
        for (int k = top - 1; k >= 0; k--) st_merge(stack[k], stack[k + 1]);
        st = stack[0];
    }
    TR(5);
    if (lane != 0) return;
    finish(P, inf, st, q, smem);
    TR(6);
}


/*
 * Windows of one segment (C <= 8, or C <= 4 with overlap: DeepSeek-V4's C4
 * compressor): one output is only 8 rows, so a CTA per output spent its life
 * in the dependent-load chain of its prologue.  Here a CTA of DG threads
 * takes K = P.small_k <= SMALL_K consecutive outputs: their index checks run
 * in parallel (thread k: output k), their 8 K row offsets are resolved in
 * parallel (one thread per row, each row's block checked), then the outputs
 * are reduced and finalised one after another, the next output's loads in
 * flight during the current one's finalisation.
 */
#define SMALL_K 32 /* outputs per CTA at most */
#ifndef KVC_CUDA_SMALL_MINB
#define KVC_CUDA_SMALL_MINB 3 /* small kernel: resident CTAs per SM asked of the compiler */
#endif
#define SMALL_MINB KVC_CUDA_SMALL_MINB

struct small_rows {
    long long voff[SMALL_K * KVC_SEG], soff[SMALL_K * KVC_SEG];
};

__global__ void __launch_bounds__(DG, SMALL_MINB) compress_small_kernel(const launch_params P) {
    __shared__ small_rows rt; /* rows of output k: 8k .. 8k+7           */
    __shared__ long long s_slot[SMALL_K], s_pc[SMALL_K], s_r[SMALL_K], s_p[SMALL_K], s_badg[SMALL_K];
    __shared__ int s_ok[SMALL_K], s_bad[SMALL_K], s_masked[SMALL_K];
    __shared__ float cbufs[2][512 + 8]; /* c and the finaliser's scratch, alternating per output */
    const kvc_args &a = P.a;
    const int q = threadIdx.x;
    const long long o0 = (long long)blockIdx.x * P.small_k;
    const int kn = (int)(a.num_outputs - o0 < P.small_k ? a.num_outputs - o0 : P.small_k);
    if (q < kn) {
        kvc_out_info inf;
        const long long o = o0 + q;
        const int chk = kvc_check_output(&a, o, &inf, 0);
        int ok = 0;
        if (chk != KVC_CHECK_NONE) {
            record_error(P.status, chk, o, inf.value);
            count(&P.status->outputs_invalid);
        } else if (inf.slot < 0) {
            count(&P.status->outputs_padding);
        } else {
            ok = 1;
        }
        s_ok[q] = ok;
        s_bad[q] = 0;
        s_masked[q] = 0;
        s_slot[q] = inf.slot;
        s_pc[q] = inf.pc;
        s_r[q] = inf.r;
        s_p[q] = inf.p;
    }
    __syncthreads();
    const long long C = a.compress_ratio;
    const int rows = (int)P.rows; /* <= 8 */
    for (int t = q; t < kn * KVC_SEG; t += DG) {
        const int k = t / KVC_SEG, i = t % KVC_SEG;
        rt.voff[t] = rt.soff[t] = -1;
        if (!s_ok[k] || i >= rows) continue;
        int vo, so;
        const long long pos = kvc_window_row(s_p[k], C, a.overlap == KVC_OVERLAP_ON, i, &vo, &so);
        if (pos < 0) { /* masked: value 0, score -Inf */
            s_masked[k] = 1;
            continue;
        }
        const long long blk = a.block_table[s_r[k] * a.block_table_stride + pos / a.block_size];
        if (blk < 0 || blk >= a.num_blocks) {
            if (atomicCAS(&s_bad[k], 0, 1) == 0) s_badg[k] = blk;
            continue;
        }
        const long long base = kvc_state_row_offset(&a, blk, pos);
        rt.voff[t] = base + vo;
        rt.soff[t] = base + so;
    }
    fin_in f;
    fin_load_weights(P, q, f);
    __syncthreads();
    /* outputs to reduce: ok and no bad block (uniform); the others report */
    auto next_live = [&](int k) {
        for (; k < kn; k++) {
            if (!s_ok[k]) continue;
            if (!s_bad[k]) return k;
            if (q == 0) {
                record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, o0 + k, s_badg[k]);
                count(&P.status->outputs_invalid);
            }
        }
        return kn;
    };
    /* 8 unmasked rows and 8-byte loads (all but a request's first windows):
     * straight-line loads, no per-row branches; the choice is per output,
     * the same for the whole CTA.  (Copying windows into shared memory with
     * cp.async two outputs ahead measured 13% slower: bench/NOTES.md.) */
    auto load = [&](int k, seg_data &x) {
        if (rows == KVC_SEG && P.vec && !s_masked[k]) {
            seg_load_full<true>(P, &rt, k * KVC_SEG, q, x); /* overlap: score halves not at +512 */
        } else {
            seg_load(P, &rt, k * KVC_SEG, rows, q, x);
        }
    };
    int written = 0, nonfinite = 0; /* thread 0's counts (bad: thread 0's return) */
    int k = next_live(0);
    seg_data x;
    if (k < kn) load(k, x);
    for (int b = 0; k < kn; b ^= 1) {
        float *cbuf = cbufs[b]; /* last used two outputs ago: every thread passed a barrier since */
        fin_load_cos_sin(P, s_pc[k], q, f);
        const stv st = seg_compute(x, rows);
        const int kk = next_live(k + 1);
        if (kk < kn) load(kk, x); /* in flight while k finalises */
#pragma unroll
        for (int j = 0; j < DPT; j++) cbuf[DPT * q + j] = KVC_DIV(st.n[j], st.d[j]);
        __syncthreads();
        if (q < 128) {
            float c[4];
#pragma unroll
            for (int j = 0; j < 4; j++) c[j] = cbuf[4 * q + j];
            const int bad = finalize(P, s_slot[k], c, q, cbuf + 512, f);
            written++;
            nonfinite += bad;
        }
        k = kk;
    }
    /* one atomic per CTA and counter, not one per output */
    if (q == 0 && written)
        atomicAdd(reinterpret_cast<unsigned long long *>(&P.status->outputs_written), (unsigned long long)written);
    if (q == 0 && nonfinite)
        atomicAdd(reinterpret_cast<unsigned long long *>(&P.status->outputs_nonfinite), (unsigned long long)nonfinite);
}

/* ---- host side --------------------------------------------------------- */

typedef struct {
    void *buf;
    size_t bytes;
} device_ws;

static pthread_mutex_t g_ws_lock = PTHREAD_MUTEX_INITIALIZER;
static device_ws g_ws[64];

static kvc_status cuda_fail(cudaError_t e, const char *what) {
    return kvc_fail(KVC_ERROR_DEVICE, "CUDA %s: %s", what, cudaGetErrorString(e));
}

extern "C" int kvc_cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" int kvc_cuda_is_device_pointer(const void *p) {
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

static long long pow2_floor(long long x) {
    long long p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

extern "C" kvc_status kvc_cuda_compress(const kvc_args *a, const kvc_exec *e, kvc_report *rep) {
    int dev = e->device;
    cudaError_t err;
    if (dev < 0) {
        if ((err = cudaGetDevice(&dev)) != cudaSuccess) return cuda_fail(err, "cudaGetDevice");
    } else if ((err = cudaSetDevice(dev)) != cudaSuccess) {
        return cuda_fail(err, "cudaSetDevice");
    }
    if (dev >= 64) return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "CUDA device %d >= 64", dev);
    cudaStream_t stream = (cudaStream_t)e->stream;
    if (rep) {
        rep->outputs_written = rep->outputs_padding = rep->outputs_nonfinite = -1;
        rep->device_async = 1;
    }
    launch_params P;
    memset(&P, 0, sizeof P);
    P.a = *a;
    const long long C = a->compress_ratio;
    P.rows = a->overlap == KVC_OVERLAP_ON ? 2 * C : C;
    P.nseg = (P.rows + KVC_SEG - 1) / KVC_SEG;
    const long long nout = a->num_outputs;
    /* chunk size ~ total segments / CHDIV: at most one wave of CTAs (at 2
     * per SM) where the window allows, so that a CTA's prologue and merge are
     * spread over long chunks (v13, CHDIV 264: 32k/65k-token cases 2-10%
     * faster than with four waves; v15, CHDIV 132: 32k-token cases 17%
     * faster than with two), but chunks of >= 4 segments, <= MAX_CH = 16
     * (2 lanes x 8), and <= 16 chunks per output (so the last CTA's merge
     * is the parallel, load-all-first one) */
    const long long total = nout * P.nseg;
    long long ch = pow2_floor(total / KVC_CUDA_CHDIV > 0 ? total / KVC_CUDA_CHDIV : 1);
    if (ch < 4) ch = 4;
    while (ch * 16 < P.nseg) ch *= 2;
    if (ch > MAX_CH) ch = MAX_CH;
    while (ch > 1 && ch > P.nseg) ch /= 2;
    long long L = ch < MAX_LANES ? ch : MAX_LANES;
    P.ch = ch;
    P.lanes = (int)L;
    P.nchunk = kvc_chunk_count(P.nseg, ch);
    P.uniform = P.nseg % ch == 0 && (P.nchunk & (P.nchunk - 1)) == 0 && P.nchunk <= 8 * L;
    P.vec = ((uintptr_t)a->state_cache % (4 * DPT) == 0) && a->state_stride_block % DPT == 0 &&
            a->state_stride_token % DPT == 0;
    P.fast = P.vec && a->overlap == KVC_OVERLAP_OFF;

    /* workspace: status word, tickets, chunk states */
    size_t st_bytes = 256, tk_bytes = ((size_t)nout * 4 + 255) & ~(size_t)255;
    size_t cs_bytes = P.nchunk > 1 ? (size_t)nout * (size_t)P.nchunk * 3 * 512 * 4 : 0;
    size_t need = st_bytes + tk_bytes + cs_bytes;
    pthread_mutex_lock(&g_ws_lock);
    device_ws *ws = &g_ws[dev];
    if (ws->bytes < need) {
        if (ws->buf) cudaFree(ws->buf);
        ws->buf = NULL;
        ws->bytes = 0;
        size_t grow = need + need / 4;
        if ((err = cudaMalloc(&ws->buf, grow)) != cudaSuccess) {
            pthread_mutex_unlock(&g_ws_lock);
            return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CUDA workspace of %zu bytes: %s", grow, cudaGetErrorString(err));
        }
        ws->bytes = grow;
    }
    char *buf = (char *)ws->buf;
    pthread_mutex_unlock(&g_ws_lock);
    P.status = e->device_status ? e->device_status : (kvc_device_status *)buf;
    P.tickets = (unsigned *)(buf + st_bytes);
    P.chunk_states = (float *)(buf + st_bytes + tk_bytes);
    /* one memset for the library's status word and the tickets (adjacent) */
    size_t zero = (e->device_status ? 0 : st_bytes) + (P.nchunk > 1 ? (size_t)nout * 4 : 0);
    if (e->device_status &&
        (err = cudaMemsetAsync(e->device_status, 0, sizeof(kvc_device_status), stream)) != cudaSuccess)
        return cuda_fail(err, "cudaMemsetAsync(status)");
    if (zero && (err = cudaMemsetAsync(e->device_status ? (void *)P.tickets : (void *)buf, 0, zero, stream)) !=
                    cudaSuccess)
        return cuda_fail(err, "cudaMemsetAsync(workspace)");
    if (nout == 0) return KVC_OK;
    if (P.nseg == 1 && DPT == 2) { /* one-segment windows: several outputs per CTA */
        /* K so that the grid is one full wave (SMALL_MINB CTAs per SM), or
         * waves of SMALL_K outputs per CTA when there are more outputs */
        static int sms[64];
        if (!sms[dev] && cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
            sms[dev] = 132;
        /* K balanced over whole waves: the fewest waves that K <= SMALL_K
         * allows, then the smallest K that fills them (32768 outputs: 3 waves
         * of K = 28, not 2.6 waves of K = 32 with a 60%-full last wave) */
        const long long slots = (long long)SMALL_MINB * sms[dev];
        const long long waves = (nout + slots * SMALL_K - 1) / (slots * SMALL_K);
        long long k = (nout + slots * waves - 1) / (slots * waves);
        P.small_k = (int)(k < 1 ? 1 : k > SMALL_K ? SMALL_K : k);
        const long long sb = (nout + P.small_k - 1) / P.small_k;
        if (sb > 0x7FFFFFFFLL)
            return kvc_fail(KVC_ERROR_BAD_SHAPE, "num_outputs / %d = %lld exceeds the CUDA grid", P.small_k, sb);
        compress_small_kernel<<<(unsigned)sb, DG, 0, stream>>>(P);
        if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
        return KVC_OK;
    }
    long long blocks = nout * P.nchunk;
    if (blocks > 0x7FFFFFFFLL)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "num_outputs * chunks = %lld exceeds the CUDA grid", blocks);
    size_t smem = (MAX_LANES * 3 * 512) * sizeof(float); /* >= 512 + 8 floats for the finaliser */
    /* every chunk kk = ch / L full segments on the fast path: a kernel with
     * only that body (1/5 of the code: fewer instruction-cache misses) */
    const int kf = P.fast && P.rows % KVC_SEG == 0 && P.nseg % ch == 0 ? (int)(ch / L) : 0;
    switch (KVC_CUDA_SPECIALIZE ? kf : 0) {
    case 1: compress_kernel<1><<<(unsigned)blocks, (unsigned)(DG * L), smem, stream>>>(P); break;
    case 2: compress_kernel<2><<<(unsigned)blocks, (unsigned)(DG * L), smem, stream>>>(P); break;
    case 4: compress_kernel<4><<<(unsigned)blocks, (unsigned)(DG * L), smem, stream>>>(P); break;
    case 8: compress_kernel<8><<<(unsigned)blocks, (unsigned)(DG * L), smem, stream>>>(P); break;
    case 16: compress_kernel<16><<<(unsigned)blocks, (unsigned)(DG * L), smem, stream>>>(P); break; /* DPT 1 */
    default: compress_kernel<0><<<(unsigned)blocks, (unsigned)(DG * L), smem, stream>>>(P); break;
    }
    if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
    return KVC_OK;
}

extern "C" kvc_status kvc_cuda_read_status_impl(const kvc_exec *e, kvc_device_status *out) {
    int dev = e && e->device >= 0 ? e->device : -1;
    cudaError_t err;
    if (dev < 0 && (err = cudaGetDevice(&dev)) != cudaSuccess) return cuda_fail(err, "cudaGetDevice");
    if (dev >= 64) return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "CUDA device %d >= 64", dev);
    const void *src = e && e->device_status ? (const void *)e->device_status : g_ws[dev].buf;
    if (!src) {
        memset(out, 0, sizeof *out);
        return KVC_OK;
    }
    cudaStream_t stream = e ? (cudaStream_t)e->stream : 0;
    if ((err = cudaMemcpyAsync(out, src, sizeof *out, cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
        return cuda_fail(err, "cudaMemcpyAsync(status)");
    if ((err = cudaStreamSynchronize(stream)) != cudaSuccess) return cuda_fail(err, "cudaStreamSynchronize");
    return KVC_OK;
}
