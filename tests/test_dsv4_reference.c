/*
 * test_dsv4_reference -- the contract's sections 9 and 10 computed plainly
 * (window by window, dimension by dimension, the tree of section 3 by
 * recursion) with the canonical pieces of kvc_canon.h, against the 12
 * golden cases of tests/data/golden/dsv4 (an independent emulation): head
 * width 128 with the INDEXER_FP8 and INDEXER_MXFP4 slots, with and without
 * the Walsh-Hadamard rotation, score_bias, a bf16 state.  It pins the
 * arithmetic the backends will share before any backend computes it; the
 * kvc-rand inputs are checked against the manifest's checksums first.
 * Usage: test_dsv4_reference GOLDEN_DIR; exit 0 pass, 1 fail.
 */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_canon.h"
#include "kvc_kit.h"
#include "kvcompress_rand.h"
#include "ref_naive.h"
#include "test_util.h"

typedef struct {
    char name[160], format[32], layout[16], cos_sin[16], state_dtype[8], vshift[128], poison[512];
    long long head_dim, overlap, kv_block_size, rotate, score_bias, reqs, tokens, C, block, seed, score_shift,
        outputs, slot_bytes;
    unsigned long long cs[4];
} dsv4_case;

static void parse_line(char *line, dsv4_case *k) {
    memset(k, 0, sizeof *k);
    char *save = NULL;
    for (char *f = strtok_r(line, "\t", &save); f; f = strtok_r(NULL, "\t", &save)) {
        char *eq = strchr(f, '=');
        if (!eq) continue;
        *eq = 0;
        const char *key = f, *v = eq + 1;
        struct { const char *key; long long *dst; } nums[] = {
            {"head_dim", &k->head_dim}, {"overlap", &k->overlap}, {"kv_block_size", &k->kv_block_size},
            {"rotate", &k->rotate},     {"score_bias", &k->score_bias}, {"reqs", &k->reqs},
            {"tokens", &k->tokens},     {"C", &k->C},                   {"block", &k->block},
            {"seed", &k->seed},         {"score_shift", &k->score_shift}, {"outputs", &k->outputs},
            {"slot_bytes", &k->slot_bytes}};
        for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
            if (!strcmp(key, nums[i].key)) *nums[i].dst = atoll(v);
        struct { const char *key; char *dst; size_t n; } strs[] = {
            {"name", k->name, sizeof k->name},         {"format", k->format, sizeof k->format},
            {"layout", k->layout, sizeof k->layout},   {"cos_sin", k->cos_sin, sizeof k->cos_sin},
            {"state_dtype", k->state_dtype, sizeof k->state_dtype}, {"vshift", k->vshift, sizeof k->vshift},
            {"poison", k->poison, sizeof k->poison}};
        for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
            if (!strcmp(key, strs[i].key)) snprintf(strs[i].dst, strs[i].n, "%s", v);
        const char *cs_keys[4] = {"cs_state", "cs_table", "cs_weight", "cs_cos_sin"};
        for (int i = 0; i < 4; i++)
            if (!strcmp(key, cs_keys[i])) k->cs[i] = strtoull(v, NULL, 16);
    }
}

/* The case's parameters (value shifts and poison from the index's lists). */
static void params_of(const dsv4_case *k, kvc_case_params *p, kvc_case_poison *poison) {
    memset(p, 0, sizeof *p);
    p->num_reqs = k->reqs;
    p->total_tokens = k->tokens;
    p->compress_ratio = k->C;
    p->block_size = k->block;
    p->shuffle = !strcmp(k->layout, "shuffle");
    p->seed = (uint64_t)k->seed;
    p->score_shift = (int)k->score_shift;
    p->kv_block_size = k->kv_block_size;
    p->overlap = k->overlap ? KVC_OVERLAP_ON : KVC_OVERLAP_OFF;
    p->cos_sin_layout = !strcmp(k->cos_sin, "interleaved") ? KVC_COS_SIN_INTERLEAVED : KVC_COS_SIN_SPLIT;
    p->head_dim = k->head_dim;
    if (strcmp(k->vshift, "-")) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", k->vshift);
        char *save = NULL;
        for (char *it = strtok_r(buf, ",", &save); it && p->num_value_shifts < KVC_CASE_MAX_SHIFTS;
             it = strtok_r(NULL, ",", &save)) {
            long long lo, hi;
            int sh;
            if (sscanf(it, "%lld:%lld:%d", &lo, &hi, &sh) == 3) {
                p->value_shifts[p->num_value_shifts].lo = lo;
                p->value_shifts[p->num_value_shifts].hi = hi;
                p->value_shifts[p->num_value_shifts++].shift = sh;
            }
        }
    }
    if (strcmp(k->poison, "-")) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", k->poison);
        char *save = NULL;
        for (char *it = strtok_r(buf, ",", &save); it && p->num_poison < 16; it = strtok_r(NULL, ",", &save)) {
            long long r, pos, col;
            char what[16];
            if (sscanf(it, "%lld:%lld:%lld:%15s", &r, &pos, &col, what) == 4) {
                kvc_case_poison *q = &poison[p->num_poison++];
                q->req = r, q->pos = pos, q->col = col;
                q->value = !strcmp(what, "nan") ? NAN : !strcmp(what, "inf") ? INFINITY : -INFINITY;
            }
        }
        p->poison = poison;
    }
}

/* One state element as the call reads it: binary32, or bf16 widened. */
static float state_at(const float *st, size_t i, int bf16) { return bf16 ? kvc_bf16_round(st[i]) : st[i]; }

/* The slot row of output o (slot o): the section 3 reduction per dimension
 * (score bias added to every unmasked row's score), then the finaliser. */
static void output_row(const kvc_case *c, const dsv4_case *k, const float *bias, int64_t o, uint8_t *row) {
    const kvc_args *a = &c->args;
    const int64_t D = k->head_dim, C = a->compress_ratio, W = a->state_width, ovl = k->overlap;
    const int64_t rows = ovl ? 2 * C : C, b = a->boundary_token_indices[o], r = a->token_to_req[b];
    const int64_t p = a->positions[b], bf16 = !strcmp(k->state_dtype, "bf16");
    float *s = malloc(sizeof(float) * (size_t)rows), *v = malloc(sizeof(float) * (size_t)rows);
    float cw[512], scratch[512];
    for (int64_t d = 0; d < D; d++) {
        for (int64_t i = 0; i < rows; i++) {
            const int second = ovl && i >= C;
            const int64_t pos = ovl ? (second ? p - C + 1 + (i - C) : p - 2 * C + 1 + i) : p - C + 1 + i;
            if (pos < 0) {
                s[i] = -INFINITY;
                v[i] = 0.0f;
                continue;
            }
            const int64_t blk = a->block_table[r * a->blocks_per_req + pos / a->block_size];
            const size_t row0 = (size_t)((blk * a->block_size + pos % a->block_size) * W);
            const int64_t vk = ovl ? (second ? D + d : d) : d, sk = vk; /* index in the value / score half */
            v[i] = state_at(c->state_cache, row0 + (size_t)vk, (int)bf16);
            s[i] = state_at(c->state_cache, row0 + (size_t)(W / 2 + sk), (int)bf16);
            if (bias) s[i] = s[i] + bias[(pos % C) * (W / 2) + sk];
        }
        const ref_state t = ref_tree(s, v, 0, (rows + 7) / 8, rows);
        cw[d] = t.n / t.d;
    }
    free(s);
    free(v);
    const float *cs = a->cos_sin_cache + ((p / C) * C) * 64; /* the row of the window's first position, as section 3 */
    const int il = k->cos_sin[0] == 'i';
    if (D == 512) {
        kvc_finalize_slot(cw, scratch, a->rms_norm_weight, cs, il, a->rms_norm_eps,
                          !strcmp(k->format, "fp8"), row, row + 576);
    } else {
        const int fmt = !strcmp(k->format, "indexer_fp8") ? KVC_FMT_IFP8 : KVC_FMT_MXFP4;
        const int payload = fmt == KVC_FMT_IFP8 ? 128 : 64;
        kvc_finalize_indexer(cw, scratch, a->rms_norm_weight, cs, il, a->rms_norm_eps, (int)k->rotate, fmt, row,
                             row + payload);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_dsv4_reference GOLDEN_DIR\n");
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/dsv4.tsv", argv[1]);
    size_t len = 0;
    char *text = (char *)kvc_kit_read_file(path, &len);
    if (!text) {
        printf("FAIL cannot read %s\n", path);
        return 1;
    }
    text[len] = 0;
    int failures = 0, cases = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        dsv4_case k;
        parse_line(line, &k);
        cases++;
        kvc_case_params prm;
        kvc_case_poison poison[16];
        params_of(&k, &prm, poison);
        kvc_case c;
        if (kvc_case_generate(&prm, 0, &c) != KVC_OK) {
            printf("FAIL %s: generate: %s\n", k.name, kvc_last_error_message());
            failures++;
            continue;
        }
        const kvc_args *a = &c.args;
        const int bf16 = !strcmp(k.state_dtype, "bf16");
        uint64_t cs_state;
        if (bf16) {
            uint16_t *h = malloc(c.state_elems * 2);
            for (size_t i = 0; i < c.state_elems; i++) h[i] = kvc_bf16_bits(c.state_cache[i]);
            cs_state = kvc_rand_checksum(h, c.state_elems * 2);
            free(h);
        } else {
            cs_state = kvc_rand_checksum(c.state_cache, c.state_elems * 4);
        }
        const uint64_t got[4] = {cs_state,
                                 kvc_rand_checksum(c.block_table, (size_t)(a->num_reqs * a->blocks_per_req) * 4),
                                 kvc_rand_checksum(c.rms_norm_weight, (size_t)k.head_dim * 2),
                                 kvc_rand_checksum(c.cos_sin_cache, (size_t)a->max_pos * 64 * 4)};
        int bad = a->num_outputs != k.outputs;
        for (int i = 0; i < 4 && !bad; i++)
            if (got[i] != k.cs[i]) {
                printf("FAIL %s: input %d checksum %016llx, manifest %016llx\n", k.name, i, (unsigned long long)got[i],
                       (unsigned long long)k.cs[i]);
                bad = 1;
            }
        float *bias = NULL;
        if (!bad && k.score_bias) {
            const int64_t n = k.C * (a->state_width / 2);
            bias = malloc(sizeof(float) * (size_t)n);
            for (int64_t i = 0; i < n; i++) bias[i] = kvc_rand_f32((uint64_t)k.seed, 4, (uint64_t)i) * 0.5f;
        }
        snprintf(path, sizeof path, "%s/dsv4/%s.canon.bin", argv[1], k.name);
        size_t n = 0;
        uint8_t *canon = bad ? NULL : kvc_kit_read_file(path, &n);
        if (!bad && (!canon || n != (size_t)(k.outputs * k.slot_bytes))) {
            printf("FAIL %s: %s: %zu bytes, expected %lld\n", k.name, path, n, k.outputs * k.slot_bytes);
            bad = 1;
        }
        uint8_t row[584];
        for (int64_t o = 0; !bad && o < a->num_outputs; o++) {
            output_row(&c, &k, bias, o, row);
            if (memcmp(row, canon + o * k.slot_bytes, (size_t)k.slot_bytes) != 0) {
                int b = 0;
                while (row[b] == canon[o * k.slot_bytes + b]) b++;
                printf("FAIL %s: output %lld byte %d is 0x%02x, golden 0x%02x\n", k.name, (long long)o, b, row[b],
                       canon[o * k.slot_bytes + b]);
                bad = 1;
            }
        }
        if (!bad) printf("ok   %-60s %lld outputs\n", k.name, (long long)a->num_outputs);
        failures += bad;
        free(canon);
        free(bias);
        kvc_case_free(&c);
    }
    free(text);
    printf("%d cases, %d failed\n", cases, failures);
    return failures || cases == 0 ? 1 : 0;
}
