/*
 * cuda_slice.cuh -- the slice kernels: windows of 16, 32 or 64 full segments
 * without overlap (C = 128, 256, 512), rows 8-byte aligned.  Included by
 * cuda_kernels.cuh for DPT = 2 (exact and FAST); uses its stv, seg_load,
 * seg_compute, st_merge, fin_load_*, finish_loaded, finalize, skip_output,
 * record_error and count.  The host takes them for every such call.
 *
 * Work: a CTA of 256 threads (8 warps) reduces one (output, 16-segment
 * chunk, 64-dim slice): warp w takes the chunk's segments 2w and 2w + 1,
 * lane l the dims 64 sl + 2l and + 1.  The warp finds its 16 rows and
 * checks their physical blocks (a power-of-two block size and aligned
 * segments: two table entries for the whole warp; else lanes 0-15 look up
 * one row each), then every lane issues its 32
 * loads at once (from each segment's first row and the token stride where
 * its rows are evenly strided, else through a per-warp row table); the two
 * segment states merge in registers, the 8 warp states in tree order through
 * shared memory, and the CTA stores what the finisher needs and exits: no
 * CTA ever waits for another.  Each output's first CTA also prefetches the
 * index chain of the output a resident wave ahead (slice_prefetch_ahead).  C = 128 (one chunk): warp 0 holds the
 * slice's c = n / d and its part of the RMS sum (the canonical pairwise tree
 * over 512 dims has a 64-dim slice as one subtree): the output's slice
 * record.  C = 256 / 512: the chunk's state ([3][64] floats).
 *
 * The finisher (slice_finish_kernel, one CTA per output: 128 threads for
 * C = 128, else 256) is started by programmatic dependent launch, so its
 * CTAs run as soon as every slice CTA has started: each polls its output's
 * records until they are written, finalises the slot, puts the records
 * back to "empty" and only then waits for the slice kernel's end
 * (griddepcontrol.wait) to count the output in the status word.  So most
 * outputs are finished under the slice kernel's last wave, and no slice
 * CTA waits or fences.  The handshake is the data itself: every word of the
 * slice area of the workspace is EMPTY between calls (set once when the
 * workspace is made, restored by the finisher that read it); a slice CTA
 * stores each word once with a relaxed store, with NaNs made the one quiet
 * NaN 0x7FC00000 (a NaN anywhere in c or a state gives the non-finite slot
 * whatever its payload, SPEC 2.4), so no stored float is EMPTY.  A slice CTA
 * writes its record and bad-block word exactly where slice_window says the
 * output is valid and not padding; the finisher reads and restores exactly
 * those.  Output checks, errors and the status counts are the finisher's:
 * a slice CTA leaves a word (slice_bad) that names a bad physical block it
 * met.  There is no memset: CTA 0 of the slice kernel zeroes the call's
 * status word, which nothing writes before griddepcontrol.wait.
 *
 * Shared memory (static): xs [8 warps][6][32] warp states, rows [8 warps]
 * slice_rows, wbad [8 warps]: 8 KiB; 4 CTAs per SM are limited by registers.
 */
#define KVC_CUDA_SLICE_CTAS_PER_SM 4 /* slice_kernel's CTAs resident per SM (its launch bounds) */
#define SLICE_REC 520 /* floats of an output's slice record (C = 128): c[512], the 8 slices' RMS sums */
#define SLICE_OK (-0x7FFFFFFFFFFFFFFFLL - 1) /* slice_bad: no bad block; a bad block g is stored as (uint32)g */
#define SLICE_EMPTY 0xFFFFFFFFu         /* a slice-area float not written yet (a NaN no slice CTA stores) */
#define SLICE_EMPTY_BAD (-1LL)          /* a slice_bad word not written yet (all bits set, as the floats) */

/* Relaxed (strong, unfenced) accesses of the slice area: the finisher polls
 * what the slice CTAs store, so both sides are morally strong at GPU scope. */
__device__ __forceinline__ float slice_canon(float v) { return v != v ? __int_as_float(0x7FC00000) : v; }
__device__ __forceinline__ void st_rlx(float *p, float v) {
    asm volatile("st.relaxed.gpu.global.f32 [%0], %1;" ::"l"(p), "f"(slice_canon(v)) : "memory");
}
__device__ __forceinline__ void st_rlx2(float *p, float a, float b) {
    asm volatile("st.relaxed.gpu.global.v2.f32 [%0], {%1, %2};" ::"l"(p), "f"(slice_canon(a)), "f"(slice_canon(b))
                 : "memory");
}
__device__ __forceinline__ void st_rlx_ll(long long *p, long long v) {
    asm volatile("st.relaxed.gpu.global.s64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ float4 ld_rlx4(const float *p) {
    float4 r;
    asm volatile("ld.relaxed.gpu.global.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(r.x), "=f"(r.y), "=f"(r.z), "=f"(r.w)
                 : "l"(p)
                 : "memory");
    return r;
}
__device__ __forceinline__ float2 ld_rlx2(const float *p) {
    float2 r;
    asm volatile("ld.relaxed.gpu.global.v2.f32 {%0, %1}, [%2];" : "=f"(r.x), "=f"(r.y) : "l"(p) : "memory");
    return r;
}
__device__ __forceinline__ long long ld_rlx_ll(const long long *p) {
    long long r;
    asm volatile("ld.relaxed.gpu.global.s64 %0, [%1];" : "=l"(r) : "l"(p) : "memory");
    return r;
}
/* Restore to EMPTY. */
__device__ __forceinline__ void st_empty4(float *p) {
    asm volatile("st.relaxed.gpu.global.v4.u32 [%0], {%1, %1, %1, %1};" ::"l"(p), "r"(SLICE_EMPTY) : "memory");
}
__device__ __forceinline__ void st_empty2(float *p) {
    asm volatile("st.relaxed.gpu.global.v2.u32 [%0], {%1, %1};" ::"l"(p), "r"(SLICE_EMPTY) : "memory");
}
__device__ __forceinline__ void st_empty_ll(long long *p) {
    asm volatile("st.relaxed.gpu.global.s64 [%0], %1;" ::"l"(p), "l"(SLICE_EMPTY_BAD) : "memory");
}
__device__ __forceinline__ int is_empty(float v) { return __float_as_uint(v) == SLICE_EMPTY; }
__device__ __forceinline__ int any_empty4(float4 v) { return is_empty(v.x) | is_empty(v.y) | is_empty(v.z) | is_empty(v.w); }

/* A warp's 16 rows (segments 2w and 2w + 1 of the chunk): element offsets. */
struct slice_rows {
    long long voff[2 * KVC_SEG], soff[2 * KVC_SEG];
};

/* Thread q's 2 dims of the 8 rows from element offset off, ts floats apart
 * (ts even), no overlap: values at + 0, scores at + 512.  TS > 0: ts == TS,
 * known at compile time, so that the 32 loads of a thread address from two
 * registers by immediate offsets (a runtime stride needs a 64-bit address
 * per load, more than the register budget lets be live at once). */
template <int TS, bool BF16>
__device__ __forceinline__ void seg_load_strided(const launch_params &P, long long off, long long ts, int q,
                                                 seg_data &x) {
    const long long t2 = TS > 0 ? TS / 2 : ts / 2;
    if constexpr (BF16) { /* 2 bf16 a load: the same offsets in 4-byte units */
        const unsigned short *b16 = reinterpret_cast<const unsigned short *>(P.a.state_cache);
        const unsigned *p = reinterpret_cast<const unsigned *>(b16 + off) + q;
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) {
            const unsigned a = KVC_LD(p + i * t2), b = KVC_LD(p + i * t2 + 256);
            x.v[i][0] = __uint_as_float(a << 16), x.v[i][1] = __uint_as_float(a & 0xFFFF0000u);
            x.s[i][0] = __uint_as_float(b << 16), x.s[i][1] = __uint_as_float(b & 0xFFFF0000u);
        }
    } else {
        const float2 *p = reinterpret_cast<const float2 *>(P.a.state_cache + off) + q;
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) {
            const float2 a = KVC_LD(p + i * t2), b = KVC_LD(p + i * t2 + 256);
            x.v[i][0] = a.x, x.v[i][1] = a.y, x.s[i][0] = b.x, x.s[i][1] = b.y;
        }
    }
}

/* pos / block_size: a shift where the block size is a power of two. */
__device__ __forceinline__ long long slice_block_of(const launch_params &P, long long pos) {
    return P.bs_shift >= 0 ? pos >> P.bs_shift : kvc_udiv(pos, P.a.block_size);
}

/* What a slice CTA needs of output o to load its rows safely: the boundary
 * position p, the request's block-table row and the slot (< 0: padding).
 * Branch-free: the token, request and position are clamped into range, so
 * that the chain of dependent loads (index, token, table, rows) runs with no
 * test between its links, and every address stays in bounds; @return 0 for
 * an invalid output (then p and trow are the clamped ones, and the finisher
 * runs all of kvc_check_output and records it).  The host takes the slice
 * kernels only where num_tokens, num_reqs, num_blocks >= 1 and blocks_per_req x
 * block_size >= C, so a clamped window's rows p - C + 1 .. p lie in logical
 * blocks 0 .. blocks_per_req - 1. */
__device__ __forceinline__ int slice_window(const launch_params &P, long long o, long long *p, const kvc_i32 **trow,
                                            long long *slot) {
    const kvc_args &a = P.a;
    const kvc_i64 b = a.boundary_token_indices[o];
    const kvc_i64 bc = b < 0 ? 0 : b >= a.num_tokens ? a.num_tokens - 1 : b;
    const kvc_i64 r = a.token_to_req[bc], pp = a.positions[bc];
    *slot = a.kv_slot_mapping[bc];
    const kvc_i64 pmin = a.compress_ratio - 1, pmax = a.blocks_per_req * a.block_size - 1;
    const kvc_i64 rc = r < 0 ? 0 : r >= a.num_reqs ? a.num_reqs - 1 : r;
    const kvc_i64 pc = pp < pmin ? pmin : pp > pmax ? pmax : pp;
    *p = pc;
    *trow = a.block_table + rc * a.block_table_stride;
    return (b == bc) & (r == rc) & (pp == pc);
}

/* Lanes 0..4 of warp 0 of an output's first CTA: the index chain of
 * output o + P.ahead -- the one whose CTAs start about when this CTA ends,
 * a resident wave later -- into L2, so that its dependent loads hit: its
 * token's position, request and slot, and the two table entries at its
 * window's ends on the guess that it belongs to o's request (p: o's
 * clamped position, trow: its table row).  A wrong guess costs a line;
 * every address is clamped into its array. */
__device__ __forceinline__ void slice_prefetch_ahead(const launch_params &P, long long o, long long p,
                                                     const kvc_i32 *trow, int l) {
    const kvc_args &a = P.a;
    if (l >= 5 || o >= a.num_outputs - P.ahead) return;
    const kvc_i64 b = a.boundary_token_indices[o], b2 = a.boundary_token_indices[o + P.ahead], nt = a.num_tokens;
    const kvc_i64 bc = b < 0 ? 0 : b >= nt ? nt - 1 : b, b2c = b2 < 0 ? 0 : b2 >= nt ? nt - 1 : b2;
    const void *q;
    if (l == 0) q = a.positions + b2c;
    else if (l == 1) q = a.token_to_req + b2c;
    else if (l == 2) q = a.kv_slot_mapping + b2c;
    else { /* its position on the guess: p + (b2c - bc), clamped into [C - 1, pmax] */
        const kvc_i64 d = b2c - bc, pmin = a.compress_ratio - 1, pmax = a.blocks_per_req * a.block_size - 1;
        const kvc_i64 p2 = d > pmax - p ? pmax : d < pmin - p ? pmin : p + d;
        q = trow + slice_block_of(P, l == 3 ? p2 - a.compress_ratio + 1 : p2);
    }
    asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
}

/* NCH chunks of 16 segments, the token stride TS (0: any), a bf16 state
 * (BF16), a score bias (BIAS: its loads and adds are compiled only here --
 * in every kernel they cost the others registers spilled to the stack). */
template <int NCH, int TS, bool BF16, bool BIAS>
__global__ void __launch_bounds__(256, KVC_CUDA_SLICE_CTAS_PER_SM) slice_kernel(const launch_params P) {
    __shared__ float xs[8][6][32];
    __shared__ slice_rows rows[8];
    __shared__ long long wbad[8];
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    /* the call's status word: zero (not a later set of kvc_compress_many) */
    if (!P.pl.keep_status && blockIdx.x == 0 && threadIdx.x < sizeof(kvc_device_status) / 4)
        reinterpret_cast<int *>(P.status)[threadIdx.x] = 0;
    const long long o = blockIdx.x / (8 * NCH);
    const int j = (int)(blockIdx.x % (8 * NCH)) >> 3, sl = blockIdx.x & 7;
    const int t = threadIdx.x, w = t >> 5, l = t & 31, q = 32 * sl + l;
    if (l == 0) wbad[w] = SLICE_OK;
    long long p, slot;
    const kvc_i32 *trow;
    const int ok = slice_window(P, o, &p, &trow, &slot); /* tested with the slot, after the table loads */
    if (j == 0 && sl == 0 && w == 0) slice_prefetch_ahead(P, o, p, trow, l);
    const long long ts = P.a.state_stride_token, pos0 = p - P.a.compress_ratio + 1 + 128 * j + 16 * w;
    long long off = 0, o0, o1;
    unsigned badm, strided;
    const int fastp = P.bs_shift >= 3 && (pos0 & 7) == 0;
    if (fastp) {
        /* each of the warp's two segments lies in one block (the common
         * case): two table entries, the same for every lane */
        const long long l0 = pos0 >> P.bs_shift, l1 = (pos0 + KVC_SEG) >> P.bs_shift;
        const kvc_i64 g0 = trow[l0], g1 = trow[l1];
        const int bad0 = g0 < 0 || g0 >= P.a.num_blocks, bad1 = g1 < 0 || g1 >= P.a.num_blocks;
        badm = bad0 | bad1;
        if (badm && l == 0) wbad[w] = bad0 ? g0 : g1;
        /* a bad warp loads row 0 of block 0 (no branch around the loads;
         * its state is never used) */
        o0 = bad0 | bad1 ? 0 : g0 * P.a.state_stride_block + (pos0 - (l0 << P.bs_shift)) * ts;
        o1 = bad0 | bad1 ? 0 : g1 * P.a.state_stride_block + (pos0 + KVC_SEG - (l1 << P.bs_shift)) * ts;
        strided = 0xffffffffu;
    } else {
        const kvc_shape sh = kvc_shape_of(&P.a);
        kvc_i64 blk = 0;
        if (l < 2 * KVC_SEG) off = kvc_row_lookup(&sh, trow, p, 128 * j + 16 * w + l, &blk);
        badm = __ballot_sync(0xffffffffu, l < 2 * KVC_SEG && off == KVC_ROW_BAD);
        if (badm) { /* the output is invalid: the finisher records it */
            const long long g = __shfl_sync(0xffffffffu, blk, __ffs(badm) - 1);
            if (l == 0) wbad[w] = g;
        }
        /* a segment whose 8 rows are evenly strided is loaded from its
         * first row's offset; any other through the table */
        o0 = __shfl_sync(0xffffffffu, off, 0), o1 = __shfl_sync(0xffffffffu, off, KVC_SEG);
        strided = __ballot_sync(0xffffffffu, l >= 2 * KVC_SEG || off == (l < KVC_SEG ? o0 : o1) + (l & 7) * ts);
    }
    if (!ok || slot < 0) return; /* invalid or padding: the finisher's */
    stv st;
    if (fastp || !badm) { /* else the warp loads nothing; its state is never used */
        seg_data x0, x1;
        /* score_bias (SPEC 10): window row pos0 + i's bias row is
         * (pos0 + i) mod C (C a power of two here) */
        const float *bias = BIAS ? P.a.score_bias : nullptr;
        const long long cm = P.a.compress_ratio - 1, bst = P.a.score_bias_stride;
        auto brow = [&](long long r) { return (r & cm) * bst; };
        if (strided == 0xffffffffu) {
            seg_load_strided<TS, BF16>(P, o0, ts, q, x0);
            seg_load_strided<TS, BF16>(P, o1, ts, q, x1);
            if (BIAS) { /* (the host takes this kernel for an 8-byte aligned bias of even stride) */
                seg_add_bias2(bias, q, x0, [&](int i) { return brow(pos0 + i); });
                seg_add_bias2(bias, q, x1, [&](int i) { return brow(pos0 + KVC_SEG + i); });
            }
            st = seg_compute(x0, KVC_SEG);
            st_merge(st, seg_compute(x1, KVC_SEG));
        } else { /* one segment at a time (fewer registers live) */
            if (l < 2 * KVC_SEG) {
                rows[w].voff[l] = off;
                rows[w].soff[l] = off + kvc_score_delta(0, 512);
            }
            __syncwarp();
            seg_load<BF16>(P, &rows[w], 0, KVC_SEG, q, x0);
            if (BIAS) seg_add_bias2(bias, q, x0, [&](int i) { return brow(pos0 + i); });
            st = seg_compute(x0, KVC_SEG);
            seg_load<BF16>(P, &rows[w], KVC_SEG, KVC_SEG, q, x1);
            if (BIAS) seg_add_bias2(bias, q, x1, [&](int i) { return brow(pos0 + KVC_SEG + i); });
            st_merge(st, seg_compute(x1, KVC_SEG));
        }
    }
    /* the warps' states in tree order: warp w stores its state once, at the
     * level where it stops merging, so one barrier per level suffices */
#pragma unroll
    for (int lv = 1; lv < 8; lv *= 2) {
        if (w % (2 * lv) == lv)
#pragma unroll
            for (int k = 0; k < 2; k++) xs[w][k][l] = st.m[k], xs[w][2 + k][l] = st.d[k], xs[w][4 + k][l] = st.n[k];
        __syncthreads();
        if (w % (2 * lv) == 0) {
            stv b;
#pragma unroll
            for (int k = 0; k < 2; k++) b.m[k] = xs[w + lv][k][l], b.d[k] = xs[w + lv][2 + k][l], b.n[k] = xs[w + lv][4 + k][l];
            st_merge(st, b);
        }
    }
    if (w == 0 && NCH > 1) { /* the chunk state: [3][512] floats */
        float *cs = P.chunk_states + (o * NCH + j) * (3 * 512) + 2 * q;
        st_rlx2(cs, st.m[0], st.m[1]);
        st_rlx2(cs + 512, st.d[0], st.d[1]);
        st_rlx2(cs + 1024, st.n[0], st.n[1]);
    }
    if (w == 0 && NCH == 1) { /* c of the slice, and its subtree of the RMS sum */
        const float c0 = KVC_DIV(st.n[0], st.d[0]), c1 = KVC_DIV(st.n[1], st.d[1]);
        float ss = KVC_ADD(KVC_MUL(c0, c0), KVC_MUL(c1, c1));
#pragma unroll
        for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(0xffffffffu, ss, k)); /* a+b == b+a */
        float *rec = P.chunk_states + o * SLICE_REC; /* the slice records take the chunk states' place */
        st_rlx2(rec + 2 * q, c0, c1);
        if (l == 0) st_rlx(rec + 512 + sl, ss);
    }
    if (t == 224) { /* the CTA's bad-block word: SLICE_OK or the first bad warp's block
                     * (by warp 7, idle after the tree's first level, not warp 0) */
        long long g = SLICE_OK;
        for (int k = 0; k < 8; k++) g = g == SLICE_OK ? wbad[k] : g;
        st_rlx_ll(P.slice_bad + blockIdx.x, g == SLICE_OK ? g : (long long)(unsigned)g);
    }
}

/* One CTA per output after slice_kernel<NCH, TS>: gets c and its RMS sum
 * from the slice area as soon as the output's slice CTAs have written it,
 * finalises the slot, and after the slice kernel's end checks and counts
 * the output in the status word.  NCH = 1: 128 threads (thread q = dims 4q
 * .. 4q + 3) read the slice record and add the slices' sums in tree order;
 * else DG = 256 threads (thread q = dims 2q, 2q + 1) merge the chunk states
 * in tree order, then finish.  Everything that does not depend on the slice
 * kernel (the checks, the RMS weights, cos/sin) is loaded first. */
template <int NCH>
__global__ void __launch_bounds__(NCH == 1 ? 128 : DG) slice_finish_kernel(const launch_params P) {
    __shared__ float smem[NCH == 1 ? 1 : 512 + 8];
    const long long o = blockIdx.x;
    const int q = threadIdx.x;
    kvc_out_info inf;
    const int chk = kvc_check_output(&P.a, o, &inf, 0);
    long long wp, wslot;
    const kvc_i32 *wtrow;
    /* where the slice CTAs wrote (slice_kernel's own test) */
    const int wrote = slice_window(P, o, &wp, &wtrow, &wslot) && wslot >= 0;
    const int fin = chk == KVC_CHECK_NONE && inf.slot >= 0; /* implies wrote */
    fin_in f;
    if (fin) {
        fin_load_weights(P, q, f);
        fin_load_cos_sin(P, inf.pc, q, f);
    }
    /* One polling loop for all that the output's slice CTAs leave, every
     * load of a round in flight at once, so the last word to arrive costs
     * one round trip: thread q's bad-block word (q < 8 NCH) and its part of
     * the record -- NCH = 1: c[4q .. 4q + 3] and the 8 slices' sums; else
     * its 2 dims of the NCH chunk states.  Then each word back to EMPTY. */
    long long *bp = P.slice_bad + o * 8 * NCH + q;
    const int has_bad = q < 8 * NCH;
    float *rec = P.chunk_states + o * (NCH == 1 ? SLICE_REC : NCH * (3 * 512));
    long long g = SLICE_OK;
    float4 r4[3] = {};  /* NCH = 1: c, sums 0-3, sums 4-7 */
    float2 w[NCH][3];   /* NCH > 1: m, d, n of each chunk state */
    if (wrote) {
        for (;;) {
            if (has_bad) g = ld_rlx_ll(bp);
            if (NCH == 1) {
                r4[0] = ld_rlx4(rec + 4 * q), r4[1] = ld_rlx4(rec + 512), r4[2] = ld_rlx4(rec + 516);
            } else {
#pragma unroll
                for (int k = 0; k < NCH; k++)
#pragma unroll
                    for (int e = 0; e < 3; e++) w[k][e] = ld_rlx2(rec + k * (3 * 512) + e * 512 + 2 * q);
            }
            int empty = g == SLICE_EMPTY_BAD;
            if (NCH == 1) {
                empty |= any_empty4(r4[0]) | any_empty4(r4[1]) | any_empty4(r4[2]);
            } else {
#pragma unroll
                for (int k = 0; k < NCH; k++)
#pragma unroll
                    for (int e = 0; e < 3; e++) empty |= is_empty(w[k][e].x) | is_empty(w[k][e].y);
            }
            if (!empty) break;
            __nanosleep(128);
        }
        if (has_bad) st_empty_ll(bp);
        if (NCH == 1) {
            st_empty4(rec + 4 * q);
        } else {
#pragma unroll
            for (int k = 0; k < NCH; k++)
#pragma unroll
                for (int e = 0; e < 3; e++) st_empty2(rec + k * (3 * 512) + e * 512 + 2 * q);
        }
    }
    if (g != SLICE_OK) g = (long long)(int)g;
    /* a slice CTA met a bad physical block; and every thread has read the sums */
    const int badblk = __syncthreads_or(g != SLICE_OK);
    int nonfinite = 0;
    if (NCH == 1) {
        if (wrote && q == 0) st_empty4(rec + 512), st_empty4(rec + 516);
        if (fin && !badblk) {
            const float c[4] = {r4[0].x, r4[0].y, r4[0].z, r4[0].w};
            const float4 sa = r4[1], sb = r4[2];
            const float ss = KVC_ADD(KVC_ADD(KVC_ADD(sa.x, sa.y), KVC_ADD(sa.z, sa.w)),
                                     KVC_ADD(KVC_ADD(sb.x, sb.y), KVC_ADD(sb.z, sb.w)));
            nonfinite = finalize(P, slot_at(P, inf.slot), c, ss, q, f);
        }
    } else if (fin && !badblk) {
        stv acc[NCH];
#pragma unroll
        for (int k = 0; k < NCH; k++) {
            acc[k].m[0] = w[k][0].x, acc[k].m[1] = w[k][0].y;
            acc[k].d[0] = w[k][1].x, acc[k].d[1] = w[k][1].y;
            acc[k].n[0] = w[k][2].x, acc[k].n[1] = w[k][2].y;
        }
        merge_tree(acc, NCH);
        nonfinite = finish_loaded<false>(P, inf, acc[0], q, smem, f);
    }
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory"); /* CTA 0 of the slice kernel has zeroed the status */
#endif
    if (skip_output(P, P.status, chk, o, inf, q == 0)) return;
    if (badblk) {
        if (g != SLICE_OK) record_error(P, P.status, KVC_CHECK_PHYSICAL_BLOCK, o, g);
        if (q == 0) count(&P.status->outputs_invalid);
        return;
    }
    if (q == 0) count(&P.status->outputs_written);
    if (q == 0 && nonfinite) count(&P.status->outputs_nonfinite);
}
