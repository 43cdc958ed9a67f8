/*
 * test_backends.c -- the one test that pins every backend to the CPU bytes:
 * each compiled and available backend (the CPU one with 1 and 3 threads,
 * CUDA, OpenCL) runs the conformance matrix of tools/kit/kvc_conform.c --
 * the golden cases, the random shapes of `kvcompress verify` and the
 * GPU-path shapes -- and every byte of its KV cache must equal the CPU
 * backend's on the same poison.  `kvcompress verify` runs the same matrix.
 *
 *   test_backends GOLDEN_DIR [random=N] [backends=cpu,cuda,opencl]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress.h"
#include "test_util.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_backends GOLDEN_DIR [random=N] [backends=cpu,cuda,opencl]\n");
        return 2;
    }
    int nrandom = 40;
    const char *only = "cpu,cuda,opencl";
    for (int i = 2; i < argc; i++) {
        if (!strncmp(argv[i], "random=", 7)) nrandom = atoi(argv[i] + 7);
        else if (!strncmp(argv[i], "backends=", 9)) only = argv[i] + 9;
        else {
            fprintf(stderr, "test_backends: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    struct {
        const char *name;
        kvc_backend backend;
        int threads;
    } runs[] = {{"cpu", KVC_BACKEND_CPU, 1}, {"cpu", KVC_BACKEND_CPU, 3}, {"cuda", KVC_BACKEND_CUDA, 0},
                {"opencl", KVC_BACKEND_OPENCL, 0}};
    int ran = 0, failed = 0;
    for (int i = 0; i < (int)(sizeof runs / sizeof runs[0]); i++) {
        if (!strstr(only, runs[i].name)) continue;
        int compiled = 1;
#ifndef KVC_KIT_WITH_CUDA
        if (runs[i].backend == KVC_BACKEND_CUDA) compiled = 0;
#endif
#ifndef KVC_KIT_WITH_OPENCL
        if (runs[i].backend == KVC_BACKEND_OPENCL) compiled = 0;
#endif
        if (!compiled || !kvc_backend_available(runs[i].backend)) {
            printf("skip %s: %s\n", runs[i].name, compiled ? "no device" : "not compiled in");
            continue;
        }
        kvc_conform_opts o = {runs[i].backend, runs[i].threads, argv[1], nrandom, 1, NULL, 1};
        kvc_conform_result r;
        if (kvc_kit_conform(&o, &r) != 0) {
            fprintf(stderr, "test_backends: no golden data in %s\n", argv[1]);
            return 1;
        }
        printf("%-6s threads=%d: %d passed, %d failed\n", runs[i].name, runs[i].threads, r.passed, r.failed);
        ran++;
        failed += r.failed;
        if (r.passed + r.failed < 45 + nrandom) {
            printf("FAIL %s ran %d cases, expected at least %d\n", runs[i].name, r.passed + r.failed, 45 + nrandom);
            failed++;
        }
    }
    printf("%s: %d backend runs, %d failures\n", failed ? "FAILED" : "passed", ran, failed);
    return failed ? 1 : (ran ? 0 : TU_SKIP);
}
