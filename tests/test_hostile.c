/*
 * test_hostile -- the inputs of a hostile-input trial (issue 18), one class
 * per block, each refused with its status and nothing written:
 *   1. index values at and near INT64_MIN / INT64_MAX / INT32_MIN / INT32_MAX
 *      in every index tensor (positions, slots, boundary indices, requests,
 *      block ids), through kvc_validate and the chosen backend; a GPU then
 *      still runs a valid call in the same process (the context is alive);
 *   2. sizes x strides whose BYTE span overflows int64 (element offsets fit);
 *   3. kv_cache overlapping an input (the block table inside kv_cache's slot
 *      bytes, kv_cache over state_cache / positions / boundary indices /
 *      weights), and the overlaps that are allowed (an input in the unused
 *      tail of a page);
 *   4. status codes: exec->num_threads outside [0, 1024]; a backend with no
 *      device is KVC_ERROR_BACKEND_UNAVAILABLE.
 * usage: test_hostile [backend=cpu|cuda|opencl] [class=N]   (classes 2-4 run
 * on the CPU path whatever the backend: they are refused before any device
 * work; class=N runs one class)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress_rand.h"
#include "test_util.h"

static kvc_backend g_backend = KVC_BACKEND_CPU;

static int make(kvc_case *c) {
    const int ok = tu_small_case(c, 77);
    TU_CHECK(ok, "generate: %s", kvc_last_error_message());
    return ok;
}

/* Run `a` on backend b (host tensors; GPU backends through the kit), with the
 * device status word's status as the result. */
static kvc_status run_on(kvc_backend b, const kvc_args *a, int threads) {
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = b;
    ex.num_threads = threads;
    kvc_report rep;
    return tu_run(a, &ex, &rep);
}

/* ---- 1. index values at the int64 / int32 extremes ---------------------- */
static const int64_t k64[] = {INT64_MIN, INT64_MIN + 1, INT64_MIN + 127, -(INT64_C(1) << 62), INT64_MAX,
                              INT64_MAX - 1, INT64_MAX - 126, (int64_t)INT32_MIN, (int64_t)INT32_MAX,
                              (int64_t)INT32_MAX + 1};
static const int32_t k32[] = {INT32_MIN, INT32_MIN + 1, INT32_MAX, INT32_MAX - 1};

enum { F_POS, F_SLOT, F_BIDX, F_REQ, F_BLOCK };
static const char *const k_field[] = {"positions", "kv_slot_mapping", "boundary_token_indices", "token_to_req",
                                      "block_table"};

static void extreme_case(int field, int64_t v) {
    kvc_case c;
    if (!make(&c)) return;
    const int64_t o = 3, b = c.boundary_token_indices[o];
    switch (field) {
    case F_POS: c.positions[b] = v; break;
    case F_SLOT: c.kv_slot_mapping[b] = v; break;
    case F_BIDX: c.boundary_token_indices[o] = v; break;
    case F_REQ: c.token_to_req[b] = (int32_t)v; break;
    default: { /* a block of the window (its last row's) */
        const int64_t r = c.token_to_req[b], p = c.positions[b];
        c.block_table[r * c.args.blocks_per_req + p / 8] = (int32_t)v;
    }
    }
    uint8_t *before = tu_dup(c.kv_cache, c.kv_cache_bytes);
    const kvc_status v_st = kvc_validate(&c.args);
    const kvc_status st = run_on(g_backend, &c.args, 2);
    /* a negative slot is padding (SPEC 2.2): accepted, output skipped */
    const kvc_status want = field == F_SLOT && v < 0 ? KVC_OK : KVC_ERROR_INDEX_OUT_OF_RANGE;
    TU_CHECK(v_st == want, "%s = %lld: kvc_validate %s, expected %s", k_field[field], (long long)v,
             kvc_status_string(v_st), kvc_status_string(want));
    TU_CHECK(st == want, "%s = %lld: kvc_compress %s, expected %s (%s)", k_field[field], (long long)v,
             kvc_status_string(st), kvc_status_string(want), kvc_last_error_message());
    if (g_backend == KVC_BACKEND_CPU && want != KVC_OK)
        TU_CHECK(memcmp(before, c.kv_cache, c.kv_cache_bytes) == 0, "%s = %lld: kv_cache written", k_field[field],
                 (long long)v);
    if (want == KVC_OK) { /* output o skipped: its slot... there is none; the others as on the CPU */
        kvc_case d;
        if (make(&d)) {
            d.kv_slot_mapping[b] = v;
            TU_CHECK(run_on(KVC_BACKEND_CPU, &d.args, 1) == KVC_OK, "CPU reference");
            TU_CHECK(memcmp(d.kv_cache, c.kv_cache, c.kv_cache_bytes) == 0, "%s = %lld: bytes differ from the CPU",
                     k_field[field], (long long)v);
            kvc_case_free(&d);
        }
    }
    free(before);
    kvc_case_free(&c);
}

static void test_extremes(void) {
    int n = 0;
    for (int f = F_POS; f <= F_BIDX; f++)
        for (size_t i = 0; i < sizeof k64 / sizeof k64[0]; i++, n++) extreme_case(f, k64[i]);
    for (int f = F_REQ; f <= F_BLOCK; f++)
        for (size_t i = 0; i < sizeof k32 / sizeof k32[0]; i++, n++) extreme_case(f, k32[i]);
    /* the process (and a GPU's context) still computes a valid call exactly */
    kvc_case c, d;
    if (make(&c) && make(&d)) {
        TU_CHECK(run_on(g_backend, &c.args, 2) == KVC_OK, "valid call after the extremes: %s",
                 kvc_last_error_message());
        TU_CHECK(run_on(KVC_BACKEND_CPU, &d.args, 1) == KVC_OK, "CPU reference");
        TU_CHECK(memcmp(c.kv_cache, d.kv_cache, c.kv_cache_bytes) == 0, "valid call after the extremes: bytes differ");
        kvc_case_free(&c);
        kvc_case_free(&d);
    }
    printf("ok   1. %d index values at the int64 / int32 extremes refused (or padding)\n", n);
}

/* ---- 2. byte spans past int64 ------------------------------------------- */
static void span_case(const char *what, void (*mut)(kvc_args *)) {
    kvc_case c;
    if (!make(&c)) return;
    kvc_args a = c.args;
    mut(&a);
    uint8_t *before = tu_dup(c.kv_cache, c.kv_cache_bytes);
    const kvc_status v = kvc_validate(&a), st = run_on(KVC_BACKEND_CPU, &a, 2);
    TU_CHECK(v == KVC_ERROR_BAD_SHAPE && st == KVC_ERROR_BAD_SHAPE, "%s: %s / %s (%s)", what, kvc_status_string(v),
             kvc_status_string(st), kvc_last_error_message());
    TU_CHECK(memcmp(before, c.kv_cache, c.kv_cache_bytes) == 0, "%s: kv_cache written", what);
    free(before);
    kvc_case_free(&c);
}
static void m_state_block(kvc_args *a) { /* 2^61 * 3 blocks: element offsets fit, bytes do not */
    a->state_stride_block = INT64_C(1) << 61;
    a->num_blocks = 3;
}
static void m_state_token(kvc_args *a) {
    a->state_stride_token = INT64_C(1) << 60;
    a->state_stride_block = (INT64_C(1) << 60) * 2;
}
static void m_cos_sin(kvc_args *a) { a->cos_sin_stride = INT64_C(1) << 60; }
static void m_pages(kvc_args *a) { a->page_stride = INT64_MAX / 2; }
static void m_table(kvc_args *a) { a->block_table_stride = INT64_C(1) << 61; }
static void m_tokens(kvc_args *a) { a->num_tokens = INT64_C(1) << 61; }
static void m_outputs(kvc_args *a) { a->num_outputs = INT64_C(1) << 61; }

static void test_spans(void) {
    span_case("state_stride_block 2^61 x 3 blocks", m_state_block);
    span_case("state_stride_token 2^60", m_state_token);
    span_case("cos_sin_stride 2^60", m_cos_sin);
    span_case("page_stride INT64_MAX / 2", m_pages);
    span_case("block_table_stride 2^61", m_table);
    span_case("num_tokens 2^61", m_tokens);
    span_case("num_outputs 2^61", m_outputs);
    printf("ok   2. 7 byte spans past int64 refused\n");
}

/* ---- 3. kv_cache overlapping an input ----------------------------------- */
static void alias_case(const char *what, int want_refused, const char *name, void (*place)(kvc_args *, uint8_t *)) {
    kvc_case c;
    if (!make(&c)) return;
    kvc_args a = c.args;
    /* an arena: kv_cache's pages, then room; the input is moved into it */
    const size_t n = c.kv_cache_bytes + (1 << 20);
    uint8_t *arena = calloc(1, n);
    memcpy(arena, c.kv_cache, c.kv_cache_bytes);
    a.kv_cache = arena;
    place(&a, arena);
    uint8_t *before = tu_dup(arena, n);
    const kvc_status v = kvc_validate(&a), st = run_on(KVC_BACKEND_CPU, &a, 2);
    if (want_refused) {
        TU_CHECK(v == KVC_ERROR_ALIASING && st == KVC_ERROR_ALIASING, "%s: %s / %s", what, kvc_status_string(v),
                 kvc_status_string(st));
        TU_CHECK(strstr(kvc_last_error_message(), "kv_cache") && strstr(kvc_last_error_message(), name),
                 "%s: message '%s' does not name kv_cache and %s", what, kvc_last_error_message(), name);
        TU_CHECK(memcmp(before, arena, n) == 0, "%s: memory written", what);
    } else {
        TU_CHECK(v == KVC_OK && st == KVC_OK, "%s: %s / %s (%s)", what, kvc_status_string(v), kvc_status_string(st),
                 kvc_last_error_message());
    }
    free(before);
    free(arena);
    kvc_case_free(&c);
}
/* copy `bytes` of src to arena + off and return it */
static void *move_to(uint8_t *arena, size_t off, const void *src, size_t bytes) {
    memcpy(arena + off, src, bytes);
    return arena + off;
}
static size_t table_bytes(const kvc_args *a) { return (size_t)(a->num_reqs * a->blocks_per_req) * 4; }
static void p_table_in_slot(kvc_args *a, uint8_t *ar) { a->block_table = move_to(ar, 64, a->block_table, table_bytes(a)); }
static void p_positions(kvc_args *a, uint8_t *ar) {
    a->positions = move_to(ar, 1024, a->positions, (size_t)a->num_tokens * 8);
}
static void p_bidx(kvc_args *a, uint8_t *ar) {
    a->boundary_token_indices = move_to(ar, 0, a->boundary_token_indices, (size_t)a->num_outputs * 8);
}
static void p_weight(kvc_args *a, uint8_t *ar) { a->rms_norm_weight = move_to(ar, 576, a->rms_norm_weight, 1024); }
static void p_state_under(kvc_args *a, uint8_t *ar) { /* state_cache ends inside kv_cache's first slot */
    (void)ar;
    a->kv_cache = (uint8_t *)a->state_cache + 1024;
}
static void p_page_tail(kvc_args *a, uint8_t *ar) { /* pages of 584 S + 4096 bytes; the table in a tail */
    const int64_t used = 584 * a->kv_block_size;
    a->page_stride = used + 4096;
    a->block_table = move_to(ar, (size_t)used, a->block_table, table_bytes(a));
}
static void p_after(kvc_args *a, uint8_t *ar) { /* just past the last page */
    const size_t end = (size_t)((a->num_pages - 1) * a->page_stride + 584 * a->kv_block_size);
    a->block_table = move_to(ar, (end + 7) & ~(size_t)7, a->block_table, table_bytes(a));
}

/* OpenCL passes cl_mem handles: the same handle for kv_cache and an input is refused
 * before any OpenCL call (fake handle values; nothing is dereferenced). */
static void opencl_same_handle(void) {
    kvc_case c;
    if (!make(&c)) return;
    kvc_args a = c.args;
    uintptr_t h = 0x1000;
    a.state_cache = (const float *)(h += 0x1000);
    a.token_to_req = (const int32_t *)(h += 0x1000);
    a.positions = (const int64_t *)(h += 0x1000);
    a.kv_slot_mapping = (const int64_t *)(h += 0x1000);
    a.boundary_token_indices = (const int64_t *)(h += 0x1000);
    a.block_table = (const int32_t *)(h += 0x1000);
    a.rms_norm_weight = (const uint16_t *)(h += 0x1000);
    a.cos_sin_cache = (const float *)(h += 0x1000);
    a.kv_cache = (uint8_t *)(uintptr_t)a.block_table;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    const kvc_status st = kvc_compress(&a, &ex, NULL);
    TU_CHECK(st == KVC_ERROR_ALIASING && strstr(kvc_last_error_message(), "block_table"),
             "OpenCL, kv_cache the same cl_mem as block_table: %s (%s)", kvc_status_string(st),
             kvc_last_error_message());
    kvc_case_free(&c);
}

static void test_aliasing(void) {
    opencl_same_handle();
    alias_case("block_table inside a slot", 1, "block_table", p_table_in_slot);
    alias_case("positions inside kv_cache", 1, "positions", p_positions);
    alias_case("boundary_token_indices at kv_cache", 1, "boundary_token_indices", p_bidx);
    alias_case("rms_norm_weight inside kv_cache", 1, "rms_norm_weight", p_weight);
    alias_case("kv_cache over state_cache's end", 1, "state_cache", p_state_under);
    alias_case("block_table in a page's unused tail", 0, "", p_page_tail);
    alias_case("block_table just past kv_cache", 0, "", p_after);
    printf("ok   3. kv_cache overlapping an input refused (5 + the same OpenCL buffer), allowed layouts accepted (2)\n");
}

/* ---- 4. status codes ----------------------------------------------------- */
static void test_status(void) {
    kvc_case c;
    if (!make(&c)) return;
    const int bad_threads[] = {-1, -7, INT32_MIN, 1025, INT32_MAX};
    for (size_t i = 0; i < sizeof bad_threads / sizeof bad_threads[0]; i++) {
        kvc_exec ex;
        kvc_exec_init(&ex);
        ex.backend = KVC_BACKEND_CPU;
        ex.num_threads = bad_threads[i];
        const kvc_status st = kvc_compress(&c.args, &ex, NULL);
        TU_CHECK(st == KVC_ERROR_BAD_PARAMETER && strstr(kvc_last_error_message(), "num_threads"),
                 "num_threads %d: %s (%s)", bad_threads[i], kvc_status_string(st), kvc_last_error_message());
    }
    TU_CHECK(run_on(KVC_BACKEND_CPU, &c.args, 1024) == KVC_OK, "num_threads 1024: %s", kvc_last_error_message());
    const kvc_backend gpus[2] = {KVC_BACKEND_CUDA, KVC_BACKEND_OPENCL};
    for (int i = 0; i < 2; i++) {
        if (kvc_backend_available(gpus[i])) continue;
        kvc_exec ex;
        kvc_exec_init(&ex);
        ex.backend = gpus[i];
        const kvc_status st = kvc_compress(&c.args, &ex, NULL);
        TU_CHECK(st == KVC_ERROR_BACKEND_UNAVAILABLE, "backend %d without a device: %s (%s)", (int)gpus[i],
                 kvc_status_string(st), kvc_last_error_message());
    }
    kvc_case_free(&c);
    printf("ok   4. num_threads outside [0, 1024] refused; backends without a device unavailable\n");
}

int main(int argc, char **argv) {
    int only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "backend=", 8) && tu_parse_backend(argv[i] + 8, &g_backend)) return 2;
        if (!strncmp(argv[i], "class=", 6)) only = atoi(argv[i] + 6);
    }
    if (!kvc_backend_available(g_backend)) {
        printf("SKIP: backend not available\n");
        return TU_SKIP;
    }
    if (!only || only == 1) test_extremes();
    if (!only || only == 2) test_spans();
    if (!only || only == 3) test_aliasing();
    if (!only || only == 4) test_status();
    printf("%s (%d failures)\n", tu_failures ? "FAILED" : "passed", tu_failures);
    return tu_failures ? 1 : 0;
}
