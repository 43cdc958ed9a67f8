/* validate.c -- the checks of SPEC 2.3 on the host, with named messages. */
#include <math.h>
#include <stdlib.h>

#include "kvc_check.h"
#include "kvc_internal.h"

#define I64 "%lld"
#define LL(x) ((long long)(x))

static kvc_status need_nonneg(const char *name, int64_t v) {
    if (v < 0) return kvc_fail(KVC_ERROR_BAD_SHAPE, "%s = " I64 " < 0", name, LL(v));
    return KVC_OK;
}

/* a * b fits in int64 (a, b >= 0)? */
static int mul_ok(int64_t a, int64_t b) { return b == 0 || a <= INT64_MAX / b; }

kvc_status kvc_check_shapes(const kvc_args *in, kvc_args *a) {
    if (!in) return kvc_fail(KVC_ERROR_NULL_POINTER, "args = NULL");
    *a = *in;
    kvc_status st;
    if (a->compress_ratio < 1)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "compress_ratio = " I64 " < 1", LL(a->compress_ratio));
    if (a->compress_ratio > (INT64_C(1) << 40))
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "compress_ratio = " I64 " > 2^40", LL(a->compress_ratio));
    if (a->block_size < 1)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "block_size = " I64 " < 1", LL(a->block_size));
    if (a->kv_block_size < 1)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "kv_block_size = " I64 " < 1", LL(a->kv_block_size));
    if ((unsigned)a->nope_format > KVC_NOPE_FP8_E4M3)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "nope_format = %d is not a kvc_nope_format", (int)a->nope_format);
    if ((unsigned)a->overlap > KVC_OVERLAP_ON)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "overlap = %d is not a kvc_overlap", (int)a->overlap);
    if ((unsigned)a->numerics > KVC_NUMERICS_FAST)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "numerics = %d is not a kvc_numerics", (int)a->numerics);
    if ((unsigned)a->cos_sin_layout > KVC_COS_SIN_INTERLEAVED)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "cos_sin_layout = %d is not a kvc_cos_sin_layout",
                        (int)a->cos_sin_layout);
    if (!isfinite(a->rms_norm_eps) || a->rms_norm_eps < 0.0f)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "rms_norm_eps = %g is not finite and >= 0",
                        (double)a->rms_norm_eps);

    int64_t width = a->overlap == KVC_OVERLAP_ON ? 2048 : 1024;
    if (a->state_width != width)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "state_width = " I64 " != " I64 " (overlap %s)",
                        LL(a->state_width), LL(width), a->overlap ? "on" : "off");
    if ((st = need_nonneg("num_blocks", a->num_blocks)) || (st = need_nonneg("num_tokens", a->num_tokens)) ||
        (st = need_nonneg("num_outputs", a->num_outputs)) || (st = need_nonneg("num_reqs", a->num_reqs)) ||
        (st = need_nonneg("blocks_per_req", a->blocks_per_req)) || (st = need_nonneg("max_pos", a->max_pos)) ||
        (st = need_nonneg("num_pages", a->num_pages)) ||
        (st = need_nonneg("state_stride_block", a->state_stride_block)) ||
        (st = need_nonneg("state_stride_token", a->state_stride_token)) ||
        (st = need_nonneg("block_table_stride", a->block_table_stride)) ||
        (st = need_nonneg("cos_sin_stride", a->cos_sin_stride)) ||
        (st = need_nonneg("page_stride", a->page_stride)))
        return st;

    /* 0 strides mean "contiguous". */
    if (a->state_stride_token == 0) a->state_stride_token = width;
    if (a->state_stride_block == 0) {
        if (!mul_ok(a->block_size, a->state_stride_token))
            return kvc_fail(KVC_ERROR_BAD_SHAPE, "block_size * state_stride_token overflows int64");
        a->state_stride_block = a->block_size * a->state_stride_token;
    }
    if (a->block_table_stride == 0) a->block_table_stride = a->blocks_per_req;
    if (a->cos_sin_stride == 0) a->cos_sin_stride = 64;
    if (!mul_ok(a->kv_block_size, KVC_SLOT_BYTES))
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "kv_block_size = " I64 " is too large", LL(a->kv_block_size));
    int64_t page_need = a->kv_block_size * KVC_SLOT_BYTES;
    if (a->page_stride == 0) a->page_stride = page_need;

    if (a->state_stride_token < width)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "state_stride_token = " I64 " < state_width = " I64,
                        LL(a->state_stride_token), LL(width));
    if (a->cos_sin_stride < 64)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "cos_sin_stride = " I64 " < 64", LL(a->cos_sin_stride));
    if (a->num_reqs > 1 && a->block_table_stride < a->blocks_per_req)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "block_table_stride = " I64 " < blocks_per_req = " I64,
                        LL(a->block_table_stride), LL(a->blocks_per_req));
    if (a->page_stride < page_need)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "page_stride = " I64 " < 584 * kv_block_size = " I64,
                        LL(a->page_stride), LL(page_need));
    /* Every element offset we form must fit in int64. */
    if (!mul_ok(a->num_blocks, a->state_stride_block) || !mul_ok(a->block_size, a->state_stride_token) ||
        !mul_ok(a->num_reqs, a->block_table_stride) || !mul_ok(a->max_pos, a->cos_sin_stride) ||
        !mul_ok(a->num_pages, a->page_stride) || !mul_ok(a->num_pages, a->kv_block_size))
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "tensor extents overflow int64 element offsets");

    if (a->num_outputs > 0) {
        const struct { const void *p; const char *name; } ptrs[] = {
            {a->state_cache, "state_cache"},       {a->token_to_req, "token_to_req"},
            {a->positions, "positions"},           {a->kv_slot_mapping, "kv_slot_mapping"},
            {a->boundary_token_indices, "boundary_token_indices"},
            {a->block_table, "block_table"},       {a->rms_norm_weight, "rms_norm_weight"},
            {a->cos_sin_cache, "cos_sin_cache"},   {a->kv_cache, "kv_cache"},
        };
        for (size_t i = 0; i < sizeof ptrs / sizeof ptrs[0]; i++)
            if (!ptrs[i].p)
                return kvc_fail(KVC_ERROR_NULL_POINTER, "%s = NULL with num_outputs = " I64, ptrs[i].name,
                                LL(a->num_outputs));
    }
    return KVC_OK;
}

kvc_status kvc_fail_check(const kvc_args *a, int check, int64_t o, int64_t value, int64_t aux) {
    const kvc_status R = KVC_ERROR_INDEX_OUT_OF_RANGE;
    switch (check) {
    case KVC_CHECK_BOUNDARY:
        return kvc_fail(R, "boundary_token_indices[" I64 "] = " I64 " outside [0, num_tokens = " I64 ")",
                        LL(o), LL(value), LL(a->num_tokens));
    case KVC_CHECK_REQUEST:
        return kvc_fail(R, "token_to_req[boundary_token_indices[" I64 "]] = " I64 " outside [0, num_reqs = " I64 ")",
                        LL(o), LL(value), LL(a->num_reqs));
    case KVC_CHECK_POSITION:
        return kvc_fail(R, "positions[boundary_token_indices[" I64 "]] = " I64 " < compress_ratio - 1 = " I64,
                        LL(o), LL(value), LL(a->compress_ratio - 1));
    case KVC_CHECK_LOGICAL_BLOCK:
        return kvc_fail(R, "positions[boundary_token_indices[" I64 "]] / block_size = " I64
                        " >= blocks_per_req = " I64, LL(o), LL(value), LL(a->blocks_per_req));
    case KVC_CHECK_PHYSICAL_BLOCK:
        return kvc_fail(R, "block_table[token_to_req[boundary_token_indices[" I64 "]]][" I64 "] = " I64
                        " outside [0, num_blocks = " I64 ")", LL(o), LL(aux), LL(value), LL(a->num_blocks));
    case KVC_CHECK_COS_SIN_ROW:
        return kvc_fail(R, "cos/sin row (positions[boundary_token_indices[" I64 "]] / C) * C = " I64
                        " >= max_pos = " I64, LL(o), LL(value), LL(a->max_pos));
    case KVC_CHECK_SLOT:
        return kvc_fail(R, "kv_slot_mapping[boundary_token_indices[" I64 "]] = " I64
                        " >= num_pages * kv_block_size = " I64, LL(o), LL(value),
                        LL(a->num_pages * a->kv_block_size));
    case KVC_CHECK_DUPLICATE_SLOT:
        return kvc_fail(KVC_ERROR_DUPLICATE_SLOT, "kv_slot_mapping[boundary_token_indices[" I64 "]] = " I64
                        " is also the slot of output " I64, LL(o), LL(value), LL(aux));
    default:
        return kvc_fail(KVC_ERROR_GENERIC, "unknown check %d for output " I64, check, LL(o));
    }
}

typedef struct { int64_t slot, o; } slot_entry;

static int cmp_slot(const void *x, const void *y) {
    const slot_entry *a = x, *b = y;
    if (a->slot != b->slot) return a->slot < b->slot ? -1 : 1;
    return a->o < b->o ? -1 : (a->o > b->o);
}

kvc_status kvc_check_indices(const kvc_args *a, int64_t *padding) {
    int64_t pad = 0, n = 0;
    slot_entry *slots = NULL;
    if (a->num_outputs > 0) {
        slots = malloc((size_t)a->num_outputs * sizeof *slots);
        if (!slots) return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "no memory for " I64 " slot entries", LL(a->num_outputs));
    }
    for (int64_t o = 0; o < a->num_outputs; o++) {
        kvc_out_info inf;
        int c = kvc_check_output(a, o, &inf, 1);
        if (c != KVC_CHECK_NONE) {
            free(slots);
            return kvc_fail_check(a, c, o, inf.value, inf.aux);
        }
        if (inf.slot < 0) {
            pad++;
            continue;
        }
        slots[n].slot = inf.slot;
        slots[n].o = o;
        n++;
    }
    if (n > 1) qsort(slots, (size_t)n, sizeof *slots, cmp_slot);
    for (int64_t i = 1; i < n; i++) {
        if (slots[i].slot == slots[i - 1].slot) {
            kvc_status st = kvc_fail_check(a, KVC_CHECK_DUPLICATE_SLOT, slots[i].o, slots[i].slot, slots[i - 1].o);
            free(slots);
            return st;
        }
    }
    free(slots);
    if (padding) *padding = pad;
    return KVC_OK;
}

kvc_status kvc_validate(const kvc_args *args) {
    kvc_clear_error();
    kvc_args a;
    kvc_status st = kvc_check_shapes(args, &a);
    if (st != KVC_OK) return st;
    return kvc_check_indices(&a, NULL);
}
