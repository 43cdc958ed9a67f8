/*
 * test_soak -- many calls, resident memory measured (issue 49): 100000 CPU
 * calls and, where the OpenCL kit is built and a device is present, 20000
 * OpenCL calls on one queue, each group of calls followed by a byte check
 * against the first call's bytes.  Resident memory after the first tenth
 * and at the end must agree within a few MiB: a leak of one allocation per
 * call shows as megabytes.
 * Usage: test_soak [cpu_calls opencl_calls]; exit 0 pass, 1 fail.
 */
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
#endif

/* AddressSanitizer keeps freed memory in quarantine (up to 256 MiB): resident
 * memory says nothing there, its leak check does */
#if defined(__SANITIZE_ADDRESS__)
#define KVC_SOAK_RSS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVC_SOAK_RSS 0
#endif
#endif
#ifndef KVC_SOAK_RSS
#define KVC_SOAK_RSS 1
#endif

static int report(const char *what, long calls, int bad, long grew) {
    const int fail = bad || (KVC_SOAK_RSS && grew > 4096);
    printf("%s %ld %s calls: %d wrong, resident memory %+ld KiB after the first tenth\n", fail ? "FAIL" : "ok  ", calls,
           what, bad, grew);
    return fail;
}

int main(int argc, char **argv) {
    const long ncpu = argc > 1 ? atol(argv[1]) : 100000, nocl = argc > 2 ? atol(argv[2]) : 20000;
    kvc_case c;
    uint8_t *want = NULL;
    /* C4 overlap FP8, 8 outputs: the smallest engine-shaped call */
    if (!tu_case_with_cpu("reqs=2,tokens=16,C=4,block=4,overlap=1,format=fp8", &c, &want)) return 1;
    const size_t n = (size_t)c.args.num_outputs * KVC_SLOT_BYTES;
    uint8_t *rows = malloc(n);
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    ex.num_threads = 1;
    int failures = 0, bad = 0;
    long early = 0;
    for (long i = 0; i < ncpu; i++) {
        if (i == ncpu / 10) early = tu_rss_kib();
        if (kvc_compress(&c.args, &ex, NULL) != KVC_OK) bad++;
        if (i % 1000 == 999) {
            kvc_kit_output_rows(&c.args, &c, c.kv_cache, rows);
            bad += memcmp(rows, want, n) != 0;
            memset(c.kv_cache, (int)(i & 0xFF), c.kv_cache_bytes);
        }
    }
    failures += report("CPU", ncpu, bad, tu_rss_kib() - early);
#ifdef KVC_KIT_WITH_OPENCL
    cl_command_queue q = (cl_command_queue)kvc_kit_opencl_queue();
    if (q && kvc_backend_available(KVC_BACKEND_OPENCL) && nocl > 0) {
        kvc_kit_dev_args x;
        char msg[256];
        if (kvc_kit_upload(&kvc_kit_opencl_mem, &c.args, &x, msg, sizeof msg) != 0) {
            printf("FAIL upload: %s\n", msg);
            return 1;
        }
        kvc_exec_init(&ex);
        ex.backend = KVC_BACKEND_OPENCL;
        ex.stream = q;
        bad = 0;
        uint8_t *got = malloc(x.kv_bytes + 16);
        for (long i = 0; i < nocl; i++) {
            if (i == nocl / 10) early = tu_rss_kib();
            if (kvc_compress(&x.d, &ex, NULL) != KVC_OK) bad++;
            if (i % 500 == 499) {
                const cl_uchar poison = (cl_uchar)i;
                if (clEnqueueReadBuffer(q, (cl_mem)x.h[KVC_KIT_KV], CL_TRUE, 0, x.kv_bytes, got, 0, NULL, NULL) != CL_SUCCESS)
                    bad++;
                kvc_kit_output_rows(&c.args, &c, got, rows);
                bad += memcmp(rows, want, n) != 0;
                clEnqueueFillBuffer(q, (cl_mem)x.h[KVC_KIT_KV], &poison, 1, 0, x.kv_bytes, 0, NULL, NULL);
            }
        }
        clFinish(q);
        failures += report("OpenCL", nocl, bad, tu_rss_kib() - early);
        free(got);
        kvc_kit_release(&kvc_kit_opencl_mem, &x);
    } else {
        printf("OpenCL: no device, not soaked\n");
    }
#else
    (void)nocl;
#endif
    free(rows);
    free(want);
    kvc_case_free(&c);
    printf("%s (%d failures)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
