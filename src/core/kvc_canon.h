/*
 * kvc_canon.h -- the canonical arithmetic of the contract (SPEC section 3),
 * shared by every backend: compiled as C11 (CPU backend), CUDA C (device and
 * host) and OpenCL C.  Every float operation below is one correctly rounded
 * binary32 operation, in the order the contract fixes:
 *
 *   - no contraction: C is built with -ffp-contract=off, CUDA uses the _rn
 *     intrinsics (which are never fused), OpenCL sets FP_CONTRACT OFF;
 *   - division and square root correctly rounded (OpenCL: build option
 *     -cl-fp32-correctly-rounded-divide-sqrt);
 *   - no flush-to-zero, no fast-math anywhere.
 *
 * Nothing here allocates, branches on data in a way that depends on the
 * backend, or touches memory other than what the caller passes.
 */
#ifndef KVC_CANON_H
#define KVC_CANON_H

/* ---- portability layer ------------------------------------------------- */
#if defined(__OPENCL_VERSION__)
#pragma OPENCL FP_CONTRACT OFF
#define KVC_FN static inline
typedef uint kvc_u32;
typedef int kvc_i32;
typedef long kvc_i64;
typedef ushort kvc_u16;
typedef uchar kvc_u8;
#define KVC_BITS(f) as_uint(f)
#define KVC_FLOAT(u) as_float(u)
#define KVC_SQRT(a) sqrt(a)
#define KVC_GLOBAL __global
#define KVC_FIN_SCRATCH __local /* the finaliser's c / y scratch */
#else /* C11, and CUDA C (host and device) */
#include <stdint.h>
#ifdef __CUDACC__
#define KVC_FN static __host__ __device__ __forceinline__
#else
#define KVC_FN static inline
#endif
typedef uint32_t kvc_u32;
typedef int32_t kvc_i32;
typedef int64_t kvc_i64;
typedef uint16_t kvc_u16;
typedef uint8_t kvc_u8;
#ifdef __CUDA_ARCH__ /* device code: _rn intrinsics are never contracted */
#define KVC_BITS(f) __float_as_uint(f)
#define KVC_FLOAT(u) __uint_as_float(u)
#define KVC_ADD(a, b) __fadd_rn((a), (b))
#define KVC_SUB(a, b) __fsub_rn((a), (b))
#define KVC_MUL(a, b) __fmul_rn((a), (b))
#define KVC_DIV(a, b) __fdiv_rn((a), (b))
#define KVC_SQRT(a) __fsqrt_rn(a)
#else /* host C: built with -ffp-contract=off */
#include <math.h>
#include <string.h>
KVC_FN kvc_u32 kvc_host_bits(float f) { kvc_u32 u; memcpy(&u, &f, 4); return u; }
KVC_FN float kvc_host_float(kvc_u32 u) { float f; memcpy(&f, &u, 4); return f; }
#define KVC_BITS(f) kvc_host_bits(f)
#define KVC_FLOAT(u) kvc_host_float(u)
#define KVC_SQRT(a) sqrtf(a)
#endif
#endif
#ifndef KVC_ADD /* OpenCL (FP_CONTRACT OFF) and host C (-ffp-contract=off) */
#define KVC_ADD(a, b) ((a) + (b))
#define KVC_SUB(a, b) ((a) - (b))
#define KVC_MUL(a, b) ((a) * (b))
#define KVC_DIV(a, b) ((a) / (b))
#endif

#ifndef KVC_GLOBAL
#define KVC_GLOBAL /* C and CUDA: one address space */
#endif

/* ---- constants (exact hex values of the contract) ---------------------- */
#define KVC_SEG 8                       /* tokens per reduction segment     */
#define KVC_NEG_INF KVC_FLOAT(0xFF800000u)
#define KVC_EXP_CUTOFF (-0x1.5cp+6f)    /* -87.0f                            */
#define KVC_LOG2E 0x1.715476p+0f
#define KVC_ROUND_MAGIC 0x1.8p+23f      /* 1.5 * 2^23                        */
#define KVC_LN2_HI 0x1.62e400p-1f
#define KVC_LN2_LO 0x1.7f7d1cp-20f
#define KVC_AMAX_FLOOR 0x1.a36e2ep-14f  /* 1e-4f                             */
#define KVC_INV127 0x1.020408p-7f       /* 1/127 rounded to binary32         */
#define KVC_FP8_MAX 448.0f
#define KVC_INV512 0x1p-9f
#define KVC_BF16_QNAN 0x7FC0u

/* ---- scalar building blocks -------------------------------------------- */

/**
 * NaN-propagating max: (a > b || a != a) ? a : b.  On sm_80+ (CUDA, and
 * NVIDIA's OpenCL where the host defines KVC_CL_NV_MAX) one max.NaN
 * instruction: it returns the canonical NaN instead of a's payload and may
 * order +0/-0 differently; neither changes a byte (a NaN max always ends in
 * the non-finite slot, and s - m and kexp(m' - m) are equal for m = +0/-0).
 */
KVC_FN float kvc_max(float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#elif defined(__OPENCL_VERSION__) && defined(KVC_CL_NV_MAX) /* NVIDIA's OpenCL, compute capability 8.0+ */
    float r;
    __asm__("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    const float r = (a > b) ? a : b; /* two plain selects: vectorisers handle them */
    return (a != a) ? a : r;
#endif
}

/** 1 when f is NaN or +-Inf. */
KVC_FN int kvc_nonfinite(float f) {
    return (KVC_BITS(f) & 0x7F800000u) == 0x7F800000u;
}

/**
 * sub(x, mul(k, KVC_LN2_HI)) of kvc_exp.  Where x >= -87, k is an integer
 * of at most 7 bits (|k| <= 126) and KVC_LN2_HI has 15 significant bits, so
 * the product is exact and a fused multiply-add rounds the same difference
 * once: the same bits in one instruction where the hardware has one.  (For
 * x < -87 the result is masked to 0 either way; a NaN x stays NaN.)  All
 * non-positive arguments are compared with SPEC 3's unfused kexp on the GPU
 * (tests/test_cuda_canon.cu) and on the CPU (test cpu_exp_all: the AVX-512F
 * form, cpu_backend.c).  (Fusing the k ln2_lo step the same way is NOT
 * exact: it changes 46 of the 2^31 results.)
 */
#if defined(__CUDA_ARCH__)
#define KVC_SUB_K_LN2_HI(x, k) __fmaf_rn((k), -KVC_LN2_HI, (x))
#elif defined(__OPENCL_VERSION__) && defined(KVC_CL_FMA) /* the device reports CL_FP_FMA */
#define KVC_SUB_K_LN2_HI(x, k) fma((k), -KVC_LN2_HI, (x))
#else
#define KVC_SUB_K_LN2_HI(x, k) KVC_SUB((x), KVC_MUL((k), KVC_LN2_HI))
#endif

/**
 * Canonical exp for the x <= 0 arguments of the reduction (SPEC 3).
 * Written without early returns so that vectorising compilers and GPUs run
 * one straight path; the result equals the contract's branchy form.
 */
KVC_FN float kvc_exp(float x) {
    float m = KVC_ADD(KVC_MUL(x, KVC_LOG2E), KVC_ROUND_MAGIC);
    float k = KVC_SUB(m, KVC_ROUND_MAGIC);
    float r = KVC_SUB(KVC_SUB_K_LN2_HI(x, k), KVC_MUL(k, KVC_LN2_LO));
    float q = 0x1.6c16c2p-10f;
    q = KVC_ADD(KVC_MUL(q, r), 0x1.111112p-7f);
    q = KVC_ADD(KVC_MUL(q, r), 0x1.555556p-5f);
    q = KVC_ADD(KVC_MUL(q, r), 0x1.555556p-3f);
    q = KVC_ADD(KVC_MUL(q, r), 0x1.000000p-1f);
    q = KVC_ADD(KVC_MUL(q, r), 1.0f);
    q = KVC_ADD(KVC_MUL(q, r), 1.0f);
    /* 2^k from the bits of m; only meaningful for -87 <= x <= 0 and masked
     * below otherwise (the unsigned arithmetic is defined for any m). */
    kvc_u32 eb = ((KVC_BITS(m) - 0x4B400000u) + 127u) << 23;
    float res = KVC_MUL(q, KVC_FLOAT(eb));
    /* x < -87 (and -Inf) gives 0.  A NaN x needs no select of its own: it
     * flows through every operation above and res is a NaN, which is all the
     * contract observes (any NaN ends in the non-finite slot). */
    return (x < KVC_EXP_CUTOFF) ? 0.0f : res;
}

/**
 * Segment / tree state of the online softmax, one dimension:
 * (max, denominator, numerator).  kvc_merge_scaled: the rest of kvc_merge
 * once m = max(mA, mB), a_max = (mA == m) and the other side's factor
 * f = exp(other - m) are known (a GPU's FAST mode, SPEC 8, computes f with
 * its own exp).
 */
KVC_FN void kvc_merge_scaled(float *mA, float *dA, float *nA, float dB, float nB, float m, int a_max, float f) {
    float fA = a_max ? 1.0f : f;
    float fB = a_max ? f : 1.0f;
    float d = KVC_ADD(KVC_MUL(*dA, fA), KVC_MUL(dB, fB));
    float n = KVC_ADD(KVC_MUL(*nA, fA), KVC_MUL(nB, fB));
    int dead = (m == KVC_NEG_INF);
    *mA = m;
    *dA = dead ? 0.0f : d;
    *nA = dead ? 0.0f : n;
}

/** Merge B (right) into A (left) in place. */
KVC_FN void kvc_merge(float *mA, float *dA, float *nA, float mB, float dB, float nB) {
    float m = kvc_max(*mA, mB);
    /* The side that holds the max has factor kexp(0) == 1.0f exactly, and
     * x * 1.0f == x: one kexp per merge instead of two, same bytes.  (A NaN
     * or +Inf max only arises where a den is already NaN, which every path
     * propagates to the non-finite slot.) */
    const int a_max = (*mA == m);
    kvc_merge_scaled(mA, dA, nA, dB, nB, m, a_max, kvc_exp(KVC_SUB(a_max ? mB : *mA, m)));
}

/**
 * Segment reduction (SPEC 3), one dimension, rows in token order:
 *   m = max over the segment's scores (kvc_max, first row first);
 *   then for each row: kvc_seg_step(m, s_i, v_i, &den, &num);
 *   finally kvc_seg_close(m, &den, &num) (den = num = 0 if m == -Inf).
 * Callers start with den = num = 0.
 */
KVC_FN void kvc_seg_acc(float e, float v, float *den, float *num) { /* a row's weight e = kvc_exp(s - m) summed */
    *den = KVC_ADD(*den, e);
    *num = KVC_ADD(*num, KVC_MUL(e, v));
}
KVC_FN void kvc_seg_step(float m, float s, float v, float *den, float *num) {
    kvc_seg_acc(kvc_exp(KVC_SUB(s, m)), v, den, num);
}
KVC_FN void kvc_seg_close(float m, float *den, float *num) {
    int dead = (m == KVC_NEG_INF);
    *den = dead ? 0.0f : *den;
    *num = dead ? 0.0f : *num;
}

/** Largest power of two strictly below n (n >= 2): the tree's split point. */
KVC_FN kvc_i64 kvc_tree_split(kvc_i64 n) {
    kvc_i64 p = 1;
    while (p * 2 < n) p *= 2;
    return p;
}

/**
 * The canonical tree as a binary counter, for states produced in window
 * order.  After putting a state that covers `size` segments at stack[top]
 * (sizes[top] = size), KVC_TREE_PUSH merges it with the equal-sized complete
 * subtrees to its left; once every state is in, KVC_TREE_FOLD folds the stack
 * from the right, leaving T(0, n) at stack[0].  MERGE(l, r) must merge stack
 * entry r into entry l (l is the left, earlier part).  This reproduces the
 * tree of SPEC 3 (left part = largest power of two strictly below n) for any
 * sequence of complete, aligned subtrees given in order.
 */
#define KVC_TREE_PUSH(sizes, top, MERGE)                        \
    while ((top) >= 1 && (sizes)[(top) - 1] == (sizes)[(top)]) { \
        MERGE((top) - 1, (top));                                \
        (sizes)[(top) - 1] *= 2;                                \
        (top)--;                                                \
    }
#define KVC_TREE_FOLD(top, MERGE) \
    for (int kvc_k_ = (top) - 1; kvc_k_ >= 0; kvc_k_--) MERGE(kvc_k_, kvc_k_ + 1)

/** Number of 8-row segments of a window of `rows` rows. */
KVC_FN kvc_i64 kvc_num_segments(kvc_i64 rows) { return (rows + KVC_SEG - 1) / KVC_SEG; }

/** bf16 round-to-nearest-even of a binary32, as bits.  NaN -> 0x7FC0. */
KVC_FN kvc_u16 kvc_bf16_bits(float f) {
    kvc_u32 u = KVC_BITS(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (kvc_u16)KVC_BF16_QNAN;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (kvc_u16)(u >> 16);
}

/**
 * kvc_bf16_bits where a NaN's bits do not matter (the caller flags any
 * non-finite result, and a flagged slot is overwritten): on sm_80+ one
 * hardware conversion (cvt.rn.bf16.f32, round to nearest even, the same
 * bits for every non-NaN input; a NaN gives another NaN), else
 * kvc_bf16_bits.  tests/test_cuda_canon.cu compares every binary32.
 */
KVC_FN kvc_u16 kvc_bf16_bits_flagged(float f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    unsigned short h;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
#else
    return kvc_bf16_bits(f);
#endif
}
KVC_FN float kvc_bf16_to_f32(kvc_u16 h) { return KVC_FLOAT(((kvc_u32)h) << 16); }
KVC_FN float kvc_bf16_round(float f) { return kvc_bf16_to_f32(kvc_bf16_bits(f)); }

/** Exact ceil(log2(p)) for a positive normal binary32 p. */
KVC_FN int kvc_ceil_log2(float p) {
    kvc_u32 u = KVC_BITS(p);
    int e = (int)((u >> 23) & 0xFFu) - 127;
    return e + ((u & 0x7FFFFFu) != 0u ? 1 : 0);
}

/** 2^e as a binary32, for -126 <= e <= 127. */
KVC_FN float kvc_pow2(int e) { return KVC_FLOAT((kvc_u32)(e + 127) << 23); }

/**
 * ceil_log2(RN(a / k)) without the divide, for a positive normal binary32 a
 * and a constant k = mu 2^F with 1 < mu <= 1.75 (448 = 1.75 x 2^8, 6 =
 * 1.5 x 2^2), where the quotient is normal.  With a = m 2^E, a / k =
 * (m / mu) 2^(E - F) and m / mu lies in [1 / mu, 2 / mu):
 *  - m <= mu: m / mu <= 1 and >= 1 / mu >= 4/7, so RN(m / mu) is in
 *    (1/2, 1]: the result is E - F;
 *  - m > mu: m >= mu + 2^-23, so 2 > m / mu >= 1 + 2^-23 / mu > 1 + 2^-24,
 *    which rounds into (1, 2]: the result is E - F + 1.
 * m > mu is a comparison of the two mantissa fields.  tests/test_units.c
 * compares this with the divide's form for every float of both callers'
 * ranges (the cpu_exp_all test: all of them).
 */
KVC_FN int kvc_ceil_log2_quot(float a, float k) {
    const kvc_u32 u = KVC_BITS(a), v = KVC_BITS(k);
    return (int)(u >> 23) - (int)(v >> 23) + ((u & 0x7FFFFFu) > (v & 0x7FFFFFu) ? 1 : 0);
}

/**
 * Group exponent e of a quantisation group from its bf16 amax:
 * INT8: e = ceil_log2(max(amax, 1e-4) * (1/127));
 * FP8 : e = ceil_log2(max(amax, 1e-4) / 448) (kvc_ceil_log2_quot: the same
 * e, no divide).  Scale byte = e + 127.  INDEXER_FP8's e is the FP8 one.
 * (A non-finite amax gives some e: such a slot is flagged non-finite.)
 */
KVC_FN int kvc_group_exponent(float amax, int fp8) {
    float a = kvc_max(amax, KVC_AMAX_FLOOR);
    return fp8 ? kvc_ceil_log2_quot(a, KVC_FP8_MAX) : kvc_ceil_log2(KVC_MUL(a, KVC_INV127));
}

/** INT8 code: trunc(clamp(z * 2^-e, -127, 127)) as a two's-complement byte. */
KVC_FN kvc_u8 kvc_int8_code(float z, float inv_scale) {
    float v = KVC_MUL(z, inv_scale);
    v = v > 127.0f ? 127.0f : v;
    v = v < -127.0f ? -127.0f : v;
    return (kvc_u8)(kvc_i32)v; /* C conversion truncates toward zero */
}

/** e4m3fn code of v (|v| <= 448), round to nearest even, sign kept. */
KVC_FN kvc_u8 kvc_e4m3_code(float v) {
    kvc_u32 u = KVC_BITS(v);
    kvc_u32 sign = (u >> 24) & 0x80u;
    kvc_u32 a = u & 0x7FFFFFFFu;
    kvc_u32 code;
    if (a < 0x3C800000u) { /* |v| < 2^-6: subnormal range, quantum 2^-9 */
        float s = KVC_MUL(KVC_FLOAT(a), 512.0f);             /* exact        */
        float n = KVC_SUB(KVC_ADD(s, KVC_ROUND_MAGIC), KVC_ROUND_MAGIC); /* RNE */
        code = (kvc_u32)(kvc_i32)n; /* 0..8; 8 is the smallest normal code */
    } else {
        a += 0x7FFFFu + ((a >> 20) & 1u); /* round mantissa to 3 bits, RNE */
        a &= ~0xFFFFFu;
        code = ((((a >> 23) & 0xFFu) - 127u + 7u) << 3) | ((a >> 20) & 7u);
    }
    return (kvc_u8)(sign | code);
}

/** FP8 code of z in a group with inv = 2^-e: z x inv saturated to +-448,
 * as e4m3 (every backend's form). */
KVC_FN kvc_u8 kvc_fp8_code_int(float z, float inv) {
    float v = KVC_MUL(z, inv);
    v = v > KVC_FP8_MAX ? KVC_FP8_MAX : v;
    v = v < -KVC_FP8_MAX ? -KVC_FP8_MAX : v;
    return kvc_e4m3_code(v);
}

/**
 * The FP8 codes of z0 (low byte) and z1 (high byte) with inv = 2^-e: on
 * sm_89+ one hardware conversion of the two products
 * (cvt.rn.satfinite.e4m3x2.f32: round to nearest even, saturated to +-448,
 * the integer form's bytes for every non-NaN product; tests/test_cuda_canon.cu
 * compares all of them), else kvc_fp8_code_int twice.  (A NaN product only
 * occurs in a slot flagged non-finite, whose codes are overwritten.)
 */
KVC_FN kvc_u16 kvc_fp8_code2(float z0, float z1, float inv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    unsigned short h;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(KVC_MUL(z1, inv)), "f"(KVC_MUL(z0, inv)));
    return h;
#else
    return (kvc_u16)(kvc_fp8_code_int(z0, inv) | (kvc_u32)kvc_fp8_code_int(z1, inv) << 8);
#endif
}

/** The FP8 code of one z (kvc_fp8_code2's low byte). */
KVC_FN kvc_u8 kvc_fp8_code(float z, float inv) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return (kvc_u8)kvc_fp8_code2(z, 0.0f, inv);
#else
    return kvc_fp8_code_int(z, inv);
#endif
}

/** NOPE byte of z in a group with exponent e (clamps as the contract says). */
KVC_FN kvc_u8 kvc_nope_code(float z, int e, int fp8) {
    float inv = kvc_pow2(-e);
    return fp8 ? kvc_fp8_code(z, inv) : kvc_int8_code(z, inv);
}

/** rr = 1 / sqrt(ss / 512 + eps). */
KVC_FN float kvc_rms_scale(float ss, float eps) {
    return KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(ss, KVC_INV512), eps)));
}

/** y = (c * rr) * w. */
KVC_FN float kvc_rms_apply(float c, float rr, float w) {
    return KVC_MUL(KVC_MUL(c, rr), w);
}

/** Interleaved RoPE of the pair (u, v): u' = u cos - v sin, w' = v cos + u sin. */
KVC_FN void kvc_rope(float u, float v, float c, float s, float *uo, float *wo) {
    *uo = KVC_SUB(KVC_MUL(u, c), KVC_MUL(v, s));
    *wo = KVC_ADD(KVC_MUL(v, c), KVC_MUL(u, s));
}

/** 1 if bf16 bits are +-Inf or NaN. */
KVC_FN int kvc_bf16_nonfinite(kvc_u16 h) { return (h & 0x7F80u) == 0x7F80u; }

/* ---- finaliser pieces (every backend's finaliser is made of these) ------ */

/** Cos and sin of RoPE pair j (0..31) from its cos/sin row (split or interleaved). */
KVC_FN void kvc_cos_sin(KVC_GLOBAL const float *cs, int interleaved, int j, float *c, float *s) {
    *c = interleaved ? cs[2 * j] : cs[j];
    *s = interleaved ? cs[2 * j + 1] : cs[32 + j];
}

/** A normalised value y (a NOPE dim's, an indexer key's) rounded to bf16
 * (*z).  @return 1 if the bf16 value is non-finite. */
KVC_FN int kvc_nope_bf16(float y, float *z) {
    const kvc_u16 h = kvc_bf16_bits_flagged(y);
    *z = kvc_bf16_to_f32(h);
    return kvc_bf16_nonfinite(h);
}

/** RoPE pair (y0, y1) rotated and rounded to bf16 bits.  @return 1 if non-finite. */
KVC_FN int kvc_rope_bf16(float y0, float y1, float c, float s, kvc_u16 *h0, kvc_u16 *h1) {
    float uo, wo;
    kvc_rope(y0, y1, c, s, &uo, &wo);
    *h0 = kvc_bf16_bits_flagged(uo);
    *h1 = kvc_bf16_bits_flagged(wo);
    return kvc_nonfinite(uo) | kvc_nonfinite(wo) | kvc_bf16_nonfinite(*h0) | kvc_bf16_nonfinite(*h1);
}

/** The scale byte of a NOPE group of exponent e, or of a non-finite slot. */
#define KVC_SCALE_NONFINITE 0xFFu
KVC_FN kvc_u8 kvc_scale_byte(int e, int bad) { return bad ? (kvc_u8)KVC_SCALE_NONFINITE : (kvc_u8)(e + 127); }

/* ---- whole-slot finaliser ------------------------------------------------ */
/* c and y scratch live in KVC_FIN_SCRATCH memory: nothing for C and CUDA,
 * __local for OpenCL. */
#ifndef KVC_FIN_SCRATCH
#define KVC_FIN_SCRATCH
#endif

/** Write the non-finite slot (SPEC 2.4). */
KVC_FN void kvc_write_nonfinite_slot(KVC_GLOBAL kvc_u8 *payload, KVC_GLOBAL kvc_u8 *scales) {
    for (int i = 0; i < 448; i++) payload[i] = 0;
    for (int j = 0; j < 64; j++) {
        payload[448 + 2 * j] = (kvc_u8)(KVC_BF16_QNAN & 0xFFu);
        payload[448 + 2 * j + 1] = (kvc_u8)(KVC_BF16_QNAN >> 8);
    }
    for (int g = 0; g < 7; g++) scales[g] = kvc_scale_byte(0, 1);
    scales[7] = 0;
}

/** RMSNorm's sum: the balanced pairwise sum of c_d^2 over n (a power of
 * two) leaves, y as scratch; *bad |= a non-finite c_d. */
KVC_FN float kvc_sum_squares(const KVC_FIN_SCRATCH float *c, KVC_FIN_SCRATCH float *y, int n, int *bad) {
    for (int d = 0; d < n; d++) {
        *bad |= kvc_nonfinite(c[d]);
        y[d] = KVC_MUL(c[d], c[d]);
    }
    for (int m = n; m > 1; m >>= 1)
        for (int i = 0; i < m / 2; i++) y[i] = KVC_ADD(y[2 * i], y[2 * i + 1]);
    return y[0];
}

/** x < 0 ? -x : x (-0 and a NaN kept as they are), as a flip of the sign
 * bit: written as the select, gcc made a branch of it on x86-64 without
 * AVX-512F, mispredicted on values of random sign. */
KVC_FN float kvc_abs(float x) { return KVC_FLOAT(KVC_BITS(x) ^ (kvc_u32)(x < 0.0f) << 31); }

/**
 * max |x_d| over the n (a multiple of 16) values of a slot that is not
 * non-finite: 16 running maxima, then a tree of them.  For finite values
 * the order of a max does not matter (only the sign of a zero result can,
 * and every caller floors the result at a positive constant), so this
 * equals the serial kvc_max of the contract, in a form compilers vectorise
 * (the serial chain is one dependent max per value).
 */
KVC_FN float kvc_amax(const KVC_FIN_SCRATCH float *x, int n) {
    float l[16];
    for (int j = 0; j < 16; j++) l[j] = 0.0f;
    for (int d = 0; d < n; d += 16)
        for (int j = 0; j < 16; j++) {
            const float a = kvc_abs(x[d + j]);
            l[j] = l[j] > a ? l[j] : a;
        }
    for (int w = 8; w >= 1; w >>= 1)
        for (int j = 0; j < w; j++) l[j] = l[j] > l[j + w] ? l[j] : l[j + w];
    return l[0];
}

/**
 * Finalise one output: from c[512] (the reduced window) to the 576 payload
 * bytes and 8 scale bytes.  `cs` points at the cos/sin row; cos_j is
 * cs[j * cos_step] ... see kvc_cos_index.  Uses y[512] scratch from caller.
 * @return 1 if the slot was written as non-finite, else 0.
 */
KVC_FN int kvc_finalize_slot(const KVC_FIN_SCRATCH float *c, KVC_FIN_SCRATCH float *y, KVC_GLOBAL const kvc_u16 *w,
                             KVC_GLOBAL const float *cs, int interleaved, float eps, int fp8,
                             KVC_GLOBAL kvc_u8 *payload, KVC_GLOBAL kvc_u8 *scales) {
    int bad = 0;
    float rr = kvc_rms_scale(kvc_sum_squares(c, y, 512, &bad), eps);
    for (int d = 0; d < 512; d++) {
        y[d] = kvc_rms_apply(c[d], rr, kvc_bf16_to_f32(w[d]));
        bad |= kvc_nonfinite(y[d]);
    }
    /* RoPE on dims 448..511. */
    kvc_u16 rope[64];
    for (int j = 0; j < 32; j++) {
        float cj, sj;
        kvc_cos_sin(cs, interleaved, j, &cj, &sj);
        bad |= kvc_rope_bf16(y[448 + 2 * j], y[449 + 2 * j], cj, sj, &rope[2 * j], &rope[2 * j + 1]);
    }
    /* bf16 of the NOPE dims (in place) and per-group exponents. */
    int ex[7];
    for (int g = 0; g < 7; g++) {
        for (int d = 64 * g; d < 64 * g + 64; d++) {
            float z;
            bad |= kvc_nope_bf16(y[d], &z);
            y[d] = z;
        }
        ex[g] = kvc_group_exponent(kvc_amax(y + 64 * g, 64), fp8); /* (bad: not used) */
    }
    if (bad) {
        kvc_write_nonfinite_slot(payload, scales);
        return 1;
    }
    for (int g = 0; g < 7; g++) {
        for (int d = 64 * g; d < 64 * g + 64; d++) payload[d] = kvc_nope_code(y[d], ex[g], fp8);
        scales[g] = kvc_scale_byte(ex[g], 0);
    }
    scales[7] = 0;
    for (int j = 0; j < 64; j++) {
        payload[448 + 2 * j] = (kvc_u8)(rope[j] & 0xFFu);
        payload[449 + 2 * j] = (kvc_u8)(rope[j] >> 8);
    }
    return 0;
}


/* ---- head width 128: the indexer's slots (the contract's section 9) ----- */

#define KVC_INV128 0x1p-7f
#define KVC_INV_SQRT128 0x1.6a09e6p-4f /* 1/sqrt(128) rounded to binary32 */
#define KVC_MX_AMAX_FLOOR 0x1.8p-124f  /* 6 * 2^-126                     */
/* Slot formats, the values of kvc_nope_format (kvcompress.h) */
#define KVC_FMT_INT8 0
#define KVC_FMT_FP8 1
#define KVC_FMT_IFP8 2  /* INDEXER_FP8   */
#define KVC_FMT_MXFP4 3 /* INDEXER_MXFP4 */

/** The e2m1 code (sign bit 3) of v: the magnitude to the nearest of 0, 0.5,
 * 1, 1.5, 2, 3, 4, 6, a tie to the even code (0.25 -> 0, 0.75 -> 1.0, 1.25
 * -> 1.0, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), saturating at 6: the
 * number of decision points the magnitude passes, without branches (SIMD
 * and GPU lanes take one path). */
KVC_FN kvc_u8 kvc_e2m1_code(float v) {
    const kvc_u32 u = KVC_BITS(v);
    const float m = KVC_FLOAT(u & 0x7FFFFFFFu);
    const int code = (m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) + (m >= 3.5f) + (m > 5.0f);
    return (kvc_u8)(((u >> 28) & 8u) | (kvc_u32)code);
}

/** INDEXER_MXFP4's exponent of a block of 32 whose largest magnitude is
 * amax: the smallest e with 2^e >= max(amax, 6 x 2^-126) / 6, in
 * [-127, 127]. */
KVC_FN int kvc_mx_exponent(float amax) {
    const int e = kvc_ceil_log2_quot(kvc_max(amax, KVC_MX_AMAX_FLOOR), 6.0f); /* ceil_log2(RN(a / 6)) */
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

/** x <- H x / sqrt(128): the Sylvester-ordered Walsh-Hadamard butterflies
 * (h = 1, 2, ..., 64; the pairs (i, i + h) with bit h of i clear, which
 * are independent within a stage, walked block by block), then every value
 * times 1/sqrt(128). */
KVC_FN void kvc_hadamard128(KVC_FIN_SCRATCH float *x) {
    for (int h = 1; h < 128; h <<= 1)
        for (int b = 0; b < 128; b += 2 * h)
            for (int i = b; i < b + h; i++) {
                const float a = x[i], c = x[i + h];
                x[i] = KVC_ADD(a, c);
                x[i + h] = KVC_SUB(a, c);
            }
    for (int i = 0; i < 128; i++) x[i] = KVC_MUL(x[i], KVC_INV_SQRT128);
}

/**
 * The slot of one output of head width 128 from its window sums c[128]:
 * RMSNorm over 128 (w: 128 bf16 weights), RoPE on dims 64..127, the
 * optional rotation, bf16, then INDEXER_FP8 (KVC_FMT_IFP8: 128 e4m3 values at
 * payload, the binary32 scale 2^e at scale) or INDEXER_MXFP4 (KVC_FMT_MXFP4: 64
 * bytes of e2m1 pairs at payload, 4 scale bytes e + 127 at scale).  x is
 * 128 floats of scratch.  @return 1 for a non-finite slot (written as
 * such), else 0.
 */
KVC_FN int kvc_finalize_indexer(const KVC_FIN_SCRATCH float *c, KVC_FIN_SCRATCH float *x, KVC_GLOBAL const kvc_u16 *w,
                                KVC_GLOBAL const float *cs, int interleaved, float eps, int rotate, int fmt,
                                KVC_GLOBAL kvc_u8 *payload, KVC_GLOBAL kvc_u8 *scale) {
    int bad = 0;
    const float ss = kvc_sum_squares(c, x, 128, &bad);
    const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(ss, KVC_INV128), eps)));
    for (int d = 0; d < 128; d++) {
        x[d] = kvc_rms_apply(c[d], rr, kvc_bf16_to_f32(w[d]));
        bad |= kvc_nonfinite(x[d]);
    }
    for (int j = 0; j < 32; j++) {
        float cj, sj, uo, wo;
        kvc_cos_sin(cs, interleaved, j, &cj, &sj);
        kvc_rope(x[64 + 2 * j], x[65 + 2 * j], cj, sj, &uo, &wo);
        x[64 + 2 * j] = uo;
        x[65 + 2 * j] = wo;
    }
    if (rotate) kvc_hadamard128(x);
    for (int d = 0; d < 128; d++) {
        float z;
        bad |= kvc_nonfinite(x[d]);
        bad |= kvc_nope_bf16(x[d], &z);
        x[d] = z;
    }
    if (fmt == KVC_FMT_IFP8) {
        if (bad) {
            for (int d = 0; d < 128; d++) payload[d] = 0;
            scale[0] = 0x00, scale[1] = 0x00, scale[2] = 0xC0, scale[3] = 0x7F; /* quiet NaN */
            return 1;
        }
        const float amax = kvc_amax(x, 128);
        const int e = kvc_group_exponent(amax, 1);
        const float inv = kvc_pow2(-e);
        for (int d = 0; d < 128; d++) payload[d] = kvc_fp8_code(x[d], inv);
        const kvc_u32 sb = KVC_BITS(kvc_pow2(e));
        for (int k = 0; k < 4; k++) scale[k] = (kvc_u8)(sb >> (8 * k));
        return 0;
    }
    if (bad) {
        for (int k = 0; k < 64; k++) payload[k] = 0;
        for (int k = 0; k < 4; k++) scale[k] = 0xFF;
        return 1;
    }
    for (int b = 0; b < 4; b++) {
        const float amax = kvc_amax(x + 32 * b, 32);
        const int e = kvc_mx_exponent(amax);
        const float inv = kvc_pow2(-e);
        for (int k = 16 * b; k < 16 * b + 16; k++)
            payload[k] = (kvc_u8)(kvc_e2m1_code(KVC_MUL(x[2 * k], inv)) | (kvc_e2m1_code(KVC_MUL(x[2 * k + 1], inv)) << 4));
        scale[b] = (kvc_u8)(e + 127);
    }
    return 0;
}

#endif /* KVC_CANON_H */
