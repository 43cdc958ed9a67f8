/*
 * test_threads -- concurrent kvc_compress calls from several threads: on
 * different inputs, and on shared read-only inputs with private KV caches,
 * give the bytes of serial calls; error messages stay per thread.
 * (Also the TSan target of the sanitizer CI build.)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvcompress_rand.h"
#include "test_util.h"

#define NT 6
#define ROUNDS 3

typedef struct {
    const kvc_args *args;   /* inputs (kv_cache replaced by `kv`) */
    uint8_t *kv;
    size_t kv_bytes;
    const uint8_t *want;
    int threads;
    int bad;                /* run an invalid call between rounds */
    int failures;
} job;

static void *run(void *p) {
    job *j = p;
    kvc_args a = *j->args;
    a.kv_cache = j->kv;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    ex.num_threads = j->threads;
    for (int r = 0; r < ROUNDS; r++) {
        memset(j->kv, 0x3C, j->kv_bytes);
        if (kvc_compress(&a, &ex, NULL) != KVC_OK || memcmp(j->kv, j->want, j->kv_bytes) != 0) j->failures++;
        if (j->bad) {
            kvc_args b = a;
            b.compress_ratio = -(int64_t)(r + 1);
            char want[64];
            snprintf(want, sizeof want, "compress_ratio = %d < 1", -(r + 1));
            if (kvc_compress(&b, &ex, NULL) != KVC_ERROR_BAD_PARAMETER || strcmp(kvc_last_error_message(), want) != 0)
                j->failures++;
        }
    }
    return NULL;
}

int main(void) {
    kvc_case cases[4];
    uint8_t *want[4];
    for (int i = 0; i < 4; i++) {
        kvc_case_params p;
        memset(&p, 0, sizeof p);
        p.num_reqs = 2;
        p.total_tokens = 2 * 1024;
        p.compress_ratio = 64 << (i % 3);
        p.block_size = 8;
        p.shuffle = 1;
        p.seed = 40 + (uint64_t)i;
        if (kvc_case_generate(&p, 1, &cases[i]) != KVC_OK) return 1;
        memset(cases[i].kv_cache, 0x3C, cases[i].kv_cache_bytes);
        TU_CHECK(kvc_compress(&cases[i].args, NULL, NULL) == KVC_OK, "serial run %d", i);
        want[i] = tu_dup(cases[i].kv_cache, cases[i].kv_cache_bytes);
    }
    job jobs[NT];
    pthread_t tids[NT];
    for (int t = 0; t < NT; t++) {
        int c = t < 3 ? t : 3; /* threads 3..5 share case 3's inputs */
        jobs[t] = (job){&cases[c].args, malloc(cases[c].kv_cache_bytes), cases[c].kv_cache_bytes, want[c],
                        t % 4 /* 0: the default count, read by two threads at once */, t % 2, 0};
        pthread_create(&tids[t], NULL, run, &jobs[t]);
    }
    for (int t = 0; t < NT; t++) {
        pthread_join(tids[t], NULL);
        TU_CHECK(jobs[t].failures == 0, "thread %d: %d failed rounds", t, jobs[t].failures);
        free(jobs[t].kv);
    }
    for (int i = 0; i < 4; i++) {
        free(want[i]);
        kvc_case_free(&cases[i]);
    }
    /* the default thread count: the online processors, clamped */
    const long online = sysconf(_SC_NPROCESSORS_ONLN);
    const int expect = online < 1 ? 1 : online > 1024 ? 1024 : (int)online;
    TU_CHECK(kvc_cpu_default_threads() == expect && kvc_cpu_default_threads() == expect,
             "kvc_cpu_default_threads() = %d, online processors %ld", kvc_cpu_default_threads(), online);
    printf("%s (%d failures)\n", tu_failures ? "FAILED" : "passed", tu_failures);
    return tu_failures ? 1 : 0;
}
