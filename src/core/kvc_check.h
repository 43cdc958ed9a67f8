/*
 * kvc_check.h -- per-output index checks of the contract (SPEC 2.3), shared
 * by the host validator (C) and the CUDA kernel (device side).  Reads only
 * the index tensors of `a` (which must be resolved: no zero strides) and
 * only at indices already proven in range.
 */
#ifndef KVC_CHECK_H
#define KVC_CHECK_H

#include "kvcompress.h"
#include "kvc_canon.h"

/* Check numbers, stored in kvc_device_status.check (pinned values). */
enum {
    KVC_CHECK_NONE = 0,
    KVC_CHECK_BOUNDARY = 1,       /* boundary_token_indices[o] outside [0, num_tokens) */
    KVC_CHECK_REQUEST = 2,        /* token_to_req[b] outside [0, num_reqs)             */
    KVC_CHECK_POSITION = 3,       /* window start p - C + 1 < 0                        */
    KVC_CHECK_LOGICAL_BLOCK = 4,  /* p / block_size >= blocks_per_req                  */
    KVC_CHECK_PHYSICAL_BLOCK = 5, /* block_table[r][l] outside [0, num_blocks)         */
    KVC_CHECK_COS_SIN_ROW = 6,    /* (p / C) * C >= max_pos                            */
    KVC_CHECK_SLOT = 7,           /* kv_slot_mapping[b] >= num_pages * kv_block_size   */
    KVC_CHECK_DUPLICATE_SLOT = 8, /* two outputs share a slot (host only)              */
    KVC_CHECK_COUNT = 9
};

/** What the checks resolved for one output. */
typedef struct kvc_out_info {
    kvc_i64 b;     /* boundary token                                   */
    kvc_i64 r;     /* request                                          */
    kvc_i64 p;     /* boundary position                                */
    kvc_i64 slot;  /* destination slot (< 0: padding)                  */
    kvc_i64 pc;    /* cos/sin row                                      */
    kvc_i64 first; /* first unmasked window position                   */
    kvc_i64 value; /* offending value when a check fails               */
    kvc_i64 aux;   /* logical block index for PHYSICAL_BLOCK           */
} kvc_out_info;

/** Element offset (floats) of the state row of position pos in physical block blk. */
KVC_FN kvc_i64 kvc_state_row_offset(const kvc_args *a, kvc_i64 blk, kvc_i64 pos) {
    return blk * a->state_stride_block + (pos % a->block_size) * a->state_stride_token;
}

/** Byte offsets in kv_cache of slot's 576 payload bytes and of its 8 scale bytes. */
KVC_FN void kvc_slot_offsets(const kvc_args *a, kvc_i64 slot, kvc_i64 *payload, kvc_i64 *scales) {
    const kvc_i64 S = a->kv_block_size, page = slot / S, s = slot - page * S;
    *payload = page * a->page_stride + s * 576;
    *scales = page * a->page_stride + S * 576 + s * 8;
}

/** First position the window of boundary position p reads (masked rows excluded). */
KVC_FN kvc_i64 kvc_window_first(kvc_i64 p, kvc_i64 C, int overlap) {
    kvc_i64 lo = overlap ? p - 2 * C + 1 : p - C + 1;
    kvc_i64 own = p - C + 1;
    return (overlap && lo < 0 && own >= 0) ? 0 : lo;
}

/**
 * Run every index check of output o.  @return KVC_CHECK_NONE (inf filled;
 * inf->slot < 0 means padding, the other fields then unset) or the number of
 * the first failing check (inf->value holds the offending value).
 * check_blocks = 0 skips the physical-block loop (a GPU checks each row's
 * block where it loads it, in parallel, instead of one serial loop).
 */
KVC_FN int kvc_check_output(const kvc_args *a, kvc_i64 o, kvc_out_info *inf, int check_blocks) {
    kvc_i64 b = a->boundary_token_indices[o];
    inf->r = inf->p = inf->pc = inf->first = inf->aux = 0;
    inf->slot = -1;
    inf->b = b;
    inf->value = b;
    if (b < 0 || b >= a->num_tokens) return KVC_CHECK_BOUNDARY;
    /* the three reads of token b are independent: issue them together (a GPU
     * then waits for one memory latency, not three) */
    const kvc_i64 slot = a->kv_slot_mapping[b];
    const kvc_i64 r = a->token_to_req[b];
    const kvc_i64 p = a->positions[b];
    inf->slot = slot;
    if (slot < 0) return KVC_CHECK_NONE;
    inf->r = r;
    inf->value = r;
    if (r < 0 || r >= a->num_reqs) return KVC_CHECK_REQUEST;
    kvc_i64 C = a->compress_ratio;
    inf->p = p;
    inf->value = p;
    if (p - C + 1 < 0) return KVC_CHECK_POSITION;
    kvc_i64 bs = a->block_size;
    kvc_i64 last = p / bs;
    inf->value = last;
    if (last >= a->blocks_per_req) return KVC_CHECK_LOGICAL_BLOCK;
    inf->first = kvc_window_first(p, C, a->overlap == KVC_OVERLAP_ON);
    const int32_t *row = a->block_table + r * a->block_table_stride;
    for (kvc_i64 l = inf->first / bs; check_blocks && l <= last; l++) {
        kvc_i64 g = row[l];
        if (g < 0 || g >= a->num_blocks) {
            inf->value = g;
            inf->aux = l;
            return KVC_CHECK_PHYSICAL_BLOCK;
        }
    }
    inf->pc = (p / C) * C;
    inf->value = inf->pc;
    if (inf->pc >= a->max_pos) return KVC_CHECK_COS_SIN_ROW;
    inf->value = inf->slot;
    if (inf->slot / a->kv_block_size >= a->num_pages) return KVC_CHECK_SLOT;
    return KVC_CHECK_NONE;
}

#endif /* KVC_CHECK_H */
