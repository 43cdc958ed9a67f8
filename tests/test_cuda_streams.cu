/*
 * test_cuda_streams -- SPEC 2.6 on one device: two different cases launched
 * on two streams with no synchronisation between them, many times, every
 * output byte-exact against the CPU backend, and each stream's own status
 * word right.  The pairs mix the kernels (slice, chunked with tickets and
 * chunk states, one-segment), including two chunked cases at once, the ones
 * that raced on the shared workspace.  Then two host threads calling at
 * once on ONE stream (two slice cases: two kernels a call, whose commands
 * must not interleave on the stream's workspace).
 * Exit 0 pass, 1 fail, 77 no CUDA device.
 */
#include <pthread.h>

#include "cuda_case.cuh"
#include "kvcompress_cuda.h"

static const char *kSpecs[] = {
    "reqs=2,tokens=8192,C=128,block=8,layout=shuffle",
    "reqs=1,tokens=6400,C=100,block=16",
    "reqs=2,tokens=5120,C=40,block=7,layout=shuffle",
    "reqs=4,tokens=4096,C=4,block=8,overlap=1,format=fp8",
    "reqs=1,tokens=8192,C=512,block=8",
};
#define NCASES (int)(sizeof kSpecs / sizeof kSpecs[0])

/* Thread job: `iters` calls of case x on stream s, each copied back and compared. */
struct shared_job {
    cudaStream_t s;
    dev_case *x;
    uint8_t *rows;
    int iters, failures;
};

static void *shared_stream_run(void *arg) {
    shared_job *j = (shared_job *)arg;
    dev_case *x = j->x;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CUDA;
    ex.stream = j->s;
    const size_t n = (size_t)x->host.args.num_outputs * KVC_SLOT_BYTES;
    for (int it = 0; it < j->iters; it++) {
        if (cudaMemsetAsync(x->d.kv_cache, (it * 29 + 7) | 1, x->bytes[KVC_KIT_KV], j->s) != cudaSuccess ||
            kvc_compress(&x->d, &ex, NULL) != KVC_OK ||
            cudaMemcpyAsync(x->got, x->d.kv_cache, x->bytes[KVC_KIT_KV], cudaMemcpyDeviceToHost, j->s) != cudaSuccess ||
            cudaStreamSynchronize(j->s) != cudaSuccess) {
            j->failures++;
            continue;
        }
        kvc_kit_output_rows(&x->host.args, &x->host, x->got, j->rows);
        if (memcmp(j->rows, x->cpu_rows, n) != 0) j->failures++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 40;
    if (!tc_have_gpu()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    dev_case cs[NCASES];
    for (int i = 0; i < NCASES; i++)
        if (tc_make(kSpecs[i], &cs[i])) return 1;
    cudaStream_t st[2];
    for (int k = 0; k < 2; k++) TC_CHECK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
    uint8_t *rows = (uint8_t *)malloc((size_t)64 << 20);
    int failures = 0;
    for (int it = 0; it < iters; it++) {
        /* pair (i, j): every ordered pair of different cases over the iterations */
        const int i = it % NCASES, j = (i + 1 + (it / NCASES) % (NCASES - 1)) % NCASES;
        const int pick[2] = {i, j};
        kvc_exec ex[2];
        for (int k = 0; k < 2; k++) {
            dev_case *x = &cs[pick[k]];
            kvc_exec_init(&ex[k]);
            ex[k].backend = KVC_BACKEND_CUDA;
            ex[k].stream = st[k];
            TC_CHECK(cudaMemsetAsync(x->d.kv_cache, (it * 37 + 11 * k) | 1, x->bytes[KVC_KIT_KV], st[k]));
            if (kvc_compress(&x->d, &ex[k], NULL) != KVC_OK) {
                printf("FAIL %s: %s\n", x->name, kvc_last_error_message());
                return 1;
            }
            TC_CHECK(cudaMemcpyAsync(x->got, x->d.kv_cache, x->bytes[KVC_KIT_KV], cudaMemcpyDeviceToHost, st[k]));
        }
        for (int k = 0; k < 2; k++) {
            dev_case *x = &cs[pick[k]];
            kvc_device_status s;
            if (kvc_cuda_read_status(&ex[k], &s) != KVC_OK) { /* synchronises st[k] */
                printf("FAIL %s: read_status: %s\n", x->name, kvc_last_error_message());
                return 1;
            }
            if (s.status != 0 || s.outputs_written != x->host.args.num_outputs) {
                printf("FAIL iteration %d stream %d %s: status %d, %lld written of %lld\n", it, k, x->name, s.status,
                       (long long)s.outputs_written, (long long)x->host.args.num_outputs);
                failures++;
                continue;
            }
            kvc_kit_output_rows(&x->host.args, &x->host, x->got, rows);
            const size_t n = (size_t)x->host.args.num_outputs * KVC_SLOT_BYTES;
            if (memcmp(rows, x->cpu_rows, n) != 0) {
                size_t b = 0;
                while (rows[b] == x->cpu_rows[b]) b++;
                printf("FAIL iteration %d stream %d %s (with %s): output %zu byte %zu 0x%02x, CPU 0x%02x\n", it, k,
                       x->name, cs[pick[1 - k]].name, b / KVC_SLOT_BYTES, b % KVC_SLOT_BYTES, rows[b],
                       x->cpu_rows[b]);
                failures++;
            }
        }
    }
    printf("%d iterations of two concurrent streams, %d failures\n", iters, failures);
    uint8_t *rows2 = (uint8_t *)malloc((size_t)64 << 20);
    shared_job jobs[2] = {{st[0], &cs[0], rows, 4 * iters, 0}, {st[0], &cs[4], rows2, 4 * iters, 0}};
    pthread_t t[2];
    for (int k = 0; k < 2; k++) pthread_create(&t[k], NULL, shared_stream_run, &jobs[k]);
    for (int k = 0; k < 2; k++) pthread_join(t[k], NULL);
    const int shared_failures = jobs[0].failures + jobs[1].failures;
    printf("%d calls each of two threads on one stream, %d failures\n", 4 * iters, shared_failures);
    failures += shared_failures;
    free(rows2);
    for (int i = 0; i < NCASES; i++) tc_free(&cs[i]);
    free(rows);
    return failures ? 1 : 0;
}
