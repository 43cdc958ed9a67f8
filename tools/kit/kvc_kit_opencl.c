/*
 * kvc_kit_opencl.c -- the test harness's OpenCL device (not the library):
 * one context and profiling queue on the first GPU (else the first device;
 * KVC_OPENCL_DEVICE=N picks the N-th device over all platforms), host args
 * copied into cl_mem buffers, run, status, copy back (kvc_kit_device_run
 * over kvc_kit_opencl_mem).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CL/cl.h>

#include "kvc_kit.h"
#include "kvcompress_opencl.h"

static cl_context g_ctx;
static cl_command_queue g_q;
static cl_device_id g_dev;

static int setup(void) {
    if (g_q) return 0;
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0) return -1;
    const char *want = getenv("KVC_OPENCL_DEVICE");
    int pick = want ? atoi(want) : -1, idx = 0, found = 0;
    for (int pass = 0; pass < 2 && !found; pass++)
        for (cl_uint p = 0; p < np && !found; p++) {
            cl_device_id devs[16];
            cl_uint nd = 0;
            if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) continue;
            for (cl_uint d = 0; d < nd && !found; d++) {
                cl_device_type t;
                clGetDeviceInfo(devs[d], CL_DEVICE_TYPE, sizeof t, &t, NULL);
                if (pick >= 0 ? (pass == 0 && idx++ == pick) : (pass == 1 || (t & CL_DEVICE_TYPE_GPU))) {
                    g_dev = devs[d];
                    found = 1;
                }
            }
        }
    if (!found) return -1;
    cl_int err;
    g_ctx = clCreateContext(NULL, 1, &g_dev, NULL, NULL, &err);
    if (err != CL_SUCCESS) return -1;
    g_q = clCreateCommandQueue(g_ctx, g_dev, CL_QUEUE_PROFILING_ENABLE, &err);
    return err == CL_SUCCESS ? 0 : -1;
}

static int cl_put(const void *src, size_t bytes, void **h, char *err, size_t len) {
    cl_int e;
    cl_mem m = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE | (src ? CL_MEM_COPY_HOST_PTR : 0), bytes ? bytes : 16,
                              (void *)src, &e);
    if (e != CL_SUCCESS) {
        snprintf(err, len, "clCreateBuffer(%zu bytes): %d", bytes, (int)e);
        return -1;
    }
    *h = (void *)m;
    return 0;
}
static int cl_get(void *h, void *dst, size_t bytes) {
    return clEnqueueReadBuffer(g_q, (cl_mem)h, CL_TRUE, 0, bytes, dst, 0, NULL, NULL) == CL_SUCCESS ? 0 : -1;
}
static void cl_drop(void *h) { clReleaseMemObject((cl_mem)h); }
const kvc_kit_mem kvc_kit_opencl_mem = {cl_put, cl_get, cl_drop};

kvc_status kvc_kit_opencl_run_many(const kvc_args *a, int n, kvc_report *rep, kvc_device_status *ds) {
    if (setup() != 0) return KVC_ERROR_BACKEND_UNAVAILABLE;
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = g_q;
    return kvc_kit_device_run(&kvc_kit_opencl_mem, &ex, a, n, rep, ds);
}

kvc_status kvc_kit_opencl_run(const kvc_args *a, kvc_report *rep, kvc_device_status *ds) {
    return kvc_kit_opencl_run_many(a, 1, rep, ds);
}

void *kvc_kit_opencl_queue(void) { return setup() == 0 ? (void *)g_q : NULL; }

void *kvc_kit_opencl_queue_of(void **ctx, void **dev) {
    if (setup() != 0 || !kvc_backend_available(KVC_BACKEND_OPENCL)) return NULL;
    *ctx = (void *)g_ctx;
    *dev = (void *)g_dev;
    return (void *)g_q;
}

void kvc_kit_opencl_use(void *ctx, void *queue) {
    if (setup() != 0) return;
    static cl_context own_ctx;
    static cl_command_queue own_q;
    if (!own_ctx) {
        own_ctx = g_ctx;
        own_q = g_q;
    }
    g_ctx = ctx ? (cl_context)ctx : own_ctx;
    g_q = queue ? (cl_command_queue)queue : own_q;
}
