/*
 * fuzz_compress -- libFuzzer target (build with -DKVC_FUZZ=ON, clang).
 *
 * Turns the fuzz input into a small argument set -- sizes, strides, ratio,
 * block sizes, formats, every index value, state values with NaN/Inf, and
 * the SPEC 9 / 10 settings (head width 128 with the indexer formats and
 * rotation, a bf16 state, a score bias of any row stride) -- with
 * buffers allocated to exactly the extents the sizes and strides declare, so
 * AddressSanitizer sees any read or write outside the given tensors. Then:
 *   - kvc_validate and kvc_compress (CPU) must agree on the status;
 *   - on error, kv_cache must be byte-identical to before;
 *   - on success, bytes outside the written slots must be unchanged and
 *     every written slot's pad byte is 0.
 * It also reaches the extremes: index values at and near INT64_MIN/MAX and
 * INT32_MIN/MAX, strides and sizes whose byte spans overflow int64 (then
 * every buffer is a small stand-in and the call must be refused: ASan
 * catches any access), and kv_cache overlapping an input inside one arena
 * (refused with KVC_ERROR_ALIASING exactly when an input byte lies in a
 * slot the call could write, and then nothing written).
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
static const int64_t k_extremes[] = {INT64_MIN,     INT64_MIN + 1,     INT64_MAX,     INT64_MAX - 1,
                                     INT32_MIN,     INT32_MAX,         (int64_t)INT32_MIN - 1,
                                     (int64_t)INT32_MAX + 1, INT64_MIN / 2, INT64_MAX / 2 + 1};
static int64_t take_idx(reader *r, int64_t valid) { /* mostly valid, sometimes just out or extreme */
    uint32_t mode = take(r, 64);
    if (mode == 0) return -1 - (int64_t)take(r, 3);
    if (mode == 1) return valid + (int64_t)take(r, 3);
    if (mode == 2) return k_extremes[take(r, 10)];
    return valid > 0 ? (int64_t)take(r, (uint32_t)valid) : 0;
}
static int32_t take_idx32(reader *r, int64_t valid) {
    if (take(r, 64) == 0) return take(r, 2) ? INT32_MIN : INT32_MAX - (int32_t)take(r, 2);
    const int64_t v = take_idx(r, valid);
    return v < INT32_MIN ? INT32_MIN : v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

/* Declared extent of a tensor in elements, as the library computes it (128-bit: may exceed int64). */
static __int128 extent(int64_t n, int64_t stride, __int128 last) { return n ? (__int128)(n - 1) * stride + last : 0; }
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
    /* SPEC 9 / 10 (zero bytes: head width 512, float32, no bias) */
    const int indexer = take(&r, 4) == 1;
    if (indexer) {
        a.head_dim = 128;
        a.nope_format = (kvc_nope_format)(KVC_INDEXER_FP8 + take(&r, 2));
        a.rotate = (kvc_rotation)take(&r, 2);
    }
    a.state_dtype = take(&r, 4) == 1 ? KVC_STATE_BFLOAT16 : KVC_STATE_FLOAT32;
    const int with_bias = take(&r, 4) == 1;
    const int64_t D = indexer ? 128 : 512, eb = a.state_dtype == KVC_STATE_BFLOAT16 ? 2 : 4;
    /* zero bytes (short inputs) give valid parameters; selector 1..8 breaks one */
    a.compress_ratio = 1 + (int64_t)take(&r, 38);
    a.block_size = 1 + (int64_t)take(&r, 15);
    a.kv_block_size = 1 + (int64_t)take(&r, 7);
    a.state_width = 2 * D * (1 + a.overlap);
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
    const int64_t S = a.kv_block_size, SB = kvc_slot_bytes(a.nope_format), PB = SB == 584 ? 576 : SB - 4;
    a.page_stride = SB * S + take(&r, 17);
    a.score_bias_stride = with_bias ? a.state_width / 2 + take(&r, 3) : 0;
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
    /* huge strides and sizes: byte spans past int64 unless the count is 1 */
    case 11: a.state_stride_block = INT64_C(1) << (58 + take(&r, 5)); break;
    case 12: a.state_stride_token = INT64_C(1) << (58 + take(&r, 5)); break;
    case 13: a.cos_sin_stride = INT64_C(1) << (59 + take(&r, 4)); break;
    case 14: a.page_stride = INT64_MAX - (int64_t)take(&r, 1000); break;
    case 15: a.block_table_stride = INT64_C(1) << (60 + take(&r, 3)); break;
    /* SPEC 9 / 10: undefined pairs and bad values */
    case 16: a.head_dim = take(&r, 2) ? 256 : -128; break;
    case 17: a.rotate = take(&r, 2) ? (kvc_rotation)2 : (indexer ? KVC_ROTATE_OFF : KVC_ROTATE_HADAMARD); break;
    case 18: a.head_dim = indexer ? 512 : 128; break;
    case 19: a.state_dtype = (kvc_state_dtype)(2 + take(&r, 3)); break;
    case 20: a.score_bias_stride = with_bias ? a.state_width / 2 - 1 - (int64_t)take(&r, 4) : 0; break;
    case 21: a.score_bias_stride = INT64_C(1) << (58 + take(&r, 5)); break;
    default: break;
    }
    /* declared byte spans; past int64 means the call must be refused */
    const int64_t tok = a.state_stride_token > W ? a.state_stride_token : W;
    const int64_t Wa = a.state_width > W ? a.state_width : W; /* a wrong width is read by nobody, but size for it */
    const __int128 e_state = a.num_blocks ? extent(a.num_blocks, a.state_stride_block, (bs - 1) * (__int128)tok + Wa) : 0;
    /* (rows of no entries: no bytes, whatever the stride -- as kvc_validate spans it) */
    const __int128 e_table = a.blocks_per_req ? extent(a.num_reqs, a.block_table_stride, a.blocks_per_req) : 0;
    const __int128 e_cs = extent(a.max_pos, a.cos_sin_stride, 64);
    const __int128 e_kv = extent(a.num_pages, a.page_stride, SB * S);
    const int64_t Cb = a.compress_ratio > 0 ? a.compress_ratio : 1;
    const __int128 e_bias = with_bias ? extent(Cb, a.score_bias_stride > 0 ? a.score_bias_stride : 0, W / 2) : 0;
    /* past int64 in bytes: must be refused; past 2^36 bytes: more than this
     * harness allocates (stand-ins for the tensors kvc_validate does not
     * read; only a refusal is run through kvc_compress) */
    const __int128 big = (__int128)1 << 36, i64 = INT64_MAX;
    const int overflow = eb * e_state > i64 || 4 * e_table > i64 || 4 * e_cs > i64 || e_kv > i64 || 4 * e_bias > i64;
    const int huge = eb * e_state > big || 4 * e_table > big || 4 * e_cs > big || e_kv > big || 4 * e_bias > big;
    const int64_t ps = a.page_stride;
    /* a block table too big to allocate but within int64: valid, and read by
     * kvc_validate, so this harness cannot run it */
    if (4 * e_table > big && 4 * e_table <= i64) return 0;
    size_t n_state = huge ? 1 : a.num_blocks ? (size_t)e_state : 1;
    void *state = malloc(n_state * (size_t)eb); /* float32 or bf16 elements */
    for (size_t i = 0; i < n_state; i++) {
        const float f = (i % 97 == 0) ? take_float(&r) : (float)(i % 13) * 0.25f - 1.5f;
        if (eb == 4) ((float *)state)[i] = f;
        else {
            uint32_t u;
            memcpy(&u, &f, 4);
            ((uint16_t *)state)[i] = (uint16_t)(u >> 16);
        }
    }
    size_t n_bias = !with_bias ? 0 : huge ? 1 : (size_t)e_bias;
    float *bias = with_bias ? malloc((n_bias ? n_bias : 1) * 4) : NULL;
    for (size_t i = 0; i < n_bias; i++) bias[i] = (i % 31 == 0) ? take_float(&r) : (float)(i % 7) - 3.0f;
    int32_t *t2r = malloc((size_t)a.num_tokens * 4);
    int64_t *pos = malloc((size_t)a.num_tokens * 8), *slots = malloc((size_t)a.num_tokens * 8);
    int64_t *bidx = malloc((size_t)(a.num_outputs ? a.num_outputs : 1) * 8);
    /* kvc_validate reads the block table: a real one unless its own span is too big */
    size_t n_table = 4 * e_table > big ? 1 : (size_t)e_table;
    int32_t *table = malloc((n_table ? n_table : 1) * 4);
    uint16_t *w = malloc((size_t)D * 2);
    size_t n_cs = huge ? 1 : a.max_pos ? (size_t)e_cs : 1;
    float *cs = malloc(n_cs * 4);
    size_t n_kv = huge ? 1 : (size_t)e_kv;
    /* 1 in 8: kv_cache and one input share an arena, the input at some 8-byte
     * offset inside kv_cache's pages (or just past them) */
    const int alias = !huge && n_kv > 0 && take(&r, 8) == 0;
    const int victim = (int)take(&r, with_bias ? 9 : 8); /* which input: kvc_args order */
    size_t victim_bytes = 0, alias_off = 0;
    uint8_t *arena = NULL;
    uint8_t *kv = malloc(n_kv ? n_kv : 1), *before = NULL;
    for (int64_t t = 0; t < a.num_tokens; t++) {
        t2r[t] = take_idx32(&r, a.num_reqs);
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
    for (size_t i = 0; i < n_table; i++) table[i] = take_idx32(&r, a.num_blocks);
    for (int d = 0; d < D; d++) w[d] = (uint16_t)(0x3F80 + take(&r, 64) - 32);
    for (size_t i = 0; i < n_cs; i++) cs[i] = take_float(&r);
    for (size_t i = 0; i < n_kv; i++) kv[i] = (uint8_t)(i * 131 + 7);
    void *inputs[9] = {state, t2r, pos, slots, bidx, table, w, cs, bias};
    /* the declared spans (a stand-in of 1 element for an empty tensor declares 0 bytes) */
    const size_t in_bytes[9] = {a.num_blocks ? n_state * (size_t)eb : 0, (size_t)a.num_tokens * 4,
                                (size_t)a.num_tokens * 8, (size_t)a.num_tokens * 8, (size_t)a.num_outputs * 8,
                                n_table * 4, (size_t)D * 2, a.max_pos ? n_cs * 4 : 0, n_bias * 4};
    if (alias) { /* the arena: kv_cache first, the victim input copied in at alias_off */
        victim_bytes = in_bytes[victim];
        alias_off = 8 * (size_t)take(&r, (uint32_t)(n_kv / 8 + 2));
        const size_t n_arena = (alias_off + victim_bytes > n_kv ? alias_off + victim_bytes : n_kv) + 8;
        arena = malloc(n_arena);
        memcpy(arena, kv, n_kv);
        memcpy(arena + alias_off, inputs[victim], victim_bytes);
        free(inputs[victim]);
        free(kv);
        kv = arena;
        n_kv = n_arena; /* the whole arena must stay unchanged on refusal */
        inputs[victim] = arena + alias_off;
    }
    before = malloc(n_kv ? n_kv : 1);
    memcpy(before, kv, n_kv);
    state = inputs[0];
    t2r = inputs[1];
    pos = inputs[2];
    slots = inputs[3];
    bidx = inputs[4];
    table = inputs[5];
    w = inputs[6];
    cs = inputs[7];
    bias = inputs[8];
    /* does the victim meet a byte of a slot (each page's first SB S bytes)? */
    int meets = 0;
    for (int64_t pg = 0; alias && a.num_outputs > 0 && victim_bytes > 0 && pg < a.num_pages; pg++)
        meets |= alias_off < (size_t)(pg * ps + SB * S) && (size_t)(pg * ps) < alias_off + victim_bytes;
    a.state_cache = state;
    a.token_to_req = t2r;
    a.positions = pos;
    a.kv_slot_mapping = slots;
    a.boundary_token_indices = bidx;
    a.block_table = table;
    a.rms_norm_weight = w;
    a.cos_sin_cache = cs;
    a.score_bias = bias;
    a.kv_cache = kv;

    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    ex.num_threads = 1 + (int)take(&r, 3);
    /* a caller's status word (a GPU backend's): the CPU backend neither
     * reads nor writes it, wherever it points -- a word of its own, a
     * 4-byte buffer, or into the kv cache or the state */
    uint8_t tiny_status[4] = {0xC3, 0xC3, 0xC3, 0xC3};
    switch (take(&r, 5)) {
    case 1: ex.device_status = (kvc_device_status *)(void *)tiny_status; break;
    case 2: ex.device_status = (kvc_device_status *)(void *)kv; break;
    case 3: ex.device_status = (kvc_device_status *)(void *)state; break;
    default: break;
    }
    static int registered;
    if (!registered && getenv("KVC_FUZZ_STATS")) {
        registered = 1;
        atexit(print_stats);
    }
    kvc_status v = kvc_validate(&a);
    if (overflow && v == KVC_OK) fail("a byte span past int64 was accepted");
    if (huge && v == KVC_OK) goto done; /* valid but larger than the stand-ins: not run */
    kvc_report rep;
    kvc_status st = kvc_compress(&a, &ex, &rep);
    if (getenv("KVC_FUZZ_DEBUG"))
        fprintf(stderr, "state %p +%zu kv %p +%zu alias %d victim %d off %zu bytes %zu meets %d pages %lld ps %lld S %lld outputs %lld st %s\n", (void *)state, n_state * 4, (void *)kv, n_kv, alias,
                victim, alias_off, victim_bytes, meets, (long long)a.num_pages, (long long)ps, (long long)S,
                (long long)a.num_outputs, kvc_status_string(st));
    if (v != st) fail("kvc_validate and kvc_compress disagree");
    if (!huge && st == KVC_ERROR_ALIASING && !meets) fail("aliasing refused where no input byte lies in a slot");
    if (meets && (st == KVC_OK || st == KVC_ERROR_INDEX_OUT_OF_RANGE || st == KVC_ERROR_DUPLICATE_SLOT))
        fail("kv_cache overlapping an input was not refused as aliasing");
    if (tiny_status[0] != 0xC3 || tiny_status[3] != 0xC3) fail("the CPU backend wrote exec->device_status");
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
            if (in < S * PB) s = in / PB;
            else if (in < S * SB) s = (in - S * PB) / (SB - PB);
            int ok = 0;
            for (int64_t o = 0; s >= 0 && o < a.num_outputs && !ok; o++)
                ok = slots[bidx[o]] == page * S + s;
            if (!ok) fail("a byte outside the written slots changed");
        }
        for (int64_t o = 0; SB == 584 && o < a.num_outputs; o++) {
            int64_t sl = slots[bidx[o]];
            if (sl >= 0 && kv[(sl / S) * a.page_stride + S * 576 + (sl % S) * 8 + 7] != 0) fail("pad byte not 0");
        }
    }
done:
    for (int i = 0; i < 9; i++)
        if (!alias || i != victim) free(inputs[i]);
    free(kv);
    free(before);
    return 0;
}
