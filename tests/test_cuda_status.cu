/*
 * test_cuda_status -- each call's device status word holds that call's
 * counts and error alone, where no memset zeroes it before the launch (a
 * call of one output: cuda_decode.cuh writes the word whole; the indexer,
 * one-segment, decode and fused kernels: each CTA writes a record of its
 * own, the word their header, status_of) and where one does (a caller's
 * word; kvc_compress_many in two launches):
 *   - in a caller's word filled with garbage before the call;
 *   - in the library's word over back-to-back calls, and after a call that
 *     recorded an index error (the next call's word is clean);
 *   - over three replays of a captured CUDA graph, the second with an
 *     index error;
 * for calls of one output and of many (with a padding output), either head
 * width, the indexer kernel (8192 outputs: more than one wave of the
 * decode kernel's CTAs), and kvc_compress_many's fused launch and two
 * launches (an error in either set).  Every call's bytes equal the CPU
 * backend's.
 * Usage: test_cuda_status; exit 0 pass, 1 fail, 77 no CUDA device.
 */
#include "cuda_case.cuh"
#include "kvc_check.h"
#include "test_util.h"
#include "kvcompress_cuda.h"

static int g_failures;

/* The status word a call of x should leave: the CPU backend's counts. */
static kvc_device_status want_of(const dev_case *x) {
    kvc_args a = x->host.args;
    a.kv_cache = (uint8_t *)malloc(x->host.kv_cache_bytes);
    kvc_report rep;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    if (kvc_compress(&a, &ex, &rep) != KVC_OK) {
        fprintf(stderr, "CPU run: %s\n", kvc_last_error_message());
        exit(1);
    }
    free(a.kv_cache);
    kvc_device_status w;
    memset(&w, 0, sizeof w);
    w.outputs_written = rep.outputs_written;
    w.outputs_padding = rep.outputs_padding;
    w.outputs_nonfinite = rep.outputs_nonfinite;
    return w;
}

/* The written slots of x equal the CPU's (a padding output's slot -1 skipped). */
static int bytes_ok(dev_case *x, cudaStream_t st) {
    TC_CHECK(cudaMemcpyAsync(x->got, x->d.kv_cache, x->bytes[KVC_KIT_KV], cudaMemcpyDeviceToHost, st));
    TC_CHECK(cudaStreamSynchronize(st));
    kvc_args t = x->host.args;
    t.kv_cache = x->got;
    const int64_t sb = kvc_slot_bytes(t.nope_format);
    int ok = 1;
    for (int64_t o = 0; o < t.num_outputs && ok; o++) {
        const int64_t slot = x->host.kv_slot_mapping[x->host.boundary_token_indices[o]];
        uint8_t row[KVC_SLOT_BYTES];
        if (slot < 0) continue;
        kvc_kit_slot_row(&t, slot, row);
        ok = memcmp(row, x->cpu_rows + o * sb, (size_t)sb) == 0;
    }
    return ok;
}

/* Status s equals want field by field (reported as `what`), and the n cases' bytes equal the CPU's. */
static void expect(const char *name, const char *what, const kvc_device_status &s, const kvc_device_status &want,
                   dev_case *x, int n, cudaStream_t st) {
    int ok = memcmp(&s, &want, sizeof s) == 0;
    for (int i = 0; i < n && ok; i++) ok = bytes_ok(&x[i], st);
    printf("%s %s, %s: status %d check %d output %lld value %lld, written %lld padding %lld nonfinite %lld invalid "
           "%lld (want written %lld padding %lld)\n",
           ok ? "ok  " : "FAIL", name, what, s.status, s.check, (long long)s.output, (long long)s.value,
           (long long)s.outputs_written, (long long)s.outputs_padding, (long long)s.outputs_nonfinite,
           (long long)s.outputs_invalid, (long long)want.outputs_written, (long long)want.outputs_padding);
    g_failures += !ok;
}

/* Status s records the index error of a block number `bad`. */
static void expect_error(const char *name, const char *what, const kvc_device_status &s, int64_t bad) {
    const int ok = s.status == KVC_ERROR_INDEX_OUT_OF_RANGE && s.value == bad && s.outputs_invalid >= 1;
    printf("%s %s, %s: status %d value %lld invalid %lld\n", ok ? "ok  " : "FAIL", name, what, s.status,
           (long long)s.value, (long long)s.outputs_invalid);
    g_failures += !ok;
}

static kvc_device_status read_word(const kvc_exec &ex) {
    kvc_device_status s;
    memset(&s, 0x77, sizeof s);
    if (kvc_cuda_read_status(&ex, &s) != KVC_OK) {
        fprintf(stderr, "read_status: %s\n", kvc_last_error_message());
        exit(1);
    }
    return s;
}

/* The n cases' kv caches poisoned with byte v, then one call (kvc_compress_many for n > 1). */
static kvc_status call(dev_case *x, int n, const kvc_exec &ex, int v) {
    kvc_args sets[2];
    for (int i = 0; i < n; i++) {
        TC_CHECK(cudaMemsetAsync(x[i].d.kv_cache, v + i, x[i].bytes[KVC_KIT_KV], (cudaStream_t)ex.stream));
        sets[i] = x[i].d;
    }
    return n == 1 ? kvc_compress(sets, &ex, NULL) : kvc_compress_many(sets, n, &ex, NULL);
}
static void run(dev_case *x, int n, const kvc_exec &ex) {
    if (call(x, n, ex, 0x3C) != KVC_OK) {
        fprintf(stderr, "call: %s\n", kvc_last_error_message());
        exit(1);
    }
}

/* The sets of `specs` (one call; two: kvc_compress_many) through every status path above. */
static void check_case(const char *name, const char *const *specs, int n) {
    dev_case x[2];
    kvc_device_status want;
    memset(&want, 0, sizeof want);
    for (int i = 0; i < n; i++) {
        if (tc_make(specs[i], &x[i])) exit(1);
        /* output 1 is padding: its slot -1, here and in the CPU's run */
        if (x[i].host.args.num_outputs > 1) {
            const int64_t pad_b = x[i].host.boundary_token_indices[1], minus1 = -1;
            x[i].host.kv_slot_mapping[pad_b] = -1;
            TC_CHECK(cudaMemcpy((int64_t *)x[i].d.kv_slot_mapping + pad_b, &minus1, 8, cudaMemcpyHostToDevice));
        }
        const kvc_device_status w = want_of(&x[i]);
        want.outputs_written += w.outputs_written;
        want.outputs_padding += w.outputs_padding;
        want.outputs_nonfinite += w.outputs_nonfinite;
    }
    cudaStream_t s;
    TC_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CUDA;
    ex.stream = s;

    /* a caller's word, garbage before the call */
    kvc_device_status *word = NULL;
    TC_CHECK(cudaMalloc(&word, sizeof *word));
    TC_CHECK(cudaMemsetAsync(word, 0xA5, sizeof *word, s));
    kvc_exec cex = ex;
    cex.device_status = word;
    run(x, n, cex);
    expect(name, "caller's word filled with 0xA5", read_word(cex), want, x, n, s);
    TC_CHECK(cudaFree(word));

    /* the library's word, three calls back to back */
    for (int i = 0; i < 3; i++) run(x, n, ex);
    expect(name, "the library's word after three calls", read_word(ex), want, x, n, s);

    /* an index error (the block of the first set's output 0's last row), then a clean call: nothing of it left */
    const kvc_case &h = x[0].host;
    const int64_t b0 = h.boundary_token_indices[0];
    int32_t *bt = (int32_t *)x[0].d.block_table + h.token_to_req[b0] * h.args.block_table_stride +
                  h.positions[b0] / h.args.block_size;
    int32_t saved = 0;
    const int32_t bad = (int32_t)h.args.num_blocks + 7;
    TC_CHECK(cudaMemcpy(&saved, bt, 4, cudaMemcpyDeviceToHost));
    TC_CHECK(cudaMemcpy(bt, &bad, 4, cudaMemcpyHostToDevice));
    call(x, n, ex, 0x3C);
    expect_error(name, "a bad block", read_word(ex), bad);
    TC_CHECK(cudaMemcpy(bt, &saved, 4, cudaMemcpyHostToDevice));
    run(x, n, ex);
    expect(name, "the call after an index error", read_word(ex), want, x, n, s);
    /* ... in the last set of kvc_compress_many (the first set's word clean) */
    int32_t *bt1 = bt, saved1 = 0;
    if (n > 1) {
        const kvc_case &h1 = x[n - 1].host;
        const int64_t b1 = h1.boundary_token_indices[0];
        bt1 = (int32_t *)x[n - 1].d.block_table + h1.token_to_req[b1] * h1.args.block_table_stride +
              h1.positions[b1] / h1.args.block_size;
        const int32_t bad1 = (int32_t)h1.args.num_blocks + 7; /* (its own tensors' block count) */
        TC_CHECK(cudaMemcpy(&saved1, bt1, 4, cudaMemcpyDeviceToHost));
        TC_CHECK(cudaMemcpy(bt1, &bad1, 4, cudaMemcpyHostToDevice));
        call(x, n, ex, 0x3C);
        expect_error(name, "a bad block in the last set", read_word(ex), bad1);
        TC_CHECK(cudaMemcpy(bt1, &saved1, 4, cudaMemcpyHostToDevice));
    }

    /* one output: its slot -1 (padding), then past the cache (an index error), each word whole */
    if (n == 1 && h.args.num_outputs == 1) {
        const int64_t slots[2] = {-1, 1 << 30};
        for (int k = 0; k < 2; k++) {
            int64_t *sm = (int64_t *)x[0].d.kv_slot_mapping + b0, saved_slot = 0;
            TC_CHECK(cudaMemcpy(&saved_slot, sm, 8, cudaMemcpyDeviceToHost));
            TC_CHECK(cudaMemcpy(sm, &slots[k], 8, cudaMemcpyHostToDevice));
            kvc_device_status *w1 = NULL;
            TC_CHECK(cudaMalloc(&w1, sizeof *w1));
            TC_CHECK(cudaMemsetAsync(w1, 0x5A, sizeof *w1, s));
            kvc_exec wex = ex;
            wex.device_status = w1;
            call(x, 1, wex, 0x3C);
            const kvc_device_status g = read_word(wex);
            kvc_device_status w;
            memset(&w, 0, sizeof w);
            if (k == 0) {
                w.outputs_padding = 1;
            } else {
                w.status = KVC_ERROR_INDEX_OUT_OF_RANGE;
                w.check = KVC_CHECK_SLOT;
                w.value = slots[1];
                w.outputs_invalid = 1;
            }
            const int ok = memcmp(&g, &w, sizeof g) == 0;
            printf("%s %s, %s: status %d check %d value %lld, written %lld padding %lld invalid %lld\n",
                   ok ? "ok  " : "FAIL", name, k ? "its slot past the cache" : "its slot -1", g.status, g.check,
                   (long long)g.value, (long long)g.outputs_written, (long long)g.outputs_padding,
                   (long long)g.outputs_invalid);
            g_failures += !ok;
            TC_CHECK(cudaFree(w1));
            TC_CHECK(cudaMemcpy(sm, &saved_slot, 8, cudaMemcpyHostToDevice));
        }
    }

    /* a captured graph, replayed three times: the second with a bad block */
    cudaGraph_t graph;
    cudaGraphExec_t gx;
    TC_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const kvc_status cst = call(x, n, ex, 0x40);
    TC_CHECK(cudaStreamEndCapture(s, &graph));
    if (cst != KVC_OK) {
        printf("FAIL %s: capture: %s\n", name, kvc_last_error_message());
        g_failures++;
    } else {
        TC_CHECK(cudaGraphInstantiate(&gx, graph, 0));
        for (int i = 0; i < 3; i++) {
            TC_CHECK(cudaMemcpyAsync(bt, i == 1 ? &bad : &saved, 4, cudaMemcpyHostToDevice, s));
            TC_CHECK(cudaGraphLaunch(gx, s));
            char what[64];
            snprintf(what, sizeof what, "graph replay %d%s", i + 1, i == 1 ? ", a bad block" : "");
            if (i == 1) expect_error(name, what, read_word(ex), bad);
            else expect(name, what, read_word(ex), want, x, n, s);
        }
        TC_CHECK(cudaGraphExecDestroy(gx));
    }
    TC_CHECK(cudaGraphDestroy(graph));
    TC_CHECK(cudaStreamDestroy(s));
    for (int i = 0; i < n; i++) tc_free(&x[i]);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* (each line out before a crash) */
    if (!tc_have_gpu()) return tu_skip("no CUDA device");
    /* C = 4 with overlap: one output (one CTA), then many CTAs, for either
     * head width; C = 8 without; a CSA layer's two compressors fused */
    static const char *const one_main[] = {"reqs=1,tokens=4,C=4,block=4,overlap=1,layout=shuffle,seed=3"};
    static const char *const many_main[] = {"reqs=96,tokens=1152,C=4,block=4,overlap=1,layout=shuffle,seed=4"};
    static const char *const one_idx[] = {"reqs=1,tokens=4,C=4,block=4,overlap=1,format=indexer_fp8,seed=5"};
    static const char *const many_idx[] = {
        "reqs=300,tokens=2400,C=4,block=8,overlap=1,format=indexer_mxfp4,layout=shuffle,seed=6"};
    static const char *const big_idx[] = {
        "reqs=4,tokens=32768,C=4,block=4,overlap=1,format=indexer_fp8,layout=shuffle,seed=10"};
    static const char *const c8[] = {"reqs=64,tokens=1024,C=8,block=16,layout=shuffle,seed=7"};
    static const char *const layer[] = {"reqs=40,tokens=320,C=4,block=4,overlap=1,layout=shuffle,seed=8",
                                        "reqs=40,tokens=320,C=4,block=4,overlap=1,format=indexer_fp8,seed=9"};
    /* (state dtypes apart: not fused; the one-segment and indexer kernels, each past a decode wave) */
    static const char *const layer2[] = {
        "reqs=8,tokens=8192,C=4,block=4,overlap=1,layout=shuffle,seed=11",
        "reqs=4,tokens=32768,C=4,block=4,overlap=1,format=indexer_fp8,state=bf16,layout=shuffle,seed=12"};
    check_case("main C4, one output", one_main, 1);
    check_case("main C4, 96 x 3 outputs", many_main, 1);
    check_case("indexer C4, one output", one_idx, 1);
    check_case("indexer MXFP4 C4, 300 x 2 outputs", many_idx, 1);
    check_case("indexer C4, 4 x 2048 outputs (the indexer kernel)", big_idx, 1);
    check_case("main C8, 64 x 2 outputs", c8, 1);
    check_case("kvc_compress_many: main and indexer C4, 40 x 2 outputs each", layer, 2);
    check_case("kvc_compress_many, two launches: main C4 float32 and indexer C4 bf16", layer2, 2);
    printf("%s (%d failures)\n", g_failures ? "FAILED" : "passed", g_failures);
    return g_failures ? 1 : 0;
}
