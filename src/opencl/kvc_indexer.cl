/*
 * kvc_indexer.cl -- the indexer's compressor (SPEC 9: head width 128) for
 * windows of one segment (C <= 8, C <= 4 with overlap), the OpenCL form of
 * cuda_indexer.cuh.  A work-group of 256 work-items takes K = pl.small_k
 * outputs: their checks at once, then their rows (a work-item a row, as
 * kvc_compress_small's), the first round's outputs' first, which their
 * slots load while the others' are resolved; then, in rounds, its 8 slots
 * of 32 work-items reduce and finalise 8 outputs at once, work-item l of
 * a slot holding dims 4l .. 4l + 3 (one 16-byte load per row half where
 * rows allow it; 8 bytes for bf16), the next round's loads in flight
 * during this round's finalisation.
 *
 * The finaliser's exchanges go through local memory: a work-item reads its
 * slot's 32 partial values after one barrier and combines them in the
 * canonical order itself (the same pairwise tree, no tree of barriers);
 * the rotation's five cross-item stages take a barrier each.  On NVIDIA's
 * driver (KVC_CL_NV_SHFL) they are warp shuffles instead, and the slots
 * run on without barriers.  Same bytes as kvc_finalize_indexer
 * (kvc_canon.h).  Loop forms only (PoCL: see KVC_CL_STRAIGHT in
 * kvc_kernel.cl).
 */
#define KVC_CL_IDX_SLOTS 8
#ifndef KVC_CL_IDX_K
#define KVC_CL_IDX_K 96 /* outputs per work-group at most: the host passes KVC_OPENCL_IDX_K */
#endif

/* Row half at element offset off, dims 4l .. 4l + 3, element by element
 * (rows not 4-element aligned; idx_load's vec forms take the others):
 * binary32, or bf16 as loaded (o[0], o[1]: the bits of dims 4l, 4l + 1 and
 * 4l + 2, 4l + 3, widened by idx_widen where they are used: a widening
 * right after the load would stall the work-item on it). */
static inline void idx_ld4(__global const float *state, long off, int l, int bf16, float *o) {
    if (bf16) {
        __global const ushort *b = (__global const ushort *)state + off + 4 * l;
        o[0] = as_float(b[0] | (uint)b[1] << 16);
        o[1] = as_float(b[2] | (uint)b[3] << 16);
    } else {
        for (int j = 0; j < 4; j++) o[j] = state[off + 4 * l + j];
    }
}

/* A row half loaded as bf16 (idx_ld4) widened in place to binary32 (exact). */
static inline void idx_widen(float *o) {
    const uint lo = as_uint(o[0]), hi = as_uint(o[1]);
    o[0] = as_float(lo << 16);
    o[1] = as_float(lo & 0xFFFF0000u);
    o[2] = as_float(hi << 16);
    o[3] = as_float(hi & 0xFFFF0000u);
}

/* A window's rows at row offsets ro[i] (< 0: masked, value 0 and score -Inf;
 * so are the rows past a window of fewer than 8).  vec (every row offset a
 * multiple of 4 elements, buffers aligned): one 16-byte load a row half
 * (bf16: 8 bytes), each one shifted add from the work-item's bases (its 4
 * dims' bytes).  (The offsets come in private memory: PoCL read zeros
 * through a local pointer passed here.) */
static inline void idx_load(__global const float *state, const long *ro, long sdelta, int l, int bf16, int vec,
                            float v[KVC_SEG][4], float s[KVC_SEG][4]) {
    if (vec && bf16) {
        __global const uchar *bv = (__global const uchar *)state + 8 * l, *bs = bv + 2 * sdelta;
        for (int i = 0; i < KVC_SEG; i++) {
            const long off2 = 2 * ro[i];
            uint2 a = (uint2)(0u, 0u), b = (uint2)(0xFF80FF80u, 0xFF80FF80u); /* masked: 0 and -Inf pairs */
            if (off2 >= 0) {
                a = *(__global const uint2 *)(bv + off2);
                b = *(__global const uint2 *)(bs + off2);
            }
            v[i][0] = as_float(a.x), v[i][1] = as_float(a.y);
            s[i][0] = as_float(b.x), s[i][1] = as_float(b.y);
        }
    } else if (vec) {
        __global const uchar *bv = (__global const uchar *)state + 16 * l, *bs = bv + 4 * sdelta;
        for (int i = 0; i < KVC_SEG; i++) {
            const long off4 = 4 * ro[i];
            float4 a = (float4)(0.0f), b = (float4)(KVC_NEG_INF); /* masked: 0 and -Inf */
            if (off4 >= 0) {
                a = *(__global const float4 *)(bv + off4);
                b = *(__global const float4 *)(bs + off4);
            }
            v[i][0] = a.x, v[i][1] = a.y, v[i][2] = a.z, v[i][3] = a.w;
            s[i][0] = b.x, s[i][1] = b.y, s[i][2] = b.z, s[i][3] = b.w;
        }
    } else {
        for (int i = 0; i < KVC_SEG; i++) {
            const long off = ro[i];
            if (off >= 0) {
                idx_ld4(state, off, l, bf16, v[i]);
                idx_ld4(state, off + sdelta, l, bf16, s[i]);
            } else if (bf16) { /* 0 and -Inf as bf16 pairs */
                v[i][0] = v[i][1] = as_float(0u);
                s[i][0] = s[i][1] = as_float(0xFF80FF80u);
            } else {
                for (int j = 0; j < 4; j++) v[i][j] = 0.0f, s[i][j] = KVC_NEG_INF;
            }
        }
    }
}

/* The pairwise sum of a slot's 32 partial sums p[0..31] (each the sum of 4
 * consecutive values): levels 3 .. 7 of the canonical tree over 128. */
static inline float idx_sum32(__local const float *p) {
    float a[16];
    for (int i = 0; i < 16; i++) a[i] = KVC_ADD(p[2 * i], p[2 * i + 1]);
    for (int m = 8; m >= 1; m >>= 1)
        for (int i = 0; i < m; i++) a[i] = KVC_ADD(a[2 * i], a[2 * i + 1]);
    return a[0];
}

#ifdef KVC_CL_NV_SHFL
/* NVIDIA's OpenCL (the host defines KVC_CL_NV_SHFL for it): a slot's 32
 * work-items are one warp, so the finaliser's exchanges are warp shuffles
 * (PTX shfl.sync, full mask: every exchange is reached by the whole slot)
 * and the slots run on without work-group barriers, as the CUDA kernel's
 * warps do.  Same operands in the same order as the local-memory form. */
static inline float nv_shfl_bfly(float v, int m) {
    uint r;
    __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(v)), "r"(m));
    return as_float(r);
}
static inline float nv_shfl_down(float v, int d) {
    uint r;
    __asm__ volatile("shfl.sync.down.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(v)), "r"(d));
    return as_float(r);
}
static inline float nv_shfl_idx(float v, int src) {
    uint r;
    __asm__ volatile("shfl.sync.idx.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(v)), "r"(src));
    return as_float(r);
}
#endif

__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void kvc_compress_indexer(KVC_CL_KERNEL_ARGS,
                                                                                           __global const float *bias) {
    __local long rowoff[KVC_CL_IDX_K * KVC_SEG];
    /* the score bias (C x W / 2 <= 1024 floats: 128-float units) and a unit
     * of zeros after it; each row's unit (masked rows and rows past the
     * window: the zeros, -Inf + 0 = -Inf), so that no row needs a guard */
    __local float sbias[(KVC_SEG + 1) * 128];
    __local uchar bu[KVC_CL_IDX_K * KVC_SEG];
    __local long s_po[KVC_CL_IDX_K], s_so[KVC_CL_IDX_K], s_pc[KVC_CL_IDX_K], s_r[KVC_CL_IDX_K], s_p[KVC_CL_IDX_K],
        s_badg[KVC_CL_IDX_K];
    __local int s_ok[KVC_CL_IDX_K], s_bad[KVC_CL_IDX_K], s_live[KVC_CL_IDX_K], s_nlive, s_nonfinite;
    __local float sq[KVC_CL_IDX_SLOTS][32], am[KVC_CL_IDX_SLOTS][32], rot[2][KVC_CL_IDX_SLOTS][128];
    __local int bd[KVC_CL_IDX_SLOTS][32];
    const int q = (int)get_local_id(0), l = q % 32, g = q / 32;
    const long o0 = (long)get_group_id(0) * pl.small_k;
    const int kn = (int)(sh.num_outputs - o0 < pl.small_k ? sh.num_outputs - o0 : pl.small_k);
    const int ovl = sh.overlap != 0, bf16 = (int)sh.state_bf16;
    if (q < kn) { /* the index chain's second link into L2 while the first loads (as cuda_indexer.cuh): the
                   * position, request and slot of output o0 + q's boundary token on the guess of a dense
                   * prefill, token o C + C - 1, clamped into the arrays (a wrong guess costs a line) */
        const long gt = (o0 + q) * sh.compress_ratio + sh.compress_ratio - 1;
        const long b = gt < sh.num_tokens ? gt : sh.num_tokens - 1;
        if (b >= 0) {
#ifdef KVC_CL_NV_SHFL
            __asm__ volatile("prefetch.global.L2 [%0];" ::"l"(positions + b));
            __asm__ volatile("prefetch.global.L2 [%0];" ::"l"(t2r + b));
            __asm__ volatile("prefetch.global.L2 [%0];" ::"l"(slots + b));
#else
            prefetch(positions + b, 1);
            prefetch(t2r + b, 1);
            prefetch(slots + b, 1);
#endif
        }
    }
    if (q < kn) { /* work-item q: output o0 + q's checks (it records its own error or padding) */
        kvc_out_info inf;
        const int ok = output_of(&sh, bidx, slots, t2r, positions, table, st, pl.out_base, o0 + q, 1, &inf);
        long po = 0, so = 0;
        if (ok) kvc_slot_offsets_s(inf.slot, sh.kv_block_size, sh.page_stride, sh.nope_format, &po, &so);
        s_ok[q] = ok;
        s_bad[q] = 0;
        s_po[q] = po;
        s_so[q] = so;
        s_pc[q] = inf.pc;
        s_r[q] = inf.r;
        s_p[q] = inf.p;
    }
    if (q == 0) s_nonfinite = 0;
    const int bw = (int)kvc_score_delta(ovl, 128), has_bias = sh.score_bias_stride != 0;
    if (has_bias) {
        for (int x = q; x < (int)sh.compress_ratio * bw; x += KVC_CL_WG)
            sbias[x] = bias[(x / bw) * sh.score_bias_stride + x % bw];
        for (int x = q; x < 128; x += KVC_CL_WG) sbias[KVC_SEG * 128 + x] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int rows = (int)pl.rows; /* <= 8 */
    const int vec = (int)pl.vec;
    const long sdelta = kvc_score_delta(ovl, 128);
    float v[KVC_SEG][4], s[KVC_SEG][4];
    long ro[KVC_SEG];
#define KVC_CL_IDX_LOAD(k_)                                                 \
    do {                                                                    \
        for (int i = 0; i < KVC_SEG; i++) ro[i] = rowoff[KVC_SEG * (k_) + i]; \
        idx_load(state, ro, sdelta, l, bf16, vec, v, s);                    \
    } while (0)
    /* their rows (a work-item a row): the first KVC_CL_IDX_SLOTS outputs',
     * each then loaded by its slot (the first round's output where every
     * output before it is live) while the others' rows are resolved and
     * the live outputs listed */
    const int kn0 = kn < KVC_CL_IDX_SLOTS ? kn : KVC_CL_IDX_SLOTS;
    /* row x % 8 of output x / 8: its row offset (-1: masked) and bias unit;
     * a block out of range flags the output, keeping its value (a macro:
     * PoCL wrote nothing through local pointers passed to a function) */
#define KVC_CL_IDX_ROW(x_)                                                                                        \
    do {                                                                                                          \
        const int k = (x_) / KVC_SEG, i = (x_) % KVC_SEG;                                                         \
        long off = -1, bo = KVC_SEG * 128;                                                                        \
        if (s_ok[k] && i < rows) {                                                                                \
            int vo, so;                                                                                           \
            const long pos = kvc_window_row(s_p[k], sh.compress_ratio, ovl, 128, i, &vo, &so);                   \
            if (pos >= 0) {                                                                                       \
                const long blk = table[s_r[k] * sh.block_table_stride + kvc_udiv(pos, sh.block_size)];          \
                if (blk < 0 || blk >= sh.num_blocks) {                                                            \
                    if (atomic_xchg(&s_bad[k], 1) == 0) s_badg[k] = blk;                                          \
                } else {                                                                                          \
                    const long lb = kvc_udiv(pos, sh.block_size);                                                 \
                    off = blk * sh.state_stride_block + (pos - lb * sh.block_size) * sh.state_stride_token + vo; \
                    if (has_bias) bo = kvc_bias_offset(pos, sh.compress_ratio, bw, so, ovl, 128);                 \
                }                                                                                                 \
            }                                                                                                     \
        }                                                                                                         \
        rowoff[x_] = off;                                                                                         \
        bu[x_] = (uchar)(bo / 128);                                                                               \
    } while (0)
    for (int x = q; x < kn0 * KVC_SEG; x += KVC_CL_WG) KVC_CL_IDX_ROW(x);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (g < kn0 && s_ok[g] && !s_bad[g]) KVC_CL_IDX_LOAD(g);
    for (int x = kn0 * KVC_SEG + q; x < kn * KVC_SEG; x += KVC_CL_WG) KVC_CL_IDX_ROW(x);
#undef KVC_CL_IDX_ROW
    barrier(CLK_LOCAL_MEM_FENCE);
    if (q == 0) { /* the live outputs in order; the others with a bad block reported */
        int n = 0;
        for (int k = 0; k < kn; k++) {
            if (!s_ok[k]) continue;
            if (!s_bad[k]) {
                s_live[n++] = k;
                continue;
            }
            record_error(st, KVC_CHECK_PHYSICAL_BLOCK, pl.out_base + o0 + k, s_badg[k]);
            atomic_inc(&st->invalid);
        }
        s_nlive = n;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int nlive = s_nlive, il = sh.cos_sin_layout == 1, fmt = (int)sh.nope_format;
    float w[4];
    for (int j = 0; j < 4; j++) w[j] = kvc_bf16_to_f32(weight[4 * l + j]);
    if (g < nlive && s_live[g] != g) KVC_CL_IDX_LOAD(s_live[g]);
    for (int r0 = 0; r0 < nlive; r0 += KVC_CL_IDX_SLOTS) { /* (the same count in every work-item) */
        const int on = r0 + g < nlive, k = on ? s_live[r0 + g] : 0;
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (on) {
            if (l >= 16)
                for (int t = 0; t < 2; t++)
                    kvc_cos_sin(cos_sin + s_pc[k] * sh.cos_sin_stride, il, 2 * (l - 16) + t, &cs[2 * t],
                                &cs[2 * t + 1]);
            if (bf16)
                for (int i = 0; i < KVC_SEG; i++) {
                    idx_widen(v[i]);
                    idx_widen(s[i]);
                }
            if (has_bias)
                for (int i = 0; i < KVC_SEG; i++) {
                    const int b = 128 * bu[KVC_SEG * k + i] + 4 * l;
                    for (int j = 0; j < 4; j++) s[i][j] = KVC_ADD(s[i][j], sbias[b + j]);
                }
            /* A window of fewer than 8 rows is reduced as 8, the rows past
             * it masked: such a row leaves the max alone and adds +0 to the
             * sums, which never changes their bits (a sum from +0 is never
             * -0).  No row needs a guard, and every row's weight comes
             * before the sums (their exps overlap), as in the CUDA kernel. */
            for (int j = 0; j < 4; j++) {
                float m = s[0][j], den = 0.0f, num = 0.0f, e[KVC_SEG];
                for (int i = 1; i < KVC_SEG; i++) m = kvc_max(m, s[i][j]);
                for (int i = 0; i < KVC_SEG; i++) e[i] = kvc_exp(KVC_SUB(s[i][j], m));
                for (int i = 0; i < KVC_SEG; i++) kvc_seg_acc(e[i], v[i][j], &den, &num);
                kvc_seg_close(m, &den, &num);
                c[j] = KVC_DIV(num, den);
            }
        }
        if (r0 + KVC_CL_IDX_SLOTS + g < nlive) /* in flight while this round finalises */
            KVC_CL_IDX_LOAD(s_live[r0 + KVC_CL_IDX_SLOTS + g]);
        /* RMSNorm over 128: levels 1, 2 in the work-item, 3 .. 7 from the slot's 32 partial sums */
        int bad = 0;
        float y[4];
        for (int j = 0; j < 4; j++) {
            bad |= kvc_nonfinite(c[j]);
            y[j] = KVC_MUL(c[j], c[j]);
        }
#ifdef KVC_CL_NV_SHFL
        float ss = KVC_ADD(KVC_ADD(y[0], y[1]), KVC_ADD(y[2], y[3]));
        for (int h = 1; h < 32; h <<= 1) ss = KVC_ADD(ss, nv_shfl_down(ss, h)); /* idx_sum32's tree, in lane 0 */
        ss = nv_shfl_idx(ss, 0);
#else
        sq[g][l] = KVC_ADD(KVC_ADD(y[0], y[1]), KVC_ADD(y[2], y[3]));
        barrier(CLK_LOCAL_MEM_FENCE);
        const float ss = idx_sum32(sq[g]);
#endif
        const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(ss, KVC_INV128), sh.rms_norm_eps)));
        for (int j = 0; j < 4; j++) {
            y[j] = kvc_rms_apply(c[j], rr, w[j]);
            bad |= kvc_nonfinite(y[j]);
        }
        if (l >= 16) /* RoPE on dims 64 .. 127: pairs (4l, 4l + 1), (4l + 2, 4l + 3) */
            for (int t = 0; t < 2; t++) {
                float uo, wo;
                kvc_rope(y[2 * t], y[2 * t + 1], cs[2 * t], cs[2 * t + 1], &uo, &wo);
                y[2 * t] = uo;
                y[2 * t + 1] = wo;
            }
        if (sh.rotate) { /* Walsh-Hadamard: h = 1, 2 in the work-item, 4 .. 64 across the slot */
            for (int h = 1; h < 4; h <<= 1)
                for (int j = 0; j < 4; j++)
                    if (!(j & h)) {
                        const float a = y[j], b = y[j + h];
                        y[j] = KVC_ADD(a, b);
                        y[j + h] = KVC_SUB(a, b);
                    }
            for (int m = 1, buf = 0; m < 32; m <<= 1, buf ^= 1) {
#ifdef KVC_CL_NV_SHFL
                for (int j = 0; j < 4; j++) {
                    const float b = nv_shfl_bfly(y[j], m);
#else
                for (int j = 0; j < 4; j++) rot[buf][g][4 * l + j] = y[j];
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int j = 0; j < 4; j++) {
                    const float b = rot[buf][g][4 * (l ^ m) + j];
#endif
                    y[j] = (l & m) ? KVC_SUB(b, y[j]) : KVC_ADD(y[j], b);
                }
            }
            for (int j = 0; j < 4; j++) y[j] = KVC_MUL(y[j], KVC_INV_SQRT128);
        }
        float amax = 0.0f;
        for (int j = 0; j < 4; j++) {
            bad |= kvc_nonfinite(y[j]);
            bad |= kvc_nope_bf16(y[j], &y[j]);
            amax = kvc_max(amax, y[j] < 0.0f ? -y[j] : y[j]);
        }
        const int mx = fmt == KVC_FMT_MXFP4;
#ifdef KVC_CL_NV_SHFL
        for (int m = 1; m < 32; m <<= 1) {
            bad |= as_int(nv_shfl_bfly(as_float(bad), m));
            if (m < 8 || !mx) amax = kvc_max(amax, nv_shfl_bfly(amax, m));
        }
#else
        am[g][l] = amax;
        bd[g][l] = bad;
        barrier(CLK_LOCAL_MEM_FENCE);
        const int lo = mx ? l & ~7 : 0, hi = mx ? lo + 8 : 32;
        for (int i = 0; i < 32; i++) bad |= bd[g][i];
        for (int i = lo; i < hi; i++) amax = kvc_max(amax, am[g][i]);
#endif
        if (!on) continue;
        __global uchar *payload = kv + s_po[k], *scales = kv + s_so[k];
        if (!mx) {
            const int e = kvc_group_exponent(amax, 1);
            const float inv = kvc_pow2(-e);
            for (int j = 0; j < 4; j++) payload[4 * l + j] = bad ? (uchar)0 : kvc_fp8_code(y[j], inv);
            const uint sb = bad ? 0x7FC00000u : KVC_BITS(kvc_pow2(e)); /* a quiet NaN for a non-finite slot */
            if (l < 4) scales[l] = (uchar)(sb >> (8 * l));
        } else {
            const int e = kvc_mx_exponent(amax);
            const float inv = kvc_pow2(-e);
            for (int t = 0; t < 2; t++)
                payload[2 * l + t] =
                    bad ? (uchar)0
                        : (uchar)(kvc_e2m1_code(KVC_MUL(y[2 * t], inv)) | (kvc_e2m1_code(KVC_MUL(y[2 * t + 1], inv)) << 4));
            if ((l & 7) == 0) scales[l >> 3] = bad ? (uchar)0xFF : (uchar)(e + 127);
        }
        if (l == 0 && bad) atomic_inc(&s_nonfinite);
    }
#undef KVC_CL_IDX_LOAD
    barrier(CLK_LOCAL_MEM_FENCE);
    if (q == 0 && nlive) atomic_add(&st->written, nlive);
    if (q == 0 && s_nonfinite) atomic_add(&st->nonfinite, s_nonfinite);
}
