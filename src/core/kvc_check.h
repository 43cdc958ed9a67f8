/*
 * kvc_check.h -- per-output index checks of the contract (SPEC 2.3) and the
 * address arithmetic, shared by the host validator and the CPU backend (C),
 * the CUDA kernel and the OpenCL kernel.  The checks read only the index
 * tensors, and only at indices already proven in range.  All arithmetic is
 * 64-bit.
 */
#ifndef KVC_CHECK_H
#define KVC_CHECK_H

#include "kvc_canon.h"
#if !defined(__OPENCL_VERSION__)
#include "kvcompress.h"
#endif

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

/* The general GPU kernel (kvc_general.h): outputs per group at most (head
 * width 128: 4 x 128 threads; head width 512: one output a group). */
#define KVC_GEN_K_MAX 4

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

/**
 * Every scalar of a call (sizes, strides, settings), resolved: no zero
 * strides.  Plain 64-bit fields, so the same struct is an OpenCL kernel
 * argument.  Enums are stored as integers.
 */
typedef struct kvc_shape {
    kvc_i64 num_blocks, block_size, state_width, state_stride_block, state_stride_token;
    kvc_i64 num_tokens, num_outputs, num_reqs, blocks_per_req, block_table_stride;
    kvc_i64 max_pos, cos_sin_stride, num_pages, page_stride, kv_block_size, compress_ratio;
    kvc_i64 nope_format, overlap, cos_sin_layout;
    kvc_i64 head_dim, rotate, state_bf16; /* SPEC 9, 10 (resolved: head_dim 128 or 512) */
    kvc_i64 score_bias_stride;            /* 0: no score bias                              */
    float rms_norm_eps, pad_;
} kvc_shape;

/** a / b for a >= 0, b > 0: a 32-bit division where both fit (a GPU's 64-bit
 * division is a long instruction sequence; the result is the same). */
KVC_FN kvc_i64 kvc_udiv(kvc_i64 a, kvc_i64 b) {
    if (((a | b) >> 31) == 0) return (kvc_i64)((unsigned)a / (unsigned)b);
    return a / b;
}

/** Element offset (floats) of the state row of position pos in physical block blk. */
KVC_FN kvc_i64 kvc_row_offset(kvc_i64 blk, kvc_i64 pos, kvc_i64 block_size, kvc_i64 stride_block,
                              kvc_i64 stride_token) {
    return blk * stride_block + (pos % block_size) * stride_token;
}

/** A slot format's payload and scale bytes (a page holds S payloads, then S
 * scale records): 576 + 8 (INT8, FP8), 128 + 4 (INDEXER_FP8), 64 + 4
 * (INDEXER_MXFP4). */
KVC_FN kvc_i64 kvc_payload_bytes(kvc_i64 fmt) { return fmt == KVC_FMT_IFP8 ? 128 : fmt == KVC_FMT_MXFP4 ? 64 : 576; }
KVC_FN kvc_i64 kvc_scale_bytes(kvc_i64 fmt) { return fmt >= KVC_FMT_IFP8 ? 4 : 8; }
KVC_FN kvc_i64 kvc_fmt_slot_bytes(kvc_i64 fmt) { return kvc_payload_bytes(fmt) + kvc_scale_bytes(fmt); }

/** Byte offsets in kv_cache of a slot's payload bytes and of its scale bytes. */
KVC_FN void kvc_slot_offsets_s(kvc_i64 slot, kvc_i64 S, kvc_i64 page_stride, kvc_i64 fmt, kvc_i64 *payload,
                               kvc_i64 *scales) {
    const kvc_i64 page = slot / S, s = slot - page * S, pb = kvc_payload_bytes(fmt);
    *payload = page * page_stride + s * pb;
    *scales = page * page_stride + S * pb + s * kvc_scale_bytes(fmt);
}

/**
 * Window row i of the output at boundary position p, head width D: its
 * position (< 0 = masked: value 0, score -Inf) and the element offsets of
 * its value and score halves inside the state row.  Overlap rows i < C are
 * the A halves of p-2C+1+i, rows i >= C the B halves of p-C+1+(i-C) (row
 * [vA | vB | sA | sB]); otherwise row i is position p-C+1+i with values at
 * 0 and scores at D.  A score's index in the row's score half (score_bias's
 * k, SPEC 10) is its dim plus so - kvc_score_delta(overlap, D).
 */
KVC_FN kvc_i64 kvc_window_row(kvc_i64 p, kvc_i64 C, int overlap, int D, kvc_i64 i, int *vo, int *so) {
    if (!overlap) {
        *vo = 0;
        *so = D;
        return p - C + 1 + i;
    }
    const int first = i < C;
    *vo = first ? 0 : D;
    *so = first ? 2 * D : 3 * D;
    return first ? p - 2 * C + 1 + i : p - C + 1 + (i - C);
}

/** kvc_row_lookup's results besides an offset. */
#define KVC_ROW_MASKED (-1) /* masked overlap row: value 0, score -Inf       */
#define KVC_ROW_BAD (-2)    /* its physical block is outside [0, num_blocks) */

/** Score half - value half of a window row, in elements (kvc_window_row's so - vo). */
KVC_FN kvc_i64 kvc_score_delta(int overlap, int D) { return overlap ? 2 * D : D; }

/** Element offset in score_bias (row stride `stride`) of the bias row a
 * window row of position pos and score-half offset so (kvc_window_row)
 * adds to its scores: row pos mod C, from the score's index in the row's
 * score half (SPEC 10). */
KVC_FN kvc_i64 kvc_bias_offset(kvc_i64 pos, kvc_i64 C, kvc_i64 stride, int so, int overlap, int D) {
    return (pos % C) * stride + (so - kvc_score_delta(overlap, D));
}

/**
 * The one row lookup of every backend: window row i of the output at
 * boundary position p whose request's block-table row is trow.  @return the
 * element offset in state_cache of the row's value half (its scores are
 * kvc_score_delta() further), KVC_ROW_MASKED, or KVC_ROW_BAD (*blk then holds
 * the offending block; *blk is set whenever the row is not masked).
 */
KVC_FN kvc_i64 kvc_row_lookup(const kvc_shape *sh, KVC_GLOBAL const kvc_i32 *trow, kvc_i64 p, kvc_i64 i,
                              kvc_i64 *blk) {
    int vo, so;
    const kvc_i64 pos = kvc_window_row(p, sh->compress_ratio, sh->overlap != 0, (int)sh->head_dim, i, &vo, &so);
    if (pos < 0) return KVC_ROW_MASKED;
    const kvc_i64 l = kvc_udiv(pos, sh->block_size);
    const kvc_i64 g = trow[l];
    *blk = g;
    if (g < 0 || g >= sh->num_blocks) return KVC_ROW_BAD;
    return g * sh->state_stride_block + (pos - l * sh->block_size) * sh->state_stride_token + vo;
}

/**
 * Chunk j of a window of nseg segments cut for chunk size ch (a power of
 * two): floor(nseg / ch) chunks of ch segments, then one chunk per set bit of
 * nseg % ch, largest first.  Every chunk is a complete, aligned subtree of
 * the canonical tree, so chunk states merged with a binary counter over
 * their sizes give the canonical result.
 */
KVC_FN void kvc_chunk_of(kvc_i64 nseg, kvc_i64 ch, kvc_i64 j, kvc_i64 *start, kvc_i64 *size) {
    const kvc_i64 full = nseg / ch;
    if (j < full) {
        *start = j * ch;
        *size = ch;
        return;
    }
    kvc_i64 s = full * ch, rem = nseg - s, k = j - full;
    for (kvc_i64 bit = ch >> 1; bit >= 1; bit >>= 1) {
        if (rem & bit) {
            if (k == 0) {
                *start = s;
                *size = bit;
                return;
            }
            k--;
            s += bit;
        }
    }
    *start = s; /* unreachable for valid j */
    *size = 1;
}

/** Number of chunks kvc_chunk_of cuts a window of nseg segments into. */
KVC_FN kvc_i64 kvc_chunk_count(kvc_i64 nseg, kvc_i64 ch) {
    kvc_i64 n = nseg / ch;
    for (kvc_i64 r = nseg % ch; r; r &= r - 1) n++;
    return n;
}

/** Rows of a window: C, or 2C with overlap. */
KVC_FN kvc_i64 kvc_window_rows(kvc_i64 C, int overlap) { return overlap ? 2 * C : C; }

/**
 * The GPU backends' chunk size for num_outputs windows of nseg segments: a
 * power of two near total segments / div (about one wave of CTAs or
 * work-groups, so prologues and merges spread over long chunks), at least 4,
 * doubled until an output has at most max_chunks chunks, at most max_ch, and
 * no larger than the window.
 */
KVC_FN kvc_i64 kvc_chunk_size(kvc_i64 num_outputs, kvc_i64 nseg, kvc_i64 div, kvc_i64 max_chunks, kvc_i64 max_ch) {
    const kvc_i64 want = num_outputs * nseg / div;
    kvc_i64 ch = 1;
    while (ch * 2 <= want) ch *= 2;
    if (ch < 4) ch = 4;
    while (ch * max_chunks < nseg && ch < max_ch) ch *= 2;
    if (ch > max_ch) ch = max_ch;
    while (ch > 1 && ch > nseg) ch /= 2;
    return ch;
}

/**
 * The plan of one call on a GPU backend: the window's shape, its chunking
 * and the kernel it takes, filled once by kvc_plan_make on the host and read
 * by the kernels (a CUDA kernel parameter, an OpenCL kernel argument: plain
 * 64-bit fields, the same layout in C, CUDA and OpenCL C).
 */
typedef struct kvc_plan {
    kvc_i64 rows;    /* window rows: C, or 2C with overlap                          */
    kvc_i64 nseg;    /* segments per window                                         */
    kvc_i64 ch;      /* full chunk size in segments (kvc_chunk_size)                */
    kvc_i64 nchunk;  /* chunks per output (kvc_chunk_count)                         */
    kvc_i64 full;    /* no overlap and whole segments: straight-line loads possible */
    kvc_i64 small_k; /* > 0: the one-segment kernel, outputs per CTA / work-group   */
    kvc_i64 groups;  /* CTAs / work-groups of the launch                            */
    kvc_i64 vec;     /* 8-byte (float2) row loads allowed: set by the backend       */
    kvc_i64 out_base;    /* kvc_compress_many: the set's first output's number (an
                          * error names output out_base + o), else 0            */
    kvc_i64 keep_status; /* kvc_compress_many, a set after the first: the status
                          * word holds earlier sets' counts (not zeroed)        */
} kvc_plan;

/** A backend's policy for kvc_plan_make (its tuning constants). */
typedef struct kvc_plan_policy {
    kvc_i64 chunk_div, max_chunks, max_ch; /* kvc_chunk_size's div, max_chunks, max_ch          */
    kvc_i64 slots;                         /* one-segment kernel: groups resident at once        */
    kvc_i64 small_kmax;                    /* one-segment kernel: outputs per group at most      */
    kvc_i64 small_min;                     /* one-segment kernel only beyond this many outputs   */
} kvc_plan_policy;

#if !defined(__OPENCL_VERSION__)
/**
 * Fill pl for num_outputs windows of ratio C.  Windows of one segment take
 * the one-segment kernel when there are more than pol->small_min outputs:
 * K outputs per group, balanced over whole waves (the fewest waves that
 * K <= small_kmax allows, then the smallest K that fills them: 32768 outputs
 * on 396 slots are 3 waves of K = 28, not 2.6 waves of K = 32).  pl->vec is
 * left 0 for the backend.
 */
KVC_FN void kvc_plan_make(kvc_i64 num_outputs, kvc_i64 C, int overlap, const kvc_plan_policy *pol, kvc_plan *pl) {
    pl->rows = kvc_window_rows(C, overlap);
    pl->nseg = kvc_num_segments(pl->rows);
    pl->ch = kvc_chunk_size(num_outputs, pl->nseg, pol->chunk_div, pol->max_chunks, pol->max_ch);
    pl->nchunk = kvc_chunk_count(pl->nseg, pl->ch);
    pl->full = !overlap && pl->rows % KVC_SEG == 0;
    pl->vec = 0;
    pl->out_base = pl->keep_status = 0;
    pl->small_k = 0;
    pl->groups = num_outputs * pl->nchunk;
    if (pl->nseg == 1 && num_outputs > pol->small_min) {
        const kvc_i64 per_wave = pol->slots * pol->small_kmax;
        const kvc_i64 waves = (num_outputs + per_wave - 1) / per_wave;
        const kvc_i64 k = (num_outputs + pol->slots * waves - 1) / (pol->slots * waves);
        pl->small_k = k < 1 ? 1 : k > pol->small_kmax ? pol->small_kmax : k;
        pl->groups = (num_outputs + pl->small_k - 1) / pl->small_k;
    }
}
#endif

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
KVC_FN int kvc_check_output_s(const kvc_shape *sh, KVC_GLOBAL const kvc_i64 *bidx, KVC_GLOBAL const kvc_i64 *slots,
                              KVC_GLOBAL const kvc_i32 *t2r, KVC_GLOBAL const kvc_i64 *positions,
                              KVC_GLOBAL const kvc_i32 *table, kvc_i64 o, kvc_out_info *inf, int check_blocks) {
    kvc_i64 b = bidx[o];
    inf->r = inf->p = inf->pc = inf->first = inf->aux = 0;
    inf->slot = -1;
    inf->b = b;
    inf->value = b;
    if (b < 0 || b >= sh->num_tokens) return KVC_CHECK_BOUNDARY;
    /* the three reads of token b are independent: issue them together (a GPU
     * then waits for one memory latency, not three) */
    const kvc_i64 slot = slots[b];
    const kvc_i64 r = t2r[b];
    const kvc_i64 p = positions[b];
    inf->slot = slot;
    if (slot < 0) return KVC_CHECK_NONE;
    inf->r = r;
    inf->value = r;
    if (r < 0 || r >= sh->num_reqs) return KVC_CHECK_REQUEST;
    const kvc_i64 C = sh->compress_ratio;
    inf->p = p;
    inf->value = p;
    if (p < C - 1) return KVC_CHECK_POSITION; /* p - C + 1 < 0, without overflow at INT64_MIN */
    const kvc_i64 bs = sh->block_size;
    const kvc_i64 last = p / bs;
    inf->value = last;
    if (last >= sh->blocks_per_req) return KVC_CHECK_LOGICAL_BLOCK;
    inf->first = kvc_window_first(p, C, sh->overlap != 0);
    for (kvc_i64 l = inf->first / bs; check_blocks && l <= last; l++) {
        kvc_i64 g = table[r * sh->block_table_stride + l];
        if (g < 0 || g >= sh->num_blocks) {
            inf->value = g;
            inf->aux = l;
            return KVC_CHECK_PHYSICAL_BLOCK;
        }
    }
    inf->pc = (p / C) * C;
    inf->value = inf->pc;
    if (inf->pc >= sh->max_pos) return KVC_CHECK_COS_SIN_ROW;
    inf->value = inf->slot;
    if (inf->slot / sh->kv_block_size >= sh->num_pages) return KVC_CHECK_SLOT;
    return KVC_CHECK_NONE;
}

#if !defined(__OPENCL_VERSION__)
/* C and CUDA: the same on a (resolved) kvc_args. */
KVC_FN kvc_shape kvc_shape_of(const kvc_args *a) {
    kvc_shape s;
    s.num_blocks = a->num_blocks;
    s.block_size = a->block_size;
    s.state_width = a->state_width;
    s.state_stride_block = a->state_stride_block;
    s.state_stride_token = a->state_stride_token;
    s.num_tokens = a->num_tokens;
    s.num_outputs = a->num_outputs;
    s.num_reqs = a->num_reqs;
    s.blocks_per_req = a->blocks_per_req;
    s.block_table_stride = a->block_table_stride;
    s.max_pos = a->max_pos;
    s.cos_sin_stride = a->cos_sin_stride;
    s.num_pages = a->num_pages;
    s.page_stride = a->page_stride;
    s.kv_block_size = a->kv_block_size;
    s.compress_ratio = a->compress_ratio;
    s.nope_format = a->nope_format;
    s.overlap = a->overlap;
    s.cos_sin_layout = a->cos_sin_layout;
    s.head_dim = a->head_dim;
    s.rotate = a->rotate;
    s.state_bf16 = a->state_dtype == KVC_STATE_BFLOAT16;
    s.score_bias_stride = a->score_bias ? a->score_bias_stride : 0; /* 0: no score bias */
    s.rms_norm_eps = a->rms_norm_eps;
    s.pad_ = 0.0f;
    return s;
}

KVC_FN int kvc_check_output(const kvc_args *a, kvc_i64 o, kvc_out_info *inf, int check_blocks) {
    const kvc_shape sh = kvc_shape_of(a);
    return kvc_check_output_s(&sh, a->boundary_token_indices, a->kv_slot_mapping, a->token_to_req, a->positions,
                              a->block_table, o, inf, check_blocks);
}

/**
 * Replace every 0 ("contiguous") stride of a, and a 0 head_dim, by the value
 * kvcompress.h gives it.  The one place these defaults are written:
 * kvc_check_shapes calls it (after checking that block_size *
 * state_stride_token and kv_block_size * slot bytes fit in int64, and the
 * format), and the test kit does, on its copies of a call.
 */
KVC_FN void kvc_resolve_strides(kvc_args *a) {
    if (a->head_dim == 0) a->head_dim = KVC_HEAD_DIM;
    if (a->score_bias_stride == 0) a->score_bias_stride = a->state_width / 2;
    if (a->state_stride_token == 0) a->state_stride_token = a->state_width;
    if (a->state_stride_block == 0) a->state_stride_block = a->block_size * a->state_stride_token;
    if (a->block_table_stride == 0) a->block_table_stride = a->blocks_per_req;
    if (a->cos_sin_stride == 0) a->cos_sin_stride = 64;
    if (a->page_stride == 0) a->page_stride = a->kv_block_size * kvc_fmt_slot_bytes(a->nope_format);
}

/** Bytes of one state_cache element: 4 (float32) or 2 (bf16). */
KVC_FN kvc_i64 kvc_state_elem_bytes(const kvc_args *a) { return a->state_dtype == KVC_STATE_BFLOAT16 ? 2 : 4; }

/** 1 where an OpenCL call needs what only its general and indexer kernels
 * have (SPEC 9, 10): head width 128, a bf16 state or a score bias (the
 * indexer kernel takes head width 128 with windows of one segment).
 * (CUDA's tuned kernels take the last two where they take the window:
 * cuda_backend.cu's plan_set.) */
KVC_FN int kvc_needs_general(const kvc_args *a) {
    return a->head_dim != KVC_HEAD_DIM || a->state_dtype != KVC_STATE_FLOAT32 || a->score_bias != 0;
}

KVC_FN kvc_i64 kvc_state_row_offset(const kvc_args *a, kvc_i64 blk, kvc_i64 pos) {
    return kvc_row_offset(blk, pos, a->block_size, a->state_stride_block, a->state_stride_token);
}

KVC_FN void kvc_slot_offsets(const kvc_args *a, kvc_i64 slot, kvc_i64 *payload, kvc_i64 *scales) {
    kvc_slot_offsets_s(slot, a->kv_block_size, a->page_stride, a->nope_format, payload, scales);
}

/**
 * 1 where the GPU slice kernels' branch-free prologue has a target: it
 * clamps the boundary token into [0, num_tokens), the request into [0,
 * num_reqs) and the position into [C - 1, blocks_per_req x block_size),
 * and a bad block's lanes load row 0 of block 0.  The CUDA and OpenCL hosts
 * take the slice kernels only where this holds.
 */
KVC_FN int kvc_slice_clamps_ok(const kvc_args *a) {
    return a->num_tokens >= 1 && a->num_reqs >= 1 && a->num_blocks >= 1 &&
           a->blocks_per_req <= INT64_MAX / a->block_size && a->blocks_per_req * a->block_size >= a->compress_ratio;
}

/* The GPU kernels' per-output records (floats), the same in CUDA and OpenCL:
 * a slice record of C = 128 (c[512] and the 8 slices' RMS sums) and a chunk
 * state (m, den, num of the 512 dims). */
#define KVC_SLICE_REC 520
#define KVC_CHUNK_STATE 1536

/** The workspace a GPU call needs, in bytes, for both GPU backends. */
typedef struct kvc_ws_plan {
    kvc_i64 tickets;   /* chunked kernels with > 1 chunk a window: an arrival counter per output      */
    kvc_i64 states;    /* chunk states [outputs][nchunk]; slice kernels with 1 chunk: slice records  */
    kvc_i64 slice_bad; /* slice kernels: 8 bad-block words per (output, chunk, 64-dim slice)         */
} kvc_ws_plan;

/** Fill w for num_outputs windows of plan pl, on the slice kernels or not. */
KVC_FN void kvc_ws_plan_make(const kvc_plan *pl, kvc_i64 num_outputs, int slice, kvc_ws_plan *w) {
    w->tickets = !slice && pl->nchunk > 1 ? num_outputs * 4 : 0;
    w->states = slice ? num_outputs * (pl->nchunk == 1 ? KVC_SLICE_REC : pl->nchunk * KVC_CHUNK_STATE) * 4
                : pl->nchunk > 1 ? num_outputs * pl->nchunk * KVC_CHUNK_STATE * 4
                                 : 0;
    w->slice_bad = slice ? num_outputs * 64 * pl->nchunk : 0;
}

/**
 * The GPU backends' choice of the slice kernels (CUDA cuda_slice.cuh,
 * OpenCL kvc_slice.cl), made once here for both: windows of 16, 32 or 64
 * full segments (C = 128, 256, 512) without overlap, rows of 8-byte loads
 * (state_aligned8: the state starts on 8 bytes; even strides), at most
 * 2^31 / 64 outputs (the kernels' 32-bit group index: 8 slices x up to 4
 * chunks x 2 per output), and the prologue's clamps hold.  On success
 * pl->nchunk is the 16-segment chunks per window (1, 2 or 4).
 */
KVC_FN int kvc_plan_slice(const kvc_args *a, kvc_plan *pl, int state_aligned8) {
    const kvc_i64 n = pl->nseg;
    if (!(a->overlap == KVC_OVERLAP_OFF && pl->small_k == 0 && pl->rows == n * KVC_SEG &&
          (n == 16 || n == 32 || n == 64) && state_aligned8 && a->state_stride_block % 2 == 0 &&
          a->state_stride_token % 2 == 0 && a->num_outputs <= 0x7FFFFFFFLL / 64 && kvc_slice_clamps_ok(a)))
        return 0;
    pl->nchunk = n / 16;
    return 1;
}
#endif

#endif /* KVC_CHECK_H */
