/*
 * test_opencl_paths.c -- the OpenCL backend's GPU-only kernels on any
 * OpenCL device: the conformance matrix's GPU-path shapes
 * (tools/kit/kvc_conform.c: chunks of 4 to 32 segments, one and several
 * chunks per output, FP8 with 2 slots per page, a NaN score, padding slots)
 * through the wide and slice kernels (the GPU defaults) and the
 * straight-line 2-dims path (test hook KVC_OPENCL_NO_WIDE=1; the slice
 * kernels' shapes only once), every byte and count against the CPU backend;
 * and the general kernel (kvc_general.h: SPEC 9 / 10) on small cases of
 * every setting, where Oclgrind checks its local-memory barriers for races.
 *
 * PoCL cannot run these kernels (bench/NOTES.md: it miscompiles the
 * straight-line forms), so CTest runs this under Oclgrind, an OpenCL device
 * simulator that also reports invalid memory accesses (opencl_gpu_paths,
 * with KVC_OPENCL_GPU_PATHS=1).  Without KVC_OPENCL_GPU_PATHS=1, or in a
 * library built without its test hooks (CMake KVC_TEST_HOOKS), it skips.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress.h"
#include "test_util.h"

int main(void) {
#ifndef KVC_KIT_WITH_OPENCL
    printf("SKIP: built without the OpenCL kit\n");
    return TU_SKIP;
#else
    const char *gp = getenv("KVC_OPENCL_GPU_PATHS");
    if (!gp || strcmp(gp, "1") != 0 || !kvc_backend_available(KVC_BACKEND_OPENCL)) {
        printf("SKIP: needs an OpenCL device and KVC_OPENCL_GPU_PATHS=1 (CTest runs it under Oclgrind)\n");
        return TU_SKIP;
    }
    int failed = 0;
    const char *modes[] = {"0", "1"}; /* KVC_OPENCL_NO_WIDE: the wide kernel, then the 2-dims one */
    for (int m = 0; m < 2; m++) {
        setenv("KVC_OPENCL_NO_WIDE", modes[m], 1);
        /* the second pass without the slice kernels' shapes: they take the
         * same kernels in both modes */
        kvc_conform_opts o = {KVC_BACKEND_OPENCL, 0, NULL, 0, m == 0 ? 1 : 2, stdout};
        kvc_conform_result r;
        kvc_kit_conform(&o, &r);
        printf("KVC_OPENCL_NO_WIDE=%s: %d passed, %d failed\n", modes[m], r.passed, r.failed);
        failed += r.failed + (r.passed + r.failed == 0);
    }
    /* the general kernel: head width 128 (both formats, rotation), bias, bf16; a NaN in one window */
    static const char *const general[] = {
        "reqs=2,tokens=64,C=4,block=4,overlap=1,format=indexer_fp8,layout=shuffle",
        "reqs=1,tokens=64,C=4,block=4,overlap=1,format=indexer_mxfp4,rotate=1",
        "reqs=1,tokens=48,C=12,block=7,format=indexer_mxfp4,bias=1,state=bf16,kv_block=8",
        "reqs=1,tokens=32,C=16,block=8,format=fp8,bias=1,kv_block=2",
        "reqs=2,tokens=64,C=4,block=4,overlap=1,format=int8,state=bf16,cos_sin=interleaved"};
    for (size_t i = 0; i < sizeof general / sizeof general[0]; i++) {
        kvc_case c;
        uint8_t *cpu = NULL;
        char msg[256] = "";
        int bad = kvc_kit_case_with_cpu(general[i], &c, &cpu, msg, sizeof msg) != 0;
        if (!bad) {
            if (i == 0) c.state_cache[0] = NAN; /* (the bf16 copy, if any, is the generator's) */
            if (i == 0) {
                free(cpu); /* the CPU bytes again, with the NaN */
                kvc_exec ex;
                kvc_exec_init(&ex);
                ex.backend = KVC_BACKEND_CPU;
                bad = kvc_compress(&c.args, &ex, NULL) != KVC_OK;
                cpu = calloc((size_t)c.args.num_outputs * 584 + 1, 1);
                if (!bad) kvc_kit_output_rows(&c.args, &c, c.kv_cache, cpu);
            }
            memset(c.kv_cache, 0x6B, c.kv_cache_bytes);
            kvc_report rep;
            bad = bad || kvc_kit_opencl_run(&c.args, &rep, NULL) != KVC_OK || rep.outputs_written != c.args.num_outputs;
            uint8_t *got = calloc((size_t)c.args.num_outputs * 584 + 1, 1);
            if (!bad) kvc_kit_output_rows(&c.args, &c, c.kv_cache, got);
            bad = bad || memcmp(got, cpu, (size_t)(c.args.num_outputs * kvc_slot_bytes(c.args.nope_format))) != 0;
            free(got);
            kvc_case_free(&c);
        }
        free(cpu);
        printf("%-4s general %s %s\n", bad ? "FAIL" : "ok", general[i], msg);
        failed += bad;
    }
    printf("%s (%d failures)\n", failed ? "FAILED" : "passed", failed);
    return failed ? 1 : 0;
#endif
}
