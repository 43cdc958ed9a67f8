/* cpu_testing.c -- cpu_testing.h: compiled into the test build of the library only. */
#include <math.h>
#include <string.h>

#include "cpu_testing.h"
#include "kvcompress_rand.h"

/* The SIMD exps against kvc_exp: x = -0 .. -Inf and the negative NaNs at
 * the stride, 16 at a time, then +0 and a positive NaN; kvc_exp once per
 * argument for both forms; the number that differ (any NaN equals any NaN:
 * the contract observes only "is NaN"). */
void kvc_cpu_exp_mismatches(uint32_t stride, int64_t *bad16, int64_t *bad8) {
    void (*b16)(const float *, float *) = NULL, (*b8)(const float *, float *) = NULL;
#if KVC_CPU_AVX512
    if (__builtin_cpu_supports("avx512f")) b16 = kvc_cpu_exp16_batch;
#endif
#if KVC_CPU_AVX2
    if (kvc_cpu_has_avx2()) b8 = kvc_cpu_exp8_batch;
#endif
    *bad16 = b16 && stride ? 0 : -1;
    *bad8 = b8 && stride ? 0 : -1;
    if (!stride || (!b16 && !b8)) return;
    for (uint64_t b0 = 0x80000000u;; b0 += (uint64_t)16 * stride) {
        const int last = b0 > 0xFFFFFFFFu;
        float x[16], want[16], y16[16], y8[16];
        for (int i = 0; i < 16; i++) {
            const uint64_t b = b0 + (uint64_t)i * stride;
            const uint32_t bits = last ? (i & 1 ? 0x7FC00001u : 0u) : b <= 0xFFFFFFFFu ? (uint32_t)b : 0x80000000u;
            memcpy(&x[i], &bits, 4);
        }
        for (int i = 0; i < 16; i++) want[i] = kvc_exp(x[i]);
        if (b16) b16(x, y16);
        if (b8) {
            b8(x, y8);
            b8(x + 8, y8 + 8);
        }
        for (int i = 0; i < 16; i++) {
            const float e = want[i];
            if (b16 && memcmp(&e, &y16[i], 4) != 0 && !(e != e && y16[i] != y16[i])) ++*bad16;
            if (b8 && memcmp(&e, &y8[i], 4) != 0 && !(e != e && y8[i] != y8[i])) ++*bad8;
        }
        if (last) return;
    }
}

#if KVC_CPU_AVX512
/* One random input of the comparison: c with entries of a random scale
 * (2^-140 .. 2^100, so sums that overflow or vanish), some dims zero, one
 * NaN / +-Inf now and then; weights of any finite bf16 exponent; cos/sin in
 * [-1.5, 1.5]. */
static uint64_t next_u64(uint64_t *s) { return kvc_rand_splitmix64((*s)++); }
static float unit(uint64_t *s) { return (float)(next_u64(s) >> 40) * 0x1p-24f * 2.0f - 1.0f; }
static void random_input(uint64_t *s, float c[512], uint16_t w[512], float cs[64], int nd) {
    const int scale = (int)(next_u64(s) % 241) - 140;
    for (int d = 0; d < 512; d++) {
        c[d] = ldexpf(unit(s), scale + (int)(next_u64(s) % 9) - 4);
        if (next_u64(s) % 16 == 0) c[d] = 0.0f;
    }
    const uint64_t special = next_u64(s) % 8;
    if (special == 0) c[next_u64(s) % (uint64_t)nd] = NAN;
    if (special == 1) c[next_u64(s) % (uint64_t)nd] = (next_u64(s) & 1) ? INFINITY : -INFINITY;
    if (special == 2) memset(c, 0, sizeof(float) * 512);
    for (int d = 0; d < 512; d++) w[d] = (uint16_t)(next_u64(s) % 0x7F80u | (next_u64(s) & 0x8000u));
    if (next_u64(s) & 1)
        for (int d = 0; d < 512; d++) w[d] = (uint16_t)(0x3F80u + next_u64(s) % 0x100u); /* ~1: typical weights */
    for (int j = 0; j < 64; j++) cs[j] = unit(s) * 1.5f;
}

int64_t kvc_cpu_finalize_mismatches(int trials, uint64_t seed, int head_dim) {
    if (!__builtin_cpu_supports("avx512f") || trials < 0) return -1;
    int64_t bad = 0;
    uint64_t s = seed;
    for (int t = 0; t < trials; t++) {
        float c[512], y[512], cs[64];
        uint16_t w[512];
        uint8_t p0[576], s0[8], p1[576], s1[8];
        random_input(&s, c, w, cs, head_dim);
        const int interleaved = t & 1, fp8 = (t >> 1) & 1, rotate = (t >> 3) & 1;
        const float eps = (t >> 2) & 1 ? 0x1.0c6f7ap-20f : ldexpf(1.0f, -(int)(next_u64(&s) % 140));
        memset(p0, 0xA5, sizeof p0);
        memset(p1, 0x5A, sizeof p1);
        memset(s0, 0xA5, sizeof s0);
        memset(s1, 0x5A, sizeof s1);
        if (head_dim == 128) { /* fp8: INDEXER_FP8, else INDEXER_MXFP4; the slot (payload, scale) in p */
            const int fmt = fp8 ? KVC_FMT_IFP8 : KVC_FMT_MXFP4, pb = fp8 ? 128 : 64;
            const int r0 = kvc_finalize_indexer(c, y, w, cs, interleaved, eps, rotate, fmt, p0, p0 + pb);
            const int r1 = kvc_cpu_finalize_indexer_avx512(c, y, w, cs, interleaved, eps, rotate, fmt, p1, p1 + pb);
            bad += r0 != r1 || memcmp(p0, p1, (size_t)pb + 4) != 0;
            continue;
        }
        const int r0 = kvc_finalize_slot(c, y, w, cs, interleaved, eps, fp8, p0, s0);
        const int r1 = kvc_cpu_finalize_avx512(c, y, w, cs, interleaved, eps, fp8, p1, s1);
        if (r0 != r1 || memcmp(p0, p1, sizeof p0) || memcmp(s0, s1, sizeof s0)) bad++;
    }
    return bad;
}
#else
int64_t kvc_cpu_finalize_mismatches(int trials, uint64_t seed, int head_dim) {
    (void)trials;
    (void)seed;
    (void)head_dim;
    return -1;
}
#endif
