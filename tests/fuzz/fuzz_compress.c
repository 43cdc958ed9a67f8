/*
 * fuzz_compress -- libFuzzer target (build with -DKVC_FUZZ=ON, clang).
 *
 * Turns the fuzz input into a small argument set -- sizes, strides, ratio,
 * block sizes, formats, every index value, state values with NaN/Inf -- with
 * buffers allocated to exactly the extents the sizes and strides declare, so
 * AddressSanitizer sees any read or write outside the given tensors. Then:
 *   - kvc_validate and kvc_compress (CPU) must agree on the status;
 *   - on error, kv_cache must be byte-identical to before;
 *   - on success, bytes outside the written slots must be unchanged and
 *     every written slot's pad byte is 0.
 * A violated property aborts (this harness may; the library never does).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcompress.h"

typedef struct {
    const uint8_t *p;
    size_t n, i;
} reader;

static uint32_t take(reader *r, uint32_t range) { /* 0 .. range-1 */
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v = (v << 8) | (r->i < r->n ? r->p[r->i++] : 0);
    return range ? v % range : 0;
}
static int64_t take_idx(reader *r, int64_t valid) { /* mostly valid, sometimes just out */
    uint32_t mode = take(r, 64);
    if (mode == 0) return -1 - (int64_t)take(r, 3);
    if (mode == 1) return valid + (int64_t)take(r, 3);
    return valid > 0 ? (int64_t)take(r, (uint32_t)valid) : 0;
}
static float take_float(reader *r) {
    uint32_t m = take(r, 64);
    if (m == 0) return NAN;
    if (m == 1) return INFINITY;
    if (m == 2 || m == 3) return -INFINITY;
    return ((float)take(r, 1u << 16) - 32768.0f) * (m == 4 ? 0x1p+100f : 0x1p-12f);
}

/* KVC_FUZZ_STATS=1: print how many inputs ran through (OK) vs were refused. */
static long g_ok, g_err, g_by_status[16];
static void print_stats(void) {
    fprintf(stderr, "kvc fuzz stats: %ld accepted, %ld refused:", g_ok, g_err);
    for (int i = 1; i < 16; i++)
        if (g_by_status[i]) fprintf(stderr, " %s %ld", kvc_status_string((kvc_status)i), g_by_status[i]);
    fprintf(stderr, "\n");
}

static void fail(const char *what) {
    fprintf(stderr, "property violated: %s (%s)\n", what, kvc_last_error_message());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size, 0};
    kvc_args a;
    kvc_args_init(&a);
    a.overlap = (kvc_overlap)take(&r, 2);
    a.nope_format = (kvc_nope_format)take(&r, 2);
    a.cos_sin_layout = (kvc_cos_sin_layout)take(&r, 2);
    /* zero bytes (short inputs) give valid parameters; selector 1..8 breaks one */
    a.compress_ratio = 1 + (int64_t)take(&r, 38);
    a.block_size = 1 + (int64_t)take(&r, 15);
    a.kv_block_size = 1 + (int64_t)take(&r, 7);
    a.state_width = 1024 * (1 + a.overlap);
    const int64_t W = a.state_width, bs = a.block_size;
    a.num_blocks = 1 + take(&r, 24);
    a.num_reqs = 1 + take(&r, 4);
    a.blocks_per_req = 1 + take(&r, 12);
    a.num_tokens = 1 + take(&r, 64);
    a.num_outputs = take(&r, 12);
    a.max_pos = 1 + take(&r, 160);
    a.num_pages = 1 + take(&r, 6);
    a.state_stride_token = W + take(&r, 9);
    a.state_stride_block = bs * a.state_stride_token + (int64_t)take(&r, 5);
    a.block_table_stride = a.blocks_per_req + take(&r, 3);
    a.cos_sin_stride = 64 + take(&r, 4);
    const int64_t S = a.kv_block_size;
    a.page_stride = 584 * S + take(&r, 17);
    switch (take(&r, 32)) {
    case 1: a.compress_ratio = -(int64_t)take(&r, 2); break;
    case 2: a.state_width = 2048 - 1024 * a.overlap; break;
    case 3: a.state_stride_token = W - 4 * (1 + (int64_t)take(&r, 4)); break;
    case 4: a.page_stride = 584 * S - 1; break;
    case 5: a.rms_norm_eps = take(&r, 2) ? -1.0f : NAN; break;
    case 6: a.num_pages = 0; break;
    case 7: a.num_blocks = 0; break;
    case 8: a.blocks_per_req = 0; a.block_table_stride = take(&r, 3); break;
    case 9: a.nope_format = (kvc_nope_format)(2 + take(&r, 3)); break;
    case 10: a.cos_sin_layout = (kvc_cos_sin_layout)-1; break;
    default: break;
    }
    /* buffers of exactly the declared extents */
    const int64_t tok = a.state_stride_token > W ? a.state_stride_token : W;
    const int64_t Wa = a.state_width > W ? a.state_width : W; /* a wrong width is read by nobody, but size for it */
    size_t n_state = a.num_blocks ? (size_t)((a.num_blocks - 1) * a.state_stride_block + (bs - 1) * tok + Wa) : 1;
    float *state = malloc(n_state * sizeof(float));
    for (size_t i = 0; i < n_state; i++) state[i] = (i % 97 == 0) ? take_float(&r) : (float)(i % 13) * 0.25f - 1.5f;
    int32_t *t2r = malloc((size_t)a.num_tokens * 4);
    int64_t *pos = malloc((size_t)a.num_tokens * 8), *slots = malloc((size_t)a.num_tokens * 8);
    int64_t *bidx = malloc((size_t)(a.num_outputs ? a.num_outputs : 1) * 8);
    size_t n_table = (size_t)((a.num_reqs - 1) * a.block_table_stride + a.blocks_per_req);
    int32_t *table = malloc((n_table ? n_table : 1) * 4);
    uint16_t *w = malloc(512 * 2);
    size_t n_cs = a.max_pos ? (size_t)((a.max_pos - 1) * a.cos_sin_stride + 64) : 1;
    float *cs = malloc(n_cs * 4);
    const int64_t ps = a.page_stride;
    size_t n_kv = (size_t)(a.num_pages * ps);
    uint8_t *kv = malloc(n_kv ? n_kv : 1), *before = malloc(n_kv ? n_kv : 1);
    for (int64_t t = 0; t < a.num_tokens; t++) {
        t2r[t] = (int32_t)take_idx(&r, a.num_reqs);
        /* half the time a position whose window fits the table and cos/sin rows */
        const int64_t Cw = a.compress_ratio > 0 ? a.compress_ratio : 1;
        int64_t hi = a.blocks_per_req * bs < a.max_pos ? a.blocks_per_req * bs : a.max_pos;
        int64_t lo = (a.overlap ? 2 * Cw : Cw) - 1;
        if (!take(&r, 2) && hi > lo) pos[t] = lo + take(&r, (uint32_t)(hi - lo));
        else pos[t] = take_idx(&r, a.max_pos ? a.max_pos : 1);
        /* half the time distinct slots (token t -> slot t), else random (collisions) */
        if (!take(&r, 2)) slots[t] = t < a.num_pages * S ? t : -1;
        else slots[t] = take(&r, 8) == 0 ? -1 : take_idx(&r, a.num_pages * S);
    }
    for (int64_t o = 0; o < a.num_outputs; o++) bidx[o] = take_idx(&r, a.num_tokens);
    for (size_t i = 0; i < n_table; i++) table[i] = (int32_t)take_idx(&r, a.num_blocks);
    for (int d = 0; d < 512; d++) w[d] = (uint16_t)(0x3F80 + take(&r, 64) - 32);
    for (size_t i = 0; i < n_cs; i++) cs[i] = take_float(&r);
    for (size_t i = 0; i < n_kv; i++) kv[i] = (uint8_t)(i * 131 + 7);
    memcpy(before, kv, n_kv);
    a.state_cache = state;
    a.token_to_req = t2r;
    a.positions = pos;
    a.kv_slot_mapping = slots;
    a.boundary_token_indices = bidx;
    a.block_table = table;
    a.rms_norm_weight = w;
    a.cos_sin_cache = cs;
    a.kv_cache = kv;

    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    ex.num_threads = 1 + (int)take(&r, 3);
    static int registered;
    if (!registered && getenv("KVC_FUZZ_STATS")) {
        registered = 1;
        atexit(print_stats);
    }
    kvc_status v = kvc_validate(&a);
    kvc_report rep;
    kvc_status st = kvc_compress(&a, &ex, &rep);
    if (v != st) fail("kvc_validate and kvc_compress disagree");
    st == KVC_OK ? g_ok++ : g_err++;
    g_by_status[(unsigned)st & 15]++;
    if (st != KVC_OK) {
        if (memcmp(before, kv, n_kv) != 0) fail("kv_cache written on error");
        if (kvc_last_error_message()[0] == '\0') fail("error without a message");
    } else {
        /* which slots were written */
        for (size_t i = 0; i < n_kv; i++) {
            if (before[i] == kv[i]) continue;
            int64_t page = (int64_t)i / a.page_stride, in = (int64_t)i % a.page_stride, s = -1;
            if (in < S * 576) s = in / 576;
            else if (in < S * 584) s = (in - S * 576) / 8;
            int ok = 0;
            for (int64_t o = 0; s >= 0 && o < a.num_outputs && !ok; o++)
                ok = slots[bidx[o]] == page * S + s;
            if (!ok) fail("a byte outside the written slots changed");
        }
        for (int64_t o = 0; o < a.num_outputs; o++) {
            int64_t sl = slots[bidx[o]];
            if (sl >= 0 && kv[(sl / S) * a.page_stride + S * 576 + (sl % S) * 8 + 7] != 0) fail("pad byte not 0");
        }
    }
    free(state); free(t2r); free(pos); free(slots); free(bidx); free(table); free(w); free(cs); free(kv);
    free(before);
    return 0;
}
