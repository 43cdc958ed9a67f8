/* cpu_resident_probe.c -- where the CPU backend's time goes on one case
 * (issue 21; not part of the library).  In one process, interleaved round by
 * round, it times:
 *   real      the library on the kvc-rand case;
 *   resident  the library on the same case with every block-table entry of a
 *             request pointing at one of its blocks, so that the rows stay in
 *             L1/L2: the same calls, segments, merges and finalisers with no
 *             memory traffic -- the library's arithmetic ceiling here;
 *   floor     a plain read of the case's bytes with the same threads (SPEC 6);
 *   rows      a plain read of the window rows themselves, in the call's
 *             order (each output's rows through its block table; the
 *             threads split the outputs): what the table's layout alone
 *             costs a bare read;
 *   1 GiB     a plain read of 1 GiB (the bench's "read bandwidth"), in a
 *             buffer taken after the case's;
 *   state     a plain read of the whole state cache in address order: the
 *             very pages the library reads (scaled to the case's bytes);
 *   rows+pf   the window rows read as the library reads them: 8 rows (one
 *             segment) at a time, line by line across their 16 half-rows,
 *             each line of the next segment prefetched into L2 as the same
 *             line of this one is read -- the library's access order and
 *             prefetches without its arithmetic.
 * and prints their medians as GB/s of the case's bytes.  On this project's
 * VM the same read runs at 21-33 GB/s depending on which pages a buffer
 * got (a process's first ~1 GiB reads slowest), so "state" is the bar of
 * the library's own memory, and "1 GiB" that of other pages.
 * Build: cmake --build build --target cpu_resident_probe (build/tools/)
 * Run:   cpu_resident_probe reqs tokens C [shuffle 0/1] [rounds] [threads] [big_first 0/1]
 *        big_first = 1 takes the 1 GiB buffer before the case's, so that
 *        the case gets the pages the 1 GiB read had.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvc_kit.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t *filled(size_t words) {
    uint64_t *b = malloc(words * 8);
    if (b)
        for (size_t i = 0; i < words; i++) b[i] = i * 0x9E3779B97F4A7C15ull;
    return b;
}
/* The rows read: each output's window rows, in order; thread t of
 * `threads` reads its share [n t / threads, n (t + 1) / threads). */
typedef struct {
    const uint64_t *const *rows; /* [n] row pointers, 512 words each */
    size_t n;
    int t, threads;
    uint64_t sum;
} rows_job;
static void *read_rows(void *arg) {
    rows_job *j = arg;
    uint64_t s0 = 0, s1 = 0;
    for (size_t r = j->n * (size_t)j->t / (size_t)j->threads; r < j->n * (size_t)(j->t + 1) / (size_t)j->threads; r++)
        for (int w = 0; w < 512; w += 2) {
            s0 += j->rows[r][w];
            s1 += j->rows[r][w + 1];
        }
    j->sum = s0 ^ s1;
    return NULL;
}
/* rows+pf: the rows as segments of 8 (a thread's share cut at a multiple
 * of 8; C is), 64 bytes of each of the 16 half-rows per step. */
typedef float v16f __attribute__((vector_size(64)));
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void *read_rows_pf(void *arg) {
    rows_job *j = arg;
    const size_t lo = j->n * (size_t)j->t / (size_t)j->threads / 8 * 8;
    const size_t hi = j->n * (size_t)(j->t + 1) / (size_t)j->threads / 8 * 8;
    v16f acc = {0};
    for (size_t r = lo; r < hi; r += 8) {
        const char *v[8], *q[8];
        for (int i = 0; i < 8; i++) {
            v[i] = (const char *)j->rows[r + i];
            q[i] = r + 8 < hi ? (const char *)j->rows[r + 8 + i] : v[i];
        }
        for (int b = 0; b < 2048; b += 64)
            for (int i = 0; i < 8; i++) {
                v16f x, y;
                memcpy(&x, v[i] + b, 64);
                memcpy(&y, v[i] + 2048 + b, 64);
                acc += x + y;
                __builtin_prefetch(q[i] + b, 0, 2);
                __builtin_prefetch(q[i] + 2048 + b, 0, 2);
            }
    }
    uint64_t bits;
    memcpy(&bits, &acc, 8);
    j->sum = bits;
    return NULL;
}
static double rows_read(const uint64_t *const *rows, size_t n, int threads, int prefetch, uint64_t *sink) {
    rows_job jobs[64];
    for (int t = 0; t < threads; t++) jobs[t] = (rows_job){rows, n, t, threads, 0};
    const double dt = kvc_kit_run_threads(prefetch ? read_rows_pf : read_rows, jobs, sizeof jobs[0], threads);
    for (int t = 0; t < threads; t++) *sink += jobs[t].sum;
    return dt;
}

static double timed_call(const kvc_args *a, const kvc_exec *ex) {
    const double t0 = now_s();
    if (kvc_compress(a, ex, NULL) != KVC_OK) {
        fprintf(stderr, "kvc_compress: %s\n", kvc_last_error_message());
        exit(1);
    }
    return now_s() - t0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s reqs tokens C [shuffle 0/1] [rounds] [threads] [big_first 0/1]\n", argv[0]);
        return 2;
    }
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = atoll(argv[1]);
    p.total_tokens = atoll(argv[2]);
    p.compress_ratio = atoll(argv[3]);
    p.block_size = 8;
    p.shuffle = argc > 4 ? atoi(argv[4]) : 0;
    p.seed = 1;
    const int rounds = argc > 5 && atoi(argv[5]) > 0 ? (atoi(argv[5]) < 64 ? atoi(argv[5]) : 63) : 9;
    int threads = argc > 6 ? atoi(argv[6]) : 2;
    threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
    const int big_first = argc > 7 && atoi(argv[7]) != 0;
    const size_t big_words = ((size_t)1 << 30) / 8;
    uint64_t *big = big_first ? filled(big_words) : NULL;
    kvc_case c;
    if (kvc_case_generate(&p, 0, &c) != KVC_OK) {
        fprintf(stderr, "kvc_case_generate: %s\n", kvc_last_error_message());
        return 1;
    }
    /* the resident table: each request's entries all name its first block
     * in range (entries outside [0, num_blocks) are never read) */
    const kvc_args *a = &c.args;
    const int64_t stride = a->block_table_stride ? a->block_table_stride : a->blocks_per_req;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)(a->num_reqs * stride));
    for (int64_t r = 0; r < a->num_reqs; r++) {
        int32_t blk = 0;
        for (int64_t k = a->blocks_per_req - 1; k >= 0; k--) {
            const int32_t x = a->block_table[r * stride + k];
            if (x >= 0 && x < a->num_blocks) blk = x;
        }
        for (int64_t k = 0; k < stride; k++) table[r * stride + k] = blk;
    }
    kvc_args resident = *a;
    resident.block_table = table;

    /* the window rows of every output, in the call's order (overlap off:
     * row i of the output at position p is position p - C + 1 + i) */
    const int64_t C = a->compress_ratio, bs = a->block_size;
    const int64_t stok = a->state_stride_token ? a->state_stride_token : a->state_width;
    const int64_t sblk = a->state_stride_block ? a->state_stride_block : bs * stok;
    const size_t nrows = (size_t)(a->num_outputs * C);
    const uint64_t **rows = malloc(sizeof(*rows) * nrows);
    for (int64_t o = 0; rows && o < a->num_outputs; o++) {
        const int64_t tok = a->boundary_token_indices[o], r = a->token_to_req[tok], pos = a->positions[tok];
        for (int64_t i = 0; i < C; i++) {
            const int64_t q = pos - C + 1 + i, blk = a->block_table[r * stride + q / bs];
            rows[o * C + i] = (const uint64_t *)(const void *)(a->state_cache + blk * sblk + (q % bs) * stok);
        }
    }

    const double bytes = (double)a->num_outputs * (double)a->compress_ratio * 4096.0;
    const size_t case_words = (size_t)(bytes / 8);
    uint64_t *floor_buf = filled(case_words), sink = 0;
    if (!big_first) big = filled(big_words);
    if (!table || !rows || !floor_buf || !big) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    ex.num_threads = threads;
    timed_call(a, &ex); /* warm-up */
    timed_call(&resident, &ex);
    const size_t state_words = (size_t)(a->num_blocks * sblk) / 2;
    double t[7][64];
    for (int i = 0; i < rounds; i++) {
        t[0][i] = timed_call(a, &ex);
        t[1][i] = timed_call(&resident, &ex);
        t[2][i] = kvc_kit_cpu_read(floor_buf, case_words, threads, &sink);
        t[3][i] = rows_read(rows, nrows, threads, 0, &sink);
        t[4][i] = kvc_kit_cpu_read(big, big_words, threads, &sink) * bytes / (double)(big_words * 8);
        t[5][i] = kvc_kit_cpu_read((const uint64_t *)(const void *)a->state_cache, state_words, threads, &sink) *
                  bytes / (double)(state_words * 8);
        t[6][i] = rows_read(rows, nrows, threads, 1, &sink);
    }
    static const char *name[7] = {"real", "resident", "floor", "rows", "1 GiB", "state", "rows+pf"};
    printf("r%lld_t%lld_c%lld %s, %d threads, %d rounds, 1 GiB %s the case, medians (scaled to the case's "
           "bytes)%s\n",
           (long long)p.num_reqs, (long long)p.total_tokens, (long long)p.compress_ratio,
           p.shuffle ? "shuffle" : "contig", threads, rounds, big_first ? "before" : "after", sink == 42 ? " " : "");
    double med[7];
    for (int k = 0; k < 7; k++) {
        qsort(t[k], (size_t)rounds, sizeof(double), cmp_double);
        med[k] = t[k][rounds / 2];
    }
    for (int k = 0; k < 7; k++)
        printf("  %-9s %10.0f us %6.1f GB/s  x floor %.3f  x rows+pf %.3f  of 1 GiB %5.1f%%  of state %5.1f%%\n",
               name[k], med[k] * 1e6, bytes / med[k] / 1e9, med[k] / med[2], med[k] / med[6], 100.0 * med[4] / med[k],
               100.0 * med[5] / med[k]);
    kvc_case_free(&c);
    free(table);
    free(rows);
    free(floor_buf);
    free(big);
    return 0;
}
