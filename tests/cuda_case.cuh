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
    void *ptrs[9];
    size_t bytes[9];
    uint8_t *cpu_rows;    /* [num_outputs][584]: the CPU backend's bytes     */
    uint8_t *got;         /* pinned host copy of the device kv_cache         */
    char name[160];
};

/* Slot rows of kv_cache bytes `kv` (laid out as `a`), in output order. */
static inline void tc_rows(const kvc_args *a, const kvc_case *c, const uint8_t *kv, uint8_t *rows) {
    kvc_args t = *a;
    t.kv_cache = (uint8_t *)kv;
    for (int64_t o = 0; o < a->num_outputs; o++)
        kvc_kit_slot_row(&t, c->kv_slot_mapping[c->boundary_token_indices[o]], rows + o * KVC_SLOT_BYTES);
}

/* Generate the case of `spec` (kvc_kit_parse_spec syntax), run it on the CPU, copy it to the device. */
static inline int tc_make(const char *spec, dev_case *x) {
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, "%s", spec);
    kvc_case_params p;
    memset(&p, 0, sizeof p);
    char msg[256];
    if (kvc_kit_parse_spec(spec, &p, msg, sizeof msg) || kvc_case_generate(&p, 0, &x->host) != KVC_OK) {
        fprintf(stderr, "case %s: %s %s\n", spec, msg, kvc_last_error_message());
        return -1;
    }
    const kvc_args *a = &x->host.args;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CPU;
    if (kvc_compress(a, &ex, NULL) != KVC_OK) {
        fprintf(stderr, "case %s: CPU: %s\n", spec, kvc_last_error_message());
        return -1;
    }
    x->cpu_rows = (uint8_t *)malloc((size_t)a->num_outputs * KVC_SLOT_BYTES + 1);
    tc_rows(a, &x->host, x->host.kv_cache, x->cpu_rows);
    const void *src[9];
    kvc_kit_tensors(a, src, x->bytes);
    for (int i = 0; i < 9; i++) {
        TC_CHECK(cudaMalloc(&x->ptrs[i], x->bytes[i] ? x->bytes[i] : 16));
        if (src[i] && x->bytes[i]) TC_CHECK(cudaMemcpy(x->ptrs[i], src[i], x->bytes[i], cudaMemcpyHostToDevice));
    }
    x->d = *a;
    kvc_kit_rebind(&x->d, x->ptrs);
    TC_CHECK(cudaMallocHost(&x->got, x->bytes[8] ? x->bytes[8] : 16));
    return 0;
}

static inline void tc_free(dev_case *x) {
    for (int i = 0; i < 9; i++)
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
