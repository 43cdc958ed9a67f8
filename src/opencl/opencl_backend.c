/*
 * opencl_backend.c -- the OpenCL backend (host side).
 *
 * Handles: exec->stream is the cl_command_queue; every tensor pointer of
 * kvc_args holds a cl_mem (cast to the pointer type), the tensor starting at
 * offset 0 of that buffer; exec->device_status, if set, is a cl_mem of at
 * least 40 bytes, apart from every tensor; each buffer's size is checked
 * against what the call reaches.  The program is built once per (context,
 * device) and kept; the status word the library owns and the kernels'
 * workspace are one per command queue (SPEC 2.6: calls on two queues never
 * share them).  Both live in registries (kvc_registry.h) that free the
 * least recently used past KVC_OPENCL_QUEUES_KEPT / _CONTEXTS_KEPT.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __APPLE__
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

#ifndef CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV /* cl_nv_device_attribute_query (cl_ext.h) */
#define CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#endif

#include "kvc_check.h"
#include "kvc_backend.h"
#include "kvc_registry.h"
#include "kvc_cl_shared.h"
#include "opencl_tuning.h"
#include "ptx_tune.h"

extern const char kvc_opencl_source[];


/* The program of one (context, device), built on the first call there, and
 * a reference to the context.  The entries form a list that grows with the
 * contexts a process calls on; past KVC_OPENCL_CONTEXTS_KEPT entries, a new
 * one frees the least recently used (with its queues' workspaces), so a
 * released context is let go (and one still in use rebuilds its program on
 * its next call). */
/* The program's kernels (kvc_kernel.cl, kvc_slice.cl, kvc_indexer.cl). */
enum {
    K_MAIN,        /* the chunked kernel, 2 dims a work-item                          */
    K_SMALL,       /* one-segment windows: several outputs per group                  */
    K_SMALL_BF16,  /* the same, a bf16 state                                          */
    K_SMALL_BIAS,  /* the same, a score bias, a float32 state                         */
    K_SMALL_BF16_BIAS, /* ... a score bias and a bf16 state                           */
    K_WIDE,        /* 1 dim per work-item, 512 per group (GPU devices only, else NULL) */
    K_SLICE,       /* C = 128 / 256 / 512 (kvc_slice.cl): any token stride            */
    K_SLICE_DENSE, /* the same, token stride 1024                                     */
    K_BF16_SLICE,  /* C = 128 / 256 / 512 with a bf16 state: any token stride         */
    K_BIAS_SLICE,  /* the same with a score bias, a float32 state                     */
    K_BF16_BIAS_SLICE, /* ... a score bias and a bf16 state                           */
    K_FINISH,      /* after the slice kernel: one group per output                    */
    K_GENERAL,     /* kvc_general.h: other head width 128, bf16 state or bias calls   */
    K_INDEXER,     /* head width 128, windows of one segment                          */
    K_COUNT
};
static const char *const kKernelNames[K_COUNT] = {
    "kvc_compress_kernel", "kvc_compress_small",   "kvc_small_bf16",       "kvc_small_bias",
    "kvc_bf16_small_bias", "kvc_compress_wide",    "kvc_slice",            "kvc_slice_dense",
    "kvc_bf16_slice",      "kvc_bias_slice",       "kvc_bf16_bias_slice",  "kvc_slice_finish",
    "kvc_compress_general", "kvc_compress_indexer"};

typedef struct cl_entry {
    kvc_reg_entry reg; /* key (context, device); first member          */
    cl_context ctx;
    cl_device_id dev;
    cl_program prog;
    cl_kernel k[K_COUNT]; /* created once (kKernelNames); arguments set under g_lock */
    size_t general_wg;  /* its largest work-group on this device (it needs head_dim) */
    cl_uint units;     /* compute units                                  */
} cl_entry;

/* What one command queue's calls use, in queue order: the library-owned
 * status word and the kernels' workspace.  Keyed by (queue, context): the
 * context is retained by its entry, and a queue's handle is only reused
 * after the queue was deleted, which waits for its commands.  Past
 * KVC_OPENCL_QUEUES_KEPT workspaces, a new queue's first call frees the
 * least recently used ones without a call in flight: OpenCL keeps a released
 * buffer until the commands that use it are done, so this is safe whether
 * that queue is gone or not (a queue still in use gets a new workspace on
 * its next call).  A call holds `call` while it grows the workspace and
 * enqueues its commands, so that two threads' calls on one queue never
 * interleave on it. */
typedef struct cl_queue_ws {
    kvc_reg_entry reg; /* key (queue, context); first member; calls in
                          flight counted there (under g_lock)           */
    cl_command_queue q;
    cl_entry *ent;
    pthread_mutex_t call;
    cl_mem status;     /* library-owned status word                     */
    cl_mem states;     /* chunk states [outputs][nchunk][3][512] floats */
    size_t states_bytes;
    cl_mem tickets;    /* [outputs] int                                 */
    size_t tickets_bytes;
} cl_queue_ws;

static kvc_registry g_entries, g_queues; /* under g_lock */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static kvc_status cl_fail(cl_int err, const char *what) {
    return kvc_fail(KVC_ERROR_DEVICE, "OpenCL %s failed: error %d", what, (int)err);
}

static int opencl_available(void) {
    cl_uint np = 0;
    if (clGetPlatformIDs(0, NULL, &np) != CL_SUCCESS || np == 0) return 0;
    cl_platform_id plats[16];
    if (np > 16) np = 16;
    if (clGetPlatformIDs(np, plats, NULL) != CL_SUCCESS) return 0;
    for (cl_uint i = 0; i < np; i++) {
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) == CL_SUCCESS && nd > 0) return 1;
    }
    return 0;
}

/* KVC_OPENCL_BUILD_LOG=1: build logs and tuning failures on stderr. */
static int build_log_on(void) {
    const char *v = getenv("KVC_OPENCL_BUILD_LOG");
    return v && !strcmp(v, "1");
}

/*
 * NVIDIA's OpenCL driver: occupancy directives and cache operators.
 *
 * The driver compiles OpenCL C to PTX and PTX to machine code, picking the
 * register count by itself; it ignores -cl-nv-maxrregcount=N.
 * Its program binary is the PTX text, which a program may be rebuilt from
 * (clCreateProgramWithBinary); the PTX directive `.minnctapersm N` on a
 * kernel's entry asks the PTX compiler for N resident work-groups per SM,
 * i.e. registers <= 65536 / (work-group size x N).  The PTX is the same, so the bytes are
 * the same; only the register allocation changes.
 *
 * The same way the state loads of both kernels get the PTX cache operator
 * .cs (evict-first: "ld.global.cs"), as the CUDA kernel's __ldcs: a hint
 * only, same bytes.  On the H200 it made the 131k-token cases faster
 * (2-dims kernel); ".L2::256B" on top gained nothing.
 *
 * The directives (opencl_tuning.h): the wide kernel at .minnctapersm 2, the
 * one-segment kernels at 3, the slice kernels at 4, the indexer kernel at 2,
 * the 2-dims kernel as built; .cs loads in the 2-dims, wide and slice
 * kernels, the one-segment kernels' 8-byte float and 4-byte bf16 state
 * loads, the bf16 slice kernels' 4-byte ones, and the indexer's 16- and
 * 8-byte state row loads (not its score bias: evict-first made a bias row
 * a DRAM read per output).  Any failure
 * keeps the program as built.
 */
static cl_program nv_tune(cl_context ctx, cl_device_id dev, cl_program prog) {
    char vendor[64] = "";
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
    if (!strstr(vendor, "NVIDIA")) return prog; /* (PoCL builds every kernel when asked for its binary) */
    size_t size = 0;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL) != CL_SUCCESS || size == 0)
        return prog;
    char *bin = malloc(size + 1);
    if (!bin) return prog;
    unsigned char *bp = (unsigned char *)bin;
    if (clGetProgramInfo(prog, CL_PROGRAM_BINARIES, sizeof bp, &bp, NULL) != CL_SUCCESS) {
        free(bin);
        return prog;
    }
    bin[size] = 0;
    /* PTX text only, and not edited already */
    int done = 0;
    if (strstr(bin, ".target sm_") && !strstr(bin, ".minnctapersm")) {
        /* (each edit stays inside its own entry) */
        bin = kvc_ptx_minb(bin, "kvc_compress_wide", KVC_OPENCL_NV_MINB_WIDE, &done);
        bin = kvc_ptx_minb(bin, "kvc_compress_small", KVC_OPENCL_SMALL_SLOTS, &done);
        bin = kvc_ptx_minb(bin, "kvc_small_bf16", KVC_OPENCL_SMALL_SLOTS, &done);
        bin = kvc_ptx_minb(bin, "kvc_small_bias", KVC_OPENCL_SMALL_SLOTS, &done);
        bin = kvc_ptx_minb(bin, "kvc_bf16_small_bias", KVC_OPENCL_SMALL_SLOTS, &done);
        /* (their state rows: float pairs, or bf16 pairs as 32-bit words; their
         * tables are s32, their bias, cos / sin and scalar rows f32 or u16) */
        bin = kvc_ptx_streaming(bin, "kvc_compress_small", KVC_PTX_LD_V2F32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_small_bf16", KVC_PTX_LD_U32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_small_bias", KVC_PTX_LD_V2F32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_bf16_small_bias", KVC_PTX_LD_U32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_compress_kernel", KVC_PTX_LD_F32 | KVC_PTX_LD_V2F32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_compress_wide", KVC_PTX_LD_F32 | KVC_PTX_LD_V2F32, &done);
        bin = kvc_ptx_minb(bin, "kvc_slice", KVC_OPENCL_NV_MINB_SLICE, &done);
        bin = kvc_ptx_minb(bin, "kvc_slice_dense", KVC_OPENCL_NV_MINB_SLICE, &done);
        bin = kvc_ptx_minb(bin, "kvc_bf16_slice", KVC_OPENCL_NV_MINB_SLICE, &done);
        bin = kvc_ptx_minb(bin, "kvc_bias_slice", KVC_OPENCL_NV_MINB_BIAS_SLICE, &done);
        bin = kvc_ptx_minb(bin, "kvc_bf16_bias_slice", KVC_OPENCL_NV_MINB_BF16_BIAS_SLICE, &done);
        bin = kvc_ptx_streaming(bin, "kvc_slice", KVC_PTX_LD_F32 | KVC_PTX_LD_V2F32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_slice_dense", KVC_PTX_LD_F32 | KVC_PTX_LD_V2F32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_bf16_slice", KVC_PTX_LD_U32, &done);
        bin = kvc_ptx_streaming(bin, "kvc_bf16_bias_slice", KVC_PTX_LD_U32, &done);
        /* (kvc_bias_slice: none; its float rows and its bias, which every
         * output reads again, load in the same float pairs) */
        bin = kvc_ptx_minb(bin, "kvc_compress_indexer", KVC_OPENCL_IDX_SLOTS, &done);
        /* (the indexer's state rows only: its bias and cos / sin loads are scalar) */
        bin = kvc_ptx_streaming(bin, "kvc_compress_indexer", KVC_PTX_LD_V4F32 | KVC_PTX_LD_V2U32, &done);
    }
    if (!done) {
        free(bin);
        return prog;
    }
    const size_t len = strlen(bin);
    const unsigned char *cb = (const unsigned char *)bin;
    cl_int err, bst;
    cl_program p2 = clCreateProgramWithBinary(ctx, 1, &dev, &len, &cb, &bst, &err);
    if (err == CL_SUCCESS && bst == CL_SUCCESS) err = clBuildProgram(p2, 1, &dev, "", NULL, NULL);
    else if (err == CL_SUCCESS) err = bst;
    free(bin);
    if (err != CL_SUCCESS) {
        if (p2) clReleaseProgram(p2);
        if (build_log_on())
            fprintf(stderr, "kvcompress: OpenCL occupancy directives not applied (error %d)\n", (int)err);
        return prog;
    }
    clReleaseProgram(prog);
    return p2;
}

/* A new entry: the program of (ctx, dev) built, its kernels made.  Caller holds g_lock. */
static kvc_status entry_make_locked(cl_context ctx, cl_device_id dev, cl_entry **out) {
    cl_int err;
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    /* KVC_OPENCL_TRUST_FP=1 skips this check (tests: Oclgrind computes with
     * the host's IEEE arithmetic but does not report the capability; the
     * tests compare every byte anyway) */
    if ((!(fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) || !(fp & CL_FP_DENORM)) && !kvc_test_hook("KVC_OPENCL_TRUST_FP")) {
        return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE,
                        "OpenCL device lacks %s: the canonical arithmetic needs both",
                        !(fp & CL_FP_DENORM) ? "denormals (CL_FP_DENORM)" : "correctly rounded divide/sqrt");
    }
    const char *src = kvc_opencl_source;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    if (err != CL_SUCCESS) {
        return cl_fail(err, "clCreateProgramWithSource");
    }
    /* KVC_OPENCL_BUILD_OPTIONS (test build only): extra options appended,
     * e.g. "-cl-opt-disable" for Oclgrind; KVC_OPENCL_BUILD_LOG=1 prints the
     * build log to stderr. */
    char opts[512] = "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt";
    cl_device_type type = 0;
    clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    /* GPU devices: straight-line full chunks and the one-dim kernels (see
     * KVC_CL_STRAIGHT in kvc_kernel.cl); KVC_OPENCL_GPU_PATHS=1 takes them on
     * any device (tests: Oclgrind runs them where PoCL cannot) */
    const int gpu = !(type & CL_DEVICE_TYPE_CPU) || kvc_test_hook("KVC_OPENCL_GPU_PATHS");
    if (gpu) strcat(opts, " -DKVC_CL_STRAIGHT=1");
    /* a correctly rounded fma (kvc_canon.h: KVC_SUB_K_LN2_HI, same bits) */
    if (fp & CL_FP_FMA) strcat(opts, " -DKVC_CL_FMA=1");
    snprintf(opts + strlen(opts), sizeof opts - strlen(opts),
             " -DKVC_CL_MAX_CH=%d -DKVC_CL_SMALL_K=%d -DKVC_CL_IDX_K=%d", KVC_OPENCL_MAX_CH, KVC_OPENCL_SMALL_K,
             KVC_OPENCL_IDX_K);
    /* KVC_OPENCL_OPT_DISABLE=1: -cl-opt-disable (tests: Oclgrind 21.10 cannot
     * run its optimised builds); no other option reaches the compiler */
    if (kvc_test_hook("KVC_OPENCL_OPT_DISABLE")) strcat(opts, " -cl-opt-disable");
    /* NVIDIA: the indexer kernel's exchanges as warp shuffles (inline PTX,
     * kvc_indexer.cl); a driver that rejects them builds the portable form */
    char vendor[64] = "";
    clGetDeviceInfo(dev, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL);
    const size_t nv_at = strstr(vendor, "NVIDIA") ? strlen(opts) : 0;
    if (nv_at) {
        /* and on compute capability 8.0+ kvc_max as one max.NaN (kvc_canon.h) */
        cl_uint major = 0;
        if (clGetDeviceInfo(dev, CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) != CL_SUCCESS)
            major = 0;
        snprintf(opts + nv_at, sizeof opts - nv_at, " -DKVC_CL_NV_SHFL=1%s", major >= 8 ? " -DKVC_CL_NV_MAX=1" : "");
    }
    err = clBuildProgram(prog, 1, &dev, opts, NULL, NULL);
    if (err != CL_SUCCESS && nv_at) {
        if (build_log_on()) fprintf(stderr, "kvcompress: OpenCL build with warp shuffles failed (%d)\n", (int)err);
        opts[nv_at] = 0;
        err = clBuildProgram(prog, 1, &dev, opts, NULL, NULL);
    }
    if (build_log_on()) {
        char log[8192] = "";
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        fprintf(stderr, "kvcompress: OpenCL build options \"%s\": %d\n%s\n", opts, (int)err, log);
    }
    if (err != CL_SUCCESS) {
        char log[2048] = "";
        clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        clReleaseProgram(prog);
        return kvc_fail(KVC_ERROR_DEVICE, "OpenCL program build failed (%d): %.900s", (int)err, log);
    }
    prog = nv_tune(ctx, dev, prog);
    cl_kernel k[K_COUNT] = {NULL};
    for (int i = 0; i < K_COUNT && err == CL_SUCCESS; i++)
        if (i != K_WIDE || gpu) k[i] = clCreateKernel(prog, kKernelNames[i], &err);
    cl_entry *e = err == CL_SUCCESS ? calloc(1, sizeof *e) : NULL;
    if (!e) {
        for (int i = 0; i < K_COUNT; i++)
            if (k[i]) clReleaseKernel(k[i]);
        clReleaseProgram(prog);
        return err != CL_SUCCESS ? cl_fail(err, "clCreateKernel")
                                 : kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "OpenCL: no host memory for a program entry");
    }
    cl_uint units = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL) != CL_SUCCESS || units == 0)
        units = 1;
    size_t general_wg = 0;
    if (clGetKernelWorkGroupInfo(k[K_GENERAL], dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof general_wg, &general_wg, NULL) !=
        CL_SUCCESS)
        general_wg = 0;
    *e = (cl_entry){{NULL, {ctx, dev, NULL}, 0, 0}, ctx, dev, prog, {NULL}, general_wg, units};
    memcpy(e->k, k, sizeof k);
    clRetainContext(ctx);
    *out = e;
    return KVC_OK;
}

static void entry_free(cl_entry *e) {
    for (int i = 0; i < K_COUNT; i++)
        if (e->k[i]) clReleaseKernel(e->k[i]);
    clReleaseProgram(e->prog);
    clReleaseContext(e->ctx);
    free(e);
}

static void queue_drop(kvc_reg_entry *r) {
    cl_queue_ws *w = (cl_queue_ws *)r;
    if (w->status) clReleaseMemObject(w->status);
    if (w->states) clReleaseMemObject(w->states);
    if (w->tickets) clReleaseMemObject(w->tickets);
    pthread_mutex_destroy(&w->call);
    free(w);
}

static int queue_of_entry(kvc_reg_entry *r, const void *ent) { return ((cl_queue_ws *)r)->ent == ent; }

/* An entry may go when no call is in flight on any of its queues. */
static int entry_idle(kvc_reg_entry *r) {
    for (kvc_reg_entry *q = g_queues.head; q; q = q->next)
        if (q->users > 0 && queue_of_entry(q, r)) return 0;
    return 1;
}

static void entry_drop(kvc_reg_entry *r) {
    kvc_reg_drop_if(&g_queues, queue_of_entry, r, queue_drop);
    entry_free((cl_entry *)r);
}

/* The workspace of queue q, made on its first call (the program of its
 * context and device built on the first call there), with one more call in
 * flight on it: queue_release() when the call is enqueued.  An out-of-order
 * queue is refused: a call's commands (status fill, kernels) rely on queue
 * order. */
static kvc_status queue_acquire(cl_command_queue q, cl_queue_ws **out) {
    pthread_mutex_lock(&g_lock);
    cl_context ctx;
    cl_device_id dev;
    cl_command_queue_properties props = 0;
    cl_int err;
    kvc_status st = KVC_OK;
    if ((err = clGetCommandQueueInfo(q, CL_QUEUE_CONTEXT, sizeof ctx, &ctx, NULL)) != CL_SUCCESS) {
        pthread_mutex_unlock(&g_lock);
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->stream is not a valid cl_command_queue (error %d)", (int)err);
    }
    cl_queue_ws *found = (cl_queue_ws *)kvc_reg_acquire(&g_queues, q, ctx, NULL);
    if (found) {
        found->ent->reg.last_use = ++g_entries.clock;
        pthread_mutex_unlock(&g_lock);
        *out = found;
        return KVC_OK;
    }
    if ((err = clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL)) != CL_SUCCESS ||
        (err = clGetCommandQueueInfo(q, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL)) != CL_SUCCESS)
        st = kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->stream is not a valid cl_command_queue (error %d)", (int)err);
    else if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE)
        st = kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->stream is an out-of-order cl_command_queue: the OpenCL "
                      "backend needs an in-order queue (a call's kernels run in queue order)");
    if (st != KVC_OK) {
        pthread_mutex_unlock(&g_lock);
        return st;
    }
    cl_entry *ent = (cl_entry *)kvc_reg_acquire(&g_entries, ctx, dev, NULL);
    if (!ent) {
        kvc_reg_sweep(&g_entries, KVC_OPENCL_CONTEXTS_KEPT, entry_idle, entry_drop);
        if ((st = entry_make_locked(ctx, dev, &ent)) != KVC_OK) {
            pthread_mutex_unlock(&g_lock);
            return st;
        }
        kvc_reg_add(&g_entries, &ent->reg);
    }
    kvc_reg_release(&g_entries, &ent->reg); /* (an entry's calls are its queues') */
    kvc_reg_sweep(&g_queues, KVC_OPENCL_QUEUES_KEPT, NULL, queue_drop);
    cl_queue_ws *w = calloc(1, sizeof *w);
    err = CL_SUCCESS;
    cl_mem status = w ? clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(kvc_cl_status), NULL, &err) : NULL;
    const cl_int zero = 0;
    if (!w) st = kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "OpenCL: no host memory for a queue's workspace");
    else if (err != CL_SUCCESS) st = cl_fail(err, "clCreateBuffer(status)");
    else if ((err = clEnqueueFillBuffer(q, status, &zero, sizeof zero, 0, sizeof(kvc_cl_status), 0, NULL, NULL)) !=
             CL_SUCCESS)
        st = cl_fail(err, "clEnqueueFillBuffer(status)");
    if (st != KVC_OK) {
        if (status) clReleaseMemObject(status);
        free(w);
        pthread_mutex_unlock(&g_lock);
        return st;
    }
    w->reg.key[0] = q;
    w->reg.key[1] = ctx;
    w->q = q;
    w->ent = ent;
    w->status = status;
    pthread_mutex_init(&w->call, NULL);
    kvc_reg_add(&g_queues, &w->reg);
    pthread_mutex_unlock(&g_lock);
    *out = w;
    return KVC_OK;
}

static void queue_release(cl_queue_ws *w) {
    pthread_mutex_lock(&g_lock);
    kvc_reg_release(&g_queues, &w->reg);
    pthread_mutex_unlock(&g_lock);
}

/* Make *buf at least `need` bytes (under the queue's call lock). */
static kvc_status grow(cl_context ctx, cl_mem *buf, size_t *have, size_t need, const char *what) {
    if (*have >= need) return KVC_OK;
    if (*buf) clReleaseMemObject(*buf);
    *buf = NULL;
    *have = 0;
    cl_int err;
    size_t bytes = need + need / 4;
    *buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        *buf = NULL;
        return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "OpenCL %s buffer of %zu bytes: error %d", what, bytes, (int)err);
    }
    *have = bytes;
    return KVC_OK;
}

/* A call's buffers in the kernels' argument order (KVC_CL_KERNEL_ARGS),
 * then the general and indexer kernels' score bias (none: any buffer --
 * they read it only with a stride). */
static void call_bufs(const kvc_args *a, cl_mem status, cl_mem states, cl_mem tickets, cl_mem bufs[13]) {
    const void *const p[9] = {a->state_cache, a->token_to_req, a->positions, a->kv_slot_mapping,
                              a->boundary_token_indices, a->block_table, a->rms_norm_weight, a->cos_sin_cache,
                              a->kv_cache};
    for (int i = 0; i < 9; i++) bufs[i] = (cl_mem)(void *)p[i];
    bufs[9] = status;
    bufs[10] = states;
    bufs[11] = tickets;
    bufs[12] = (cl_mem)(void *)(a->score_bias ? a->score_bias : a->state_cache);
}

/* Set k's arguments (every kernel takes the same: KVC_CL_KERNEL_ARGS) and
 * enqueue groups x local work-items.  One kernel object per context:
 * arguments and enqueue under the lock (clEnqueueNDRangeKernel captures
 * the arguments). */
static kvc_status enqueue(cl_command_queue q, cl_kernel k, const kvc_shape *sh, const kvc_plan *pl,
                          const cl_mem *bufs, int nbufs, long long groups, size_t local) {
    pthread_mutex_lock(&g_lock);
    cl_int err = clSetKernelArg(k, 0, sizeof *sh, sh);
    if (err == CL_SUCCESS) err = clSetKernelArg(k, 1, sizeof *pl, pl);
    for (int i = 0; i < nbufs && err == CL_SUCCESS; i++)
        err = clSetKernelArg(k, (cl_uint)(i + 2), sizeof(cl_mem), &bufs[i]);
    if (err != CL_SUCCESS) {
        pthread_mutex_unlock(&g_lock);
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "OpenCL kernel argument rejected (error %d): are the kvc_args "
                        "pointers cl_mem buffers?", (int)err);
    }
    const size_t global = (size_t)groups * local;
    err = clEnqueueNDRangeKernel(q, k, 1, NULL, &global, &local, 0, NULL, NULL);
    pthread_mutex_unlock(&g_lock);
    return err == CL_SUCCESS ? KVC_OK : cl_fail(err, "clEnqueueNDRangeKernel");
}

/* Zero the call's status word with a fill (in queue order); keep (a set
 * after the first of kvc_compress_many): nothing. */
static kvc_status zero_status(cl_command_queue q, cl_mem status, int keep) {
    if (keep) return KVC_OK;
    const cl_int zero = 0;
    const cl_int err = clEnqueueFillBuffer(q, status, &zero, sizeof zero, 0, sizeof(kvc_cl_status), 0, NULL, NULL);
    return err == CL_SUCCESS ? KVC_OK : cl_fail(err, "clEnqueueFillBuffer(status)");
}

/* The commands of one set on queue q (the caller holds ws->call): set
 * `set` of a call, whose outputs are numbered from out_base. */
static kvc_status enqueue_call(const kvc_args *a, const kvc_exec *e, cl_command_queue q, const cl_entry *ent,
                               cl_queue_ws *ws, int set, long long out_base) {
    const int keep = set > 0;
    cl_mem status = e->device_status ? (cl_mem)(void *)e->device_status : ws->status;
    kvc_status st;
    cl_int err;
    const cl_int zero = 0;
    /* the status word is zeroed by a fill, or by the slice kernels
     * themselves (kvc_slice.cl: a command fewer per call); every return
     * before the kernels fills it */
    if (a->num_outputs == 0) return zero_status(q, status, keep);
    const kvc_shape sh = kvc_shape_of(a);
    cl_mem bufs[13];
    /* the CUDA backend's chunk policy: about one wave of work-groups,
     * chunks of >= 4 segments (<= 128), <= 8 chunks per output where the
     * window allows (several waves of shorter chunks were slower on the
     * H200).  One-segment windows: K outputs per group (kvc_compress_small,
     * kvc_compress_indexer), K <= KVC_OPENCL_SMALL_K (the indexer's:
     * KVC_OPENCL_IDX_K), whole waves of KVC_OPENCL_SMALL_SLOTS (the
     * indexer's: KVC_OPENCL_IDX_SLOTS) groups per compute unit.  Head width
     * 128 with windows of one segment: kvc_indexer.cl; head width 512 with
     * windows of one segment and a bf16 state or a score bias: the
     * one-segment kernel's variants; else head width 128, a bf16 state or a
     * score bias: the general kernel.  They take the status word zeroed by
     * a fill and no workspace (any buffers) */
    const int ovl = a->overlap == KVC_OVERLAP_ON;
    const int indexer = a->head_dim == 128 && kvc_num_segments(kvc_window_rows(a->compress_ratio, ovl)) == 1;
    int general = !indexer && kvc_needs_general(a);
    const kvc_plan_policy pol = {KVC_OPENCL_CHDIV, KVC_OPENCL_MAXCHUNKS, KVC_OPENCL_MAX_CH,
                                 (long long)(indexer ? KVC_OPENCL_IDX_SLOTS : KVC_OPENCL_SMALL_SLOTS) * ent->units,
                                 indexer ? KVC_OPENCL_IDX_K : KVC_OPENCL_SMALL_K, 0};
    kvc_plan pl;
    kvc_plan_make(a->num_outputs, a->compress_ratio, ovl, &pol, &pl);
    pl.out_base = out_base;
    pl.keep_status = keep;
    /* head width 512 with a bf16 state or a score bias in windows the slice
     * kernels take (below): kvc_bf16_slice, kvc_bias_slice, kvc_bf16_bias_slice */
    const int bf16 = a->state_dtype == KVC_STATE_BFLOAT16, bias = a->score_bias != NULL;
    if (general && a->head_dim == KVC_HEAD_DIM && kvc_plan_slice(a, &pl, 1)) general = 0;
    if (indexer || general) {
        if ((st = zero_status(q, status, keep)) != KVC_OK ||
            (st = grow(ent->ctx, &ws->states, &ws->states_bytes, 16, "chunk-state")) != KVC_OK ||
            (st = grow(ent->ctx, &ws->tickets, &ws->tickets_bytes, 16, "ticket")) != KVC_OK)
            return st;
        call_bufs(a, status, ws->states, ws->tickets, bufs);
    }
    if (indexer) { /* K outputs a group of 256, 8 at once */
        /* 16-byte (bf16: 8-byte) row loads: buffers start aligned, every row offset a multiple of 4 elements */
        pl.vec = a->state_stride_block % 4 == 0 && a->state_stride_token % 4 == 0;
        return enqueue(q, ent->k[K_INDEXER], &sh, &pl, bufs, 13, pl.groups, 256);
    }
    /* the kernels below: 8-byte loads (bf16: 4-byte pairs) where the
     * buffers start aligned (offset 0) and both strides are even */
    pl.vec = a->state_stride_block % 2 == 0 && a->state_stride_token % 2 == 0;
    if (general && pl.small_k && a->head_dim == KVC_HEAD_DIM) { /* kvc_small_bf16 / _bias / _bf16_bias */
        const int k = bias ? (bf16 ? K_SMALL_BF16_BIAS : K_SMALL_BIAS) : K_SMALL_BF16;
        return enqueue(q, ent->k[k], &sh, &pl, bufs, bias ? 13 : 12, pl.groups, 256);
    }
    if (general) { /* kvc_general.h */
        /* 128 work-items an output at head width 128 (up to KVC_GEN_K_MAX
         * outputs a group, as the device's work-groups allow), 256 of 2
         * dimensions at 512 */
        const long long per = a->head_dim == 128 ? 128 : 256;
        long long k = a->head_dim == 128 ? (long long)(ent->general_wg / 128) : 1;
        k = k > KVC_GEN_K_MAX ? KVC_GEN_K_MAX : k;
        if (ent->general_wg < (size_t)per)
            return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "OpenCL device: work-groups of at most %zu work-items "
                            "for the general kernel, head_dim = %lld needs %lld (head width 128 or a bf16 state "
                            "or score bias at 512)", ent->general_wg, (long long)a->head_dim, per);
        kvc_plan gp = {0};
        gp.out_base = out_base;
        gp.keep_status = keep;
        gp.small_k = k; /* outputs per group */
        gp.groups = (a->num_outputs + k - 1) / k;
        return enqueue(q, ent->k[K_GENERAL], &sh, &gp, bufs, 13, gp.groups, (size_t)(k * per));
    }

    /* the slice kernels (kvc_slice.cl) for C = 128 / 256 / 512 without
     * overlap, 8-byte rows: one group per (output, 16-segment chunk, 64-dim
     * slice), then one finishing group per output */
    const int slice = kvc_plan_slice(a, &pl, 1); /* (buffers start aligned: offset 0) */
    if (slice) {
        pl.ch = 16;
        pl.groups = a->num_outputs * 8 * pl.nchunk;
    }

    /* the 1-dim-per-work-item kernel (kvc_kernel.cl) for windows of full
     * segments without overlap on GPU devices: kvc_compress_wide (512
     * work-items, 64 registers), faster on the H200 than the 2-dims kernel.
     * Test hook KVC_OPENCL_NO_WIDE=1: the 2-dims kernel
     * (tests/test_opencl_paths.c reaches both under Oclgrind) */
    const int wide = !slice && !pl.small_k && pl.full && ent->k[K_WIDE] && !kvc_test_hook("KVC_OPENCL_NO_WIDE");
    const int shared_states = !slice && pl.nchunk > 1;
    /* workspace: chunk states (slice kernels: c records or chunk states,
     * then a check record per output),
     * tickets (slice kernels: two bad-block words per group) */
    _Static_assert(KVC_CL_SLICE_REC == KVC_SLICE_REC && KVC_CL_CHUNK_STATE == KVC_CHUNK_STATE,
                   "the records of kvc_check.h");
    kvc_ws_plan wp;
    kvc_ws_plan_make(&pl, a->num_outputs, slice, &wp);
    const size_t states_bytes = slice ? (size_t)wp.states + (size_t)a->num_outputs * KVC_CL_CHECK_REC * 4
                                : shared_states ? (size_t)wp.states
                                                : 16;
    const size_t tickets_bytes = slice ? (size_t)wp.slice_bad : (size_t)a->num_outputs * 4;

    st = grow(ent->ctx, &ws->states, &ws->states_bytes, states_bytes, "chunk-state");
    if (st == KVC_OK) st = grow(ent->ctx, &ws->tickets, &ws->tickets_bytes, tickets_bytes, "ticket");
    cl_mem states = ws->states, tickets = ws->tickets;
    if (st != KVC_OK) {
        zero_status(q, status, keep);
        return st;
    }
    if (!slice && (st = zero_status(q, status, keep)) != KVC_OK) return st;
    if (shared_states &&
        (err = clEnqueueFillBuffer(q, tickets, &zero, sizeof zero, 0, (size_t)a->num_outputs * 4, 0, NULL, NULL)) !=
            CL_SUCCESS)
        return cl_fail(err, "clEnqueueFillBuffer(tickets)");

    call_bufs(a, status, states, tickets, bufs);
    if (slice) {
        const int dense = !bf16 && a->state_stride_token == 1024;
        const int k = bias ? (bf16 ? K_BF16_BIAS_SLICE : K_BIAS_SLICE)
                           : bf16 ? K_BF16_SLICE
                           : dense ? K_SLICE_DENSE
                                   : K_SLICE;
        st = enqueue(q, ent->k[k], &sh, &pl, bufs, bias ? 13 : 12, pl.groups, 256);
        return st == KVC_OK ? enqueue(q, ent->k[K_FINISH], &sh, &pl, bufs, 12, a->num_outputs, 128) : st;
    }
    cl_kernel k = ent->k[pl.small_k ? K_SMALL : wide ? K_WIDE : K_MAIN];
    return enqueue(q, k, &sh, &pl, bufs, 12, pl.groups, wide ? 512 : 256); /* KVC_CL_WG of kvc_kernel.cl */
}

/* The size of cl_mem m and, where root is not NULL, for a sub-buffer its
 * parent and offset (else m and 0). */
static kvc_status mem_info(cl_mem m, const char *name, size_t *size, cl_mem *root, size_t *offset) {
    cl_int err = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof *size, size, NULL);
    if (err != CL_SUCCESS)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "%s is not a cl_mem buffer (clGetMemObjectInfo: error %d)", name,
                        (int)err);
    if (!root) return KVC_OK; /* (the size alone) */
    cl_mem parent = NULL;
    *offset = 0;
    if (clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) != CL_SUCCESS) parent = NULL;
    if (parent && clGetMemObjectInfo(m, CL_MEM_OFFSET, sizeof *offset, offset, NULL) != CL_SUCCESS) *offset = 0;
    *root = parent ? parent : m;
    return KVC_OK;
}

/* A caller's status word: a cl_mem of at least the word's bytes (root and
 * offset as mem_info's). */
static kvc_status status_word_info(const kvc_exec *e, size_t *size, cl_mem *root, size_t *offset) {
    const kvc_status st = mem_info((cl_mem)(void *)e->device_status, "exec->device_status", size, root, offset);
    if (st == KVC_OK && *size < sizeof(kvc_cl_status))
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "exec->device_status: a cl_mem of %zu bytes, the status word needs %zu",
                        *size, sizeof(kvc_cl_status));
    return st;
}

/* Every buffer holds what the call reaches from its start, and a caller's
 * status word (40 bytes) is a buffer of its own: not inside any tensor's. */
static kvc_status check_buffers(const kvc_args *a, const kvc_exec *e) {
    const void *ptrs[KVC_TENSORS];
    kvc_tensor_ptrs(a, ptrs);
    int64_t need[KVC_TENSORS];
    kvc_status st = kvc_tensor_bytes(a, need);
    if (st != KVC_OK) return st;
    size_t size[KVC_TENSORS], offset[KVC_TENSORS];
    cl_mem root[KVC_TENSORS];
    const int status = e->device_status != NULL; /* (parents and offsets only to compare with it) */
    for (int i = 0; i < KVC_TENSORS && a->num_outputs > 0; i++) {
        if (!ptrs[i]) { /* an absent optional tensor (score_bias) */
            root[i] = NULL;
            size[i] = offset[i] = 0;
            continue;
        }
        if ((st = mem_info((cl_mem)(void *)ptrs[i], kvc_tensor_names[i], &size[i], status ? &root[i] : NULL,
                           &offset[i])) != KVC_OK)
            return st;
        if ((uint64_t)size[i] < (uint64_t)need[i])
            return kvc_fail(KVC_ERROR_BAD_SHAPE, "%s: a cl_mem of %zu bytes; its sizes and strides reach %lld bytes",
                            kvc_tensor_names[i], size[i], (long long)need[i]);
    }
    if (!status) return KVC_OK;
    size_t ssize = 0, soff = 0;
    cl_mem sroot = NULL;
    if ((st = status_word_info(e, &ssize, &sroot, &soff)) != KVC_OK) return st;
    for (int i = 0; i < KVC_TENSORS && a->num_outputs > 0; i++)
        if (ptrs[i] && sroot == root[i] && soff < offset[i] + size[i] && offset[i] < soff + ssize)
            return kvc_fail(KVC_ERROR_ALIASING, "exec->device_status and %s share memory: the status word would "
                            "overwrite it", kvc_tensor_names[i]);
    return KVC_OK;
}

static kvc_status opencl_compress(const kvc_args *a, int n, const kvc_exec *e, kvc_report *rep) {
    cl_command_queue q = (cl_command_queue)e->stream;
    if (!q) return kvc_fail(KVC_ERROR_NULL_POINTER, "exec->stream = NULL: the OpenCL backend needs a cl_command_queue");
    if (rep) {
        rep->outputs_written = rep->outputs_padding = rep->outputs_nonfinite = -1;
        rep->device_async = 1;
    }
    kvc_status st = KVC_OK;
    long long total = 0;
    for (int i = 0; i < n && st == KVC_OK; i++) {
        if ((st = check_buffers(&a[i], e)) != KVC_OK && n > 1) kvc_prefix_error(st, "args[%d]: ", i);
        total += a[i].num_outputs;
    }
    if (st != KVC_OK) return st;
    /* every counter of kvc_cl_status counts outputs, each at most once */
    if (total > 0x7FFFFFFFLL)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "%lld outputs: the OpenCL backend's status counters are 32-bit (at most "
                        "2147483647 outputs per call)", total);
    cl_queue_ws *ws;
    if ((st = queue_acquire(q, &ws)) != KVC_OK) return st;
    pthread_mutex_lock(&ws->call);
    /* the sets in queue order, one status word: zeroed by the first */
    long long base = 0;
    for (int i = 0; i < n && st == KVC_OK; i++) {
        st = enqueue_call(&a[i], e, q, ws->ent, ws, i, base);
        base += a[i].num_outputs;
    }
    pthread_mutex_unlock(&ws->call);
    queue_release(ws);
    return st;
}

static kvc_status opencl_read_status(const kvc_exec *e, kvc_device_status *out) {
    cl_command_queue q = (cl_command_queue)e->stream;
    if (!q) return kvc_fail(KVC_ERROR_NULL_POINTER, "exec->stream = NULL: need the cl_command_queue");
    kvc_status st;
    size_t ssize;
    if (e->device_status && (st = status_word_info(e, &ssize, NULL, NULL)) != KVC_OK) return st;
    cl_queue_ws *ws;
    if ((st = queue_acquire(q, &ws)) != KVC_OK) return st;
    cl_mem status = e->device_status ? (cl_mem)(void *)e->device_status : ws->status;
    kvc_cl_status s;
    cl_int err = clEnqueueReadBuffer(q, status, CL_TRUE, 0, sizeof s, &s, 0, NULL, NULL);
    queue_release(ws);
    if (err != CL_SUCCESS) return cl_fail(err, "clEnqueueReadBuffer(status)");
    out->status = s.status;
    out->check = s.check;
    out->output = s.output;
    out->value = s.value;
    out->outputs_written = s.written;
    out->outputs_padding = s.padding;
    out->outputs_nonfinite = s.nonfinite;
    out->outputs_invalid = s.invalid;
    return KVC_OK;
}

const kvc_backend_ops kvc_backend_opencl = {KVC_BACKEND_OPENCL, "opencl", opencl_available, NULL, opencl_compress,
                                            opencl_read_status, 1};
