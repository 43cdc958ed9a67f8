/*
 * kvc_cl_shared.h -- the structs the OpenCL host (opencl_backend.c) and its
 * kernels (kvc_kernel.cl) share: one definition, included by the host and
 * embedded with the kernel source (embed.cmake).  kvc_i64 is int64_t in C and
 * long in OpenCL C (kvc_canon.h): the layouts agree.
 */
#ifndef KVC_CL_SHARED_H
#define KVC_CL_SHARED_H

#include "kvc_canon.h"

/* Per-launch plan, filled by the host. */
typedef struct {
    kvc_i64 rows, nseg, ch, nchunk;
    kvc_i64 small_k; /* > 0: kvc_compress_small, outputs per work-group */
    kvc_i64 vec;     /* every row 8-byte aligned: float2 loads (else vload2) */
} kvc_cl_plan;

/* The device status word.  The counters are 32-bit (OpenCL 1.2 has no
 * 64-bit atomics without an extension); the host widens them into
 * kvc_device_status. */
typedef struct {
    int status, check;
    kvc_i64 output, value;
    int written, padding, nonfinite, invalid;
} kvc_cl_status;

#endif
