/*
 * test_units -- the canonical arithmetic and kvc-rand, piece by piece:
 * generator check values (SPEC 5), kexp properties and accuracy, bf16 RNE,
 * exact ceil-log2 against log2 in double, e4m3 encoding against the
 * reference's fp8_probe bytes, the tree split rule.
 * usage: test_units GOLDEN_DIR, or test_units exp_all (the SIMD exps and
 * the quotient exponents on every argument, nothing else)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_canon.h"
#include "kvc_check.h"
#include "cpu_testing.h" /* the CPU backend's test entry points (test build of the library) */
#include "kvc_kit.h"
#include "kvcompress_rand.h"
#include "test_util.h"

static float fbits(uint32_t u) { return kvc_host_float(u); }

/* Index arithmetic is 64-bit end to end: offsets past 2^31 elements, and a
 * full validation of positions, blocks and slots past 2^31 (nothing that
 * large is allocated: validation reads only the index tensors). */
static void test_64bit_addressing(void) {
    kvc_args a;
    kvc_args_init(&a);
    a.block_size = 8;
    a.state_stride_token = 1024 + 16;
    a.state_stride_block = 8 * (1024 + 16) + 48;
    const int64_t blk = 3000000007LL, pos = 123456789012LL;
    __int128 want = (__int128)blk * a.state_stride_block + (__int128)(pos % 8) * a.state_stride_token;
    TU_CHECK((__int128)kvc_state_row_offset(&a, blk, pos) == want, "state row offset past 2^31");
    a.kv_block_size = 64;
    a.page_stride = 64 * 584 + 8;
    const int64_t slot = 5000000123LL;
    int64_t po, so;
    kvc_slot_offsets(&a, slot, &po, &so);
    __int128 page = slot / 64, s = slot % 64;
    TU_CHECK((__int128)po == page * a.page_stride + s * 576 && (__int128)so == page * a.page_stride + 64 * 576 + s * 8,
             "slot offsets past 2^31");

    /* validate a call whose positions, blocks and slots are all past 2^31 */
    float dummy_state[4];
    uint16_t w[512] = {0};
    float cs[64] = {0};
    int32_t t2r[2] = {0, 1};
    int64_t positions[2] = {(INT64_C(1) << 33) + 127, (INT64_C(1) << 34) - 1};
    int64_t slots[2] = {INT64_C(3) << 31, (INT64_C(3) << 31) + 1};
    int64_t bidx[2] = {0, 1};
    int32_t table[2 * 4] = {0, 1, 2, 3, 1, 2, 3, 0};
    kvc_args_init(&a);
    a.state_cache = dummy_state;
    a.block_size = INT64_C(1) << 32; /* 4 logical blocks of 2^32 positions */
    a.num_blocks = 4;
    a.token_to_req = t2r;
    a.positions = positions;
    a.kv_slot_mapping = slots;
    a.num_tokens = 2;
    a.boundary_token_indices = bidx;
    a.num_outputs = 2;
    a.block_table = table;
    a.num_reqs = 2;
    a.blocks_per_req = 4;
    a.rms_norm_weight = w;
    a.cos_sin_cache = cs;
    a.max_pos = INT64_C(1) << 35;
    /* kvc_validate never touches kv_cache; its declared 2^28 pages (10 TB)
     * must not overlap the inputs' declared spans, so it gets an address of
     * its own below them */
    a.kv_cache = (uint8_t *)(uintptr_t)(UINT64_C(1) << 40);
    a.num_pages = INT64_C(1) << 28; /* 2^34 slots of 64 */
    a.compress_ratio = 128;
    kvc_status st = kvc_validate(&a);
    TU_CHECK(st == KVC_OK, "64-bit validation: %s", kvc_last_error_message());
    slots[1] = a.num_pages * 64;
    st = kvc_validate(&a);
    TU_CHECK(st == KVC_ERROR_INDEX_OUT_OF_RANGE && strstr(kvc_last_error_message(), "= 17179869184 >= num_pages"),
             "slot 2^34 refused: %s", kvc_last_error_message());
    slots[1] = (INT64_C(3) << 31) + 1;
    table[4 + 3] = 4;
    st = kvc_validate(&a);
    TU_CHECK(st == KVC_ERROR_INDEX_OUT_OF_RANGE && strstr(kvc_last_error_message(), "[3] = 4 outside"),
             "block of position 2^34 - 1 checked: %s", kvc_last_error_message());
}

/* kvc_chunk_size against the two chunk policies it replaced (the CUDA and
 * the OpenCL hosts' own loops, written out), over a grid of sizes. */
static int64_t old_policy(int64_t nout, int64_t nseg, int64_t div, int64_t maxchunks, int64_t maxch, int bounded) {
    int64_t total = nout * nseg, x = total / div > 0 ? total / div : 1, ch = 1;
    while (ch * 2 <= x) ch *= 2;
    if (ch < 4) ch = 4;
    while (ch * maxchunks < nseg && (!bounded || ch < maxch)) ch *= 2;
    if (ch > maxch) ch = maxch;
    while (ch > 1 && ch > nseg) ch /= 2;
    return ch;
}
static void test_chunk_size(void) {
    int bad = 0;
    for (int64_t nout = 1; nout <= 70000; nout = nout * 3 + 1)
        for (int64_t nseg = 1; nseg <= 4096; nseg = nseg * 2 + (nseg & 1)) {
            bad += kvc_chunk_size(nout, nseg, 132, 8, 16) != old_policy(nout, nseg, 132, 8, 16, 0);
            bad += kvc_chunk_size(nout, nseg, 132, 8, 128) != old_policy(nout, nseg, 132, 8, 128, 1);
        }
    TU_CHECK(bad == 0, "kvc_chunk_size differs from the old CUDA / OpenCL policies in %d cases", bad);
    TU_CHECK(kvc_chunk_size(1024, 16, 132, 8, 16) == 16 && kvc_chunk_size(64, 16, 132, 8, 16) == 4,
             "131k / 8k tokens at C=128: chunks of 16 and 4 segments");
}

/* kvc_plan_make against the hosts' own derivations it replaced (written out):
 * one-segment K balanced over whole waves, groups, and the shape fields. */
static void test_plan(void) {
    int bad = 0;
    const int64_t slots_list[3] = {396, 264, 4};
    for (int si = 0; si < 3; si++)
        for (int64_t j = 1; j <= 200; j++) {
            const int64_t slots = slots_list[si];
            /* sizes around whole multiples of the slots, and a geometric series */
            const int64_t nout = j <= 100 ? slots * j + (j % 3) - 1 : ((int64_t)1 << (j % 18)) + j;
            for (int cuda = 0; cuda < 2; cuda++) {
                const kvc_plan_policy pol = {132, 8, 16, slots, cuda ? 32 : 32, cuda ? 0 : slots * 32};
                kvc_plan pl;
                kvc_plan_make(nout, 4, 1, &pol, &pl);
                int64_t k = 0, groups = nout;
                if (cuda || nout > slots * 32) {
                    const int64_t waves = (nout + slots * 32 - 1) / (slots * 32);
                    k = (nout + slots * waves - 1) / (slots * waves);
                    k = k < 1 ? 1 : k > 32 ? 32 : k;
                    groups = (nout + k - 1) / k;
                }
                bad += pl.small_k != k || pl.groups != groups || pl.rows != 8 || pl.nseg != 1 || pl.full;
            }
        }
    TU_CHECK(bad == 0, "kvc_plan_make's one-segment plan differs from the hosts' old one in %d cases", bad);
    const kvc_plan_policy pol = {132, 8, 16, 396, 28, 0};
    kvc_plan pl;
    kvc_plan_make(32768, 4, 1, &pol, &pl);
    TU_CHECK(pl.small_k == 28 && pl.groups == 1171, "32768 C4 outputs on 396 slots: K = 28 (3 whole waves), got %lld",
             (long long)pl.small_k);
    kvc_plan_make(1024, 128, 0, &pol, &pl);
    TU_CHECK(pl.rows == 128 && pl.nseg == 16 && pl.ch == 16 && pl.nchunk == 1 && pl.full && !pl.small_k &&
                 pl.groups == 1024,
             "131k tokens at C=128: one chunk of 16 segments per output");
    kvc_plan_make(10, 100, 1, &pol, &pl);
    TU_CHECK(pl.rows == 200 && pl.nseg == 25 && !pl.full && pl.groups == 10 * pl.nchunk, "C=100 overlap plan");
}

/* kvc_row_lookup against the row arithmetic written out, every row of
 * overlapping and plain windows over a table with bad blocks. */
/* The CPU backend's AVX2 loop against its portable loop on state rows that
 * start at every float offset within a 64-byte line (its aligned and
 * split-vector forms; the golden states all start 16 bytes into a line):
 * the same bytes in a poisoned KV cache. */
static void test_avx2_offsets(void) {
    if (!kvc_cpu_has_avx2()) {
        printf("skip AVX2 loop at every row offset: no AVX2 and FMA here\n");
        return;
    }
    kvc_case c;
    if (!tu_small_case(&c, 29)) {
        TU_CHECK(0, "generate: %s", kvc_last_error_message());
        return;
    }
    const size_t n = c.state_elems, bytes = c.kv_cache_bytes;
    float *buf = aligned_alloc(64, ((n + 16) * sizeof(float) + 63) & ~(size_t)63);
    uint8_t *want = malloc(bytes);
    for (int lead = 0; lead < 16; lead++) {
        kvc_args a = c.args;
        a.state_cache = memcpy(buf + lead, c.state_cache, n * sizeof(float));
        for (int f = 0; f < 2; f++) {
            kvc_kit_poison(c.kv_cache, bytes, (uint64_t)lead);
            kvc_exec ex;
            kvc_exec_init(&ex);
            ex.backend = KVC_BACKEND_CPU;
            kvc_cpu_force_isa(f ? KVC_CPU_ISA_AVX2 : KVC_CPU_ISA_PORTABLE);
            const kvc_status st = kvc_compress(&a, &ex, NULL);
            kvc_cpu_force_isa(KVC_CPU_ISA_AUTO);
            TU_CHECK(st == KVC_OK, "lead %d: %s", lead, kvc_last_error_message());
            if (!f) memcpy(want, c.kv_cache, bytes);
        }
        TU_CHECK(memcmp(want, c.kv_cache, bytes) == 0, "AVX2 loop, rows %d floats into a line: bytes differ from the "
                 "portable loop's", lead);
    }
    free(want);
    free(buf);
    kvc_case_free(&c);
}

static void test_row_lookup(void) {
    const int32_t trow[6] = {3, 0, 6, 2, -1, 5}; /* 6 = num_blocks: bad */
    kvc_shape sh;
    memset(&sh, 0, sizeof sh);
    sh.block_size = 4;
    sh.num_blocks = 6;
    sh.state_stride_token = 2048;
    sh.state_stride_block = 4 * 2048 + 64;
    int bad = 0, masked = 0, badrows = 0;
    for (int k = 0; k < 4; k++) {
        const int ov = k & 1, D = k < 2 ? 512 : 128;
        sh.overlap = ov;
        sh.head_dim = D;
        sh.compress_ratio = 4;
        for (int64_t p = 3; p < 16; p++)
            for (int64_t i = 0; i < (ov ? 8 : 4); i++) {
                const int64_t pos = ov ? (i < 4 ? p - 7 + i : p - 3 + (i - 4)) : p - 3 + i;
                const int64_t half = ov ? (i < 4 ? 0 : D) : 0;
                int64_t want, blk = -99;
                if (pos < 0) {
                    want = KVC_ROW_MASKED;
                    masked++;
                } else if (trow[pos / 4] < 0 || trow[pos / 4] >= 6) {
                    want = KVC_ROW_BAD;
                    badrows++;
                } else {
                    want = trow[pos / 4] * sh.state_stride_block + (pos % 4) * 2048 + half;
                }
                kvc_i64 got_blk = -99;
                const int64_t got = kvc_row_lookup(&sh, trow, p, i, &got_blk);
                if (pos >= 0) blk = trow[pos / 4];
                bad += got != want || (pos >= 0 && got_blk != blk);
            }
    }
    TU_CHECK(bad == 0 && masked > 0 && badrows > 0, "kvc_row_lookup: %d rows differ (%d masked, %d bad seen)", bad,
             masked, badrows);
    TU_CHECK(kvc_score_delta(0, 512) == 512 && kvc_score_delta(1, 512) == 1024 && kvc_score_delta(0, 128) == 128 &&
                 kvc_score_delta(1, 128) == 256,
             "score half offsets");
}

/* kvc_e2m1_code against SPEC 9's rule written plainly: the nearest of the
 * eight magnitudes, a tie to the even code, saturating; sign bit 3 kept.
 * Every float of magnitude below 8 at a stride of 2^7 ulps, the tie points
 * and their neighbours, and both signs. */
static int e2m1_ref(float v) {
    static const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    const double m = fabs((double)v);
    int best = 7;
    if (m < 6) {
        best = 0;
        for (int k = 1; k < 8; k++) {
            const double dk = fabs(m - mags[k]), db = fabs(m - mags[best]);
            if (dk < db || (dk == db && k % 2 == 0)) best = k;
        }
    }
    return (signbit(v) ? 8 : 0) | best;
}

/* kvc_case_generate's state cache equals SPEC 5's definition element by
 * element: element n (column n % width) is ldexpf(kvc_rand_f32(seed, 0, n),
 * the column's shift), rounded once; shifts whose results are normal,
 * subnormal (2^shift itself normal or subnormal), overflowing and past
 * binary32 either way, on 1 and 3 threads (the threads' ranges start
 * mid-row). */
static void test_generator_state(void) {
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = 1, p.total_tokens = 64, p.compress_ratio = 4, p.block_size = 4, p.seed = 11;
    p.overlap = KVC_OVERLAP_ON, p.head_dim = 128, p.nope_format = KVC_INDEXER_FP8;
    const int shifts[][3] = {{0, 8, -140}, {8, 16, -126}, {16, 24, -149}, {24, 32, -150}, {32, 40, 127},
                             {40, 48, 128},  {48, 56, -200}, {56, 64, 300}};
    p.num_value_shifts = (int)(sizeof shifts / sizeof shifts[0]);
    for (int k = 0; k < p.num_value_shifts; k++) {
        p.value_shifts[k].lo = shifts[k][0], p.value_shifts[k].hi = shifts[k][1];
        p.value_shifts[k].shift = shifts[k][2];
    }
    p.score_shift = -130;
    for (int threads = 1; threads <= 3; threads += 2) {
        kvc_case c;
        const kvc_status st = kvc_case_generate(&p, threads, &c);
        TU_CHECK(st == KVC_OK, "generate: %s", kvc_last_error_message());
        if (st != KVC_OK) return;
        const int64_t width = c.args.state_width, half = width / 2;
        size_t bad = 0, first = 0;
        for (size_t n = 0; n < c.state_elems; n++) {
            const int64_t col = (int64_t)(n % (size_t)width);
            int sh = p.score_shift;
            if (col < half) {
                sh = 0;
                for (int k = 0; k < p.num_value_shifts; k++)
                    if (col % 128 >= shifts[k][0] && col % 128 < shifts[k][1]) sh = shifts[k][2];
            }
            const float want = ldexpf(kvc_rand_f32(p.seed, 0, n), sh);
            if (memcmp(&want, &c.state_cache[n], 4) != 0 && !bad++) first = n;
        }
        TU_CHECK(bad == 0, "generated state, %d threads: %zu of %zu elements differ from ldexpf(kvc_rand_f32), "
                 "first %zu", threads, bad, c.state_elems, first);
        kvc_case_free(&c);
    }
}

static void test_e2m1(void) {
    int64_t bad = 0, n = 0;
    for (uint32_t u = 0; u < 0x41000000u; u += 128) { /* |v| < 8 */
        for (int sgn = 0; sgn < 2; sgn++) {
            const uint32_t w = u | (sgn ? 0x80000000u : 0);
            float v;
            memcpy(&v, &w, 4);
            bad += kvc_e2m1_code(v) != e2m1_ref(v);
            n++;
        }
    }
    static const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f, 1e30f, 0.0f};
    for (size_t i = 0; i < sizeof ties / sizeof ties[0]; i++)
        for (int k = -1; k <= 1; k++)
            for (int sgn = 0; sgn < 2; sgn++) {
                float v = k < 0 ? nextafterf(ties[i], 0.0f) : k > 0 ? nextafterf(ties[i], INFINITY) : ties[i];
                v = sgn ? -v : v;
                bad += kvc_e2m1_code(v) != e2m1_ref(v);
                n++;
            }
    TU_CHECK(bad == 0, "kvc_e2m1_code: %lld of %lld values differ from the nearest-even rule", (long long)bad,
             (long long)n);
}

/* SPEC 9's conformance (kvc_kit_conforms on the indexer formats): a golden
 * file against itself, with one value a code step off, two steps off, a
 * scale byte changed, and too many values a step off. */
static void test_indexer_conformance(const char *golden) {
    static const struct {
        const char *name;
        int fmt, sb;
    } files[] = {{"fp8idx_ovl_split_S64_r4_t8192_c4_b4_shuffle_s4001", KVC_INDEXER_FP8, 132},
                 {"mxfp4_ovl_split_S64_r4_t8192_c4_b4_contig_s4002", KVC_INDEXER_MXFP4, 68}};
    for (int f = 0; f < 2; f++) {
        char path[4096], msg[256];
        snprintf(path, sizeof path, "%s/dsv4/%s.canon.bin", golden, files[f].name);
        size_t len = 0;
        uint8_t *ref = kvc_kit_read_file(path, &len);
        TU_CHECK(ref != NULL, "read %s", path);
        if (!ref) continue;
        const int64_t n = (int64_t)len / files[f].sb;
        uint8_t *x = malloc(len);
        int64_t differ = -1;
        const int mx = files[f].fmt == KVC_INDEXER_MXFP4;
        /* the first value of output 5 one magnitude step down (its code is not 0: a step is a neighbour code) */
        uint8_t *v = x + 5 * files[f].sb;
        memcpy(x, ref, len);
        const int ok_same = kvc_kit_conforms(x, ref, n, files[f].fmt, &differ, msg, sizeof msg) == 0 && differ == 0;
        int step_ok, two_bad, scale_bad, many_bad;
        if (mx) {
            const unsigned nib = v[0] & 15u;
            v[0] = (uint8_t)((v[0] & 0xF0u) | ((nib & 7u) ? nib - 1 : nib + 1));
        } else {
            v[0] = (uint8_t)((v[0] & 0x7Fu) ? v[0] - 1 : v[0] + 1);
        }
        step_ok = kvc_kit_conforms(x, ref, n, files[f].fmt, &differ, msg, sizeof msg) == 0 && differ == 1;
        memcpy(x, ref, len);
        if (mx) v[0] = (uint8_t)((v[0] & 0xF0u) | ((v[0] & 7u) >= 2 ? (v[0] & 15u) - 2 : (v[0] & 15u) + 2));
        else v[0] = (uint8_t)((v[0] & 0x7Fu) >= 2 ? v[0] - 2 : v[0] + 2);
        two_bad = kvc_kit_conforms(x, ref, n, files[f].fmt, &differ, msg, sizeof msg) != 0;
        memcpy(x, ref, len);
        v[files[f].sb - 1] ^= 1u; /* a scale byte */
        scale_bad = kvc_kit_conforms(x, ref, n, files[f].fmt, &differ, msg, sizeof msg) != 0;
        memcpy(x, ref, len);
        const int64_t allow = 2 + n * 128 / (mx ? 5000 : 20000);
        for (int64_t o = 0; o <= allow; o++) { /* one value of each of allow + 1 outputs a step off */
            uint8_t *w = x + o * files[f].sb;
            if (mx) w[0] = (uint8_t)((w[0] & 0xF0u) | ((w[0] & 7u) ? (w[0] & 15u) - 1 : (w[0] & 15u) + 1));
            else w[0] = (uint8_t)((w[0] & 0x7Fu) ? w[0] - 1 : w[0] + 1);
        }
        many_bad = kvc_kit_conforms(x, ref, n, files[f].fmt, &differ, msg, sizeof msg) != 0;
        TU_CHECK(ok_same && step_ok && two_bad && scale_bad && many_bad,
                 "SPEC 9 conformance (%s): itself %d, one step %d, two steps refused %d, scale refused %d, "
                 "too many refused %d", files[f].name, ok_same, step_ok, two_bad, scale_bad, many_bad);
        free(x);
        free(ref);
    }
}

/* The CPU backend's AVX-512F and AVX2 exps equal kvc_exp bit for bit:
 * every stride-th of the 2^31 non-positive floats (-Inf and the negative
 * NaNs among them), +0 and a NaN; and the FP8 and MXFP4 exponents without
 * the divide: every stride-th float of each one's range (from its amax
 * floor to FLT_MAX) and its last one, against ceil_log2 of the divide.
 * (test units: stride 61; test cpu_exp_all, `test_units exp_all`: 1,
 * every one, and nothing else.) */
static void test_exp_forms(uint32_t stride) {
    int64_t bad, bad8;
    kvc_cpu_exp_mismatches(stride, &bad, &bad8);
    if (bad < 0) printf("skip AVX-512F exp: no AVX-512F here\n");
    else TU_CHECK(bad == 0, "AVX-512F exp: %lld of the sampled floats differ from kvc_exp", (long long)bad);
    if (bad8 < 0) printf("skip AVX2 exp: no AVX2 and FMA here\n");
    else TU_CHECK(bad8 == 0, "AVX2 exp: %lld of the sampled floats differ from kvc_exp", (long long)bad8);
    const struct { float k, lo; } q[] = {{KVC_FP8_MAX, KVC_AMAX_FLOOR}, {6.0f, KVC_MX_AMAX_FLOOR}};
    for (int i = 0; i < 2; i++) {
        uint64_t wrong = 0, first = 0;
        const uint64_t hi = 0x7F7FFFFFu;
        for (uint64_t b = kvc_host_bits(q[i].lo);; b += stride) {
            if (b > hi) b = hi;
            const float a = fbits((uint32_t)b);
            if (kvc_ceil_log2_quot(a, q[i].k) != kvc_ceil_log2(a / q[i].k) && !wrong++) first = b;
            if (b == hi) break;
        }
        TU_CHECK(wrong == 0, "ceil_log2(a / %g) without the divide: %llu of the sampled floats differ, e.g. 0x%08llx",
                 (double)q[i].k, (unsigned long long)wrong, (unsigned long long)first);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    if (!strcmp(argv[1], "exp_all")) { /* test cpu_exp_all */
        test_exp_forms(1);
        printf("%s (%d failures)\n", tu_failures ? "FAILED" : "passed", tu_failures);
        return tu_failures ? 1 : 0;
    }
    /* SPEC 5 check values */
    const uint64_t u_expect[3] = {0x5e41ab087439611eull, 0x86d6fd953217ae03ull, 0xbcd9dbb49673066bull};
    for (int i = 0; i < 3; i++)
        TU_CHECK(kvc_rand_u64(1, 0, (uint64_t)i) == u_expect[i], "u64(1,0,%d) = %016llx", i,
                 (unsigned long long)kvc_rand_u64(1, 0, (uint64_t)i));
    const double f_expect[3] = {0.3662991523742676, 0.7182693481445312, -3.575329303741455};
    for (int i = 0; i < 3; i++)
        TU_CHECK(fabs((double)kvc_rand_f32(1136, 0, (uint64_t)i) - f_expect[i]) < 1e-15, "f32(1136,0,%d) = %.17g", i,
                 (double)kvc_rand_f32(1136, 0, (uint64_t)i));
    {
        const uint8_t b[9] = {1, 0, 0, 0, 0, 0, 0, 0, 2};
        TU_CHECK(kvc_rand_checksum(b, 9) == 3, "checksum pads the last word with zeros");
    }

    { /* huge_pages moves the state cache onto other pages, never changes the case */
        kvc_case_params p;
        memset(&p, 0, sizeof p);
        p.num_reqs = 2, p.total_tokens = 2048, p.compress_ratio = 128, p.block_size = 8, p.shuffle = 1, p.seed = 7;
        kvc_case a, b;
        const kvc_status sa = kvc_case_generate(&p, 2, &a);
        p.huge_pages = 1;
        const kvc_status sb = kvc_case_generate(&p, 2, &b);
        TU_CHECK(sa == KVC_OK && sb == KVC_OK, "kvc_case_generate: %d / %d", (int)sa, (int)sb);
        if (sa == KVC_OK && sb == KVC_OK)
            TU_CHECK(a.state_elems == b.state_elems &&
                         kvc_rand_checksum(a.state_cache, a.state_elems * 4) ==
                             kvc_rand_checksum(b.state_cache, b.state_elems * 4) &&
                         !memcmp(a.block_table, b.block_table, sizeof(int32_t) * (size_t)a.args.num_blocks),
                     "huge_pages: the generated state or table differs");
        kvc_case_free(&a);
        kvc_case_free(&b);
    }

    test_chunk_size();
    test_plan();
    test_avx2_offsets();
    test_row_lookup();
    test_generator_state();
    test_e2m1();
    if (argc > 1) test_indexer_conformance(argv[1]);

    test_exp_forms(61);

    /* the CPU backend's AVX-512F finaliser equals kvc_finalize_slot byte
     * for byte */
    {
        const int64_t bad = kvc_cpu_finalize_mismatches(20000, 42, 512);
        if (bad < 0) printf("skip AVX-512F finaliser: no AVX-512F here\n");
        else TU_CHECK(bad == 0, "AVX-512F finaliser: %lld of 20000 random slots differ from kvc_finalize_slot",
                      (long long)bad);
        const int64_t bad128 = kvc_cpu_finalize_mismatches(40000, 43, 128);
        if (bad128 >= 0)
            TU_CHECK(bad128 == 0, "AVX-512F indexer finaliser: %lld of 40000 random slots differ from "
                     "kvc_finalize_indexer", (long long)bad128);
    }

    /* the golden cases through the CPU backend's portable segment loop and
     * finaliser (what CPUs without AVX2 or AVX-512F run) and its AVX2 loop
     * (CPUs with AVX2 but no AVX-512F), on this machine too */
    {
        const struct {
            int isa;
            const char *name;
        } forms[] = {{KVC_CPU_ISA_PORTABLE, "portable"}, {KVC_CPU_ISA_AVX2, "AVX2"}};
        for (int f = 0; f < 2; f++) {
            kvc_conform_opts o = {KVC_BACKEND_CPU, 2, argv[1], 0, 0, NULL, 0};
            kvc_conform_result r;
            kvc_cpu_force_isa(forms[f].isa);
            const int rc = kvc_kit_conform(&o, &r);
            kvc_cpu_force_isa(KVC_CPU_ISA_AUTO);
            TU_CHECK(rc == 0 && r.failed == 0 && r.passed > 0, "%s CPU loop: %d of %d golden cases differ",
                     forms[f].name, r.failed, r.passed + r.failed);
        }
    }

    /* kexp */
    TU_CHECK(kvc_exp(0.0f) == 1.0f, "kexp(0) = %a", kvc_exp(0.0f));
    TU_CHECK(kvc_exp(-INFINITY) == 0.0f, "kexp(-inf)");
    TU_CHECK(kvc_exp(-87.5f) == 0.0f, "kexp(-87.5) = 0 (cutoff)");
    TU_CHECK(isnan(kvc_exp(NAN)), "kexp(NaN) is NaN");
    TU_CHECK(kvc_exp(-87.0f) > 0.0f, "kexp(-87) > 0");
    double worst = 0;
    for (float x = -87.0f; x <= 0.0f; x += 0.0009765625f) {
        double want = exp((double)x), got = (double)kvc_exp(x);
        double ulp = ldexp(1.0, ilogb(want) - 23);
        double err = fabs(got - want) / ulp;
        if (err > worst) worst = err;
    }
    TU_CHECK(worst <= 4.0, "kexp within 4 ulp of exp on [-87, 0]: worst %.2f", worst);
    TU_CHECK(kvc_max(NAN, 1.0f) != kvc_max(NAN, 1.0f), "max(NaN, 1) is NaN");
    TU_CHECK(isnan(kvc_max(1.0f, NAN)), "max(1, NaN) is NaN");
    TU_CHECK(kvc_max(-INFINITY, 2.0f) == 2.0f, "max(-inf, 2)");

    /* merge: all -Inf gives (m, 0, 0) */
    {
        float m = -INFINITY, d = 5, n = 7;
        kvc_merge(&m, &d, &n, -INFINITY, 3, 4);
        TU_CHECK(m == -INFINITY && d == 0 && n == 0, "merge of two dead states is (-inf, 0, 0)");
        m = 0.0f, d = 1.0f, n = 2.0f;
        kvc_merge(&m, &d, &n, 0.0f, 1.0f, 4.0f);
        TU_CHECK(m == 0.0f && d == 2.0f && n == 6.0f, "merge of equal maxima adds");
    }

    /* bf16 RNE */
    TU_CHECK(kvc_bf16_bits(1.0f) == 0x3F80, "bf16(1)");
    TU_CHECK(kvc_bf16_bits(fbits(0x3F808000u)) == 0x3F80, "tie to even (down)");
    TU_CHECK(kvc_bf16_bits(fbits(0x3F818000u)) == 0x3F82, "tie to even (up)");
    TU_CHECK(kvc_bf16_bits(fbits(0x3F808001u)) == 0x3F81, "above tie rounds up");
    TU_CHECK(kvc_bf16_bits(NAN) == 0x7FC0, "NaN -> 0x7FC0");
    TU_CHECK(kvc_bf16_bits(fbits(0x7F7FFFFFu)) == 0x7F80, "FLT_MAX rounds to bf16 +Inf");
    TU_CHECK(kvc_bf16_bits(-0.0f) == 0x8000, "-0 keeps its sign");

    /* exact ceil log2 against double log2 on every bf16 value of the quantiser's range */
    for (uint32_t h = 0x0001; h < 0x7F80; h++) {
        float a = kvc_bf16_to_f32((uint16_t)h);
        float amax = a > 0x1.a36e2ep-14f ? a : 0x1.a36e2ep-14f;
        float p = amax * 0x1.020408p-7f;
        int want = (int)ceil(log2((double)p));
        if (kvc_group_exponent(a, 0) != want) {
            TU_CHECK(0, "int8 exponent of bf16 0x%04x: %d, ceil(log2) %d", h, kvc_group_exponent(a, 0), want);
            break;
        }
        /* ceil(log2(amax / 127)) as the statement computes it */
        int stmt = (int)ceil(log2((double)(amax * (1.0f / 127.0f))));
        if (kvc_group_exponent(a, 0) != stmt) {
            TU_CHECK(0, "bf16 0x%04x: exponent %d differs from the statement's %d", h, kvc_group_exponent(a, 0), stmt);
            break;
        }
    }
    TU_CHECK(kvc_int8_code(-1.5f, 1.0f) == (uint8_t)-1, "int8 truncates toward zero, two's complement");
    TU_CHECK(kvc_int8_code(200.0f, 1.0f) == 127, "int8 clamps");

    /* e4m3 against the reference's probe bytes */
    char path[4096];
    snprintf(path, sizeof path, "%s/fp8_probe.tsv", argv[1]);
    FILE *f = fopen(path, "r");
    TU_CHECK(f != NULL, "cannot open %s", path);
    int probes = 0;
    if (f) {
        char hex[64];
        unsigned byte;
        while (fscanf(f, "%63s %u", hex, &byte) == 2) {
            float v = strtof(hex, NULL);
            TU_CHECK(kvc_e4m3_code(v) == byte, "e4m3(%g) = 0x%02x, reference 0x%02x", (double)v, kvc_e4m3_code(v),
                     byte);
            probes++;
        }
        fclose(f);
    }
    TU_CHECK(probes >= 10, "fp8 probe has %d values", probes);
    /* SPEC 7 examples */
    TU_CHECK(kvc_e4m3_code(0x1p-10f) == 0x00 && kvc_e4m3_code(1.0625f) == 0x38 && kvc_e4m3_code(1.1875f) == 0x3A &&
                 kvc_e4m3_code(19.0f) == 0x5A && kvc_e4m3_code(232.0f) == 0x76 && kvc_e4m3_code(448.0f) == 0x7E,
             "SPEC 7 e4m3 examples");
    TU_CHECK(kvc_e4m3_code(-0x1p-11f) == 0x80, "negative value rounding to zero keeps the sign");

    /* tree split: largest power of two strictly below n */
    const long long n_[] = {2, 3, 4, 5, 12, 13, 16, 17, 125};
    const long long p_[] = {1, 2, 2, 4, 8, 8, 8, 16, 64};
    for (int i = 0; i < 9; i++)
        TU_CHECK(kvc_tree_split(n_[i]) == p_[i], "split(%lld) = %lld", n_[i], (long long)kvc_tree_split(n_[i]));

    test_64bit_addressing();
    printf("%s (%d failures)\n", tu_failures ? "FAILED" : "passed", tu_failures);
    return tu_failures ? 1 : 0;
}
