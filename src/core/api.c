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

kvc_status kvc_compress(const kvc_args *args, const kvc_exec *exec, kvc_report *report) {
    kvc_clear_error();
    kvc_exec defaults;
    if (!exec) {
        kvc_exec_init(&defaults);
        exec = &defaults;
    }
    if (report) memset(report, 0, sizeof *report);
    kvc_args a;
    kvc_status st = kvc_check_shapes(args, &a);
    if (st != KVC_OK) return st;
    if (exec->num_threads < 0 || exec->num_threads > 1024)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->num_threads = %d outside [0, 1024]", exec->num_threads);
    const kvc_backend id = exec->backend == KVC_BACKEND_AUTO ? pick_auto(&a) : exec->backend;
    if (id < KVC_BACKEND_CPU || id > KVC_BACKEND_OPENCL)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->backend = %d is not a kvc_backend", (int)id);
    const kvc_backend_ops *b = find_backend(id);
    /* arguments before availability: OpenCL's tensor fields are cl_mem
     * handles (kvcompress_opencl.h) whether or not that backend is compiled in */
    if ((st = kvc_check_aliasing(&a, b ? b->handles : id == KVC_BACKEND_OPENCL)) != KVC_OK) return st;
    if (!b)
        return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "exec->backend = %d: this library was built without it",
                        (int)id);
    return b->compress(&a, exec, report);
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
