/*
 * kvc_kit_cuda.cu -- the test harness's CUDA device (not the library): host
 * args copied to device memory, run on the CUDA backend, status read, the
 * KV cache copied back (kvc_kit_device_run over kvc_kit_cuda_mem).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress_cuda.h"


static int cuda_put(const void *src, size_t bytes, void **h, char *err, size_t len) {
    cudaError_t e = cudaMalloc(h, bytes ? bytes : 16);
    if (e == cudaSuccess && src) e = cudaMemcpy(*h, src, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) snprintf(err, len, "cudaMalloc / cudaMemcpy of %zu bytes: %s", bytes, cudaGetErrorString(e));
    return e == cudaSuccess ? 0 : -1;
}
static int cuda_get(void *h, void *dst, size_t bytes) {
    return cudaMemcpy(dst, h, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}
static void cuda_drop(void *h) { cudaFree(h); }
extern "C" const kvc_kit_mem kvc_kit_cuda_mem = {cuda_put, cuda_get, cuda_drop};

extern "C" kvc_status kvc_kit_cuda_run_many(const kvc_args *a, int n, kvc_report *rep, kvc_device_status *ds) {
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CUDA;
    return kvc_kit_device_run(&kvc_kit_cuda_mem, &ex, a, n, rep, ds);
}

extern "C" kvc_status kvc_kit_cuda_run(const kvc_args *a, kvc_report *rep, kvc_device_status *ds) {
    return kvc_kit_cuda_run_many(a, 1, rep, ds);
}

