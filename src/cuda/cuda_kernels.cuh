/*
 * cuda_kernels.cuh -- the CUDA backend's device code, for one number of
 * dimensions per thread: cuda_backend.cu includes it once per DPT, each time
 * inside its own namespace with DPT defined (kvc_cuda_d1, kvc_cuda_d2).  The
 * main kernel (compress_kernel) is compiled for both DPTs (the host picks one
 * per call), the one-segment kernel (compress_small_kernel), the slice
 * kernels (cuda_slice.cuh) and the indexer's (cuda_indexer.cuh) for DPT = 2.  No
 * include guard on purpose; every macro it defines is undefined at the end.
 *
 * FASTNUM 1 compiles SPEC 8's FAST numerics (namespaces kvc_cuda_d1f,
 * kvc_cuda_d2f): the window reduction's exps by ex2.approx, its weighted sums
 * by fma; segments, tree order and finaliser unchanged.
 *
 * Needs: kvc_canon.h, kvc_check.h, kvc_general.h, kvc_internal.h, cuda_tuning.h,
 * launch_params and KVC_LD (cuda_backend.cu).
 */
#define DG (512 / DPT)         /* threads per lane                         */
#define MAX_LANES (DPT == 2 ? KVC_CUDA_LANES : 1) /* lanes per CTA          */
#define MAX_CHUNK_ROWS (8 * KVC_CUDA_MAX_CH)
#define STACK_MAX 48           /* chunk-merge stack depth (any S < 2^47)   */
#define BAD_BIT 0x80000000u
#define TREE_MAX (DPT == 1 ? 16 : 8) /* chunk states one thread merges at once  */

struct stv {
    float m[DPT], d[DPT], n[DPT];
};

/* The reduction's segment step and merge: SPEC 3, or SPEC 8's FAST form
 * (kvc_general.h's, the numerics fixed at compile time). */
__device__ __forceinline__ void red_step(float m, float s, float v, float *d, float *n) {
    kvc_gen_step(m, s, v, d, n, FASTNUM);
}
__device__ __forceinline__ float red_weight(float m, float s) { return kvc_gen_weight(m, s, FASTNUM); }
__device__ __forceinline__ void red_acc(float e, float v, float *d, float *n) { kvc_gen_acc(e, v, d, n, FASTNUM); }
__device__ __forceinline__ void red_merge(float *mA, float *dA, float *nA, float mB, float dB, float nB) {
    kvc_gen_merge(mA, dA, nA, mB, dB, nB, FASTNUM);
}

__device__ __forceinline__ void st_merge(stv &a, const stv &b) {
#pragma unroll
    for (int j = 0; j < DPT; j++) red_merge(&a.m[j], &a.d[j], &a.n[j], b.m[j], b.d[j], b.n[j]);
}


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
    const kvc_shape sh = kvc_shape_of(&a);
    const kvc_i32 *trow = a.block_table + inf.r * a.block_table_stride;
    const long long sdelta = kvc_score_delta(a.overlap == KVC_OVERLAP_ON, 512);
    for (int t = threadIdx.x; t < nrows; t += blockDim.x) {
        kvc_i64 blk;
        const long long off = kvc_row_lookup(&sh, trow, inf.p, r0 + t, &blk);
        if (off == KVC_ROW_BAD && atomicCAS(&rt->bad, 0, 1) == 0) rt->bad_g = blk;
        rt->voff[t] = off;
        rt->soff[t] = off < 0 ? off : off + sdelta;
    }
}

/* A segment's data for one thread: 8 rows x (value, score) x DPT dims. */
struct seg_data {
    float v[KVC_SEG][DPT], s[KVC_SEG][DPT];
};

/* State elements as binary32 (SPEC 10): floats, or with BF16 bf16 values
 * widened exactly (their bits in the high half).  Element offsets. */
template <bool BF16>
__device__ __forceinline__ float2 ld_state2(const float *base, long long off, int q) { /* elements 2q, 2q + 1 */
    if constexpr (BF16) {
        const unsigned short *b16 = reinterpret_cast<const unsigned short *>(base);
        const unsigned u = __ldcs(reinterpret_cast<const unsigned *>(b16 + off) + q);
        return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xFFFF0000u));
    } else {
        return KVC_LD(reinterpret_cast<const float2 *>(base + off) + q);
    }
}
template <bool BF16>
__device__ __forceinline__ float ld_state1(const float *base, long long i) {
    if constexpr (BF16) return __uint_as_float((unsigned)reinterpret_cast<const unsigned short *>(base)[i] << 16);
    else return base[i];
}

/* SPEC 10's score bias on loaded rows i < n: the element offset bo(i) of
 * row i's bias (< 0: a masked row, none), thread q's dims. */
template <class BO>
__device__ __forceinline__ void seg_add_bias(const float *bias, int n, int q, seg_data &x, BO bo) {
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        const long long b = i < n ? bo(i) : -1;
        if (b >= 0)
#pragma unroll
            for (int j = 0; j < DPT; j++)
                x.s[i][j] = KVC_ADD(x.s[i][j], __ldg(bias + b + DPT * q + j));
    }
}

/* The same with 8-byte bias pairs (bias 8-byte aligned, even offsets;
 * DPT 2), a load per row, no row masked (a masked row's offset points at
 * zeros: -Inf + 0 = -Inf); rows i < n.  SHARED: bias points into shared
 * memory. */
template <bool SHARED = false, class BO>
__device__ __forceinline__ void seg_add_bias2(const float *bias, int q, seg_data &x, BO bo, int n = KVC_SEG) {
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        if (i >= n) continue;
        const float2 *b = reinterpret_cast<const float2 *>(bias + bo(i)) + q;
        const float2 v = SHARED ? *b : __ldg(b);
        x.s[i][0] = KVC_ADD(x.s[i][0], v.x);
        x.s[i][DPT - 1] = KVC_ADD(x.s[i][DPT - 1], v.y);
    }
}

/* Issue the loads of local rows [lr, lr + n) (no use of the data yet).
 * RT: any table with voff[] / soff[] (row_table, small_rows).  BF16: a
 * bf16 state (DPT 2). */
template <bool BF16 = false, class RT>
__device__ __forceinline__ void seg_load(const launch_params &P, const RT *rt, int lr, int n, int q, seg_data &x) {
    static_assert(!BF16 || DPT == 2, "bf16 rows: 2 dims per thread");
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
            } else if (DPT == 2 && P.pl.vec) {
                const float2 a = ld_state2<BF16>(base, vo, q), b = ld_state2<BF16>(base, so, q);
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
                    x.v[i][j] = ld_state1<BF16>(base, vo + DPT * q + j);
                    x.s[i][j] = ld_state1<BF16>(base, so + DPT * q + j);
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
            for (int j = 0; j < DPT; j++) red_step(st.m[j], x.s[i][j], x.v[i][j], &st.d[j], &st.n[j]);
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
    return (int)((P.pl.rows - g0) < KVC_SEG ? (P.pl.rows - g0) : KVC_SEG);
}

/* The common case, as straight-line code: 8 rows, none masked (a bad block
 * skipped the output), 8-byte loads.  No per-row branches or predicates, so
 * all 16 loads issue back to back (the generic path spent ~25 instructions
 * per row on them).  Scores at value + 512 (no overlap), or, with
 * SCORES_FROM_TABLE, at the table's soff (overlap rows: the small kernel). */
template <bool SCORES_FROM_TABLE = false, class RT>
__device__ __forceinline__ void seg_load_row(const launch_params &P, const RT *rt, int lr, int q, seg_data &x, int i) {
    const float *base = P.a.state_cache;
    const long long vo = rt->voff[lr], so = SCORES_FROM_TABLE ? rt->soff[lr] : vo + 512;
    if constexpr (DPT == 2) {
        const float2 a = ld_state2<false>(base, vo, q), b = ld_state2<false>(base, so, q);
        x.v[i][0] = a.x;
        x.v[i][DPT - 1] = a.y;
        x.s[i][0] = b.x;
        x.s[i][DPT - 1] = b.y;
    } else {
        x.v[i][0] = __ldcs(base + vo + q);
        x.s[i][0] = __ldcs(base + so + q);
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
 * path below prevented that.
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
         * reduced measured slower) */
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
 * unrolled body per kk; a runtime loop over segments measured slower.
 * Subtrees of full, aligned segments without
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
    if (P.fast && (sg + kk) * KVC_SEG <= P.pl.rows) { /* all kk segments full: no branches */
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
    default: return subtree<16>(P, rt, r0, sg, q); /* kk = csize / lanes <= KVC_CUDA_MAX_CH */
    }
}

/* The status word a kernel counts into: the call's, P.status; where
 * P.records is set (the indexer, one-segment and fused kernels), this CTA's
 * own in shared memory, stored into P.records[CTA] at the end (status_end;
 * the decode kernel, an output a CTA, writes its record from registers).
 * So those kernels need no memset of the call's word before the launch: each
 * CTA writes its record whole, CTA 0 marks the call's word as a header
 * (KVC_CUDA_RECORDS, the number of records), and cuda_read_status sums the
 * records -- the same on every replay of a CUDA graph. */
__device__ __forceinline__ kvc_device_status *status_of(const launch_params &P) {
    __shared__ kvc_device_status s_cta;
    return P.records ? &s_cta : P.status;
}
/* Before a records kernel's first status write (all threads): this CTA's
 * record zeroed. */
__device__ __forceinline__ void status_begin(const launch_params &P) {
    if (!P.records) return;
    if (threadIdx.x < sizeof(kvc_device_status) / 8)
        reinterpret_cast<long long *>(status_of(P))[threadIdx.x] = 0;
    __syncthreads();
}
/* The call's word as the header of gridDim.x records (one thread). */
__device__ __forceinline__ void status_header(const launch_params &P) {
    kvc_device_status h = {};
    h.status = KVC_CUDA_RECORDS;
    h.value = gridDim.x;
    *P.status = h;
}
/* After its last (all threads): the record stored, and by CTA 0 the header. */
__device__ __forceinline__ void status_end(const launch_params &P) {
    if (!P.records) return;
    __syncthreads();
    if (threadIdx.x == 0) P.records[blockIdx.x] = *status_of(P);
    if (threadIdx.x == 0 && blockIdx.x == 0) status_header(P);
}

/* The call's first index error in status word st, if none is recorded yet:
 * output o of this set (kvc_compress_many: numbered from P.pl.out_base). */
__device__ void record_error(const launch_params &P, kvc_device_status *st, int check, long long o, long long value) {
    if (atomicCAS(&st->status, 0, (int)KVC_ERROR_INDEX_OUT_OF_RANGE) == 0) {
        st->check = check;
        st->output = P.pl.out_base + o;
        st->value = value;
    }
}

__device__ void count(int64_t *field) { atomicAdd(reinterpret_cast<unsigned long long *>(field), 1ull); }

/* After kvc_check_output(o) gave chk and inf: 1 when the output is skipped
 * (an index error, recorded and counted in st, or padding, counted) -- the
 * counts by the one caller that has `me` set -- else 0. */
__device__ int skip_output(const launch_params &P, kvc_device_status *st, int chk, long long o,
                           const kvc_out_info &inf, int me) {
    if (chk != KVC_CHECK_NONE) {
        if (me) {
            record_error(P, st, chk, o, inf.value);
            count(&st->outputs_invalid);
        }
        return 1;
    }
    if (inf.slot < 0) {
        if (me) count(&st->outputs_padding);
        return 1;
    }
    return 0;
}

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
    for (int t = 0; t < 2; t++) kvc_cos_sin(cs, il, 2 * (q - 112) + t, &f.cs[2 * t], &f.cs[2 * t + 1]);
}

/*
 * The RMS sum of c[512] in the canonical pairwise tree, on threads 0..127
 * together (named barrier 1), thread q holding dims 4q..4q+3: 4 leaves per
 * thread, warp shuffles (a + b == b + a, so the shuffle order does not
 * matter), then the 4 warp sums.  red: 4 floats of shared memory.
 */
__device__ float rms_sum_128(const float c[4], int q, float *red) {
    float sq[4];
#pragma unroll
    for (int j = 0; j < 4; j++) sq[j] = KVC_MUL(c[j], c[j]);
    float ss = KVC_ADD(KVC_ADD(sq[0], sq[1]), KVC_ADD(sq[2], sq[3]));
#pragma unroll
    for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(0xffffffffu, ss, k));
    if ((q & 31) == 0) red[q >> 5] = ss;
    asm volatile("bar.sync 1, 128;");
    return KVC_ADD(KVC_ADD(red[0], red[1]), KVC_ADD(red[2], red[3]));
}

/* A slot's byte offsets in kv_cache: its payload and its scales. */
struct kv_slot {
    int64_t po, so;
};
__device__ __forceinline__ kv_slot slot_at(const launch_params &P, long long slot) {
    kv_slot s;
    kvc_slot_offsets(&P.a, slot, &s.po, &s.so);
    return s;
}

/* The FP8 codes of z[0..3] as one little-endian word: two paired conversions. */
__device__ __forceinline__ uint32_t fp8_word4(const float z[4], float inv) {
    return (uint32_t)kvc_fp8_code2(z[0], z[1], inv) | (uint32_t)kvc_fp8_code2(z[2], z[3], inv) << 16;
}

/*
 * Finalise one output from c[512] and its RMS sum ss into slot `at`:
 * called by threads 0..127 together, thread q holding dims 4q..4q+3.  NOPE
 * groups of 16 threads (q < 112), RoPE pairs on q >= 112.  Each thread's
 * bytes go out as whole 32-bit words where the payload is 4-byte aligned
 * (one store where there were four; the same bytes), else byte by byte.
 * @return (thread 0) 1 when the output went to the non-finite slot.  The
 * caller counts it in the status word.
 */
__device__ int finalize(const launch_params &P, kv_slot at, const float c[4], float ss, int q, const fin_in &f) {
    const kvc_args &a = P.a;
    int bad = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) bad |= kvc_nonfinite(c[j]);
    const float rr = kvc_rms_scale(ss, a.rms_norm_eps);
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        y[j] = kvc_rms_apply(c[j], rr, f.w[j]);
        bad |= kvc_nonfinite(y[j]);
    }
    const int fp8 = a.nope_format == KVC_NOPE_FP8_E4M3;
    uint8_t *payload = a.kv_cache + at.po;
    uint8_t *scales = a.kv_cache + at.so;
    uint32_t wd[2] = {0u, 0u}; /* this thread's payload bytes, little-endian words */
    int e = 0;
    /* bf16 and group amax on all 128 threads: the shuffles must not diverge
     * (xor < 16 stays inside a 16-thread group; q >= 112 is RoPE, unused). */
    float z[4], amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int b = kvc_nope_bf16(y[j], &z[j]);
        if (q < 112) bad |= b;
        amax = fmaxf(amax, fabsf(z[j])); /* NaN only where bad is set */
    }
#pragma unroll
    for (int k = 1; k < 16; k <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, k));
    if (q < 112) { /* NOPE: groups of 16 threads, 4 codes */
        e = kvc_group_exponent(amax, fp8);
        if (fp8) {
            wd[0] = fp8_word4(z, kvc_pow2(-e));
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) wd[0] |= (uint32_t)kvc_nope_code(z[j], e, 0) << (8 * j);
        }
    } else { /* RoPE: 2 pairs, bf16 u' then w' */
#pragma unroll
        for (int t = 0; t < 2; t++) {
            kvc_u16 hu, hw;
            bad |= kvc_rope_bf16(y[2 * t], y[2 * t + 1], f.cs[2 * t], f.cs[2 * t + 1], &hu, &hw);
            wd[t] = (uint32_t)hu | (uint32_t)hw << 16;
        }
    }
    /* block-wide OR over the 128 finalising threads */
    bad = or_across_128(bad);
    const int nw = q < 112 ? 1 : 2;
    /* the non-finite slot: NOPE 0, RoPE the bf16 quiet NaN in both halves */
    const uint32_t fill = q < 112 ? 0u : (uint32_t)KVC_BF16_QNAN << 16 | KVC_BF16_QNAN;
    uint8_t *dst = q < 112 ? payload + 4 * q : payload + 448 + 8 * (q - 112);
    const int aligned = ((uintptr_t)payload & 3) == 0;
#pragma unroll
    for (int t = 0; t < 2; t++) {
        if (t >= nw) break;
        const uint32_t v = bad ? fill : wd[t];
        if (aligned) {
            *reinterpret_cast<uint32_t *>(dst + 4 * t) = v;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) dst[4 * t + j] = (uint8_t)(v >> (8 * j));
        }
    }
    if (q < 112 && (q & 15) == 0) scales[q >> 4] = kvc_scale_byte(e, bad);
    if (q == 0) scales[7] = 0;
    return bad;
}

/* finalize, and the output counted (written, non-finite) in the status
 * word.  The written count first: its atomic's round trip then overlaps the
 * finalisation instead of holding the CTA after it (measured on the OpenCL
 * wide kernel). */
__device__ __forceinline__ void finalize_counted(const launch_params &P, long long slot, const float c[4], float ss,
                                                 int q, const fin_in &f) {
    if (q == 0) count(&P.status->outputs_written);
    const int bad = finalize(P, slot_at(P, slot), c, ss, q, f);
    if (q == 0 && bad) count(&P.status->outputs_nonfinite);
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

/* acc[0] = acc[0 .. n) merged in tree order (n a power of two <= N). */
template <int N>
__device__ __forceinline__ void merge_tree(stv (&acc)[N], int n) {
#pragma unroll
    for (int w = 1; w < N; w *= 2)
#pragma unroll
        for (int k = 0; k + w < N; k += 2 * w)
            if (k + w < n) st_merge(acc[k], acc[k + w]);
}

/* Merge n consecutive chunk states (a complete subtree, n a power of two
 * <= TREE_MAX): all loads are issued first, then the tree is merged in registers. */
__device__ stv merge_chunks_tree(const float *base, long long k0, int n, int q) {
    stv acc[TREE_MAX];
#pragma unroll
    for (int k = 0; k < TREE_MAX; k++)
        if (k < n) acc[k] = st_load(base + (k0 + k) * (3 * 512), q);
    merge_tree(acc, n);
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

/* c = num / den of lane 0's state, handed to the 128-thread finaliser;
 * f: the finaliser's inputs, loaded by the caller (fin_load_*).  COUNT: the
 * output counted in the status word here; else @return (thread 0) 1 when
 * it went to the non-finite slot, for the caller to count. */
template <bool COUNT = true>
__device__ int finish_loaded(const launch_params &P, const kvc_out_info &inf, const stv &st, int q, float *smem,
                             const fin_in &f) {
    /* lane-0 threads (q < DG) write c, the first 128 read 4 each */
#pragma unroll
    for (int j = 0; j < DPT; j++) smem[DPT * q + j] = KVC_DIV(st.n[j], st.d[j]);
    asm volatile("bar.sync 2, %0;" ::"r"(DG));
    if (q >= 128) return 0;
    float c[4];
#pragma unroll
    for (int j = 0; j < 4; j++) c[j] = smem[4 * q + j];
    const float ss = rms_sum_128(c, q, smem + 512);
    if (!COUNT) return finalize(P, slot_at(P, inf.slot), c, ss, q, f);
    finalize_counted(P, inf.slot, c, ss, q, f);
    return 0;
}
__device__ void finish(const launch_params &P, const kvc_out_info &inf, const stv &st, int q, float *smem) {
    fin_in f;
    fin_load_weights(P, q, f);
    fin_load_cos_sin(P, inf.pc, q, f);
    finish_loaded(P, inf, st, q, smem, f);
}

template <int KF>
__global__ void __launch_bounds__(DG *MAX_LANES, KVC_CUDA_MINB) compress_kernel(const launch_params P) {
    extern __shared__ float smem[]; /* [MAX_LANES][3][512] states; finaliser scratch */
    __shared__ row_table rt;
    __shared__ unsigned ticket;
    const int tid = threadIdx.x, q = tid % DG, lane = tid / DG;
    const long long o = blockIdx.x / P.pl.nchunk, j = blockIdx.x % P.pl.nchunk;

    kvc_out_info inf;
    if (skip_output(P, P.status, kvc_check_output(&P.a, o, &inf, 0), o, inf, j == 0 && tid == 0)) return;
    int64_t cstart, csize;
    kvc_chunk_of(P.pl.nseg, P.pl.ch, j, &cstart, &csize);
    const int active = (int)(csize < P.lanes ? csize : P.lanes); /* lanes with work */
    const long long kk = csize / active;                        /* segments per lane */

    if (tid == 0) rt.bad = 0;
    __syncthreads();
    const long long r0 = cstart * KVC_SEG;
    const long long rend = (cstart + csize) * KVC_SEG < P.pl.rows ? (cstart + csize) * KVC_SEG : P.pl.rows;
    fill_rows(P, inf, r0, (int)(rend - r0), &rt);
    __syncthreads();
    const int bad_rows = rt.bad;
    if (bad_rows && tid == 0) record_error(P, P.status, KVC_CHECK_PHYSICAL_BLOCK, o, rt.bad_g);

    stv st;
    if (!bad_rows) {
        if (lane < active) st = subtree_rt<KF>(P, &rt, r0, cstart + lane * kk, kk, q);
        merge_lanes(st, lane, active, q, smem);
    }
    if (P.pl.nchunk == 1) {
        if (bad_rows) {
            if (tid == 0) count(&P.status->outputs_invalid);
            return;
        }
        if (lane != 0) return;
        finish(P, inf, st, q, smem);
        return;
    }
    /* publish the chunk state; the last CTA of the output merges them */
    if (lane == 0 && !bad_rows) st_store(st, P.chunk_states + (o * P.pl.nchunk + j) * (3 * 512), q);
    __threadfence();
    __syncthreads();
    if (tid == 0) { /* the bad mark or-ed in before the count: a sum of two marks would carry out of the bit */
        if (bad_rows) atomicOr(&P.tickets[o], BAD_BIT);
        ticket = atomicAdd(&P.tickets[o], 1u);
    }
    __syncthreads();
    const unsigned t = ticket;
    if ((t & ~BAD_BIT) != (unsigned)(P.pl.nchunk - 1)) return;
    __threadfence();
    if ((t & BAD_BIT) || bad_rows) { /* some chunk of this output saw a bad block */
        if (tid == 0) count(&P.status->outputs_invalid);
        return;
    }
    const float *base = P.chunk_states + o * P.pl.nchunk * (3 * 512);
    if (P.uniform) {
        /* all chunks full and a power-of-two count: lanes merge complete subtrees */
        const int la = P.pl.nchunk < P.lanes ? (int)P.pl.nchunk : P.lanes;
        const int per = (int)(P.pl.nchunk / la);
        if (lane < la) st = merge_chunks_tree(base, lane * per, per, q);
        merge_lanes(st, lane, la, q, smem);
    } else if (lane == 0) {
        /* general: canonical binary counter over chunk sizes */
        stv stack[STACK_MAX];
        long long sizes[STACK_MAX];
        int top = -1;
        for (long long k = 0; k < P.pl.nchunk; k++) {
            int64_t s0, sz;
            kvc_chunk_of(P.pl.nseg, P.pl.ch, k, &s0, &sz);
            top++;
            stack[top] = st_load(base + k * (3 * 512), q);
            sizes[top] = sz;
#define CUDA_MERGE(l, r) st_merge(stack[l], stack[r])
            KVC_TREE_PUSH(sizes, top, CUDA_MERGE);
        }
        KVC_TREE_FOLD(top, CUDA_MERGE);
#undef CUDA_MERGE
        st = stack[0];
    }
    if (lane != 0) return;
    finish(P, inf, st, q, smem);
}

#if DPT == 2 /* the one-segment kernel is written for 2 dims per thread */
/*
 * Windows of one segment (C <= 8, or C <= 4 with overlap: DeepSeek-V4's C4
 * compressor): one output is only 8 rows, so a CTA per output spent its life
 * in the dependent-load chain of its prologue.  Here a CTA of DG threads
 * takes K = P.pl.small_k <= KVC_CUDA_SMALL_K consecutive outputs: their index checks run
 * in parallel (thread k: output k), their 8 K row offsets are resolved in
 * parallel (one thread per row, each row's block checked), then the outputs
 * are reduced and finalised one after another, the next output's loads in
 * flight during the current one's finalisation.
 */
#define SMALL_MINB KVC_CUDA_SMALL_MINB
/* resident CTAs per SM a variant asks: EXACT with a bf16 state,
 * KVC_CUDA_SMALL_MINB16 (its raw rows leave room for more warps to hide the
 * exact exp's latency) */
__host__ __device__ constexpr int small_minb(bool bf16) {
    return bf16 && !FASTNUM ? KVC_CUDA_SMALL_MINB16 : SMALL_MINB;
}

/* A window's bf16 rows for one thread as loaded (a 4-byte pair of dims a
 * row and half), widened where they are used (seg_widen16): widened right
 * after the load, the thread stalled on the next output's loads before its
 * finalisation instead of during it.  Masked: 0 and -Inf, exact in bf16. */
struct seg_raw16 {
    unsigned v[KVC_SEG], s[KVC_SEG];
};
template <class RT>
__device__ __forceinline__ void seg_load_raw16(const launch_params &P, const RT *rt, int lr, int n, bool full, int q,
                                               seg_raw16 &x) {
    const unsigned short *h = reinterpret_cast<const unsigned short *>(P.a.state_cache);
    if (full) { /* 8 unmasked rows, 4-byte loads: straight-line, thread q's pair of dims from hq */
        const unsigned short *hq = h + 2 * q;
        asm("" : "+l"(hq)); /* opaque: keeps each row's address one shifted add from hq */
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) {
            x.v[i] = __ldcs(reinterpret_cast<const unsigned *>(hq + rt->voff[lr + i]));
            x.s[i] = __ldcs(reinterpret_cast<const unsigned *>(hq + rt->soff[lr + i]));
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        if (i >= n) continue;
        const long long vo = rt->voff[lr + i], so = rt->soff[lr + i];
        if (vo < 0) {
            x.v[i] = 0u;
            x.s[i] = 0xFF80FF80u;
        } else if (P.pl.vec) {
            x.v[i] = __ldcs(reinterpret_cast<const unsigned *>(h + vo) + q);
            x.s[i] = __ldcs(reinterpret_cast<const unsigned *>(h + so) + q);
        } else {
            x.v[i] = h[vo + 2 * q] | (unsigned)h[vo + 2 * q + 1] << 16;
            x.s[i] = h[so + 2 * q] | (unsigned)h[so + 2 * q + 1] << 16;
        }
    }
}
__device__ __forceinline__ void seg_widen16(const seg_raw16 &r, seg_data &x) {
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        x.v[i][0] = __uint_as_float(r.v[i] << 16);
        x.v[i][DPT - 1] = __uint_as_float(r.v[i] & 0xFFFF0000u);
        x.s[i][0] = __uint_as_float(r.s[i] << 16);
        x.s[i][DPT - 1] = __uint_as_float(r.s[i] & 0xFFFF0000u);
    }
}
/* Rows as binary32: x itself, or bf16 rows widened into t. */
__device__ __forceinline__ seg_data &seg_as_f32(seg_data &x, seg_data &) { return x; }
__device__ __forceinline__ seg_data &seg_as_f32(const seg_raw16 &r, seg_data &t) {
    seg_widen16(r, t);
    return t;
}
/* The rows the one-segment kernel holds per output: binary32, or bf16 as loaded. */
template <bool BF16> struct small_buf {
    typedef seg_data T;
};
template <> struct small_buf<true> {
    typedef seg_raw16 T;
};

struct small_rows {
    long long voff[KVC_CUDA_SMALL_K * KVC_SEG], soff[KVC_CUDA_SMALL_K * KVC_SEG];
    union { /* score_bias: the row's bias offset, in global memory (-1: none) or in a small_bias */
        long long g[KVC_CUDA_SMALL_K * KVC_SEG];
        int s[KVC_CUDA_SMALL_K * KVC_SEG];
    } boff;
};
/* The score bias copied into shared memory: its rows (C rows of 1024 floats
 * with overlap, C <= 4, or of 512, C <= 8), then a row of zeros, a masked
 * row's (-Inf + 0 = -Inf). */
#define SMALL_BIAS_ZERO (KVC_SEG * 512)
struct small_bias {
    alignas(16) float rows[SMALL_BIAS_ZERO + 512];
};

/* BF16: a bf16 state (SPEC 10).  BIAS: a score bias is added where
 * P.a.score_bias is set, read from sb where not NULL (the whole bias tensor
 * of a one-segment window, copied in once per CTA), else from global memory. */
template <bool BF16, bool BIAS>
__device__ __forceinline__ void small_body(const launch_params &P, unsigned cta, small_bias *sb) {
    __shared__ small_rows rt; /* rows of output k: 8k .. 8k+7           */
    __shared__ kv_slot s_at[KVC_CUDA_SMALL_K];
    __shared__ long long s_pc[KVC_CUDA_SMALL_K], s_r[KVC_CUDA_SMALL_K], s_p[KVC_CUDA_SMALL_K], s_badg[KVC_CUDA_SMALL_K];
    __shared__ int s_ok[KVC_CUDA_SMALL_K], s_bad[KVC_CUDA_SMALL_K], s_masked[KVC_CUDA_SMALL_K];
    __shared__ int s_live[KVC_CUDA_SMALL_K], s_wn[DG / 32], s_nlive; /* the outputs to reduce */
    __shared__ float cbufs[2][512 + 8]; /* c and the finaliser's scratch, alternating per output */
    const kvc_args &a = P.a;
    kvc_device_status *const st = status_of(P);
    const int q = threadIdx.x;
    const long long o0 = (long long)cta * P.pl.small_k;
    const int kn = (int)(a.num_outputs - o0 < P.pl.small_k ? a.num_outputs - o0 : P.pl.small_k);
    if (q < kn) {
        kvc_out_info inf;
        const long long o = o0 + q;
        const int chk = kvc_check_output(&a, o, &inf, 0);
        int ok = !skip_output(P, st, chk, o, inf, 1);
        s_ok[q] = ok;
        s_bad[q] = 0;
        s_masked[q] = 0;
        if (ok) s_at[q] = slot_at(P, inf.slot); /* once per output, not in each finalising thread */
        s_pc[q] = inf.pc;
        s_r[q] = inf.r;
        s_p[q] = inf.p;
    }
    __syncthreads();
    /* the row lookup written out here, not kvc_row_lookup: through the
     * shared function this kernel measured slower */
    const long long C = a.compress_ratio;
    const int rows = (int)P.pl.rows; /* <= 8 */
    const int bw = a.overlap == KVC_OVERLAP_ON ? 1024 : 512; /* a bias row's floats */
    const int cached = BIAS && a.score_bias && sb;
    if (cached) {
        for (int t = q; t < C * bw; t += DG)
            sb->rows[t] = __ldg(a.score_bias + (t / bw) * a.score_bias_stride + t % bw);
        for (int t = q; t < 512; t += DG) sb->rows[SMALL_BIAS_ZERO + t] = 0.0f;
    }
    for (int t = q; t < kn * KVC_SEG; t += DG) {
        const int k = t / KVC_SEG, i = t % KVC_SEG;
        rt.voff[t] = rt.soff[t] = -1;
        if (cached) rt.boff.s[t] = SMALL_BIAS_ZERO;
        else rt.boff.g[t] = -1;
        if (!s_ok[k] || i >= rows) continue;
        int vo, so;
        const long long pos = kvc_window_row(s_p[k], C, a.overlap == KVC_OVERLAP_ON, 512, i, &vo, &so);
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
        if (cached)
            rt.boff.s[t] = (int)kvc_bias_offset(pos, C, bw, so, a.overlap == KVC_OVERLAP_ON, 512);
        else if (BIAS && a.score_bias)
            rt.boff.g[t] = kvc_bias_offset(pos, C, a.score_bias_stride, so, a.overlap == KVC_OVERLAP_ON, 512);
    }
    fin_in f;
    fin_load_weights(P, q, f);
    __syncthreads();
    /* the outputs to reduce (ok, no bad block) in order, each as 2k + full
     * (full: 8 unmasked rows and 8-byte loads, all but a request's first
     * windows: straight-line loads and reductions without row guards); an
     * output with a bad block is reported by its own thread */
    {
        const int ok = q < kn && s_ok[q], live = ok && !s_bad[q];
        if (ok && !live) {
            record_error(P, st, KVC_CHECK_PHYSICAL_BLOCK, o0 + q, s_badg[q]);
            count(&st->outputs_invalid);
        }
        const unsigned m = __ballot_sync(0xFFFFFFFFu, live);
        if ((q & 31) == 0) s_wn[q >> 5] = __popc(m);
        __syncthreads();
        int at = __popc(m & ((1u << (q & 31)) - 1));
        for (int w = 0; w < (q >> 5); w++) at += s_wn[w];
        if (live) s_live[at] = 2 * q + (rows == KVC_SEG && P.pl.vec && !s_masked[q]);
        if (q == DG - 1) s_nlive = at + live;
        __syncthreads();
    }
    /* (Copying windows into shared memory with cp.async two outputs ahead
     * measured slower.) */
    typedef typename small_buf<BF16>::T buf;
    auto load = [&](int e, buf &x) {
        const int k = e >> 1;
        if constexpr (BF16) {
            seg_load_raw16(P, &rt, k * KVC_SEG, rows, e & 1, q, x);
        } else if (e & 1) {
            seg_load_full<true>(P, &rt, k * KVC_SEG, q, x); /* overlap: score halves not at +512 */
        } else {
            seg_load(P, &rt, k * KVC_SEG, rows, q, x);
        }
    };
    int written = 0, nonfinite = 0; /* thread 0's counts (bad: thread 0's return) */
    const int nlive = s_nlive;
    buf xb;
    if (nlive) load(s_live[0], xb);
    for (int i = 0, b = 0; i < nlive; i++, b ^= 1) {
        const int e = s_live[i], k = e >> 1;
        float *cbuf = cbufs[b]; /* last used two outputs ago: every thread passed a barrier since */
        fin_load_cos_sin(P, s_pc[k], q, f);
        const auto reduce = [&](seg_data &x, int n) {
            if (cached)
                seg_add_bias2<true>(sb->rows, q, x, [&](int r) { return rt.boff.s[k * KVC_SEG + r]; }, n);
            else if (BIAS && a.score_bias)
                seg_add_bias(a.score_bias, n, q, x, [&](int r) { return rt.boff.g[k * KVC_SEG + r]; });
            return seg_compute(x, n);
        };
        seg_data xw, &x = seg_as_f32(xb, xw); /* (bf16: widened here, as the rows are used) */
        const stv st = e & 1 ? reduce(x, KVC_SEG) : reduce(x, rows);
        if (i + 1 < nlive) load(s_live[i + 1], xb); /* in flight while k finalises */
#pragma unroll
        for (int j = 0; j < DPT; j++) cbuf[DPT * q + j] = KVC_DIV(st.n[j], st.d[j]);
        __syncthreads();
        if (q < 128) {
            float c[4];
#pragma unroll
            for (int j = 0; j < 4; j++) c[j] = cbuf[4 * q + j];
            const int bad = finalize(P, s_at[k], c, rms_sum_128(c, q, cbuf + 512), q, f);
            written++;
            nonfinite += bad;
        }
    }
    /* one atomic per CTA and counter, not one per output */
    if (q == 0 && written)
        atomicAdd(reinterpret_cast<unsigned long long *>(&st->outputs_written), (unsigned long long)written);
    if (q == 0 && nonfinite)
        atomicAdd(reinterpret_cast<unsigned long long *>(&st->outputs_nonfinite), (unsigned long long)nonfinite);
}
template <bool BF16, bool BIAS>
__global__ void __launch_bounds__(DG, small_minb(BF16)) compress_small_kernel(const launch_params P) {
    status_begin(P);
    if constexpr (BIAS) {
        __shared__ small_bias sb;
        small_body<BF16, true>(P, blockIdx.x, &sb);
    } else {
        small_body<BF16, false>(P, blockIdx.x, nullptr);
    }
    status_end(P);
}
#endif

#if DPT == 2
#include "cuda_slice.cuh"
#include "cuda_indexer.cuh"
#include "cuda_decode.cuh"

/* kvc_compress_many's sets of one-segment windows (a CSA layer's main and
 * indexer compressors in decode) as one launch: set s takes CTAs
 * M.end[s - 1] .. M.end[s] - 1, each running the one-segment kernel's body
 * (head width 512) or the indexer kernel's (128).  BF16: every set's state. */
template <bool BF16>
__global__ void __launch_bounds__(DG, IDX_MINB) segment1_many_kernel(const many_params M) {
    int s = 0;
    while (blockIdx.x >= M.end[s]) s++;
    const unsigned cta = blockIdx.x - (s ? M.end[s - 1] : 0);
    status_begin(M.p[0]); /* (every set's status pointers the same) */
    if (M.p[s].a.head_dim == 128) indexer_body<BF16, true>(M.p[s], cta);
    else small_body<BF16, true>(M.p[s], cta, nullptr); /* (a bias read from global memory) */
    status_end(M.p[0]);
}
#endif

/* what the host needs of this DPT */
constexpr int kDG = DG, kMaxLanes = MAX_LANES, kTreeMax = TREE_MAX;
#if DPT == 2
constexpr int kSmallK = KVC_CUDA_SMALL_K, kSliceRec = SLICE_REC;
constexpr int kIdxWarps = IDX_WARPS, kIdxK = IDX_K, kIdxKSolo = IDX_K_SOLO;
#undef IDX_WARPS
#undef IDX_K
#undef IDX_K_SOLO
#undef IDX_MINB
#undef IDX_MINB16
#undef SMALL_MINB
#endif
#undef DG
#undef MAX_LANES
#undef MAX_CHUNK_ROWS
#undef STACK_MAX
#undef BAD_BIT
#undef TREE_MAX
