/* api.c -- argument defaults and backend dispatch. */
#include <string.h>

#include "kvc_internal.h"

void kvc_args_init(kvc_args *args) {
    if (!args) return;
    memset(args, 0, sizeof *args);
    args->state_width = 1024;
    args->kv_block_size = 64;
    args->rms_norm_eps = 1e-6f;
}

void kvc_exec_init(kvc_exec *exec) {
    if (!exec) return;
    memset(exec, 0, sizeof *exec);
    exec->device = -1;
}

int kvc_backend_available(kvc_backend backend) {
    switch (backend) {
    case KVC_BACKEND_AUTO:
    case KVC_BACKEND_CPU: return 1;
#ifdef KVC_WITH_CUDA
    case KVC_BACKEND_CUDA: return kvc_cuda_available();
#endif
#ifdef KVC_WITH_OPENCL
    case KVC_BACKEND_OPENCL: return kvc_opencl_available();
#endif
    default: return 0;
    }
}

static kvc_backend pick_auto(const kvc_args *a) {
#ifdef KVC_WITH_CUDA
    if (a->state_cache && kvc_cuda_is_device_pointer(a->state_cache)) return KVC_BACKEND_CUDA;
#else
    (void)a;
#endif
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
    kvc_backend b = exec->backend == KVC_BACKEND_AUTO ? pick_auto(&a) : exec->backend;
    if ((st = kvc_check_aliasing(&a, b == KVC_BACKEND_OPENCL)) != KVC_OK) return st;
    switch (b) {
    case KVC_BACKEND_CPU: return kvc_cpu_compress(&a, exec, report);
#ifdef KVC_WITH_CUDA
    case KVC_BACKEND_CUDA: return kvc_cuda_compress(&a, exec, report);
#endif
#ifdef KVC_WITH_OPENCL
    case KVC_BACKEND_OPENCL: return kvc_opencl_compress(&a, exec, report);
#endif
#ifndef KVC_WITH_CUDA
    case KVC_BACKEND_CUDA:
#endif
#ifndef KVC_WITH_OPENCL
    case KVC_BACKEND_OPENCL:
#endif
        return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "exec->backend = %d: this library was built without it",
                        (int)b);
    default:
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->backend = %d is not a kvc_backend", (int)b);
    }
}

kvc_status kvc_cuda_read_status(const kvc_exec *exec, kvc_device_status *out) {
    kvc_clear_error();
    if (!out) return kvc_fail(KVC_ERROR_NULL_POINTER, "out = NULL");
#ifdef KVC_WITH_CUDA
    return kvc_cuda_read_status_impl(exec, out);
#else
    (void)exec;
    return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "this library was built without CUDA");
#endif
}

kvc_status kvc_opencl_read_status(const kvc_exec *exec, kvc_device_status *out) {
    kvc_clear_error();
    if (!out || !exec) return kvc_fail(KVC_ERROR_NULL_POINTER, "%s = NULL", out ? "exec" : "out");
#ifdef KVC_WITH_OPENCL
    return kvc_opencl_read_status_impl(exec, out);
#else
    return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "this library was built without OpenCL");
#endif
}
