/*
 * kvc_backend.h -- what a backend gives the core: one table of functions
 * (as ggml's backends do).  The core names no backend: CMake writes the list
 * of the compiled ones (kvc_backends.c in the build folder), and api.c finds
 * a backend by its kvc_backend id.  Not installed.
 */
#ifndef KVC_BACKEND_H
#define KVC_BACKEND_H

#include "kvc_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvc_backend_ops {
    kvc_backend id;
    const char *name;
    /* 1 when the backend has a usable device now */
    int (*available)(void);
    /* AUTO: 1 when p is memory of this backend's device, so the call runs
     * here (NULL: never chosen by AUTO) */
    int (*owns)(const void *p);
    /* the call on n >= 1 argument sets that kvc_check_shapes resolved
     * (explicit strides) and that do not alias each other: the bytes of n
     * calls in order; rep (optional, zeroed): the sums */
    kvc_status (*compress)(const kvc_args *a, int n, const kvc_exec *e, kvc_report *rep);
    /* the device status word of the last call on exec's stream / queue
     * (NULL: a synchronous backend, its report is complete) */
    kvc_status (*read_status)(const kvc_exec *e, kvc_device_status *out);
    /* 1: the tensor fields of kvc_args hold buffer handles (OpenCL cl_mem),
     * so aliasing compares handles, not address spans */
    int handles;
} kvc_backend_ops;

/* Test hooks: environment variables, set to 1, that make the tests reach
 * kernels a call would not take.  Compiled only into the test build of the
 * library (kvcompress_testing, KVC_TEST_HOOKS); in the library that is
 * installed every one reads 0. */
#ifdef KVC_TEST_HOOKS
#include <stdlib.h>
#include <string.h>
static inline int kvc_test_hook(const char *name) {
    const char *v = getenv(name);
    return v && !strcmp(v, "1");
}
#else
#define kvc_test_hook(name) 0
#endif

/* Every compiled backend, CPU first, NULL-terminated (kvc_backends.c). */
KVC_HIDDEN extern const kvc_backend_ops *const kvc_backends[];

#ifdef __cplusplus
}
#endif
#endif /* KVC_BACKEND_H */
