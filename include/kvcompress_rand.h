/*
 * kvcompress_rand.h -- kvc-rand v1, the deterministic input generator of the
 * contract (docs/CONTRACT.md section 5), and a case builder on top of it that owns host
 * tensors and fills a kvc_args.  Used by the tests, the CLI and the Python
 * package; handy for anyone who wants reproducible inputs.
 */
#ifndef KVCOMPRESS_RAND_H
#define KVCOMPRESS_RAND_H

#include "kvcompress.h"

#ifdef __cplusplus
extern "C" {
#endif

/** splitmix64 of the generator. */
KVC_API uint64_t kvc_rand_splitmix64(uint64_t x);
/** u64(seed, stream, i) = splitmix64(base(seed, stream) + i). */
KVC_API uint64_t kvc_rand_u64(uint64_t seed, uint64_t stream, uint64_t i);
/** f32(seed, stream, i): exact multiple of 2^-21 in [-4, 4). */
KVC_API float kvc_rand_f32(uint64_t seed, uint64_t stream, uint64_t i);

/** Checksum of the manifests: little-endian uint64 words (zero-padded) summed mod 2^64. */
KVC_API uint64_t kvc_rand_checksum(const void *data, size_t bytes);

#define KVC_CASE_MAX_SHIFTS 8

/** One poisoned state element (applied after everything else). */
typedef struct kvc_case_poison {
    int64_t req, pos, col;
    float value; /* NaN, +Inf or -Inf */
} kvc_case_poison;

/** Parameters of a generated case (zero-initialise, then set). */
typedef struct kvc_case_params {
    int64_t num_reqs;        /* total_tokens must be a multiple of it       */
    int64_t total_tokens;
    int64_t compress_ratio;
    int64_t block_size;
    int shuffle;             /* 0: contiguous block table, 1: shuffled      */
    uint64_t seed;
    int score_shift;         /* scores multiplied by 2^score_shift, [-1000, 1000] */
    int64_t kv_block_size;   /* 0 = 64                                      */
    kvc_nope_format nope_format;
    kvc_overlap overlap;
    kvc_cos_sin_layout cos_sin_layout;
    int num_value_shifts;    /* value_shift_dims entries                    */
    struct { int64_t lo, hi; int shift; } value_shifts[KVC_CASE_MAX_SHIFTS];
    int num_poison;
    const kvc_case_poison *poison;
    int huge_pages;          /* 1: the state cache advised onto transparent
                              * huge pages (Linux), as numpy does for large
                              * arrays; still malloc'd, so 16 bytes into a page */
    int64_t first_position;  /* position of each request's first token (0:
                              * the contract's cases).  Decode-shaped calls:
                              * tokens at first_position .. + tokens/reqs - 1,
                              * a block table over positions 0 .. the last,
                              * the state holding only the blocks from 2C
                              * positions before first_position on (the
                              * earlier entries name the first of them) */
    int64_t head_dim;        /* D of the contract's section 9: 0 (= 512) or
                              * 128; state rows 2D floats (overlap 4D) */
    kvc_rotation rotate;     /* section 9's rotation (head width 128)       */
    kvc_state_dtype state_dtype; /* BFLOAT16: args.state_cache points at
                              * state_bf16, bf16_rne of state_cache (SPEC 10) */
    int score_bias;          /* 1: args.score_bias = the case's score_bias,
                              * element n = f32(seed, 4, n) * 0.5 (SPEC 10) */
} kvc_case_params;

/** A generated case: owned host tensors plus args pointing at them. */
typedef struct kvc_case {
    kvc_args args;           /* ready for kvc_compress (kv_cache zeroed)    */
    float *state_cache;      /* [num_blocks][block_size][state_width]       */
    int32_t *token_to_req;   /* [num_tokens]                                */
    int64_t *positions;      /* [num_tokens]                                */
    int64_t *kv_slot_mapping;/* [num_tokens]                                */
    int64_t *boundary_token_indices; /* [num_outputs]                       */
    int32_t *block_table;    /* [num_reqs][blocks_per_req]                  */
    uint16_t *rms_norm_weight;   /* [512] (a head width of 128 uses the first 128) */
    float *cos_sin_cache;    /* [max_pos][64]                               */
    uint8_t *kv_cache;       /* [num_pages][page_stride]                    */
    size_t state_elems, kv_cache_bytes;
    uint16_t *state_bf16;    /* [state_elems] bf16 bits of state_cache, or NULL (float32 state) */
    float *score_bias;       /* [C][state_width / 2], or NULL               */
} kvc_case;

/**
 * kvc_case_generate() -- build the case of docs/CONTRACT.md section 5.
 * @return KVC_OK, KVC_ERROR_BAD_PARAMETER (message says which) or
 *         KVC_ERROR_OUT_OF_MEMORY.  On error *out is zeroed and owns nothing.
 * @param threads  generator threads (0 = all cores); output does not depend on it.
 */
KVC_API kvc_status kvc_case_generate(const kvc_case_params *params, int threads, kvc_case *out);
/**
 * kvc_case_host_bytes() -- check params as kvc_case_generate() does (every
 * size and product, without allocating or generating anything) and give the
 * host bytes a case of them allocates.
 * @return KVC_OK, KVC_ERROR_NULL_POINTER or KVC_ERROR_BAD_PARAMETER (message
 *         says which parameter); *bytes is 0 on error.
 */
KVC_API kvc_status kvc_case_host_bytes(const kvc_case_params *params, uint64_t *bytes);
/** kvc_case_free() -- release what kvc_case_generate allocated (NULL ok). */
KVC_API void kvc_case_free(kvc_case *c);
/**
 * kvc_advise_huge_pages() -- ask the OS to back the whole pages inside
 * [p, p + bytes) with transparent huge pages (Linux `madvise(MADV_HUGEPAGE)`;
 * a no-op elsewhere or where it is refused).  Call before the first touch.
 */
KVC_API void kvc_advise_huge_pages(void *p, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif
