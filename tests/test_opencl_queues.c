/*
 * test_opencl_queues -- SPEC 2.6 on the OpenCL backend: two different cases
 * enqueued on two in-order queues of one context with no synchronisation
 * between the queues, many times; every output byte-exact against the CPU
 * backend and each queue's own status word right (written = the case's
 * outputs).  The pairs mix the kernels (slice C = 128 records, slice
 * C = 512 chunk states, the chunked kernel with tickets and chunk states,
 * the one-segment kernel).  Every other iteration the second queue is
 * finished before the first one's status is read, so that a status word or
 * workspace shared by the two queues is caught even on a device that runs
 * one command at a time.  Also: two host threads calling at once on ONE
 * queue (each call's commands must go in together: no interleaving on
 * the queue's workspace; without the library's lock the interleaving is a
 * matter of timing, seen in about half the runs on PoCL), and an
 * out-of-order queue is refused with an error, never run (a call's
 * kernels rely on queue order).  And a caller's status word between calls
 * on the library's word (the one-segment, indexer and slice kernels): each
 * read gives its own word's call.
 * Usage: test_opencl_queues [iterations]; exit 0 pass, 1 fail, 77 skip.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress.h"
#include "kvcompress_rand.h"
#include "test_util.h"

#ifdef KVC_KIT_WITH_OPENCL
#include <CL/cl.h>

#include "kvcompress_opencl.h"

static const char *kSpecs[] = {
    "reqs=2,tokens=2048,C=128,block=8,layout=shuffle",
    "reqs=1,tokens=1280,C=40,block=7",
    "reqs=2,tokens=1024,C=4,block=8,overlap=1,format=fp8",
    "reqs=1,tokens=2048,C=512,block=8",
    "reqs=2,tokens=1200,C=4,block=4,overlap=1,format=indexer_fp8",
};
#define NCASES (int)(sizeof kSpecs / sizeof kSpecs[0])

typedef struct {
    kvc_case host;
    kvc_kit_dev_args dev;
    uint8_t *cpu_rows, *got, *rows;
} ocl_case;

static int make_case(const char *spec, ocl_case *x) {
    memset(x, 0, sizeof *x);
    char msg[256] = "";
    if (kvc_kit_case_with_cpu(spec, &x->host, &x->cpu_rows, msg, sizeof msg) != 0) {
        printf("FAIL case %s: %s\n", spec, msg);
        return -1;
    }
    const kvc_args *a = &x->host.args;
    x->rows = malloc((size_t)a->num_outputs * KVC_SLOT_BYTES + 1);
    if (kvc_kit_upload(&kvc_kit_opencl_mem, a, &x->dev, msg, sizeof msg) != 0) {
        printf("FAIL case %s: upload: %s\n", spec, msg);
        return -1;
    }
    x->got = malloc(x->dev.kv_bytes + 16);
    return 0;
}

static void free_case(ocl_case *x) {
    kvc_kit_release(&kvc_kit_opencl_mem, &x->dev);
    free(x->cpu_rows);
    free(x->rows);
    free(x->got);
    kvc_case_free(&x->host);
}

/* Thread job: `iters` calls of case x on queue q, each read back and compared. */
typedef struct {
    cl_command_queue q;
    ocl_case *x;
    int iters, failures;
} shared_job;

static void *shared_queue_run(void *arg) {
    shared_job *j = arg;
    ocl_case *x = j->x;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = j->q;
    const size_t n = (size_t)x->host.args.num_outputs * KVC_SLOT_BYTES;
    for (int it = 0; it < j->iters; it++) {
        const cl_uchar poison = (cl_uchar)(it * 29 + 7);
        if (clEnqueueFillBuffer(j->q, (cl_mem)x->dev.h[KVC_KIT_KV], &poison, 1, 0, x->dev.kv_bytes, 0, NULL, NULL) !=
                CL_SUCCESS ||
            kvc_compress(&x->dev.d, &ex, NULL) != KVC_OK ||
            clEnqueueReadBuffer(j->q, (cl_mem)x->dev.h[KVC_KIT_KV], CL_TRUE, 0, x->dev.kv_bytes, x->got, 0, NULL, NULL) !=
                CL_SUCCESS) {
            j->failures++;
            continue;
        }
        kvc_kit_output_rows(&x->host.args, &x->host, x->got, x->rows);
        if (memcmp(x->rows, x->cpu_rows, n) != 0) j->failures++;
    }
    return NULL;
}

/* Two threads, one queue, two slice cases (two kernels a call) at once. */
static int one_queue_two_threads(cl_command_queue q, ocl_case *a, ocl_case *b, int iters) {
    shared_job jobs[2] = {{q, a, iters, 0}, {q, b, iters, 0}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, shared_queue_run, &jobs[k]);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    const int f = jobs[0].failures + jobs[1].failures;
    printf("%d calls each of two threads on one queue, %d failures\n", iters, f);
    return f;
}

/* An out-of-order queue: refused with KVC_ERROR_BAD_PARAMETER naming it. */
static int out_of_order_refused(cl_context ctx, cl_device_id dev, ocl_case *x) {
    cl_int err;
    cl_command_queue q = clCreateCommandQueue(ctx, dev, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
    if (err != CL_SUCCESS) {
        printf("out-of-order queue: not supported by the device (%d), not checked\n", (int)err);
        return 0;
    }
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = q;
    const kvc_status st = kvc_compress(&x->dev.d, &ex, NULL);
    const int ok = st == KVC_ERROR_BAD_PARAMETER && strstr(kvc_last_error_message(), "out-of-order") != NULL;
    if (!ok) printf("FAIL out-of-order queue: status %d, \"%s\"\n", (int)st, kvc_last_error_message());
    clFinish(q);
    clReleaseCommandQueue(q);
    return ok ? 0 : 1;
}

/* On queue q: case `lib_x` on the library's word, then case x on a word of
 * the caller's (garbage before the call); each read gives its own call's
 * counts.  @return 0 pass. */
static int own_word_between(cl_context ctx, cl_command_queue q, ocl_case *lib_x, ocl_case *x, const char *what) {
    cl_int err;
    cl_mem own = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(kvc_device_status), NULL, &err);
    if (err != CL_SUCCESS) {
        printf("FAIL clCreateBuffer(status): %d\n", (int)err);
        return 1;
    }
    kvc_exec lib, mine;
    kvc_exec_init(&lib);
    lib.backend = KVC_BACKEND_OPENCL;
    lib.stream = q;
    mine = lib;
    mine.device_status = (kvc_device_status *)(void *)own;
    const cl_uchar garbage = 0x5A;
    kvc_device_status sl, so;
    memset(&sl, 0, sizeof sl);
    memset(&so, 0, sizeof so);
    int ok = clEnqueueFillBuffer(q, own, &garbage, 1, 0, sizeof(kvc_device_status), 0, NULL, NULL) == CL_SUCCESS &&
             kvc_compress(&lib_x->dev.d, &lib, NULL) == KVC_OK && kvc_compress(&x->dev.d, &mine, NULL) == KVC_OK &&
             kvc_opencl_read_status(&mine, &so) == KVC_OK && kvc_opencl_read_status(&lib, &sl) == KVC_OK;
    ok = ok && so.status == 0 && so.outputs_written == x->host.args.num_outputs && so.outputs_padding == 0 &&
         so.outputs_invalid == 0 && so.outputs_nonfinite == 0 && sl.status == 0 &&
         sl.outputs_written == lib_x->host.args.num_outputs && sl.outputs_padding == 0 && sl.outputs_invalid == 0;
    printf("%s %s: the caller's word %d, %lld written, %lld padding, %lld invalid (want %lld written); the "
           "library's %d, %lld written (want %lld)\n",
           ok ? "ok  " : "FAIL", what, so.status, (long long)so.outputs_written, (long long)so.outputs_padding,
           (long long)so.outputs_invalid, (long long)x->host.args.num_outputs, sl.status,
           (long long)sl.outputs_written, (long long)lib_x->host.args.num_outputs);
    clFinish(q);
    clReleaseMemObject(own);
    return !ok;
}

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 12;
    cl_context ctx;
    cl_device_id dev;
    cl_command_queue kq = (cl_command_queue)kvc_kit_opencl_queue_of((void **)&ctx, (void **)&dev);
    if (!kq) return tu_skip("no OpenCL device");
    ocl_case cs[NCASES];
    for (int i = 0; i < NCASES; i++)
        if (make_case(kSpecs[i], &cs[i])) return 1;
    cl_command_queue q[2];
    for (int k = 0; k < 2; k++) {
        cl_int err;
        q[k] = clCreateCommandQueue(ctx, dev, 0, &err);
        if (err != CL_SUCCESS) {
            printf("FAIL clCreateCommandQueue: %d\n", (int)err);
            return 1;
        }
    }
    int failures = out_of_order_refused(ctx, dev, &cs[0]);
    for (int it = 0; it < iters; it++) {
        /* pair (i, j): every ordered pair of different cases over the iterations */
        const int i = it % NCASES, j = (i + 1 + (it / NCASES) % (NCASES - 1)) % NCASES;
        const int pick[2] = {i, j};
        kvc_exec ex[2];
        for (int k = 0; k < 2; k++) {
            ocl_case *x = &cs[pick[k]];
            kvc_exec_init(&ex[k]);
            ex[k].backend = KVC_BACKEND_OPENCL;
            ex[k].stream = q[k];
            const cl_uchar poison = (cl_uchar)((it * 37 + 11 * k) | 1);
            if (clEnqueueFillBuffer(q[k], (cl_mem)x->dev.h[KVC_KIT_KV], &poison, 1, 0, x->dev.kv_bytes, 0, NULL, NULL) !=
                    CL_SUCCESS ||
                kvc_compress(&x->dev.d, &ex[k], NULL) != KVC_OK ||
                clEnqueueReadBuffer(q[k], (cl_mem)x->dev.h[KVC_KIT_KV], CL_FALSE, 0, x->dev.kv_bytes, x->got, 0, NULL, NULL) !=
                    CL_SUCCESS) {
                printf("FAIL iteration %d queue %d %s: %s\n", it, k, kSpecs[pick[k]], kvc_last_error_message());
                return 1;
            }
        }
        clFlush(q[0]);
        clFlush(q[1]);
        if (it & 1) clFinish(q[1]); /* queue 1's call done before queue 0's status is read */
        for (int k = 0; k < 2; k++) {
            ocl_case *x = &cs[pick[k]];
            kvc_device_status s;
            const kvc_status st = kvc_opencl_read_status(&ex[k], &s); /* blocking, on q[k] */
            clFinish(q[k]);
            if (st != KVC_OK || s.status != 0 || s.outputs_written != x->host.args.num_outputs) {
                printf("FAIL iteration %d queue %d %s (with %s): status %d / %d, %lld written of %lld\n", it, k,
                       kSpecs[pick[k]], kSpecs[pick[1 - k]], (int)st, s.status, (long long)s.outputs_written,
                       (long long)x->host.args.num_outputs);
                failures++;
                continue;
            }
            kvc_kit_output_rows(&x->host.args, &x->host, x->got, x->rows);
            const size_t n = (size_t)x->host.args.num_outputs * KVC_SLOT_BYTES;
            if (memcmp(x->rows, x->cpu_rows, n) != 0) {
                size_t b = 0;
                while (x->rows[b] == x->cpu_rows[b]) b++;
                printf("FAIL iteration %d queue %d %s (with %s): output %zu byte %zu 0x%02x, CPU 0x%02x\n", it, k,
                       kSpecs[pick[k]], kSpecs[pick[1 - k]], b / KVC_SLOT_BYTES, b % KVC_SLOT_BYTES, x->rows[b],
                       x->cpu_rows[b]);
                failures++;
            }
        }
    }
    printf("%d iterations of two concurrent queues, %d failures\n", iters, failures);
    failures += one_queue_two_threads(q[0], &cs[0], &cs[3], 16 * iters);
    /* (cases 2 and 4: the one-segment and indexer kernels; 0: the slice kernels) */
    failures += own_word_between(ctx, q[0], &cs[2], &cs[4], "indexer on a word of its own after the one-segment");
    failures += own_word_between(ctx, q[0], &cs[4], &cs[2], "one-segment on a word of its own after the indexer");
    failures += own_word_between(ctx, q[0], &cs[0], &cs[4], "indexer on a word of its own after the slice kernels");
    for (int k = 0; k < 2; k++) clReleaseCommandQueue(q[k]);
    for (int i = 0; i < NCASES; i++) free_case(&cs[i]);
    return failures ? 1 : 0;
}
#else
int main(void) {
    printf("SKIP: built without the OpenCL kit\n");
    return TU_SKIP;
}
#endif
