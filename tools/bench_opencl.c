/*
 * bench_opencl.c -- how `kvcompress bench` times a case on the OpenCL
 * backend (SPEC 6): on the kit's device and profiling queue, the case copied
 * once, the L2 flushed by writing a large buffer before each call,
 * profiling events around it; the device's read bandwidth; device lines.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CL/cl.h>

#include "bench_backend.h"
#include "kvc_kit.h"
#include "kvcompress_opencl.h"

static cl_context g_ctx;
static cl_command_queue g_q;
static cl_device_id g_dev;
static char g_err[256];

/* The kit's queue and its context and device. */
static int setup(void) {
    if (g_q) return 0;
    g_q = (cl_command_queue)kvc_kit_opencl_queue();
    if (!g_q) return -1;
    clGetCommandQueueInfo(g_q, CL_QUEUE_CONTEXT, sizeof g_ctx, &g_ctx, NULL);
    clGetCommandQueueInfo(g_q, CL_QUEUE_DEVICE, sizeof g_dev, &g_dev, NULL);
    return 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int kvc_bench_opencl_case(kvc_case *c, int repeat, bench_result *out) {
    out->status = KVC_OK;
    if (setup() != 0) {
        out->status = KVC_ERROR_BACKEND_UNAVAILABLE;
        snprintf(out->message, sizeof out->message, "no OpenCL device");
        return -1;
    }
    kvc_kit_dev_args x;
    if (kvc_kit_upload(&kvc_kit_opencl_mem, &c->args, &x, g_err, sizeof g_err) != 0) {
        out->status = KVC_ERROR_DEVICE;
        snprintf(out->message, sizeof out->message, "%s", g_err);
        return -1;
    }
    cl_int err;
    size_t flush_bytes = (size_t)256 << 20;
    cl_mem flush = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, flush_bytes, NULL, &err);
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = g_q;
    double *t = malloc(sizeof(double) * (size_t)(repeat + 3));
    int n = 0;
    for (int i = -3; i < repeat && out->status == KVC_OK; i++) {
        const cl_int pat = i;
        if (flush) clEnqueueFillBuffer(g_q, flush, &pat, sizeof pat, 0, flush_bytes, 0, NULL, NULL);
        cl_event e0, e1;
        clEnqueueMarkerWithWaitList(g_q, 0, NULL, &e0);
        kvc_status st = kvc_compress(&x.d, &ex, NULL);
        clEnqueueMarkerWithWaitList(g_q, 0, NULL, &e1);
        clFinish(g_q);
        if (st != KVC_OK) {
            out->status = st;
            snprintf(out->message, sizeof out->message, "%s", kvc_last_error_message());
        } else {
            cl_ulong a0 = 0, a1 = 0;
            clGetEventProfilingInfo(e0, CL_PROFILING_COMMAND_END, sizeof a0, &a0, NULL);
            clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_END, sizeof a1, &a1, NULL);
            if (i >= 0) t[n++] = (double)(a1 - a0) * 1e-3;
        }
        clReleaseEvent(e0);
        clReleaseEvent(e1);
    }
    if (out->status == KVC_OK) {
        kvc_device_status s;
        if (kvc_opencl_read_status(&ex, &s) != KVC_OK || s.status != 0) {
            out->status = s.status ? (kvc_status)s.status : KVC_ERROR_DEVICE;
            snprintf(out->message, sizeof out->message, "device status: check %d output %lld value %lld", s.check,
                     (long long)s.output, (long long)s.value);
        }
    }
    if (out->status == KVC_OK) {
        kvc_kit_opencl_mem.get(x.h[8], c->kv_cache, x.kv_bytes);
        qsort(t, (size_t)n, sizeof *t, cmp_d);
        out->median_us = n ? t[n / 2] : 0;
        out->min_us = n ? t[0] : 0;
        out->calls = n;
    }
    free(t);
    if (flush) clReleaseMemObject(flush);
    kvc_kit_release(&kvc_kit_opencl_mem, &x);
    return out->status == KVC_OK ? 0 : -1;
}

/* Read bandwidth of the kit's device: a large read-only reduction (each
 * work-item sums a grid-strided range of float4), timed like the cases. */
static const char *k_read_src =
    "__kernel void kvc_read(__global const float4 *p, ulong n, __global float *sink, int chunked) {\n"
    "  float4 acc = (float4)(0.0f);\n"
    "  ulong g = get_global_id(0), G = get_global_size(0);\n"
    "  if (chunked) { /* CPU devices: one contiguous range per work-item */\n"
    "    ulong per = (n + G - 1) / G, lo = g * per, hi = min(n, lo + per);\n"
    "    for (ulong i = lo; i < hi; i++) acc += p[i];\n"
    "  } else { /* GPUs: grid-stride, coalesced */\n"
    "    for (ulong i = g; i < n; i += G) acc += p[i];\n"
    "  }\n"
    "  if (acc.x + acc.y + acc.z + acc.w == 1234.5f) sink[0] = acc.x;\n"
    "}\n";

double kvc_bench_opencl_read_bw(void) {
    if (setup() != 0) return -1;
    cl_int err;
    cl_program prog = clCreateProgramWithSource(g_ctx, 1, &k_read_src, NULL, &err);
    if (err != CL_SUCCESS || clBuildProgram(prog, 1, &g_dev, NULL, NULL, NULL) != CL_SUCCESS) return -1;
    cl_kernel k = clCreateKernel(prog, "kvc_read", &err);
    cl_ulong maxalloc = 0;
    clGetDeviceInfo(g_dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL);
    size_t bytes = (size_t)1 << 30;
    if (maxalloc && bytes > maxalloc / 2) bytes = (size_t)(maxalloc / 2) & ~(size_t)15;
    cl_mem buf = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    cl_mem sink = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, 16, NULL, NULL);
    size_t flush_bytes = (size_t)256 << 20;
    cl_mem flush = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, flush_bytes, NULL, NULL);
    double t[21];
    int n = 0;
    if (err == CL_SUCCESS && k && sink && flush) {
        const cl_int one = 1;
        clEnqueueFillBuffer(g_q, buf, &one, sizeof one, 0, bytes, 0, NULL, NULL);
        cl_ulong n4 = bytes / 16;
        clSetKernelArg(k, 0, sizeof buf, &buf);
        clSetKernelArg(k, 1, sizeof n4, &n4);
        clSetKernelArg(k, 2, sizeof sink, &sink);
        cl_device_type type = 0;
        clGetDeviceInfo(g_dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
        const cl_int chunked = (type & CL_DEVICE_TYPE_GPU) ? 0 : 1;
        clSetKernelArg(k, 3, sizeof chunked, &chunked);
        cl_uint cu = 1;
        clGetDeviceInfo(g_dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
        size_t local = 256, global = (size_t)cu * 8 * local;
        for (int i = -2; i < 21; i++) {
            clEnqueueFillBuffer(g_q, flush, &i, sizeof i, 0, flush_bytes, 0, NULL, NULL);
            cl_event ev;
            if (clEnqueueNDRangeKernel(g_q, k, 1, NULL, &global, &local, 0, NULL, &ev) != CL_SUCCESS) break;
            clWaitForEvents(1, &ev);
            cl_ulong a0 = 0, a1 = 0;
            clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof a0, &a0, NULL);
            clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof a1, &a1, NULL);
            clReleaseEvent(ev);
            if (i >= 0) t[n++] = (double)(a1 - a0) * 1e-9;
        }
    }
    if (flush) clReleaseMemObject(flush);
    if (sink) clReleaseMemObject(sink);
    if (buf) clReleaseMemObject(buf);
    if (k) clReleaseKernel(k);
    clReleaseProgram(prog);
    if (n == 0) return -1;
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return t[n / 2] > 0 ? (double)bytes / t[n / 2] / 1e9 : -1;
}

void kvc_bench_opencl_info(void) {
    cl_platform_id plats[16];
    cl_uint np = 0;
    if (clGetPlatformIDs(16, plats, &np) != CL_SUCCESS || np == 0) {
        printf("opencl: compiled in, no platform\n");
        return;
    }
    int idx = 0;
    for (cl_uint p = 0; p < np; p++) {
        char pname[128] = "";
        clGetPlatformInfo(plats[p], CL_PLATFORM_NAME, sizeof pname, pname, NULL);
        cl_device_id devs[16];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, 16, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd; d++) {
            char name[128] = "";
            cl_ulong mem = 0;
            cl_uint cu = 0;
            clGetDeviceInfo(devs[d], CL_DEVICE_NAME, sizeof name, name, NULL);
            clGetDeviceInfo(devs[d], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL);
            clGetDeviceInfo(devs[d], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
            printf("opencl device %d: %s (%s), %.1f GiB, %u compute units\n", idx++, name, pname,
                   (double)mem / (1 << 30), cu);
        }
    }
}
