/*
 * test_validation -- every rule of SPEC 2.3: the status, a message naming the
 * argument / index / value, and (CPU) kv_cache untouched.  Also kvc_validate
 * alone, status strings, and that padding outputs are not validated beyond
 * their boundary index.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress_rand.h"
#include "test_util.h"

static kvc_case g_case;
static uint8_t *g_before;

typedef void (*mutator)(kvc_args *a, kvc_case *c);

/* Each rule: mutate a fresh copy of a valid case, expect status + message fragment. */
static void expect(const char *what, mutator mut, kvc_status want, const char *fragment) {
    kvc_case *c = &g_case;
    /* restore the case's index tensors */
    kvc_case_free(c);
    if (!tu_small_case(c, 21)) {
        TU_CHECK(0, "generate");
        return;
    }
    free(g_before);
    g_before = tu_dup(c->kv_cache, c->kv_cache_bytes);
    kvc_args a = c->args;
    mut(&a, c);
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    kvc_status v = kvc_validate(&a);
    char vmsg[1024];
    snprintf(vmsg, sizeof vmsg, "%s", kvc_last_error_message());
    kvc_status st = kvc_compress(&a, &ex, NULL);
    const char *msg = kvc_last_error_message();
    TU_CHECK(st == want, "%s: status %s, expected %s (%s)", what, kvc_status_string(st), kvc_status_string(want), msg);
    TU_CHECK(v == want, "%s: kvc_validate gave %s", what, kvc_status_string(v));
    TU_CHECK(strstr(msg, fragment) != NULL, "%s: message '%s' lacks '%s'", what, msg, fragment);
    TU_CHECK(strcmp(vmsg, msg) == 0, "%s: validate and compress messages differ: '%s' / '%s'", what, vmsg, msg);
    TU_CHECK(memcmp(g_before, c->kv_cache, c->kv_cache_bytes) == 0, "%s: kv_cache was written", what);
    printf("ok   %-34s %s\n", what, msg);
}

static int64_t B(kvc_case *c, int o) { return c->boundary_token_indices[o]; }

static void m_null_state(kvc_args *a, kvc_case *c) { (void)c; a->state_cache = NULL; }
static void m_null_slots(kvc_args *a, kvc_case *c) { (void)c; a->kv_slot_mapping = NULL; }
static void m_width(kvc_args *a, kvc_case *c) { (void)c; a->state_width = 2048; }
static void m_c0(kvc_args *a, kvc_case *c) { (void)c; a->compress_ratio = 0; }
static void m_bs0(kvc_args *a, kvc_case *c) { (void)c; a->block_size = 0; }
static void m_S0(kvc_args *a, kvc_case *c) { (void)c; a->kv_block_size = 0; }
static void m_page(kvc_args *a, kvc_case *c) { (void)c; a->page_stride = 584 * 2 - 1; }
static void m_fmt(kvc_args *a, kvc_case *c) { (void)c; a->nope_format = (kvc_nope_format)7; }
static void m_ovl(kvc_args *a, kvc_case *c) { (void)c; a->overlap = (kvc_overlap)3; }
static void m_cs(kvc_args *a, kvc_case *c) { (void)c; a->cos_sin_layout = (kvc_cos_sin_layout)9; }
static void m_eps(kvc_args *a, kvc_case *c) { (void)c; a->rms_norm_eps = NAN; }
static void m_eps_neg(kvc_args *a, kvc_case *c) { (void)c; a->rms_norm_eps = -1.0f; }
static void m_neg_blocks(kvc_args *a, kvc_case *c) { (void)c; a->num_blocks = -1; }
static void m_tok_stride(kvc_args *a, kvc_case *c) { (void)c; a->state_stride_token = 1000; }
static void m_cs_stride(kvc_args *a, kvc_case *c) { (void)c; a->cos_sin_stride = 32; }
static void m_overflow(kvc_args *a, kvc_case *c) { (void)c; a->num_pages = INT64_MAX / 2; }
/* misaligned tensors (issue 49): refused before any load of them (each was a misaligned load) */
static void m_mis_pos(kvc_args *a, kvc_case *c) { a->positions = (const int64_t *)((const char *)c->positions + 4); }
static void m_mis_t2r(kvc_args *a, kvc_case *c) { a->token_to_req = (const int32_t *)((const char *)c->token_to_req + 2); }
static void m_mis_state(kvc_args *a, kvc_case *c) { a->state_cache = (const float *)((const char *)c->state_cache + 1); }
static void m_mis_w(kvc_args *a, kvc_case *c) { a->rms_norm_weight = (const uint16_t *)((const char *)c->rms_norm_weight + 1); }
static void m_b_neg(kvc_args *a, kvc_case *c) { c->boundary_token_indices[5] = -1; (void)a; }
static void m_b_big(kvc_args *a, kvc_case *c) { c->boundary_token_indices[5] = a->num_tokens; }
static void m_req(kvc_args *a, kvc_case *c) { c->token_to_req[B(c, 3)] = 2; (void)a; }
static void m_req_neg(kvc_args *a, kvc_case *c) { c->token_to_req[B(c, 3)] = -1; (void)a; }
static void m_pos(kvc_args *a, kvc_case *c) { c->positions[B(c, 2)] = 3; (void)a; }
static void m_logical(kvc_args *a, kvc_case *c) { (void)c; a->blocks_per_req = 20; a->block_table_stride = 32; }
static void m_phys(kvc_args *a, kvc_case *c) { (void)a; c->block_table[1 * 32 + 9] = 64; }
static void m_phys_neg(kvc_args *a, kvc_case *c) { (void)a; c->block_table[0 * 32 + 2] = -3; }
static void m_maxpos(kvc_args *a, kvc_case *c) { (void)c; a->max_pos = 150; }
static void m_slot(kvc_args *a, kvc_case *c) { c->kv_slot_mapping[B(c, 4)] = a->num_pages * a->kv_block_size; }
static void m_dup(kvc_args *a, kvc_case *c) { (void)a; c->kv_slot_mapping[B(c, 6)] = c->kv_slot_mapping[B(c, 1)]; }
/* SPEC 9 / 10 settings (issue 52): bad values, undefined pairs, shapes, aliasing */
static float g_bias[64 * 512 + 1];
static void m_hd(kvc_args *a, kvc_case *c) { (void)c; a->head_dim = 256; }
static void m_hd128_int8(kvc_args *a, kvc_case *c) { (void)c; a->head_dim = 128; a->state_width = 256; }
static void m_ifp8_512(kvc_args *a, kvc_case *c) { (void)c; a->nope_format = KVC_INDEXER_FP8; }
static void m_rot_512(kvc_args *a, kvc_case *c) { (void)c; a->rotate = KVC_ROTATE_HADAMARD; }
static void m_rot_bad(kvc_args *a, kvc_case *c) { (void)c; a->rotate = (kvc_rotation)5; }
static void m_dtype_bad(kvc_args *a, kvc_case *c) { (void)c; a->state_dtype = (kvc_state_dtype)3; }
static void m_idx(kvc_args *a) { a->head_dim = 128; a->nope_format = KVC_INDEXER_MXFP4; a->page_stride = 0; }
static void m_idx_wide(kvc_args *a, kvc_case *c) { (void)c; m_idx(a); } /* 1024-wide rows at head width 128 */
static void m_idx_page(kvc_args *a, kvc_case *c) {
    (void)c;
    m_idx(a);
    a->state_width = 256;
    a->page_stride = 68 * 2 - 1;
}
static void m_bias_alias(kvc_args *a, kvc_case *c) { a->score_bias = (const float *)(const void *)(c->kv_cache + 64); }
static void m_bias_stride(kvc_args *a, kvc_case *c) { (void)c; a->score_bias = g_bias; a->score_bias_stride = 100; }
static void m_bias_neg(kvc_args *a, kvc_case *c) { (void)c; a->score_bias = g_bias; a->score_bias_stride = -512; }
static void m_bias_mis(kvc_args *a, kvc_case *c) { (void)c; a->score_bias = (const float *)(const void *)((char *)g_bias + 2); }
static void m_bf16_mis(kvc_args *a, kvc_case *c) {
    a->state_dtype = KVC_STATE_BFLOAT16;
    a->state_cache = (const float *)(const void *)((const char *)c->state_cache + 1);
}

/* Two outputs sharing a slot: the error names the first repeat in slot order
 * (outputs 1 and 6 share one slot, 2 and 5 another: the message is the pair
 * of the smaller one), in a dense slot space (kv_block 2: the one-pass
 * bitmap finds the repeat, the sort names it) and a sparse one (kv_block
 * 1024: the sort alone); without a repeat, both pass. */
static void test_duplicate_order(void) {
    static const char *const spec[2] = {"reqs=2,tokens=512,C=64,block=8,layout=shuffle,kv_block=2",
                                        "reqs=2,tokens=512,C=64,block=8,layout=shuffle,kv_block=1024"};
    for (int sp = 0; sp < 2; sp++)
        for (int dup = 0; dup < 2; dup++) {
            kvc_case_params p;
            kvc_case c;
            char msg[128];
            if (kvc_kit_parse_spec(spec[sp], &p, msg, sizeof msg) || kvc_case_generate(&p, 1, &c) != KVC_OK) {
                TU_CHECK(0, "generate %s", spec[sp]);
                return;
            }
            int64_t *m = c.kv_slot_mapping;
            const int64_t s1 = m[B(&c, 1)], s2 = m[B(&c, 2)];
            if (dup) {
                m[B(&c, 6)] = s1;
                m[B(&c, 5)] = s2;
            }
            char want[160];
            snprintf(want, sizeof want, "kv_slot_mapping[boundary_token_indices[%d]] = %lld is also the slot of output %d",
                     s1 < s2 ? 6 : 5, (long long)(s1 < s2 ? s1 : s2), s1 < s2 ? 1 : 2);
            const kvc_status st = kvc_validate(&c.args);
            const int ok = dup ? st == KVC_ERROR_DUPLICATE_SLOT && strstr(kvc_last_error_message(), want) : st == KVC_OK;
            TU_CHECK(ok, "%s, %s: %s '%s'%s%s", spec[sp], dup ? "two repeats" : "no repeat", kvc_status_string(st),
                     kvc_last_error_message(), dup ? ", want " : "", dup ? want : "");
            if (ok) printf("ok   duplicate slots, %s, %s\n", sp ? "sparse" : "dense", dup ? "two repeats" : "none");
            kvc_case_free(&c);
        }
}

int main(void) {
    memset(&g_case, 0, sizeof g_case);
    expect("state_cache NULL", m_null_state, KVC_ERROR_NULL_POINTER, "state_cache = NULL");
    expect("kv_slot_mapping NULL", m_null_slots, KVC_ERROR_NULL_POINTER, "kv_slot_mapping = NULL");
    expect("state width vs overlap", m_width, KVC_ERROR_BAD_SHAPE, "state_width = 2048 != 1024");
    expect("compress_ratio 0", m_c0, KVC_ERROR_BAD_PARAMETER, "compress_ratio = 0 < 1");
    expect("block_size 0", m_bs0, KVC_ERROR_BAD_PARAMETER, "block_size = 0 < 1");
    expect("kv_block_size 0", m_S0, KVC_ERROR_BAD_PARAMETER, "kv_block_size = 0 < 1");
    expect("page_stride too small", m_page, KVC_ERROR_BAD_SHAPE, "page_stride = 1167 < 584 * kv_block_size = 1168");
    expect("nope_format", m_fmt, KVC_ERROR_BAD_PARAMETER, "nope_format = 7");
    expect("overlap", m_ovl, KVC_ERROR_BAD_PARAMETER, "overlap = 3");
    expect("cos_sin_layout", m_cs, KVC_ERROR_BAD_PARAMETER, "cos_sin_layout = 9");
    expect("eps NaN", m_eps, KVC_ERROR_BAD_PARAMETER, "rms_norm_eps");
    expect("eps negative", m_eps_neg, KVC_ERROR_BAD_PARAMETER, "rms_norm_eps = -1");
    expect("num_blocks negative", m_neg_blocks, KVC_ERROR_BAD_SHAPE, "num_blocks = -1 < 0");
    expect("state_stride_token < width", m_tok_stride, KVC_ERROR_BAD_SHAPE, "state_stride_token = 1000 < state_width");
    expect("cos_sin_stride < 64", m_cs_stride, KVC_ERROR_BAD_SHAPE, "cos_sin_stride = 32 < 64");
    expect("extent overflow", m_overflow, KVC_ERROR_BAD_SHAPE, "overflow");
    expect("positions misaligned", m_mis_pos, KVC_ERROR_BAD_SHAPE, "positions at ");
    expect("token_to_req misaligned", m_mis_t2r, KVC_ERROR_BAD_SHAPE, "token_to_req at ");
    expect("state_cache misaligned", m_mis_state, KVC_ERROR_BAD_SHAPE, "not aligned to its 4-byte elements");
    expect("rms_norm_weight misaligned", m_mis_w, KVC_ERROR_BAD_SHAPE, "not aligned to its 2-byte elements");
    expect("boundary index -1", m_b_neg, KVC_ERROR_INDEX_OUT_OF_RANGE, "boundary_token_indices[5] = -1 outside [0, num_tokens = 512)");
    expect("boundary index = num_tokens", m_b_big, KVC_ERROR_INDEX_OUT_OF_RANGE, "boundary_token_indices[5] = 512");
    expect("request = num_reqs", m_req, KVC_ERROR_INDEX_OUT_OF_RANGE, "token_to_req[boundary_token_indices[3]] = 2 outside [0, num_reqs = 2)");
    expect("request negative", m_req_neg, KVC_ERROR_INDEX_OUT_OF_RANGE, "token_to_req[boundary_token_indices[3]] = -1");
    expect("window before position 0", m_pos, KVC_ERROR_INDEX_OUT_OF_RANGE, "positions[boundary_token_indices[2]] = 3 < compress_ratio - 1 = 63");
    expect("logical block >= blocks_per_req", m_logical, KVC_ERROR_INDEX_OUT_OF_RANGE, ">= blocks_per_req = 20");
    expect("physical block = num_blocks", m_phys, KVC_ERROR_INDEX_OUT_OF_RANGE, "][9] = 64 outside [0, num_blocks = 64)");
    expect("physical block negative", m_phys_neg, KVC_ERROR_INDEX_OUT_OF_RANGE, "][2] = -3 outside");
    expect("cos/sin row >= max_pos", m_maxpos, KVC_ERROR_INDEX_OUT_OF_RANGE, ">= max_pos = 150");
    expect("slot past last page", m_slot, KVC_ERROR_INDEX_OUT_OF_RANGE, "kv_slot_mapping[boundary_token_indices[4]] = 8 >= num_pages * kv_block_size = 8");
    expect("two outputs, one slot", m_dup, KVC_ERROR_DUPLICATE_SLOT, "is also the slot of output");
    test_duplicate_order();
    expect("head_dim 256", m_hd, KVC_ERROR_BAD_PARAMETER, "head_dim = 256 is not 128 or 512");
    expect("INT8 slots at head width 128", m_hd128_int8, KVC_ERROR_BAD_PARAMETER,
           "nope_format = KVC_NOPE_INT8 is not defined at head_dim = 128");
    expect("INDEXER_FP8 at head width 512", m_ifp8_512, KVC_ERROR_BAD_PARAMETER,
           "nope_format = KVC_INDEXER_FP8 is not defined at head_dim = 512");
    expect("rotation at head width 512", m_rot_512, KVC_ERROR_BAD_PARAMETER,
           "rotate = KVC_ROTATE_HADAMARD is not defined at head_dim = 512");
    expect("rotate 5", m_rot_bad, KVC_ERROR_BAD_PARAMETER, "rotate = 5 is not a kvc_rotation");
    expect("state_dtype 3", m_dtype_bad, KVC_ERROR_BAD_PARAMETER, "state_dtype = 3 is not a kvc_state_dtype");
    expect("head width 128, 1024-wide rows", m_idx_wide, KVC_ERROR_BAD_SHAPE, "state_width = 1024 != 256 (head_dim 128");
    expect("MXFP4 page_stride too small", m_idx_page, KVC_ERROR_BAD_SHAPE, "page_stride = 135 < 68 * kv_block_size = 136");
    expect("score_bias inside kv_cache", m_bias_alias, KVC_ERROR_ALIASING, "kv_cache overlaps score_bias");
    expect("score_bias rows too narrow", m_bias_stride, KVC_ERROR_BAD_SHAPE, "score_bias_stride = 100 < state_width / 2 = 512");
    expect("score_bias stride negative", m_bias_neg, KVC_ERROR_BAD_SHAPE, "score_bias_stride = -512 < 0");
    expect("score_bias misaligned", m_bias_mis, KVC_ERROR_BAD_SHAPE, "score_bias at ");
    expect("bf16 state misaligned", m_bf16_mis, KVC_ERROR_BAD_SHAPE, "not aligned to its 2-byte elements");

    /* a padded output is skipped even when its other indices are garbage */
    {
        kvc_case_params p;
        memset(&p, 0, sizeof p);
        p.num_reqs = 1, p.total_tokens = 256, p.compress_ratio = 64, p.block_size = 8, p.seed = 3;
        kvc_case c;
        TU_CHECK(kvc_case_generate(&p, 1, &c) == KVC_OK, "generate");
        c.kv_slot_mapping[c.boundary_token_indices[1]] = -1;
        c.positions[c.boundary_token_indices[1]] = -100;
        kvc_report rep;
        TU_CHECK(kvc_compress(&c.args, NULL, &rep) == KVC_OK, "padded output with garbage position: %s",
                 kvc_last_error_message());
        TU_CHECK(rep.outputs_padding == 1 && rep.outputs_written == 3, "report %lld padding %lld written",
                 (long long)rep.outputs_padding, (long long)rep.outputs_written);
        kvc_case_free(&c);
    }
    /* status strings and empty calls */
    TU_CHECK(!strcmp(kvc_status_string(KVC_ERROR_DUPLICATE_SLOT), "KVC_ERROR_DUPLICATE_SLOT"), "status string");
    TU_CHECK(!strcmp(kvc_status_string((kvc_status)99), "unknown kvc_status"), "unknown status string");
    TU_CHECK(kvc_compress(NULL, NULL, NULL) == KVC_ERROR_NULL_POINTER, "NULL args");
    {
        kvc_args a;
        kvc_args_init(&a);
        a.compress_ratio = 4;
        a.block_size = 8;
        TU_CHECK(kvc_compress(&a, NULL, NULL) == KVC_OK, "zero outputs is a no-op: %s", kvc_last_error_message());
        TU_CHECK(kvc_last_error_message()[0] == '\0', "message cleared after success");
        kvc_exec ex;
        kvc_exec_init(&ex);
        ex.backend = (kvc_backend)42;
        TU_CHECK(kvc_compress(&a, &ex, NULL) == KVC_ERROR_BAD_PARAMETER, "unknown backend refused");
    }
    TU_CHECK(kvc_version_number() == KVC_VERSION_NUMBER, "version");
    /* kvc_compress_many: n out of range, a set's shape error named with its
     * index, one set writing where another reads or writes; nothing written */
    {
        kvc_case c0, c1;
        const int ok = tu_small_case(&c0, 31) && tu_small_case(&c1, 32);
        TU_CHECK(ok, "generate");
        kvc_args sets[KVC_MANY_MAX + 1];
        for (int i = 0; ok && i <= KVC_MANY_MAX; i++) sets[i] = i % 2 ? c1.args : c0.args;
        uint8_t *b0 = ok ? tu_dup(c0.kv_cache, c0.kv_cache_bytes) : NULL;
        uint8_t *b1 = ok ? tu_dup(c1.kv_cache, c1.kv_cache_bytes) : NULL;
        struct {
            const char *what;
            int n, set;
            kvc_status want;
            const char *fragment;
        } cases[] = {{"n = -1", -1, -1, KVC_ERROR_BAD_PARAMETER, "n = -1 outside [0, 8]"},
                     {"n = KVC_MANY_MAX + 1", KVC_MANY_MAX + 1, -1, KVC_ERROR_BAD_PARAMETER, "n = 9 outside [0, 8]"},
                     {"a set's shape", 2, 1, KVC_ERROR_BAD_SHAPE, "args[1]: state_width = 2048"},
                     {"set 1 writes set 0's state", 2, 2, KVC_ERROR_ALIASING,
                      "args[1].kv_cache overlaps args[0].state_cache"},
                     {"two sets, one kv_cache", 2, 3, KVC_ERROR_ALIASING, "args[0].kv_cache overlaps args[1].kv_cache"},
                     {"a set's slot", 2, 4, KVC_ERROR_INDEX_OUT_OF_RANGE, "args[1]: "}};
        for (int k = 0; ok && k < (int)(sizeof cases / sizeof cases[0]); k++) {
            kvc_args t[2] = {c0.args, c1.args};
            if (cases[k].set == 1) t[1].state_width = 2048;
            if (cases[k].set == 2) t[1].kv_cache = (uint8_t *)(uintptr_t)c0.state_cache;
            if (cases[k].set == 3) t[1].kv_cache = c0.kv_cache;
            if (cases[k].set == 4)
                c1.kv_slot_mapping[c1.boundary_token_indices[3]] = c1.args.num_pages * c1.args.kv_block_size;
            const kvc_status st = kvc_compress_many(cases[k].n == 2 ? t : sets, cases[k].n, NULL, NULL);
            const char *msg = kvc_last_error_message();
            TU_CHECK(st == cases[k].want && strstr(msg, cases[k].fragment), "many, %s: %s '%s'", cases[k].what,
                     kvc_status_string(st), msg);
            TU_CHECK(!memcmp(b0, c0.kv_cache, c0.kv_cache_bytes) && !memcmp(b1, c1.kv_cache, c1.kv_cache_bytes),
                     "many, %s: a kv_cache was written", cases[k].what);
            printf("ok   many: %-28s %s\n", cases[k].what, msg);
        }
        TU_CHECK(kvc_compress_many(NULL, 0, NULL, NULL) == KVC_OK, "n = 0 is a no-op");
        TU_CHECK(kvc_compress_many(NULL, 1, NULL, NULL) == KVC_ERROR_NULL_POINTER, "many: NULL args");
        free(b0);
        free(b1);
        if (ok) {
            kvc_case_free(&c0);
            kvc_case_free(&c1);
        }
    }
    /* value shifts past binary32's exponents (the dsv4 golden cases use
     * -200): every value times 2^shift, rounded once -- here to +-0 */
    {
        kvc_case_params p;
        char msg[128];
        kvc_case c0, c1;
        int ok = kvc_kit_parse_spec("reqs=1,tokens=64,C=64,block=8", &p, msg, sizeof msg) == 0 &&
                 kvc_case_generate(&p, 1, &c0) == KVC_OK;
        p.num_value_shifts = 2;
        p.value_shifts[0].lo = 0, p.value_shifts[0].hi = 32, p.value_shifts[0].shift = -200;
        p.value_shifts[1].lo = 32, p.value_shifts[1].hi = 33, p.value_shifts[1].shift = -24;
        ok = ok && kvc_case_generate(&p, 1, &c1) == KVC_OK;
        TU_CHECK(ok, "value shift -200: %s", kvc_last_error_message());
        int bad = !ok;
        for (size_t i = 0; ok && i < c0.state_elems && !bad; i++) {
            const size_t col = i % 1024;
            const float want = col < 32 ? copysignf(0.0f, c0.state_cache[i]) : col == 32 ? c0.state_cache[i] * 0x1p-24f
                                                                                           : c0.state_cache[i];
            bad = memcmp(&want, &c1.state_cache[i], 4) != 0;
        }
        TU_CHECK(!bad, "value shifts -200 and -24: the shifted values are +-0 and exact products");
        if (ok) {
            kvc_case_free(&c0);
            kvc_case_free(&c1);
        }
    }
    /* a decode-shaped case (first_position): 64 requests x 1 output at
     * position 32767, the state holding only the blocks its windows read */
    {
        kvc_case_params p;
        char msg[128];
        kvc_case c;
        const int ok = kvc_kit_parse_spec("reqs=64,tokens=256,C=4,block=4,overlap=1,pos0=32764,layout=shuffle", &p,
                                          msg, sizeof msg) == 0 &&
                       kvc_case_generate(&p, 1, &c) == KVC_OK;
        TU_CHECK(ok, "decode case: %s", kvc_last_error_message());
        if (ok) {
            const kvc_args *a = &c.args;
            int bad = a->num_outputs != 64 || a->blocks_per_req != 8192 || a->num_blocks != 64 * 3 ||
                      a->max_pos != 32768 || kvc_validate(a) != KVC_OK;
            for (int64_t t = 0; t < a->num_tokens && !bad; t++) bad = a->positions[t] != 32764 + t % 4;
            for (int64_t i = 0; i < a->num_reqs * a->blocks_per_req && !bad; i++)
                bad = a->block_table[i] < 0 || a->block_table[i] >= a->num_blocks;
            for (int64_t o = 0; o < a->num_outputs && !bad; o++) bad = a->positions[a->boundary_token_indices[o]] != 32767;
            TU_CHECK(!bad, "decode case: %lld outputs, %lld blocks of %lld table entries a request",
                     (long long)a->num_outputs, (long long)a->num_blocks, (long long)a->blocks_per_req);
            kvc_case_free(&c);
        }
    }
    /* kvc_case_generate refuses absurd parameters at once, before any loop or
     * allocation (issue 49: 2^40 tokens looped over every token; block 2^62,
     * kv_block 2^60 and score_shift 2^31 - 1 overflowed signed integers) */
    {
        static const struct { int64_t reqs, tokens, C, block, kv_block; int shift; const char *frag; } bad[] = {
            {1, INT64_C(1) << 40, 128, 8, 64, 0, "block"},
            {1, 4096, 128, INT64_C(1) << 62, 64, 0, ""},
            {1, 4096, 128, 8, INT64_C(1) << 60, 0, "kv_block_size"},
            {1, 4096, 128, 8, 64, 2147483647, "score_shift"},
            {1, 4096, 128, 8, 64, -2147483647 - 1, "score_shift"},
            {0, 4096, 128, 8, 64, 0, "num_reqs"},
            {3, 4096, 128, 8, 64, 0, "multiple"},
            {1, INT64_MAX, 1, 1, 1, 0, ""},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            kvc_case_params p;
            memset(&p, 0, sizeof p);
            p.num_reqs = bad[i].reqs;
            p.total_tokens = bad[i].tokens;
            p.compress_ratio = bad[i].C;
            p.block_size = bad[i].block;
            p.kv_block_size = bad[i].kv_block;
            p.score_shift = bad[i].shift;
            kvc_case c;
            uint64_t bytes = 1;
            const kvc_status g = kvc_case_generate(&p, 1, &c);
            const kvc_status h = kvc_case_host_bytes(&p, &bytes);
            TU_CHECK(g == KVC_ERROR_BAD_PARAMETER && h == g && bytes == 0 && c.state_cache == NULL &&
                         strstr(kvc_last_error_message(), bad[i].frag),
                     "absurd case %zu: %s / %s, '%s'", i, kvc_status_string(g), kvc_status_string(h),
                     kvc_last_error_message());
        }
        kvc_case_params p;
        char msg[128];
        uint64_t bytes = 0;
        TU_CHECK(kvc_kit_parse_spec("reqs=2,tokens=2048,C=128,block=8", &p, msg, sizeof msg) == 0 &&
                     kvc_case_host_bytes(&p, &bytes) == KVC_OK && bytes >= 2048ull * 4096,
                 "host bytes of a case: %llu", (unsigned long long)bytes);
    }
    kvc_case_free(&g_case);
    free(g_before);
    printf("%s (%d failures)\n", tu_failures ? "FAILED" : "passed", tu_failures);
    return tu_failures ? 1 : 0;
}
