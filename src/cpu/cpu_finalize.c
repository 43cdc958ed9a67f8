/*
 * cpu_finalize.c -- kvc_finalize_slot (kvc_canon.h) in AVX-512F for the
 * CPU backend: the RMS tree, the norm, RoPE, bf16 and the NOPE codes 16
 * dims at a time.  Each lane does the scalar finaliser's operations in its
 * order (the tree's pairs are the same pairs, gathered by permutes), so the
 * bytes are the same; tests/test_units.c compares the two on random and
 * special inputs, and every golden case runs through it.
 */
#include <math.h>
#include <string.h>

#include "cpu_simd.h"
#include "kvc_canon.h"

#if KVC_CPU_AVX512
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define AVX512_INLINE __attribute__((target("avx512f"), always_inline)) static inline

/* lanes 0, 2, ..., 30 and 1, 3, ..., 31 of two vectors: one pair's halves */
static const int32_t kEven[16] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30};
static const int32_t kOdd[16] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};

/* kvc_nonfinite of each lane */
AVX512_INLINE __mmask16 nonfinite16(__m512 x) {
    const __m512i e = _mm512_set1_epi32(0x7F800000);
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(x), e), e);
}
/* kvc_bf16_bits of each lane, in its low 16 bits */
AVX512_INLINE __m512i bf16_bits16(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7FFF), lsb)), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                  _mm512_set1_epi32(0x7F800000));
    return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32((int)KVC_BF16_QNAN));
}
/* kvc_bf16_nonfinite of each lane's bits */
AVX512_INLINE __mmask16 bf16_nonfinite16(__m512i h) {
    const __m512i e = _mm512_set1_epi32(0x7F80);
    return _mm512_cmpeq_epi32_mask(_mm512_and_si512(h, e), e);
}
/* kvc_e4m3_code of each lane (|v| <= 448), in its low 8 bits */
AVX512_INLINE __m512i e4m3_code16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80));
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    /* |v| < 2^-6: quantum 2^-9, round to nearest even */
    const __m512 s = _mm512_mul_ps(_mm512_castsi512_ps(a), _mm512_set1_ps(512.0f));
    const __m512 n = _mm512_sub_ps(_mm512_add_ps(s, _mm512_set1_ps(KVC_ROUND_MAGIC)), _mm512_set1_ps(KVC_ROUND_MAGIC));
    const __m512i sub = _mm512_cvttps_epi32(n);
    /* normal: the mantissa rounded to 3 bits, RNE */
    __m512i b = _mm512_and_si512(_mm512_srli_epi32(a, 20), _mm512_set1_epi32(1));
    b = _mm512_and_si512(_mm512_add_epi32(a, _mm512_add_epi32(_mm512_set1_epi32(0x7FFFF), b)),
                         _mm512_set1_epi32(~0xFFFFF));
    const __m512i ex = _mm512_sub_epi32(_mm512_and_si512(_mm512_srli_epi32(b, 23), _mm512_set1_epi32(0xFF)),
                                        _mm512_set1_epi32(127 - 7));
    const __m512i norm = _mm512_or_si512(_mm512_slli_epi32(ex, 3),
                                         _mm512_and_si512(_mm512_srli_epi32(b, 20), _mm512_set1_epi32(7)));
    const __mmask16 small = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(0x3C800000));
    return _mm512_or_si512(sign, _mm512_mask_mov_epi32(norm, small, sub));
}
/* the NOPE bytes of 16 bf16-rounded dims z of a group with exponent e */
AVX512_INLINE __m128i nope_codes16(__m512 z, float inv, int fp8) {
    const __m512 v = _mm512_mul_ps(z, _mm512_set1_ps(inv));
    if (!fp8) {
        const __m512 q = _mm512_max_ps(_mm512_min_ps(v, _mm512_set1_ps(127.0f)), _mm512_set1_ps(-127.0f));
        return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
    }
    const __m512 q = _mm512_max_ps(_mm512_min_ps(v, _mm512_set1_ps(KVC_FP8_MAX)), _mm512_set1_ps(-KVC_FP8_MAX));
    return _mm512_cvtepi32_epi8(e4m3_code16(q));
}

/* RMSNorm's sum (kvc_sum_squares): the balanced pairwise sum of c_d^2 over
 * n dims, level by level, y as scratch; *bad |= the non-finite c_d. */
AVX512_INLINE float sum_squares16(const float *c, float *y, int n, __mmask16 *bad) {
    const __m512i even = _mm512_loadu_si512(kEven), odd = _mm512_loadu_si512(kOdd);
    for (int d = 0; d < n; d += 16) {
        const __m512 x = _mm512_loadu_ps(c + d);
        *bad |= nonfinite16(x);
        _mm512_storeu_ps(y + d, _mm512_mul_ps(x, x));
    }
    for (; n >= 32; n >>= 1) /* y[i] = y[2i] + y[2i + 1], in place: a block is read before it is written */
        for (int i = 0; i < n / 2; i += 16) {
            const __m512 lo = _mm512_loadu_ps(y + 2 * i), hi = _mm512_loadu_ps(y + 2 * i + 16);
            _mm512_storeu_ps(y + i, _mm512_add_ps(_mm512_permutex2var_ps(lo, even, hi),
                                                  _mm512_permutex2var_ps(lo, odd, hi)));
        }
    /* the last 16 in a register: lane i = lane 2i + lane 2i + 1 (the lanes past n / 2 unused) */
    __m512 v = _mm512_loadu_ps(y);
    for (; n > 1; n >>= 1) v = _mm512_add_ps(_mm512_permutexvar_ps(even, v), _mm512_permutexvar_ps(odd, v));
    return _mm512_cvtss_f32(v);
}

/* y = (c * rr) * w of dims d .. d + 15 (kvc_rms_apply) */
AVX512_INLINE __m512 rms_apply16(const float *c, const uint16_t *w, int d, __m512 rr) {
    const __m512i wb = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)(w + d)));
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(c + d), rr), _mm512_castsi512_ps(_mm512_slli_epi32(wb, 16)));
}

/* RoPE of pairs j .. j + 15 whose dims are the 32 lanes of lo, hi (pair k:
 * lanes 2k, 2k + 1): u' in *uo, w' in *wo, pair by pair (kvc_rope) */
AVX512_INLINE void rope16(__m512 lo, __m512 hi, const float *cs, int j, int interleaved, __m512 *uo, __m512 *wo) {
    const __m512i even = _mm512_loadu_si512(kEven), odd = _mm512_loadu_si512(kOdd);
    const __m512 u = _mm512_permutex2var_ps(lo, even, hi), v = _mm512_permutex2var_ps(lo, odd, hi);
    __m512 cj, sj;
    if (interleaved) {
        const __m512 a = _mm512_loadu_ps(cs + 2 * j), b = _mm512_loadu_ps(cs + 2 * j + 16);
        cj = _mm512_permutex2var_ps(a, even, b);
        sj = _mm512_permutex2var_ps(a, odd, b);
    } else {
        cj = _mm512_loadu_ps(cs + j);
        sj = _mm512_loadu_ps(cs + 32 + j);
    }
    *uo = _mm512_sub_ps(_mm512_mul_ps(u, cj), _mm512_mul_ps(v, sj));
    *wo = _mm512_add_ps(_mm512_mul_ps(v, cj), _mm512_mul_ps(u, sj));
}

AVX512 int kvc_cpu_finalize_avx512(const float *c, float *y, const uint16_t *w, const float *cs, int interleaved,
                                   float eps, int fp8, uint8_t *payload, uint8_t *scales) {
    __mmask16 bad = 0;
    /* RMSNorm: the balanced pairwise sum of c_d^2, level by level */
    const __m512 rr = _mm512_set1_ps(kvc_rms_scale(sum_squares16(c, y, 512, &bad), eps));
    for (int d = 0; d < 512; d += 16) {
        const __m512 yv = rms_apply16(c, w, d, rr);
        bad |= nonfinite16(yv);
        _mm512_storeu_ps(y + d, yv);
    }
    /* RoPE on dims 448..511: pairs j .. j + 15 per vector, rope[j] = the
     * bf16 bits of u' (low half) and w' (high half) */
    uint32_t rope[32];
    for (int j = 0; j < 32; j += 16) {
        __m512 uo, wo;
        rope16(_mm512_loadu_ps(y + 448 + 2 * j), _mm512_loadu_ps(y + 448 + 2 * j + 16), cs, j, interleaved, &uo, &wo);
        const __m512i h0 = bf16_bits16(uo), h1 = bf16_bits16(wo);
        bad |= nonfinite16(uo) | nonfinite16(wo) | bf16_nonfinite16(h0) | bf16_nonfinite16(h1);
        _mm512_storeu_si512(rope + j, _mm512_or_si512(h0, _mm512_slli_epi32(h1, 16)));
    }
    /* bf16 of the NOPE dims (in place) and each group's exponent */
    int ex[7];
    for (int g = 0; g < 7; g++) {
        __m512 amax = _mm512_setzero_ps();
        for (int d = 64 * g; d < 64 * g + 64; d += 16) {
            const __m512i h = bf16_bits16(_mm512_loadu_ps(y + d));
            bad |= bf16_nonfinite16(h);
            const __m512 z = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
            _mm512_storeu_ps(y + d, z);
            amax = _mm512_max_ps(amax, _mm512_abs_ps(z));
        }
        ex[g] = kvc_group_exponent(_mm512_reduce_max_ps(amax), fp8); /* a NaN only where bad */
    }
    if (bad) {
        kvc_write_nonfinite_slot(payload, scales);
        return 1;
    }
    for (int g = 0; g < 7; g++) {
        const float inv = kvc_pow2(-ex[g]);
        for (int d = 64 * g; d < 64 * g + 64; d += 16)
            _mm_storeu_si128((__m128i *)(void *)(payload + d), nope_codes16(_mm512_loadu_ps(y + d), inv, fp8));
        scales[g] = kvc_scale_byte(ex[g], 0);
    }
    scales[7] = 0;
    memcpy(payload + 448, rope, sizeof rope); /* little-endian: u' then w' of each pair */
    return 0;
}


/* kvc_e2m1_code of each lane (as kvc_canon.h: the decision points passed, sign bit 3), in its low bits */
AVX512_INLINE __m512i e2m1_code16(__m512 v) {
    const __m512i u = _mm512_castps_si512(v);
    const __m512 m = _mm512_castsi512_ps(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)));
    static const float gt[4] = {0.25f, 1.25f, 2.5f, 5.0f}, ge[3] = {0.75f, 1.75f, 3.5f};
    __m512i code = _mm512_and_si512(_mm512_srli_epi32(u, 28), _mm512_set1_epi32(8));
    const __m512i one = _mm512_set1_epi32(1);
    for (int k = 0; k < 4; k++)
        code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(gt[k]), _CMP_GT_OQ), code, one);
    for (int k = 0; k < 3; k++)
        code = _mm512_mask_add_epi32(code, _mm512_cmp_ps_mask(m, _mm512_set1_ps(ge[k]), _CMP_GE_OQ), code, one);
    return code;
}

/* max |z| of n vectors (kvc_amax: order-free for the finite values it is used on) */
AVX512_INLINE float amax16(const __m512 *z, int n) {
    __m512 a = _mm512_setzero_ps();
    for (int k = 0; k < n; k++) a = _mm512_max_ps(a, _mm512_abs_ps(z[k]));
    return _mm512_reduce_max_ps(a);
}

/*
 * kvc_finalize_indexer in AVX-512F: head width 128 in eight vectors.  The
 * RMS tree as kvc_finalize_slot's; RoPE's pairs gathered and put back by
 * permutes; the Walsh-Hadamard butterflies with h < 16 inside a vector (a
 * lane's partner by a permute, the sum or difference by its bit h), with h
 * >= 16 between vectors; each lane's operations those of the scalar form,
 * in its order.  tests/test_units.c compares the two.
 */
AVX512 int kvc_cpu_finalize_indexer_avx512(const float *c, float *y, const uint16_t *w, const float *cs,
                                           int interleaved, float eps, int rotate, int fmt, uint8_t *payload,
                                           uint8_t *scale) {
    const __m512i even = _mm512_loadu_si512(kEven), odd = _mm512_loadu_si512(kOdd);
    __mmask16 bad = 0;
    const float ss = sum_squares16(c, y, 128, &bad);
    const __m512 rr = _mm512_set1_ps(KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(ss, KVC_INV128), eps))));
    __m512 x[8];
    for (int k = 0; k < 8; k++) {
        x[k] = rms_apply16(c, w, 16 * k, rr);
        bad |= nonfinite16(x[k]);
    }
    /* RoPE on dims 64..127 (vectors 4..7): pairs j .. j + 15 of vectors 4 + 2t, 5 + 2t */
    static const int32_t kLo[16] = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
    static const int32_t kHi[16] = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i ilo = _mm512_loadu_si512(kLo), ihi = _mm512_loadu_si512(kHi);
    for (int t = 0; t < 2; t++) {
        __m512 uo, wo;
        rope16(x[4 + 2 * t], x[5 + 2 * t], cs, 16 * t, interleaved, &uo, &wo);
        x[4 + 2 * t] = _mm512_permutex2var_ps(uo, ilo, wo);
        x[5 + 2 * t] = _mm512_permutex2var_ps(uo, ihi, wo);
    }
    if (rotate) {
        /* h = 1, 2, 4, 8: lane l's partner l ^ h; the lanes with bit h set take the difference */
        static const int32_t kPartner[4][16] = {{1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14},
                                                {2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13},
                                                {4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11},
                                                {8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7}};
        static const __mmask16 kHigh[4] = {0xAAAA, 0xCCCC, 0xF0F0, 0xFF00};
        for (int lv = 0; lv < 4; lv++) {
            const __m512i pi = _mm512_loadu_si512(kPartner[lv]);
            const __mmask16 hi = kHigh[lv];
            for (int k = 0; k < 8; k++) {
                const __m512 p = _mm512_permutexvar_ps(pi, x[k]);
                x[k] = _mm512_mask_blend_ps(hi, _mm512_add_ps(x[k], p), _mm512_sub_ps(p, x[k]));
            }
        }
        for (int hv = 1; hv < 8; hv <<= 1) /* h = 16 hv: vectors k and k + hv */
            for (int k = 0; k < 8; k++)
                if ((k & hv) == 0) {
                    const __m512 a = x[k], b = x[k + hv];
                    x[k] = _mm512_add_ps(a, b);
                    x[k + hv] = _mm512_sub_ps(a, b);
                }
        for (int k = 0; k < 8; k++) x[k] = _mm512_mul_ps(x[k], _mm512_set1_ps(KVC_INV_SQRT128));
    }
    __m512 z[8];
    for (int k = 0; k < 8; k++) {
        bad |= nonfinite16(x[k]);
        const __m512i h = bf16_bits16(x[k]);
        bad |= bf16_nonfinite16(h);
        z[k] = _mm512_castsi512_ps(_mm512_slli_epi32(h, 16));
    }
    if (fmt == KVC_FMT_IFP8) {
        if (bad) {
            memset(payload, 0, 128);
            scale[0] = 0x00, scale[1] = 0x00, scale[2] = 0xC0, scale[3] = 0x7F; /* quiet NaN */
            return 1;
        }
        const int e = kvc_group_exponent(amax16(z, 8), 1);
        const float inv = kvc_pow2(-e);
        for (int k = 0; k < 8; k++)
            _mm_storeu_si128((__m128i *)(void *)(payload + 16 * k), nope_codes16(z[k], inv, 1));
        const uint32_t sb = KVC_BITS(kvc_pow2(e));
        memcpy(scale, &sb, 4); /* little-endian */
        return 0;
    }
    if (bad) {
        memset(payload, 0, 64);
        memset(scale, 0xFF, 4);
        return 1;
    }
    for (int b = 0; b < 4; b++) { /* blocks of 32 dims: vectors 2b, 2b + 1 */
        const int e = kvc_mx_exponent(amax16(z + 2 * b, 2));
        const __m512 inv = _mm512_set1_ps(kvc_pow2(-e));
        const __m512i lo = e2m1_code16(_mm512_mul_ps(z[2 * b], inv)), hi = e2m1_code16(_mm512_mul_ps(z[2 * b + 1], inv));
        const __m512i ev = _mm512_permutex2var_epi32(lo, even, hi), od = _mm512_permutex2var_epi32(lo, odd, hi);
        _mm_storeu_si128((__m128i *)(void *)(payload + 16 * b), _mm512_cvtepi32_epi8(_mm512_or_si512(ev, _mm512_slli_epi32(od, 4))));
        scale[b] = (uint8_t)(e + 127);
    }
    return 0;
}

#endif
