/*
 * ref_naive.h -- a second, deliberately plain implementation of SPEC 3 for
 * the tests: gathers the window row by row (block table lookup per token),
 * evaluates the tree T(lo, hi) by literal recursion per dimension, and
 * writes one golden-format row.  Independent of the CPU backend's
 * streaming/stack structure and thread split.
 */
#ifndef KVC_REF_NAIVE_H
#define KVC_REF_NAIVE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_canon.h"
#include "kvcompress.h"

typedef struct { float m, d, n; } ref_state;

static inline ref_state ref_tree(const float *s, const float *v, int64_t lo, int64_t hi, int64_t rows) {
    ref_state r;
    if (hi - lo == 1) {
        int64_t a = lo * 8, b = a + 8 < rows ? a + 8 : rows;
        r.m = s[a];
        for (int64_t i = a + 1; i < b; i++) r.m = kvc_max(r.m, s[i]);
        r.d = 0;
        r.n = 0;
        if (r.m != -INFINITY)
            for (int64_t i = a; i < b; i++) {
                float e = kvc_exp(s[i] - r.m);
                r.d = r.d + e;
                r.n = r.n + e * v[i];
            }
        return r;
    }
    int64_t P = 1;
    while (P * 2 < hi - lo) P *= 2;
    ref_state A = ref_tree(s, v, lo, lo + P, rows), B = ref_tree(s, v, lo + P, hi, rows);
    r.m = kvc_max(A.m, B.m);
    if (r.m == -INFINITY) {
        r.d = r.n = 0;
        return r;
    }
    float fA = kvc_exp(A.m - r.m), fB = kvc_exp(B.m - r.m);
    r.d = A.d * fA + B.d * fB;
    r.n = A.n * fA + B.n * fB;
    return r;
}

/* Golden-format row of output o of (resolved or default-stride) args. */
static inline void ref_output_row(const kvc_args *a, int64_t o, uint8_t row[584]) {
    int64_t b = a->boundary_token_indices[o], r = a->token_to_req[b], p = a->positions[b], C = a->compress_ratio;
    int ovl = a->overlap == KVC_OVERLAP_ON;
    int64_t rows = ovl ? 2 * C : C;
    int64_t width = ovl ? 2048 : 1024;
    int64_t st_tok = a->state_stride_token ? a->state_stride_token : width;
    int64_t st_blk = a->state_stride_block ? a->state_stride_block : a->block_size * st_tok;
    int64_t bt = a->block_table_stride ? a->block_table_stride : a->blocks_per_req;
    float *s = malloc(sizeof(float) * (size_t)rows), *v = malloc(sizeof(float) * (size_t)rows);
    float c[512], y[512];
    for (int d = 0; d < 512; d++) {
        for (int64_t i = 0; i < rows; i++) {
            int64_t pos = ovl ? (i < C ? p - 2 * C + 1 + i : p - C + 1 + (i - C)) : p - C + 1 + i;
            int half = ovl ? (i >= C) : 1;
            if (pos < 0) {
                s[i] = -INFINITY;
                v[i] = 0.0f;
                continue;
            }
            int64_t g = a->block_table[r * bt + pos / a->block_size];
            const float *rowp = a->state_cache + g * st_blk + (pos % a->block_size) * st_tok;
            v[i] = ovl ? rowp[(half ? 512 : 0) + d] : rowp[d];
            s[i] = ovl ? rowp[(half ? 1536 : 1024) + d] : rowp[512 + d];
        }
        ref_state t = ref_tree(s, v, 0, (rows + 7) / 8, rows);
        c[d] = t.n / t.d;
    }
    free(s);
    free(v);
    int64_t cs_stride = a->cos_sin_stride ? a->cos_sin_stride : 64;
    const float *cs = a->cos_sin_cache + ((p / C) * C) * cs_stride;
    kvc_finalize_slot(c, y, a->rms_norm_weight, cs, a->cos_sin_layout == KVC_COS_SIN_INTERLEAVED, a->rms_norm_eps,
                      a->nope_format == KVC_NOPE_FP8_E4M3, row, row + 576);
}

#endif
