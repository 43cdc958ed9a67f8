/* cpu_arith_probe.c -- the CPU's ceiling for SPEC 3's exact segment
 * arithmetic with no memory traffic (issue 21; not part of the library).
 * The loop is the CPU backend's seg_reduce8, written the same way (8 rows' scores and values, one
 * pass over 512 dims), run on rows that stay in L1 (all 8 score rows are one
 * 2 KiB row, all 8 value rows another), once per ISA clone.  Prints GB/s of
 * state bytes reduced per thread: the rate no streaming version can beat.
 * Build: gcc -O3 -std=c11 -ffp-contract=off -fno-math-errno -fno-trapping-math
 *        -Isrc/core -Iinclude bench/probe/cpu_arith_probe.c -o cpu_arith_probe -lpthread
 * Run:   ./cpu_arith_probe [threads] [segments]: segments > 1 cycles that many
 *        distinct segments (32 KiB each: 16 = 512 KiB, L2-resident), and
 *        avx512pf adds a prefetch of the current rows a 16-dim block ahead
 *        into L1 and, with a third argument k, of segment + k's rows into L2.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "kvc_canon.h"

#define D 512
#define REPS 200000
static int g_nseg = 1; /* distinct 8-row segments cycled: 1 = every operand in L1 */
static int g_ahead = 0; /* avx512pf: the segment this many ahead prefetched into L2 (0: none) */

/* The segment step over dims [lo, hi) of the 16 named row streams. */
#define DIMS(lo, hi)                                                                                         \
    for (int d = (lo); d < (hi); d++) {                                                                      \
        float m = s0[d];                                                                                     \
        m = kvc_max(m, s1[d]);                                                                               \
        m = kvc_max(m, s2[d]);                                                                               \
        m = kvc_max(m, s3[d]);                                                                               \
        m = kvc_max(m, s4[d]);                                                                               \
        m = kvc_max(m, s5[d]);                                                                               \
        m = kvc_max(m, s6[d]);                                                                               \
        m = kvc_max(m, s7[d]);                                                                               \
        float den = 0.0f, num = 0.0f;                                                                        \
        kvc_seg_step(m, s0[d], v0[d], &den, &num);                                                           \
        kvc_seg_step(m, s1[d], v1[d], &den, &num);                                                           \
        kvc_seg_step(m, s2[d], v2[d], &den, &num);                                                           \
        kvc_seg_step(m, s3[d], v3[d], &den, &num);                                                           \
        kvc_seg_step(m, s4[d], v4[d], &den, &num);                                                           \
        kvc_seg_step(m, s5[d], v5[d], &den, &num);                                                           \
        kvc_seg_step(m, s6[d], v6[d], &den, &num);                                                           \
        kvc_seg_step(m, s7[d], v7[d], &den, &num);                                                           \
        kvc_seg_close(m, &den, &num);                                                                        \
        om[d] = m;                                                                                           \
        oden[d] = den;                                                                                       \
        onum[d] = num;                                                                                       \
    }
#define STREAMS                                                                                              \
    const float *restrict s0 = s[0], *restrict s1 = s[1], *restrict s2 = s[2], *restrict s3 = s[3];          \
    const float *restrict s4 = s[4], *restrict s5 = s[5], *restrict s6 = s[6], *restrict s7 = s[7];          \
    const float *restrict v0 = v[0], *restrict v1 = v[1], *restrict v2 = v[2], *restrict v3 = v[3];          \
    const float *restrict v4 = v[4], *restrict v5 = v[5], *restrict v6 = v[6], *restrict v7 = v[7];
#define BODY STREAMS DIMS(0, D)
#define DEFINE_SEG(NAME, TARGET)                                                                             \
    __attribute__((noinline, target(TARGET))) static void NAME(const float *const *restrict s,             \
                                                               const float *const *restrict v,             \
                                                               const float *const *pf,                     \
                                                               float *restrict om, float *restrict oden,   \
                                                               float *restrict onum) {                     \
        BODY                                                                                                 \
    }
DEFINE_SEG(seg_avx512, "avx512f")
DEFINE_SEG(seg_avx2, "avx2")
/* the avx512 loop with the current rows prefetched into L1 a block of 64 dims ahead */
#undef BODY
#define PF(r) __builtin_prefetch(r + d + 64, 0, 3)
#define BODY_PF                                                                                              \
    STREAMS                                                                                                  \
    for (int b = 0; b < D; b += 16) {                                                                        \
        { const int d = b; PF(s0); PF(s1); PF(s2); PF(s3); PF(s4); PF(s5); PF(s6); PF(s7);                    \
          PF(v0); PF(v1); PF(v2); PF(v3); PF(v4); PF(v5); PF(v6); PF(v7); }                                   \
        if (pf)                                                                                              \
            for (int i = 0; i < 16; i++) __builtin_prefetch(pf[i] + b, 0, 2);                                \
        DIMS(b, b + 16)                                                                                      \
    }
#define BODY BODY_PF
DEFINE_SEG(seg_avx512_pf, "avx512f")

typedef void (*seg_fn)(const float *const *, const float *const *, const float *const *, float *, float *, float *);

typedef struct {
    seg_fn fn;
    double secs;
} job;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static void *run(void *arg) {
    job *j = arg;
    static __thread float om[D], od[D], on[D];
    /* g_nseg segments of 8 rows x (512 values, 512 scores); with g_nseg = 1
     * all 8 rows of a kind are one row (L1-resident) */
    const int rows = g_nseg == 1 ? 1 : 8 * g_nseg;
    float *buf = aligned_alloc(64, (size_t)rows * 1024 * 4);
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < D; d++) buf[r * 1024 + d] = 0.01f * ((d + r) % 13), buf[r * 1024 + 512 + d] = -0.001f * ((d * 7 + r) % 97);
    const double t0 = now();
    for (int r = 0; r < REPS; r++) {
        const int g = g_nseg == 1 ? 0 : r % g_nseg;
        const float *s[8], *v[8];
        for (int i = 0; i < 8; i++) {
            const float *row = buf + (size_t)(g_nseg == 1 ? 0 : 8 * g + i) * 1024;
            v[i] = row, s[i] = row + 512;
        }
        const float *pf[16], *const *pfp = NULL;
        if (g_ahead && g_nseg > 1) {
            const int ga = (g + g_ahead) % g_nseg;
            for (int i = 0; i < 8; i++) {
                const float *row = buf + (size_t)(8 * ga + i) * 1024;
                pf[i] = row + 512, pf[8 + i] = row;
            }
            pfp = pf;
        }
        j->fn(s, v, pfp, om, od, on);
        __asm__ volatile("" ::: "memory"); /* every call is done */
    }
    j->secs = now() - t0;
    free(buf);
    return NULL;
}

int main(int argc, char **argv) {
    const int nt = argc > 1 ? atoi(argv[1]) : 1;
    g_nseg = argc > 2 ? atoi(argv[2]) : 1;
    g_ahead = argc > 3 ? atoi(argv[3]) : 0;
    const struct { const char *name; seg_fn fn; int ok; } isa[] = {
        {"avx512f", seg_avx512, __builtin_cpu_supports("avx512f")},
        {"avx2", seg_avx2, __builtin_cpu_supports("avx2")},
        {"avx512pf", seg_avx512_pf, __builtin_cpu_supports("avx512f")},
    };
    printf("%d distinct segment(s) (%d KiB per thread)\n", g_nseg, g_nseg == 1 ? 4 : 32 * g_nseg);
    for (int k = 0; k < 3; k++) {
        if (!isa[k].ok) continue;
        pthread_t th[64];
        job jobs[64];
        for (int t = 0; t < nt; t++) jobs[t].fn = isa[k].fn, pthread_create(&th[t], NULL, run, &jobs[t]);
        double worst = 0;
        for (int t = 0; t < nt; t++) pthread_join(th[t], NULL), worst = jobs[t].secs > worst ? jobs[t].secs : worst;
        const double bytes = (double)REPS * 8 * D * 8; /* 8 rows x 512 dims x (value, score) */
        printf("%-8s %d thread(s): %.1f GB/s per thread, %.1f GB/s in all (%.2f ns per row element)\n", isa[k].name,
               nt, bytes / worst / 1e9, nt * bytes / worst / 1e9, worst / ((double)REPS * 8 * D) * 1e9);
    }
    return 0;
}
