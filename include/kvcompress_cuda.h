/*
 * kvcompress_cuda.h -- the CUDA backend's own API (kvcompress.h has the rest).
 *
 * With exec->backend = KVC_BACKEND_CUDA (or AUTO and device pointers),
 * kvc_compress() runs on exec->stream (a cudaStream_t; NULL = the legacy
 * default stream) of exec->device (-1: the device that holds the tensors),
 * without synchronising, and leaves the caller's current device as it was.
 * Index values are checked by the kernel: a bad output is skipped and the
 * first error is recorded in the status word of that (device, stream), which
 * this function reads.  Calls on different streams share no mutable memory.
 * (The library's own word is internal: for the one-segment, indexer and
 * decode kernels it heads per-CTA records, which kvc_cuda_read_status sums,
 * the error of the lowest-numbered CTA that has one first; a caller's
 * exec->device_status always holds the plain word, zeroed by a memset
 * before the kernel.)
 *
 * Checked on every call: each tensor in device memory lies inside its CUDA
 * allocation for every byte its sizes and strides reach, and
 * exec->device_status, if set, is >= 64 bytes of the call's device that no
 * tensor overlaps (else KVC_ERROR_BAD_SHAPE / _BAD_PARAMETER / _ALIASING,
 * nothing launched).
 *
 * Workspaces: one per (device, stream), made on the stream's first call.
 * Streams come and go: once more than 64 exist, a new stream's first call
 * frees the least recently used workspaces whose work is done, so a process
 * may make and destroy any number of streams.  A workspace used while its
 * stream was being captured into a CUDA graph is kept for good (the graph
 * may replay on it).
 */
#ifndef KVCOMPRESS_CUDA_H
#define KVCOMPRESS_CUDA_H

#include "kvcompress.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * kvc_cuda_read_status() -- wait for `exec->stream`, then copy the device
 * status word of the last call on that stream and device (or
 * exec->device_status) to `out`.  exec may be NULL (the current device, the
 * legacy default stream).  kvc_read_status() with exec->backend set to CUDA.
 * @return KVC_OK, KVC_ERROR_BACKEND_UNAVAILABLE without CUDA, or
 * KVC_ERROR_DEVICE.  Synchronises the stream: call it when you choose to.
 */
KVC_API kvc_status kvc_cuda_read_status(const kvc_exec *exec, kvc_device_status *out);

#ifdef __cplusplus
}
#endif
#endif /* KVCOMPRESS_CUDA_H */
