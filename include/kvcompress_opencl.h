/*
 * kvcompress_opencl.h -- the OpenCL backend's own API (kvcompress.h has the
 * rest).
 *
 * With exec->backend = KVC_BACKEND_OPENCL, exec->stream is the
 * cl_command_queue (required) and every tensor pointer of kvc_args holds a
 * cl_mem (cast), the tensor at offset 0 of that buffer.  The call is
 * enqueued without waiting; index values are checked by the kernel and the
 * first error is recorded in the status word of that queue, which this
 * function reads.  Each queue has its own status word and workspace, so
 * calls on different queues of one context may run at once (docs/CONTRACT.md section 2); the
 * queue must be in-order (an out-of-order queue is refused with
 * KVC_ERROR_BAD_PARAMETER).  The device needs correctly rounded divide / sqrt and
 * denormals (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT, CL_FP_DENORM).  The
 * status word's counters are 32-bit on the device: a call of more than
 * 2^31 - 1 outputs is refused (KVC_ERROR_BAD_SHAPE).
 *
 * Checked on every call: each tensor's cl_mem holds the bytes its sizes and
 * strides reach (CL_MEM_SIZE; else KVC_ERROR_BAD_SHAPE); exec->device_status,
 * if set, is a cl_mem of at least 40 bytes that shares no memory with a
 * tensor's buffer, sub-buffers included (else KVC_ERROR_BAD_SHAPE /
 * KVC_ERROR_ALIASING).  Nothing is enqueued for a refused call.
 *
 * Lifetimes: the library keeps, per queue, a reference to it, a status word
 * and a workspace, and per (context, device) the built program and a
 * reference to the context.  Release queues and contexts as usual: once
 * yours are gone, the next call on a NEW queue frees what the library kept
 * for them (so a server may make a queue or a context per request).
 *
 * What the caller must guarantee (the library cannot check it without
 * crashing inside the OpenCL implementation): exec->stream is a live
 * cl_command_queue and every tensor pointer a live cl_mem (not a host
 * pointer, not a released object); a process that forks calls the library
 * in the child only on contexts made in the child (PoCL hangs otherwise).
 */
#ifndef KVCOMPRESS_OPENCL_H
#define KVCOMPRESS_OPENCL_H

#include "kvcompress.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * kvc_opencl_read_status() -- read (blocking, on exec->stream, the
 * cl_command_queue) the device status word of the last OpenCL call on that
 * queue, or exec->device_status (a cl_mem) if set.
 * kvc_read_status() with exec->backend set to OpenCL.
 * @return KVC_OK, KVC_ERROR_BACKEND_UNAVAILABLE without OpenCL, or an error.
 */
KVC_API kvc_status kvc_opencl_read_status(const kvc_exec *exec, kvc_device_status *out);

#ifdef __cplusplus
}
#endif
#endif /* KVCOMPRESS_OPENCL_H */
