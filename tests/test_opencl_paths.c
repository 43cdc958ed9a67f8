/*
 * test_opencl_paths.c -- the OpenCL backend's GPU-only kernels on any
 * OpenCL device: the wide kernel (the GPU default) and the straight-line
 * 2-dims path (test hook KVC_OPENCL_NO_WIDE=1), byte for byte against the
 * CPU backend, on small cases that reach each branch: chunks of
 * 4, 8, 16 and 32 segments, one and several chunks per output, FP8 with 2
 * slots per page, a NaN score, padding slots.
 *
 * PoCL cannot run these kernels (bench/NOTES.md: it miscompiles the
 * straight-line forms), so CTest runs this under Oclgrind, an OpenCL device
 * simulator that also reports invalid memory accesses (opencl_gpu_paths,
 * with KVC_OPENCL_GPU_PATHS=1).  Without KVC_OPENCL_GPU_PATHS=1, or in a
 * library built without its test hooks (CMake KVC_TEST_HOOKS), it skips.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress.h"
#include "kvcompress_rand.h"
#include "test_util.h"

typedef struct {
    int64_t reqs, tokens, C, bs, S;
    int shuffle, fp8, nan, pad;
} shape;

#ifdef KVC_KIT_WITH_OPENCL
static void one(const shape *sh, const char *mode, uint64_t seed) {
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    p.num_reqs = sh->reqs;
    p.total_tokens = sh->tokens;
    p.compress_ratio = sh->C;
    p.block_size = sh->bs;
    p.shuffle = sh->shuffle;
    p.seed = seed;
    p.kv_block_size = sh->S;
    p.nope_format = sh->fp8 ? KVC_NOPE_FP8_E4M3 : KVC_NOPE_INT8;
    kvc_case_poison poison = {0, sh->C - 3, 512 + 77, NAN}; /* a NaN score in the first window */
    if (sh->nan) {
        p.num_poison = 1;
        p.poison = &poison;
    }
    kvc_case c;
    if (kvc_case_generate(&p, 0, &c) != KVC_OK) {
        TU_CHECK(0, "generate C=%lld: %s", (long long)sh->C, kvc_last_error_message());
        return;
    }
    if (sh->pad && c.args.num_outputs > 1) /* the second output is a padding slot */
        c.kv_slot_mapping[c.boundary_token_indices[1]] = -1;
    const size_t bytes = c.kv_cache_bytes;
    TU_CHECK(kvc_compress(&c.args, NULL, NULL) == KVC_OK, "CPU: %s", kvc_last_error_message());
    uint8_t *cpu = tu_dup(c.kv_cache, bytes);
    kvc_kit_poison(c.kv_cache, bytes, seed + 1); /* the slots to write, and the bytes not to touch */
    uint8_t *before = tu_dup(c.kv_cache, bytes);
    kvc_device_status ds;
    memset(&ds, 0, sizeof ds);
    kvc_status st = kvc_kit_opencl_run(&c.args, NULL, &ds);
    TU_CHECK(st == KVC_OK, "mode %s C=%lld: %s", mode, (long long)sh->C, kvc_last_error_message());
    const int64_t want_written = c.args.num_outputs - (sh->pad && c.args.num_outputs > 1 ? 1 : 0);
    TU_CHECK(ds.outputs_written == want_written && ds.outputs_padding == c.args.num_outputs - want_written,
             "mode %s C=%lld: written %lld padding %lld, want %lld", mode, (long long)sh->C,
             (long long)ds.outputs_written, (long long)ds.outputs_padding, (long long)want_written);
    int64_t differ = 0, first = -1;
    for (int64_t o = 0; o < c.args.num_outputs; o++) {
        int64_t slot = c.kv_slot_mapping[c.boundary_token_indices[o]];
        uint8_t got[KVC_SLOT_BYTES], want[KVC_SLOT_BYTES];
        if (slot < 0) continue;
        kvc_kit_slot_row(&c.args, slot, got);
        kvc_args pa = c.args;
        pa.kv_cache = cpu;
        kvc_kit_slot_row(&pa, slot, want);
        const int bad = memcmp(got, want, KVC_SLOT_BYTES) != 0;
        if (bad && first < 0) first = o;
        differ += bad;
    }
    char msg[256];
    TU_CHECK(!tu_check_untouched(&c.args, before, c.kv_cache, msg, sizeof msg), "mode %s C=%lld: %s", mode,
             (long long)sh->C, msg);
    TU_CHECK(differ == 0, "mode %s C=%lld bs=%lld S=%lld: %lld outputs differ from the CPU (first %lld)", mode,
             (long long)sh->C, (long long)sh->bs, (long long)sh->S, (long long)differ, (long long)first);
    free(before);
    free(cpu);
    kvc_case_free(&c);
}

#endif

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
    /* chunks (host plan, opencl_backend.c): C=32: 1 chunk of 4 segments;
     * C=128 x 4 outputs: 4 chunks of 4; C=512 x 2: 8 of 8; C=1024 x 1: 8 of
     * 16; C=2048 x 1: 8 of 32 */
    const shape shapes[] = {
        {2, 512, 32, 8, 64, 1, 0, 1, 1},    /* 16 outputs, one chunk of 4 segments each: finalised at once */
        {1, 512, 128, 8, 64, 1, 0, 1, 1},
        {1, 1024, 512, 8, 2, 0, 1, 0, 0},
        {1, 1024, 1024, 16, 64, 1, 0, 0, 1},
        {1, 2048, 2048, 8, 64, 1, 1, 0, 0},
    };
    const char *modes[] = {"0", "1"}; /* KVC_OPENCL_NO_WIDE: the wide kernel, then the 2-dims one */
    for (int m = 0; m < 2; m++) {
        setenv("KVC_OPENCL_NO_WIDE", modes[m], 1);
        for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) one(&shapes[i], modes[m], 900 + (uint64_t)i);
    }
    printf("%s (%d failures)\n", tu_failures ? "FAILED" : "passed", tu_failures);
    return tu_failures ? 1 : 0;
#endif
}
