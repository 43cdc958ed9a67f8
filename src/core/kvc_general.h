/*
 * kvc_general.h -- the GPU backends' general kernel body, written once for
 * CUDA and OpenCL C: every call the tuned kernels do not take -- head width
 * 128 (SPEC 9: the indexer's INDEXER_FP8 / INDEXER_MXFP4 slots, the
 * rotation), a bf16 state or a score bias (SPEC 10) -- with head width 128
 * or 512, any window, any format.
 *
 * One group (CTA / work-group) of K x D / R threads for K outputs (K =
 * KVC_GEN_K_MAX at head width 128 where the device allows, else 1: windows
 * of one segment, the indexer's, are too short to fill a group alone), the
 * D / R threads of output k holding its dimensions (R each: KVC_GEN_R
 * below) and its scratch sc[k]; a thread walks the window of each of its
 * dimensions in token order, segment by segment, and combines the segment
 * states in the canonical tree with a binary counter (kvc_check.h's
 * KVC_TREE_PUSH), so its window sum c_d is SPEC 3's; then the threads
 * finalise the slot together, each step one canonical operation per
 * dimension, the sums and maxima across dimensions through local memory
 * (CUDA: shuffles) in the canonical pairwise order.  The bytes equal the
 * CPU backend's (kvc_finalize_slot, kvc_finalize_indexer), which the
 * golden and conformance tests check on every backend.
 *
 * The backend's kernel wraps these: the index checks and their reports
 * (the status words differ), then kvc_gen_reduce, then kvc_gen_finalize.
 */
#ifndef KVC_GENERAL_H
#define KVC_GENERAL_H

#include "kvc_check.h"

#if defined(__OPENCL_VERSION__)
#define KVC_GEN_FN static inline
#define KVC_GEN_SYNC() barrier(CLK_LOCAL_MEM_FENCE)
#define KVC_GEN_LOCAL __local
#define KVC_GEN_OR(p, v) atomic_or((p), (v))
#else /* CUDA device code */
#define KVC_GEN_FN static __device__ __forceinline__
#define KVC_GEN_SYNC() __syncthreads()
#define KVC_GEN_LOCAL
#define KVC_GEN_OR(p, v) atomicOr((p), (v))
#endif

#define KVC_GEN_STACK 48 /* tree levels: any window of < 2^47 segments */

/** One output's local memory (a group holds KVC_GEN_K_MAX of them). */
typedef struct kvc_gen_scratch {
    float x[512];      /* the finaliser's values, sums and maxima          */
    kvc_u8 code[128];  /* INDEXER_MXFP4: each dim's e2m1 code              */
    int ex[8];         /* per-group exponents                              */
    int bad;           /* a non-finite value somewhere in the slot         */
    int bad_row;       /* a window row's physical block out of range       */
    kvc_i64 bad_g;     /* its value                                        */
} kvc_gen_scratch;

/** One state element as binary32: a float, or bf16 bits widened. */
KVC_GEN_FN float kvc_gen_elem(KVC_GLOBAL const float *st, int bf16, kvc_i64 i) {
    return bf16 ? kvc_bf16_to_f32(((KVC_GLOBAL const kvc_u16 *)st)[i]) : st[i];
}

/**
 * Window row i of the output at boundary position p, dimension d: its value
 * and score (plus its score_bias element, where bias is not NULL); a masked
 * row is (0, -Inf).  A row whose physical block is out of range sets
 * sc->bad_row and its value (and reads nothing).
 */
KVC_GEN_FN void kvc_gen_row(const kvc_shape *sh, KVC_GLOBAL const float *st, KVC_GLOBAL const kvc_i32 *trow,
                            KVC_GLOBAL const float *bias, kvc_i64 p, kvc_i64 i, int d, float *v, float *s,
                            KVC_GEN_LOCAL kvc_gen_scratch *sc) {
    const int D = (int)sh->head_dim, ovl = sh->overlap != 0;
    int vo, so;
    const kvc_i64 pos = kvc_window_row(p, sh->compress_ratio, ovl, D, i, &vo, &so);
    *v = 0.0f;
    *s = KVC_NEG_INF;
    if (pos < 0) return;
    const kvc_i64 l = kvc_udiv(pos, sh->block_size);
    const kvc_i64 g = trow[l];
    if (g < 0 || g >= sh->num_blocks) {
        sc->bad_row = 1;
        sc->bad_g = g;
        return;
    }
    const kvc_i64 base = g * sh->state_stride_block + (pos - l * sh->block_size) * sh->state_stride_token;
    *v = kvc_gen_elem(st, (int)sh->state_bf16, base + vo + d);
    *s = kvc_gen_elem(st, (int)sh->state_bf16, base + so + d);
    if (bias)
        *s = KVC_ADD(*s, bias[kvc_bias_offset(pos, sh->compress_ratio, sh->score_bias_stride, so, ovl, D) + d]);
}

/* The segment step and merge: SPEC 3's, or with fast (CUDA; SPEC 8's FAST
 * numerics) the exp by ex2.approx and the weighted sum fused -- also the
 * tuned CUDA kernels' (cuda_kernels.cuh's red_step, red_merge). */
KVC_GEN_FN float kvc_gen_weight(float m, float s, int fast) { /* a row's e = exp(s - m) */
#if defined(__CUDACC__)
    if (fast) {
        float e;
        asm("ex2.approx.f32 %0, %1;" : "=f"(e) : "f"(KVC_MUL(KVC_SUB(s, m), KVC_LOG2E)));
        return e;
    }
#endif
    (void)fast;
    return kvc_exp(KVC_SUB(s, m));
}
KVC_GEN_FN void kvc_gen_acc(float e, float v, float *den, float *num, int fast) { /* ... summed */
#if defined(__CUDACC__)
    if (fast) {
        *den = KVC_ADD(*den, e);
        *num = __fmaf_rn(e, v, *num);
        return;
    }
#endif
    (void)fast;
    kvc_seg_acc(e, v, den, num);
}
/* (kvc_gen_weight and kvc_gen_acc: a caller with several rows at hand may
 * compute every row's weight first -- independent, their operations then
 * overlap -- and sum them in row order after) */
KVC_GEN_FN void kvc_gen_step(float m, float s, float v, float *den, float *num, int fast) {
    kvc_gen_acc(kvc_gen_weight(m, s, fast), v, den, num, fast);
}
KVC_GEN_FN void kvc_gen_merge(float *mA, float *dA, float *nA, float mB, float dB, float nB, int fast) {
#if defined(__CUDACC__)
    if (fast) {
        const float m = kvc_max(*mA, mB);
        const int a_max = (*mA == m);
        float f;
        asm("ex2.approx.f32 %0, %1;" : "=f"(f) : "f"(KVC_MUL(KVC_SUB(a_max ? mB : *mA, m), KVC_LOG2E)));
        kvc_merge_scaled(mA, dA, nA, dB, nB, m, a_max, f);
        return;
    }
#endif
    (void)fast;
    kvc_merge(mA, dA, nA, mB, dB, nB);
}

/**
 * Dimension d's window sum c_d of the output at boundary position p of
 * request row trow (SPEC 3): 8-row segments in token order, each reduced
 * as kvc_seg_step says, their states merged in the canonical tree (fast:
 * SPEC 8's FAST numerics, CUDA only).  All threads of the group call it;
 * sc->bad_row must be 0 on entry and is read after a barrier.
 */
KVC_GEN_FN float kvc_gen_reduce(const kvc_shape *sh, KVC_GLOBAL const float *st, KVC_GLOBAL const kvc_i32 *trow,
                                KVC_GLOBAL const float *bias, kvc_i64 p, int d, int fast,
                                KVC_GEN_LOCAL kvc_gen_scratch *sc) {
    const kvc_i64 rows = kvc_window_rows(sh->compress_ratio, sh->overlap != 0);
    const kvc_i64 nseg = kvc_num_segments(rows);
    float sm[KVC_GEN_STACK], sd[KVC_GEN_STACK], sn[KVC_GEN_STACK];
    kvc_i64 sizes[KVC_GEN_STACK];
    int top = -1;
    for (kvc_i64 sg = 0; sg < nseg; sg++) {
        const kvc_i64 r0 = sg * KVC_SEG;
        const int n = (int)(rows - r0 < KVC_SEG ? rows - r0 : KVC_SEG);
        float v[KVC_SEG], s[KVC_SEG];
        for (int i = 0; i < KVC_SEG; i++)
            if (i < n) kvc_gen_row(sh, st, trow, bias, p, r0 + i, d, &v[i], &s[i], sc);
        float m = s[0], den = 0.0f, num = 0.0f;
        for (int i = 1; i < KVC_SEG; i++)
            if (i < n) m = kvc_max(m, s[i]);
        for (int i = 0; i < KVC_SEG; i++)
            if (i < n) kvc_gen_step(m, s[i], v[i], &den, &num, fast);
        kvc_seg_close(m, &den, &num);
        top++;
        sm[top] = m;
        sd[top] = den;
        sn[top] = num;
        sizes[top] = 1;
#define KVC_GEN_MERGE(l, r) kvc_gen_merge(&sm[l], &sd[l], &sn[l], sm[r], sd[r], sn[r], fast)
        KVC_TREE_PUSH(sizes, top, KVC_GEN_MERGE);
    }
    KVC_TREE_FOLD(top, KVC_GEN_MERGE);
#undef KVC_GEN_MERGE
    return KVC_DIV(sn[0], sd[0]);
}

/*
 * Every barrier below is reached by every thread of the group, and the
 * kernels around them return nowhere before their last barrier: PoCL's
 * optimised work-group functions miscompiled a kernel that returned
 * (uniformly) before them, running its tail once per work-item.
 */

/*
 * The finaliser's exchanges across an output's threads.  OpenCL: through
 * local memory, a barrier a step.  CUDA: within a warp by shuffles (the
 * same operations in the same order), across warps through shared memory:
 * a few barriers instead of two a step.
 *
 * Dimensions per thread: CUDA runs head_dim threads an output (R = 1).
 * OpenCL runs head width 512 on 256 work-items of R = 2 dimensions, t and
 * t + 256 (NVIDIA's OpenCL gives this kernel work-groups of at most 256);
 * head width 128 on 128 of one.  v[r], out[r]: dimension t + r x (n / R).
 */
#if defined(__CUDACC__)
#define KVC_GEN_FULL 0xFFFFFFFFu
#define KVC_GEN_R 1
#else
#define KVC_GEN_R 2
#endif
#define KVC_GEN_EACH(r, R) for (int r = 0; r < KVC_GEN_R; r++) if (r < (R))

/** The canonical pairwise sum of the n values v of dimensions 0 .. n - 1
 * (n = 128 or 512), for every thread (x: scratch). */
KVC_GEN_FN float kvc_gen_sum(KVC_GEN_LOCAL float *x, const float *v, int n, int t, int R) {
#if defined(__CUDACC__)
    (void)R;
    /* levels 1 .. 5 in the warp: thread 2^k j holds the sum of 2^k values */
    float s = v[0];
    for (int h = 1; h < 32; h <<= 1) s = KVC_ADD(s, __shfl_down_sync(KVC_GEN_FULL, s, h));
    const int lane = t & 31, w = t >> 5, nw = n >> 5;
    if (lane == 0) x[w] = s;
    __syncthreads();
    if (w == 0) { /* the warps' sums, pairwise in the same order */
        float u = lane < nw ? x[lane] : 0.0f;
        for (int h = 1; h < nw; h <<= 1) u = KVC_ADD(u, __shfl_down_sync(KVC_GEN_FULL, u, h));
        if (lane == 0) x[32] = u;
    }
    __syncthreads();
    const float r = x[32];
    __syncthreads();
    return r;
#else
    const int nt = n / R;
    KVC_GEN_EACH(r, R) x[t + r * nt] = v[r];
    KVC_GEN_SYNC();
    for (int m = n; m > 1; m >>= 1) {
        float u[KVC_GEN_R];
        KVC_GEN_EACH(r, R) {
            const int i = t + r * nt;
            u[r] = i < m / 2 ? KVC_ADD(x[2 * i], x[2 * i + 1]) : 0.0f;
        }
        KVC_GEN_SYNC();
        KVC_GEN_EACH(r, R) if (t + r * nt < m / 2) x[t + r * nt] = u[r];
        KVC_GEN_SYNC();
    }
    const float r = x[0];
    KVC_GEN_SYNC();
    return r;
#endif
}

/** out[r]: the maximum of a over dimension t + r x nt's group of g
 * consecutive dimensions (g = 32, 64 or 128; kvc_max: the order does not
 * matter for the non-NaN values it is used on). */
KVC_GEN_FN void kvc_gen_group_max(KVC_GEN_LOCAL float *x, const float *a, int g, int n, int t, int R, float *out) {
#if defined(__CUDACC__)
    (void)n;
    (void)R;
    const int d = t;
    float m = a[0];
    for (int h = 1; h < 32; h <<= 1) m = kvc_max(m, __shfl_xor_sync(KVC_GEN_FULL, m, h));
    if (g == 32) {
        out[0] = m;
        return;
    }
    if ((d & 31) == 0) x[d >> 5] = m;
    __syncthreads();
    const int w0 = (d - d % g) >> 5;
    float r = x[w0];
    for (int i = 1; i < g / 32; i++) r = kvc_max(r, x[w0 + i]);
    __syncthreads();
    out[0] = r;
#else
    const int nt = n / R;
    KVC_GEN_EACH(r, R) x[t + r * nt] = a[r];
    KVC_GEN_SYNC();
    for (int h = g / 2; h >= 1; h >>= 1) {
        float u[KVC_GEN_R];
        KVC_GEN_EACH(r, R) {
            const int d = t + r * nt;
            u[r] = (d % g) < h ? kvc_max(x[d], x[d + h]) : 0.0f;
        }
        KVC_GEN_SYNC();
        KVC_GEN_EACH(r, R) if ((t + r * nt) % g < h) x[t + r * nt] = u[r];
        KVC_GEN_SYNC();
    }
    KVC_GEN_EACH(r, R) out[r] = x[(t + r * nt) - (t + r * nt) % g];
    KVC_GEN_SYNC();
#endif
}

/** out[r]: the value of dimension d ^ h (d = t + r x nt) after every
 * thread put its own v. */
KVC_GEN_FN void kvc_gen_partner(KVC_GEN_LOCAL float *x, const float *v, int h, int n, int t, int R, float *out) {
    const int nt = n / R;
#if defined(__CUDACC__)
    if (h < 32) {
        out[0] = __shfl_xor_sync(KVC_GEN_FULL, v[0], h);
        return;
    }
#endif
    KVC_GEN_EACH(r, R) x[t + r * nt] = v[r];
    KVC_GEN_SYNC();
    KVC_GEN_EACH(r, R) out[r] = x[(t + r * nt) ^ h];
    KVC_GEN_SYNC();
}

/**
 * Finalise one output from c (c[r]: dimension t + r x D / R's window sum):
 * the D / R threads write the slot's payload and scale bytes as
 * kvc_finalize_slot (D = 512) or kvc_finalize_indexer (D = 128) do.  w:
 * the RMSNorm weights, cs: the output's cos/sin row; write = 0: nothing is
 * written (an output skipped after the group's barriers: every thread
 * still calls).  @return 1 (every thread) for a non-finite slot.
 */
KVC_GEN_FN int kvc_gen_finalize(const kvc_shape *sh, const float *c, int t, int R, int write,
                                KVC_GLOBAL const kvc_u16 *w, KVC_GLOBAL const float *cs, KVC_GLOBAL kvc_u8 *payload,
                                KVC_GLOBAL kvc_u8 *scales, KVC_GEN_LOCAL kvc_gen_scratch *sc) {
    const int D = (int)sh->head_dim, fmt = (int)sh->nope_format, il = sh->cos_sin_layout == 1, nt = D / R;
    if (t == 0) sc->bad = 0;
    int bad = 0;
    float q[KVC_GEN_R], y[KVC_GEN_R], other[KVC_GEN_R], val[KVC_GEN_R], z[KVC_GEN_R], amax[KVC_GEN_R];
    kvc_u16 hb[KVC_GEN_R];
    KVC_GEN_EACH(r, R) {
        bad |= kvc_nonfinite(c[r]);
        q[r] = KVC_MUL(c[r], c[r]);
    }
    const float ss = kvc_gen_sum(sc->x, q, D, t, R);
    const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(ss, D == 128 ? KVC_INV128 : KVC_INV512), sh->rms_norm_eps)));
    KVC_GEN_EACH(r, R) {
        y[r] = kvc_rms_apply(c[r], rr, kvc_bf16_to_f32(w[t + r * nt]));
        bad |= kvc_nonfinite(y[r]);
    }
    /* RoPE on the last 64 dims: pair j = (u, v) = (y[D-64+2j], y[D-63+2j]) */
    kvc_gen_partner(sc->x, y, 1, D, t, R, other);
    KVC_GEN_EACH(r, R) {
        const int d = t + r * nt;
        val[r] = y[r];
        if (d >= D - 64) {
            float cj = 0.0f, sj = 0.0f, uo, wo;
            if (write) kvc_cos_sin(cs, il, (d - (D - 64)) / 2, &cj, &sj); /* (a skipped output's row may not exist) */
            const int odd = d & 1;
            kvc_rope(odd ? other[r] : y[r], odd ? y[r] : other[r], cj, sj, &uo, &wo);
            val[r] = odd ? wo : uo;
            bad |= kvc_nonfinite(val[r]);
        }
    }
    /* D = 128 with rotation: the Walsh-Hadamard butterflies, h = 1 .. 64,
     * then 1/sqrt(128) */
    const int rot = D == 128 && sh->rotate;
    for (int h = 1; h < (rot ? 128 : 1); h <<= 1) {
        float b[KVC_GEN_R];
        kvc_gen_partner(sc->x, val, h, D, t, R, b);
        KVC_GEN_EACH(r, R) val[r] = ((t + r * nt) & h) ? KVC_SUB(b[r], val[r]) : KVC_ADD(val[r], b[r]);
    }
    KVC_GEN_EACH(r, R) {
        if (rot) val[r] = KVC_MUL(val[r], KVC_INV_SQRT128);
        bad |= kvc_nonfinite(val[r]);
        hb[r] = kvc_bf16_bits(val[r]);
        bad |= kvc_bf16_nonfinite(hb[r]);
        z[r] = kvc_bf16_to_f32(hb[r]);
        q[r] = z[r] < 0.0f ? -z[r] : z[r];
    }
    if (bad) KVC_GEN_OR(&sc->bad, 1);
    KVC_GEN_SYNC();
    bad = sc->bad;
    /* the quantisation groups' amax: 64 dims (D = 512), the slot
     * (INDEXER_FP8), 32 dims (INDEXER_MXFP4) */
    const int mx = D == 128 && fmt == KVC_FMT_MXFP4;
    kvc_gen_group_max(sc->x, q, D == 512 ? 64 : mx ? 32 : 128, D, t, R, amax);
    int e[KVC_GEN_R];
    KVC_GEN_EACH(r, R) {
        const int d = t + r * nt;
        if (!mx) {
            e[r] = kvc_group_exponent(amax[r], fmt != KVC_FMT_INT8); /* FP8 and INDEXER_FP8: the same e */
        } else {
            e[r] = kvc_mx_exponent(amax[r]);
            sc->code[d] = kvc_e2m1_code(KVC_MUL(z[r], kvc_pow2(-e[r])));
            if (d % 32 == 0) sc->ex[d / 32] = e[r];
        }
    }
    KVC_GEN_SYNC();
    KVC_GEN_EACH(r, R) {
        const int d = t + r * nt;
        if (!write) {
        } else if (D == 512) {
            const int fp8 = fmt == KVC_FMT_FP8;
            if (d < 448) {
                payload[d] = bad ? (kvc_u8)0 : kvc_nope_code(z[r], e[r], fp8);
                if (d % 64 == 0) scales[d / 64] = kvc_scale_byte(e[r], bad);
            } else {
                const kvc_u16 b = bad ? (kvc_u16)KVC_BF16_QNAN : hb[r];
                payload[448 + 2 * (d - 448)] = (kvc_u8)(b & 0xFFu);
                payload[449 + 2 * (d - 448)] = (kvc_u8)(b >> 8);
            }
            if (d == 0) scales[7] = 0;
        } else if (!mx) {
            payload[d] = bad ? (kvc_u8)0 : kvc_fp8_code(z[r], kvc_pow2(-e[r]));
            const kvc_u32 sb = bad ? 0x7FC00000u : KVC_BITS(kvc_pow2(e[r])); /* a quiet NaN for a non-finite slot */
            if (d < 4) scales[d] = (kvc_u8)(sb >> (8 * d));
        } else {
            if (d < 64) payload[d] = bad ? (kvc_u8)0 : (kvc_u8)(sc->code[2 * d] | (sc->code[2 * d + 1] << 4));
            if (d < 4) scales[d] = bad ? (kvc_u8)0xFF : (kvc_u8)(sc->ex[d] + 127);
        }
    }
    return bad;
}

#endif /* KVC_GENERAL_H */
