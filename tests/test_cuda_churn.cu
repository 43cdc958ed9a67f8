/*
 * test_cuda_churn -- the CUDA backend's per-stream workspaces grow and are
 * released, and what the caller passes is checked against what the call
 * reaches (issue 49):
 *   - 1100 streams made, called on and destroyed one after another (the
 *     library had a table of 1024 that never shrank: call 1025 failed);
 *     device memory and resident host memory measured: flat;
 *   - a CUDA graph captured on a stream before the churn replays right
 *     after it (its workspace is never freed);
 *   - a caller's status word that is inside a tensor, shorter than the
 *     64-byte word, or host memory, and a kv_cache allocation shorter than
 *     its sizes: refused, nothing written.
 * Every call's bytes equal the CPU backend's.
 * Usage: test_cuda_churn [streams]; exit 0 pass, 1 fail, 77 no CUDA device.
 */
#include <time.h>

#include "cuda_case.cuh"
#include "test_util.h"
#include "kvcompress_cuda.h"

static uint8_t *g_rows;

static size_t device_used(void) {
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    return total - free_b;
}

/* The case's bytes in x->got (copied on s, synchronised) equal the CPU's. */
static int bytes_ok(dev_case *x, cudaStream_t s) {
    TC_CHECK(cudaMemcpyAsync(x->got, x->d.kv_cache, x->bytes[KVC_KIT_KV], cudaMemcpyDeviceToHost, s));
    TC_CHECK(cudaStreamSynchronize(s));
    kvc_kit_output_rows(&x->host.args, &x->host, x->got, g_rows);
    return memcmp(g_rows, x->cpu_rows, (size_t)x->host.args.num_outputs * KVC_SLOT_BYTES) == 0;
}

/* A new non-blocking stream and a CUDA exec on it. */
static void stream_exec(cudaStream_t *s, kvc_exec *ex) {
    TC_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
    kvc_exec_init(ex);
    ex->backend = KVC_BACKEND_CUDA;
    ex->stream = *s;
}

static int call_once(dev_case *x, cudaStream_t s, int round) {
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CUDA;
    ex.stream = s;
    TC_CHECK(cudaMemsetAsync(x->d.kv_cache, round * 13 + 5, x->bytes[KVC_KIT_KV], s));
    kvc_device_status st;
    memset(&st, 0, sizeof st);
    if (kvc_compress(&x->d, &ex, NULL) != KVC_OK || kvc_cuda_read_status(&ex, &st) != KVC_OK || st.status != 0 ||
        st.outputs_written != x->host.args.num_outputs || !bytes_ok(x, s)) {
        printf("FAIL stream %d: \"%s\", device status %d, %lld written\n", round, kvc_last_error_message(), st.status,
               (long long)st.outputs_written);
        return 1;
    }
    return 0;
}

/* The call with exec->device_status = status (and kv_cache = kv) refused with `want`; the case's kv_cache untouched. */
static int refused(dev_case *x, void *status, uint8_t *kv, kvc_status want, const char *frag, const char *what) {
    TC_CHECK(cudaMemset(x->d.kv_cache, 0x5A, x->bytes[KVC_KIT_KV]));
    kvc_args d = x->d;
    if (kv) d.kv_cache = kv;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CUDA;
    ex.device_status = (kvc_device_status *)status;
    const kvc_status st = kvc_compress(&d, &ex, NULL);
    TC_CHECK(cudaDeviceSynchronize());
    TC_CHECK(cudaMemcpy(x->got, x->d.kv_cache, x->bytes[KVC_KIT_KV], cudaMemcpyDeviceToHost));
    int bad = st != want || !strstr(kvc_last_error_message(), frag);
    for (size_t i = 0; i < x->bytes[KVC_KIT_KV] && !bad; i++) bad = x->got[i] != 0x5A;
    printf("%s %s: %s, \"%s\"\n", bad ? "FAIL" : "ok  ", what, kvc_status_string(st), kvc_last_error_message());
    return bad;
}

int main(int argc, char **argv) {
    const int n = argc > 1 ? atoi(argv[1]) : 1100;
    if (!tc_have_gpu()) return tu_skip("no CUDA device");
    dev_case x;
    if (tc_make("reqs=2,tokens=2048,C=128,block=8,kv_block=2,layout=shuffle", &x)) return 1;
    g_rows = (uint8_t *)malloc((size_t)x.host.args.num_outputs * KVC_SLOT_BYTES);
    int failures = 0;

    /* caller's buffers checked */
    failures += refused(&x, x.d.kv_cache, NULL, KVC_ERROR_ALIASING, "kv_cache", "status word inside kv_cache");
    failures += refused(&x, (void *)x.d.state_cache, NULL, KVC_ERROR_ALIASING, "state_cache",
                        "status word = the state cache");
    void *tiny = NULL;
    TC_CHECK(cudaMalloc(&tiny, 4));
    failures += refused(&x, tiny, NULL, KVC_ERROR_BAD_SHAPE, "status word needs", "status word of 4 bytes");
    void *host_word = malloc(sizeof(kvc_device_status));
    failures += refused(&x, host_word, NULL, KVC_ERROR_BAD_PARAMETER, "not memory of CUDA device",
                        "status word in host memory");
    free(host_word);
    uint8_t *small_kv = NULL;
    TC_CHECK(cudaMalloc(&small_kv, 16));
    failures += refused(&x, NULL, small_kv, KVC_ERROR_BAD_SHAPE, "kv_cache", "kv_cache allocation of 16 bytes");
    TC_CHECK(cudaFree(small_kv));
    TC_CHECK(cudaFree(tiny));

    /* a graph captured before the churn */
    cudaStream_t gs;
    kvc_exec gex;
    stream_exec(&gs, &gex);
    failures += call_once(&x, gs, 0); /* the workspace exists before the capture */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    TC_CHECK(cudaStreamBeginCapture(gs, cudaStreamCaptureModeGlobal));
    const kvc_status cst = kvc_compress(&x.d, &gex, NULL);
    TC_CHECK(cudaStreamEndCapture(gs, &graph));
    TC_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    if (cst != KVC_OK) {
        printf("FAIL capture: %s\n", kvc_last_error_message());
        failures++;
    }

    /* stream churn */
    long rss0 = tu_rss_kib(); /* (retaken after the first quarter) */
    size_t dev0 = device_used();
    for (int i = 0; i < n && failures < 3; i++) {
        cudaStream_t s;
        TC_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        failures += call_once(&x, s, i);
        TC_CHECK(cudaStreamDestroy(s));
        if (i == n / 4) {
            rss0 = tu_rss_kib();
            dev0 = device_used();
        }
    }
    const long rss_grew = tu_rss_kib() - rss0;
    const long long dev_grew = (long long)device_used() - (long long)dev0;
    printf("%d streams made, called on and destroyed: resident memory %+ld KiB, device memory %+lld KiB after the "
           "first %d\n", n, rss_grew, dev_grew / 1024, n / 4);
    if (rss_grew > 32 * 1024 || dev_grew > 64LL << 20) {
        printf("FAIL stream churn: memory grew\n");
        failures++;
    }

    /* host time of a call, for the record (not a pass condition): back-to-back calls on one stream */
    {
        cudaStream_t s;
        kvc_exec ex;
        stream_exec(&s, &ex);
        for (int i = 0; i < 100; i++) kvc_compress(&x.d, &ex, NULL);
        TC_CHECK(cudaStreamSynchronize(s));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < 2000; i++) kvc_compress(&x.d, &ex, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        TC_CHECK(cudaStreamSynchronize(s));
        printf("host time of one call: %.2f us (2000 back-to-back calls, %lld outputs each)\n",
               ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 2000 / 1e3,
               (long long)x.host.args.num_outputs);
        TC_CHECK(cudaStreamDestroy(s));
    }

    /* the graph replays on its workspace after the churn */
    TC_CHECK(cudaMemsetAsync(x.d.kv_cache, 0x33, x.bytes[KVC_KIT_KV], gs));
    TC_CHECK(cudaGraphLaunch(exec, gs));
    kvc_device_status s;
    const int graph_ok = kvc_cuda_read_status(&gex, &s) == KVC_OK && s.status == 0 &&
                         s.outputs_written == x.host.args.num_outputs && bytes_ok(&x, gs);
    printf("%s graph captured before the churn replays: %lld written\n", graph_ok ? "ok  " : "FAIL",
           (long long)s.outputs_written);
    failures += !graph_ok;
    TC_CHECK(cudaGraphExecDestroy(exec));
    TC_CHECK(cudaGraphDestroy(graph));
    TC_CHECK(cudaStreamDestroy(gs));
    tc_free(&x);
    free(g_rows);
    printf("%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
