/*
 * kvc_conform.c -- the conformance matrix (like ggml's test-backend-ops): one
 * backend over the golden cases, random shapes, the GPU-path shapes and
 * DeepSeek-V4's indexer shapes, each case byte for byte against the CPU
 * backend on an identically poisoned KV cache (the written slots and every
 * byte that must stay untouched), and the golden cases also against their
 * canonical bytes and, where the statement's reference exists, its SPEC 4 /
 * 7 conformance.  tests/test_backends.c and `kvcompress verify` both run it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvc_check.h"

/* n argument sets through the backend under test in one kvc_compress_many
 * call (host-resident args; GPU kits copy in and out).  The GPU's first
 * device-side error comes back as a status. */
static kvc_status run_backend(const kvc_conform_opts *o, const kvc_args *a, int n, kvc_report *rep, char *msg,
                              size_t len) {
    kvc_status st;
    if (o->backend == KVC_BACKEND_CPU) {
        kvc_exec ex;
        kvc_exec_init(&ex);
        ex.backend = KVC_BACKEND_CPU;
        ex.num_threads = o->threads;
        st = kvc_compress_many(a, n, &ex, rep);
    } else if (o->backend == KVC_BACKEND_CUDA) {
#ifdef KVC_KIT_WITH_CUDA
        st = kvc_kit_cuda_run_many(a, n, rep, NULL);
#else
        st = KVC_ERROR_BACKEND_UNAVAILABLE;
#endif
    } else {
#ifdef KVC_KIT_WITH_OPENCL
        st = kvc_kit_opencl_run_many(a, n, rep, NULL);
#else
        st = KVC_ERROR_BACKEND_UNAVAILABLE;
#endif
    }
    if (st != KVC_OK) snprintf(msg, len, "%s: %.300s", kvc_status_string(st), kvc_last_error_message());
    return st;
}

/* Slots 0 .. num_outputs - 1 as golden rows (the golden cases write output o to slot o). */
static uint8_t *slot_rows(const kvc_case *c) {
    const int64_t n = c->args.num_outputs, sb = kvc_slot_bytes(c->args.nope_format);
    uint8_t *rows = malloc((size_t)(n > 0 ? n : 1) * (size_t)sb);
    if (rows)
        for (int64_t o = 0; o < n; o++) kvc_kit_slot_row(&c->args, o, rows + o * sb);
    return rows;
}

/* The golden checks of one case: canonical bytes, then the reference's conformance. */
static int golden_bytes(const char *dir, const kvc_golden_case *g, const kvc_case *c, char *msg, size_t len) {
    char path[4096];
    size_t n = 0;
    uint8_t *rows = slot_rows(c), *canon, *ref = NULL;
    const size_t need = (size_t)c->args.num_outputs * (size_t)kvc_slot_bytes(c->args.nope_format);
    snprintf(path, sizeof path, "%s/%s/%s.canon.bin", dir, g->dir, g->name);
    canon = kvc_kit_read_file(path, &n);
    int bad = !rows || !canon || n != need || memcmp(rows, canon, n) != 0;
    if (bad && canon && n != need)
        snprintf(msg, len, "%.400s: %zu bytes, the manifest's %lld outputs need %lld", path, n,
                 (long long)c->args.num_outputs, (long long)need);
    else if (bad) snprintf(msg, len, "bytes differ from %.400s", path);
    if (!bad && g->has_ref) {
        snprintf(path, sizeof path, "%s/%s/%s.ref.bin", dir, g->dir, g->name);
        ref = kvc_kit_read_file(path, &n);
        int64_t differ;
        if (ref && n != need) {
            snprintf(msg, len, "%.400s: %zu bytes, the manifest's %lld outputs need %lld", path, n,
                     (long long)c->args.num_outputs, (long long)need);
            bad = 1;
        } else bad = !ref || kvc_kit_conforms(rows, ref, c->args.num_outputs, (int)g->params.nope_format, &differ,
                                       msg, len);
    }
    free(rows);
    free(canon);
    free(ref);
    return bad;
}

/* n cases: each through the CPU backend (all cores, a call each) and all
 * through the backend under test in one kvc_compress_many call, on the same
 * poison; every byte of each pair of KV caches equal, and the counts of
 * written, padding and non-finite outputs (summed over the cases; a GPU's
 * from its status word).  @return 0 = pass. */
static int cases_conform(const kvc_conform_opts *o, kvc_case *const *c, int n, uint64_t seed, char *msg,
                         size_t len) {
    uint8_t *want[KVC_MANY_MAX] = {0};
    kvc_args args[KVC_MANY_MAX];
    kvc_report want_rep = {0}, rep;
    memset(&rep, 0, sizeof rep);
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    int bad = 0;
    for (int i = 0; i < n && !bad; i++) {
        const size_t bytes = c[i]->kv_cache_bytes;
        want[i] = malloc(bytes ? bytes : 1);
        if (!want[i]) {
            snprintf(msg, len, "out of memory");
            bad = 1;
            break;
        }
        kvc_kit_poison(want[i], bytes, seed + 101 * (uint64_t)i);
        kvc_args ref = c[i]->args;
        ref.kv_cache = want[i];
        kvc_report r1;
        if (kvc_compress(&ref, &ex, &r1) != KVC_OK) {
            snprintf(msg, len, "CPU reference%s: %.300s", n > 1 ? " of a set" : "", kvc_last_error_message());
            bad = 1;
        }
        want_rep.outputs_written += r1.outputs_written;
        want_rep.outputs_padding += r1.outputs_padding;
        want_rep.outputs_nonfinite += r1.outputs_nonfinite;
        kvc_kit_poison(c[i]->kv_cache, bytes, seed + 101 * (uint64_t)i);
        args[i] = c[i]->args;
    }
    if (!bad) bad = run_backend(o, args, n, &rep, msg, len) != KVC_OK;
    if (!bad && (rep.outputs_written != want_rep.outputs_written || rep.outputs_padding != want_rep.outputs_padding ||
                 rep.outputs_nonfinite != want_rep.outputs_nonfinite)) {
        snprintf(msg, len, "counts written / padding / non-finite %lld / %lld / %lld, CPU %lld / %lld / %lld",
                 (long long)rep.outputs_written, (long long)rep.outputs_padding, (long long)rep.outputs_nonfinite,
                 (long long)want_rep.outputs_written, (long long)want_rep.outputs_padding,
                 (long long)want_rep.outputs_nonfinite);
        bad = 1;
    }
    for (int i = 0; i < n && !bad; i++) {
        const size_t bytes = c[i]->kv_cache_bytes;
        if (memcmp(c[i]->kv_cache, want[i], bytes) == 0) continue;
        size_t k = 0;
        while (c[i]->kv_cache[k] == want[i][k]) k++;
        kvc_args r = c[i]->args;
        kvc_resolve_strides(&r);
        const int64_t ps = r.page_stride;
        char set[24] = "";
        if (n > 1) snprintf(set, sizeof set, "set %d: ", i);
        snprintf(msg, len, "%skv_cache byte %zu (page %lld, offset %lld): 0x%02x, CPU 0x%02x", set, k,
                 (long long)(k / (size_t)ps), (long long)(k % (size_t)ps), c[i]->kv_cache[k], want[i][k]);
        bad = 1;
    }
    for (int i = 0; i < n; i++) free(want[i]);
    return bad;
}

static int one_case(const kvc_conform_opts *o, kvc_case *c, uint64_t seed, char *msg, size_t len) {
    return cases_conform(o, &c, 1, seed, msg, len);
}

static void report(const kvc_conform_opts *o, kvc_conform_result *r, int bad, const char *kind, const char *name,
                   const char *msg) {
    bad ? r->failed++ : r->passed++;
    FILE *f = o->log ? o->log : (bad ? stderr : NULL);
    if (f) fprintf(f, "%-4s %s %s %s\n", bad ? "FAIL" : "ok", kind, name, msg);
}

/* Generate case c (zeroed first, so that a failure leaves nothing to free)
 * from p, or from the spec string when p is NULL.  @return 1 with the
 * reason in msg on failure. */
static int make_case(const kvc_case_params *p, const char *spec, kvc_case *c, char *msg, size_t len) {
    kvc_case_params q;
    memset(c, 0, sizeof *c);
    if (!p) {
        if (kvc_kit_parse_spec(spec, &q, msg, len) != 0) return 1;
        p = &q;
    }
    if (kvc_case_generate(p, 0, c) == KVC_OK) return 0;
    snprintf(msg, len, "generate: %.300s", kvc_last_error_message());
    return 1;
}

/* The verify set: random shapes over C, block size, slots per page, requests,
 * padding tokens, layout, format, RoPE layout and overlap; a quarter of them
 * the indexer's head width 128 (either format, rotation or not), a quarter
 * with a score bias, a quarter with a bf16 state (SPEC 9, 10). */
static void random_params(int i, kvc_case_params *p) {
    static const long long Cs[] = {1, 3, 8, 100, 128, 256, 512, 1000}, bss[] = {1, 7, 8, 16, 64}, Ss[] = {1, 2, 64};
    memset(p, 0, sizeof *p);
    uint64_t u = kvc_rand_u64(4242, 7, (uint64_t)i);
    p->compress_ratio = Cs[u % 8];
    p->block_size = bss[(u >> 8) % 5];
    p->kv_block_size = Ss[(u >> 16) % 3];
    p->num_reqs = 1 + (int64_t)((u >> 24) % 3);
    p->total_tokens = p->num_reqs * (p->compress_ratio * (int64_t)(1 + (u >> 32) % 4) + (int64_t)((u >> 40) % 7));
    p->shuffle = (int)((u >> 48) & 1);
    p->nope_format = (kvc_nope_format)((u >> 49) & 1);
    p->cos_sin_layout = (kvc_cos_sin_layout)((u >> 50) & 1);
    p->overlap = p->compress_ratio <= 100 && ((u >> 51) & 1) ? KVC_OVERLAP_ON : KVC_OVERLAP_OFF;
    p->seed = 5000 + (uint64_t)i;
    const uint64_t v = kvc_rand_u64(4242, 8, (uint64_t)i);
    if ((v & 3) == 0) {
        p->nope_format = (v >> 2) & 1 ? KVC_INDEXER_MXFP4 : KVC_INDEXER_FP8;
        p->head_dim = 128;
        p->rotate = (v >> 3) & 1 ? KVC_ROTATE_HADAMARD : KVC_ROTATE_OFF;
    }
    p->score_bias = ((v >> 4) & 3) == 0;
    p->state_dtype = ((v >> 6) & 3) == 0 ? KVC_STATE_BFLOAT16 : KVC_STATE_FLOAT32;
}

/* The GPU-path shapes (the OpenCL chunk plans of 1..8 chunks of 4..32
 * segments; the CUDA one-segment, chunked and multi-chunk kernels, and the
 * slice kernel's row-table path: blocks of 12 and 4 rows, segments across
 * blocks; the one-segment kernels' windows of 6 and 3 rows), with a NaN
 * score and a padding output where marked. */
typedef struct {
    int64_t reqs, tokens, C, bs, S;
    int shuffle, fp8, nan, pad, overlap;
} path_shape;
static const path_shape k_paths[] = {
    {2, 512, 32, 8, 64, 1, 0, 1, 1, 0},   {1, 512, 128, 8, 64, 1, 0, 1, 1, 0}, {1, 1024, 512, 8, 2, 0, 1, 0, 0, 0},
    {1, 1024, 1024, 16, 64, 1, 0, 0, 1, 0}, {1, 2048, 2048, 8, 64, 1, 1, 0, 0, 0}, {3, 777, 4, 4, 64, 1, 1, 1, 1, 1},
    {2, 4096, 128, 64, 2, 1, 1, 0, 1, 0},   {2, 1024, 256, 12, 64, 1, 1, 1, 1, 0}, {1, 512, 128, 4, 64, 0, 0, 1, 1, 0},
    {2, 300, 3, 4, 64, 1, 1, 1, 1, 1},      {1, 200, 3, 8, 64, 0, 0, 0, 1, 0},
};

/* kvc_compress_many: decode-sized sets in one call -- a CSA layer's two
 * compressors (main and indexer; also for one request, whose first set has
 * one output), the three decode kernels of the GPUs (slice, one-segment,
 * general) together, the chunked kernel after the one-segment one -- with
 * a padding output in the last set where it has more than one. */
static const char *const k_many[][3] = {
    {"reqs=1,tokens=4,C=4,block=4,overlap=1,format=fp8,pos0=32764",
     "reqs=1,tokens=4,C=4,block=4,overlap=1,format=indexer_fp8,bias=1,pos0=32764", NULL},
    {"reqs=64,tokens=256,C=4,block=4,overlap=1,format=fp8,pos0=32764",
     "reqs=64,tokens=256,C=4,block=4,overlap=1,format=indexer_mxfp4,rotate=1,pos0=32764", NULL},
    {"reqs=8,tokens=1024,C=128,block=8,format=fp8,kv_block=2,pos0=32640",
     "reqs=8,tokens=32,C=4,block=4,overlap=1,format=fp8,pos0=32764",
     "reqs=8,tokens=32,C=4,block=4,overlap=1,format=indexer_fp8,bias=1,state=bf16,pos0=32764"},
    {"reqs=3,tokens=777,C=4,block=4,overlap=1,kv_block=64", "reqs=2,tokens=2000,C=1000,block=16", NULL},
};

/* DeepSeek-V4's indexer shapes (SPEC 9, 10) that the random draws rarely
 * combine: a bf16 state and a score bias at head width 128 with windows of
 * one segment, the masked rows of each request's first windows, more
 * outputs than a GPU work-group takes in one round, and windows of fewer
 * than 8 rows (C = 1, 3) in each of the GPU indexer kernels' forms. */
static const char *const k_specs[] = {
    "reqs=3,tokens=777,C=4,block=4,overlap=1,format=indexer_fp8,state=bf16,layout=shuffle",
    "reqs=3,tokens=777,C=4,block=3,overlap=1,format=indexer_mxfp4,rotate=1,state=bf16,bias=1,layout=shuffle",
    "reqs=2,tokens=500,C=8,block=5,format=indexer_mxfp4,state=bf16,layout=contig",
    "reqs=3,tokens=777,C=4,block=4,overlap=1,format=indexer_fp8,bias=1,cos_sin=interleaved,layout=shuffle",
    "reqs=3,tokens=300,C=3,block=4,overlap=1,format=indexer_fp8,layout=shuffle",
    "reqs=2,tokens=90,C=3,block=7,format=indexer_fp8,bias=1,layout=shuffle",
    "reqs=2,tokens=100,C=1,block=2,overlap=1,format=indexer_mxfp4,rotate=1,state=bf16,layout=contig",
    "reqs=2,tokens=100,C=1,block=2,overlap=1,format=indexer_mxfp4,state=bf16,bias=1,layout=shuffle",
};

/* The main compressor's windows of 16 and 32 segments with a bf16 state
 * or a score bias (the OpenCL slice kernels' forms for them): rows in
 * whole blocks (block 8, their direct loads) and through the row table
 * (block 12). */
static const char *const k_slice_windows[] = {
    "reqs=2,tokens=1024,C=128,block=8,format=fp8,kv_block=2,state=bf16,layout=shuffle",
    "reqs=2,tokens=1024,C=256,block=12,format=int8,state=bf16,layout=contig",
    "reqs=2,tokens=1024,C=128,block=8,format=fp8,kv_block=2,bias=1,state=bf16,layout=contig",
    "reqs=2,tokens=1024,C=256,block=12,format=fp8,bias=1,layout=shuffle",
};

/* Windows of one segment in calls of more outputs than one wave of the
 * CUDA backend's decode-sized kernel (cuda_decode.cuh: an output a CTA)
 * holds, so that the one-segment and indexer kernels run them:
 * windows of 6 and 2 rows, a NaN score, an infinite value, two RMS
 * weights that overflow y and a padding output (head width 512), a score
 * bias and a bf16 state (128). */
static const char *const k_large[] = {
    "reqs=2,tokens=3000,C=3,block=4,overlap=1,format=fp8,layout=shuffle",
    "reqs=2,tokens=4800,C=3,block=4,overlap=1,format=indexer_fp8,bias=1,layout=shuffle",
    "reqs=2,tokens=3200,C=1,block=2,overlap=1,format=indexer_mxfp4,rotate=1,state=bf16,layout=shuffle",
};

/* Score biases whose rows are not 16-byte aligned (odd_bias_rows), at
 * either head width: the GPUs' wider bias loads fall back to narrower
 * ones, and the CUDA indexer kernel copies such rows to shared memory.
 * With opts.large, as k_large (the last is the CUDA indexer kernel's; all
 * of them are slow under a simulator). */
static const char *const k_odd_bias[] = {
    "reqs=3,tokens=777,C=4,block=4,overlap=1,format=indexer_fp8,bias=1,layout=shuffle",
    "reqs=3,tokens=777,C=4,block=4,overlap=1,format=fp8,bias=1,state=bf16,layout=shuffle",
    "reqs=2,tokens=1024,C=128,block=8,format=fp8,kv_block=2,bias=1,layout=shuffle",
    "reqs=2,tokens=4800,C=3,block=4,overlap=1,format=indexer_mxfp4,bias=1,layout=shuffle",
};

/* Overlap windows whose masked rows (each request's first window: its A
 * rows) face a non-finite score bias (masked_bias): a masked row must stay
 * (0, -Inf), its bias never added; the CUDA decode-sized kernel and
 * OpenCL's indexer kernel, windows of 6 and 2 rows. */
static const char *const k_masked_bias[] = {
    "reqs=3,tokens=777,C=4,block=4,overlap=1,format=indexer_fp8,bias=1,layout=shuffle",
    "reqs=3,tokens=300,C=3,block=4,overlap=1,format=indexer_mxfp4,rotate=1,bias=1,state=bf16,layout=shuffle",
    "reqs=2,tokens=100,C=1,block=2,overlap=1,format=indexer_fp8,bias=1,layout=contig",
    "reqs=2,tokens=300,C=4,block=4,overlap=1,format=fp8,bias=1,layout=shuffle",
};
/* ... with opts.large, more outputs than a wave of the CUDA decode-sized
 * kernel: the CUDA indexer kernel with a float32 and a bf16 state */
static const char *const k_masked_bias_large[] = {
    "reqs=2,tokens=16000,C=4,block=4,overlap=1,format=indexer_fp8,bias=1,layout=shuffle",
    "reqs=2,tokens=16000,C=4,block=4,overlap=1,format=indexer_mxfp4,rotate=1,bias=1,state=bf16,layout=contig",
};

/* Indexer calls whose outputs 1, 6, 11, .. are padding: in every GPU
 * work-group or CTA some of the first round's outputs are dead, so a
 * slot's or warp's first output is not its first live one -- OpenCL's
 * work-groups and, past a wave of the CUDA decode-sized kernel, the CUDA
 * indexer kernel (float32: outputs claimed; bf16 EXACT: every eighth). */
static const char *const k_dead_outputs[] = {
    "reqs=3,tokens=777,C=4,block=4,overlap=1,format=indexer_fp8,layout=shuffle",
    "reqs=3,tokens=777,C=4,block=4,overlap=1,format=indexer_mxfp4,rotate=1,state=bf16,bias=1,layout=contig",
    "reqs=2,tokens=16000,C=4,block=4,overlap=1,format=indexer_fp8,layout=shuffle",
    "reqs=2,tokens=16000,C=4,block=4,overlap=1,format=indexer_fp8,state=bf16,layout=contig",
};

/* Outputs 1, 6, 11, .. of c padding.  @return 0 (a case transform of
 * spec_cases). */
static int dead_outputs(kvc_case *c, char *msg, size_t len) {
    (void)msg;
    (void)len;
    for (int64_t o = 1; o < c->args.num_outputs; o += 5) c->kv_slot_mapping[c->boundary_token_indices[o]] = -1;
    return 0;
}

/* c's score bias with +Inf and NaN in the A halves (the scores the masked
 * rows of an overlap window would read) of its first and last rows.
 * @return 0 (a case transform of spec_cases). */
static int masked_bias(kvc_case *c, char *msg, size_t len) {
    (void)msg;
    (void)len;
    const int64_t D = c->args.head_dim ? c->args.head_dim : 512, last = c->args.compress_ratio - 1;
    c->score_bias[5] = INFINITY;
    c->score_bias[last * c->args.score_bias_stride + D - 3] = NAN;
    return 0;
}

/* c's score bias re-laid in rows of state_width / 2 + 1 floats from one
 * float into its buffer (so that only its first row starts 16-byte
 * aligned), the floats between the rows NaN (never read).  @return 1 (out
 * of memory). */
static int odd_bias_rows(kvc_case *c, char *msg, size_t len) {
    const int64_t w = c->args.state_width / 2, C = c->args.compress_ratio, st = w + 1;
    float *b = malloc(sizeof(float) * (size_t)(1 + C * st));
    if (!b) {
        snprintf(msg, len, "out of memory");
        return 1;
    }
    b[0] = NAN;
    for (int64_t r = 0; r < C; r++) {
        memcpy(b + 1 + r * st, c->score_bias + r * w, sizeof(float) * (size_t)w);
        b[1 + r * st + w] = NAN;
    }
    free(c->score_bias);
    c->score_bias = b;
    c->args.score_bias = b + 1;
    c->args.score_bias_stride = st;
    return 0;
}

/* The n cases of specs, each generated, changed by adjust where not NULL
 * (@return 1 with the reason in msg on failure), checked by one_case with
 * seed seed + i and reported as kind. */
static void spec_cases(const kvc_conform_opts *o, kvc_conform_result *r, const char *kind,
                       const char *const *specs, int n, uint64_t seed,
                       int (*adjust)(kvc_case *, char *, size_t)) {
    char msg[512];
    for (int i = 0; i < n; i++) {
        kvc_case c;
        msg[0] = 0;
        int bad = make_case(NULL, specs[i], &c, msg, sizeof msg);
        if (!bad && adjust) bad = adjust(&c, msg, sizeof msg);
        if (!bad) bad = one_case(o, &c, seed + (uint64_t)i, msg, sizeof msg);
        report(o, r, bad, kind, specs[i], msg);
        if (c.state_cache) kvc_case_free(&c);
    }
}
#define KVC_NSPECS(a) ((int)(sizeof(a) / sizeof((a)[0])))

int kvc_kit_conform(const kvc_conform_opts *o, kvc_conform_result *r) {
    memset(r, 0, sizeof *r);
    char msg[512];
    kvc_golden_case *g = NULL;
    const int ng = o->golden ? kvc_kit_load_index(o->golden, &g) : 0;
    if (ng < 0) return -1;
    for (int i = 0; i < ng; i++) {
        kvc_case c;
        msg[0] = 0;
        int bad = make_case(&g[i].params, NULL, &c, msg, sizeof msg);
        if (!bad) bad = kvc_kit_check_inputs(&g[i], &c, msg, sizeof msg);
        if (!bad) bad = one_case(o, &c, 7 + (uint64_t)i, msg, sizeof msg);
        if (!bad) bad = golden_bytes(o->golden, &g[i], &c, msg, sizeof msg);
        report(o, r, bad, "golden", g[i].name, msg);
        if (c.state_cache) kvc_case_free(&c);
    }
    free(g);
    for (int i = 0; i < o->nrandom; i++) {
        kvc_case_params p;
        random_params(i, &p);
        char name[160];
        snprintf(name, sizeof name, "C=%lld block=%lld S=%lld reqs=%lld tokens=%lld %s %s%s%s%s%s",
                 (long long)p.compress_ratio, (long long)p.block_size, (long long)p.kv_block_size,
                 (long long)p.num_reqs, (long long)p.total_tokens, p.shuffle ? "shuffle" : "contig",
                 kvc_kit_format_name(p.nope_format), p.overlap ? " overlap" : "", p.rotate ? " rotate" : "",
                 p.score_bias ? " bias" : "", p.state_dtype ? " bf16" : "");
        kvc_case c;
        msg[0] = 0;
        int bad = make_case(&p, NULL, &c, msg, sizeof msg);
        if (!bad) bad = one_case(o, &c, 9 + (uint64_t)i, msg, sizeof msg);
        report(o, r, bad, "random", name, msg);
        if (c.state_cache) kvc_case_free(&c);
    }
    for (int i = 0; o->paths && i < (int)(sizeof k_paths / sizeof k_paths[0]); i++) {
        const path_shape *s = &k_paths[i];
        if (o->paths == 2 && !s->overlap && (s->C == 128 || s->C == 256 || s->C == 512)) continue;
        kvc_case_params p;
        memset(&p, 0, sizeof p);
        p.num_reqs = s->reqs;
        p.total_tokens = s->tokens;
        p.compress_ratio = s->C;
        p.block_size = s->bs;
        p.kv_block_size = s->S;
        p.shuffle = s->shuffle;
        p.nope_format = s->fp8 ? KVC_NOPE_FP8_E4M3 : KVC_NOPE_INT8;
        p.overlap = s->overlap ? KVC_OVERLAP_ON : KVC_OVERLAP_OFF;
        p.seed = 900 + (uint64_t)i;
        kvc_case_poison nan = {0, s->C - 3, 512 + 77, NAN}; /* a NaN score in the first window */
        if (s->nan) {
            p.num_poison = 1;
            p.poison = &nan;
        }
        char name[160];
        snprintf(name, sizeof name, "C=%lld block=%lld S=%lld reqs=%lld tokens=%lld%s%s%s%s",
                 (long long)s->C, (long long)s->bs, (long long)s->S, (long long)s->reqs, (long long)s->tokens,
                 s->fp8 ? " fp8" : "", s->overlap ? " overlap" : "", s->nan ? " nan" : "", s->pad ? " padding" : "");
        kvc_case c;
        msg[0] = 0;
        int bad = make_case(&p, NULL, &c, msg, sizeof msg);
        if (!bad && s->pad && c.args.num_outputs > 1) /* the second output is a padding slot */
            c.kv_slot_mapping[c.boundary_token_indices[1]] = -1;
        if (!bad) bad = one_case(o, &c, 11 + (uint64_t)i, msg, sizeof msg);
        report(o, r, bad, "path", name, msg);
        if (c.state_cache) kvc_case_free(&c);
    }
    if (o->paths != 2) /* (indexer windows: the same kernels in either OpenCL mode) */
        spec_cases(o, r, "spec", k_specs, KVC_NSPECS(k_specs), 17, NULL);
    if (o->paths != 2) /* (the second OpenCL mode takes the same slice kernels) */
        spec_cases(o, r, "slice windows", k_slice_windows, KVC_NSPECS(k_slice_windows), 19, NULL);
    for (int i = 0; o->large && i < (int)(sizeof k_large / sizeof k_large[0]); i++) {
        kvc_case_params p;
        kvc_case c;
        memset(&c, 0, sizeof c);
        msg[0] = 0;
        /* request 1: a NaN score of position 700 (overlap: scores from 1024), every dim's slot NaN; an
         * infinite value of position 1200 in both halves (a dim of the fifth warp of 8 at 2 dims a
         * thread): the RMS sum infinite, the other dims 0, only that dim's thread sees a non-finite value */
        kvc_case_poison poison[3] = {
            {1, 700, 1024 + 5, NAN}, {1, 1200, 300, INFINITY}, {1, 1200, 512 + 300, -INFINITY}};
        int bad = kvc_kit_parse_spec(k_large[i], &p, msg, sizeof msg) != 0;
        if (!bad && i == 0) {
            p.num_poison = 3;
            p.poison = poison;
        }
        if (!bad) bad = make_case(&p, NULL, &c, msg, sizeof msg);
        if (!bad && i == 0) {
            c.kv_slot_mapping[c.boundary_token_indices[1]] = -1; /* output 1 padding */
            /* the RMS weights of dims 100 and 451 bf16's largest finite value: where |c rr| > 1 their y
             * overflows (only that dim's thread -- warp 1, warp 7 -- sees it), the other dims finite */
            c.rms_norm_weight[100] = c.rms_norm_weight[451] = 0x7F7F;
        }
        if (!bad) bad = one_case(o, &c, 23 + (uint64_t)i, msg, sizeof msg);
        report(o, r, bad, "large", k_large[i], msg);
        if (c.state_cache) kvc_case_free(&c);
    }
    if (o->large) spec_cases(o, r, "odd bias rows", k_odd_bias, KVC_NSPECS(k_odd_bias), 29, odd_bias_rows);
    if (o->paths != 2) /* (one-segment windows: the same kernels in either OpenCL mode) */
        spec_cases(o, r, "masked-row bias", k_masked_bias, KVC_NSPECS(k_masked_bias), 37, masked_bias);
    if (o->large)
        spec_cases(o, r, "masked-row bias", k_masked_bias_large, KVC_NSPECS(k_masked_bias_large),
                   37 + KVC_NSPECS(k_masked_bias), masked_bias);
    if (o->large) /* (calls of 192 and 4000 outputs: too slow under a simulator) */
        spec_cases(o, r, "dead outputs", k_dead_outputs, KVC_NSPECS(k_dead_outputs), 47, dead_outputs);
    for (int i = 0; i < (int)(sizeof k_many / sizeof k_many[0]); i++) {
        kvc_case cs[3], *cp[3];
        int n = 0, bad = 0;
        msg[0] = 0;
        char name[400] = "";
        for (; n < 3 && k_many[i][n]; n++) {
            memset(&cs[n], 0, sizeof cs[n]);
            cp[n] = &cs[n];
            snprintf(name + strlen(name), sizeof name - strlen(name), "%s%s", n ? " + " : "", k_many[i][n]);
            if (!bad) bad = make_case(NULL, k_many[i][n], &cs[n], msg, sizeof msg);
        }
        kvc_case *last = &cs[n - 1];
        if (!bad && last->args.num_outputs > 1) last->kv_slot_mapping[last->boundary_token_indices[1]] = -1;
        if (!bad) bad = cases_conform(o, cp, n, 13 + (uint64_t)i, msg, sizeof msg);
        report(o, r, bad, "many", name, msg);
        for (int k = 0; k < n; k++)
            if (cs[k].state_cache) kvc_case_free(&cs[k]);
    }
    return 0;
}
