/*
 * kvc_internal.h -- what the core shares with the backends (not installed).
 */
#ifndef KVC_INTERNAL_H
#define KVC_INTERNAL_H

#include "kvcompress.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kvc_out_info; /* kvc_check.h */

#if defined(__GNUC__)
#define KVC_PRINTF(a, b) __attribute__((format(printf, a, b)))
#define KVC_HIDDEN __attribute__((visibility("hidden")))
#else
#define KVC_PRINTF(a, b)
#define KVC_HIDDEN
#endif

/** Record `status` with a printf-style message for this thread; @return status. */
KVC_HIDDEN kvc_status kvc_fail(kvc_status status, const char *fmt, ...) KVC_PRINTF(2, 3);
/** Clear this thread's message (start of every API call). */
KVC_HIDDEN void kvc_clear_error(void);

/**
 * Check pointers, sizes, strides and parameters (no index values are read)
 * and copy `in` to `out` with every 0 ("contiguous") stride made explicit.
 */
KVC_HIDDEN kvc_status kvc_check_shapes(const kvc_args *in, kvc_args *out);

/* The ten tensors of kvc_args, in its order (kv_cache last): their names
 * for messages, and their pointers.  score_bias is optional (NULL: absent,
 * 0 bytes). */
#define KVC_TENSORS 10
#define KVC_TENSOR_SCORE_BIAS 8
KVC_HIDDEN extern const char *const kvc_tensor_names[KVC_TENSORS];
KVC_HIDDEN void kvc_tensor_ptrs(const kvc_args *a, const void *ptrs[KVC_TENSORS]);

/* The bytes from each tensor's start that a call on resolved args may
 * reach (kvc_args order; kv_cache: to the last page's last slot). */
KVC_HIDDEN kvc_status kvc_tensor_bytes(const kvc_args *a, int64_t bytes[KVC_TENSORS]);

/* kv_cache's written bytes overlapping an input's span -> KVC_ERROR_ALIASING.
 * handles != 0 (OpenCL: the pointers are cl_mem): the same handle only. */
KVC_HIDDEN kvc_status kvc_check_aliasing(const kvc_args *a, int handles);
/* kvc_compress_many: set w's written kv_cache bytes meeting any tensor of
 * set r (its kv_cache whole) -> KVC_ERROR_ALIASING naming args[iw], args[ir]. */
KVC_HIDDEN kvc_status kvc_check_aliasing_sets(const kvc_args *w, int iw, const kvc_args *r, int ir, int handles);
/** Put "prefix" (printf-style) before this thread's message; @return status. */
KVC_HIDDEN kvc_status kvc_prefix_error(kvc_status status, const char *fmt, ...) KVC_PRINTF(2, 3);
/**
 * Check every index value (host memory) of resolved args, including that no
 * two outputs share a slot.  Counts padding outputs into *padding and keeps
 * each output's resolved indices in infos[num_outputs] (kvc_check.h), where
 * not NULL, so that the workers need not check again.
 */
KVC_HIDDEN kvc_status kvc_check_indices(const kvc_args *a, int64_t *padding, struct kvc_out_info *infos);

/** Message for a failed per-output check (shared by host and device paths). */
KVC_HIDDEN kvc_status kvc_fail_check(const kvc_args *a, int check, int64_t o,
                                     int64_t value, int64_t aux);

#ifdef __cplusplus
}
#endif
#endif /* KVC_INTERNAL_H */
