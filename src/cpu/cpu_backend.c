/*
 * cpu_backend.c -- the CPU backend, the project's oracle.
 *
 * Validates everything first (nothing is written on error), then splits the
 * outputs over worker threads in runs of consecutive outputs.  Each worker
 * streams the rows of a window once, 8 rows (one segment) at a time,
 * reducing all 512 dimensions in lock-step loops the compiler vectorises;
 * segment states are combined in the canonical tree order with a
 * binary-counter stack, so scratch memory is O(log(C / 8) x 512) floats per
 * thread, never proportional to outputs x C.
 * With AVX-512F a full segment's merges run inside its loop, 16 dims at a
 * time, while the next segment streams in.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu_simd.h"
#include "kvc_backend.h"
#include "kvc_canon.h"
#include "kvc_check.h"

#define D 512 /* the widest head: scratch sizes */

/* the AVX-512F segment loop and finaliser (cpu_simd.h) */
#if KVC_CPU_AVX512
#include <immintrin.h>
#endif

/* Optional per-function ISA clones: bytes never depend on the clone taken,
 * because every operation is a correctly rounded IEEE operation. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(KVC_NO_TARGET_CLONES)
#define KVC_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVC_CLONES
#endif

typedef kvc_cpu_seg_state seg_state;

/* The outputs a thread has taken and not yet started: [next, end). */
typedef struct {
    long long next, end;
} take_state;

/* The longest run of consecutive outputs a thread takes at once. */
#define KVC_CPU_RUN 16

typedef struct {
    const kvc_args *a;
    kvc_shape sh;              /* a's scalars, for kvc_row_lookup          */
    int nd;                    /* head width: 512 or 128                   */
    int staged;                /* bf16 state or a score bias (SPEC 10):   */
    int direct;                /* full segments read directly by the
                                  AVX-512F or AVX2 loop; the others (and
                                  every segment of the portable loop)
                                  through a thread's staging rows       */
    const kvc_out_info *infos; /* [num_outputs], from kvc_check_indices */
    atomic_llong next;
    atomic_llong written, nonfinite;
    int threads;
} cpu_job;

/* The output a thread computes next.  Outputs are taken in runs of
 * consecutive ones, since neighbouring windows share pages (a C4 window's
 * first half-rows are the other halves of its neighbour's last tokens'
 * rows), which one core then reaches twice in a row instead of two cores
 * once each.  A run is a quarter of the thread's share
 * of what is left, at most KVC_CPU_RUN and at least 1, so that the call's
 * last outputs still spread over the threads. */
static long long take(cpu_job *job, take_state *ts) {
    if (ts->next >= ts->end) {
        const long long left = job->a->num_outputs - atomic_load_explicit(&job->next, memory_order_relaxed);
        long long run = left / (4 * (long long)job->threads);
        run = run < 1 ? 1 : run > KVC_CPU_RUN ? KVC_CPU_RUN : run;
        ts->next = atomic_fetch_add(&job->next, run);
        ts->end = ts->next + run;
    }
    return ts->next++;
}

static float g_masked_v[D];      /* a masked overlap row: value 0 ... */
static float g_masked_s[D];      /* ... score -Inf                     */
static uint16_t g_masked_s16[D]; /* the same in bf16 (values: g_masked_v, 0 either way); a masked row's score_bias: g_masked_v */
static pthread_once_t g_masked_once = PTHREAD_ONCE_INIT;
#if KVC_CPU_AVX512
static int g_avx512; /* seg_reduce8_avx512 runs here */
#endif
#if KVC_CPU_AVX2
static int g_avx2; /* kvc_cpu_seg_reduce8_avx2 runs here (without AVX-512F) */
#endif
#ifdef KVC_TEST_HOOKS
static int g_force; /* kvc_cpu_force_isa (test builds) */
void kvc_cpu_force_isa(int isa) { g_force = isa; }
#else
static const int g_force = KVC_CPU_ISA_AUTO;
#endif
#if KVC_CPU_AVX512
/* The AVX-512F forms run (the segment loops, the finalisers): the CPU has it, no test forces another form. */
static inline int avx512_on(void) { return g_avx512 && g_force == KVC_CPU_ISA_AUTO; }
#endif
#if KVC_CPU_AVX2
/* The AVX2 segment loop runs (where AVX-512F's does not): the CPU has AVX2 and FMA, no test forces the portable one. */
static inline int avx2_on(void) { return g_avx2 && g_force != KVC_CPU_ISA_PORTABLE; }
#endif
/* A full segment's bf16 rows and biased scores are read as stored by a SIMD
 * segment loop (AVX-512F or AVX2), so a job's full segments are not staged. */
static int direct_loop(void) {
#if KVC_CPU_AVX512
    if (avx512_on()) return 1;
#endif
#if KVC_CPU_AVX2
    if (avx2_on()) return 1;
#endif
    return 0;
}
static void init_masked(void) {
    for (int d = 0; d < D; d++) g_masked_s[d] = -INFINITY;
    for (int d = 0; d < D; d++) g_masked_s16[d] = 0xFF80u; /* bf16 -Inf */
#if KVC_CPU_AVX512
    g_avx512 = __builtin_cpu_supports("avx512f");
#endif
#if KVC_CPU_AVX2
    g_avx2 = kvc_cpu_has_avx2();
#endif
}

/* Row kernels: restrict parameters tell the compiler the rows never alias
 * the state, so the loops vectorise without runtime alias checks. */
static inline __attribute__((always_inline)) void row_max(int nd, float *restrict m, const float *restrict s) {
    for (int d = 0; d < nd; d++) m[d] = kvc_max(m[d], s[d]);
}
static inline __attribute__((always_inline)) void row_step(int nd, const float *restrict m, const float *restrict s,
                                                           const float *restrict v, float *restrict den,
                                                           float *restrict num) {
    for (int d = 0; d < nd; d++) kvc_seg_step(m[d], s[d], v[d], &den[d], &num[d]);
}

/* All of them at once (the portable loop, the split block). */
static inline __attribute__((always_inline)) void block_prefetch(const kvc_cpu_block_pf *p) {
    for (int i = 0; i < KVC_SEG; i++) kvc_cpu_l1_prefetch(p, i);
    for (int i = 0; i < KVC_SEG; i++) kvc_cpu_l2_prefetch(p, i);
}

/* A full segment in ONE pass over the dimensions: the 8 rows' scores and
 * values are 16 independent streams in the same loop (more cache misses in
 * flight than 8 row-by-row passes), and the state stays in registers.  Same
 * operations in the same order as the row-by-row path.  Per block of 16
 * dims (one cache line of each row), the 16 rows' lines a block of 64 dims
 * ahead are prefetched into L1, and pfs, pfv -- the next segment's 8 score
 * and 8 value rows (NULL: none) -- have this block's line prefetched into
 * L2: both spread over the loop, one line per stream and block. */
KVC_CLONES
__attribute__((noinline)) static void seg_reduce8(int nd, const float *const *restrict sr, const float *const *restrict vr,
                                                  const float *const *pfs, const float *const *pfv,
                                                  float *restrict om, float *restrict oden, float *restrict onum) {
    const float *restrict s0 = sr[0], *restrict s1 = sr[1], *restrict s2 = sr[2], *restrict s3 = sr[3];
    const float *restrict s4 = sr[4], *restrict s5 = sr[5], *restrict s6 = sr[6], *restrict s7 = sr[7];
    const float *restrict val0 = vr[0], *restrict val1 = vr[1], *restrict val2 = vr[2], *restrict val3 = vr[3];
    const float *restrict val4 = vr[4], *restrict val5 = vr[5], *restrict val6 = vr[6], *restrict val7 = vr[7];
    for (int b = 0; b < nd; b += 16) {
        const kvc_cpu_block_pf pf = {sr, vr, pfs, pfv, b, nd, 4};
        block_prefetch(&pf);
        for (int d = b; d < b + 16; d++) {
            float m = s0[d];
            m = kvc_max(m, s1[d]);
            m = kvc_max(m, s2[d]);
            m = kvc_max(m, s3[d]);
            m = kvc_max(m, s4[d]);
            m = kvc_max(m, s5[d]);
            m = kvc_max(m, s6[d]);
            m = kvc_max(m, s7[d]);
            float den = 0.0f, num = 0.0f;
            kvc_seg_step(m, s0[d], val0[d], &den, &num);
            kvc_seg_step(m, s1[d], val1[d], &den, &num);
            kvc_seg_step(m, s2[d], val2[d], &den, &num);
            kvc_seg_step(m, s3[d], val3[d], &den, &num);
            kvc_seg_step(m, s4[d], val4[d], &den, &num);
            kvc_seg_step(m, s5[d], val5[d], &den, &num);
            kvc_seg_step(m, s6[d], val6[d], &den, &num);
            kvc_seg_step(m, s7[d], val7[d], &den, &num);
            kvc_seg_close(m, &den, &num);
            om[d] = m;
            oden[d] = den;
            onum[d] = num;
        }
    }
}

#if KVC_CPU_AVX512
/*
 * AVX-512F forms of the segment arithmetic: the same IEEE operations, so
 * the same bits, in fewer instructions than gcc's vectorisation of the
 * scalar code:
 *   - kvc_exp: k = rint(x * log2e) by vrndscaleps (the round-magic add and
 *     subtract of kvc_exp round to nearest even the same way for |x log2e|
 *     < 2^22), 2^k and the cutoff select by one zero-masked vscalefps
 *     (q * 2^k exactly rounded, as q * float(2^k)); x - k ln2_hi by one
 *     vfnmadd (KVC_SUB_K_LN2_HI: the product is exact).  Equal to kvc_exp on
 *     every non-positive float, -Inf and NaN (tests/test_units.c: test
 *     units compares a stride of them, test cpu_exp_all every one);
 *   - the segment max: vmaxps, which is kvc_max except where a score is
 *     NaN (maxps(a, b) = a > b ? a : b drops a NaN in a).  Such a dim's den
 *     and num are NaN either way (its row's exp is NaN), and a NaN den
 *     survives every later merge and ends in the non-finite slot, so only
 *     the -Inf test of kvc_seg_close can tell: wherever the max is -Inf the
 *     vector is redone with kvc_max's NaN-propagating form.
 */
__attribute__((target("avx512f"), always_inline)) static inline __m512 exp16(__m512 x) {
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(KVC_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_sub_ps(_mm512_fnmadd_ps(k, _mm512_set1_ps(KVC_LN2_HI), x),
                                   _mm512_mul_ps(k, _mm512_set1_ps(KVC_LN2_LO)));
    __m512 q = _mm512_set1_ps(kvc_cpu_exp_poly[0]);
    for (int j = 1; j < 7; j++) q = _mm512_add_ps(_mm512_mul_ps(q, r), _mm512_set1_ps(kvc_cpu_exp_poly[j]));
    /* !(x < cutoff) (a NaN x is kept: it flows through as in kvc_exp) */
    const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(KVC_EXP_CUTOFF), _CMP_NLT_UQ);
    return _mm512_maskz_scalef_ps(keep, q, k);
}

/* The segment arithmetic of 16 dims in AVX-512F: sv, vv -- the n (1..8)
 * rows' scores and values of these dims; the segment's m, den, num out.  The
 * block's prefetches (pf; NULL: none) go out a row's at a time, the L1
 * ones between the maxes and the L2 ones between the exps: all 32 at the
 * block's start held the core's line fill buffers and stalled it. */
__attribute__((target("avx512f"), always_inline)) static inline void seg16(const __m512 *sv, const __m512 *vv, int n,
                                                                         const kvc_cpu_block_pf *pf, __m512 *om,
                                                                         __m512 *oden, __m512 *onum) {
    const __m512 ninf = _mm512_set1_ps(-INFINITY), zero = _mm512_setzero_ps();
    __m512 m = sv[0];
    for (int i = 0; i < n; i++) {
        if (i) m = _mm512_max_ps(m, sv[i]);
        if (pf) kvc_cpu_l1_prefetch(pf, i);
    }
    if (_mm512_cmp_ps_mask(m, ninf, _CMP_EQ_OQ)) { /* kvc_max's NaN-propagating form */
        m = sv[0];
        for (int i = 1; i < n; i++)
            m = _mm512_mask_mov_ps(_mm512_max_ps(m, sv[i]), _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q), m);
    }
    __m512 den = zero, num = zero;
    for (int i = 0; i < n; i++) { /* kvc_seg_step, rows in order */
        const __m512 e = exp16(_mm512_sub_ps(sv[i], m));
        if (pf) kvc_cpu_l2_prefetch(pf, i);
        den = _mm512_add_ps(den, e);
        num = _mm512_add_ps(num, _mm512_mul_ps(e, vv[i]));
    }
    const __mmask16 dead = _mm512_cmp_ps_mask(m, ninf, _CMP_EQ_OQ); /* kvc_seg_close */
    *om = m;
    *oden = _mm512_mask_mov_ps(den, dead, zero);
    *onum = _mm512_mask_mov_ps(num, dead, zero);
}

/* kvc_merge of 16 dims in AVX-512F: the left state (lm, ld, ln) merged with
 * the right one in *m, *den, *num, which receive the result.  The same
 * operations in the same order; exp16's argument is <= 0, -Inf or NaN,
 * where it equals kvc_exp. */
__attribute__((target("avx512f"), always_inline)) static inline void merge16(__m512 lm, __m512 ld, __m512 ln,
                                                                           __m512 *m, __m512 *den, __m512 *num) {
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    __m512 mx = _mm512_max_ps(lm, *m); /* kvc_max: lm > m ? lm : m, and a NaN lm kept */
    mx = _mm512_mask_mov_ps(mx, _mm512_cmp_ps_mask(lm, lm, _CMP_UNORD_Q), lm);
    const __mmask16 a_max = _mm512_cmp_ps_mask(lm, mx, _CMP_EQ_OQ);
    const __m512 f = exp16(_mm512_sub_ps(_mm512_mask_blend_ps(a_max, lm, *m), mx));
    const __m512 fa = _mm512_mask_blend_ps(a_max, f, one), fb = _mm512_mask_blend_ps(a_max, one, f);
    const __m512 d = _mm512_add_ps(_mm512_mul_ps(ld, fa), _mm512_mul_ps(*den, fb));
    const __m512 n = _mm512_add_ps(_mm512_mul_ps(ln, fa), _mm512_mul_ps(*num, fb));
    const __mmask16 dead = _mm512_cmp_ps_mask(mx, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ);
    *m = mx;
    *den = _mm512_mask_mov_ps(d, dead, zero);
    *num = _mm512_mask_mov_ps(n, dead, zero);
}

/* The split vector of a row p of nd dims: dims [0, h) (mask hm) with
 * [nd - 16 + h, nd) (mask tm = ~hm), each lane at its own dim's place in
 * the vector from p + nd - 16; loaded and stored by two masked operations. */
__attribute__((target("avx512f"), always_inline)) static inline __m512 load_split(int nd, const float *p,
                                                                                __mmask16 hm, __mmask16 tm) {
    return _mm512_mask_loadu_ps(_mm512_maskz_loadu_ps(hm, p), tm, p + nd - 16);
}
__attribute__((target("avx512f"), always_inline)) static inline void store_split(int nd, float *p, __mmask16 hm,
                                                                               __mmask16 tm, __m512 v) {
    _mm512_mask_storeu_ps(p, hm, v);
    _mm512_mask_storeu_ps(p + nd - 16, tm, v);
}

/* 16 elements of a row from element b: binary32, or bf16 bits widened
 * (SPEC 10: exact). */
__attribute__((target("avx512f"), always_inline)) static inline __m512 load16(const float *row, int b, int bf16) {
    if (!bf16) return _mm512_loadu_ps(row + b);
    const __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)((const uint16_t *)(const void *)row + b));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* seg_reduce8 in AVX-512F: the same prefetches, spread through the
 * block's arithmetic (seg16), and each block's merges in registers
 * (merge16).  Rows that all start h dims before a line boundary (numpy's
 * and malloc's large buffers start 16 bytes into a page) are read in whole
 * lines: dims [h, h + nd - 16) as line-aligned vectors, and dims [0, h)
 * with [nd - 16 + h, nd) as one vector of two masked loads, so that no load
 * spans two lines.  bf16 (a constant where this body is inlined): rows of
 * bf16 bits; br: each score row's score_bias row (SPEC 10; zeros for a
 * masked row), or NULL.  Such rows are read unaligned (h = 0).  n: the
 * segment's rows (a constant 8 where the full-segment forms inline it; a
 * partial segment's: float rows, no prefetches). */
__attribute__((target("avx512f"), always_inline)) static inline void seg_reduce8_avx512_body(
    int nd, const float *const *restrict sr, const float *const *restrict vr, const int n, const float *const *pfs,
    const float *const *pfv, seg_state *st, seg_state *const *left, int k, const int bf16,
    const float *const *br) {
    if (n < 1) __builtin_unreachable();
    seg_state *out = k ? left[k - 1] : st;
    __m512 sv[KVC_SEG], vv[KVC_SEG], m, den, num;
    const int full = n == KVC_SEG;
    const int h = bf16 || br ? 0 : kvc_cpu_rows_head(sr, vr, n, 64);
    if (h) {
        const __mmask16 hm = (__mmask16)((1u << h) - 1), tm = (__mmask16)~hm;
        const kvc_cpu_block_pf pf = {sr, vr, pfs, pfv, 0, nd, 4};
        if (full) block_prefetch(&pf);
        if (pfs)
            for (int i = 0; i < KVC_SEG; i++) {
                __builtin_prefetch(pfs[i] + nd - 1, 0, 2);
                __builtin_prefetch(pfv[i] + nd - 1, 0, 2);
            }
        for (int i = 0; i < n; i++) {
            sv[i] = load_split(nd, sr[i], hm, tm);
            vv[i] = load_split(nd, vr[i], hm, tm);
        }
        seg16(sv, vv, n, NULL, &m, &den, &num);
        for (int j = 0; j < k; j++)
            merge16(load_split(nd, left[j]->m, hm, tm), load_split(nd, left[j]->den, hm, tm),
                    load_split(nd, left[j]->num, hm, tm), &m, &den, &num);
        store_split(nd, out->m, hm, tm, m);
        store_split(nd, out->den, hm, tm, den);
        store_split(nd, out->num, hm, tm, num);
    }
    for (int b = h; b + 16 <= nd; b += 16) {
        const kvc_cpu_block_pf pf = {sr, vr, pfs, pfv, b, nd, bf16 ? 2 : 4};
        for (int i = 0; i < n; i++) {
            sv[i] = load16(sr[i], b, bf16);
            if (br) sv[i] = _mm512_add_ps(sv[i], _mm512_loadu_ps(br[i] + b));
            vv[i] = load16(vr[i], b, bf16);
        }
        seg16(sv, vv, n, full ? &pf : NULL, &m, &den, &num);
        for (int j = 0; j < k; j++)
            merge16(_mm512_loadu_ps(left[j]->m + b), _mm512_loadu_ps(left[j]->den + b),
                    _mm512_loadu_ps(left[j]->num + b), &m, &den, &num);
        _mm512_storeu_ps(out->m + b, m);
        _mm512_storeu_ps(out->den + b, den);
        _mm512_storeu_ps(out->num + b, num);
    }
}

/* The float rows of the statement, and the rows of SPEC 10 read directly
 * (no staging: with AVX-512F a full segment's bf16 rows and biased scores
 * cost a conversion and an add per vector). */
__attribute__((target("avx512f"), noinline)) static void seg_reduce8_avx512(
    int nd, const float *const *restrict sr, const float *const *restrict vr, const float *const *pfs,
    const float *const *pfv, seg_state *st, seg_state *const *left, int k) {
    seg_reduce8_avx512_body(nd, sr, vr, KVC_SEG, pfs, pfv, st, left, k, 0, NULL);
}
__attribute__((target("avx512f"), noinline)) static void seg_reduce8_avx512_conv(
    int nd, const float *const *restrict sr, const float *const *restrict vr, const float *const *pfs,
    const float *const *pfv, seg_state *st, seg_state *const *left, int k, int bf16, const float *const *br) {
    if (bf16) seg_reduce8_avx512_body(nd, sr, vr, KVC_SEG, pfs, pfv, st, left, k, 1, br);
    else seg_reduce8_avx512_body(nd, sr, vr, KVC_SEG, pfs, pfv, st, left, k, 0, br);
}
/* A partial segment (n < 8 float rows: a window's last, or all of a short
 * one's). */
__attribute__((target("avx512f"), noinline)) static void seg_reduce_part_avx512(int nd, const float *const *restrict sr,
                                                                              const float *const *restrict vr, int n,
                                                                              seg_state *st, seg_state *const *left,
                                                                              int k) {
    seg_reduce8_avx512_body(nd, sr, vr, n, NULL, NULL, st, left, k, 0, NULL);
}

__attribute__((target("avx512f"))) void kvc_cpu_exp16_batch(const float *x, float *y) {
    _mm512_storeu_ps(y, exp16(_mm512_loadu_ps(x)));
}
#endif

/* A = merge(A, B), all dimensions. */
KVC_CLONES
static void state_merge(int nd, seg_state *restrict A, const seg_state *restrict B) {
    for (int d = 0; d < nd; d++) kvc_merge(&A->m[d], &A->den[d], &A->num[d], B->m[d], B->den[d], B->num[d]);
}

/* Reduce one segment of n (1..8) rows into st, then merge it into the k
 * states of `left`, nearest first -- left[j] = merge(left[j], left[j - 1]),
 * left[-1] being st: the merges KVC_TREE_PUSH makes for it -- so the result
 * is in left[k - 1] (st if k = 0).  With AVX-512F a segment merges
 * block by block inside its loop, while the next segment streams in;
 * elsewhere the merges follow the loop (gcc's
 * vectorisation of the portable loop did not survive them inside). */
KVC_CLONES
static void seg_reduce(int nd, const float *const *vrow, const float *const *srow, int n, const float *const *pfs,
                       const float *const *pfv, int bf16, const float *const *br, seg_state *st,
                       seg_state *const *left, int k) {
    if (n == KVC_SEG) {
#if KVC_CPU_AVX512
        if (avx512_on()) {
            if (bf16 || br) seg_reduce8_avx512_conv(nd, srow, vrow, pfs, pfv, st, left, k, bf16, br);
            else seg_reduce8_avx512(nd, srow, vrow, pfs, pfv, st, left, k);
            return;
        }
#endif
#if KVC_CPU_AVX2
        if (avx2_on()) {
            kvc_cpu_seg_reduce8_avx2(nd, srow, vrow, pfs, pfv, st, left, k, bf16, br);
            return;
        }
#endif
        seg_reduce8(nd, srow, vrow, pfs, pfv, st->m, st->den, st->num);
    } else {
#if KVC_CPU_AVX512
        if (avx512_on()) { /* (float rows: a partial segment is staged where the state is not) */
            seg_reduce_part_avx512(nd, srow, vrow, n, st, left, k);
            return;
        }
#endif
        memcpy(st->m, srow[0], sizeof(float) * (size_t)nd);
        memset(st->den, 0, sizeof(float) * (size_t)nd);
        memset(st->num, 0, sizeof(float) * (size_t)nd);
        for (int i = 1; i < n; i++) row_max(nd, st->m, srow[i]);
        for (int i = 0; i < n; i++) row_step(nd, st->m, srow[i], vrow[i], st->den, st->num);
        for (int d = 0; d < nd; d++) kvc_seg_close(st->m[d], &st->den[d], &st->num[d]);
    }
    for (int j = 0; j < k; j++) state_merge(nd, left[j], j ? left[j - 1] : st);
}

KVC_CLONES
static void state_result(int nd, const seg_state *restrict st, float *restrict c) {
    for (int d = 0; d < nd; d++) c[d] = KVC_DIV(st->num[d], st->den[d]);
}

/* A window row as binary32 rows in a thread's staging rows (v, s: nd
 * floats each): a bf16 state widened, every score plus its score_bias
 * element (SPEC 10).  off: the element offset of the row's value half;
 * b: its score_bias row (NULL: none). */
static void stage_row(const cpu_job *job, int64_t off, const float *b, float *restrict v, float *restrict s) {
    const kvc_args *a = job->a;
    const int nd = job->nd;
    const int64_t sdelta = kvc_score_delta(a->overlap == KVC_OVERLAP_ON, nd);
    if (a->state_dtype == KVC_STATE_BFLOAT16) {
        const uint16_t *base = (const uint16_t *)(const void *)a->state_cache;
        for (int d = 0; d < nd; d++) v[d] = kvc_bf16_to_f32(base[off + d]);
        for (int d = 0; d < nd; d++) s[d] = kvc_bf16_to_f32(base[off + sdelta + d]);
    } else {
        memcpy(v, a->state_cache + off, sizeof(float) * (size_t)nd);
        memcpy(s, a->state_cache + off + sdelta, sizeof(float) * (size_t)nd);
    }
    if (b)
        for (int d = 0; d < nd; d++) s[d] = KVC_ADD(s[d], b[d]);
}

/* The rows of output inf's segment sg (the indices were checked by
 * kvc_check_indices: no row is KVC_ROW_BAD): value and score pointers into
 * the state, and for a direct job's full segment (*raw = 1) as stored
 * (bf16 bits where the state is bf16) with each score row's score_bias row
 * in br (a job with a bias); a staged segment (*raw = 0) is copied to the
 * staging rows `stage` ([8][2][512] floats) as binary32 with its bias
 * added.  @return its row count. */
static int segment_rows(const cpu_job *job, const kvc_out_info *inf, int64_t rows, int64_t sg, const float **v,
                        const float **s, const float **br, int *raw, float *stage) {
    const kvc_args *a = job->a;
    const int32_t *table_row = a->block_table + inf->r * a->block_table_stride;
    const int n = (int)((rows - sg * KVC_SEG) < KVC_SEG ? rows - sg * KVC_SEG : KVC_SEG);
    const int64_t sdelta = kvc_score_delta(a->overlap == KVC_OVERLAP_ON, job->nd);
    const int stage_it = job->staged && !(job->direct && n == KVC_SEG);
    const int bf16 = a->state_dtype == KVC_STATE_BFLOAT16 && !stage_it;
    const uint16_t *h = (const uint16_t *)(const void *)a->state_cache;
    *raw = job->staged && !stage_it;
    for (int i = 0; i < n; i++) {
        kvc_i64 blk;
        const int64_t off = kvc_row_lookup(&job->sh, table_row, inf->p, sg * KVC_SEG + i, &blk);
        if (off >= 0 && job->staged) {
            const float *b = NULL;
            if (a->score_bias) {
                int vo, so;
                const int ovl = a->overlap == KVC_OVERLAP_ON;
                const int64_t pos = kvc_window_row(inf->p, a->compress_ratio, ovl, job->nd, sg * KVC_SEG + i, &vo, &so);
                b = a->score_bias + kvc_bias_offset(pos, a->compress_ratio, a->score_bias_stride, so, ovl, job->nd);
            }
            if (stage_it) {
                float *sv = stage + (size_t)i * 2 * D;
                stage_row(job, off, b, sv, sv + D);
                v[i] = sv;
                s[i] = sv + D;
                continue;
            }
            br[i] = b;
        } else if (*raw) {
            br[i] = g_masked_v; /* a masked row's score stays -Inf: its bias is 0 */
        }
        if (bf16) {
            v[i] = (const float *)(const void *)(off < 0 ? (const uint16_t *)(const void *)g_masked_v : h + off);
            s[i] = (const float *)(const void *)(off < 0 ? g_masked_s16 : h + off + sdelta);
        } else {
            v[i] = off < 0 ? g_masked_v : a->state_cache + off;
            s[i] = off < 0 ? g_masked_s : a->state_cache + off + sdelta;
        }
    }
    return n;
}

/* A full first segment's rows that segment_rows resolved for the output a
 * thread computes next (to prefetch them), kept for that output. */
typedef struct {
    long long o; /* the output; -1: none */
    const float *v[KVC_SEG], *s[KVC_SEG], *b[KVC_SEG];
    int raw;
} first_rows;

/* The cos/sin row (64 floats) of output inf into L2: its finaliser's loads
 * would miss there otherwise, after the window's, with nothing else in
 * flight (a cold row per output on long calls). */
static void prefetch_cos_sin(const kvc_args *a, const kvc_out_info *inf) {
    const char *cs = (const char *)(a->cos_sin_cache + inf->pc * a->cos_sin_stride);
    const int bytes = KVC_ROPE_DIM * (int)sizeof(float);
    for (int l = 0; l < bytes; l += 64) __builtin_prefetch(cs + l, 0, 2);
    __builtin_prefetch(cs + bytes - 1, 0, 2);
}

/* Compute one output.  As its last segment starts, the thread takes the
 * output it computes next (take: from its run ts, or a new run; *taken, >=
 * num_outputs: none), whose first segment and cos/sin row that last one
 * prefetches: taken then and not earlier, so that a call of few outputs
 * still spreads them over the threads.
 * @return 1 if written non-finite. */
static int compute_output(cpu_job *job, take_state *ts, long long o, long long *taken, first_rows *first,
                          seg_state *stack, int *sizes, float *c, float *y, float *stage) {
    const kvc_out_info *inf = &job->infos[o];
    const kvc_args *a = job->a;
    const int nd = job->nd;
    const int64_t rows = kvc_window_rows(a->compress_ratio, a->overlap == KVC_OVERLAP_ON);
    const int64_t nseg = kvc_num_segments(rows);
    int top = -1;
    seg_state *left[64]; /* the states a segment merges into (64 > levels) */
    const float *rv[2][KVC_SEG], *rs[2][KVC_SEG], *rb[2][KVC_SEG]; /* this segment's rows and the next one's */
    int rn[2], raw[2];
    /* staging rows: [2][8][2][512] floats, this segment's and the next one's */
    float *const stg[2] = {stage, stage ? stage + KVC_SEG * 2 * D : NULL};
    if (first->o == o) { /* resolved as the previous output's next one */
        memcpy(rv[0], first->v, sizeof first->v);
        memcpy(rs[0], first->s, sizeof first->s);
        memcpy(rb[0], first->b, sizeof first->b);
        raw[0] = first->raw;
        rn[0] = KVC_SEG;
    } else {
        rn[0] = segment_rows(job, inf, rows, 0, rv[0], rs[0], rb[0], &raw[0], stg[0]);
    }
    first->o = -1;
    for (int64_t sg = 0; sg < nseg; sg++) {
        const int cur = (int)(sg & 1), nxt = cur ^ 1;
        const float *const *pfs = NULL, *const *pfv = NULL;
        if (sg + 1 < nseg) {
            /* The next segment is prefetched into L2 while this one is
             * reduced (seg_reduce8): shuffled tables jump to a cold block
             * that the hardware prefetcher cannot see, and even contiguous
             * rows (each row half its own 2 KiB stream) ran faster with it. */
            rn[nxt] = segment_rows(job, inf, rows, sg + 1, rv[nxt], rs[nxt], rb[nxt], &raw[nxt], stg[nxt]);
            if (rn[nxt] == KVC_SEG && (!job->staged || raw[nxt])) {
                pfs = rs[nxt];
                pfv = rv[nxt];
            }
        } else {
            *taken = take(job, ts);
            const kvc_out_info *next = *taken < a->num_outputs ? &job->infos[*taken] : NULL;
            if (next && next->slot >= 0) prefetch_cos_sin(a, next);
            /* (a direct job's full segment is never staged: what segment_rows
             * gives here is what it would give that output) */
            if (next && next->slot >= 0 && (!job->staged || job->direct) && rows >= KVC_SEG &&
                segment_rows(job, next, rows, 0, first->v, first->s, first->b, &first->raw, NULL) == KVC_SEG) {
                pfs = first->s;
                pfv = first->v;
                first->o = *taken;
            }
        }
        /* KVC_TREE_PUSH's merges for this segment: into the complete
         * subtrees of 1, 2, 4, ... segments on top of the stack */
        int k = 0, size = 1;
        while (top - k >= 0 && sizes[top - k] == size) {
            left[k] = &stack[top - k];
            k++;
            size *= 2;
        }
        seg_reduce(nd, rv[cur], rs[cur], rn[cur], pfs, pfv, raw[cur] && a->state_dtype == KVC_STATE_BFLOAT16,
                   raw[cur] && a->score_bias ? rb[cur] : NULL, &stack[top + 1], left, k);
        top += 1 - k;
        sizes[top] = size;
    }
#define CPU_MERGE(l, r) state_merge(nd, &stack[l], &stack[r])
    KVC_TREE_FOLD(top, CPU_MERGE);
#undef CPU_MERGE
    state_result(nd, &stack[0], c);

    int64_t payload, scales;
    kvc_slot_offsets(a, inf->slot, &payload, &scales);
    const float *cs = a->cos_sin_cache + inf->pc * a->cos_sin_stride;
    if (nd == 128) {
#if KVC_CPU_AVX512
        if (avx512_on())
            return kvc_cpu_finalize_indexer_avx512(c, y, a->rms_norm_weight, cs,
                                                   a->cos_sin_layout == KVC_COS_SIN_INTERLEAVED, a->rms_norm_eps,
                                                   a->rotate == KVC_ROTATE_HADAMARD, (int)a->nope_format,
                                                   a->kv_cache + payload, a->kv_cache + scales);
#endif
        return kvc_finalize_indexer(c, y, a->rms_norm_weight, cs, a->cos_sin_layout == KVC_COS_SIN_INTERLEAVED,
                                    a->rms_norm_eps, a->rotate == KVC_ROTATE_HADAMARD, (int)a->nope_format,
                                    a->kv_cache + payload, a->kv_cache + scales);
    }
#if KVC_CPU_AVX512
    if (avx512_on())
        return kvc_cpu_finalize_avx512(c, y, a->rms_norm_weight, cs, a->cos_sin_layout == KVC_COS_SIN_INTERLEAVED,
                                       a->rms_norm_eps, a->nope_format == KVC_NOPE_FP8_E4M3, a->kv_cache + payload,
                                       a->kv_cache + scales);
#endif
    return kvc_finalize_slot(c, y, a->rms_norm_weight, cs, a->cos_sin_layout == KVC_COS_SIN_INTERLEAVED,
                             a->rms_norm_eps, a->nope_format == KVC_NOPE_FP8_E4M3, a->kv_cache + payload,
                             a->kv_cache + scales);
}

typedef struct {
    cpu_job *job;
    seg_state *stack; /* [levels]  */
    int *sizes;       /* [levels]  */
    float *cy;        /* [2 * 512] : c then y */
    float *stage;     /* staged jobs: [2][8][2][512] floats, else NULL */
} cpu_worker;

static void *worker(void *arg) {
    cpu_worker *w = arg;
    cpu_job *job = w->job;
    const kvc_args *a = job->a;
    long long written = 0, nonfinite = 0;
    take_state ts = {0, 0};
    first_rows first = {.o = -1};
    long long o = take(job, &ts);
    while (o < a->num_outputs) {
        const kvc_out_info *inf = &job->infos[o]; /* resolved by kvc_check_indices */
        if (inf->slot < 0) { /* padding */
            o = take(job, &ts);
            continue;
        }
        nonfinite += compute_output(job, &ts, o, &o, &first, w->stack, w->sizes, w->cy, w->cy + D, w->stage);
        written++;
    }
    atomic_fetch_add(&job->written, written);
    atomic_fetch_add(&job->nonfinite, nonfinite);
    return NULL;
}

/* One set whose indices kvc_check_indices resolved into infos (freed here). */
static kvc_status cpu_run(const kvc_args *a, kvc_out_info *infos, int64_t padding, const kvc_exec *e,
                          kvc_report *rep) {
    pthread_once(&g_masked_once, init_masked);

    int64_t rows = kvc_window_rows(a->compress_ratio, a->overlap == KVC_OVERLAP_ON);
    int64_t nseg = kvc_num_segments(rows);
    int levels = 1;
    while ((INT64_C(1) << (levels - 1)) <= nseg) levels++;

    int nthreads = e->num_threads > 0 ? e->num_threads : kvc_cpu_default_threads();
    if (nthreads > a->num_outputs) nthreads = a->num_outputs > 0 ? (int)a->num_outputs : 1;
    /* num_threads = 0: at most a thread per 2 MiB of rows, since starting
     * one costs about what reducing that much does */
    const double kBytesPerThread = 2.0 * 1024 * 1024;
    const double bytes = (double)a->num_outputs * (double)rows * (double)(2 * a->head_dim * kvc_state_elem_bytes(a));
    if (e->num_threads == 0 && bytes < (double)nthreads * kBytesPerThread)
        nthreads = bytes < 2.0 * kBytesPerThread ? 1 : (int)(bytes / kBytesPerThread);

    cpu_job job;
    job.a = a;
    job.sh = kvc_shape_of(a);
    job.infos = infos;
    job.nd = (int)a->head_dim;
    job.staged = a->state_dtype == KVC_STATE_BFLOAT16 || a->score_bias != NULL;
    job.direct = job.staged && direct_loop();
    atomic_init(&job.next, 0);
    atomic_init(&job.written, 0);
    atomic_init(&job.nonfinite, 0);
    job.threads = nthreads;

    /* All scratch is taken before any thread starts, so that running out of
     * memory can still leave kv_cache untouched. */
    const size_t stage_bytes = job.staged ? 2 * KVC_SEG * 2 * D * sizeof(float) : 0;
    size_t per = sizeof(seg_state) * (size_t)levels + 2 * D * sizeof(float) + stage_bytes + 64;
    size_t per_aligned = (per + 63) & ~(size_t)63;
    char *scratch = aligned_alloc(64, per_aligned * (size_t)nthreads);
    cpu_worker *workers = malloc(sizeof(cpu_worker) * (size_t)nthreads);
    int *sizes = malloc(sizeof(int) * (size_t)levels * (size_t)nthreads);
    pthread_t *tids = malloc(sizeof(pthread_t) * (size_t)nthreads);
    if (!scratch || !workers || !sizes || !tids) {
        free(scratch);
        free(workers);
        free(sizes);
        free(tids);
        free(infos);
        return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CPU backend: no memory for %d threads' scratch", nthreads);
    }
    for (int t = 0; t < nthreads; t++) {
        char *base = scratch + per_aligned * (size_t)t;
        workers[t].job = &job;
        workers[t].stack = (seg_state *)base;
        workers[t].cy = (float *)(base + sizeof(seg_state) * (size_t)levels);
        workers[t].stage = job.staged ? workers[t].cy + 2 * D : NULL;
        workers[t].sizes = sizes + (size_t)levels * (size_t)t;
    }
    int started = 0;
    for (; started < nthreads - 1; started++) /* if a thread can't start, run with fewer */
        if (pthread_create(&tids[started], NULL, worker, &workers[started + 1]) != 0) break;
    worker(&workers[0]);
    for (int i = 0; i < started; i++) pthread_join(tids[i], NULL);
    free(scratch);
    free(workers);
    free(sizes);
    free(tids);
    free(infos);
    rep->outputs_written += atomic_load(&job.written);
    rep->outputs_padding += padding;
    rep->outputs_nonfinite += atomic_load(&job.nonfinite);
    return KVC_OK;
}

/* Every set's indices checked (and resolved) before any set is written. */
static kvc_status cpu_compress(const kvc_args *a, int n, const kvc_exec *e, kvc_report *rep) {
    kvc_out_info *infos[KVC_MANY_MAX] = {0};
    int64_t padding[KVC_MANY_MAX] = {0};
    kvc_status st = KVC_OK;
    for (int i = 0; i < n && st == KVC_OK; i++) {
        infos[i] = malloc(sizeof *infos[i] * (size_t)(a[i].num_outputs > 0 ? a[i].num_outputs : 1));
        st = infos[i] ? kvc_check_indices(&a[i], &padding[i], infos[i])
                      : kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CPU backend: no memory for %lld outputs' indices",
                                 (long long)a[i].num_outputs);
        if (st != KVC_OK && n > 1) kvc_prefix_error(st, "args[%d]: ", i);
    }
    kvc_report sum = {0};
    for (int i = 0; i < n; i++) {
        if (st == KVC_OK) st = cpu_run(&a[i], infos[i], padding[i], e, &sum);
        else free(infos[i]);
    }
    if (rep && st == KVC_OK) *rep = sum;
    return st;
}

static int cpu_available(void) { return 1; }

const kvc_backend_ops kvc_backend_cpu = {KVC_BACKEND_CPU, "cpu", cpu_available, NULL, cpu_compress, NULL, 0};
