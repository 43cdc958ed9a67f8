/*
 * cuda_case.cuh -- a kvc-rand case on the device for the CUDA tests: its
 * tensors copied to device memory, kvc_args pointing at them, and the CPU
 * backend's bytes of the same case as golden-format rows.
 */
#ifndef KVC_TEST_CUDA_CASE_CUH
#define KVC_TEST_CUDA_CASE_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress.h"
#include "kvcompress_rand.h"

#define TC_CHECK(x)                                                                    \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

struct dev_case {
    kvc_case host;        /* host tensors                                    */
    kvc_args d;           /* the same tensors on the device                  */
    void *ptrs[KVC_KIT_TENSORS]; /* kvc_kit_tensors order; score_bias NULL where the host's is */
    size_t bytes[KVC_KIT_TENSORS];
    uint8_t *cpu_rows;    /* [num_outputs][584]: the CPU backend's bytes     */
    uint8_t *got;         /* pinned host copy of the device kv_cache         */
    char name[160];
};

/* Generate the case of `spec` (kvc_kit_parse_spec syntax), run it on the CPU, copy it to the device. */
static inline int tc_make(const char *spec, dev_case *x) {
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", spec);
    char msg[256] = "";
    if (kvc_kit_case_with_cpu(spec, &x->host, &x->cpu_rows, msg, sizeof msg) != 0) {
        fprintf(stderr, "case %s: %s\n", spec, msg);
        return -1;
    }
    const kvc_args *a = &x->host.args;
    const void *src[KVC_KIT_TENSORS];
    kvc_kit_tensors(a, src, x->bytes);
    for (int i = 0; i < KVC_KIT_TENSORS; i++) {
        if (i == KVC_KIT_BIAS && !src[i]) continue;
        TC_CHECK(cudaMalloc(&x->ptrs[i], x->bytes[i] ? x->bytes[i] : 16));
        if (src[i] && x->bytes[i]) TC_CHECK(cudaMemcpy(x->ptrs[i], src[i], x->bytes[i], cudaMemcpyHostToDevice));
    }
    x->d = *a;
    kvc_kit_rebind(&x->d, x->ptrs);
    TC_CHECK(cudaMallocHost(&x->got, x->bytes[KVC_KIT_KV] ? x->bytes[KVC_KIT_KV] : 16));
    return 0;
}

static inline void tc_free(dev_case *x) {
    for (int i = 0; i < KVC_KIT_TENSORS; i++)
        if (x->ptrs[i]) cudaFree(x->ptrs[i]);
    if (x->got) cudaFreeHost(x->got);
    free(x->cpu_rows);
    kvc_case_free(&x->host);
    memset(x, 0, sizeof *x);
}

/* 1 if a CUDA device is usable. */
static inline int tc_have_gpu(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#endif
