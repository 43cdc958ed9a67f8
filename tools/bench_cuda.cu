/*
 * bench_cuda.cu -- how `kvcompress bench` times a case on the CUDA backend
 * (SPEC 6): the case copied to the device once (the kit's memory table),
 * the L2 flushed by a write before each call, device events around it, the
 * floor (a plain 16-byte streaming read of the same bytes) and the chain
 * floor (chain_floor.cuh: the case's index chain and rows, no arithmetic)
 * timed in the same loop; the device's read bandwidth; device names.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "bench_backend.h"
#include "kvc_kit.h"
#include "kvcompress_cuda.h"
#include "chain_floor.cuh"
#include "read_floor.cuh"

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            snprintf(g_err, sizeof g_err, "%s: %s", #x, cudaGetErrorString(e_));       \
            goto fail;                                                                 \
        }                                                                              \
    } while (0)

static char g_err[512];


/* L2 flush: write a buffer larger than L2 (docs/CONTRACT.md section 6). */
static void *g_flush;
static size_t g_flush_bytes;
static void flush_l2(cudaStream_t s) {
    if (!g_flush) {
        int dev, l2 = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev);
        g_flush_bytes = (size_t)(l2 > 0 ? l2 : 64 << 20) * 4;
        if (cudaMalloc(&g_flush, g_flush_bytes) != cudaSuccess) g_flush = NULL;
    }
    if (g_flush) cudaMemsetAsync(g_flush, (int)(rand() & 0xFF), g_flush_bytes, s);
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}


/* The floor's buffer: grown to the largest case, never shrunk. */
static float4 *g_floor;
static size_t g_floor_bytes;
static float *g_floor_sink;

extern "C" int kvc_bench_cuda_case(kvc_case *c, int repeat, double floor_bytes, bench_result *out) {
    kvc_kit_dev_args x;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CUDA;
    cudaEvent_t e0 = NULL, e1 = NULL;
    std::vector<double> t, tf, tc;
    kvc_args ca; /* the chain floor's view of the call */
    int chain = 0;
    long long chain_y = 0; /* the chain floor's 8-row chunks an output */
    kvc_device_status s;
    int sms = 132, dev = 0;
    const size_t fbytes = ((size_t)floor_bytes + 15) & ~(size_t)15;
    out->status = KVC_OK;
    if (kvc_kit_upload(&kvc_kit_cuda_mem, &c->args, &x, g_err, sizeof g_err) != 0) {
        out->status = KVC_ERROR_DEVICE;
        snprintf(out->message, sizeof out->message, "%s", g_err);
        return -1;
    }
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaGetDevice(&dev));
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (fbytes > g_floor_bytes) {
        if (g_floor) cudaFree(g_floor);
        g_floor = NULL;
        g_floor_bytes = 0;
        CK(cudaMalloc(&g_floor, fbytes));
        CK(cudaMemset(g_floor, 0x3c, fbytes));
        g_floor_bytes = fbytes;
    }
    if (!g_floor_sink) CK(cudaMalloc(&g_floor_sink, 4));
    /* the chain floor: 16-byte (bf16: 8-byte) loads of 4 elements need
     * every row 4-element aligned; else not measured */
    ca = x.d;
    kvc_resolve_strides(&ca);
    chain_y = (kvc_window_rows(ca.compress_ratio, ca.overlap == KVC_OVERLAP_ON) + CHAIN_ROWS - 1) / CHAIN_ROWS;
    chain = chain_y <= 65535 && fbytes && ca.num_outputs > 0 && ca.num_outputs <= 0x7FFFFFFF &&
            ca.state_stride_block % 4 == 0 && ca.state_stride_token % 4 == 0 &&
            (uintptr_t)ca.state_cache % (ca.state_dtype == KVC_STATE_BFLOAT16 ? 8 : 16) == 0;
    for (int i = -10; i < repeat; i++) { /* 10 warm-up calls; the floors after each call */
        if (fbytes) {
            flush_l2(0);
            CK(cudaEventRecord(e0, 0));
            read_kernel<<<sms * 8, 512>>>(g_floor, fbytes / 16, g_floor_sink);
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            float fms = 0;
            CK(cudaEventElapsedTime(&fms, e0, e1));
            if (i >= 0) tf.push_back(fms * 1e3);
        }
        if (chain) {
            flush_l2(0);
            CK(cudaEventRecord(e0, 0));
            /* outputs a CTA: 4 at head width 128 where 4 a CTA still fill the
             * SMs (fewer, the 256 threads of one output reach its rows sooner) */
            const int per = ca.head_dim == 128 && ca.num_outputs > 4LL * sms ? 4 : 1;
            const dim3 grid((unsigned)((ca.num_outputs + per - 1) / per), (unsigned)chain_y);
            const int bf16 = ca.state_dtype == KVC_STATE_BFLOAT16;
            if (per == 4)
                (bf16 ? chain_kernel<true, 4> : chain_kernel<false, 4>)<<<grid, CHAIN_THREADS>>>(ca, g_floor_sink);
            else
                (bf16 ? chain_kernel<true, 1> : chain_kernel<false, 1>)<<<grid, CHAIN_THREADS>>>(ca, g_floor_sink);
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            float cms = 0;
            CK(cudaEventElapsedTime(&cms, e0, e1));
            if (i >= 0) tc.push_back(cms * 1e3);
        }
        flush_l2(0);
        CK(cudaEventRecord(e0, 0));
        kvc_status st = kvc_compress(&x.d, &ex, NULL);
        CK(cudaEventRecord(e1, 0));
        if (st != KVC_OK) {
            out->status = st;
            snprintf(out->message, sizeof out->message, "%s", kvc_last_error_message());
            goto done;
        }
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 0) t.push_back(ms * 1e3);
    }
    if (kvc_cuda_read_status(&ex, &s) != KVC_OK || s.status != 0) {
        out->status = s.status ? (kvc_status)s.status : KVC_ERROR_DEVICE;
        snprintf(out->message, sizeof out->message, "device status: %s (check %d, output %lld, value %lld)",
                 kvc_status_string(out->status), s.check, (long long)s.output, (long long)s.value);
        goto done;
    }
    CK(cudaMemcpy(c->kv_cache, x.d.kv_cache, x.kv_bytes, cudaMemcpyDeviceToHost));
    out->median_us = median(t);
    out->min_us = t.empty() ? 0 : *std::min_element(t.begin(), t.end());
    out->max_us = t.empty() ? 0 : *std::max_element(t.begin(), t.end());
    out->floor_us = median(tf);
    out->chain_us = median(tc);
    out->calls = (int)t.size();
    out->nsamples = (int)t.size();
    out->warmup = 10;
    out->samples = (double *)malloc(sizeof(double) * (t.size() ? t.size() : 1));
    if (out->samples) std::copy(t.begin(), t.end(), out->samples);
done:
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    kvc_kit_release(&kvc_kit_cuda_mem, &x);
    return out->status == KVC_OK ? 0 : -1;
fail:
    out->status = KVC_ERROR_DEVICE;
    snprintf(out->message, sizeof out->message, "%s", g_err);
    goto done;
}

extern "C" double kvc_bench_cuda_read_bw(void) {
    size_t bytes = (size_t)2 << 30;
    float4 *p = NULL;
    float *sink = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    std::vector<double> t;
    int dev, sms = 132;
    CK(cudaGetDevice(&dev));
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    CK(cudaMalloc(&p, bytes));
    CK(cudaMalloc(&sink, 4));
    CK(cudaMemset(p, 0x3c, bytes));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = -3; i < 30; i++) {
        flush_l2(0);
        cudaEventRecord(e0, 0);
        read_kernel<<<sms * 8, 512>>>(p, bytes / 16, sink);
        cudaEventRecord(e1, 0);
        CK(cudaEventSynchronize(e1));
        float ms;
        cudaEventElapsedTime(&ms, e0, e1);
        if (i >= 0) t.push_back(ms);
    }
    cudaFree(p);
    cudaFree(sink);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return (double)bytes / (median(t) * 1e-3) / 1e9;
fail:
    fprintf(stderr, "read bandwidth: %s\n", g_err);
    return -1;
}

extern "C" void kvc_bench_cuda_device_name(char *out, size_t n) {
    int dev = 0;
    cudaDeviceProp p;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        snprintf(out, n, "none");
        return;
    }
    snprintf(out, n, "%s (device %d, sm_%d%d)", p.name, dev, p.major, p.minor);
}

extern "C" void kvc_bench_cuda_info(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("cuda: compiled in, no device\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        cudaDeviceProp p;
        cudaGetDeviceProperties(&p, i);
        printf("cuda device %d: %s, %.1f GiB, %d multiprocessors, sm_%d%d, L2 %d MiB\n", i, p.name,
               (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount, p.major, p.minor, p.l2CacheSize >> 20);
    }
}
