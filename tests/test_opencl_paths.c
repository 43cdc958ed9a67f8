/*
 * test_opencl_paths.c -- the OpenCL backend's GPU-only kernels on any
 * OpenCL device: the conformance matrix's GPU-path shapes
 * (tools/kit/kvc_conform.c: chunks of 4 to 32 segments, one and several
 * chunks per output, FP8 with 2 slots per page, a NaN score, padding slots)
 * through the wide and slice kernels (the GPU defaults) and the
 * straight-line 2-dims path (test hook KVC_OPENCL_NO_WIDE=1; the slice
 * kernels' shapes only once), every byte and count against the CPU backend.
 *
 * PoCL cannot run these kernels (bench/NOTES.md: it miscompiles the
 * straight-line forms), so CTest runs this under Oclgrind, an OpenCL device
 * simulator that also reports invalid memory accesses (opencl_gpu_paths,
 * with KVC_OPENCL_GPU_PATHS=1).  Without KVC_OPENCL_GPU_PATHS=1, or in a
 * library built without its test hooks (CMake KVC_TEST_HOOKS), it skips.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
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
    printf("%s (%d failures)\n", failed ? "FAILED" : "passed", failed);
    return failed ? 1 : 0;
#endif
}
