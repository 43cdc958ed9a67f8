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
 * simulator that also reports invalid memory accesses (with
 * KVC_OPENCL_GPU_PATHS=1), in three parts that can run side by side:
 * `test_opencl_paths wide` (opencl_gpu_paths_wide), `2dims`
 * (opencl_gpu_paths_2dims), `general` (opencl_gpu_paths_general); no
 * argument: all three.  Without KVC_OPENCL_GPU_PATHS=1, or in a library
 * built without its test hooks (CMake KVC_TEST_HOOKS), it skips.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_check.h"
#include "kvc_kit.h"
#include "kvcompress.h"
#include "test_util.h"

int main(int argc, char **argv) {
#ifndef KVC_KIT_WITH_OPENCL
    (void)argc;
    (void)argv;
    printf("SKIP: built without the OpenCL kit\n");
    return TU_SKIP;
#else
    const char *part = argc > 1 ? argv[1] : "all";
    const int all = strcmp(part, "all") == 0;
    if (!all && strcmp(part, "wide") && strcmp(part, "2dims") && strcmp(part, "general")) {
        fprintf(stderr, "test_opencl_paths: part \"%s\" is not wide, 2dims, general or all\n", part);
        return 2;
    }
    const char *gp = getenv("KVC_OPENCL_GPU_PATHS");
    if (!gp || strcmp(gp, "1") != 0 || !kvc_backend_available(KVC_BACKEND_OPENCL)) {
        printf("SKIP: needs an OpenCL device and KVC_OPENCL_GPU_PATHS=1 (CTest runs it under Oclgrind)\n");
        return TU_SKIP;
    }
    int failed = 0;
    const char *modes[] = {"0", "1"}; /* KVC_OPENCL_NO_WIDE: the wide kernel, then the 2-dims one */
    for (int m = 0; m < 2; m++) {
        if (!all && strcmp(part, m == 0 ? "wide" : "2dims")) continue;
        setenv("KVC_OPENCL_NO_WIDE", modes[m], 1);
        /* the second pass without the shapes whose kernels are the same in
         * both modes (slice, indexer, one-segment with a bias) */
        kvc_conform_opts o = {KVC_BACKEND_OPENCL, 0, NULL, 0, m == 0 ? 1 : 2, stdout, 0};
        kvc_conform_result r;
        kvc_kit_conform(&o, &r);
        printf("KVC_OPENCL_NO_WIDE=%s: %d passed, %d failed\n", modes[m], r.passed, r.failed);
        failed += r.failed + (r.passed + r.failed == 0);
    }
    if (!all && strcmp(part, "general")) {
        printf("%s (%d failures)\n", failed ? "FAILED" : "passed", failed);
        return failed ? 1 : 0;
    }
    /* the general kernel: head width 128 (both formats, rotation), bias, bf16; a NaN in one window */
    static const char *const general[] = {
        "reqs=2,tokens=64,C=4,block=4,overlap=1,format=indexer_fp8,layout=shuffle",
        "reqs=1,tokens=60,C=4,block=4,overlap=1,format=indexer_fp8", /* 15 outputs: a part-filled group, a padding one */
        "reqs=1,tokens=64,C=4,block=4,overlap=1,format=indexer_mxfp4,rotate=1",
        "reqs=1,tokens=48,C=12,block=7,format=indexer_mxfp4,bias=1,state=bf16,kv_block=8",
        "reqs=1,tokens=32,C=16,block=8,format=fp8,bias=1,kv_block=2",
        "reqs=2,tokens=64,C=4,block=4,overlap=1,format=int8,state=bf16,cos_sin=interleaved"};
    for (size_t i = 0; i < sizeof general / sizeof general[0]; i++) {
        kvc_case_params p;
        kvc_case c;
        char msg[256] = "";
        int bad = kvc_kit_parse_spec(general[i], &p, msg, sizeof msg) != 0 || kvc_case_generate(&p, 1, &c) != KVC_OK;
        if (!bad) {
            if (i == 0) c.state_cache[0] = NAN;
            if (i == 1) c.kv_slot_mapping[c.boundary_token_indices[5]] = -1;
            /* the CPU and the device on the same poison: every byte of the two caches equal */
            uint8_t *want = malloc(c.kv_cache_bytes);
            kvc_kit_poison(want, c.kv_cache_bytes, 77 + i);
            kvc_kit_poison(c.kv_cache, c.kv_cache_bytes, 77 + i);
            kvc_args ref = c.args;
            ref.kv_cache = want;
            kvc_exec ex;
            kvc_exec_init(&ex);
            ex.backend = KVC_BACKEND_CPU;
            kvc_report rc, rg;
            bad = kvc_compress(&ref, &ex, &rc) != KVC_OK || kvc_kit_opencl_run(&c.args, &rg, NULL) != KVC_OK ||
                  rc.outputs_written != rg.outputs_written || rc.outputs_padding != rg.outputs_padding ||
                  rc.outputs_nonfinite != rg.outputs_nonfinite || memcmp(want, c.kv_cache, c.kv_cache_bytes) != 0;
            if (!bad) snprintf(msg, sizeof msg, "(%lld written, %lld padding, %lld non-finite)",
                               (long long)rg.outputs_written, (long long)rg.outputs_padding,
                               (long long)rg.outputs_nonfinite);
            free(want);
            kvc_case_free(&c);
        }
        printf("%-4s general %s %s\n", bad ? "FAIL" : "ok", general[i], msg);
        failed += bad;
    }
    /* a bad physical block in one output of a group of the general kernel: that output is skipped and
     * reported, the other outputs of its group written as the CPU writes them */
    {
        kvc_case_params p;
        kvc_case c;
        char msg[256] = "";
        int bad = kvc_kit_parse_spec("reqs=1,tokens=64,C=4,block=4,overlap=1,format=indexer_fp8", &p, msg,
                                     sizeof msg) != 0 ||
                  kvc_case_generate(&p, 1, &c) != KVC_OK;
        if (!bad) {
            uint8_t *want = malloc(c.kv_cache_bytes);
            kvc_kit_poison(want, c.kv_cache_bytes, 91);
            kvc_kit_poison(c.kv_cache, c.kv_cache_bytes, 91);
            kvc_args ref = c.args;
            ref.kv_cache = want;
            bad = kvc_compress(&ref, NULL, NULL) != KVC_OK;
            /* positions 60..63 (logical block 15): only the window of position 63, output 15, reads them */
            c.block_table[15] = (int32_t)c.args.num_blocks;
            kvc_report rg;
            kvc_device_status ds;
            const kvc_status st = kvc_kit_opencl_run(&c.args, &rg, &ds);
            bad = bad || st != KVC_ERROR_INDEX_OUT_OF_RANGE || ds.check != KVC_CHECK_PHYSICAL_BLOCK ||
                  ds.output != 15 || ds.value != c.args.num_blocks || rg.outputs_written != 15 ||
                  ds.outputs_invalid != 1;
            /* slot 15 keeps its poison; every other byte is the CPU's */
            uint8_t *poison = malloc(c.kv_cache_bytes);
            kvc_kit_poison(poison, c.kv_cache_bytes, 91);
            for (size_t b = 0; !bad && b < c.kv_cache_bytes; b++) {
                const int64_t in = (int64_t)b % c.args.page_stride, S = c.args.kv_block_size;
                const int in15 = (in >= 15 * 128 && in < 16 * 128) || (in >= S * 128 + 15 * 4 && in < S * 128 + 16 * 4);
                bad = c.kv_cache[b] != (in15 ? poison[b] : want[b]);
            }
            snprintf(msg, sizeof msg, "(status %s, check %d, output %lld, %lld written)", kvc_status_string(st),
                     ds.check, (long long)ds.output, (long long)rg.outputs_written);
            free(poison);
            free(want);
            kvc_case_free(&c);
        }
        printf("%-4s general, a bad block in one output of a group %s\n", bad ? "FAIL" : "ok", msg);
        failed += bad;
    }
    printf("%s (%d failures)\n", failed ? "FAILED" : "passed", failed);
    return failed ? 1 : 0;
#endif
}
