/*
 * cpu_simd.h -- what the CPU backend's files share about its SIMD forms.
 *
 * x86-64 with GCC or clang: AVX-512F forms of the segment loop
 * (cpu_backend.c) and of the finaliser (cpu_finalize.c), taken at run time
 * where the CPU has AVX-512F, and an AVX2 + FMA form of the segment loop
 * (cpu_avx2.c) where it has those but not AVX-512F.  They compute SPEC 3's
 * operations in SPEC 3's order, so the bytes never depend on which form
 * ran.
 */
#ifndef KVC_CPU_SIMD_H
#define KVC_CPU_SIMD_H

#include <stdint.h>

#include "kvc_canon.h"
#include "kvc_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(KVC_NO_TARGET_CLONES)
#define KVC_CPU_AVX512 1
#else
#define KVC_CPU_AVX512 0
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#define KVC_CPU_AVX2 1
#else
#define KVC_CPU_AVX2 0
#endif

/* kvc_exp's polynomial in r, highest coefficient first: the SIMD forms:
 * q = c[0], then q = q * r + c[j] for j = 1..6, unfused (kvc_canon.h). */
static const float kvc_cpu_exp_poly[7] = {0x1.6c16c2p-10f, 0x1.111112p-7f, 0x1.555556p-5f, 0x1.555556p-3f,
                                          0x1.000000p-1f,  1.0f,           1.0f};

/* A segment's or subtree's online-softmax state, up to 512 dims (the
 * call's head width, 512 or 128). */
typedef struct {
    float m[512], den[512], num[512];
} kvc_cpu_seg_state;

/* The segment loop's prefetches for the block of 16 dims from b, row by
 * row: row i's lines 64 dims ahead into L1 (sr, vr), and this block's line
 * of the next segment's row i into L2 (pfs, pfv; NULL: none); nd: the
 * rows' dims; es: their elements' bytes (4; 2 for bf16 rows). */
typedef struct {
    const float *const *sr, *const *vr, *const *pfs, *const *pfv;
    int b, nd, es;
} kvc_cpu_block_pf;
static inline __attribute__((always_inline)) const char *kvc_cpu_pf_at(const float *row, int d, int es) {
    return (const char *)row + (size_t)d * (size_t)es;
}
static inline __attribute__((always_inline)) void kvc_cpu_l1_prefetch(const kvc_cpu_block_pf *p, int i) {
    if (p->b + 64 < p->nd) {
        __builtin_prefetch(kvc_cpu_pf_at(p->sr[i], p->b + 64, p->es), 0, 3);
        __builtin_prefetch(kvc_cpu_pf_at(p->vr[i], p->b + 64, p->es), 0, 3);
    }
}
static inline __attribute__((always_inline)) void kvc_cpu_l2_prefetch(const kvc_cpu_block_pf *p, int i) {
    if (p->pfs) {
        __builtin_prefetch(kvc_cpu_pf_at(p->pfs[i], p->b, p->es), 0, 2);
        __builtin_prefetch(kvc_cpu_pf_at(p->pfv[i], p->b, p->es), 0, 2);
    }
}

/* Dims before the first `bytes`-aligned boundary (a vector: 64 or 32) of a
 * segment's 2n rows (n score rows sr, n value rows vr), when all of them
 * start at the same offset within it (0: aligned, or offsets that differ). */
static inline int kvc_cpu_rows_head(const float *const *sr, const float *const *vr, int n, int bytes) {
    const uintptr_t mask = (uintptr_t)bytes - 1, off = (uintptr_t)sr[0] & mask;
    for (int i = 0; i < n; i++)
        if (((uintptr_t)sr[i] & mask) != off || ((uintptr_t)vr[i] & mask) != off) return 0;
    return off % 4 ? 0 : (int)((uintptr_t)bytes - off) / 4 % (bytes / 4);
}

/* The forms of the segment loop and finaliser a call takes: the widest the
 * CPU has (AUTO); the test builds can force the others (cpu_testing.h). */
enum { KVC_CPU_ISA_AUTO = 0, KVC_CPU_ISA_PORTABLE = 1, KVC_CPU_ISA_AVX2 = 2 };
/* 1 where the CPU has AVX2 and FMA (the AVX2 loop can run). */
KVC_HIDDEN int kvc_cpu_has_avx2(void);
#if KVC_CPU_AVX512
/* 16 / 8 arguments through the SIMD exps of the segment loops (the tests compare them with kvc_exp). */
KVC_HIDDEN void kvc_cpu_exp16_batch(const float *x, float *y);
#endif
#if KVC_CPU_AVX2
KVC_HIDDEN void kvc_cpu_exp8_batch(const float *x, float *y);
#endif
#if KVC_CPU_AVX2
/**
 * A full segment (8 rows of nd dims, a multiple of 16: score rows sr, value rows vr) reduced into st,
 * then merged into the k states of left (as cpu_backend.c's seg_reduce),
 * in AVX2 + FMA; pfs, pfv: the next segment's rows, prefetched into L2
 * (NULL: none); bf16: the rows are bf16 (uint16_t elements); br: each score
 * row's score_bias row, added as it loads (NULL: none).  Callers check
 * kvc_cpu_has_avx2 first.
 */
KVC_HIDDEN void kvc_cpu_seg_reduce8_avx2(int nd, const float *const *sr, const float *const *vr, const float *const *pfs,
                                         const float *const *pfv, kvc_cpu_seg_state *st,
                                         kvc_cpu_seg_state *const *left, int k, int bf16, const float *const *br);
#endif

#if KVC_CPU_AVX512
/**
 * kvc_finalize_slot (kvc_canon.h) in AVX-512F: the same arguments, the same
 * bytes.  c[512] the reduced window, y[512] scratch, w[512] the RMSNorm
 * weight (bf16 bits), cs the cos/sin row; payload[576] and scales[8] the
 * slot.  @return 1 if the slot was written as non-finite.  Callers check
 * for AVX-512F first.
 */
KVC_HIDDEN int kvc_cpu_finalize_avx512(const float *c, float *y, const uint16_t *w, const float *cs, int interleaved,
                                       float eps, int fp8, uint8_t *payload, uint8_t *scales);
/**
 * kvc_finalize_indexer (kvc_canon.h, head width 128) in AVX-512F: the same
 * arguments, the same bytes.  y: 128 floats of scratch.  @return 1 if the
 * slot was written as non-finite.  Callers check for AVX-512F first.
 */
KVC_HIDDEN int kvc_cpu_finalize_indexer_avx512(const float *c, float *y, const uint16_t *w, const float *cs,
                                               int interleaved, float eps, int rotate, int fmt, uint8_t *payload,
                                               uint8_t *scale);
#endif

#endif /* KVC_CPU_SIMD_H */
