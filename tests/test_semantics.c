/*
 * test_semantics -- SPEC 2 and the shapes the CPU backend must support:
 *  - batch invariance / determinism: 1, 2, 3, 7 threads; outputs reversed,
 *    shuffled, a subset -> identical bytes per output;
 *  - in place: poisoned kv_cache, bytes outside written slots unchanged, pad 0;
 *  - padding (slot < 0) skipped and counted;
 *  - non-finite inputs (NaN value, NaN score, +Inf score, a dimension with all
 *    -Inf scores -> non-finite slot; some -Inf scores -> a normal slot);
 *  - shapes against the naive reference: C in {1,3,8,100,128,256,512,1000},
 *    block_size {1,7,8,16,64}, kv_block_size {1,2,64}, strided state_cache /
 *    block_table / kv_cache / cos_sin views, a request's later chunk
 *    (positions not starting at 0), slots scattered over pages, FP8, overlap,
 *    interleaved cos/sin.
 * usage: test_semantics [backend=cpu|cuda|opencl]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress_rand.h"
#include "ref_naive.h"
#include "test_util.h"

static kvc_backend g_backend = KVC_BACKEND_CPU;

static kvc_status run(const kvc_args *a, int threads, kvc_report *rep) {
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = g_backend;
    ex.num_threads = threads;
    return tu_run(a, &ex, rep);
}

static int gen(kvc_case *c, int64_t reqs, int64_t tokens, int64_t C, int64_t bs, int shuffle, uint64_t seed) {
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = reqs;
    p.total_tokens = tokens;
    p.compress_ratio = C;
    p.block_size = bs;
    p.shuffle = shuffle;
    p.seed = seed;
    kvc_status st = kvc_case_generate(&p, 0, c);
    TU_CHECK(st == KVC_OK, "generate: %s", kvc_last_error_message());
    return st == KVC_OK;
}

/* The case of a kvc_kit_parse_spec spec. */
static int gen_spec(kvc_case *c, const char *spec) {
    kvc_case_params p;
    char msg[256];
    if (kvc_kit_parse_spec(spec, &p, msg, sizeof msg) != 0) {
        TU_CHECK(0, "spec %s: %s", spec, msg);
        return 0;
    }
    kvc_status st = kvc_case_generate(&p, 0, c);
    TU_CHECK(st == KVC_OK, "generate %s: %s", spec, kvc_last_error_message());
    return st == KVC_OK;
}

/* Rows (by output) of the last run. */
static uint8_t *rows_of(const kvc_args *a) {
    /* 584 bytes an output; a smaller slot: zeros after it */
    uint8_t *rows = calloc((size_t)a->num_outputs * 584 + 1, 1);
    for (int64_t o = 0; o < a->num_outputs; o++) {
        int64_t slot = a->kv_slot_mapping[a->boundary_token_indices[o]];
        if (slot >= 0) kvc_kit_slot_row(a, slot, rows + o * 584);
        else memset(rows + o * 584, 0, 584);
    }
    return rows;
}

static void test_invariance(void) {
    kvc_case c;
    if (!gen(&c, 3, 3 * 1280, 128, 8, 1, 11)) return;
    kvc_args a = c.args;
    TU_CHECK(run(&a, 1, NULL) == KVC_OK, "1 thread");
    uint8_t *ref = rows_of(&a);
    const int threads[3] = {2, 3, 7};
    for (int t = 0; t < 3; t++) {
        kvc_kit_poison(c.kv_cache, c.kv_cache_bytes, (uint64_t)t);
        TU_CHECK(run(&a, threads[t], NULL) == KVC_OK, "%d threads", threads[t]);
        uint8_t *got = rows_of(&a);
        TU_CHECK(memcmp(got, ref, (size_t)a.num_outputs * 584) == 0, "%d threads: bytes differ from 1 thread",
                 threads[t]);
        free(got);
    }
    /* reversed, shuffled, subset */
    int64_t n = a.num_outputs;
    int64_t *order = malloc(sizeof(int64_t) * (size_t)n);
    for (int mode = 0; mode < 3; mode++) {
        int64_t m = 0;
        for (int64_t o = 0; o < n; o++) order[o] = o;
        if (mode == 0)
            for (int64_t o = 0; o < n; o++) order[o] = n - 1 - o;
        if (mode == 1)
            for (int64_t i = n - 1; i > 0; i--) {
                int64_t j = (int64_t)(kvc_rand_u64(3, 3, (uint64_t)i) % (uint64_t)(i + 1));
                int64_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
        int64_t *bidx = malloc(sizeof(int64_t) * (size_t)n);
        for (int64_t o = 0; o < n; o++)
            if (mode != 2 || o % 3 == 1) bidx[m++] = c.boundary_token_indices[order[o]];
        kvc_args b = a;
        b.boundary_token_indices = bidx;
        b.num_outputs = m;
        kvc_kit_poison(c.kv_cache, c.kv_cache_bytes, 100 + (uint64_t)mode);
        uint8_t *before = tu_dup(c.kv_cache, c.kv_cache_bytes);
        TU_CHECK(run(&b, 2, NULL) == KVC_OK, "order mode %d", mode);
        for (int64_t k = 0; k < m; k++) {
            int64_t o = (mode == 2) ? 3 * k + 1 : order[k];
            uint8_t row[584];
            kvc_kit_slot_row(&b, c.kv_slot_mapping[bidx[k]], row);
            if (memcmp(row, ref + o * 584, 584) != 0) {
                TU_CHECK(0, "order mode %d: output %lld differs", mode, (long long)o);
                break;
            }
        }
        char msg[256];
        TU_CHECK(!tu_check_untouched(&b, before, c.kv_cache, msg, sizeof msg), "mode %d: %s", mode, msg);
        free(before);
        free(bidx);
    }
    free(order);
    free(ref);
    kvc_case_free(&c);
}

static void test_in_place_and_padding(void) {
    kvc_case c;
    if (!gen(&c, 2, 2 * 512, 64, 8, 1, 12)) return;
    /* leave some slots unused and pad some outputs */
    c.args.num_pages = 2;
    c.args.kv_block_size = 16;
    c.args.page_stride = 16 * 584 + 13;
    size_t bytes = (size_t)(c.args.num_pages * c.args.page_stride);
    uint8_t *kv = malloc(bytes);
    kvc_kit_poison(kv, bytes, 5);
    c.args.kv_cache = kv;
    int64_t pads = 0;
    for (int64_t o = 0; o < c.args.num_outputs; o++) {
        int64_t b = c.boundary_token_indices[o];
        if (o % 4 == 3) {
            c.kv_slot_mapping[b] = -1 - o;
            pads++;
        } else {
            c.kv_slot_mapping[b] = 31 - o; /* reversed, scattered over both pages */
        }
    }
    uint8_t *before = tu_dup(kv, bytes);
    kvc_report rep;
    TU_CHECK(run(&c.args, 0, &rep) == KVC_OK, "run: %s", kvc_last_error_message());
    if (g_backend == KVC_BACKEND_CPU)
        TU_CHECK(rep.outputs_padding == pads && rep.outputs_written == c.args.num_outputs - pads,
                 "report padding %lld written %lld", (long long)rep.outputs_padding, (long long)rep.outputs_written);
    char msg[256];
    TU_CHECK(!tu_check_untouched(&c.args, before, kv, msg, sizeof msg), "%s", msg);
    for (int64_t o = 0; o < c.args.num_outputs; o++) {
        int64_t slot = c.kv_slot_mapping[c.boundary_token_indices[o]];
        if (slot < 0) continue;
        uint8_t row[584], want[584];
        kvc_kit_slot_row(&c.args, slot, row);
        ref_output_row(&c.args, o, want);
        TU_CHECK(row[583] == 0, "pad byte of slot %lld is %u", (long long)slot, row[583]);
        TU_CHECK(memcmp(row, want, 584) == 0, "output %lld differs from the naive reference", (long long)o);
    }
    free(before);
    free(kv);
    kvc_case_free(&c);
}

/* Set element col of the state row of (req, pos). */
static void poke(kvc_case *c, int64_t req, int64_t pos, int64_t col, float v) {
    const kvc_args *a = &c->args;
    int64_t g = c->block_table[req * a->blocks_per_req + pos / a->block_size];
    c->state_cache[(g * a->block_size + pos % a->block_size) * a->state_width + col] = v;
}

static int is_nonfinite_row(const uint8_t *row) {
    for (int i = 0; i < 448; i++)
        if (row[i]) return 0;
    for (int j = 0; j < 64; j++)
        if (row[448 + 2 * j] != 0xC0 || row[449 + 2 * j] != 0x7F) return 0;
    for (int g = 0; g < 7; g++)
        if (row[576 + g] != 0xFF) return 0;
    return row[583] == 0;
}

/* Outputs of C = 32 tokens (t = 1), or 64 (t = 2: windows of 8 segments). */
static void test_nonfinite(int64_t t) {
    kvc_case c;
    const int64_t C = 32 * t;
    if (!gen(&c, 1, 8 * C, C, 8, 1, 13)) return; /* 8 outputs of C tokens */
    poke(&c, 0, 3 * t, 10, NAN);                 /* output 0: NaN value        */
    poke(&c, 0, 40 * t, 512 + 7, NAN);           /* output 1: NaN score        */
    poke(&c, 0, 70 * t, 512 + 100, INFINITY);    /* output 2: +Inf score       */
    for (int64_t pos = 3 * C; pos < 4 * C; pos++) poke(&c, 0, pos, 512 + 300, -INFINITY); /* output 3: all -Inf */
    for (int64_t pos = 4 * C; pos < 4 * C + 22 * t; pos++) poke(&c, 0, pos, 512 + 5, -INFINITY); /* output 4: some -Inf */
    poke(&c, 0, 5 * C + 10 * t, 20, INFINITY);   /* output 5: +Inf value */
    /* output 6: one segment whose scores of a dim are all -Inf but one NaN
     * (the segment is not dead: the NaN must reach the slot; a max that
     * drops NaNs would close it as dead and write a finite slot) */
    for (int64_t pos = 6 * C; pos < 6 * C + 8; pos++) poke(&c, 0, pos, 512 + 200, pos == 6 * C + 3 ? NAN : -INFINITY);
    kvc_report rep;
    kvc_kit_poison(c.kv_cache, c.kv_cache_bytes, 77);
    TU_CHECK(run(&c.args, 0, &rep) == KVC_OK, "run: %s", kvc_last_error_message());
    if (g_backend == KVC_BACKEND_CPU)
        TU_CHECK(rep.outputs_nonfinite == 6, "report says %lld non-finite outputs, expected 6",
                 (long long)rep.outputs_nonfinite);
    const int expect[8] = {1, 1, 1, 1, 0, 1, 1, 0};
    for (int o = 0; o < 8; o++) {
        uint8_t row[584], want[584];
        kvc_kit_slot_row(&c.args, o, row);
        TU_CHECK(is_nonfinite_row(row) == expect[o], "output %d: non-finite slot %d, expected %d", o,
                 is_nonfinite_row(row), expect[o]);
        ref_output_row(&c.args, o, want);
        TU_CHECK(memcmp(row, want, 584) == 0, "output %d differs from the naive reference", o);
    }
    kvc_case_free(&c);
}

/* Re-lay the case with strides, a later chunk of the request, scattered slots; compare with the naive reference. */
static void shape_case(int64_t C, int64_t bs, int64_t S, int variant, uint64_t seed) {
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = 2;
    int64_t per = C * (1 + (int64_t)(seed % 3)) + (int64_t)(seed % 5);
    if (per < 2 * C) per = 2 * C;
    p.total_tokens = 2 * per;
    p.compress_ratio = C;
    p.block_size = bs;
    p.shuffle = 1;
    p.seed = seed;
    p.kv_block_size = S;
    p.nope_format = (kvc_nope_format)(variant & 1);
    p.cos_sin_layout = (kvc_cos_sin_layout)((variant >> 1) & 1);
    p.overlap = (C <= 128 && (variant & 4)) ? KVC_OVERLAP_ON : KVC_OVERLAP_OFF;
    /* decode-shaped: tokens from a deep position on, the state holding only
     * the blocks the windows read (the table's earlier entries name another) */
    p.first_position = (variant & 8) ? 1000 + (int64_t)(seed % 7) : 0;
    kvc_case c;
    if (kvc_case_generate(&p, 0, &c) != KVC_OK) {
        TU_CHECK(0, "generate C=%lld bs=%lld: %s", (long long)C, (long long)bs, kvc_last_error_message());
        return;
    }
    kvc_args a = c.args;
    const int64_t W = a.state_width;
    /* strided state: stride_token = W + 16, stride_block = bs * (W + 16) + 48;
     * variant bit 3: W + 2 (rows only 8-byte aligned, not 16); bit 4: odd
     * strides W + 1 and bs * (W + 1) + 5 (rows only 4-byte aligned: the GPU
     * backends' scalar-load paths) */
    int64_t st_tok = W + ((variant & 16) ? 1 : (variant & 8) ? 2 : 16);
    int64_t st_blk = bs * st_tok + ((variant & 16) ? 5 : 48);
    /* the buffer starts seed % 16 floats into a 64-byte line (with the
     * default strides every row does: the CPU backend's line-split loop) */
    const size_t lead = (size_t)(seed % 16);
    float *state_buf = aligned_alloc(64, (sizeof(float) * (size_t)(a.num_blocks * st_blk + 16) + 63) & ~(size_t)63);
    float *state = state_buf + lead;
    for (size_t i = 0; i < (size_t)(a.num_blocks * st_blk); i++) state[i] = NAN; /* gaps are poison */
    for (int64_t g = 0; g < a.num_blocks; g++)
        for (int64_t t = 0; t < bs; t++)
            memcpy(state + g * st_blk + t * st_tok, c.state_cache + (g * bs + t) * W, sizeof(float) * (size_t)W);
    a.state_cache = state;
    a.state_stride_token = st_tok;
    a.state_stride_block = st_blk;
    /* block table with row stride bpr + 3 (garbage in the gap) */
    int64_t bt = a.blocks_per_req + 3;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)(a.num_reqs * bt));
    for (int64_t i = 0; i < a.num_reqs * bt; i++) table[i] = -12345;
    for (int64_t r = 0; r < a.num_reqs; r++)
        memcpy(table + r * bt, c.block_table + r * a.blocks_per_req, sizeof(int32_t) * (size_t)a.blocks_per_req);
    a.block_table = table;
    a.block_table_stride = bt;
    /* cos/sin rows with stride 80 */
    float *cs = malloc(sizeof(float) * (size_t)(a.max_pos * 80));
    for (int64_t r = 0; r < a.max_pos; r++) memcpy(cs + r * 80, c.cos_sin_cache + r * 64, 64 * sizeof(float));
    a.cos_sin_cache = cs;
    a.cos_sin_stride = 80;
    /* a later chunk: only the tokens of request 1 from position C on */
    int64_t first = per + C, ntok = p.total_tokens - first;
    a.token_to_req = c.token_to_req + first;
    a.positions = c.positions + first;
    a.kv_slot_mapping = c.kv_slot_mapping + first;
    a.num_tokens = ntok;
    int64_t *bidx = malloc(sizeof(int64_t) * (size_t)(ntok + 1));
    int64_t n = 0;
    for (int64_t t = 0; t < ntok; t++)
        if ((a.positions[t] + 1) % C == 0) bidx[n++] = t;
    a.boundary_token_indices = bidx;
    a.num_outputs = n;
    /* scatter slots over 3 extra pages, page stride with a tail */
    a.num_pages = (n + S - 1) / S + 3;
    a.page_stride = S * 584 + 24;
    int64_t nslots = a.num_pages * S;
    for (int64_t k = 0; k < n; k++)
        c.kv_slot_mapping[first + bidx[k]] = (int64_t)((uint64_t)(k * 7919 + 13) % (uint64_t)nslots);
    /* make the scatter injective: 7919 is prime, so use a permutation when nslots divides */
    {
        uint8_t *used = calloc((size_t)nslots, 1);
        for (int64_t k = 0; k < n; k++) {
            int64_t s = c.kv_slot_mapping[first + bidx[k]];
            while (used[s]) s = (s + 1) % nslots;
            used[s] = 1;
            c.kv_slot_mapping[first + bidx[k]] = s;
        }
        free(used);
    }
    size_t bytes = (size_t)(a.num_pages * a.page_stride);
    uint8_t *kv = malloc(bytes);
    kvc_kit_poison(kv, bytes, seed);
    a.kv_cache = kv;
    uint8_t *before = tu_dup(kv, bytes);
    kvc_status st = run(&a, 0, NULL);
    TU_CHECK(st == KVC_OK, "C=%lld bs=%lld S=%lld: %s", (long long)C, (long long)bs, (long long)S,
             kvc_last_error_message());
    int bad = 0;
    if (getenv("KVC_TEST_VERBOSE"))
        printf("shape C=%lld bs=%lld S=%lld variant %d: %lld outputs\n", (long long)C, (long long)bs, (long long)S,
               variant, (long long)n);
    TU_CHECK(n > 0, "C=%lld: the chunk has no outputs", (long long)C);
    for (int64_t o = 0; st == KVC_OK && o < n && !bad; o++) {
        uint8_t row[584], want[584];
        kvc_kit_slot_row(&a, a.kv_slot_mapping[bidx[o]], row);
        ref_output_row(&a, o, want);
        if (memcmp(row, want, 584) != 0) {
            TU_CHECK(0, "C=%lld bs=%lld S=%lld variant %d: output %lld differs from the naive reference",
                     (long long)C, (long long)bs, (long long)S, variant, (long long)o);
            bad = 1;
        }
    }
    char msg[256];
    TU_CHECK(!tu_check_untouched(&a, before, kv, msg, sizeof msg), "C=%lld bs=%lld: %s", (long long)C, (long long)bs,
             msg);
    free(before);
    free(kv);
    free(bidx);
    free(cs);
    free(table);
    free(state_buf);
    kvc_case_free(&c);
}

#if defined(KVC_KIT_WITH_CUDA) || defined(KVC_KIT_WITH_OPENCL)
/* GPU: an output with a bad index value is skipped, the first error lands in
 * the device status word, every other output is written as on the CPU.
 * C = 128 / 256 run the slice kernels (one chunk per window, or two: chunk
 * states), C = 8 the one-segment-window kernel (several outputs per thread
 * block / work-group), idx (C = 4 with overlap, head width 128) the indexer
 * kernel (a warp per output, several outputs a thread block / work-group);
 * idx = 2: 8192 outputs, more than one wave of CUDA's decode kernel (an
 * output a CTA), so that CUDA runs its indexer kernel. */
typedef kvc_status (*many_run_fn)(const kvc_args *, int, kvc_report *, kvc_device_status *);
static int gen_err(kvc_case *c, int64_t C, int64_t bs, int idx) {
    if (!idx) return gen(c, 2, 2 * 1024, C, bs, 1, 31);
    char spec[160];
    snprintf(spec, sizeof spec,
             "reqs=2,tokens=%d,C=%lld,block=%lld,overlap=1,format=indexer_fp8,layout=shuffle,seed=31",
             idx == 2 ? 32768 : 2048, (long long)C, (long long)bs);
    return gen_spec(c, spec);
}
static void test_device_errors(many_run_fn device_run, int64_t C, int64_t bs, int many, int idx) {
    kvc_case c, e;
    if (!gen_err(&c, C, bs, idx)) return;
    /* many: the case is the second set of a kvc_compress_many call, after
     * one of C = 4 with overlap (the one-segment kernel): the error names
     * output e's outputs + bad_o, the counts are the two sets' */
    if (many && !gen_spec(&e, "reqs=3,tokens=192,C=4,block=4,overlap=1,layout=shuffle,seed=32")) return;
    uint8_t *cpu_e = NULL;
    if (many) {
        TU_CHECK(kvc_compress(&e.args, NULL, NULL) == KVC_OK, "CPU run of the first set");
        cpu_e = rows_of(&e.args);
    }
    const int64_t base = many ? e.args.num_outputs : 0;
    TU_CHECK(kvc_compress(&c.args, NULL, NULL) == KVC_OK, "CPU run");
    uint8_t *cpu = rows_of(&c.args);
    const int64_t bad_o = C >= 256 ? 7 : 11; /* request 1, its 4th window */
    int64_t b = c.boundary_token_indices[bad_o];
    const int32_t badblk = (int32_t)c.args.num_blocks + 999; /* (past the state) */
    struct { const char *what; int check; int64_t value; } cases[4] = {
        {"physical block", 5 /* KVC_CHECK_PHYSICAL_BLOCK */, badblk},
        {"slot", 7 /* KVC_CHECK_SLOT */, 12345},
        {"position", 3 /* KVC_CHECK_POSITION */, C == 4 ? 1 : 5}, /* (< C - 1) */
        {"physical blocks of two chunks", 5, badblk},
    };
    for (int k = 0; k < (C >= 128 && bs == 8 ? 4 : 3); k++) {
        kvc_case d;
        if (!gen_err(&d, C, bs, idx)) break;
        int64_t p = d.positions[b], r = d.token_to_req[b];
        /* a block of the window's last rows (p - 7 .. p: always in the
         * window), or with blocks of 12 one in its middle (the rows of row
         * p - 64's block are all in the window) */
        if (k == 0) d.block_table[r * d.args.blocks_per_req + (bs == 8 || idx ? p - 7 : p - 64) / bs] = badblk;
        if (k == 1) d.kv_slot_mapping[b] = 12345;
        if (k == 2) d.positions[b] = cases[2].value;
        /* rows p - 127 .. p - 64: the first two of the window's chunks (the
         * kernels' chunks are <= C / 2 rows here), so that two work-groups
         * of the output carry the bad mark (the ticket's bad bit once was
         * added per group and two of them cancelled out) */
        for (int64_t q = p - 127; k == 3 && q <= p - 64; q += 8)
            d.block_table[r * d.args.blocks_per_req + q / 8] = badblk;
        kvc_kit_poison(d.kv_cache, d.kv_cache_bytes, 50 + (uint64_t)k);
        uint8_t *before = tu_dup(d.kv_cache, d.kv_cache_bytes);
        kvc_device_status ds;
        memset(&ds, 0, sizeof ds);
        if (many) kvc_kit_poison(e.kv_cache, e.kv_cache_bytes, 60 + (uint64_t)k);
        const kvc_args sets[2] = {e.args, d.args};
        kvc_status st = many ? device_run(sets, 2, NULL, &ds) : device_run(&d.args, 1, NULL, &ds);
        TU_CHECK(st == KVC_ERROR_INDEX_OUT_OF_RANGE, "C=%lld %s%s: status %s", (long long)C, cases[k].what,
                 many ? " (many)" : "", kvc_status_string(st));
        /* the outputs skipped: bad_o, or every window that reads a bad block
         * (with overlap, a token's rows are read by two windows) */
        char *skip = calloc((size_t)d.args.num_outputs, 1);
        int64_t nskip = 0;
        const int64_t rows = d.args.overlap == KVC_OVERLAP_ON ? 2 * C : C;
        for (int64_t o = 0; o < d.args.num_outputs; o++) {
            const int64_t bo = d.boundary_token_indices[o], po = d.positions[bo];
            skip[o] = o == bad_o;
            for (int64_t q = po - rows + 1 < 0 ? 0 : po - rows + 1; q <= po && (k == 0 || k == 3); q++)
                skip[o] |= d.token_to_req[bo] == r && d.block_table[r * d.args.blocks_per_req + q / bs] == badblk;
            nskip += skip[o];
        }
        const int64_t got_o = ds.output - base;
        TU_CHECK(ds.check == cases[k].check && got_o >= 0 && got_o < d.args.num_outputs && skip[got_o] &&
                     ds.value == cases[k].value,
                 "%s: device status check %d output %lld value %lld", cases[k].what, ds.check, (long long)ds.output,
                 (long long)ds.value);
        TU_CHECK(ds.outputs_invalid == nskip && ds.outputs_written == base + d.args.num_outputs - nskip,
                 "%s: invalid %lld written %lld (want %lld invalid)", cases[k].what, (long long)ds.outputs_invalid,
                 (long long)ds.outputs_written, (long long)nskip);
        uint8_t *got_e = many ? rows_of(&e.args) : NULL;
        TU_CHECK(!many || memcmp(got_e, cpu_e, (size_t)e.args.num_outputs * 584) == 0,
                 "%s: the first set's bytes differ from the CPU", cases[k].what);
        free(got_e);
        kvc_args pa = d.args;
        pa.kv_cache = before;
        for (int64_t o = 0; o < d.args.num_outputs; o++) {
            uint8_t row[584] = {0}, want[584] = {0};
            kvc_kit_slot_row(&d.args, o, row);
            if (skip[o]) kvc_kit_slot_row(&pa, o, want); /* untouched */
            else memcpy(want, cpu + o * 584, 584);
            if (memcmp(row, want, 584) != 0) {
                TU_CHECK(0, "%s: output %lld %s", cases[k].what, (long long)o,
                         skip[o] ? "was skipped but its slot was written" : "differs from the CPU");
                break;
            }
        }
        free(skip);
        free(before);
        kvc_case_free(&d);
    }
    free(cpu);
    kvc_case_free(&c);
    if (many) {
        free(cpu_e);
        kvc_case_free(&e);
    }
}
#endif

/* kvc_compress_many on the CPU: every set's indices are checked before any
 * set is written -- a bad slot in the second set is reported as that set's
 * and the first set's KV cache is untouched -- and two good sets give the
 * bytes and the summed counts of two calls. */
static void test_many_cpu(void) {
    kvc_case a, b;
    if (!gen(&a, 2, 2 * 512, 128, 8, 1, 41) || !gen_spec(&b, "reqs=3,tokens=192,C=4,block=4,overlap=1,seed=42")) return;
    kvc_report r1, r2, rm;
    TU_CHECK(kvc_compress(&a.args, NULL, &r1) == KVC_OK && kvc_compress(&b.args, NULL, &r2) == KVC_OK, "single runs");
    uint8_t *ra = rows_of(&a.args), *rb = rows_of(&b.args);
    kvc_kit_poison(a.kv_cache, a.kv_cache_bytes, 1);
    kvc_kit_poison(b.kv_cache, b.kv_cache_bytes, 2);
    kvc_args sets[2] = {a.args, b.args};
    TU_CHECK(kvc_compress_many(sets, 2, NULL, &rm) == KVC_OK, "many: %s", kvc_last_error_message());
    uint8_t *ma = rows_of(&a.args), *mb = rows_of(&b.args);
    TU_CHECK(!memcmp(ma, ra, (size_t)a.args.num_outputs * 584) && !memcmp(mb, rb, (size_t)b.args.num_outputs * 584),
             "many: bytes differ from two calls");
    TU_CHECK(rm.outputs_written == r1.outputs_written + r2.outputs_written &&
                 rm.outputs_padding == r1.outputs_padding + r2.outputs_padding,
             "many: written %lld padding %lld", (long long)rm.outputs_written, (long long)rm.outputs_padding);
    kvc_kit_poison(a.kv_cache, a.kv_cache_bytes, 3);
    uint8_t *before = tu_dup(a.kv_cache, a.kv_cache_bytes);
    sets[1].kv_slot_mapping = b.kv_slot_mapping;
    b.kv_slot_mapping[b.boundary_token_indices[2]] = 1 << 20; /* past the last page */
    const kvc_status st = kvc_compress_many(sets, 2, NULL, NULL);
    TU_CHECK(st == KVC_ERROR_INDEX_OUT_OF_RANGE && !strncmp(kvc_last_error_message(), "args[1]: ", 9),
             "many with a bad slot in set 1: %s, '%s'", kvc_status_string(st), kvc_last_error_message());
    TU_CHECK(!memcmp(a.kv_cache, before, a.kv_cache_bytes), "many: set 0 was written although set 1 was refused");
    free(before);
    free(ra);
    free(rb);
    free(ma);
    free(mb);
    kvc_case_free(&a);
    kvc_case_free(&b);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "backend=", 8) && tu_parse_backend(argv[i] + 8, &g_backend)) return 2;
    if (!kvc_backend_available(g_backend)) {
        printf("SKIP: backend not available\n");
        return TU_SKIP;
    }
#if defined(KVC_KIT_WITH_CUDA) || defined(KVC_KIT_WITH_OPENCL)
    many_run_fn device_run = NULL;
#ifdef KVC_KIT_WITH_CUDA
    if (g_backend == KVC_BACKEND_CUDA) device_run = kvc_kit_cuda_run_many;
#endif
#ifdef KVC_KIT_WITH_OPENCL
    if (g_backend == KVC_BACKEND_OPENCL) device_run = kvc_kit_opencl_run_many;
#endif
    for (int many = 0; device_run && many < 2; many++) {
        test_device_errors(device_run, 128, 8, many, 0);
        test_device_errors(device_run, 128, 12, many, 0); /* the slice kernels' row-table path */
        test_device_errors(device_run, 256, 8, many, 0);  /* two chunks: the chunk states */
        test_device_errors(device_run, 8, 8, many, 0);
        test_device_errors(device_run, 4, 8, many, 1);
        test_device_errors(device_run, 4, 1, many, 1); /* (every row of the window its own block) */
        if (g_backend == KVC_BACKEND_CUDA) test_device_errors(device_run, 4, 8, many, 2);
    }
#endif
    if (g_backend == KVC_BACKEND_CPU) test_many_cpu();
    test_invariance();
    test_in_place_and_padding();
    test_nonfinite(1);
    test_nonfinite(2);
    const int64_t Cs[] = {1, 3, 8, 100, 128, 256, 512, 1000}, bss[] = {1, 7, 8, 16, 64}, Ss[] = {1, 2, 64};
    int k = 0;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 5; j++, k++) shape_case(Cs[i], bss[j], Ss[k % 3], k % 32, 700 + (uint64_t)k);
    printf("%s (%d failures)\n", tu_failures ? "FAILED" : "passed", tu_failures);
    return tu_failures ? 1 : 0;
}
