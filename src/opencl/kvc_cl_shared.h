/*
 * kvc_cl_shared.h -- what the OpenCL host (opencl_backend.c) and its
 * kernels (kvc_kernel.cl, kvc_slice.cl) share besides kvc_shape and kvc_plan
 * (kvc_check.h):
 * one definition, included by the host and
 * embedded with the kernel source (embed.cmake).  kvc_i64 is int64_t in C and
 * long in OpenCL C (kvc_canon.h): the layouts agree.
 */
#ifndef KVC_CL_SHARED_H
#define KVC_CL_SHARED_H

#include "kvc_canon.h"

/* The device status word (40 bytes: the size kvcompress.h promises for a
 * caller's cl_mem).  The counters are 32-bit (OpenCL 1.2 has no 64-bit
 * atomics without an extension): each counts outputs at most once, and the
 * host refuses calls of more than 2^31 - 1 outputs; it widens them into
 * kvc_device_status. */
typedef struct {
    int status, check;
    kvc_i64 output, value;
    int written, padding, nonfinite, invalid;
} kvc_cl_status;

/* Workspace layouts, in floats: a chunk state [3][512] (m, d, n: the chunked
 * kernels' and the slice kernels' of C = 256 / 512); the slice kernels' c
 * record of C = 128 (c[512], the 8 slices' RMS sums); then, for every slice
 * call, 8 floats (4 longs) of check record per output. */
#define KVC_CL_SLICE_REC 520
#define KVC_CL_CHUNK_STATE 1536
#define KVC_CL_CHECK_REC 8

#endif
