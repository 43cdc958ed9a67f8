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

/* Checked int64 arithmetic for the spans (operands >= 0): *ok cleared on overflow. */
static int64_t cmul(int64_t a, int64_t b, int *ok) {
    if (!mul_ok(a, b)) {
        *ok = 0;
        return 0;
    }
    return a * b;
}
static int64_t cadd(int64_t a, int64_t b, int *ok) {
    if (a > INT64_MAX - b) {
        *ok = 0;
        return 0;
    }
    return a + b;
}

const char *const kvc_tensor_names[KVC_TENSORS] = {
    "state_cache", "token_to_req", "positions",     "kv_slot_mapping", "boundary_token_indices",
    "block_table", "rms_norm_weight", "cos_sin_cache", "score_bias",     "kv_cache"};

void kvc_tensor_ptrs(const kvc_args *a, const void *ptrs[KVC_TENSORS]) {
    ptrs[0] = a->state_cache;
    ptrs[1] = a->token_to_req;
    ptrs[2] = a->positions;
    ptrs[3] = a->kv_slot_mapping;
    ptrs[4] = a->boundary_token_indices;
    ptrs[5] = a->block_table;
    ptrs[6] = a->rms_norm_weight;
    ptrs[7] = a->cos_sin_cache;
    ptrs[8] = a->score_bias;
    ptrs[9] = a->kv_cache;
}

/* The byte spans [ptr, ptr + bytes) the call may touch, one per tensor, in
 * kvc_args order; the last is kv_cache (written; of each page only the first
 * slot bytes * kv_block_size).  An absent score_bias spans 0 bytes. */
enum { SPAN_COUNT = KVC_TENSORS, SPAN_KV = KVC_TENSORS - 1 };
typedef struct {
    const char *name;
    const void *ptr;
    int64_t bytes;
} span;

static kvc_status tensor_spans(const kvc_args *a, span sp[SPAN_COUNT]) {
    int ok = 1;
    const int64_t st_elems =
        a->num_blocks == 0 || a->block_size == 0
            ? 0
            : cadd(cadd(cmul(a->num_blocks - 1, a->state_stride_block, &ok),
                        cmul(a->block_size - 1, a->state_stride_token, &ok), &ok),
                   a->state_width, &ok);
    const int64_t bt_elems = a->num_reqs == 0 || a->blocks_per_req == 0
                                 ? 0
                                 : cadd(cmul(a->num_reqs - 1, a->block_table_stride, &ok), a->blocks_per_req, &ok);
    const int64_t cs_elems = a->max_pos == 0 ? 0 : cadd(cmul(a->max_pos - 1, a->cos_sin_stride, &ok), 64, &ok);
    const int64_t kv_bytes = a->num_pages == 0 ? 0
                                               : cadd(cmul(a->num_pages - 1, a->page_stride, &ok),
                                                      a->kv_block_size * kvc_fmt_slot_bytes(a->nope_format), &ok);
    const int64_t bias_elems =
        !a->score_bias ? 0 : cadd(cmul(a->compress_ratio - 1, a->score_bias_stride, &ok), a->state_width / 2, &ok);
    const int64_t bytes[SPAN_COUNT] = {cmul(st_elems, kvc_state_elem_bytes(a), &ok),
                                       cmul(a->num_tokens, 4, &ok),
                                       cmul(a->num_tokens, 8, &ok),
                                       cmul(a->num_tokens, 8, &ok),
                                       cmul(a->num_outputs, 8, &ok),
                                       cmul(bt_elems, 4, &ok),
                                       2 * a->head_dim,
                                       cmul(cs_elems, 4, &ok),
                                       cmul(bias_elems, 4, &ok),
                                       kv_bytes};
    if (!ok) return kvc_fail(KVC_ERROR_BAD_SHAPE, "a tensor's sizes and strides span more than 2^63 bytes");
    const void *ptrs[KVC_TENSORS];
    kvc_tensor_ptrs(a, ptrs);
    for (int i = 0; i < SPAN_COUNT; i++) {
        sp[i].name = kvc_tensor_names[i];
        sp[i].ptr = ptrs[i];
        sp[i].bytes = bytes[i];
        if (sp[i].ptr && (uintptr_t)sp[i].ptr > UINTPTR_MAX - (uint64_t)sp[i].bytes)
            return kvc_fail(KVC_ERROR_BAD_SHAPE, "%s at %p spans " I64 " bytes: past the end of the address space",
                            sp[i].name, sp[i].ptr, LL(sp[i].bytes));
    }
    return KVC_OK;
}

kvc_status kvc_tensor_bytes(const kvc_args *a, int64_t bytes[KVC_TENSORS]) {
    span sp[SPAN_COUNT];
    const kvc_status st = tensor_spans(a, sp);
    for (int i = 0; i < SPAN_COUNT; i++) bytes[i] = st == KVC_OK ? sp[i].bytes : 0;
    return st;
}

/* Does [lo, lo + n) meet a byte kv_cache writes (the first `used` bytes of
 * each of `pages` pages of `stride` bytes from `base`)? */
static int meets_written(uintptr_t base, int64_t pages, int64_t stride, int64_t used, uintptr_t lo, int64_t n) {
    if (n <= 0 || pages <= 0) return 0;
    const uint64_t total = (uint64_t)(pages - 1) * (uint64_t)stride + (uint64_t)used;
    const uintptr_t hi = lo + (uint64_t)n; /* no wrap: tensor_spans checked it */
    if (hi <= base || lo >= base + total) return 0;
    const uint64_t rel = lo > base ? lo - base : 0;
    const uint64_t k = rel / (uint64_t)stride;
    if (rel - k * (uint64_t)stride < (uint64_t)used) return 1; /* starts inside page k's slots */
    return k + 1 < (uint64_t)pages && base + (k + 1) * (uint64_t)stride < hi; /* reaches page k + 1 */
}

kvc_status kvc_check_aliasing(const kvc_args *a, int handles) {
    if (a->num_outputs == 0) return KVC_OK;
    span sp[SPAN_COUNT];
    kvc_status st = tensor_spans(a, sp);
    if (st != KVC_OK) return st;
    const span *kv = &sp[SPAN_KV];
    for (int i = 0; i < SPAN_KV; i++) {
        if (!sp[i].ptr) continue; /* an absent optional tensor */
        const int hit = handles ? sp[i].ptr == kv->ptr
                                : meets_written((uintptr_t)kv->ptr, a->num_pages, a->page_stride,
                                                a->kv_block_size * kvc_fmt_slot_bytes(a->nope_format),
                                                (uintptr_t)sp[i].ptr, sp[i].bytes);
        if (hit)
            return kvc_fail(KVC_ERROR_ALIASING,
                            handles ? "kv_cache and %s are the same buffer: the output would rewrite an input"
                                    : "kv_cache overlaps %s: the output would rewrite an input it reads",
                            sp[i].name);
    }
    return KVC_OK;
}

kvc_status kvc_check_aliasing_sets(const kvc_args *w, int iw, const kvc_args *r, int ir, int handles) {
    if (w->num_outputs == 0) return KVC_OK;
    span sw[SPAN_COUNT], sr[SPAN_COUNT];
    kvc_status st = tensor_spans(w, sw);
    if (st == KVC_OK) st = tensor_spans(r, sr);
    if (st != KVC_OK) return st;
    const span *kv = &sw[SPAN_KV];
    for (int i = 0; i < SPAN_COUNT; i++) {
        if (!sr[i].ptr) continue;
        const int hit = handles ? sr[i].ptr == kv->ptr
                                : meets_written((uintptr_t)kv->ptr, w->num_pages, w->page_stride,
                                                w->kv_block_size * kvc_fmt_slot_bytes(w->nope_format),
                                                (uintptr_t)sr[i].ptr, sr[i].bytes);
        if (hit)
            return kvc_fail(KVC_ERROR_ALIASING, "args[%d].kv_cache %s args[%d].%s: the sets must not write where "
                            "another one reads or writes", iw, handles ? "is the buffer of" : "overlaps", ir,
                            sr[i].name);
    }
    return KVC_OK;
}

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
    if ((unsigned)a->nope_format > KVC_INDEXER_MXFP4)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "nope_format = %d is not a kvc_nope_format", (int)a->nope_format);
    if ((unsigned)a->rotate > KVC_ROTATE_HADAMARD)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "rotate = %d is not a kvc_rotation", (int)a->rotate);
    if ((unsigned)a->state_dtype > KVC_STATE_BFLOAT16)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "state_dtype = %d is not a kvc_state_dtype", (int)a->state_dtype);
    if (a->head_dim != 0 && a->head_dim != 128 && a->head_dim != 512)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "head_dim = " I64 " is not 128 or 512 (0: 512)", LL(a->head_dim));
    {
        static const char *const fmt_names[] = {"KVC_NOPE_INT8", "KVC_NOPE_FP8_E4M3", "KVC_INDEXER_FP8",
                                                "KVC_INDEXER_MXFP4"};
        const int64_t D = a->head_dim ? a->head_dim : 512;
        const int indexer = a->nope_format >= KVC_INDEXER_FP8;
        if (indexer != (D == 128))
            return kvc_fail(KVC_ERROR_BAD_PARAMETER,
                            "nope_format = %s is not defined at head_dim = " I64 " (INT8 and FP8 slots are head "
                            "width 512's, the INDEXER ones head width 128's)",
                            fmt_names[a->nope_format], LL(D));
        if (a->rotate && D != 128)
            return kvc_fail(KVC_ERROR_BAD_PARAMETER,
                            "rotate = KVC_ROTATE_HADAMARD is not defined at head_dim = " I64 " (head width 128 only)",
                            LL(D));
    }
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

    const int64_t width = (a->head_dim ? a->head_dim : 512) * (a->overlap == KVC_OVERLAP_ON ? 4 : 2);
    if (a->state_width != width)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "state_width = " I64 " != " I64 " (head_dim " I64 ", overlap %s)",
                        LL(a->state_width), LL(width), LL(a->head_dim ? a->head_dim : 512), a->overlap ? "on" : "off");
    if ((st = need_nonneg("num_blocks", a->num_blocks)) || (st = need_nonneg("num_tokens", a->num_tokens)) ||
        (st = need_nonneg("num_outputs", a->num_outputs)) || (st = need_nonneg("num_reqs", a->num_reqs)) ||
        (st = need_nonneg("blocks_per_req", a->blocks_per_req)) || (st = need_nonneg("max_pos", a->max_pos)) ||
        (st = need_nonneg("num_pages", a->num_pages)) ||
        (st = need_nonneg("state_stride_block", a->state_stride_block)) ||
        (st = need_nonneg("state_stride_token", a->state_stride_token)) ||
        (st = need_nonneg("block_table_stride", a->block_table_stride)) ||
        (st = need_nonneg("cos_sin_stride", a->cos_sin_stride)) ||
        (st = need_nonneg("page_stride", a->page_stride)) ||
        (st = need_nonneg("score_bias_stride", a->score_bias_stride)))
        return st;

    /* 0 strides mean "contiguous" (kvc_resolve_strides), where the products fit */
    if (a->state_stride_block == 0 && !mul_ok(a->block_size, a->state_stride_token ? a->state_stride_token : width))
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "block_size * state_stride_token overflows int64");
    const int64_t slot_bytes = kvc_fmt_slot_bytes(a->nope_format);
    if (!mul_ok(a->kv_block_size, slot_bytes))
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "kv_block_size = " I64 " is too large", LL(a->kv_block_size));
    kvc_resolve_strides(a);
    const int64_t page_need = a->kv_block_size * slot_bytes;

    if (a->state_stride_token < width)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "state_stride_token = " I64 " < state_width = " I64,
                        LL(a->state_stride_token), LL(width));
    if (a->cos_sin_stride < 64)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "cos_sin_stride = " I64 " < 64", LL(a->cos_sin_stride));
    if (a->num_reqs > 1 && a->block_table_stride < a->blocks_per_req)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "block_table_stride = " I64 " < blocks_per_req = " I64,
                        LL(a->block_table_stride), LL(a->blocks_per_req));
    if (a->page_stride < page_need)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "page_stride = " I64 " < " I64 " * kv_block_size = " I64,
                        LL(a->page_stride), LL(slot_bytes), LL(page_need));
    if (a->score_bias && a->compress_ratio > 1 && a->score_bias_stride < width / 2)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "score_bias_stride = " I64 " < state_width / 2 = " I64,
                        LL(a->score_bias_stride), LL(width / 2));
    /* Every element offset we form must fit in int64. */
    if (!mul_ok(a->num_blocks, a->state_stride_block) || !mul_ok(a->block_size, a->state_stride_token) ||
        !mul_ok(a->num_reqs, a->block_table_stride) || !mul_ok(a->max_pos, a->cos_sin_stride) ||
        !mul_ok(a->num_pages, a->page_stride) || !mul_ok(a->num_pages, a->kv_block_size) ||
        !mul_ok(a->compress_ratio, a->score_bias_stride))
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "tensor extents overflow int64 element offsets");

    /* the largest byte offset of every tensor fits (and, for host pointers, the address space) */
    span sp[SPAN_COUNT];
    if ((st = tensor_spans(a, sp)) != KVC_OK) return st;
    /* element sizes, kvc_args order: every load is of whole, aligned elements */
    const int elem[SPAN_COUNT] = {(int)kvc_state_elem_bytes(a), 4, 8, 8, 8, 4, 2, 4, 4, 1};
    for (int i = 0; a->num_outputs > 0 && i < SPAN_COUNT; i++) {
        if (i == KVC_TENSOR_SCORE_BIAS && !sp[i].ptr) continue; /* optional */
        if (!sp[i].ptr)
            return kvc_fail(KVC_ERROR_NULL_POINTER, "%s = NULL with num_outputs = " I64, sp[i].name,
                            LL(a->num_outputs));
        if ((uintptr_t)sp[i].ptr % (uintptr_t)elem[i] != 0)
            return kvc_fail(KVC_ERROR_BAD_SHAPE, "%s at %p is not aligned to its %d-byte elements", sp[i].name,
                            sp[i].ptr, elem[i]);
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

/* 0 if the n slots (each in [0, num_pages * kv_block_size): checked) are
 * distinct, 1 if two are equal, -1 if the slot space is too large for a
 * bitmap of 64 bits an entry (no larger than the entries themselves) or
 * the bitmap cannot be allocated.  One pass where a sort took O(n log n)
 * on one thread before every call; the sort stays for the error, whose
 * message names the first duplicate in slot order. */
static int slots_repeat(const kvc_args *a, const slot_entry *slots, int64_t n) {
    if (a->kv_block_size < 1 || a->num_pages > 64 * n / a->kv_block_size) return -1;
    const int64_t nslots = a->num_pages * a->kv_block_size;
    uint64_t *seen = calloc((size_t)(nslots / 64 + 1), sizeof *seen);
    if (!seen) return -1;
    int dup = 0;
    for (int64_t i = 0; i < n && !dup; i++) {
        const uint64_t bit = (uint64_t)1 << (slots[i].slot & 63);
        uint64_t *w = &seen[slots[i].slot >> 6];
        dup = (*w & bit) != 0;
        *w |= bit;
    }
    free(seen);
    return dup;
}

kvc_status kvc_check_indices(const kvc_args *a, int64_t *padding, kvc_out_info *infos) {
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
        if (infos) infos[o] = inf;
        if (inf.slot < 0) {
            pad++;
            continue;
        }
        slots[n].slot = inf.slot;
        slots[n].o = o;
        n++;
    }
    if (n > 1 && slots_repeat(a, slots, n) != 0) {
        qsort(slots, (size_t)n, sizeof *slots, cmp_slot);
        for (int64_t i = 1; i < n; i++) {
            if (slots[i].slot == slots[i - 1].slot) {
                kvc_status st =
                    kvc_fail_check(a, KVC_CHECK_DUPLICATE_SLOT, slots[i].o, slots[i].slot, slots[i - 1].o);
                free(slots);
                return st;
            }
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
    if ((st = kvc_check_aliasing(&a, 0)) != KVC_OK) return st;
    return kvc_check_indices(&a, NULL, NULL);
}
