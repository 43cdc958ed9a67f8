/*
 * bench_backend.h -- how the CLI times one case on one backend.  The CPU
 * version lives in kvcompress.c; the CUDA version in bench_cuda.cu and bench_opencl.c (built
 * when CUDA is), so the CLI itself stays plain C.
 */
#ifndef KVC_BENCH_BACKEND_H
#define KVC_BENCH_BACKEND_H

#include "kvcompress_rand.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bench_result {
    double median_us, min_us, max_us;
    double floor_us; /* the floor of SPEC 6, timed in the same loop; 0 = not measured */
    double chain_us; /* CUDA: the chain floor (chain_floor.cuh), the same way; 0 = not measured */
    double *samples; /* every timed call (us), malloc'd; the caller frees it */
    int nsamples, warmup;
    int calls;
    kvc_status status;
    char message[512];
} bench_result;

/**
 * Copy the case to the device, time `repeat` calls (L2 flushed before each,
 * device events around each), copy kv_cache back into c->kv_cache.  Each
 * call is followed, in the same loop, by the floor: a plain streaming read
 * (grid-stride, 16-byte loads) of floor_bytes, flushed and timed the same
 * way (SPEC 6); its median goes to out->floor_us.
 */
int kvc_bench_cuda_case(kvc_case *c, int repeat, double floor_bytes, bench_result *out);
/** Measured device read bandwidth (GB/s) with the same protocol; < 0 on error. */
double kvc_bench_cuda_read_bw(void);
/** Print device lines for `info`. */
void kvc_bench_cuda_info(void);
/** The current CUDA device's name. */
void kvc_bench_cuda_device_name(char *out, size_t n);
/* The same for OpenCL (bench_opencl.c). */
int kvc_bench_opencl_case(kvc_case *c, int repeat, double floor_bytes, bench_result *out);
double kvc_bench_opencl_read_bw(void);
void kvc_bench_opencl_info(void);

#ifdef __cplusplus
}
#endif
#endif
