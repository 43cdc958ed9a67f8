/*
 * bench_opencl.c -- how `kvcompress bench` times a case on the OpenCL
 * backend (SPEC 6): on the kit's device and profiling queue, the case copied
 * once, the L2 flushed by writing a large buffer before each call,
 * profiling markers around it, the floor (a plain streaming read of the
 * same bytes) timed in the same loop; the device's read bandwidth; device
 * lines.
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

/* The floor of SPEC 6 and the read bandwidth: a plain streaming read (each
 * work-item sums a grid-strided range of float4; on CPU devices one
 * contiguous range per work-item), built once. */
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
static cl_kernel g_read;
static cl_mem g_sink, g_flush;
static size_t g_flush_bytes = (size_t)256 << 20;
static size_t g_read_global, g_read_local;

static int read_setup(void) {
    if (g_read) return 0;
    cl_int err;
    cl_program prog = clCreateProgramWithSource(g_ctx, 1, &k_read_src, NULL, &err);
    if (err != CL_SUCCESS) return -1;
    if (clBuildProgram(prog, 1, &g_dev, NULL, NULL, NULL) == CL_SUCCESS) g_read = clCreateKernel(prog, "kvc_read", &err);
    clReleaseProgram(prog); /* the kernel keeps it */
    if (!g_read) return -1;
    g_sink = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, 16, NULL, NULL);
    g_flush = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, g_flush_bytes, NULL, NULL);
    cl_device_type type = 0;
    clGetDeviceInfo(g_dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    const cl_int chunked = (type & CL_DEVICE_TYPE_GPU) ? 0 : 1;
    clSetKernelArg(g_read, 2, sizeof g_sink, &g_sink);
    clSetKernelArg(g_read, 3, sizeof chunked, &chunked);
    cl_uint cu = 1;
    clGetDeviceInfo(g_dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cu, &cu, NULL);
    /* as the CUDA floor: 8 groups of 512 per compute unit */
    g_read_local = 512;
    size_t maxwg = 0;
    clGetKernelWorkGroupInfo(g_read, g_dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof maxwg, &maxwg, NULL);
    while (g_read_local > 1 && maxwg && g_read_local > maxwg) g_read_local /= 2;
    g_read_global = (size_t)cu * 8 * g_read_local;
    return g_sink && g_flush ? 0 : -1;
}

/* The L2 flush of SPEC 6: a write of 256 MiB before each timed command. */
static void flush_l2(int pat) {
    const cl_int p = pat;
    if (g_flush) clEnqueueFillBuffer(g_q, g_flush, &p, sizeof p, 0, g_flush_bytes, 0, NULL, NULL);
}

/* Microseconds between the ends of two markers around what enqueue() puts
 * on the queue (the same for a call and for the floor); < 0 on error. */
static double time_between_markers(cl_event e0, cl_event e1) {
    cl_ulong a0 = 0, a1 = 0;
    if (clGetEventProfilingInfo(e0, CL_PROFILING_COMMAND_END, sizeof a0, &a0, NULL) != CL_SUCCESS ||
        clGetEventProfilingInfo(e1, CL_PROFILING_COMMAND_END, sizeof a1, &a1, NULL) != CL_SUCCESS)
        return -1;
    return (double)(a1 - a0) * 1e-3;
}

/* One flushed, timed read of the first `bytes` of buf (a multiple of 16). */
static double time_read(cl_mem buf, size_t bytes, int pat) {
    flush_l2(pat);
    const cl_ulong n4 = bytes / 16;
    clSetKernelArg(g_read, 0, sizeof buf, &buf);
    clSetKernelArg(g_read, 1, sizeof n4, &n4);
    cl_event e0, e1;
    clEnqueueMarkerWithWaitList(g_q, 0, NULL, &e0);
    cl_int err = clEnqueueNDRangeKernel(g_q, g_read, 1, NULL, &g_read_global, &g_read_local, 0, NULL, NULL);
    clEnqueueMarkerWithWaitList(g_q, 0, NULL, &e1);
    clFinish(g_q);
    const double us = err == CL_SUCCESS ? time_between_markers(e0, e1) : -1;
    clReleaseEvent(e0);
    clReleaseEvent(e1);
    return us;
}

/* The floor's buffer: grown to the largest case, never shrunk. */
static cl_mem g_floor;
static size_t g_floor_bytes;

int kvc_bench_opencl_case(kvc_case *c, int repeat, double floor_bytes, bench_result *out) {
    out->status = KVC_OK;
    if (setup() != 0 || read_setup() != 0) {
        out->status = KVC_ERROR_BACKEND_UNAVAILABLE;
        snprintf(out->message, sizeof out->message, "no OpenCL device (or its read kernel did not build)");
        return -1;
    }
    const size_t fbytes = ((size_t)floor_bytes + 15) & ~(size_t)15;
    if (fbytes > g_floor_bytes) {
        if (g_floor) clReleaseMemObject(g_floor);
        cl_int err;
        g_floor = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, fbytes, NULL, &err);
        g_floor_bytes = g_floor ? fbytes : 0;
        const cl_int fill = 0x3c3c3c3c;
        if (g_floor) clEnqueueFillBuffer(g_q, g_floor, &fill, sizeof fill, 0, fbytes, 0, NULL, NULL);
        if (!g_floor) {
            out->status = KVC_ERROR_OUT_OF_MEMORY;
            snprintf(out->message, sizeof out->message, "floor buffer of %zu bytes: error %d", fbytes, (int)err);
            return -1;
        }
    }
    kvc_kit_dev_args x;
    if (kvc_kit_upload(&kvc_kit_opencl_mem, &c->args, &x, g_err, sizeof g_err) != 0) {
        out->status = KVC_ERROR_DEVICE;
        snprintf(out->message, sizeof out->message, "%s", g_err);
        return -1;
    }
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = g_q;
    const int warmup = 3;
    double *t = malloc(sizeof(double) * (size_t)(repeat + 1));
    double *tf = malloc(sizeof(double) * (size_t)(repeat + 1));
    int n = 0, nf = 0;
    if (!t || !tf) {
        out->status = KVC_ERROR_OUT_OF_MEMORY;
        snprintf(out->message, sizeof out->message, "no memory for %d timings", repeat);
    }
    for (int i = -warmup; i < repeat && out->status == KVC_OK; i++) { /* the floor after each call */
        if (fbytes) {
            const double f = time_read(g_floor, fbytes, i);
            if (i >= 0 && f > 0) tf[nf++] = f;
        }
        flush_l2(i);
        cl_event e0, e1;
        clEnqueueMarkerWithWaitList(g_q, 0, NULL, &e0);
        kvc_status st = kvc_compress(&x.d, &ex, NULL);
        clEnqueueMarkerWithWaitList(g_q, 0, NULL, &e1);
        clFinish(g_q);
        if (st != KVC_OK) {
            out->status = st;
            snprintf(out->message, sizeof out->message, "%s", kvc_last_error_message());
        } else if (i >= 0) {
            t[n++] = time_between_markers(e0, e1);
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
        kvc_kit_opencl_mem.get(x.h[KVC_KIT_KV], c->kv_cache, x.kv_bytes);
        out->samples = malloc(sizeof(double) * (size_t)(n ? n : 1));
        if (out->samples) memcpy(out->samples, t, sizeof(double) * (size_t)n);
        out->nsamples = n;
        out->warmup = warmup;
        qsort(t, (size_t)n, sizeof *t, cmp_d);
        qsort(tf, (size_t)nf, sizeof *tf, cmp_d);
        out->median_us = n ? t[n / 2] : 0;
        out->min_us = n ? t[0] : 0;
        out->max_us = n ? t[n - 1] : 0;
        out->floor_us = nf ? tf[nf / 2] : 0;
        out->calls = n;
    }
    free(t);
    free(tf);
    kvc_kit_release(&kvc_kit_opencl_mem, &x);
    return out->status == KVC_OK ? 0 : -1;
}

/* Read bandwidth of the kit's device: the floor's read of 1 GiB (or half
 * the largest allocation), median of 21. */
double kvc_bench_opencl_read_bw(void) {
    if (setup() != 0 || read_setup() != 0) return -1;
    cl_int err;
    cl_ulong maxalloc = 0;
    clGetDeviceInfo(g_dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof maxalloc, &maxalloc, NULL);
    size_t bytes = (size_t)1 << 30;
    if (maxalloc && bytes > maxalloc / 2) bytes = (size_t)(maxalloc / 2) & ~(size_t)15;
    cl_mem buf = clCreateBuffer(g_ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (!buf) return -1;
    const cl_int one = 1;
    clEnqueueFillBuffer(g_q, buf, &one, sizeof one, 0, bytes, 0, NULL, NULL);
    double t[21];
    int n = 0;
    for (int i = -2; i < 21; i++) {
        const double us = time_read(buf, bytes, i);
        if (us <= 0) break;
        if (i >= 0) t[n++] = us;
    }
    clReleaseMemObject(buf);
    if (n == 0) return -1;
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    return (double)bytes / (t[n / 2] * 1e-6) / 1e9;
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
