/*
 * cpu_avx2.c -- the CPU backend's segment loop in AVX2 + FMA, for x86-64
 * CPUs without AVX-512F (cpu_simd.h).  The same IEEE operations in the same
 * order as the portable loop and the AVX-512F one, 8 dims per vector:
 *   - exp8: kvc_exp with k = rint(x * log2e) by vroundps (the round-magic
 *     add and subtract round to nearest even the same way for |x log2e| <
 *     2^22), x - k ln2_hi by one vfnmadd (KVC_SUB_K_LN2_HI: the product is
 *     exact), 2^k from k's integer bits as kvc_exp builds it from m's, the
 *     cutoff by a mask.  Equal to kvc_exp on every non-positive float, -Inf
 *     and NaN (test cpu_exp_all);
 *   - the segment max: vmaxps, redone with kvc_max's NaN-propagating form
 *     wherever the max is -Inf (the reasoning of cpu_backend.c's seg16).
 * The prefetches are cpu_backend.c's: per 16 dims (one line of each row),
 * the rows' lines 64 dims ahead into L1 between the maxes, and the next
 * segment's line into L2 between the exps.
 */
#include "cpu_simd.h"

#if KVC_CPU_AVX2
#include <immintrin.h>
#include <math.h>

#include "kvc_canon.h"

#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

AVX2_INLINE __m256 exp8(__m256 x) {
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(KVC_LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r = _mm256_sub_ps(_mm256_fnmadd_ps(k, _mm256_set1_ps(KVC_LN2_HI), x),
                                   _mm256_mul_ps(k, _mm256_set1_ps(KVC_LN2_LO)));
    __m256 q = _mm256_set1_ps(kvc_cpu_exp_poly[0]);
    for (int j = 1; j < 7; j++) q = _mm256_add_ps(_mm256_mul_ps(q, r), _mm256_set1_ps(kvc_cpu_exp_poly[j]));
    /* 2^k; k outside [-126, 0] only where x < cutoff (masked) or x is NaN
     * (q is NaN then) */
    const __m256i eb = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    const __m256 res = _mm256_mul_ps(q, _mm256_castsi256_ps(eb));
    /* x < cutoff (ordered: a NaN x is kept and flows through) */
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(KVC_EXP_CUTOFF), _CMP_LT_OQ), res);
}

/* Where dims [d, d + 8) of a row p are: at p + d, or (split, d < 0) the
 * row's split vector -- dims [0, h) in lanes [0, h) and [504 + h, 512) in
 * lanes [h, 8) -- by two masked loads (hm: lanes < h, tm: the others). */
typedef struct {
    __m256i hm, tm;
    int nd; /* the rows' dims */
} split8;
AVX2_INLINE __m256 ld8(const float *p, int d, const split8 *sp) {
    if (d >= 0) return _mm256_loadu_ps(p + d);
    return _mm256_or_ps(_mm256_maskload_ps(p, sp->hm), _mm256_maskload_ps(p + sp->nd - 8, sp->tm));
}
AVX2_INLINE void st8(float *p, int d, const split8 *sp, __m256 v) {
    if (d >= 0) {
        _mm256_storeu_ps(p + d, v);
    } else {
        _mm256_maskstore_ps(p, sp->hm, v);
        _mm256_maskstore_ps(p + sp->nd - 8, sp->tm, v);
    }
}

/* Dims [d, d + 8) of a row of the state: float (ld8), or (bf16) 8 bf16
 * values at p's bits widened as kvc_bf16_to_f32 does (the row's elements are
 * uint16_t; no split vector: d >= 0). */
AVX2_INLINE __m256 ldrow8(const float *p, int d, const split8 *sp, int bf16) {
    if (!bf16) return ld8(p, d, sp);
    const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)((const uint16_t *)(const void *)p + d));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* kvc_max's NaN-propagating max: a NaN in m is kept (maxps would drop it) */
AVX2_INLINE __m256 max_nan(__m256 m, __m256 s) {
    return _mm256_blendv_ps(_mm256_max_ps(m, s), m, _mm256_cmp_ps(m, m, _CMP_UNORD_Q));
}

/* The segment arithmetic of dims [d, d + 8): m, den, num out; row i's
 * prefetches (pf; NULL: none) between its max and between its exp.  bf16:
 * bf16 rows; br: each score row's bias row (SPEC 10; NULL: none), added as
 * the scores load. */
AVX2_INLINE void seg8(const float *const *sr, const float *const *vr, int d, const split8 *sp,
                      const kvc_cpu_block_pf *pf, int bf16, const float *const *br, __m256 *om, __m256 *oden,
                      __m256 *onum) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
    __m256 sv[KVC_SEG];
    for (int i = 0; i < KVC_SEG; i++) {
        sv[i] = ldrow8(sr[i], d, sp, bf16);
        if (br) sv[i] = _mm256_add_ps(sv[i], _mm256_loadu_ps(br[i] + d));
    }
    __m256 m = sv[0];
    for (int i = 0; i < KVC_SEG; i++) {
        if (i) m = _mm256_max_ps(m, sv[i]);
        if (pf) kvc_cpu_l1_prefetch(pf, i);
    }
    if (_mm256_movemask_ps(_mm256_cmp_ps(m, ninf, _CMP_EQ_OQ))) {
        m = sv[0];
        for (int i = 1; i < KVC_SEG; i++) m = max_nan(m, sv[i]);
    }
    __m256 den = zero, num = zero;
    for (int i = 0; i < KVC_SEG; i++) { /* kvc_seg_step, rows in order */
        const __m256 e = exp8(_mm256_sub_ps(sv[i], m));
        if (pf) kvc_cpu_l2_prefetch(pf, i);
        den = _mm256_add_ps(den, e);
        num = _mm256_add_ps(num, _mm256_mul_ps(e, ldrow8(vr[i], d, sp, bf16)));
    }
    const __m256 dead = _mm256_cmp_ps(m, ninf, _CMP_EQ_OQ); /* kvc_seg_close */
    *om = m;
    *oden = _mm256_andnot_ps(dead, den);
    *onum = _mm256_andnot_ps(dead, num);
}

/* kvc_merge of dims [d, d + 8): the left state l merged with (m, den, num),
 * which receive the result. */
AVX2_INLINE void merge8(const kvc_cpu_seg_state *l, int d, const split8 *sp, __m256 *m, __m256 *den, __m256 *num) {
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 lm = ld8(l->m, d, sp), ld = ld8(l->den, d, sp), ln = ld8(l->num, d, sp);
    const __m256 mx = max_nan(lm, *m); /* kvc_max(lm, m) */
    const __m256 a_max = _mm256_cmp_ps(lm, mx, _CMP_EQ_OQ);
    const __m256 f = exp8(_mm256_sub_ps(_mm256_blendv_ps(lm, *m, a_max), mx));
    const __m256 fa = _mm256_blendv_ps(f, one, a_max), fb = _mm256_blendv_ps(one, f, a_max);
    const __m256 dd = _mm256_add_ps(_mm256_mul_ps(ld, fa), _mm256_mul_ps(*den, fb));
    const __m256 nn = _mm256_add_ps(_mm256_mul_ps(ln, fa), _mm256_mul_ps(*num, fb));
    const __m256 dead = _mm256_cmp_ps(mx, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ);
    *m = mx;
    *den = _mm256_andnot_ps(dead, dd);
    *num = _mm256_andnot_ps(dead, nn);
}

/* The dims [d, d + 8) of the segment (d < 0: the split vector) reduced and
 * merged into the left states, into out. */
AVX2_INLINE void seg_step8(const float *const *sr, const float *const *vr, int d, const split8 *sp,
                           const kvc_cpu_block_pf *pf, int bf16, const float *const *br, kvc_cpu_seg_state *out,
                           kvc_cpu_seg_state *const *left, int k) {
    __m256 m, den, num;
    seg8(sr, vr, d, sp, pf, bf16, br, &m, &den, &num);
    for (int j = 0; j < k; j++) merge8(left[j], d, sp, &m, &den, &num);
    st8(out->m, d, sp, m);
    st8(out->den, d, sp, den);
    st8(out->num, d, sp, num);
}

/* Float rows that all start h dims before a 32-byte boundary (numpy's and
 * malloc's large buffers start 16 bytes into a page) are read in aligned
 * vectors, dims [h, h + 504), and one split vector, so that no load spans
 * two lines (as cpu_backend.c's AVX-512F loop); bf16 rows and biased
 * scores as they come (h = 0). */
AVX2_INLINE void seg_reduce8_body(int nd, const float *const *sr, const float *const *vr, const float *const *pfs,
                                  const float *const *pfv, kvc_cpu_seg_state *st, kvc_cpu_seg_state *const *left,
                                  int k, int bf16, const float *const *br) {
    kvc_cpu_seg_state *out = k ? left[k - 1] : st;
    const int h = bf16 || br ? 0 : kvc_cpu_rows_head(sr, vr, KVC_SEG, 32);
    split8 sp = {_mm256_setzero_si256(), _mm256_setzero_si256(), nd};
    if (h) {
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        sp.hm = _mm256_cmpgt_epi32(_mm256_set1_epi32(h), lane);
        sp.tm = _mm256_xor_si256(sp.hm, _mm256_set1_epi32(-1));
        const kvc_cpu_block_pf pf = {sr, vr, pfs, pfv, 0, nd, 4};
        seg_step8(sr, vr, -1, &sp, &pf, 0, NULL, out, left, k);
    }
    /* the aligned vectors [h, end); per 16 dims the first issues the
     * block's prefetches (line 0's also after the split step's: dropping
     * those measured no better) */
    const int end = h ? nd - 8 + h : nd;
    for (int b = h; b + 8 <= end; b += 16) {
        const kvc_cpu_block_pf pf = {sr, vr, pfs, pfv, b, nd, bf16 ? 2 : 4};
        seg_step8(sr, vr, b, &sp, &pf, bf16, br, out, left, k);
        if (b + 16 <= end) seg_step8(sr, vr, b + 8, &sp, NULL, bf16, br, out, left, k);
    }
}
__attribute__((target("avx2,fma"))) void kvc_cpu_seg_reduce8_avx2(int nd, const float *const *sr, const float *const *vr,
                                                                 const float *const *pfs, const float *const *pfv,
                                                                 kvc_cpu_seg_state *st,
                                                                 kvc_cpu_seg_state *const *left, int k, int bf16,
                                                                 const float *const *br) {
    if (bf16) seg_reduce8_body(nd, sr, vr, pfs, pfv, st, left, k, 1, br);
    else if (br) seg_reduce8_body(nd, sr, vr, pfs, pfv, st, left, k, 0, br);
    else seg_reduce8_body(nd, sr, vr, pfs, pfv, st, left, k, 0, NULL);
}

__attribute__((target("avx2,fma"))) void kvc_cpu_exp8_batch(const float *x, float *y) {
    _mm256_storeu_ps(y, exp8(_mm256_loadu_ps(x)));
}

int kvc_cpu_has_avx2(void) { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }
#else
int kvc_cpu_has_avx2(void) { return 0; }
#endif
