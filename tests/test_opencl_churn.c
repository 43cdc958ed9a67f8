/*
 * test_opencl_churn -- the OpenCL backend's per-queue and per-context state
 * grows and is released (issue 49), and what the caller passes as a buffer
 * is checked against what the call reaches:
 *   - 300 command queues made, called on and released one after another
 *     (the library had a table of 256 that never shrank: call 257 failed);
 *   - 40 contexts made, called on and released (a table of 16, and the
 *     library's references kept every released context alive);
 *   - resident memory measured over both: flat after the first rounds;
 *   - a caller's status word that is a tensor's buffer, a sub-buffer of one,
 *     or shorter than the 40-byte word, and a kv_cache buffer shorter than
 *     its sizes: refused, nothing written (they returned KVC_OK and wrote
 *     over an input or past the buffer).
 * Every call's bytes equal the CPU backend's.
 * Usage: test_opencl_churn [queues contexts]; exit 0 pass, 1 fail, 77 skip.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress.h"
#include "kvcompress_rand.h"
#include "test_util.h"

#include <CL/cl.h>

#include "kvcompress_opencl.h"

static const char *kSpec = "reqs=2,tokens=1024,C=128,block=8,kv_block=2,layout=shuffle";

static kvc_case g_host;
static uint8_t *g_cpu_rows, *g_got, *g_rows;

/* One call of the case on queue q (buffers in q's context): poisoned kv
 * cache, status word and bytes checked.  @return 0 pass. */
static int call_once(cl_command_queue q, const kvc_kit_dev_args *x, const char *what, int round) {
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = q;
    const cl_uchar poison = (cl_uchar)(round * 13 + 5);
    kvc_device_status s;
    memset(&s, 0, sizeof s);
    kvc_status st = KVC_ERROR_DEVICE;
    if (clEnqueueFillBuffer(q, (cl_mem)x->h[KVC_KIT_KV], &poison, 1, 0, x->kv_bytes, 0, NULL, NULL) == CL_SUCCESS &&
        (st = kvc_compress(&x->d, &ex, NULL)) == KVC_OK && (st = kvc_opencl_read_status(&ex, &s)) == KVC_OK &&
        clEnqueueReadBuffer(q, (cl_mem)x->h[KVC_KIT_KV], CL_TRUE, 0, x->kv_bytes, g_got, 0, NULL, NULL) != CL_SUCCESS)
        st = KVC_ERROR_DEVICE;
    if (st != KVC_OK || s.status != 0 || s.outputs_written != g_host.args.num_outputs) {
        printf("FAIL %s %d: %s (%s), device status %d, %lld written\n", what, round, kvc_status_string(st),
               kvc_last_error_message(), s.status, (long long)s.outputs_written);
        return 1;
    }
    kvc_kit_output_rows(&g_host.args, &g_host, g_got, g_rows);
    if (memcmp(g_rows, g_cpu_rows, (size_t)g_host.args.num_outputs * KVC_SLOT_BYTES) != 0) {
        printf("FAIL %s %d: bytes differ from the CPU backend's\n", what, round);
        return 1;
    }
    return 0;
}

/* n queues of one context, one after another, each called on and released. */
static int queue_churn(cl_context ctx, cl_device_id dev, const kvc_kit_dev_args *x, int n) {
    int failures = 0;
    long rss_early = tu_rss_kib(); /* (retaken after the first rounds) */
    for (int i = 0; i < n && failures < 3; i++) {
        cl_int err;
        cl_command_queue q = clCreateCommandQueue(ctx, dev, 0, &err);
        if (err != CL_SUCCESS) {
            printf("FAIL clCreateCommandQueue %d: %d\n", i, (int)err);
            return failures + 1;
        }
        failures += call_once(q, x, "queue", i);
        clFinish(q);
        clReleaseCommandQueue(q);
        if (i == n / 10) rss_early = tu_rss_kib();
    }
    const long grew = tu_rss_kib() - rss_early;
    printf("%d queues made, called on and released: %d failures, resident memory %+ld KiB after the first %d\n", n,
           failures, grew, n / 10);
    if (grew > 16 * 1024) {
        printf("FAIL queue churn: resident memory grew by %ld KiB\n", grew);
        failures++;
    }
    return failures;
}

/* n contexts, one after another: the case uploaded to each, called, all released. */
static int context_churn(cl_device_id dev, int n) {
    int failures = 0;
    long rss_early = tu_rss_kib(); /* (retaken after the first rounds) */
    const int warm = n / 2;
    for (int i = 0; i < n && failures < 3; i++) {
        cl_int err;
        cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
        cl_command_queue q = err == CL_SUCCESS ? clCreateCommandQueue(ctx, dev, 0, &err) : NULL;
        if (err != CL_SUCCESS) {
            printf("FAIL context %d: %d\n", i, (int)err);
            return failures + 1;
        }
        kvc_kit_opencl_use(ctx, q);
        kvc_kit_dev_args x;
        char msg[256];
        if (kvc_kit_upload(&kvc_kit_opencl_mem, &g_host.args, &x, msg, sizeof msg) != 0) {
            printf("FAIL context %d: upload: %s\n", i, msg);
            return failures + 1;
        }
        failures += call_once(q, &x, "context", i);
        clFinish(q);
        kvc_kit_release(&kvc_kit_opencl_mem, &x);
        kvc_kit_opencl_use(NULL, NULL);
        clReleaseCommandQueue(q);
        clReleaseContext(ctx);
        if (i == warm) rss_early = tu_rss_kib();
    }
    const long grew = tu_rss_kib() - rss_early;
    printf("%d contexts made, called on and released: %d failures, resident memory %+ld KiB after the first %d\n",
           n, failures, grew, warm);
    /* a context the library kept alive holds its program (PoCL: several MiB) */
    if (grew > 32 * 1024) {
        printf("FAIL context churn: resident memory grew by %ld KiB\n", grew);
        failures++;
    }
    return failures;
}

/* The call with exec->device_status = status must be refused with `want`, nothing written. */
static int refused(cl_command_queue q, const kvc_args *d, cl_mem status, kvc_status want, const char *frag,
                   const char *what, cl_mem kv, size_t kv_bytes) {
    const cl_uchar poison = 0x5A;
    clEnqueueFillBuffer(q, kv, &poison, 1, 0, kv_bytes, 0, NULL, NULL);
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = q;
    ex.device_status = (kvc_device_status *)(void *)status;
    const kvc_status st = kvc_compress(d, &ex, NULL);
    clFinish(q);
    int bad = st != want || !strstr(kvc_last_error_message(), frag);
    if (clEnqueueReadBuffer(q, kv, CL_TRUE, 0, kv_bytes, g_got, 0, NULL, NULL) != CL_SUCCESS) bad = 1;
    for (size_t i = 0; i < kv_bytes && !bad; i++) bad = g_got[i] != poison;
    printf("%s %s: %s, \"%s\"\n", bad ? "FAIL" : "ok  ", what, kvc_status_string(st), kvc_last_error_message());
    return bad;
}

static int buffers_checked(cl_command_queue q, const kvc_kit_dev_args *x) {
    cl_context ctx;
    clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL);
    cl_int err;
    int f = 0;
    cl_mem kv = (cl_mem)x->h[KVC_KIT_KV], state = (cl_mem)x->h[0];
    f += refused(q, &x->d, kv, KVC_ERROR_ALIASING, "kv_cache", "status word = the kv_cache buffer", kv, x->kv_bytes);
    f += refused(q, &x->d, state, KVC_ERROR_ALIASING, "state_cache", "status word = the state buffer", kv,
                 x->kv_bytes);
    cl_buffer_region r = {0, 64};
    cl_mem sub = clCreateSubBuffer(kv, CL_MEM_READ_WRITE, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
    if (err == CL_SUCCESS) {
        f += refused(q, &x->d, sub, KVC_ERROR_ALIASING, "kv_cache", "status word = a sub-buffer of kv_cache", kv,
                     x->kv_bytes);
        clReleaseMemObject(sub);
    }
    cl_mem tiny = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4, NULL, &err);
    f += refused(q, &x->d, tiny, KVC_ERROR_BAD_SHAPE, "4 bytes", "status word of 4 bytes", kv, x->kv_bytes);
    clReleaseMemObject(tiny);
    /* kv_cache of 16 bytes (the call reaches its whole page): refused, not a crash in clFinish */
    cl_mem small_kv = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 16, NULL, &err);
    kvc_args d = x->d;
    d.kv_cache = (uint8_t *)(void *)small_kv;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = q;
    const kvc_status st = kvc_compress(&d, &ex, NULL);
    clFinish(q);
    const int bad = st != KVC_ERROR_BAD_SHAPE || !strstr(kvc_last_error_message(), "kv_cache");
    printf("%s kv_cache buffer of 16 bytes: %s, \"%s\"\n", bad ? "FAIL" : "ok  ", kvc_status_string(st),
           kvc_last_error_message());
    f += bad;
    clReleaseMemObject(small_kv);
    /* a status word of its own still works */
    cl_mem own = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(kvc_device_status), NULL, &err);
    ex.device_status = (kvc_device_status *)(void *)own;
    kvc_device_status s;
    memset(&s, 0, sizeof s);
    const int ok = kvc_compress(&x->d, &ex, NULL) == KVC_OK && kvc_opencl_read_status(&ex, &s) == KVC_OK &&
                   s.outputs_written == g_host.args.num_outputs;
    printf("%s status word of its own: %lld written\n", ok ? "ok  " : "FAIL", (long long)s.outputs_written);
    clReleaseMemObject(own);
    return f + !ok;
}

int main(int argc, char **argv) {
    const int nq = argc > 1 ? atoi(argv[1]) : 300, nc = argc > 2 ? atoi(argv[2]) : 40;
    cl_context ctx;
    cl_device_id dev;
    cl_command_queue kq = (cl_command_queue)kvc_kit_opencl_queue_of((void **)&ctx, (void **)&dev);
    if (!kq) return tu_skip("no OpenCL device");
    char msg[256];
    if (kvc_kit_case_with_cpu(kSpec, &g_host, &g_cpu_rows, msg, sizeof msg) != 0) {
        printf("FAIL case: %s\n", msg);
        return 1;
    }
    g_rows = malloc((size_t)g_host.args.num_outputs * KVC_SLOT_BYTES);
    g_got = malloc(g_host.kv_cache_bytes + 16);
    kvc_kit_dev_args x;
    if (kvc_kit_upload(&kvc_kit_opencl_mem, &g_host.args, &x, msg, sizeof msg) != 0) {
        printf("FAIL upload: %s\n", msg);
        return 1;
    }
    int failures = buffers_checked(kq, &x);
    failures += queue_churn(ctx, dev, &x, nq);
    kvc_kit_release(&kvc_kit_opencl_mem, &x);
    failures += context_churn(dev, nc);
    printf("%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    free(g_rows);
    free(g_got);
    free(g_cpu_rows);
    kvc_case_free(&g_host);
    return failures ? 1 : 0;
}
