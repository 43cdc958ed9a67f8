/* test_util.h -- small helpers for the C tests (header-only). */
#ifndef KVC_TEST_UTIL_H
#define KVC_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcompress.h"
#include "kvcompress_rand.h"
#include "kvc_check.h" /* kvc_resolve_strides */

#define TU_SKIP 77 /* CTest SKIP_RETURN_CODE */
/* Say why a test skips; @return TU_SKIP. */
static inline int tu_skip(const char *why) {
    printf("SKIP: %s\n", why);
    return TU_SKIP;
}

static int tu_failures __attribute__((unused)) = 0;
#define TU_CHECK(cond, ...)                                          \
    do {                                                             \
        if (!(cond)) {                                               \
            tu_failures++;                                           \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);              \
            printf(__VA_ARGS__);                                     \
            printf("\n");                                            \
        }                                                            \
    } while (0)

static inline int tu_parse_backend(const char *s, kvc_backend *b) {
    if (!strcmp(s, "cpu")) *b = KVC_BACKEND_CPU;
    else if (!strcmp(s, "cuda")) *b = KVC_BACKEND_CUDA;
    else if (!strcmp(s, "opencl")) *b = KVC_BACKEND_OPENCL;
    else if (!strcmp(s, "auto")) *b = KVC_BACKEND_AUTO;
    else {
        fprintf(stderr, "unknown backend %s\n", s);
        return 1;
    }
    return 0;
}

/* The case of `spec` (kvc_kit_parse_spec syntax) and the CPU backend's rows
 * of it (kvc_kit_case_with_cpu); @return 1, or 0 after printing why. */
int kvc_kit_case_with_cpu(const char *spec, kvc_case *c, uint8_t **cpu_rows, char *msg, size_t msglen);
static inline int tu_case_with_cpu(const char *spec, kvc_case *c, uint8_t **cpu_rows) {
    char msg[256];
    if (kvc_kit_case_with_cpu(spec, c, cpu_rows, msg, sizeof msg) == 0) return 1;
    printf("FAIL case %s: %s\n", spec, msg);
    return 0;
}

/* Resident memory of this process in KiB (Linux /proc/self/statm; 0 where it cannot be read). */
static inline long tu_rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return resident * 4;
}

static inline void *tu_dup(const void *p, size_t n) {
    void *q = malloc(n ? n : 1);
    if (q) memcpy(q, p, n);
    return q;
}

/* Is byte `off` of the KV cache inside the bytes of a slot in `written`
 * (its payload and its scale bytes, in the format's page layout)? */
static inline int tu_in_slot(const kvc_args *a, size_t off, const unsigned char *written) {
    kvc_args r = *a;
    kvc_resolve_strides(&r);
    const int64_t S = a->kv_block_size, stride = r.page_stride;
    const int64_t pb = kvc_payload_bytes(r.nope_format), sb = kvc_scale_bytes(r.nope_format);
    int64_t page = (int64_t)off / stride, in = (int64_t)off % stride;
    int64_t s;
    if (in < S * pb) s = in / pb;
    else if (in < S * (pb + sb)) s = (in - S * pb) / sb;
    else return 0;
    return written[page * S + s];
}

/* Every byte outside the slots written by non-padding outputs is unchanged. */
static inline int tu_check_untouched(const kvc_args *a, const unsigned char *before, const unsigned char *after,
                                     char *msg, size_t msglen) {
    int64_t nslots = a->num_pages * a->kv_block_size;
    unsigned char *written = (unsigned char *)calloc((size_t)(nslots ? nslots : 1), 1);
    for (int64_t o = 0; o < a->num_outputs; o++) {
        int64_t b = a->boundary_token_indices[o];
        int64_t slot = a->kv_slot_mapping[b];
        if (slot >= 0 && slot < nslots) written[slot] = 1;
    }
    kvc_args r = *a;
    kvc_resolve_strides(&r);
    size_t total = (size_t)(a->num_pages * r.page_stride);
    for (size_t i = 0; i < total; i++)
        if (before[i] != after[i] && !tu_in_slot(a, i, written)) {
            snprintf(msg, msglen, "byte %zu outside written slots changed 0x%02x -> 0x%02x", i, before[i], after[i]);
            free(written);
            return 1;
        }
    free(written);
    return 0;
}

/* Run host-resident args on a backend; for CUDA the kit copies them to the
 * device and back (kvc_kit_cuda_run). */
kvc_status kvc_kit_cuda_run(const kvc_args *a, kvc_report *rep, kvc_device_status *ds);
kvc_status kvc_kit_opencl_run(const kvc_args *a, kvc_report *rep, kvc_device_status *ds);
static inline kvc_status tu_run(const kvc_args *a, const kvc_exec *e, kvc_report *rep) {
#ifdef KVC_KIT_WITH_CUDA
    if (e->backend == KVC_BACKEND_CUDA) return kvc_kit_cuda_run(a, rep, NULL);
#endif
#ifdef KVC_KIT_WITH_OPENCL
    if (e->backend == KVC_BACKEND_OPENCL) return kvc_kit_opencl_run(a, rep, NULL);
#endif
    return kvc_compress(a, e, rep);
}

/* The small kvc-rand case the validation tests mutate: 2 requests x 256
 * tokens, C = 64, block size 8, shuffled table, 2 slots per page; kv_cache
 * poisoned.  @return 1 on success. */
void kvc_kit_poison(uint8_t *p, size_t n, uint64_t seed);
int kvc_kit_parse_spec(const char *spec, kvc_case_params *p, char *msg, size_t msglen);
static inline int tu_small_case(kvc_case *c, uint64_t seed) {
    kvc_case_params p;
    char msg[128];
    if (kvc_kit_parse_spec("reqs=2,tokens=512,C=64,block=8,layout=shuffle,kv_block=2", &p, msg, sizeof msg)) return 0;
    p.seed = seed;
    if (kvc_case_generate(&p, 1, c) != KVC_OK) return 0;
    kvc_kit_poison(c->kv_cache, c->kv_cache_bytes, seed);
    return 1;
}

#endif
