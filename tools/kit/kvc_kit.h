/*
 * kvc_kit.h -- helpers shared by the CLI and the tests (not part of the
 * library): the golden-case index, file loading, slot extraction and the
 * conformance rules of SPEC 4 / 7.
 */
#ifndef KVC_KIT_H
#define KVC_KIT_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "kvcompress.h"
#include "kvcompress_rand.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_KIT_MAX_POISON 64
#define KVC_KIT_MAX_NONFINITE 64

typedef struct kvc_golden_case {
    char name[128];
    char dir[16];                /* main, engine or edge */
    kvc_case_params params;
    kvc_case_poison poison[KVC_KIT_MAX_POISON];
    int64_t outputs, pages;
    int has_ref;
    int has_checksums;
    uint64_t cs_state, cs_table, cs_weight, cs_cos_sin;
    int num_nonfinite;
    int64_t nonfinite[KVC_KIT_MAX_NONFINITE];
} kvc_golden_case;

/** Parse <golden_dir>/cases.tsv.  @return count (>= 0) or -1 (message on stderr). */
int kvc_kit_load_index(const char *golden_dir, kvc_golden_case **cases);

/** Read a whole file.  @return malloc'ed bytes or NULL. */
uint8_t *kvc_kit_read_file(const char *path, size_t *len);

/** Copy slot `slot` of args' kv_cache as a golden row: its payload, then its
 * scale bytes (584 bytes, or 132 / 68 for the indexer formats: kvc_slot_bytes). */
void kvc_kit_slot_row(const kvc_args *a, int64_t slot, uint8_t row[KVC_SLOT_BYTES]);
/**
 * The case of `spec` (kvc_kit_parse_spec syntax) generated into *c and run
 * on the CPU backend; *cpu_rows (malloc'd, num_outputs x 584 bytes) its
 * output rows.  @return 0, or -1 with msg filled.
 */
int kvc_kit_case_with_cpu(const char *spec, kvc_case *c, uint8_t **cpu_rows, char *msg, size_t msglen);
/** The slot rows of every output of case c (laid out as `a`) from kv_cache bytes `kv`, in output order:
 * rows[num_outputs][584]. */
void kvc_kit_output_rows(const kvc_args *a, const kvc_case *c, const uint8_t *kv, uint8_t *rows);

/** Verify the four input checksums of a generated case.  @return 0 ok, else 1 (msg filled). */
int kvc_kit_check_inputs(const kvc_golden_case *g, const kvc_case *c, char *msg, size_t msglen);

/**
 * SPEC 4 (INT8) / 7 (FP8) conformance of `ours` against the reference's rows
 * (n rows of 584 bytes), or SPEC 9's for the indexer formats (n rows of 132
 * / 68 bytes); fmt: the rows' kvc_nope_format.  @return 0 if it conforms,
 * else 1 with msg filled.  *differ receives the number of NOPE (indexer:
 * key) values that differ.
 */
int kvc_kit_conforms(const uint8_t *ours, const uint8_t *ref, int64_t n, int fmt, int64_t *differ, char *msg,
                     size_t msglen);

/** A slot format's name (int8, fp8, indexer_fp8, indexer_mxfp4) to its value.  @return 0, or -1 for another name. */
int kvc_kit_parse_format(const char *s, kvc_nope_format *f);
/** The name of a slot format ("?" for a value out of range). */
const char *kvc_kit_format_name(kvc_nope_format f);

/** Parse "reqs=8,tokens=131072,C=128,block=8,layout=shuffle,..." into params (format=indexer_* sets head
 * width 128; rotate=0|1, bias=0|1, state=f32|bf16: SPEC 9, 10).  @return 0 or -1. */
int kvc_kit_parse_spec(const char *spec, kvc_case_params *p, char *msg, size_t msglen);

/** A device's memory, for the runners below (kvc_kit_cuda.cu, kvc_kit_opencl.c). */
typedef struct kvc_kit_mem {
    /* allocate max(bytes, 16) bytes, copy src in when it is not NULL; 0 = done */
    int (*put)(const void *src, size_t bytes, void **handle, char *err, size_t errlen);
    /* copy bytes back to dst (blocking); 0 = done */
    int (*get)(void *handle, void *dst, size_t bytes);
    void (*drop)(void *handle);
} kvc_kit_mem;
/** Host args copied to a device: `d` points at the device copies. */
/* The tensors of kvc_args, in its order: score_bias (optional: NULL where
 * the host's is) is KVC_KIT_BIAS, kv_cache the last. */
#define KVC_KIT_TENSORS 10
#define KVC_KIT_BIAS 8
#define KVC_KIT_KV 9
typedef struct kvc_kit_dev_args {
    kvc_args d;
    void *h[KVC_KIT_TENSORS]; /* kvc_kit_tensors order */
    size_t kv_bytes;
} kvc_kit_dev_args;
/** Copy every tensor of host args to the device.  @return 0, or -1 with err filled. */
int kvc_kit_upload(const kvc_kit_mem *m, const kvc_args *host, kvc_kit_dev_args *x, char *err, size_t errlen);
void kvc_kit_release(const kvc_kit_mem *m, kvc_kit_dev_args *x);
/**
 * Upload n argument sets, run them with `ex` (a GPU backend and its stream)
 * in one kvc_compress_many call, read the status word (its counts into rep),
 * copy each kv_cache back into a[i].kv_cache.  @return the call's status, or
 * the first device-side error's.
 */
kvc_status kvc_kit_device_run(const kvc_kit_mem *m, const kvc_exec *ex, const kvc_args *a, int n, kvc_report *rep,
                              kvc_device_status *ds);

/**
 * Run host-resident args on the CUDA backend: copy every tensor to the
 * device, run, read the status word, copy kv_cache back.  Returns the first
 * device-side error as a status.  Only with KVC_KIT_WITH_CUDA.  _many: n
 * sets in one kvc_compress_many call.
 */
kvc_status kvc_kit_cuda_run(const kvc_args *a, kvc_report *rep, kvc_device_status *ds);
kvc_status kvc_kit_cuda_run_many(const kvc_args *a, int n, kvc_report *rep, kvc_device_status *ds);
/** The same on the kit's OpenCL device (KVC_OPENCL_DEVICE=N picks one).  Only with KVC_KIT_WITH_OPENCL. */
kvc_status kvc_kit_opencl_run(const kvc_args *a, kvc_report *rep, kvc_device_status *ds);
kvc_status kvc_kit_opencl_run_many(const kvc_args *a, int n, kvc_report *rep, kvc_device_status *ds);
/** The kit's device memory (for the benchmark code, tools/bench_*.c*). */
extern const kvc_kit_mem kvc_kit_cuda_mem, kvc_kit_opencl_mem;
/** The kit's OpenCL profiling queue (a cl_command_queue), created on first use; NULL without a device. */
void *kvc_kit_opencl_queue(void);
/* The kit's queue with its context and device (cl_context, cl_device_id);
 * NULL where no OpenCL device is usable by the library. */
void *kvc_kit_opencl_queue_of(void **ctx, void **dev);
/* kvc_kit_opencl_mem's buffers and reads in another context and queue from
 * now on (cl_context, cl_command_queue); NULL, NULL: the kit's own again. */
void kvc_kit_opencl_use(void *ctx, void *queue);

/**
 * The KVC_KIT_TENSORS tensors of `a` in kvc_args order (state_cache,
 * token_to_req, positions, kv_slot_mapping, boundary_token_indices,
 * block_table, rms_norm_weight, cos_sin_cache, score_bias, kv_cache) with
 * the bytes each spans, as its sizes, strides and element types declare (0
 * strides = contiguous; an absent score_bias: NULL, 0 bytes).  For copying
 * host args to a device.
 */
void kvc_kit_tensors(const kvc_args *a, const void *ptrs[KVC_KIT_TENSORS], size_t bytes[KVC_KIT_TENSORS]);
/** Point the tensor fields of `a` (same order) at ptrs (device pointers or cl_mem handles). */
void kvc_kit_rebind(kvc_args *a, void *const ptrs[KVC_KIT_TENSORS]);

/**
 * The CPU floor of SPEC 6: one read of buf[0, words) with `threads` threads
 * (< 1: all cores; at most 256), each summing its contiguous share; the sums
 * go to *sink so that the reads stay.  @return seconds (monotonic clock).
 */
double kvc_kit_cpu_read(const uint64_t *buf, size_t words, int threads, uint64_t *sink);
/** Run fn(jobs + i * size) for i = 0 .. n - 1 (n <= 256) at once, i = 0 on
 * the calling thread (one that cannot start runs after the others, on the
 * caller); @return seconds from the first start to the last end. */
double kvc_kit_run_threads(void *(*fn)(void *), void *jobs, size_t size, int n);

/** The conformance matrix (kvc_conform.c): what to run it on. */
typedef struct kvc_conform_opts {
    kvc_backend backend;  /* CPU, CUDA or OpenCL: the backend under test           */
    int threads;          /* CPU under test: worker threads (the reference: all)    */
    const char *golden;   /* golden data folder (manifest + cases.tsv), or NULL     */
    int nrandom;          /* random shapes (the verify set), 0 = none               */
    int paths;            /* 1: also the GPU-path shapes; 2: only those whose      */
                          /* OpenCL kernels differ between its two modes (not the   */
                          /* slice kernels' C = 128 / 256 / 512 windows, the        */
                          /* indexer's or the one-segment windows with a bias)      */
    FILE *log;            /* one line per case; NULL: failures only, to stderr      */
    int large;            /* 1: also the shapes of more outputs than the GPUs'      */
                          /* decode-sized kernels take (thousands: not for a        */
                          /* simulator)                                             */
} kvc_conform_opts;
typedef struct kvc_conform_result {
    int passed, failed;
} kvc_conform_result;
/**
 * Every case of the matrix through o->backend, byte for byte against the CPU
 * backend on identically poisoned KV caches (golden cases also against their
 * canonical bytes and the reference's SPEC 4 / 7 conformance).
 * @return 0, or -1 when o->golden holds no golden index (message on stderr).
 */
int kvc_kit_conform(const kvc_conform_opts *o, kvc_conform_result *r);

/** Fill `n` bytes with a deterministic non-zero pattern (poison). */
void kvc_kit_poison(uint8_t *p, size_t n, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
