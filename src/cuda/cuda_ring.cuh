/*
 * cuda_ring.cuh -- the ring kernel: windows of 8 to 64 full segments without
 * overlap, rows 16-byte aligned.  Included by cuda_kernels.cuh for DPT = 2
 * (exact and FAST); uses its stv, red_step, st_merge, record_error, count
 * and skip_output.
 * The host takes it for large calls (cuda_backend.cu).
 *
 * Work: an output is 8 slices of 64 dims, one per warp; the 8 warps of an
 * output are a GROUP inside one CTA, and a CTA (16 warps, one per SM) holds
 * 2 groups that walk the outputs with a grid stride.  Output n of a group
 * has a leader, the group's warp n % 8 (the role rotates, so that no warp
 * does more work than the others): it runs the output's checks and resolves
 * its segments once, a few segments into output n - 1, into shared memory
 * (ring_out; mbarrier D), and it fixes up the output's slot (stage b).  A
 * segment whose 8 rows lie in one block is resolved to {block, row}; the
 * others are looked up row by row when they are copied.  Each warp streams its
 * window through its own ring of RING_NS shared-memory stages: per segment
 * one tensor copy of [8 rows][2 halves][64 floats] when the call has a
 * tensor map (EXACT), else 16 lanes copy one 256-byte half-row slice each
 * with cp.async.bulk, completing on the stage's mbarrier.  The warp reads a
 * stage into registers, refills it with the segment RING_NS ahead (into its
 * next output near the end of one), then reduces; segment states go into a
 * register binary counter (canonical order).  No warp ever waits for a later
 * output of another: the slot of output m is finished at the end of output
 * m + 1 (RMS partial sums exchanged through shared memory, mbarrier A) and
 * fixed up, if non-finite, at the end of m + 2 (mbarrier B).  No global
 * workspace.
 *
 * Shared memory, kRingSmem bytes in all:
 *   stages  [16 warps][RING_NS][1024 floats]: rows 0-7 x (64 values, 64 scores)
 *   wts     [512] the RMS weights as floats
 *   outs    [2 groups][4] ring_out: outputs n + 1, n, n - 1, n - 2 (by n & 3)
 *   xch     [2 groups][2 parities] the slot exchange (ring_xchg)
 *   marks   [16 warps][2 parities] bad-row marks (ring_mark)
 *   bars    [16 warps][RING_NS] stage mbarriers, then [2 groups][A, B, D][2 parities]
 */
#define RING_WARPS 16
#define RING_NS KVC_CUDA_RING_STAGES
#define RING_STAGE 1024 /* floats per stage: 8 rows x 2 x 64 */
#define RING_MAXSEG 64
#define RING_SEG_LOOKUP (-1) /* ring_out::seg: rows looked up one by one */
#define RING_SEG_BAD (-2)    /* ring_out::seg: the segment's block is out of range */

/* One output as its leader resolved it (shared memory). */
struct ring_out {
    long long p, pc, bad_g;
    kvc_i64 slot;        /* its slot */
    kvc_i64 po, so;      /* kv_cache byte offsets of its slot's payload and scales */
    const kvc_i32 *trow; /* its request's block-table row */
    int o;               /* < 0: the group's walk has ended */
    int bad;             /* a segment's block is out of range (bad_g) */
    int2 seg[RING_MAXSEG]; /* {block, row in block} of segment j, or {RING_SEG_*, 0} */
};
/* A warp's mark of a bad row of one output (ring_fill_rows; shared memory,
 * two per warp, by output parity; cleared when published). */
struct ring_mark {
    long long g;
    int bad, pad_;
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
/* Lane 0: an arrival on stage barrier bar that expects `bytes` of copies. */
__device__ __forceinline__ void ring_expect(unsigned long long *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(ring_su32(bar)), "r"(bytes)
                 : "memory");
}
/* One 256-byte half-row slice into the stage (row i, half h: 0 values, 1 scores). */
__device__ __forceinline__ void ring_copy_row(float *st, unsigned long long *bar, const float *src, int i, int h) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 256, [%2];" ::"r"(
                     ring_su32(st + i * 128 + h * 64)),
                 "l"(src), "r"(ring_su32(bar))
                 : "memory");
}

/* The warp's arrival on mbarrier bar: every lane arrives (release), so
 * that each lane's shared and global accesses before it are ordered before
 * the waiters' accesses after it (a barrier of a group's 8 warps counts 256
 * arrivals, of one warp 32). */
__device__ __forceinline__ void ring_mbar_arrive(unsigned long long *bar) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(ring_su32(bar)) : "memory");
}

/* The leader's part: the group's next live output from o on (stride
 * `stride`), into d.  Invalid and padding outputs are recorded and skipped;
 * d->o = -1 when there is none.  Each segment is resolved once here (one
 * division per lane), so that a copy needs no lookup. */
__device__ __noinline__ void ring_next(const launch_params &P, long long o, long long stride, int spw, int lane,
                                       ring_out *d) {
    for (; o < P.a.num_outputs; o += stride) {
        kvc_out_info inf;
        if (skip_output(P, kvc_check_output(&P.a, o, &inf, 0), o, inf, lane == 0)) continue;
        const kvc_i32 *trow = P.a.block_table + inf.r * P.a.block_table_stride;
        const long long bs = P.a.block_size, p0 = inf.p - P.a.compress_ratio + 1; /* no overlap: never masked */
        int bad = 0;
        long long bad_g = 0;
        for (int j = lane; j < spw; j += 32) {
            const long long pos = p0 + (long long)j * KVC_SEG, l = pos / bs, r = pos - l * bs;
            int2 e = make_int2(RING_SEG_LOOKUP, 0);
            if (r + KVC_SEG <= bs && bs <= 0x7FFFFFFFLL) {
                const long long g = trow[l];
                if (g < 0 || g >= P.a.num_blocks) {
                    e.x = RING_SEG_BAD;
                    bad = 1;
                    bad_g = g;
                } else {
                    e = make_int2((int)g, (int)r);
                }
            }
            d->seg[j] = e;
        }
        const unsigned badm = __ballot_sync(0xffffffffu, bad);
        bad_g = __shfl_sync(0xffffffffu, bad_g, badm ? __ffs(badm) - 1 : 0);
        if (lane == 0) {
            d->p = inf.p;
            d->pc = inf.pc;
            d->slot = inf.slot;
            kvc_slot_offsets(&P.a, inf.slot, &d->po, &d->so);
            d->trow = trow;
            d->o = (int)o;
            d->bad = badm != 0;
            d->bad_g = bad_g;
        }
        return;
    }
    if (lane == 0) d->o = -1;
}

/* Segment j of d's window, rows looked up one by one (a segment across
 * blocks, or block size < 8): lanes 0-7 the value halves, 8-15 the score
 * halves; a bad row is not copied and marks the output in mk. */
__device__ __forceinline__ void ring_fill_rows(const launch_params &P, const ring_out *d, int j, float *st,
                                               unsigned long long *bar, int sl, int lane, ring_mark *mk) {
    const kvc_shape sh = kvc_shape_of(&P.a);
    kvc_i64 blk = 0;
    const long long off = lane < KVC_SEG ? kvc_row_lookup(&sh, d->trow, d->p, (long long)j * KVC_SEG + lane, &blk) : 0;
    const unsigned badm = __ballot_sync(0xffffffffu, lane < KVC_SEG && off == KVC_ROW_BAD);
    const unsigned ok = __ballot_sync(0xffffffffu, lane < KVC_SEG && off != KVC_ROW_BAD) & 0xFFu;
    if (badm) {
        const long long g = __shfl_sync(0xffffffffu, blk, __ffs(badm) - 1);
        if (lane == 0) {
            mk->bad = 1;
            mk->g = g;
        }
    }
    const long long o8 = __shfl_sync(0xffffffffu, off, lane & 7);
    if (lane == 0) ring_expect(bar, __popc(ok) * 512u);
    __syncwarp();
    const int i = lane & 7, h = lane >> 3;
    if (lane < 2 * KVC_SEG && ((ok >> i) & 1u)) ring_copy_row(st, bar, P.a.state_cache + o8 + h * 512 + sl * 64, i, h);
}

/* Fill stage st with segment j of d's window, slice sl. */
__device__ __forceinline__ void ring_fill(const launch_params &P, const ring_out *d, int j, float *st,
                                          unsigned long long *bar, int sl, int lane, ring_mark *mk) {
    const int2 e = d->seg[j];
    if (e.x >= 0 && P.tiles) { /* one tensor copy: x = 64 sl, both halves, rows e.y .. e.y + 7 of block e.x */
        if (lane == 0) {
            ring_expect(bar, 4096u);
            asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];" ::"r"(ring_su32(st)),
                         "l"(reinterpret_cast<unsigned long long>(&P.tmap)), "r"(0), "r"(sl), "r"(0), "r"(e.y),
                         "r"(e.x), "r"(ring_su32(bar))
                         : "memory");
        }
    } else if (e.x >= 0) { /* one block, 16 row copies */
        if (lane == 0) ring_expect(bar, 4096u);
        __syncwarp();
        const int i = lane & 7, h = lane >> 3;
        if (lane < 2 * KVC_SEG)
            ring_copy_row(st, bar,
                          P.a.state_cache + e.x * P.a.state_stride_block + (e.y + i) * P.a.state_stride_token +
                              h * 512 + sl * 64,
                          i, h);
    } else if (e.x == RING_SEG_BAD) { /* the output is marked bad: nothing to copy */
        if (lane == 0) ring_expect(bar, 0u);
    } else {
        ring_fill_rows(P, d, j, st, bar, sl, lane, mk);
    }
}

/* Slice sl's part of an output's slot from its c (dims 64 sl + 2 lane + 0/1),
 * once every slice's partial sum is in X: the RMS sum in the canonical
 * pairwise tree over the 8 partials, NOPE group sl (sl < 7) or RoPE pair
 * `lane` (sl = 7).  The bytes are written as if the slot were finite; a
 * non-finite slot is rewritten whole two outputs later (stage b).  @return 1
 * if this slice saw a non-finite value. */
__device__ __forceinline__ int ring_slice_slot(const launch_params &P, const float c[2], int sl, int lane,
                                               const ring_xchg *X, const float *wts, const ring_out &d, float csc,
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
    uint8_t *payload = a.kv_cache + d.po, *scales = a.kv_cache + d.so;
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
        v[i] = sv[i * 64 + lane];
        s[i] = sv[i * 64 + 32 + lane];
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

/* Segment j's state S into the binary counter L (canonical order): segment j
 * closes the subtrees of its trailing one bits; T gets the whole window's
 * state after its last segment.  SPW = 2^LEVELS segments. */
template <int LEVELS>
__device__ __forceinline__ void ring_count(stv *L, stv S, int j, stv &T) {
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
    if (carry) T = S;
}

#endif /* sm_90 */

constexpr int kRingWarps = RING_WARPS;
/* Segment-loop unrolling: j % kRingUnroll known, so the binary counter's
 * lowest levels are static (EXACT: 4 measured slower than 2, FAST faster). */
constexpr int kRingUnroll = FASTNUM ? 4 : 2;
constexpr size_t kRingSmem = (size_t)RING_WARPS * RING_NS * RING_STAGE * 4 + 512 * 4 + 2 * 4 * sizeof(ring_out) +
                             2 * 2 * sizeof(ring_xchg) +
                             RING_WARPS * 2 * sizeof(ring_mark) + RING_WARPS * RING_NS * 8 + 2 * 3 * 2 * 8;

template <int SPW>
__global__ void __launch_bounds__(RING_WARPS * 32, 1) ring_kernel(const __grid_constant__ launch_params P) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* the host launches it on sm_90 and newer only */
    constexpr int LEVELS = SPW == 8 ? 3 : SPW == 16 ? 4 : SPW == 32 ? 5 : 6;
    static_assert((1 << LEVELS) == SPW && SPW <= RING_MAXSEG, "SPW: 8, 16, 32 or 64");
    extern __shared__ __align__(128) unsigned char rsm[];
    float *stages = reinterpret_cast<float *>(rsm);
    float *wts = stages + RING_WARPS * RING_NS * RING_STAGE;
    ring_out *outs = reinterpret_cast<ring_out *>(wts + 512); /* [2 groups][4] */
    ring_xchg *xch = reinterpret_cast<ring_xchg *>(outs + 2 * 4); /* [2 groups][2 parities] */
    ring_mark *marks = reinterpret_cast<ring_mark *>(xch + 4); /* [16 warps][2 parities] */
    unsigned long long *bars = reinterpret_cast<unsigned long long *>(marks + 2 * RING_WARPS);
    unsigned long long *gbar = bars + RING_WARPS * RING_NS; /* [2 groups][A, B, D][2 parities] */

    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = w / 8, sl = w % 8;
    const long long TG = 2LL * gridDim.x; /* groups in the grid */
    for (int t = threadIdx.x; t < 512; t += blockDim.x) wts[t] = kvc_bf16_to_f32(P.a.rms_norm_weight[t]);
    float *stg = stages + w * RING_NS * RING_STAGE;
    unsigned long long *bar = bars + w * RING_NS;
    if (lane == 0)
        for (int s = 0; s < RING_NS; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ring_su32(bar + s)));
    if (threadIdx.x < 12) /* A and B: the 8 slice warps arrive; D: the leader warp */
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(ring_su32(gbar + threadIdx.x)),
                     "r"(threadIdx.x % 6 < 4 ? 8 * 32 : 32));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    ring_out *go = outs + 4 * g; /* the group's outputs n .. n-3, by n & 3 */
    unsigned long long *barA = gbar + g * 6, *barB = barA + 2, *barD = barA + 4;
    if (sl == 0) { /* output 0's leader */
        ring_next(P, (long long)g * gridDim.x + blockIdx.x, TG, SPW, lane, &go[0]);
        ring_mbar_arrive(barD);
    }
    ring_wait(barD, 0);
    if (go[0].o < 0) return;

    ring_mark *mk = marks + 2 * w; /* the warp's bad-row marks, by output parity */
    if (lane < 2) mk[lane].bad = 0;
    __syncwarp();
#pragma unroll
    for (int s = 0; s < RING_NS; s++) ring_fill(P, &go[0], s, stg + s * RING_STAGE, bar + s, sl, lane, &mk[0]);
    __syncwarp();

    /* End of output m (the slot pipeline, no warp waits on a later output):
     *   a. slot m-1: wait until all 8 slices published m-1 (barrier A), write
     *      this slice's bytes, publish its non-finite flag (barrier B);
     *   b. m-2's leader, slot m-2: wait for B, rewrite the slot if any slice
     *      saw a non-finite value, count it;
     *   c. output m: publish this slice's partial sum and bad-row mark (A). */
    float cp[2] = {0.0f, 0.0f}, cscp = 0.0f, cssp = 0.0f; /* output m-1's c and cos/sin */
    auto stage_a = [&](int m) {
        const ring_out &d = go[m & 3];
        ring_xchg *X = xch + g * 2 + (m & 1);
        ring_wait(barA + (m & 1), (unsigned)(m >> 1) & 1u);
        int rb = -1;
#pragma unroll
        for (int k = 7; k >= 0; k--)
            if (X->rowbad[k]) rb = k;
        int bad = 0;
        if (rb < 0) bad = ring_slice_slot(P, cp, sl, lane, X, wts, d, cscp, cssp);
        else if (sl == (m & 7) && lane == 0) {
            record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, d.o, X->rowbad_g[rb]);
            count(&P.status->outputs_invalid);
        }
        if (lane == 0) X->ybad[sl] = rb >= 0 ? -1 : bad;
        ring_mbar_arrive(barB + (m & 1));
    };
    auto stage_b = [&](int m) {
        if (sl != (m & 7)) return;
        const ring_out &d = go[m & 3];
        const ring_xchg *X = xch + g * 2 + (m & 1);
        ring_wait(barB + (m & 1), (unsigned)(m >> 1) & 1u);
        int ball = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) ball |= X->ybad[k];
        if (ball < 0) return; /* a bad row: skipped and counted in stage a */
        if (ball && lane == 0) /* rare: the shared writer, serially */
            kvc_write_nonfinite_slot(P.a.kv_cache + d.po, P.a.kv_cache + d.so);
        if (lane == 0) {
            count(&P.status->outputs_written);
            if (ball) count(&P.status->outputs_nonfinite);
        }
    };

    int has_next = 0, seq = 0;
    unsigned q = 0;
    long long b_next = -1;
    for (;;) {
        const ring_out *dc = &go[seq & 3];
        ring_out *dn = &go[(seq + 1) & 3];
        stv L[LEVELS], T;
        float csc = 0.0f, css = 0.0f;
        if (sl == 7) /* the RoPE warp's cos/sin, used at the end of the output */
            kvc_cos_sin(P.a.cos_sin_cache + dc->pc * P.a.cos_sin_stride, P.a.cos_sin_layout == KVC_COS_SIN_INTERLEAVED,
                        lane, &csc, &css);
#pragma unroll kRingUnroll
        for (int j = 0; j < SPW; j++) {
            /* the next output's leader resolves it: its boundary token loaded
             * at j = 0, the token's three values prefetched at j = 1, the
             * checks at j = 3 (then barrier D) */
            if (sl == ((seq + 1) & 7)) {
                if (j == 0) b_next = dc->o + TG < P.a.num_outputs ? P.a.boundary_token_indices[dc->o + TG] : -1;
                if (j == 1 && lane < 3 && b_next >= 0 && b_next < P.a.num_tokens) {
                    const void *pf = lane == 0 ? (const void *)(P.a.kv_slot_mapping + b_next)
                                     : lane == 1 ? (const void *)(P.a.token_to_req + b_next)
                                                 : (const void *)(P.a.positions + b_next);
                    asm volatile("prefetch.global.L1 [%0];" ::"l"(pf));
                }
                if (j == 3) {
                    ring_next(P, dc->o + TG, TG, SPW, lane, dn);
                    ring_mbar_arrive(barD + ((seq + 1) & 1));
                }
            }
            const int s = (int)(q % RING_NS);
            float *st = stg + s * RING_STAGE;
            ring_wait(bar + s, (q / RING_NS) & 1u);
            /* segment q into registers, the stage refilled with segment
             * q + RING_NS, then the arithmetic */
            float2 v[KVC_SEG], sc[KVC_SEG];
            ring_read(st, lane, v, sc);
            __syncwarp();
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            const int jj = j + RING_NS;
            if (jj < SPW) {
                ring_fill(P, dc, jj, st, bar + s, sl, lane, &mk[seq & 1]);
            } else {
                if (jj == SPW) { /* the next output, once the leader has resolved it */
                    ring_wait(barD + ((seq + 1) & 1), (unsigned)((seq + 1) >> 1) & 1u);
                    has_next = dn->o >= 0;
                }
                if (has_next) ring_fill(P, dn, jj - SPW, st, bar + s, sl, lane, &mk[(seq + 1) & 1]);
            }
            stv S = ring_reduce(v, sc);
            q++;
            ring_count<LEVELS>(L, S, j, T);
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
                ring_mark *k = &mk[seq & 1];
                X->ss[sl] = ss;
                X->rowbad[sl] = k->bad | dc->bad;
                X->rowbad_g[sl] = k->bad ? k->g : dc->bad_g;
                k->bad = 0;
            }
            ring_mbar_arrive(barA + (seq & 1));
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
#undef RING_MAXSEG
#undef RING_SEG_LOOKUP
#undef RING_SEG_BAD
