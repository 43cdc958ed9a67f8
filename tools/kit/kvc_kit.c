/* kvc_kit.c -- see kvc_kit.h. */
#define _POSIX_C_SOURCE 200809L
#include "kvc_kit.h"
#include "kvc_check.h"

#include <math.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint8_t *kvc_kit_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    if (fseek(f, 0, SEEK_END) != 0) { fclose(f); return NULL; }
    long n = ftell(f);
    if (n < 0) { fclose(f); return NULL; }
    rewind(f);
    uint8_t *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf && len) *len = (size_t)n;
    return buf;
}

static float parse_special(const char *s) {
    if (strcmp(s, "nan") == 0) return NAN;
    if (strcmp(s, "inf") == 0) return INFINITY;
    if (strcmp(s, "-inf") == 0) return -INFINITY;
    return strtof(s, NULL);
}

static const char *const kFormats[] = {"int8", "fp8", "indexer_fp8", "indexer_mxfp4"};

int kvc_kit_parse_format(const char *s, kvc_nope_format *f) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, kFormats[i])) {
            *f = (kvc_nope_format)i;
            return 0;
        }
    return -1;
}

const char *kvc_kit_format_name(kvc_nope_format f) { return (unsigned)f < 4 ? kFormats[f] : "?"; }

/* Apply one key=value field to a golden case. @return 0 or -1. */
static int apply_field(kvc_golden_case *g, const char *key, char *val) {
    kvc_case_params *p = &g->params;
    if (!strcmp(key, "name")) snprintf(g->name, sizeof g->name, "%s", val);
    else if (!strcmp(key, "dir")) snprintf(g->dir, sizeof g->dir, "%s", val);
    else if (!strcmp(key, "format")) {
        if (kvc_kit_parse_format(val, &p->nope_format) != 0) return -1;
    } else if (!strcmp(key, "head_dim")) p->head_dim = atoll(val);
    else if (!strcmp(key, "rotate")) p->rotate = atoi(val) ? KVC_ROTATE_HADAMARD : KVC_ROTATE_OFF;
    else if (!strcmp(key, "score_bias")) p->score_bias = atoi(val) != 0;
    else if (!strcmp(key, "state_dtype")) p->state_dtype = strcmp(val, "bf16") == 0 ? KVC_STATE_BFLOAT16 : KVC_STATE_FLOAT32;
    else if (!strcmp(key, "overlap")) p->overlap = atoi(val) ? KVC_OVERLAP_ON : KVC_OVERLAP_OFF;
    else if (!strcmp(key, "cos_sin")) p->cos_sin_layout = strcmp(val, "interleaved") == 0 ? KVC_COS_SIN_INTERLEAVED : KVC_COS_SIN_SPLIT;
    else if (!strcmp(key, "kv_block_size")) p->kv_block_size = atoll(val);
    else if (!strcmp(key, "reqs")) p->num_reqs = atoll(val);
    else if (!strcmp(key, "tokens")) p->total_tokens = atoll(val);
    else if (!strcmp(key, "C")) p->compress_ratio = atoll(val);
    else if (!strcmp(key, "block")) p->block_size = atoll(val);
    else if (!strcmp(key, "layout")) p->shuffle = strcmp(val, "shuffle") == 0;
    else if (!strcmp(key, "seed")) p->seed = strtoull(val, NULL, 10);
    else if (!strcmp(key, "score_shift")) p->score_shift = atoi(val);
    else if (!strcmp(key, "outputs")) g->outputs = atoll(val);
    else if (!strcmp(key, "pages")) g->pages = atoll(val);
    else if (!strcmp(key, "ref")) g->has_ref = atoi(val);
    else if (!strncmp(key, "cs_", 3)) {
        if (!strcmp(val, "-")) return 0;
        uint64_t v = strtoull(val, NULL, 16);
        g->has_checksums = 1;
        if (!strcmp(key, "cs_state")) g->cs_state = v;
        else if (!strcmp(key, "cs_table")) g->cs_table = v;
        else if (!strcmp(key, "cs_weight")) g->cs_weight = v;
        else if (!strcmp(key, "cs_cos_sin")) g->cs_cos_sin = v;
    } else if (!strcmp(key, "vshift")) {
        if (!strcmp(val, "-")) return 0;
        for (char *it = strtok(val, ","); it; it = strtok(NULL, ",")) {
            if (p->num_value_shifts >= KVC_CASE_MAX_SHIFTS) return -1;
            long long lo, hi;
            int sh;
            if (sscanf(it, "%lld:%lld:%d", &lo, &hi, &sh) != 3) return -1;
            p->value_shifts[p->num_value_shifts].lo = lo;
            p->value_shifts[p->num_value_shifts].hi = hi;
            p->value_shifts[p->num_value_shifts].shift = sh;
            p->num_value_shifts++;
        }
    } else if (!strcmp(key, "poison")) {
        if (!strcmp(val, "-")) return 0;
        for (char *it = strtok(val, ","); it; it = strtok(NULL, ",")) {
            if (p->num_poison >= KVC_KIT_MAX_POISON) return -1;
            long long r, pos, col;
            char what[16];
            if (sscanf(it, "%lld:%lld:%lld:%15s", &r, &pos, &col, what) != 4) return -1;
            kvc_case_poison *q = &g->poison[p->num_poison++];
            q->req = r;
            q->pos = pos;
            q->col = col;
            q->value = parse_special(what);
        }
    } else if (!strcmp(key, "nonfinite")) {
        if (!strcmp(val, "-")) return 0;
        for (char *it = strtok(val, ","); it; it = strtok(NULL, ",")) {
            if (g->num_nonfinite >= KVC_KIT_MAX_NONFINITE) return -1;
            g->nonfinite[g->num_nonfinite++] = atoll(it);
        }
    }
    return 0;
}

/* The cases of one index file appended to out[*n] (grown as needed); dir:
 * the directory of cases without a dir field (dsv4.tsv's).  @return 0, or
 * -1 (message on stderr). */
static int load_index_file(const char *path, const char *dir, kvc_golden_case **out, int *n, int *cap) {
    size_t len;
    char *text = (char *)kvc_kit_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", path);
        return -1;
    }
    text[len] = '\0';
    char *save_line = NULL;
    for (char *line = strtok_r(text, "\n", &save_line); line; line = strtok_r(NULL, "\n", &save_line)) {
        if (*n == *cap) {
            kvc_golden_case *grown = realloc(*out, sizeof **out * (size_t)(*cap *= 2));
            if (!grown) {
                free(text);
                return -1;
            }
            *out = grown;
        }
        kvc_golden_case *g = &(*out)[*n];
        memset(g, 0, sizeof *g);
        snprintf(g->dir, sizeof g->dir, "%s", dir);
        g->pages = -1; /* unknown unless the index says */
        char *save_field = NULL;
        for (char *f = strtok_r(line, "\t", &save_field); f; f = strtok_r(NULL, "\t", &save_field)) {
            char *eq = strchr(f, '=');
            if (!eq) continue;
            *eq = '\0';
            if (apply_field(g, f, eq + 1) != 0) {
                fprintf(stderr, "%s: bad field %s in case %d\n", path, f, *n);
                free(text);
                return -1;
            }
        }
        g->params.poison = g->poison;
        (*n)++;
    }
    free(text);
    return 0;
}

int kvc_kit_load_index(const char *golden_dir, kvc_golden_case **cases) {
    char path[4096];
    int cap = 64, n = 0;
    kvc_golden_case *out = calloc((size_t)cap, sizeof *out);
    snprintf(path, sizeof path, "%s/cases.tsv", golden_dir);
    int bad = !out || load_index_file(path, "main", &out, &n, &cap) != 0;
    /* sections 9 and 10 (golden/dsv4): their own index, where present */
    snprintf(path, sizeof path, "%s/dsv4.tsv", golden_dir);
    FILE *f = bad ? NULL : fopen(path, "rb");
    if (f) {
        fclose(f);
        bad = load_index_file(path, "dsv4", &out, &n, &cap) != 0;
    }
    if (bad) {
        free(out);
        return -1;
    }
    *cases = out;
    return n;
}

void kvc_kit_slot_row(const kvc_args *a, int64_t slot, uint8_t row[KVC_SLOT_BYTES]) {
    kvc_args r = *a;
    kvc_resolve_strides(&r);
    kvc_i64 payload, scales;
    kvc_slot_offsets(&r, slot, &payload, &scales); /* the library's own slot addressing */
    const int64_t pb = kvc_payload_bytes(r.nope_format);
    memcpy(row, a->kv_cache + payload, (size_t)pb);
    memcpy(row + pb, a->kv_cache + scales, (size_t)kvc_scale_bytes(r.nope_format));
}

void kvc_kit_output_rows(const kvc_args *a, const kvc_case *c, const uint8_t *kv, uint8_t *rows) {
    kvc_args t = *a;
    t.kv_cache = (uint8_t *)kv;
    const int64_t sb = kvc_slot_bytes(a->nope_format);
    for (int64_t o = 0; o < a->num_outputs; o++)
        kvc_kit_slot_row(&t, c->kv_slot_mapping[c->boundary_token_indices[o]], rows + o * sb);
}

int kvc_kit_case_with_cpu(const char *spec, kvc_case *c, uint8_t **cpu_rows, char *msg, size_t msglen) {
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    *cpu_rows = NULL;
    if (kvc_kit_parse_spec(spec, &p, msg, msglen) != 0) return -1;
    if (kvc_case_generate(&p, 0, c) != KVC_OK) {
        snprintf(msg, msglen, "generate: %s", kvc_last_error_message());
        return -1;
    }
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    if (kvc_compress(&c->args, &ex, NULL) != KVC_OK) {
        snprintf(msg, msglen, "CPU: %s", kvc_last_error_message());
        return -1;
    }
    *cpu_rows = calloc((size_t)c->args.num_outputs * KVC_SLOT_BYTES + 1, 1);
    if (!*cpu_rows) {
        snprintf(msg, msglen, "out of memory");
        return -1;
    }
    kvc_kit_output_rows(&c->args, c, c->kv_cache, *cpu_rows);
    return 0;
}

int kvc_kit_check_inputs(const kvc_golden_case *g, const kvc_case *c, char *msg, size_t msglen) {
    if (!g->has_checksums) return 0;
    const kvc_args *a = &c->args;
    struct { const char *name; uint64_t want, got; } cs[4] = {
        {"state_cache", g->cs_state,
         c->state_bf16 ? kvc_rand_checksum(c->state_bf16, c->state_elems * 2)
                       : kvc_rand_checksum(c->state_cache, c->state_elems * 4)},
        {"block_table", g->cs_table, kvc_rand_checksum(c->block_table, (size_t)(a->num_reqs * a->blocks_per_req) * 4)},
        {"rms_norm_weight", g->cs_weight, kvc_rand_checksum(c->rms_norm_weight, (size_t)a->head_dim * 2)},
        {"cos_sin_cache", g->cs_cos_sin, kvc_rand_checksum(c->cos_sin_cache, (size_t)a->max_pos * 64 * 4)},
    };
    for (int i = 0; i < 4; i++)
        if (cs[i].want != cs[i].got) {
            snprintf(msg, msglen, "%s checksum %016llx != manifest %016llx", cs[i].name,
                     (unsigned long long)cs[i].got, (unsigned long long)cs[i].want);
            return 1;
        }
    return 0;
}

static float bf16f(const uint8_t *p) {
    uint32_t u = ((uint32_t)p[0] | ((uint32_t)p[1] << 8)) << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int e4m3_ordinal(uint8_t c) { return (c & 0x80) ? -(int)(c & 0x7F) : (int)c; }

/* The sign-magnitude ordinal of an e2m1 nibble (SPEC 9's conformance). */
static int e2m1_ordinal(unsigned nib) { return (nib & 8u) ? -(int)(nib & 7u) : (int)(nib & 7u); }

/* SPEC 9's conformance of head-width-128 rows (132 or 68 bytes): scales
 * equal; every value within one code step; at most 2 + values/20000 (FP8)
 * or 2 + values/5000 (MXFP4) of them differ. */
static int conforms_indexer(const uint8_t *ours, const uint8_t *ref, int64_t n, int fmt, int64_t *differ, char *msg,
                            size_t msglen) {
    const int mx = fmt == KVC_INDEXER_MXFP4, pb = mx ? 64 : 128, sb = pb + 4;
    int64_t diff = 0;
    for (int64_t o = 0; o < n; o++) {
        const uint8_t *x = ours + o * sb, *y = ref + o * sb;
        if (memcmp(x + pb, y + pb, 4) != 0) {
            snprintf(msg, msglen, "output %lld: scale bytes %02x%02x%02x%02x, reference %02x%02x%02x%02x", (long long)o,
                     x[pb], x[pb + 1], x[pb + 2], x[pb + 3], y[pb], y[pb + 1], y[pb + 2], y[pb + 3]);
            return 1;
        }
        for (int d = 0; d < 128; d++) {
            const int a = mx ? e2m1_ordinal((x[d / 2] >> (4 * (d & 1))) & 15u) : e4m3_ordinal(x[d]);
            const int b = mx ? e2m1_ordinal((y[d / 2] >> (4 * (d & 1))) & 15u) : e4m3_ordinal(y[d]);
            if (a == b) continue;
            diff++;
            if (abs(a - b) > 1) {
                snprintf(msg, msglen, "output %lld dim %d: code %d vs reference %d (more than one step)", (long long)o,
                         d, a, b);
                return 1;
            }
        }
    }
    if (differ) *differ = diff;
    const int64_t allowed = 2 + n * 128 / (mx ? 5000 : 20000);
    if (diff > allowed) {
        snprintf(msg, msglen, "%lld values differ, more than 2 + n/%d = %lld", (long long)diff, mx ? 5000 : 20000,
                 (long long)allowed);
        return 1;
    }
    return 0;
}

int kvc_kit_conforms(const uint8_t *ours, const uint8_t *ref, int64_t n, int fmt, int64_t *differ, char *msg,
                     size_t msglen) {
    if (fmt >= KVC_INDEXER_FP8) return conforms_indexer(ours, ref, n, fmt, differ, msg, msglen);
    const int fp8 = fmt == KVC_NOPE_FP8_E4M3;
    int64_t diff = 0;
    for (int64_t o = 0; o < n; o++) {
        const uint8_t *x = ours + o * KVC_SLOT_BYTES, *y = ref + o * KVC_SLOT_BYTES;
        for (int g = 0; g < 7; g++)
            if (x[576 + g] != y[576 + g]) {
                snprintf(msg, msglen, "output %lld: scale byte %d is %u, reference %u", (long long)o, g, x[576 + g],
                         y[576 + g]);
                return 1;
            }
        if (x[583] != 0) {
            snprintf(msg, msglen, "output %lld: pad byte is %u", (long long)o, x[583]);
            return 1;
        }
        for (int d = 0; d < 448; d++) {
            int a = fp8 ? e4m3_ordinal(x[d]) : (int)(int8_t)x[d];
            int b = fp8 ? e4m3_ordinal(y[d]) : (int)(int8_t)y[d];
            if (a != b) {
                diff++;
                if (abs(a - b) > 1) {
                    snprintf(msg, msglen, "output %lld dim %d: NOPE %d vs reference %d (more than one step)",
                             (long long)o, d, a, b);
                    return 1;
                }
            }
        }
        for (int j = 0; j < 64; j++) {
            float a = bf16f(x + 448 + 2 * j), b = bf16f(y + 448 + 2 * j);
            if (a != a && b != b) continue; /* both NaN: the non-finite slot of SPEC 2.4 */
            if (!(fabsf(a - b) <= 1e-2f + 1e-2f * fabsf(b))) {
                snprintf(msg, msglen, "output %lld rope %d: %g vs reference %g", (long long)o, j, a, b);
                return 1;
            }
        }
    }
    if (differ) *differ = diff;
    int64_t allowed = 2 + (n * 448) / 20000;
    if (diff > allowed) {
        snprintf(msg, msglen, "%lld NOPE values differ, more than 2 + n/20000 = %lld", (long long)diff,
                 (long long)allowed);
        return 1;
    }
    return 0;
}

void kvc_kit_poison(uint8_t *p, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t w = kvc_rand_u64(seed, 99, i / 8);
        for (size_t k = 0; k < 8 && i + k < n; k++) p[i + k] = (uint8_t)(w >> (8 * k));
    }
}

int kvc_kit_parse_spec(const char *spec, kvc_case_params *p, char *msg, size_t msglen) {
    memset(p, 0, sizeof *p);
    p->num_reqs = 1;
    p->block_size = 8;
    p->seed = 1;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *it = strtok_r(buf, ",", &save); it; it = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(it, '=');
        if (!eq) {
            snprintf(msg, msglen, "'%s' is not key=value", it);
            return -1;
        }
        *eq = '\0';
        const char *k = it, *v = eq + 1;
        char *end = NULL;
        errno = 0;
        long long x = strtoll(v, &end, 10);
        int numeric = end && *end == '\0' && end != v;
        if (numeric && errno == ERANGE) {
            snprintf(msg, msglen, "%s=%s: out of the range of a 64-bit integer", k, v);
            return -1;
        }
        if (!strcmp(k, "layout")) {
            if (strcmp(v, "contig") && strcmp(v, "shuffle")) {
                snprintf(msg, msglen, "layout=%s: expected contig or shuffle", v);
                return -1;
            }
            p->shuffle = !strcmp(v, "shuffle");
        } else if (!strcmp(k, "format")) {
            if (kvc_kit_parse_format(v, &p->nope_format) != 0) {
                snprintf(msg, msglen, "format=%s: expected int8, fp8, indexer_fp8 or indexer_mxfp4", v);
                return -1;
            }
            p->head_dim = p->nope_format >= KVC_INDEXER_FP8 ? 128 : 0; /* the head width follows the format */
        } else if (!strcmp(k, "state")) {
            if (strcmp(v, "f32") && strcmp(v, "bf16")) {
                snprintf(msg, msglen, "state=%s: expected f32 or bf16", v);
                return -1;
            }
            p->state_dtype = !strcmp(v, "bf16") ? KVC_STATE_BFLOAT16 : KVC_STATE_FLOAT32;
        } else if (!strcmp(k, "cos_sin")) {
            if (strcmp(v, "split") && strcmp(v, "interleaved")) {
                snprintf(msg, msglen, "cos_sin=%s: expected split or interleaved", v);
                return -1;
            }
            p->cos_sin_layout = !strcmp(v, "interleaved") ? KVC_COS_SIN_INTERLEAVED : KVC_COS_SIN_SPLIT;
        } else if (!numeric) {
            snprintf(msg, msglen, "%s=%s: expected an integer", k, v);
            return -1;
        } else if (!strcmp(k, "reqs")) p->num_reqs = x;
        else if (!strcmp(k, "tokens")) p->total_tokens = x;
        else if (!strcmp(k, "C")) p->compress_ratio = x;
        else if (!strcmp(k, "block")) p->block_size = x;
        else if (!strcmp(k, "seed")) p->seed = (uint64_t)x;
        else if (!strcmp(k, "pos0")) p->first_position = x;
        else if (!strcmp(k, "kv_block")) {
            if (x < 1) {
                snprintf(msg, msglen, "kv_block=%s: expected >= 1", v);
                return -1;
            }
            p->kv_block_size = x;
        }
        else if (!strcmp(k, "rotate") || !strcmp(k, "bias")) {
            if (x != 0 && x != 1) {
                snprintf(msg, msglen, "%s=%s: expected 0 or 1", k, v);
                return -1;
            }
            if (!strcmp(k, "rotate")) p->rotate = x ? KVC_ROTATE_HADAMARD : KVC_ROTATE_OFF;
            else p->score_bias = (int)x;
        } else if (!strcmp(k, "overlap")) {
            if (x != 0 && x != 1) {
                snprintf(msg, msglen, "overlap=%s: expected 0 or 1", v);
                return -1;
            }
            p->overlap = x ? KVC_OVERLAP_ON : KVC_OVERLAP_OFF;
        } else if (!strcmp(k, "score_shift")) {
            if (x < -1000 || x > 1000) {
                snprintf(msg, msglen, "score_shift=%s: expected [-1000, 1000]", v);
                return -1;
            }
            p->score_shift = (int)x;
        }
        else {
            snprintf(msg, msglen, "unknown key '%s'", k);
            return -1;
        }
    }
    if (p->total_tokens <= 0 || p->compress_ratio <= 0) {
        snprintf(msg, msglen, "tokens and C are required, both >= 1");
        return -1;
    }
    uint64_t bytes;
    if (kvc_case_host_bytes(p, &bytes) != KVC_OK) { /* reqs, block, divisibility, sizes */
        snprintf(msg, msglen, "%s", kvc_last_error_message());
        return -1;
    }
    if (p->total_tokens / p->num_reqs < p->compress_ratio) {
        snprintf(msg, msglen, "C=%lld > tokens / reqs = %lld: no window closes, nothing to compute",
                 (long long)p->compress_ratio, (long long)(p->total_tokens / p->num_reqs));
        return -1;
    }
    return 0;
}

static size_t span(int64_t n, int64_t stride, int64_t last) { return n <= 0 ? 0 : (size_t)((n - 1) * stride + last); }

void kvc_kit_tensors(const kvc_args *in, const void *ptrs[KVC_KIT_TENSORS], size_t bytes[KVC_KIT_TENSORS]) {
    kvc_args r = *in;
    kvc_resolve_strides(&r);
    const kvc_args *h = &r;
    const int64_t W = h->state_width, st = h->state_stride_token, sb = h->state_stride_block;
    const int64_t bt = h->block_table_stride, cs = h->cos_sin_stride, ps = h->page_stride;
    const void *p[KVC_KIT_TENSORS] = {h->state_cache, h->token_to_req, h->positions, h->kv_slot_mapping,
                                      h->boundary_token_indices, h->block_table, h->rms_norm_weight,
                                      h->cos_sin_cache, h->score_bias, h->kv_cache};
    size_t b[KVC_KIT_TENSORS] = {(size_t)kvc_state_elem_bytes(h) * span(h->num_blocks, sb, span(h->block_size, st, W)),
                                 4 * (size_t)h->num_tokens, 8 * (size_t)h->num_tokens, 8 * (size_t)h->num_tokens,
                                 8 * (size_t)h->num_outputs, 4 * span(h->num_reqs, bt, h->blocks_per_req),
                                 2 * (size_t)h->head_dim, 4 * span(h->max_pos, cs, 64),
                                 h->score_bias ? 4 * span(h->compress_ratio, h->score_bias_stride, W / 2) : 0,
                                 (size_t)(h->num_pages * ps)};
    memcpy(ptrs, p, sizeof p);
    memcpy(bytes, b, sizeof b);
}

void kvc_kit_rebind(kvc_args *a, void *const p[KVC_KIT_TENSORS]) {
    a->state_cache = (const float *)p[0];
    a->token_to_req = (const int32_t *)p[1];
    a->positions = (const int64_t *)p[2];
    a->kv_slot_mapping = (const int64_t *)p[3];
    a->boundary_token_indices = (const int64_t *)p[4];
    a->block_table = (const int32_t *)p[5];
    a->rms_norm_weight = (const uint16_t *)p[6];
    a->cos_sin_cache = (const float *)p[7];
    a->score_bias = (const float *)p[KVC_KIT_BIAS];
    a->kv_cache = (uint8_t *)p[KVC_KIT_KV];
}

int kvc_kit_upload(const kvc_kit_mem *m, const kvc_args *host, kvc_kit_dev_args *x, char *err, size_t errlen) {
    memset(x, 0, sizeof *x);
    x->d = *host;
    const void *src[KVC_KIT_TENSORS];
    size_t bytes[KVC_KIT_TENSORS];
    kvc_kit_tensors(host, src, bytes);
    x->kv_bytes = bytes[KVC_KIT_KV];
    for (int i = 0; i < KVC_KIT_TENSORS; i++)
        if ((i != KVC_KIT_BIAS || src[i]) && m->put(src[i] && bytes[i] ? src[i] : NULL, bytes[i], &x->h[i], err, errlen) != 0) {
            kvc_kit_release(m, x);
            return -1;
        }
    kvc_kit_rebind(&x->d, x->h);
    return 0;
}

void kvc_kit_release(const kvc_kit_mem *m, kvc_kit_dev_args *x) {
    for (int i = 0; i < KVC_KIT_TENSORS; i++)
        if (x->h[i]) m->drop(x->h[i]);
    memset(x, 0, sizeof *x);
}

kvc_status kvc_kit_device_run(const kvc_kit_mem *m, const kvc_exec *ex, const kvc_args *a, int n, kvc_report *rep,
                              kvc_device_status *ds) {
    kvc_kit_dev_args x[KVC_MANY_MAX];
    char err[256];
    if (n < 0 || n > KVC_MANY_MAX) return KVC_ERROR_BAD_PARAMETER;
    int up = 0;
    kvc_status st = KVC_OK;
    kvc_args d[KVC_MANY_MAX];
    memset(d, 0, sizeof d);
    for (; up < n; up++) {
        if (kvc_kit_upload(m, &a[up], &x[up], err, sizeof err) != 0) {
            fprintf(stderr, "kvc_kit_device_run: %s\n", err);
            st = KVC_ERROR_DEVICE;
            break;
        }
        d[up] = x[up].d;
    }
    if (st == KVC_OK) st = kvc_compress_many(d, n, ex, rep);
    if (st == KVC_OK) {
        kvc_device_status s;
        st = kvc_read_status(ex, &s);
        if (ds) *ds = s;
        if (st == KVC_OK && rep) {
            rep->outputs_written = s.outputs_written;
            rep->outputs_padding = s.outputs_padding;
            rep->outputs_nonfinite = s.outputs_nonfinite;
        }
        if (st == KVC_OK && s.status != 0) st = (kvc_status)s.status;
        for (int i = 0; i < n; i++)
            if (x[i].kv_bytes && m->get(x[i].h[KVC_KIT_KV], a[i].kv_cache, x[i].kv_bytes) != 0) st = KVC_ERROR_DEVICE;
    }
    for (int i = 0; i < up; i++) kvc_kit_release(m, &x[i]);
    return st;
}

/* ---- the CPU floor ------------------------------------------------------- */
typedef struct {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
} rd_job;

static void *rd_worker(void *arg) {
    rd_job *j = arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    for (; i < j->n; i++) s0 += j->p[i];
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static double kit_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double kvc_kit_run_threads(void *(*fn)(void *), void *jobs, size_t size, int n) {
    pthread_t tids[256];
    char *j = jobs;
    if (n > 256) n = 256;
    const double t0 = kit_now_s();
    int started = 1;
    for (; started < n; started++)
        if (pthread_create(&tids[started], NULL, fn, j + (size_t)started * size) != 0) break;
    fn(j);
    for (int t = 1; t < started; t++) pthread_join(tids[t], NULL);
    for (int t = started; t < n; t++) fn(j + (size_t)t * size); /* a thread that could not start */
    return kit_now_s() - t0;
}

double kvc_kit_cpu_read(const uint64_t *buf, size_t words, int threads, uint64_t *sink) {
    rd_job jobs[256];
    if (threads < 1) threads = kvc_cpu_default_threads();
    if (threads > 256) threads = 256;
    for (int t = 0; t < threads; t++) {
        jobs[t].p = buf + words * (size_t)t / (size_t)threads;
        jobs[t].n = words * (size_t)(t + 1) / (size_t)threads - words * (size_t)t / (size_t)threads;
    }
    const double dt = kvc_kit_run_threads(rd_worker, jobs, sizeof jobs[0], threads);
    for (int t = 0; t < threads; t++) *sink += jobs[t].sum;
    return dt;
}
