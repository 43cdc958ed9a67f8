/* api.c -- argument defaults, dispatch through the backend table (kvc_backend.h), the default thread count. */
#define _DEFAULT_SOURCE /* sysconf's _SC_NPROCESSORS_ONLN */
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include "kvc_backend.h"
#include "kvc_check.h"
#include "kvcompress_cuda.h"
#include "kvcompress_opencl.h"

void kvc_args_init(kvc_args *args) {
    if (!args) return;
    memset(args, 0, sizeof *args);
    args->state_width = 1024;
    args->kv_block_size = 64;
    args->rms_norm_eps = 1e-6f;
}

int64_t kvc_slot_bytes(kvc_nope_format format) {
    return (unsigned)format > KVC_INDEXER_MXFP4 ? 0 : kvc_fmt_slot_bytes(format);
}

/* The online processor count, read once: sysconf reads it from sysfs, ~8 us
 * a call here, which a small call would pay every time. */
static int g_default_threads;
static pthread_once_t g_threads_once = PTHREAD_ONCE_INIT;
static void init_default_threads(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    g_default_threads = n < 1 ? 1 : (n > 1024 ? 1024 : (int)n);
}
int kvc_cpu_default_threads(void) {
    pthread_once(&g_threads_once, init_default_threads);
    return g_default_threads;
}

void kvc_exec_init(kvc_exec *exec) {
    if (!exec) return;
    memset(exec, 0, sizeof *exec);
    exec->device = -1;
}

/* The compiled backend with this id, or NULL. */
static const kvc_backend_ops *find_backend(kvc_backend id) {
    for (const kvc_backend_ops *const *b = kvc_backends; *b; b++)
        if ((*b)->id == id) return *b;
    return NULL;
}

int kvc_backend_available(kvc_backend backend) {
    if (backend == KVC_BACKEND_AUTO) return 1;
    const kvc_backend_ops *b = find_backend(backend);
    return b && b->available();
}

/* AUTO: the first backend that owns state_cache's memory, else the CPU. */
static kvc_backend pick_auto(const kvc_args *a) {
    for (const kvc_backend_ops *const *b = kvc_backends; *b; b++)
        if ((*b)->owns && a->state_cache && (*b)->owns(a->state_cache)) return (*b)->id;
    return KVC_BACKEND_CPU;
}

/* kvc_compress (many = 0: one set, messages unprefixed) and
 * kvc_compress_many: every set's shapes, then the backend (one for all),
 * each set's aliasing and the sets' against each other, then the backend's
 * call on the resolved sets. */
static kvc_status compress_sets(const kvc_args *args, int n, const kvc_exec *exec, kvc_report *report, int many) {
    kvc_clear_error();
    kvc_exec defaults;
    if (!exec) {
        kvc_exec_init(&defaults);
        exec = &defaults;
    }
    if (report) memset(report, 0, sizeof *report);
    if (n < 0 || n > KVC_MANY_MAX)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "n = %d outside [0, %d] (KVC_MANY_MAX)", n, KVC_MANY_MAX);
    if (!args && n > 0) return kvc_fail(KVC_ERROR_NULL_POINTER, "args = NULL");
    kvc_args a[KVC_MANY_MAX];
    kvc_status st;
    for (int i = 0; i < n; i++)
        if ((st = kvc_check_shapes(&args[i], &a[i])) != KVC_OK)
            return many ? kvc_prefix_error(st, "args[%d]: ", i) : st;
    if (exec->num_threads < 0 || exec->num_threads > 1024)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->num_threads = %d outside [0, 1024]", exec->num_threads);
    const kvc_backend id = exec->backend != KVC_BACKEND_AUTO ? exec->backend
                           : n > 0                          ? pick_auto(&a[0])
                                                            : KVC_BACKEND_CPU;
    for (int i = 1; i < n && exec->backend == KVC_BACKEND_AUTO; i++)
        if (pick_auto(&a[i]) != id)
            return kvc_fail(KVC_ERROR_BAD_PARAMETER, "args[%d]: KVC_BACKEND_AUTO picks backend %d for it and %d for "
                            "args[0]: the sets of one call run on one backend", i, (int)pick_auto(&a[i]), (int)id);
    if (id < KVC_BACKEND_CPU || id > KVC_BACKEND_OPENCL)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->backend = %d is not a kvc_backend", (int)id);
    const kvc_backend_ops *b = find_backend(id);
    /* arguments before availability: OpenCL's tensor fields are cl_mem
     * handles (kvcompress_opencl.h) whether or not that backend is compiled in */
    const int handles = b ? b->handles : id == KVC_BACKEND_OPENCL;
    for (int i = 0; i < n; i++)
        if ((st = kvc_check_aliasing(&a[i], handles)) != KVC_OK)
            return many ? kvc_prefix_error(st, "args[%d]: ", i) : st;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            if (i != j && (st = kvc_check_aliasing_sets(&a[i], i, &a[j], j, handles)) != KVC_OK) return st;
    if (!b)
        return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "exec->backend = %d: this library was built without it",
                        (int)id);
    return n > 0 ? b->compress(a, n, exec, report) : KVC_OK;
}

kvc_status kvc_compress(const kvc_args *args, const kvc_exec *exec, kvc_report *report) {
    return compress_sets(args, 1, exec, report, 0);
}

kvc_status kvc_compress_many(const kvc_args *args, int n, const kvc_exec *exec, kvc_report *report) {
    return compress_sets(args, n, exec, report, 1);
}

kvc_status kvc_read_status(const kvc_exec *exec, kvc_device_status *out) {
    kvc_clear_error();
    if (!out || !exec) return kvc_fail(KVC_ERROR_NULL_POINTER, "%s = NULL", out ? "exec" : "out");
    const kvc_backend_ops *b = find_backend(exec->backend);
    if (!b || !b->read_status)
        return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "exec->backend = %d: %s", (int)exec->backend,
                        b ? "a synchronous backend has no device status word" : "not compiled into this library");
    return b->read_status(exec, out);
}

/* The backend headers' named forms of kvc_read_status. */
kvc_status kvc_cuda_read_status(const kvc_exec *exec, kvc_device_status *out) {
    kvc_exec e;
    if (exec) e = *exec;
    else kvc_exec_init(&e);
    e.backend = KVC_BACKEND_CUDA;
    return kvc_read_status(&e, out);
}

kvc_status kvc_opencl_read_status(const kvc_exec *exec, kvc_device_status *out) {
    if (!exec) {
        kvc_clear_error();
        return kvc_fail(KVC_ERROR_NULL_POINTER, "exec = NULL");
    }
    kvc_exec e = *exec;
    e.backend = KVC_BACKEND_OPENCL;
    return kvc_read_status(&e, out);
}
