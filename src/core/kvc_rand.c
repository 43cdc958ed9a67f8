/* kvc_rand.c -- kvc-rand v1 (SPEC 5) and the case builder. */
#define _DEFAULT_SOURCE /* madvise under -std=c11 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "kvc_canon.h"
#include "kvc_internal.h"
#include "kvcompress_rand.h"

/* splitmix64's output function; the exported kvc_rand_splitmix64 is this,
 * and the generator's loops call it here, where it inlines (the exported
 * symbol can be interposed, so a shared library's calls to it cannot). */
static inline uint64_t mix64(uint64_t x) {
    uint64_t z = x + UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}
uint64_t kvc_rand_splitmix64(uint64_t x) { return mix64(x); }

static uint64_t rand_base(uint64_t seed, uint64_t stream) {
    return mix64(seed ^ (stream * UINT64_C(0xD1B54A32D192ED03)));
}

uint64_t kvc_rand_u64(uint64_t seed, uint64_t stream, uint64_t i) { return mix64(rand_base(seed, stream) + i); }

static float f32_of(uint64_t u) { return (float)((int64_t)(u >> 40) - 8388608) * 0x1p-21f; }

float kvc_rand_f32(uint64_t seed, uint64_t stream, uint64_t i) { return f32_of(kvc_rand_u64(seed, stream, i)); }

/* Elements [0, n) of stream `stream` as kvc_rand_f32 gives them, times
 * `scale` (a power of two: exact). */
static void fill_f32(float *out, int64_t n, uint64_t seed, uint64_t stream, float scale) {
    const uint64_t base = rand_base(seed, stream);
    for (int64_t i = 0; i < n; i++) out[i] = f32_of(mix64(base + (uint64_t)i)) * scale;
}

uint64_t kvc_rand_checksum(const void *data, size_t bytes) {
    const unsigned char *p = data;
    uint64_t sum = 0;
    size_t i = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= bytes; i += 8) { /* a little-endian word is its bytes as loaded */
        uint64_t w;
        memcpy(&w, p + i, 8);
        sum += w;
    }
#endif
    for (; i < bytes; i += 8) {
        uint64_t w = 0;
        for (size_t k = 0; k < 8 && i + k < bytes; k++) w |= (uint64_t)p[i + k] << (8 * k);
        sum += w;
    }
    return sum;
}

void kvc_advise_huge_pages(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t pg = 4096, a = ((uintptr_t)p + pg - 1) & ~(pg - 1), e = ((uintptr_t)p + bytes) & ~(pg - 1);
    if (e > a) (void)madvise((void *)a, e - a, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

void kvc_case_free(kvc_case *c) {
    if (!c) return;
    free(c->state_cache);
    free(c->token_to_req);
    free(c->positions);
    free(c->kv_slot_mapping);
    free(c->boundary_token_indices);
    free(c->block_table);
    free(c->rms_norm_weight);
    free(c->cos_sin_cache);
    free(c->kv_cache);
    free(c->state_bf16);
    free(c->score_bias);
    memset(c, 0, sizeof *c);
}

typedef struct {
    const kvc_case_params *p;
    float *state;
    size_t begin, end;
    int64_t width;
    const int16_t *shift; /* [width]: exponent shift by column of a row (values: by dim; scores: score_shift) */
} fill_job;

/* f * 2^sh rounded once, as ldexpf: one multiply where 2^sh is a binary32
 * (-149 <= sh <= 127: the product is exact, or the correctly rounded
 * subnormal, zero or Inf), ldexpf past that. */
static float times_pow2(float f, int sh) {
    if (sh < -149 || sh > 127) return ldexpf(f, sh);
    uint32_t bits = sh >= -126 ? (uint32_t)(sh + 127) << 23 : UINT32_C(1) << (sh + 149);
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return f * scale;
}

static void *fill_state(void *arg) {
    const fill_job *j = arg;
    const uint64_t base = rand_base(j->p->seed, 0);
    const size_t width = (size_t)j->width;
    float *const state = j->state;
    const int16_t *const shift = j->shift;
    /* element n is column n % width of its row: walked row by row */
    size_t n = j->begin, col = n % width;
    while (n < j->end) {
        const size_t stop = n + (width - col) < j->end ? n + (width - col) : j->end;
        for (; n < stop; n++, col++) {
            const float f = f32_of(mix64(base + n));
            state[n] = shift[col] ? times_pow2(f, shift[col]) : f;
        }
        col = 0;
    }
    return NULL;
}

/* A case's dimensions, from validated parameters (every product checked). */
typedef struct {
    int64_t R, per_req, bs, C, bpr, nblocks, width, S, nout, pages;
    int64_t P0, lo_blk, nb_req, max_pos; /* first position; first logical block held; blocks held a request */
    int64_t D;                            /* head width: 512 or 128 */
    uint64_t state_elems, kv_bytes, host_bytes;
} case_dims;

/* a * b + c for non-negative operands, or 0 with *ok cleared where it passes 2^63 - 1. */
static int64_t muladd(int64_t a, int64_t b, int64_t c, int *ok) {
    if (!*ok || (b && a > (INT64_MAX - c) / b)) {
        *ok = 0;
        return 0;
    }
    return a * b + c;
}

static kvc_status case_dims_of(const kvc_case_params *p, case_dims *d) {
    if (p->num_reqs < 1 || p->num_reqs > INT32_MAX)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "num_reqs = %lld outside [1, 2^31 - 1]", (long long)p->num_reqs);
    if (p->total_tokens < 1 || p->total_tokens % p->num_reqs != 0)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "total_tokens = %lld must be a positive multiple of num_reqs = %lld",
                        (long long)p->total_tokens, (long long)p->num_reqs);
    if (p->compress_ratio < 1)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "compress_ratio = %lld < 1", (long long)p->compress_ratio);
    if (p->block_size < 1)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "block_size = %lld < 1", (long long)p->block_size);
    if ((unsigned)p->nope_format > KVC_INDEXER_MXFP4)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "nope_format = %d is not a kvc_nope_format", (int)p->nope_format);
    if ((unsigned)p->state_dtype > KVC_STATE_BFLOAT16)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "state_dtype = %d is not a kvc_state_dtype", (int)p->state_dtype);
    if (p->kv_block_size < 0 || p->kv_block_size > INT64_MAX / KVC_SLOT_BYTES)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "kv_block_size = %lld outside [0, 2^63 / 584] (0 = 64)",
                        (long long)p->kv_block_size);
    if (p->score_shift < -1000 || p->score_shift > 1000)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "score_shift = %d outside [-1000, 1000]", p->score_shift);
    if (p->num_value_shifts < 0 || p->num_value_shifts > KVC_CASE_MAX_SHIFTS)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "num_value_shifts = %d outside [0, %d]", p->num_value_shifts,
                        KVC_CASE_MAX_SHIFTS);
    for (int k = 0; k < p->num_value_shifts; k++)
        if (p->value_shifts[k].shift < -1000 || p->value_shifts[k].shift > 1000)
            return kvc_fail(KVC_ERROR_BAD_PARAMETER, "value_shifts[%d].shift = %d outside [-1000, 1000]", k,
                            p->value_shifts[k].shift);
    if (p->num_poison < 0 || (p->num_poison > 0 && !p->poison))
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "num_poison = %d with poison = %p", p->num_poison,
                        (const void *)p->poison);
    d->R = p->num_reqs;
    d->per_req = p->total_tokens / d->R;
    d->bs = p->block_size;
    d->C = p->compress_ratio;
    if (p->first_position < 0 || p->first_position > INT64_MAX / 4 - d->per_req)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "first_position = %lld outside [0, 2^61 - tokens a request]",
                        (long long)p->first_position);
    d->P0 = p->first_position;
    d->max_pos = d->P0 + d->per_req;
    /* the table covers positions 0 .. max_pos - 1; the state holds the blocks
     * from the first window's reach (2C rows back) on */
    d->bpr = d->max_pos / d->bs + (d->max_pos % d->bs != 0);
    d->lo_blk = (d->P0 / 2 > d->C ? d->P0 - 2 * d->C : 0) / d->bs; /* (2C past int64 for a huge C) */
    d->nb_req = d->bpr - d->lo_blk;
    if (p->head_dim != 0 && p->head_dim != 128 && p->head_dim != 512)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "head_dim = %lld: expected 0 (512), 128 or 512", (long long)p->head_dim);
    d->D = p->head_dim ? p->head_dim : 512;
    d->width = p->overlap == KVC_OVERLAP_ON ? 4 * d->D : 2 * d->D;
    d->S = p->kv_block_size ? p->kv_block_size : 64;
    /* boundaries: positions P0 + k with (P0 + k + 1) % C == 0 */
    d->nout = ((d->max_pos / d->C) - (d->P0 / d->C)) * d->R; /* <= total_tokens */
    d->pages = d->nout / d->S + (d->nout % d->S != 0);
    int ok = 1;
    d->nblocks = muladd(d->R, d->nb_req, 0, &ok);
    if (ok && d->nblocks > (int64_t)INT32_MAX + 1)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "%lld state blocks: the block table holds int32 block numbers",
                        (long long)d->nblocks);
    const int64_t elems = muladd(muladd(d->nblocks, d->bs, 0, &ok), d->width, 0, &ok);
    const int64_t state_bytes = muladd(elems, p->state_dtype == KVC_STATE_BFLOAT16 ? 6 : 4, 0, &ok);
    const int64_t kv_bytes = muladd(muladd(d->pages, d->S, 0, &ok), kvc_slot_bytes(p->nope_format), 0, &ok);
    int64_t host = muladd(p->total_tokens, 4 + 8 + 8, state_bytes, &ok); /* t2r, positions, slots */
    host = muladd(d->nout, 8, host, &ok);
    host = muladd(muladd(d->R, d->bpr, 0, &ok), 4, host, &ok);
    host = muladd(d->max_pos, 64 * 4, host, &ok);
    host = muladd(1, kv_bytes, host + 1024, &ok);
    if (p->score_bias) host = muladd(muladd(d->C, d->width / 2, 0, &ok), 4, host, &ok);
    if (!ok || (uint64_t)host > SIZE_MAX)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "a case of %lld tokens (block_size %lld, kv_block_size %lld) needs "
                        "more bytes than this machine can address", (long long)p->total_tokens,
                        (long long)p->block_size, (long long)d->S);
    d->state_elems = (uint64_t)elems;
    d->kv_bytes = (uint64_t)kv_bytes;
    d->host_bytes = (uint64_t)host;
    return KVC_OK;
}

kvc_status kvc_case_host_bytes(const kvc_case_params *p, uint64_t *bytes) {
    if (!p || !bytes) return kvc_fail(KVC_ERROR_NULL_POINTER, "%s = NULL", p ? "bytes" : "params");
    case_dims d;
    const kvc_status st = case_dims_of(p, &d);
    *bytes = st == KVC_OK ? d.host_bytes : 0;
    return st;
}

kvc_status kvc_case_generate(const kvc_case_params *p, int threads, kvc_case *out) {
    if (!out) return kvc_fail(KVC_ERROR_NULL_POINTER, "out = NULL");
    memset(out, 0, sizeof *out);
    if (!p) return kvc_fail(KVC_ERROR_NULL_POINTER, "params = NULL");
    case_dims d;
    const kvc_status st = case_dims_of(p, &d);
    if (st != KVC_OK) return st;
    const int64_t R = d.R, per_req = d.per_req, bs = d.bs, C = d.C, bpr = d.bpr, nblocks = d.nblocks;
    const int64_t P0 = d.P0, lo_blk = d.lo_blk, nb_req = d.nb_req, max_pos = d.max_pos;
    const int64_t width = d.width, S = d.S, nout = d.nout, pages = d.pages;

    out->state_elems = (size_t)d.state_elems;
    out->kv_cache_bytes = (size_t)d.kv_bytes;
    out->state_cache = malloc(out->state_elems * sizeof(float));
    if (p->huge_pages && out->state_cache) kvc_advise_huge_pages(out->state_cache, out->state_elems * sizeof(float));
    out->token_to_req = malloc((size_t)p->total_tokens * sizeof(int32_t));
    out->positions = malloc((size_t)p->total_tokens * sizeof(int64_t));
    out->kv_slot_mapping = malloc((size_t)p->total_tokens * sizeof(int64_t));
    out->boundary_token_indices = malloc((size_t)(nout ? nout : 1) * sizeof(int64_t));
    out->block_table = malloc((size_t)(R * bpr) * sizeof(int32_t));
    int32_t *perm = malloc((size_t)nblocks * sizeof(int32_t));
    out->rms_norm_weight = malloc(512 * sizeof(uint16_t));
    out->cos_sin_cache = malloc((size_t)max_pos * 64 * sizeof(float));
    out->kv_cache = calloc(out->kv_cache_bytes ? out->kv_cache_bytes : 1, 1);
    const int bf16 = p->state_dtype == KVC_STATE_BFLOAT16;
    if (bf16) out->state_bf16 = malloc(out->state_elems * sizeof(uint16_t) + 2);
    if (p->score_bias) out->score_bias = malloc((size_t)(C * (width / 2)) * sizeof(float));
    if (!out->state_cache || !out->token_to_req || !out->positions || !out->kv_slot_mapping ||
        !out->boundary_token_indices || !out->block_table || !out->rms_norm_weight || !out->cos_sin_cache ||
        !out->kv_cache || !perm || (bf16 && !out->state_bf16) || (p->score_bias && !out->score_bias)) {
        free(perm);
        kvc_case_free(out);
        return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "no memory for a case of %lld tokens", (long long)p->total_tokens);
    }

    /* state cache, in parallel chunks (values do not depend on the split) */
    int nt = threads > 0 ? threads : kvc_cpu_default_threads();
    if (nt > 64) nt = 64;
    int shifts[512] = {0}; /* by value dim */
    for (int k = 0; k < p->num_value_shifts; k++)
        for (int64_t dd = p->value_shifts[k].lo; dd < p->value_shifts[k].hi && dd < d.D; dd++)
            if (dd >= 0) shifts[dd] = p->value_shifts[k].shift;
    int16_t shift[2048]; /* by column: width <= 4 x 512 */
    for (int64_t col = 0; col < width; col++)
        shift[col] = (int16_t)(col >= width / 2 ? p->score_shift : shifts[col % d.D]);
    fill_job jobs[64];
    pthread_t tids[64];
    for (int t = 0; t < nt; t++) {
        fill_job *j = &jobs[t];
        j->p = p;
        j->state = out->state_cache;
        j->width = width;
        j->begin = out->state_elems * (size_t)t / (size_t)nt;
        j->end = out->state_elems * (size_t)(t + 1) / (size_t)nt;
        j->shift = shift;
    }
    int started = 0;
    for (; started < nt - 1; started++)
        if (pthread_create(&tids[started], NULL, fill_state, &jobs[started + 1]) != 0) break;
    for (int t = started + 1; t < nt; t++) fill_state(&jobs[t]); /* threads that did not start */
    fill_state(&jobs[0]);
    for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);

    /* block table */
    for (int64_t i = 0; i < nblocks; i++) perm[i] = (int32_t)i;
    if (p->shuffle)
        for (int64_t i = nblocks - 1; i >= 1; i--) {
            int64_t j = (int64_t)(kvc_rand_u64(p->seed, 1, (uint64_t)i) % (uint64_t)(i + 1));
            int32_t tmp = perm[i];
            perm[i] = perm[j];
            perm[j] = tmp;
        }
    /* request r's logical block l >= lo_blk is its held block l - lo_blk;
     * the blocks before (no window reads them) name its first held block */
    for (int64_t r = 0; r < R; r++)
        for (int64_t l = 0; l < bpr; l++)
            out->block_table[r * bpr + l] = perm[r * nb_req + (l >= lo_blk ? l - lo_blk : 0)];
    free(perm);
    for (int d = 0; d < 512; d++)
        out->rms_norm_weight[d] = kvc_bf16_bits(1.0f + kvc_rand_f32(p->seed, 2, (uint64_t)d) * 0x1p-4f);
    fill_f32(out->cos_sin_cache, max_pos * 64, p->seed, 3, 0.25f);

    int64_t o = 0;
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < per_req; k++) {
            int64_t t = r * per_req + k;
            out->token_to_req[t] = (int32_t)r;
            out->positions[t] = P0 + k;
            out->kv_slot_mapping[t] = -1;
            if ((P0 + k + 1) % C == 0) {
                out->kv_slot_mapping[t] = o;
                out->boundary_token_indices[o++] = t;
            }
        }

    for (int i = 0; i < p->num_poison; i++) {
        const kvc_case_poison *q = &p->poison[i];
        if (q->req < 0 || q->req >= R || q->pos < 0 || q->pos >= per_req || q->col < 0 || q->col >= width) {
            kvc_case_free(out);
            return kvc_fail(KVC_ERROR_BAD_PARAMETER, "poison[%d] = (%lld, %lld, %lld) out of range", i,
                            (long long)q->req, (long long)q->pos, (long long)q->col);
        }
        int64_t blk = out->block_table[q->req * bpr + (P0 + q->pos) / bs];
        out->state_cache[(blk * bs + (P0 + q->pos) % bs) * width + q->col] = q->value;
    }
    /* SPEC 10: a bf16 state is bf16_rne of the binary32 one, poison included */
    for (size_t i = 0; bf16 && i < out->state_elems; i++) out->state_bf16[i] = kvc_bf16_bits(out->state_cache[i]);
    if (p->score_bias) fill_f32(out->score_bias, C * (width / 2), p->seed, 4, 0.5f);

    kvc_args *a = &out->args;
    kvc_args_init(a);
    a->state_cache = bf16 ? (const float *)(const void *)out->state_bf16 : out->state_cache;
    a->state_dtype = p->state_dtype;
    a->head_dim = d.D;
    a->rotate = p->rotate;
    a->score_bias = out->score_bias;
    a->num_blocks = nblocks;
    a->block_size = bs;
    a->state_width = width;
    a->token_to_req = out->token_to_req;
    a->positions = out->positions;
    a->kv_slot_mapping = out->kv_slot_mapping;
    a->num_tokens = p->total_tokens;
    a->boundary_token_indices = out->boundary_token_indices;
    a->num_outputs = nout;
    a->block_table = out->block_table;
    a->num_reqs = R;
    a->blocks_per_req = bpr;
    a->rms_norm_weight = out->rms_norm_weight;
    a->cos_sin_cache = out->cos_sin_cache;
    a->max_pos = max_pos;
    a->kv_cache = out->kv_cache;
    a->num_pages = pages;
    a->page_stride = S * kvc_slot_bytes(p->nope_format);
    a->kv_block_size = S;
    a->compress_ratio = C;
    a->nope_format = p->nope_format;
    a->overlap = p->overlap;
    a->cos_sin_layout = p->cos_sin_layout;
    return KVC_OK;
}
