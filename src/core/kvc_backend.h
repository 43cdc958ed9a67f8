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
    /* the call on args that kvc_check_shapes resolved (explicit strides) */
    kvc_status (*compress)(const kvc_args *a, const kvc_exec *e, kvc_report *rep);
    /* the device status word of the last call on exec's stream / queue
     * (NULL: a synchronous backend, its report is complete) */
    kvc_status (*read_status)(const kvc_exec *e, kvc_device_status *out);
    /* 1: the tensor fields of kvc_args hold buffer handles (OpenCL cl_mem),
     * so aliasing compares handles, not address spans */
    int handles;
} kvc_backend_ops;

/* The CPU backend's AVX-512F exp (cpu_backend.c) against kvc_exp on every
 * stride-th non-positive float (and -Inf, NaNs, +0): @return the number of
 * differing results, -1 where the CPU has no AVX-512F (tests/test_units.c). */
KVC_HIDDEN int64_t kvc_cpu_exp16_mismatches(uint32_t stride);
/* The CPU backend's AVX-512F finaliser (cpu_finalize.c) against
 * kvc_finalize_slot on `trials` random inputs from `seed` (both formats and
 * cos/sin layouts, NaN / Inf / zero windows, overflowing and vanishing
 * sums): @return the number whose bytes differ, -1 without AVX-512F. */
KVC_HIDDEN int64_t kvc_cpu_finalize_mismatches(int trials, uint64_t seed);
/* The CPU backend's forms of the segment loop and finaliser, so that the
 * tests check each on a machine that has the widest (tests/test_units.c):
 * KVC_CPU_ISA_AUTO (the widest the CPU has), KVC_CPU_ISA_PORTABLE (the
 * portable loop and finaliser), KVC_CPU_ISA_AVX2 (what a CPU with AVX2 and
 * FMA but no AVX-512F runs).  Set it only while no call runs. */
enum { KVC_CPU_ISA_AUTO = 0, KVC_CPU_ISA_PORTABLE = 1, KVC_CPU_ISA_AVX2 = 2 };
KVC_HIDDEN void kvc_cpu_force_isa(int isa);
/* 1 where the CPU has AVX2 and FMA (its AVX2 loop can run). */
KVC_HIDDEN int kvc_cpu_has_avx2(void);
/* The CPU backend's AVX2 exp (cpu_avx2.c) against kvc_exp, as
 * kvc_cpu_exp16_mismatches; -1 where the CPU has no AVX2 and FMA. */
KVC_HIDDEN int64_t kvc_cpu_exp8_mismatches(uint32_t stride);

/* Test hooks (CMake KVC_TEST_HOOKS, on in test builds only): environment
 * variables, set to 1, that make the tests reach kernels a call would not
 * take.  Without the hooks every one reads 0. */
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
