/*
 * cuda_ring.cuh -- the ring kernel: windows of 8 to 64 full segments without
 * overlap, rows 16-byte aligned.  Included by cuda_kernels.cuh for DPT = 2
 * (exact and FAST); uses its stv, red_step, st_merge, record_error, count.
 * The host takes it for large calls (cuda_backend.cu).
 *
 * Work: an output is 8 slices of 64 dims, one per warp; the 8 warps of an
 * output are a GROUP inside one CTA, and a CTA (16 warps, one per SM) holds
 * 2 groups that walk the outputs with a grid stride.  Each warp streams its
 * window through its own ring of RING_NS shared-memory stages: per segment,
 * two tensor copies of [8 rows][64 floats] (values, scores) when the rows
 * lie in one block and the call has a tensor map, else 16 lanes each copy
 * one 256-byte half-row slice with cp.async.bulk, completing on the stage's
 * mbarrier.  The warp reads a stage into registers, refills it with the
 * segment RING_NS ahead (into its next output, whose checks it ran during
 * this one), issues the block-table
 * load for the refill after that, then reduces; segment states go into a
 * register binary counter (canonical order).  No warp ever waits for a
 * later output of another: the slot of output m is finished at the end of
 * output m + 1 (RMS partial sums exchanged through shared memory, mbarrier
 * A) and fixed up, if non-finite, at the end of m + 2 (mbarrier B).  No
 * global workspace.
 *
 * Shared memory, kRingSmem bytes in all:
 *   stages  [16 warps][RING_NS][1024 floats]: rows 0-7 x 64 values, then x 64 scores
 *   wts     [512] the RMS weights as floats
 *   desc    [16 warps][4] each warp's outputs m+1, m, m-1, m-2 (by m & 3)
 *   xch     [2 groups][2 parities] the slot exchange (ring_xchg)
 *   bars    [16 warps][RING_NS] stage mbarriers, then [2 groups][A, B][2 parities]
 */
#define RING_WARPS 16
#define RING_NS KVC_CUDA_RING_STAGES
#define RING_STAGE 1024 /* floats per stage: 8 rows x 2 x 64 */

struct ring_desc {       /* one output as a warp of its group sees it */
    long long p, slot, pc;
    const kvc_i32 *trow; /* its request's block-table row */
    int o, bad;          /* bad: a looked-up row's block is out of range */
    long long bad_g;
};
/* What the 8 warps of a group exchange about one output (shared memory,
 * two per group, by output parity). */
struct ring_xchg {
    float ss[8];       /* each slice's RMS partial sum (a complete 64-leaf subtree) */
    int rowbad[8], ybad[8];
    long long rowbad_g[8];
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* bulk copies and mbarrier waits: sm_90 */
__device__ __forceinline__ unsigned ring_su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void ring_wait(unsigned long long *bar, unsigned parity) {
    asm volatile("{\n\t.reg .pred P1;\n\tW_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
                 "@!P1 bra W_%=;\n\t}" ::"r"(ring_su32(bar)),
                 "r"(parity)
                 : "memory");
}

/* Lanes 0..7: the element offset of row `lane` of segment sg of d's window
 * (value half), or KVC_ROW_BAD.  Other lanes: 0. */
__device__ __forceinline__ long long ring_lookup(const launch_params &P, const ring_desc &d, long long sg, int lane,
                                                 kvc_i64 *blk) {
    if (lane >= KVC_SEG) return 0;
    const kvc_shape sh = kvc_shape_of(&P.a);
    return kvc_row_lookup(&sh, d.trow, d.p, sg * KVC_SEG + lane, blk);
}

/* The rows of the segments a warp looks up one after another: lanes 0..7
 * keep the block-table index l and the row r inside that block of their
 * row, so that the next segment (8 positions on) needs no division:
 * kvc_row_lookup's arithmetic, advanced instead of recomputed. */
struct ring_cursor {
    long long l, r;
};
__device__ __forceinline__ void ring_cursor_at(const launch_params &P, const ring_desc &d, long long sg, int lane,
                                               ring_cursor &c) {
    const long long pos = d.p - P.a.compress_ratio + 1 + sg * KVC_SEG + (lane & 7); /* no overlap: never masked */
    c.l = pos / P.a.block_size;
    c.r = pos - c.l * P.a.block_size;
}
/* Lanes 0..7: c advanced to row `lane` of the segment after c's (or, with
 * restart, of segment sg of d); @return that row's block-table entry, not
 * yet used (its load is in flight until ring_offset, a step later). */
__device__ __forceinline__ long long ring_advance(const launch_params &P, const ring_desc &d, long long sg, int lane,
                                                  bool restart, ring_cursor &c) {
    if (lane >= KVC_SEG) return 0;
    if (restart) {
        ring_cursor_at(P, d, sg, lane, c);
    } else {
        c.r += KVC_SEG;
        while (c.r >= P.a.block_size) {
            c.r -= P.a.block_size;
            c.l++;
        }
    }
    return d.trow[c.l];
}
/* The row's offset from its block g and c (kvc_row_lookup's result). */
__device__ __forceinline__ long long ring_offset(const launch_params &P, long long g, const ring_cursor &c) {
    if (g < 0 || g >= P.a.num_blocks) return KVC_ROW_BAD;
    return g * P.a.state_stride_block + c.r * P.a.state_stride_token; /* kvc_row_offset, r < block_size */
}

/* Fill stage `st` with the rows whose offsets lanes 0..7 hold (off), slice
 * sl: lanes 0-7 copy the value halves, 8-15 the score halves; a bad row is
 * skipped (its output was marked bad when the row was looked up). */
__device__ __forceinline__ void ring_issue(const launch_params &P, float *st, unsigned long long *bar, long long off,
                                          int sl, int lane) {
    const long long o8 = __shfl_sync(0xffffffffu, off, lane & 7);
    const unsigned ok = __ballot_sync(0xffffffffu, lane < KVC_SEG && off != KVC_ROW_BAD) & 0xFFu;
    if (lane == 0)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ring_su32(bar)),
                     "r"(__popc(ok) * 512u)
                     : "memory");
    __syncwarp();
    const int i = lane & 7;
    if (lane < 2 * KVC_SEG && ((ok >> i) & 1u)) {
        const float *src = P.a.state_cache + o8 + (lane >= KVC_SEG ? 512 : 0) + sl * 64;
        float *dst = st + (lane >= KVC_SEG ? 512 : 0) + i * 64;
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 256, [%2];" ::"r"(
                         ring_su32(dst)),
                     "l"(src), "r"(ring_su32(bar))
                     : "memory");
    }
}

/* Fill stage `st` with a segment whose 8 rows lie in one block (block g,
 * rows r .. r + 7): two tensor copies of [8 rows][64 floats] through the
 * call's tensor map (values at x = 64 sl, scores at x = 512 + 64 sl), issued
 * by lane 0; per-lane bulk copies cost 16 serialised issues per segment. */
__device__ __forceinline__ void ring_issue_tile(const launch_params &P, float *st, unsigned long long *bar,
                                               long long g, long long r, int sl, int lane) {
    if (lane != 0) return;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ring_su32(bar)), "r"(4096u) : "memory");
    const unsigned long long tm = reinterpret_cast<unsigned long long>(&P.tmap);
#pragma unroll
    for (int k = 0; k < 2; k++)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3, %4}], [%5];" ::"r"(ring_su32(st + 512 * k)),
                     "l"(tm), "r"(512 * k + 64 * sl), "r"((int)r), "r"((int)g), "r"(ring_su32(bar))
                     : "memory");
}

/* The warp's next live output from o on (stride `stride`): checks run,
 * invalid and padding outputs recorded by the group's warp 0 and skipped.
 * @return 0 when there is none. */
__device__ __noinline__ int ring_next(const launch_params &P, long long o, long long stride, int rec, int lane, ring_desc *d) {
    for (; o < P.a.num_outputs; o += stride) {
        kvc_out_info inf;
        const int chk = kvc_check_output(&P.a, o, &inf, 0);
        if (chk != KVC_CHECK_NONE) {
            if (rec && lane == 0) {
                record_error(P.status, chk, o, inf.value);
                count(&P.status->outputs_invalid);
            }
            continue;
        }
        if (inf.slot < 0) {
            if (rec && lane == 0) count(&P.status->outputs_padding);
            continue;
        }
        __syncwarp();
        if (lane == 0) {
            d->p = inf.p;
            d->slot = inf.slot;
            d->pc = inf.pc;
            d->trow = P.a.block_table + inf.r * P.a.block_table_stride;
            d->o = (int)o;
            d->bad = 0;
        }
        __syncwarp();
        return 1;
    }
    return 0;
}

/* The warp's arrival on mbarrier bar (its shared and global writes before it). */
__device__ __forceinline__ void ring_mbar_arrive(unsigned long long *bar, int lane) {
    __syncwarp();
    if (lane == 0) {
        __threadfence_block();
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(ring_su32(bar)) : "memory");
    }
}

/* Slice sl's part of an output's slot from its c (dims 64 sl + 2 lane + 0/1),
 * once every slice's partial sum is in X: the RMS sum in the canonical
 * pairwise tree over the 8 partials, NOPE group sl (sl < 7) or RoPE pair
 * `lane` (sl = 7).  The bytes are written as if the slot were finite; a
 * non-finite slot is rewritten whole two outputs later (stage b).  @return 1
 * if this slice saw a non-finite value. */
__device__ __forceinline__ int ring_slice_slot(const launch_params &P, const float c[2], int sl, int lane,
                                               const ring_xchg *X, const float *wts, long long slot, float csc,
                                               float css) {
    const kvc_args &a = P.a;
    int bad = kvc_nonfinite(c[0]) | kvc_nonfinite(c[1]);
    const float ss = KVC_ADD(KVC_ADD(KVC_ADD(X->ss[0], X->ss[1]), KVC_ADD(X->ss[2], X->ss[3])),
                             KVC_ADD(KVC_ADD(X->ss[4], X->ss[5]), KVC_ADD(X->ss[6], X->ss[7])));
    const float rr = kvc_rms_scale(ss, a.rms_norm_eps);
    float y[2];
#pragma unroll
    for (int t = 0; t < 2; t++) {
        y[t] = kvc_rms_apply(c[t], rr, wts[64 * sl + 2 * lane + t]);
        bad |= kvc_nonfinite(y[t]);
    }
    int64_t po, so;
    kvc_slot_offsets(&a, slot, &po, &so);
    uint8_t *payload = a.kv_cache + po, *scales = a.kv_cache + so;
    if (sl < 7) {
        const int fp8 = a.nope_format == KVC_NOPE_FP8_E4M3;
        float z[2];
        bad |= kvc_nope_bf16(y[0], &z[0]);
        bad |= kvc_nope_bf16(y[1], &z[1]);
        float amax = fmaxf(fabsf(z[0]), fabsf(z[1])); /* NaN only where bad is set */
#pragma unroll
        for (int k = 1; k < 32; k <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, k));
        const int e = kvc_group_exponent(amax, fp8);
        payload[64 * sl + 2 * lane] = kvc_nope_code(z[0], e, fp8);
        payload[64 * sl + 2 * lane + 1] = kvc_nope_code(z[1], e, fp8);
        if (lane == 0) scales[sl] = kvc_scale_byte(e, 0);
    } else {
        kvc_u16 hu, hw;
        bad |= kvc_rope_bf16(y[0], y[1], csc, css, &hu, &hw);
        uint8_t *rp = payload + 448 + 4 * lane;
        rp[0] = (uint8_t)(hu & 0xFF);
        rp[1] = (uint8_t)(hu >> 8);
        rp[2] = (uint8_t)(hw & 0xFF);
        rp[3] = (uint8_t)(hw >> 8);
        if (lane == 0) scales[7] = 0;
    }
    return __any_sync(0xffffffffu, bad);
}

/* A segment's rows from a stage into registers (2 dims per lane); the stage
 * may be refilled once the warp has passed a __syncwarp. */
__device__ __forceinline__ void ring_read(const float *st, int lane, float2 v[KVC_SEG], float2 s[KVC_SEG]) {
    const float2 *sv = reinterpret_cast<const float2 *>(st);
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        v[i] = sv[i * 32 + lane];
        s[i] = sv[256 + i * 32 + lane];
    }
}

/* The segment's state (SPEC 3 or SPEC 8's FAST form through red_step). */
__device__ __forceinline__ stv ring_reduce(const float2 v[KVC_SEG], const float2 s[KVC_SEG]) {
    stv r;
    r.m[0] = s[0].x;
    r.m[1] = s[0].y;
#pragma unroll
    for (int i = 1; i < KVC_SEG; i++) {
        r.m[0] = kvc_max(r.m[0], s[i].x);
        r.m[1] = kvc_max(r.m[1], s[i].y);
    }
    r.d[0] = r.n[0] = r.d[1] = r.n[1] = 0.0f;
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        red_step(r.m[0], s[i].x, v[i].x, &r.d[0], &r.n[0]);
        red_step(r.m[1], s[i].y, v[i].y, &r.d[1], &r.n[1]);
    }
    kvc_seg_close(r.m[0], &r.d[0], &r.n[0]);
    kvc_seg_close(r.m[1], &r.d[1], &r.n[1]);
    return r;
}

#endif /* sm_90 */

constexpr int kRingWarps = RING_WARPS;
constexpr size_t kRingSmem = (size_t)RING_WARPS * RING_NS * RING_STAGE * 4 + 512 * 4 + RING_WARPS * 4 * sizeof(ring_desc) +
                             2 * 2 * sizeof(ring_xchg) + RING_WARPS * RING_NS * 8 + 2 * 2 * 2 * 8;

template <int SPW>
__global__ void __launch_bounds__(RING_WARPS * 32, 1) ring_kernel(const __grid_constant__ launch_params P) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* the host launches it on sm_90 and newer only */
    constexpr int LEVELS = SPW == 8 ? 3 : SPW == 16 ? 4 : SPW == 32 ? 5 : 6;
    static_assert((1 << LEVELS) == SPW, "SPW: 8, 16, 32 or 64");
    extern __shared__ __align__(128) unsigned char rsm[];
    float *stages = reinterpret_cast<float *>(rsm);
    float *wts = stages + RING_WARPS * RING_NS * RING_STAGE;
    ring_desc *desc = reinterpret_cast<ring_desc *>(wts + 512);
    ring_xchg *xch = reinterpret_cast<ring_xchg *>(desc + RING_WARPS * 4); /* [2 groups][2 parities] */
    unsigned long long *bars = reinterpret_cast<unsigned long long *>(xch + 4);
    unsigned long long *gbar = bars + RING_WARPS * RING_NS; /* [2 groups][A, B][2 parities] */

    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = w / 8, sl = w % 8;
    const long long TG = 2LL * gridDim.x; /* groups in the grid */
    const long long gid = (long long)g * gridDim.x + blockIdx.x;
    for (int t = threadIdx.x; t < 512; t += blockDim.x) wts[t] = kvc_bf16_to_f32(P.a.rms_norm_weight[t]);
    float *stg = stages + w * RING_NS * RING_STAGE;
    unsigned long long *bar = bars + w * RING_NS;
    if (lane == 0)
        for (int s = 0; s < RING_NS; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ring_su32(bar + s)));
    if (threadIdx.x < 8)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 8;" ::"r"(ring_su32(gbar + threadIdx.x)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    ring_desc *dw = desc + 4 * w; /* outputs n .. n-3 of this warp, by n & 3 */
    if (!ring_next(P, gid, TG, sl == 0, lane, &dw[0])) return;
    unsigned long long *barA = gbar + g * 4, *barB = gbar + g * 4 + 2;

    /* prologue: rows of segments 0 .. RING_NS (one segment per 8 lanes);
     * stages 0 .. RING_NS - 1 filled, segment RING_NS's block kept for the
     * first refill (which marks a bad row of it) */
    long long g_next; /* lanes 0..7: block of the next refill's row (ring_advance) */
    ring_cursor curs;
    {
        kvc_i64 blk = 0;
        const int sg = lane / KVC_SEG;
        const long long off = sg <= RING_NS ? ring_lookup(P, dw[0], sg, lane % KVC_SEG, &blk) : 0;
        const unsigned badm = __ballot_sync(0xffffffffu, sg < RING_NS && off == KVC_ROW_BAD);
        if (badm && lane == __ffs(badm) - 1) {
            dw[0].bad = 1;
            dw[0].bad_g = blk;
        }
#pragma unroll
        for (int s = 0; s < RING_NS; s++) {
            const long long os = __shfl_sync(0xffffffffu, off, (8 * s + (lane & 7)) & 31);
            ring_issue(P, stg + s * RING_STAGE, bar + s, lane < KVC_SEG ? os : 0, sl, lane);
        }
        g_next = __shfl_sync(0xffffffffu, blk, (8 * RING_NS + (lane & 7)) & 31);
        ring_cursor_at(P, dw[0], RING_NS, lane, curs);
    }
    __syncwarp();

    /* End of output m (the slot pipeline, no warp waits on a later output):
     *   a. slot m-1: wait until all 8 slices published m-1 (barrier A), write
     *      this slice's bytes, publish its non-finite flag (barrier B);
     *   b. slice 0, slot m-2: wait for B, rewrite the slot if any slice saw
     *      a non-finite value, count it;
     *   c. output m: publish this slice's partial sum and bad-row mark (A). */
    float cp[2] = {0.0f, 0.0f}, cscp = 0.0f, cssp = 0.0f; /* output m-1's c and cos/sin */
    auto stage_a = [&](int m) {
        const ring_desc &d = dw[m & 3];
        ring_xchg *X = xch + g * 2 + (m & 1);
        ring_wait(barA + (m & 1), (unsigned)(m >> 1) & 1u);
        int rb = -1;
#pragma unroll
        for (int k = 7; k >= 0; k--)
            if (X->rowbad[k]) rb = k;
        int bad = 0;
        if (rb < 0) bad = ring_slice_slot(P, cp, sl, lane, X, wts, d.slot, cscp, cssp);
        else if (sl == 0 && lane == 0) {
            record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, d.o, X->rowbad_g[rb]);
            count(&P.status->outputs_invalid);
        }
        if (lane == 0) X->ybad[sl] = rb >= 0 ? -1 : bad;
        ring_mbar_arrive(barB + (m & 1), lane);
    };
    auto stage_b = [&](int m) {
        if (sl != 0) return;
        const ring_desc &d = dw[m & 3];
        const ring_xchg *X = xch + g * 2 + (m & 1);
        ring_wait(barB + (m & 1), (unsigned)(m >> 1) & 1u);
        int ball = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) ball |= X->ybad[k];
        if (ball < 0) return; /* a bad row: skipped and counted in stage a */
        if (ball && lane == 0) { /* rare: the shared writer, serially */
            int64_t po, so;
            kvc_slot_offsets(&P.a, d.slot, &po, &so);
            kvc_write_nonfinite_slot(P.a.kv_cache + po, P.a.kv_cache + so);
        }
        if (lane == 0) {
            count(&P.status->outputs_written);
            if (ball) count(&P.status->outputs_nonfinite);
        }
    };

    int has_next = 0, seq = 0;
    unsigned q = 0;
    long long b_next = -1;
    for (;;) {
        const ring_desc &dc = dw[seq & 3];
        ring_desc *dn = &dw[(seq + 1) & 3];
        stv L[LEVELS], T;
        float csc = 0.0f, css = 0.0f;
#pragma unroll 1
        for (int j = 0; j < SPW; j++) {
            /* the next output's checks: its boundary token loaded at j = 0,
             * the token's three values prefetched at j = 1, the checks at j = 3 */
            if (j == 0) {
                b_next = dc.o + TG < P.a.num_outputs ? P.a.boundary_token_indices[dc.o + TG] : -1;
                if (sl == 7) /* the RoPE warp's cos/sin, used at the end of the output */
                    kvc_cos_sin(P.a.cos_sin_cache + dc.pc * P.a.cos_sin_stride,
                                P.a.cos_sin_layout == KVC_COS_SIN_INTERLEAVED, lane, &csc, &css);
            }
            if (j == 1 && lane < 3 && b_next >= 0 && b_next < P.a.num_tokens) {
                const void *pf = lane == 0 ? (const void *)(P.a.kv_slot_mapping + b_next)
                                 : lane == 1 ? (const void *)(P.a.token_to_req + b_next)
                                             : (const void *)(P.a.positions + b_next);
                asm volatile("prefetch.global.L1 [%0];" ::"l"(pf));
            }
            if (j == 3) has_next = ring_next(P, dc.o + TG, TG, sl == 0, lane, dn);
            const int s = (int)(q % RING_NS);
            ring_wait(bar + s, (q / RING_NS) & 1u);
            /* segment q into registers, the stage refilled with segment
             * q + RING_NS, the lookup for the refill after that, then the
             * arithmetic */
            float2 v[KVC_SEG], sc[KVC_SEG];
            ring_read(stg + s * RING_STAGE, lane, v, sc);
            __syncwarp();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            const int jj = j + RING_NS, jl = j + RING_NS + 1; /* refill, next lookup */
            if (jj < SPW || has_next) {
                const long long off = lane < KVC_SEG ? ring_offset(P, g_next, curs) : 0;
                const long long r0 = __shfl_sync(0xffffffffu, curs.r, 0), o0 = __shfl_sync(0xffffffffu, off, 0);
                if (P.tiles && o0 >= 0 && r0 + KVC_SEG <= P.a.block_size) /* one block: rows r0 .. r0 + 7 */
                    ring_issue_tile(P, stg + s * RING_STAGE, bar + s, __shfl_sync(0xffffffffu, g_next, 0), r0, sl,
                                    lane);
                else
                    ring_issue(P, stg + s * RING_STAGE, bar + s, off, sl, lane);
                /* a bad row marks its output */
                const unsigned badm = __ballot_sync(0xffffffffu, lane < KVC_SEG && off == KVC_ROW_BAD);
                if (badm && lane == __ffs(badm) - 1) {
                    ring_desc *dm = jj < SPW ? &dw[seq & 3] : dn;
                    dm->bad = 1;
                    dm->bad_g = g_next;
                }
            }
            if (jl < SPW || has_next) { /* jl - SPW <= RING_NS < SPW */
                const ring_desc &dl = jl < SPW ? dc : *dn;
                const int sgl = jl < SPW ? jl : jl - SPW;
                g_next = ring_advance(P, dl, sgl, lane, sgl == 0, curs);
            }
            stv S = ring_reduce(v, sc);
            q++;
            /* binary counter: segment j closes the subtrees of its trailing one bits */
            bool carry = true;
#pragma unroll
            for (int lv = 0; lv < LEVELS; lv++) {
                if (carry) {
                    if ((j >> lv) & 1) {
                        st_merge(L[lv], S);
                        S = L[lv];
                    } else {
                        L[lv] = S;
                        carry = false;
                    }
                }
            }
            if (carry) T = S; /* j == SPW - 1: the whole window */
        }
        if (seq >= 1) stage_a(seq - 1);
        if (seq >= 2) stage_b(seq - 2);
        {   /* stage c */
            cp[0] = KVC_DIV(T.n[0], T.d[0]);
            cp[1] = KVC_DIV(T.n[1], T.d[1]);
            cscp = csc;
            cssp = css;
            float ss = KVC_ADD(KVC_MUL(cp[0], cp[0]), KVC_MUL(cp[1], cp[1]));
#pragma unroll
            for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(0xffffffffu, ss, k)); /* a+b == b+a */
            ring_xchg *X = xch + g * 2 + (seq & 1);
            if (lane == 0) {
                X->ss[sl] = ss;
                X->rowbad[sl] = dc.bad;
                X->rowbad_g[sl] = dc.bad_g;
            }
            ring_mbar_arrive(barA + (seq & 1), lane);
        }
        if (!has_next) break;
        seq++;
    }
    /* drain: the last output's slot, then the last two fix-ups */
    stage_a(seq);
    if (seq >= 1) stage_b(seq - 1);
    stage_b(seq);
#endif
}
#undef RING_WARPS
#undef RING_NS
#undef RING_STAGE
