/*
 * kvcompress -- the command-line tool: info, bench, verify.
 *
 *   kvcompress info
 *   kvcompress bench  [--backend B] [--cases SET|CASE] [--layout L] [--repeat N]
 *                     [--threads N] [--seed S] [--json FILE] [--format F]
 *                     [--overlap] [--cos-sin split|interleaved]
 *   kvcompress verify [--backend B] [--golden DIR] [--random N] [--threads N]
 *
 * Exit status: 0 success, 1 a check failed, 2 usage error.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bench_backend.h"
#include "kvc_kit.h"
#include "kvcompress.h"
#include "kvcompress_rand.h"

#ifndef KVC_SOURCE_GOLDEN_DIR
#define KVC_SOURCE_GOLDEN_DIR "tests/data/golden"
#endif

/* ---- usage ------------------------------------------------------------- */
static const char *USAGE_MAIN =
    "usage: kvcompress [--version] [--help] <command> [options]\n"
    "\n"
    "commands:\n"
    "  info     library version, backends, devices\n"
    "  bench    time the operation on generated cases (the main job)\n"
    "  verify   golden, random and GPU-path cases, exact against the CPU backend\n"
    "\n"
    "'kvcompress <command> --help' describes each command.\n";

static const char *USAGE_BENCH =
    "usage: kvcompress bench [options]\n"
    "Times kvc_compress on kvc-rand cases; checks every output against the CPU\n"
    "backend's bytes.  One row per case: us (median), GB/s, % of the measured\n"
    "read bandwidth, check.\n"
    "\n"
    "  --backend auto|cpu|cuda|opencl   default auto (best available)\n"
    "  --cases headline|quick|engine|decode|golden|CASE\n"
    "                 headline: the 12 headline cases (default)\n"
    "                 quick: 3 small cases;  engine: C4 overlap FP8 (2048, 8192,\n"
    "                 32768 outputs) + C128 FP8 S=2 at 8k, 32k, 131k tokens\n"
    "                 decode: B requests x 1 output at position 32767: C4 overlap\n"
    "                 FP8, B = 1..1024, and C128 FP8 S=2, B = 8..256\n"
    "                 golden: the cases of the golden manifests\n"
    "                 engine also: the indexer (indexer_fp8, indexer_mxfp4) at 4 x\n"
    "                 8192 / 32768 / 131072 tokens, a bf16 state at 131072\n"
    "                 CASE: reqs=8,tokens=131072,C=128,block=8,layout=shuffle\n"
    "                       [,kv_block=S,format=fp8|indexer_fp8|indexer_mxfp4,rotate=1,\n"
    "                       bias=1,state=bf16,overlap=1,cos_sin=interleaved,pos0=P]\n"
    "  --layout contig|shuffle|both     default both\n"
    "  --repeat N       timed calls per case (default: 100 on a GPU; on the CPU at\n"
    "                   least 10 calls and 0.5 s of them)\n"
    "  --threads N      CPU threads (default all cores)\n"
    "  --seed S         kvc-rand seed (default 1)\n"
    "  --format int8|fp8|indexer_fp8|indexer_mxfp4, --overlap, --cos-sin split|interleaved\n"
    "                   engine formats for the headline/quick sets\n"
    "  --numerics exact|fast   numerics mode (docs/CONTRACT.md section 8); fast is checked for\n"
    "                   conformance to the CPU bytes (docs/CONTRACT.md sections 4 and 7), exact for equality\n"
    "  --json FILE      also write the results as JSON\n"
    "  --plot FILE      also draw x_floor per case as an SVG picture\n"
    "  --no-floor       skip the floor measurement (x_floor shows 0)\n"
    "  --huge-pages     CPU: the state cache and the floor's buffer advised onto\n"
    "                   transparent huge pages (Linux), as numpy places large arrays\n"
    "Every case is followed, in the same loop, by its floor: a plain streaming\n"
    "read of the case's bytes on the same backend (CPU: the same threads),\n"
    "timed the same way; x_floor = median time / median floor time (the figure\n"
    "the speed goals use).  CUDA also times the chain floor: the case's index\n"
    "chain (output, token, block table) and window rows read with no arithmetic\n"
    "and no write -- what the dependent loads cost on top of the bytes (x_chain).\n";

static const char *USAGE_VERIFY =
    "usage: kvcompress verify [options]\n"
    "Runs every golden case (bytes == *.canon.bin, conformance against *.ref.bin)\n"
    "and random cases of many shapes (bytes == the CPU backend's) on a backend.\n"
    "\n"
    "  --backend auto|cpu|cuda|opencl   default auto\n"
    "  --golden DIR     golden data (default: $KVCOMPRESS_GOLDEN, else the source\n"
    "                   tree it was built from, else <prefix>/share/kvcompress/golden;\n"
    "                   without any, verify exits 1 saying so)\n"
    "  --random N       random cases (default 24; with N > 0 also the 7 GPU-path shapes)\n"
    "  --threads N      CPU threads\n"
    "Prints the backend and device first; exits 1 if a case failed, if no golden\n"
    "data is found, or if nothing was checked.\n";

static const char *USAGE_INFO = "usage: kvcompress info\nPrints the library version, backends and devices.\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "kvcompress: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

/* Every numeric option: a whole decimal number in [lo, hi], else exit 2 with
 * one line naming the option. */
static int parse_num(const char *opt, const char *v, long long lo, long long hi, long long *out) {
    char *end = NULL;
    errno = 0;
    const long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno == ERANGE || x < lo || x > hi) {
        fprintf(stderr, "kvcompress: %s %s: expected a whole number in [%lld, %lld]\n", opt, v, lo, hi);
        return 2;
    }
    *out = x;
    return 0;
}

/* ---- small helpers ------------------------------------------------------- */
static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_backend(const char *s, kvc_backend *b) {
    if (!strcmp(s, "auto")) *b = KVC_BACKEND_AUTO;
    else if (!strcmp(s, "cpu")) *b = KVC_BACKEND_CPU;
    else if (!strcmp(s, "cuda")) *b = KVC_BACKEND_CUDA;
    else if (!strcmp(s, "opencl")) *b = KVC_BACKEND_OPENCL;
    else return -1;
    return 0;
}

static const char *backend_name(kvc_backend b) {
    switch (b) {
    case KVC_BACKEND_CPU: return "cpu";
    case KVC_BACKEND_CUDA: return "cuda";
    case KVC_BACKEND_OPENCL: return "opencl";
    default: return "auto";
    }
}

/* AUTO for the tool: the best backend usable now. */
static kvc_backend resolve_backend(kvc_backend b) {
    if (b != KVC_BACKEND_AUTO) return b;
    if (kvc_backend_available(KVC_BACKEND_CUDA)) return KVC_BACKEND_CUDA;
    return KVC_BACKEND_CPU;
}

static int progress_on(void) { return isatty(2); }

/* ---- CPU read bandwidth: a large read-only reduction, all threads -------- */
/* The machine's streaming read rate: 1 GiB (past any cache), written first
 * so that every page is mapped, read twice to warm up, then the fastest of
 * 9 reads: a read that another process slows down only takes longer, so the
 * best one is what the memory delivers (the median moved 10% between runs
 * of an idle 2-core VM, the best 3%). */
static double cpu_read_bw(int threads) {
    size_t bytes = (size_t)1 << 30;
    uint64_t *buf = malloc(bytes);
    if (!buf) return -1;
    size_t n = bytes / 8;
    for (size_t i = 0; i < n; i++) buf[i] = i * 0x9E3779B97F4A7C15ull;
    uint64_t sink = 0;
    for (int rep = 0; rep < 2; rep++) kvc_kit_cpu_read(buf, n, threads, &sink);
    double best = 0;
    for (int rep = 0; rep < 9; rep++) {
        const double t = kvc_kit_cpu_read(buf, n, threads, &sink);
        if (best == 0 || t < best) best = t;
    }
    free(buf);
    if (sink == 42) fprintf(stderr, " ");
    return (double)bytes / best / 1e9;
}

static const char *find_golden(void);

/* ---- case sets ----------------------------------------------------------- */
typedef struct {
    kvc_case_params p;
    char name[96];
} bench_case;

static int add_case(bench_case *list, int n, int cap, const kvc_case_params *p) {
    if (n >= cap) return n;
    list[n].p = *p;
    const kvc_case_params *q = &list[n].p;
    static const char *const fmt_tag[4] = {"", "_fp8", "_ifp8", "_mxfp4"};
    snprintf(list[n].name, sizeof list[n].name, "%sr%lld_t%lld_c%lld_b%lld%s%s%s%s%s%s%s",
             q->first_position ? "dec_" : "", (long long)q->num_reqs, (long long)q->total_tokens,
             (long long)q->compress_ratio, (long long)q->block_size, fmt_tag[q->nope_format & 3],
             q->rotate ? "_rot" : "", q->state_dtype ? "_bf16" : "", q->score_bias ? "_bias" : "",
             q->overlap ? "_ovl" : "", q->cos_sin_layout ? "_il" : "",
             q->kv_block_size && q->kv_block_size != 64 ? "_S" : "");
    if (q->kv_block_size && q->kv_block_size != 64) {
        size_t l = strlen(list[n].name);
        snprintf(list[n].name + l, sizeof list[n].name - l, "%lld", (long long)q->kv_block_size);
    }
    return n + 1;
}

/* An engine-format case: C = 4 is a CSA layer's (overlap, block 4, 64 slots
 * a page), any other C an HCA layer's (block 8, 2 slots a page); FP8 (the
 * caller may then make it the indexer's or give it a bf16 state). */
static void engine_case(kvc_case_params *p, long long reqs, long long tokens, long long C, long long pos0, int shuffle,
                        uint64_t seed) {
    const int c4 = C == 4;
    memset(p, 0, sizeof *p);
    p->num_reqs = reqs;
    p->total_tokens = tokens;
    p->compress_ratio = C;
    p->first_position = pos0;
    p->block_size = c4 ? 4 : 8;
    p->overlap = c4 ? KVC_OVERLAP_ON : KVC_OVERLAP_OFF;
    p->nope_format = KVC_NOPE_FP8_E4M3;
    p->kv_block_size = c4 ? 64 : 2;
    p->shuffle = shuffle;
    p->seed = seed;
}

/* Build the case list; @return count or -1 on a bad set/spec (message printed). */
static int build_cases(const char *set, const char *layout, uint64_t seed, const kvc_case_params *fmt,
                       bench_case *list, int cap) {
    int layouts[2], nl = 0;
    if (!strcmp(layout, "contig") || !strcmp(layout, "both")) layouts[nl++] = 0;
    if (!strcmp(layout, "shuffle") || !strcmp(layout, "both")) layouts[nl++] = 1;
    int n = 0;
    kvc_case_params p;
    if (!strcmp(set, "headline") || !strcmp(set, "quick")) {
        static const long long hl[4][2] = {{1, 8192}, {4, 32768}, {8, 65536}, {8, 131072}};
        static const long long qk[3][3] = {{1, 2048, 128}, {2, 4096, 256}, {1, 4096, 512}};
        int quick = !strcmp(set, "quick");
        for (int l = 0; l < nl; l++)
            for (int i = 0; i < (quick ? 3 : 12); i++) {
                p = *fmt;
                p.num_reqs = quick ? qk[i][0] : hl[i % 4][0];
                p.total_tokens = quick ? qk[i][1] : hl[i % 4][1];
                p.compress_ratio = quick ? qk[i][2] : (128 << (i / 4));
                p.block_size = 8;
                p.shuffle = layouts[l];
                p.seed = seed + (uint64_t)i;
                n = add_case(list, n, cap, &p);
            }
        return n;
    }
    if (!strcmp(set, "engine")) {
        for (int l = 0; l < nl; l++) {
            /* C4 overlap FP8: 4 requests of 2048, 8192 and 32768 tokens
             * (2048, 8192 and 32768 outputs); C128 FP8 with 2 slots per page
             * at 1 x 8192, 4 x 32768 and 8 x 131072 tokens (the HCA layers) */
            const long long tk[6][3] = {{4, 8192, 4},     {4, 32768, 4},    {4, 131072, 4},
                                        {1, 8192, 128},   {4, 32768, 128},  {8, 131072, 128}};
            for (int i = 0; i < 6; i++) {
                engine_case(&p, tk[i][0], tk[i][1], tk[i][2], 0, layouts[l], seed + (uint64_t)i);
                n = add_case(list, n, cap, &p);
            }
            /* the CSA layer's indexer (head width 128, C4 overlap) at 4 x
             * 8192, 32768 and 131072 tokens, INDEXER_FP8 and INDEXER_MXFP4;
             * a bf16 state for C4 and C128 at 131072 tokens (SPEC 9, 10) */
            for (int i = 0; i < 6; i++) {
                engine_case(&p, 4, tk[i % 3][1], 4, 0, layouts[l], seed + 6 + (uint64_t)i);
                p.head_dim = 128;
                p.nope_format = i < 3 ? KVC_INDEXER_FP8 : KVC_INDEXER_MXFP4;
                n = add_case(list, n, cap, &p);
            }
            for (int i = 2; i < 6; i += 3) {
                engine_case(&p, tk[i][0], tk[i][1], tk[i][2], 0, layouts[l], seed + 12 + (uint64_t)i);
                p.state_dtype = KVC_STATE_BFLOAT16;
                n = add_case(list, n, cap, &p);
            }
        }
        return n;
    }
    if (!strcmp(set, "decode")) {
        /* decode steps: B requests x 1 output, each window ending at
         * position 32767 (the state holds only the blocks the windows
         * read): a CSA layer's two compressors, C4 overlap -- the main one
         * (FP8) and the indexer's (head width 128, INDEXER_FP8 and
         * INDEXER_MXFP4) -- for B = 1, 8, 64, 256, 1024, and C128 FP8 with
         * 2 slots a page (HCA) for B = 8, 64, 256 */
        static const long long dc[8][2] = {{4, 1}, {4, 8}, {4, 64}, {4, 256}, {4, 1024}, {128, 8}, {128, 64}, {128, 256}};
        static const kvc_nope_format df[3] = {KVC_NOPE_FP8_E4M3, KVC_INDEXER_FP8, KVC_INDEXER_MXFP4};
        for (int l = 0; l < nl; l++)
            for (int f = 0; f < 3; f++)
                for (int i = 0; i < (f ? 5 : 8); i++) {
                    engine_case(&p, dc[i][1], dc[i][1] * dc[i][0], dc[i][0], 32768 - dc[i][0], layouts[l],
                                seed + (uint64_t)(8 * f + i));
                    p.nope_format = df[f];
                    p.head_dim = f ? 128 : 0;
                    n = add_case(list, n, cap, &p);
                }
        return n;
    }
    if (!strcmp(set, "golden")) {
        kvc_golden_case *g = NULL;
        const char *dir = find_golden();
        int ng = dir ? kvc_kit_load_index(dir, &g) : -1;
        if (ng < 0) {
            fprintf(stderr, "kvcompress: --cases golden: no golden data found (--golden is verify's; set "
                            "$KVCOMPRESS_GOLDEN)\n");
            return -1;
        }
        for (int i = 0; i < ng; i++)
            if (g[i].params.num_poison == 0) { /* poison lists live in the index buffer */
                n = add_case(list, n, cap, &g[i].params);
                snprintf(list[n - 1].name, sizeof list[n - 1].name, "%.95s", g[i].name);
            }
        free(g);
        return n;
    }
    char msg[256];
    if (!strchr(set, '=')) {
        fprintf(stderr, "kvcompress: --cases %s: expected headline, quick, engine, decode, golden or a spec\n", set);
        return -1;
    }
    if (kvc_kit_parse_spec(set, &p, msg, sizeof msg) != 0) {
        fprintf(stderr, "kvcompress: --cases %s: %s\n", set, msg);
        return -1;
    }
    if (fmt->nope_format) {
        p.nope_format = fmt->nope_format;
        p.head_dim = fmt->head_dim;
    }
    if (fmt->overlap) p.overlap = fmt->overlap;
    if (fmt->cos_sin_layout) p.cos_sin_layout = fmt->cos_sin_layout;
    if (!strstr(set, "seed=")) p.seed = seed;
    if (!strstr(set, "layout=")) {
        for (int l = 0; l < nl; l++) {
            p.shuffle = layouts[l];
            n = add_case(list, n, cap, &p);
        }
    } else {
        n = add_case(list, n, cap, &p);
    }
    return n;
}

/* Bytes this process may still allocate: the least of MemAvailable, the
 * cgroup v2 limit less its usage, and RLIMIT_AS less the address space in
 * use; 0 where none can be read. */
static uint64_t read_u64_file(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    while (fgets(line, sizeof line, f)) {
        if (key && strncmp(line, key, strlen(key)) != 0) continue;
        unsigned long long x;
        if (sscanf(key ? line + strlen(key) : line, "%llu", &x) == 1) v = x;
        break;
    }
    fclose(f);
    return v;
}

static uint64_t available_memory(void) {
    uint64_t avail = read_u64_file("/proc/meminfo", "MemAvailable:") * 1024;
    const uint64_t max = read_u64_file("/sys/fs/cgroup/memory.max", NULL); /* "max" reads as 0 */
    const uint64_t cur = read_u64_file("/sys/fs/cgroup/memory.current", NULL);
    if (max && max > cur && (!avail || max - cur < avail)) avail = max - cur;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        const uint64_t vm = read_u64_file("/proc/self/statm", NULL) * (uint64_t)sysconf(_SC_PAGESIZE);
        const uint64_t left = rl.rlim_cur > vm ? rl.rlim_cur - vm : 0;
        if (!avail || left < avail) avail = left ? left : 1;
    }
    return avail;
}

/* Bytes the operation must move for `outputs` windows of ratio C
 * (docs/CONTRACT.md section 6): each output's C state rows of `width`
 * elements of `elem` bytes (overlap: each 4D-wide row once), its slot, and
 * a score bias (C x width / 2 floats) once. */
static double moved_bytes(double outputs, double C, double width, double elem, kvc_nope_format fmt, int bias) {
    return outputs * C * width * elem + outputs * (double)kvc_slot_bytes(fmt) + (bias ? C * width / 2 * 4 : 0);
}

/* The same from a case's parameters, before it is generated (its outputs:
 * the positions first_position .. + tokens/reqs - 1 that close a window). */
static double spec_floor_bytes(const kvc_case_params *p) {
    if (p->num_reqs < 1 || p->compress_ratio < 1) return 0;
    const long long per = p->total_tokens / p->num_reqs, C = p->compress_ratio, p0 = p->first_position;
    const double D = p->head_dim ? (double)p->head_dim : 512.0;
    return moved_bytes((double)((p0 + per) / C - p0 / C) * (double)p->num_reqs, (double)C,
                       D * (p->overlap == KVC_OVERLAP_ON ? 4 : 2), p->state_dtype == KVC_STATE_BFLOAT16 ? 2 : 4,
                       p->nope_format, p->score_bias);
}

static double case_bytes(const kvc_args *a) {
    return moved_bytes((double)a->num_outputs, (double)a->compress_ratio, (double)a->state_width,
                       a->state_dtype == KVC_STATE_BFLOAT16 ? 2 : 4, a->nope_format, a->score_bias != NULL);
}

/* Samples of the CPU benchmark: repeat > 0 calls, or (repeat = 0) at least
 * kCpuMinCalls calls and kCpuMinSeconds of timed calls.  Each call is
 * followed by the floor: a read of the case's bytes with the same threads
 * (docs/CONTRACT.md section 6), whose median goes to r->floor_us. */
enum { kCpuMinCalls = 10, kCpuMaxCalls = 100000, kWarmup = 1 };
static const double kCpuMinSeconds = 0.5;
static uint64_t *g_cpu_floor;
static size_t g_cpu_floor_words;
static int g_cpu_floor_huge; /* --huge-pages: the floor's buffer on huge pages too */

static int time_cpu(kvc_case *c, int threads, int repeat, double floor_bytes, bench_result *r) {
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    ex.num_threads = threads;
    const size_t words = (size_t)(floor_bytes / 8);
    if (words > g_cpu_floor_words) {
        free(g_cpu_floor);
        g_cpu_floor = malloc(words * 8);
        if (g_cpu_floor && g_cpu_floor_huge) kvc_advise_huge_pages(g_cpu_floor, words * 8);
        g_cpu_floor_words = g_cpu_floor ? words : 0;
        for (size_t i = 0; i < g_cpu_floor_words; i++) g_cpu_floor[i] = i * 0x9E3779B97F4A7C15ull;
    }
    const int cap = repeat > 0 ? repeat : kCpuMaxCalls;
    double *t = malloc(sizeof(double) * (size_t)cap), *tf = malloc(sizeof(double) * (size_t)cap);
    uint64_t sink = 0;
    for (int i = 0; i < kWarmup; i++) kvc_compress(&c->args, &ex, NULL);
    double total = 0, last_note = now_s();
    int n = 0;
    while (n < cap && (repeat > 0 || n < kCpuMinCalls || total < kCpuMinSeconds)) {
        double t0 = now_s();
        kvc_status st = kvc_compress(&c->args, &ex, NULL);
        t[n] = (now_s() - t0) * 1e6;
        total += t[n] * 1e-6;
        if (st != KVC_OK) {
            r->status = st;
            snprintf(r->message, sizeof r->message, "%s", kvc_last_error_message());
            free(t);
            free(tf);
            return -1;
        }
        tf[n] = g_cpu_floor_words && words ? kvc_kit_cpu_read(g_cpu_floor, words, threads, &sink) * 1e6 : 0;
        n++;
        if (progress_on() && now_s() - last_note >= 1.0) { /* a long case: say how far it is */
            last_note = now_s();
            fprintf(stderr, "  %d calls, %.1f s timed...   \r", n, total);
        }
    }
    if (sink == 42) fprintf(stderr, " ");
    r->samples = malloc(sizeof(double) * (size_t)n);
    memcpy(r->samples, t, sizeof(double) * (size_t)n);
    r->nsamples = n;
    r->warmup = kWarmup;
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    qsort(tf, (size_t)n, sizeof *tf, cmp_double);
    r->median_us = t[n / 2];
    r->min_us = t[0];
    r->max_us = t[n - 1];
    r->floor_us = tf[n / 2];
    r->calls = n;
    r->status = KVC_OK;
    free(t);
    free(tf);
    return 0;
}

#ifndef KVC_CLI_WITH_OPENCL
int kvc_bench_opencl_case(kvc_case *c, int repeat, double floor_bytes, bench_result *out) {
    (void)c;
    (void)repeat;
    (void)floor_bytes;
    out->status = KVC_ERROR_BACKEND_UNAVAILABLE;
    snprintf(out->message, sizeof out->message, "the tool was built without OpenCL");
    return -1;
}
double kvc_bench_opencl_read_bw(void) { return -1; }
void kvc_bench_opencl_info(void) { printf("opencl: not compiled in\n"); }
#endif

/* Time (or just run, repeat = 1) a case on a device backend. */
static int device_case(kvc_backend be, kvc_case *c, int repeat, double floor_bytes, bench_result *r) {
    return be == KVC_BACKEND_OPENCL ? kvc_bench_opencl_case(c, repeat, floor_bytes, r)
                                    : kvc_bench_cuda_case(c, repeat, floor_bytes, r);
}

#ifndef KVC_CLI_WITH_CUDA
int kvc_bench_cuda_case(kvc_case *c, int repeat, double floor_bytes, bench_result *out) {
    (void)c;
    (void)repeat;
    (void)floor_bytes;
    out->status = KVC_ERROR_BACKEND_UNAVAILABLE;
    snprintf(out->message, sizeof out->message, "the tool was built without CUDA");
    return -1;
}
double kvc_bench_cuda_read_bw(void) { return -1; }
void kvc_bench_cuda_info(void) { printf("cuda: not compiled in\n"); }
void kvc_bench_cuda_device_name(char *out, size_t n) { snprintf(out, n, "none"); }
#endif

/* CPU reference bytes for the case, as golden-format rows. */
static uint8_t *cpu_reference_rows(kvc_case *c, int threads, int order_reversed) {
    kvc_args a = c->args;
    size_t bytes = c->kv_cache_bytes;
    uint8_t *kv = malloc(bytes ? bytes : 1);
    int64_t *bidx = malloc(sizeof(int64_t) * (size_t)(a.num_outputs ? a.num_outputs : 1));
    const int64_t sb = kvc_slot_bytes(a.nope_format);
    uint8_t *rows = malloc((size_t)(a.num_outputs ? a.num_outputs : 1) * (size_t)sb);
    if (!kv || !bidx || !rows) {
        free(kv);
        free(bidx);
        free(rows);
        return NULL;
    }
    memset(kv, 0xA5, bytes);
    for (int64_t o = 0; o < a.num_outputs; o++)
        bidx[o] = c->boundary_token_indices[order_reversed ? a.num_outputs - 1 - o : o];
    a.kv_cache = kv;
    a.boundary_token_indices = bidx;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    ex.num_threads = threads;
    kvc_status st = kvc_compress(&a, &ex, NULL);
    if (st == KVC_OK)
        for (int64_t o = 0; o < a.num_outputs; o++)
            kvc_kit_slot_row(&a, c->kv_slot_mapping[c->boundary_token_indices[o]], rows + o * sb);
    free(kv);
    free(bidx);
    if (st != KVC_OK) {
        free(rows);
        return NULL;
    }
    return rows;
}

static int compare_rows(kvc_case *c, const uint8_t *ref, char *msg, size_t len) {
    uint8_t row[KVC_SLOT_BYTES];
    const int64_t sb = kvc_slot_bytes(c->args.nope_format);
    for (int64_t o = 0; o < c->args.num_outputs; o++) {
        kvc_kit_slot_row(&c->args, c->kv_slot_mapping[c->boundary_token_indices[o]], row);
        if (memcmp(row, ref + o * sb, (size_t)sb) != 0) {
            int k = 0;
            while (row[k] == ref[o * sb + k]) k++;
            snprintf(msg, len, "output %lld byte %d: 0x%02x, CPU 0x%02x", (long long)o, k, row[k], ref[o * sb + k]);
            return 1;
        }
    }
    return 0;
}

/* docs/CONTRACT.md sections 4 and 7 conformance of the case's slots against reference rows (FAST mode). */
static int conform_rows(kvc_case *c, const uint8_t *ref, char *msg, size_t len) {
    const int64_t n = c->args.num_outputs, sb = kvc_slot_bytes(c->args.nope_format); /* 584, 132 or 68 */
    uint8_t *rows = malloc((size_t)((n > 0 ? n : 1) * sb)), row[KVC_SLOT_BYTES];
    if (!rows) {
        snprintf(msg, len, "out of memory");
        return 1;
    }
    for (int64_t o = 0; o < n; o++) { /* rows packed at the format's slot size, as kvc_kit_conforms reads them */
        kvc_kit_slot_row(&c->args, c->kv_slot_mapping[c->boundary_token_indices[o]], row);
        memcpy(rows + o * sb, row, (size_t)sb);
    }
    int64_t differ = 0;
    const int bad = kvc_kit_conforms(rows, ref, n, (int)c->args.nope_format, &differ, msg, len);
    free(rows);
    return bad;
}

/* ---- commands ------------------------------------------------------------ */
static int cmd_info(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(USAGE_INFO, stdout);
            return 0;
        }
        return usage_error("info: unknown option '%s'", argv[i]);
    }
    printf("kvcompress %s (library %s)\n", KVC_VERSION_STRING, kvc_version_string());
    printf("backends compiled in / usable now:\n");
    const kvc_backend all[3] = {KVC_BACKEND_CPU, KVC_BACKEND_CUDA, KVC_BACKEND_OPENCL};
    for (int i = 0; i < 3; i++)
        printf("  %-7s %s\n", backend_name(all[i]), kvc_backend_available(all[i]) ? "usable" : "not available");
    printf("cpu: %d threads by default\n", kvc_cpu_default_threads());
    kvc_bench_cuda_info();
    kvc_bench_opencl_info();
    return 0;
}

typedef struct {
    kvc_backend backend;
    const char *cases, *layout, *json, *plot;
    int repeat, threads;
    uint64_t seed;
    kvc_case_params fmt;
    kvc_numerics numerics;
    int no_floor, huge_pages;
} bench_opts;

static int need_value(int i, int argc, char **argv) {
    if (i + 1 >= argc) return usage_error("option '%s' needs a value", argv[i]);
    return 0;
}

#ifndef KVC_GIT_REVISION
#define KVC_GIT_REVISION "unknown"
#endif
static int argc_all;
static char **argv_all;

/* s as JSON string content (quotes and backslashes escaped), after `sep`. */
static void json_str(FILE *f, const char *s, const char *sep) {
    fputs(sep, f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!strncmp(line, "model name", 10) && c) {
            c += 2;
            c[strcspn(c, "\n")] = 0;
            snprintf(out, n, "%s", c);
            break;
        }
    }
    fclose(f);
}

static void device_name(kvc_backend be, char *out, size_t n) {
    if (be == KVC_BACKEND_CUDA) kvc_bench_cuda_device_name(out, n);
    else if (be == KVC_BACKEND_OPENCL) snprintf(out, n, "opencl (kvcompress info lists the devices)");
    else {
        char cpu[200];
        cpu_model(cpu, sizeof cpu);
        snprintf(out, n, "cpu: %.200s", cpu);
    }
}

/* x_floor per case as an SVG bar chart: one bar a case (0 = not measured),
 * the memory floor (1.0) as a line.  @return 0, or -1 where a write failed. */
static int write_plot(const char *path, char names[][72], const double *x, int n, const char *backend) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    double top = 1.5;
    for (int i = 0; i < n; i++)
        if (x[i] > top) top = x[i];
    top = ceil(top * 4) / 4;
    const int left = 260, bar = 18, gap = 6, width = 560, head = 62;
    const int height = head + n * (bar + gap) + 40;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            left + width + 60, height);
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"15\">kvcompress %s bench, backend %s: x_floor per case</text>\n"
               "<text x=\"10\" y=\"38\" fill=\"#555\">the call's time over the time of a plain read of the same "
               "bytes in the same run; 1.0 (red) = the memory floor, lower is better</text>\n",
            KVC_VERSION_STRING, backend);
    for (double t = 0; t <= top + 1e-9; t += 0.25) {
        const double gx = left + width * t / top;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\"/>\n"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.2f</text>\n",
                gx, head - 8, gx, height - 30, t == 1.0 ? "#c00" : "#ddd", gx, height - 14, t);
    }
    for (int i = 0; i < n; i++) {
        const int y = head + i * (bar + gap);
        const double w = x[i] > 0 ? width * x[i] / top : 0;
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">", left - 8, y + bar - 5);
        for (const char *c = names[i]; *c; c++) {
            if (*c == '<') fputs("&lt;", f);
            else if (*c == '&') fputs("&amp;", f);
            else fputc(*c, f);
        }
        fprintf(f, "</text>\n<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#4a7bb7\"/>\n", left, y,
                w, bar);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\">%.3f</text>\n", left + w + 4, y + bar - 5, x[i]);
    }
    fputs("</svg>\n", f);
    const int werr = ferror(f);
    return fclose(f) != 0 || werr ? -1 : 0;
}

static int cmd_bench(int argc, char **argv) {
    bench_opts o = {KVC_BACKEND_AUTO, "headline", "both", NULL, NULL, 0, 0, 1, {0}, KVC_NUMERICS_EXACT, 0, 0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE_BENCH, stdout);
            return 0;
        }
        int takes = !strcmp(a, "--backend") || !strcmp(a, "--cases") || !strcmp(a, "--layout") ||
                    !strcmp(a, "--repeat") || !strcmp(a, "--threads") || !strcmp(a, "--seed") ||
                    !strcmp(a, "--json") || !strcmp(a, "--plot") || !strcmp(a, "--format") || !strcmp(a, "--cos-sin") ||
                    !strcmp(a, "--numerics");
        if (takes && need_value(i, argc, argv)) return 2;
        const char *v = takes ? argv[++i] : NULL;
        if (!strcmp(a, "--backend")) {
            if (parse_backend(v, &o.backend)) return usage_error("--backend %s: expected auto, cpu, cuda or opencl", v);
        } else if (!strcmp(a, "--cases")) o.cases = v;
        else if (!strcmp(a, "--layout")) {
            if (strcmp(v, "contig") && strcmp(v, "shuffle") && strcmp(v, "both"))
                return usage_error("--layout %s: expected contig, shuffle or both", v);
            o.layout = v;
        } else if (!strcmp(a, "--repeat")) {
            long long x;
            if (parse_num(a, v, 1, 1000000, &x)) return 2;
            o.repeat = (int)x;
        } else if (!strcmp(a, "--threads")) {
            long long x;
            if (parse_num(a, v, 0, 1024, &x)) return 2;
            o.threads = (int)x;
        } else if (!strcmp(a, "--seed")) {
            long long x;
            if (parse_num(a, v, 0, INT64_MAX, &x)) return 2;
            o.seed = (uint64_t)x;
        }
        else if (!strcmp(a, "--json")) o.json = v;
        else if (!strcmp(a, "--plot")) o.plot = v;
        else if (!strcmp(a, "--format")) {
            if (kvc_kit_parse_format(v, &o.fmt.nope_format) != 0)
                return usage_error("--format %s: expected int8, fp8, indexer_fp8 or indexer_mxfp4", v);
            o.fmt.head_dim = o.fmt.nope_format >= KVC_INDEXER_FP8 ? 128 : 0;
        } else if (!strcmp(a, "--cos-sin")) {
            if (strcmp(v, "split") && strcmp(v, "interleaved"))
                return usage_error("--cos-sin %s: expected split or interleaved", v);
            o.fmt.cos_sin_layout = !strcmp(v, "interleaved") ? KVC_COS_SIN_INTERLEAVED : KVC_COS_SIN_SPLIT;
        } else if (!strcmp(a, "--numerics")) {
            if (strcmp(v, "exact") && strcmp(v, "fast")) return usage_error("--numerics %s: expected exact or fast", v);
            o.numerics = !strcmp(v, "fast") ? KVC_NUMERICS_FAST : KVC_NUMERICS_EXACT;
        } else if (!strcmp(a, "--overlap")) o.fmt.overlap = KVC_OVERLAP_ON;
        else if (!strcmp(a, "--no-floor")) o.no_floor = 1;
        else if (!strcmp(a, "--huge-pages")) o.huge_pages = 1;
        else return usage_error("bench: unknown option '%s' (see kvcompress bench --help)", a);
    }
    kvc_backend be = resolve_backend(o.backend);
    if (!kvc_backend_available(be)) {
        fprintf(stderr, "kvcompress: backend %s is not available here (kvcompress info lists backends)\n",
                backend_name(be));
        return 1;
    }
    bench_case list[128];
    int n = build_cases(o.cases, o.layout, o.seed, &o.fmt, list, 128);
    if (n < 0) return 2;
    int gpu = be != KVC_BACKEND_CPU;
    /* every case fits in the memory this process may use, before any work */
    const uint64_t avail = available_memory();
    double floor_max = 0; /* the CPU floor's buffer grows to the largest case's and stays */
    for (int i = 0; i < n && !gpu && !o.no_floor; i++)
        if (spec_floor_bytes(&list[i].p) > floor_max) floor_max = spec_floor_bytes(&list[i].p);
    for (int i = 0; i < n; i++) {
        uint64_t host = 0;
        if (kvc_case_host_bytes(&list[i].p, &host) != KVC_OK) {
            fprintf(stderr, "kvcompress: case %s: %s\n", list[i].name, kvc_last_error_message());
            return 2;
        }
        /* the case, the CPU floor's buffer (CPU backend), the reference's copy of the KV cache */
        const double need = (double)host + floor_max + (double)host / 16;
        if (avail && need > (double)avail) {
            fprintf(stderr, "kvcompress: case %s needs about %.2f GiB of host memory, %.2f GiB available "
                            "(MemAvailable, the cgroup's memory.max, ulimit -v): use fewer tokens%s\n",
                    list[i].name, need / 1073741824.0, (double)avail / 1073741824.0,
                    floor_max > 0 ? " or --no-floor" : "");
            return 1;
        }
    }
    /* GPU: 100 calls (docs/CONTRACT.md section 6); CPU: at least 10 calls and 0.5 s per case */
    int repeat = o.repeat ? o.repeat : (gpu ? 100 : 0);
    if (progress_on()) fprintf(stderr, "measuring read bandwidth...\r");
    double bw = be == KVC_BACKEND_CUDA ? kvc_bench_cuda_read_bw()
                : be == KVC_BACKEND_OPENCL ? kvc_bench_opencl_read_bw() : cpu_read_bw(o.threads);
    int threads = o.threads ? o.threads : kvc_cpu_default_threads();
    const int floor_on = !o.no_floor;
    g_cpu_floor_huge = o.huge_pages;
    char calls[64];
    if (repeat) snprintf(calls, sizeof calls, "%d calls per case", repeat);
    else snprintf(calls, sizeof calls, ">= %d calls and %.1f s per case", kCpuMinCalls, kCpuMinSeconds);
    printf("kvcompress %s bench: backend %s, %s, %s, read bandwidth %.1f GB/s, numerics %s\n", KVC_VERSION_STRING,
           backend_name(be), gpu ? "device events, L2 flushed" : "wall clock", calls, bw,
           o.numerics == KVC_NUMERICS_FAST ? "fast" : "exact");
    if (bw <= 0) printf("(read bandwidth not measured for this backend: %%read shows 0)\n");
    if (!gpu) printf("cpu threads: %d%s\n", threads, o.huge_pages ? ", state and floor on huge pages" : "");
    printf("%-28s %-8s %8s %11s %9s %9s %9s %7s %9s %7s %9s %7s  %s\n", "case", "layout", "outputs", "median_us",
           "min_us", "max_us", "GB/s", "%read", "floor_us", "x_floor", "chain_us", "x_chain", "check");
    double log_x = 0, worst_x = 0, log_read = 0;
    int nx = 0, noisy = 0, nread = 0;
    static char plot_name[128][72];
    static double plot_x[128];
    FILE *js = NULL;
    if (o.json) {
        js = fopen(o.json, "w");
        if (!js) {
            fprintf(stderr, "kvcompress: cannot write %s\n", o.json);
            return 1;
        }
        char when[32], cpu[256], dev[256];
        const time_t now = time(NULL);
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        cpu_model(cpu, sizeof cpu);
        device_name(be, dev, sizeof dev);
        fprintf(js, "{\n \"version\": \"%s\",\n \"library_version\": \"%s\",\n \"git_revision\": \"%s\",\n"
                    " \"timestamp\": \"%s\",\n \"command\": \"",
                KVC_VERSION_STRING, kvc_version_string(), KVC_GIT_REVISION, when);
        for (int k = 0; k < argc_all; k++) json_str(js, argv_all[k], k ? " " : "");
        fprintf(js, "\",\n \"backend\": \"%s\",\n \"device\": \"", backend_name(be));
        json_str(js, dev, "");
        fprintf(js, "\",\n \"cpu_model\": \"");
        json_str(js, cpu, "");
        char rep_s[32];
        if (repeat) snprintf(rep_s, sizeof rep_s, "%d", repeat);
        else snprintf(rep_s, sizeof rep_s, "null"); /* time-based: each case's "calls" says how many ran */
        fprintf(js, "\",\n \"read_bw_gbs\": %.3f,\n \"repeat\": %s,\n \"min_calls\": %d,\n \"min_seconds\": %.2f,\n"
                    " \"warmup\": %d,\n \"threads\": %d,\n \"seed\": %llu,\n \"numerics\": \"%s\",\n \"cases\": [",
                bw, rep_s, repeat ? repeat : kCpuMinCalls, repeat ? 0.0 : kCpuMinSeconds, gpu ? 10 : kWarmup,
                gpu ? 0 : threads, (unsigned long long)o.seed, o.numerics == KVC_NUMERICS_FAST ? "fast" : "exact");
    }
    int failures = 0;
    for (int i = 0; i < n; i++) {
        if (progress_on()) fprintf(stderr, "[%d/%d] generating %s...          \r", i + 1, n, list[i].name);
        kvc_case c;
        list[i].p.huge_pages = o.huge_pages;
        if (kvc_case_generate(&list[i].p, o.threads, &c) != KVC_OK) {
            fprintf(stderr, "kvcompress: %s: %s\n", list[i].name, kvc_last_error_message());
            failures++;
            continue;
        }
        if (progress_on()) fprintf(stderr, "[%d/%d] running %s...             \r", i + 1, n, list[i].name);
        bench_result r;
        memset(&r, 0, sizeof r);
        c.args.numerics = o.numerics;
        const double bytes = case_bytes(&c.args);
        int rc = gpu ? device_case(be, &c, repeat, floor_on ? bytes : 0, &r)
                     : time_cpu(&c, o.threads, repeat, floor_on ? bytes : 0, &r);
        char check[256] = "ok";
        if (rc != 0) {
            snprintf(check, sizeof check, "FAIL %s: %.200s", kvc_status_string(r.status), r.message);
        } else {
            /* reference: CPU backend, outputs reversed, different thread count */
            uint8_t *ref = cpu_reference_rows(&c, gpu ? 0 : (threads > 1 ? 1 : 2), 1);
            if (!ref) snprintf(check, sizeof check, "FAIL reference: %s", kvc_last_error_message());
            else if (o.numerics == KVC_NUMERICS_FAST ? conform_rows(&c, ref, check + 5, sizeof check - 5)
                                                     : compare_rows(&c, ref, check + 5, sizeof check - 5))
                memcpy(check, "FAIL ", 5);
            free(ref);
        }
        int ok = !strcmp(check, "ok");
        failures += !ok;
        double gbs = rc == 0 ? bytes / (r.median_us * 1e-6) / 1e9 : 0;
        const double xf = rc == 0 && r.floor_us > 0 ? r.median_us / r.floor_us : 0;
        const double xc = rc == 0 && r.chain_us > 0 ? r.median_us / r.chain_us : 0;
        char chain_us[16] = "-", x_chain[16] = "-"; /* not measured: CPU, OpenCL, unaligned rows */
        if (xc > 0) {
            snprintf(chain_us, sizeof chain_us, "%.1f", r.chain_us);
            snprintf(x_chain, sizeof x_chain, "%.3f", xc);
        }
        if (xf > 0) {
            log_x += log(xf);
            worst_x = xf > worst_x ? xf : worst_x;
            nx++;
        }
        if (rc == 0 && bw > 0 && gbs > 0) {
            log_read += log(100.0 * gbs / bw);
            nread++;
        }
        snprintf(plot_name[i], sizeof plot_name[i], "%.60s %s", list[i].name, list[i].p.shuffle ? "shuffle" : "contig");
        plot_x[i] = xf;
        /* a spread of more than 1.5x between the fastest and slowest call: say so */
        const int spread = rc == 0 && r.min_us > 0 && r.max_us > 1.5 * r.min_us;
        noisy += spread;
        if (progress_on()) fprintf(stderr, "%60s\r", "");
        printf("%-28s %-8s %8lld %11.1f %9.1f %9.1f %9.1f %6.1f%% %9.1f %7.3f %9s %7s  %s%s\n", list[i].name,
               list[i].p.shuffle ? "shuffle" : "contig", (long long)c.args.num_outputs, r.median_us, r.min_us,
               r.max_us, gbs, bw > 0 ? 100.0 * gbs / bw : 0.0, r.floor_us, xf, chain_us, x_chain, check,
               spread ? " (spread > 1.5x)" : "");
        fflush(stdout);
        if (js)
            fprintf(js,
                    "%s\n  {\"name\": \"%s\", \"layout\": \"%s\", \"reqs\": %lld, \"tokens\": %lld, \"C\": %lld, "
                    "\"block\": %lld, \"format\": \"%s\", \"overlap\": %d, \"kv_block_size\": %lld, "
                    "\"outputs\": %lld, \"bytes\": %.0f, \"median_us\": %.3f, \"min_us\": %.3f, \"gbs\": %.3f, "
                    "\"max_us\": %.3f, \"calls\": %d, \"pct_read_bw\": %.2f, \"floor_us\": %.3f, \"x_floor\": %.4f, "
                    "\"chain_us\": %.3f, \"x_chain\": %.4f, \"spread\": %s, \"check\": \"%s\", \"samples_us\": [",
                    i ? "," : "", list[i].name, list[i].p.shuffle ? "shuffle" : "contig",
                    (long long)list[i].p.num_reqs, (long long)list[i].p.total_tokens,
                    (long long)list[i].p.compress_ratio, (long long)list[i].p.block_size,
                    kvc_kit_format_name(list[i].p.nope_format), (int)list[i].p.overlap,
                    (long long)c.args.kv_block_size, (long long)c.args.num_outputs, bytes, r.median_us, r.min_us, gbs,
                    r.max_us, r.calls, bw > 0 ? 100.0 * gbs / bw : 0.0, r.floor_us, xf, r.chain_us, xc,
                    spread ? "true" : "false", ok ? "ok" : "fail");
        for (int k = 0; js && k < r.nsamples; k++) fprintf(js, "%s%.3f", k ? ", " : "", r.samples[k]);
        if (js) fprintf(js, "]}");
        free(r.samples);
        kvc_case_free(&c);
    }
    if (js) {
        fprintf(js, "\n ],\n \"x_floor_geomean\": %.4f,\n \"x_floor_worst\": %.4f,\n \"pct_read_geomean\": %.2f,\n"
                    " \"cases_spread\": %d\n}\n",
                nx ? exp(log_x / nx) : 0.0, worst_x, nread ? exp(log_read / nread) : 0.0, noisy);
        const int werr = ferror(js);
        if (fclose(js) != 0 || werr) {
            fprintf(stderr, "kvcompress: writing %s failed: %s\n", o.json, strerror(errno ? errno : EIO));
            return 1;
        }
    }
    printf("x_floor = median time / median time of a plain read of the same bytes in the same loop (1.00 = the "
           "memory floor; the CPU's floor reads a fresh buffer, so a case whose rows sit in the caches can be below 1); "
           "x_chain = median time / median time of the chain floor (CUDA); "
           "%%read = bytes per second over the read bandwidth measured at the start\n");
    if (nx) printf("x_floor: geomean %.3f, worst %.3f over %d cases\n", exp(log_x / nx), worst_x, nx);
    if (o.plot && write_plot(o.plot, plot_name, plot_x, n, backend_name(be)) != 0) {
        fprintf(stderr, "kvcompress: writing %s failed: %s\n", o.plot, strerror(errno ? errno : EIO));
        return 1;
    }
    if (noisy)
        printf("warning: %d case(s) with a spread of more than 1.5x between the fastest and slowest call: the machine was "
               "busy or its clocks moved; take the figures with care or run again\n",
               noisy);
    printf("%d cases, %d failed\n", n, failures);
    return failures ? 1 : 0;
}

/* The golden data verify uses without --golden: $KVCOMPRESS_GOLDEN, the
 * source tree this binary was built from, or the installed copy beside the
 * binary (<prefix>/share/kvcompress/golden). */
static const char *find_golden(void) {
    static char path[8192];
    const char *env = getenv("KVCOMPRESS_GOLDEN");
    if (env && *env) return env;
    snprintf(path, sizeof path, "%s/cases.tsv", KVC_SOURCE_GOLDEN_DIR);
    if (access(path, R_OK) == 0) return KVC_SOURCE_GOLDEN_DIR;
    char exe[4096];
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return NULL;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return NULL;
    *slash = 0;
    snprintf(path, sizeof path, "%s/../share/kvcompress/golden/cases.tsv", exe);
    if (access(path, R_OK) != 0) return NULL;
    path[strlen(path) - strlen("/cases.tsv")] = 0;
    return path;
}

static int cmd_verify(int argc, char **argv) {
    kvc_backend b = KVC_BACKEND_AUTO;
    const char *golden = NULL;
    int nrandom = 24, threads = 0, golden_given = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(USAGE_VERIFY, stdout);
            return 0;
        }
        int takes = !strcmp(a, "--backend") || !strcmp(a, "--golden") || !strcmp(a, "--random") ||
                    !strcmp(a, "--threads");
        if (!takes) return usage_error("verify: unknown option '%s' (see kvcompress verify --help)", a);
        if (need_value(i, argc, argv)) return 2;
        const char *v = argv[++i];
        if (!strcmp(a, "--backend")) {
            if (parse_backend(v, &b)) return usage_error("--backend %s: expected auto, cpu, cuda or opencl", v);
        } else if (!strcmp(a, "--golden")) {
            golden = v;
            golden_given = 1;
        } else {
            long long x;
            if (parse_num(a, v, 0, !strcmp(a, "--random") ? 100000 : 1024, &x)) return 2;
            if (!strcmp(a, "--random")) nrandom = (int)x;
            else threads = (int)x;
        }
    }
    kvc_backend be = resolve_backend(b);
    if (!kvc_backend_available(be)) {
        fprintf(stderr, "kvcompress: backend %s is not available here\n", backend_name(be));
        return 1;
    }
    printf("kvcompress %s verify: backend %s\n", KVC_VERSION_STRING, backend_name(be));
    if (be == KVC_BACKEND_CUDA) kvc_bench_cuda_info();
    else if (be == KVC_BACKEND_OPENCL) kvc_bench_opencl_info();
    else printf("cpu: %d threads\n", threads ? threads : kvc_cpu_default_threads());
    if (!golden) golden = find_golden();
    kvc_golden_case *g = NULL;
    int ng = golden ? kvc_kit_load_index(golden, &g) : -1;
    free(g);
    if (ng < 0 && golden_given) {
        fprintf(stderr, "kvcompress: --golden %s: no golden data there (manifest / cases.tsv)\n", golden);
        return 1;
    }
    if (ng < 0) {
        /* a verify that skips the golden cases would pass on less than it says */
        fprintf(stderr, "kvcompress: no golden data found, so verify cannot check the golden bytes.  Point it at "
                        "them: --golden DIR or $KVCOMPRESS_GOLDEN (a source checkout's tests/data/golden, or "
                        "<prefix>/share/kvcompress/golden after cmake --install); a pip-installed package has none\n");
        return 1;
    }
    printf("golden data: %s\n", golden);
    /* the conformance matrix of tests/test_backends.c (tools/kit/kvc_conform.c) */
    kvc_conform_opts o = {be, threads, ng < 0 ? NULL : golden, nrandom, nrandom > 0, stdout, nrandom > 0};
    kvc_conform_result res;
    kvc_kit_conform(&o, &res);
    const int passed = res.passed, failed = res.failed;
    printf("%d passed, %d failed\n", passed, failed);
    if (passed + failed == 0) {
        fprintf(stderr, "kvcompress: verify checked nothing\n");
        return 1;
    }
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    argc_all = argc;
    argv_all = argv;
    if (argc < 2) {
        fputs(USAGE_MAIN, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        fputs(USAGE_MAIN, stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("kvcompress %s\n", kvc_version_string());
        return 0;
    }
    if (!strcmp(cmd, "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "verify")) return cmd_verify(argc - 2, argv + 2);
    return usage_error("unknown command '%s' (kvcompress --help lists commands)", cmd);
}
