/*
 * kvcompress.h -- public API of libkvcompress.
 *
 * One operation: the DeepSeek-V4-style KV-cache compression step.  For every
 * output (a "boundary" token that closes a window of C = compress_ratio
 * tokens) the C rows of a paged fp32 state cache are reduced by a
 * per-dimension softmax-weighted sum, RMS-normalised, quantised and written as
 * one 584-byte slot of a paged KV cache.  The byte contract is docs/CONTRACT.md
 * (docs/CONTRACT.md in the source tree); every backend produces identical bytes.
 *
 * Conventions
 *  - Every tensor pointer is aligned to its element size (else
 *    KVC_ERROR_BAD_SHAPE).
 *  - All sizes, strides and indices are int64_t.  Strides are in ELEMENTS of
 *    the tensor's own dtype (bytes for kv_cache).  A stride of 0 means "the
 *    contiguous stride" (see kvc_args).
 *  - Functions return a kvc_status.  On error, kvc_last_error_message() gives
 *    a message for the calling thread naming the argument, index and value.
 *  - Nothing in the library exits, aborts or asserts.
 *
 * Thread safety: every function may be called concurrently from several
 * threads; error messages are per thread.  CUDA backend: the workspace and
 * the library's status word belong to the (device, stream) pair of a call,
 * so calls in flight on different streams are independent; calls on one
 * stream are ordered by the stream.  (A CUDA graph captured on a stream
 * keeps using that stream's workspace: do not replay it concurrently with
 * other work on the stream it was captured on.)  OpenCL backend: the same
 * per command queue.  Several threads may also call at once on one stream
 * or queue: a call enqueues its commands under that workspace's lock, so
 * two calls' commands never interleave (they run one after the other, in
 * the order the calls took the lock).
 */
#ifndef KVCOMPRESS_H
#define KVCOMPRESS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */
/* ------------------------------------------------------------------------ */
/* The project's one version source: CMakeLists.txt and pyproject.toml read
 * these three lines. */
#define KVC_VERSION_MAJOR 0
#define KVC_VERSION_MINOR 2
#define KVC_VERSION_PATCH 0
#define KVC_VERSION_NUMBER \
    (KVC_VERSION_MAJOR * 10000 + KVC_VERSION_MINOR * 100 + KVC_VERSION_PATCH)
#define KVC_VERSION_STR_(x) #x
#define KVC_VERSION_STR(x) KVC_VERSION_STR_(x)
#define KVC_VERSION_STRING \
    KVC_VERSION_STR(KVC_VERSION_MAJOR) "." KVC_VERSION_STR(KVC_VERSION_MINOR) "." KVC_VERSION_STR(KVC_VERSION_PATCH)

/* Bytes of one compressed slot of the main compressor (head width 512):
 * 448 NOPE + 128 RoPE + 8 scale bytes.  The indexer's slots (head width
 * 128) are 132 or 68 bytes: kvc_slot_bytes(). */
#define KVC_SLOT_BYTES 584
#define KVC_PAYLOAD_BYTES 576
#define KVC_SCALE_BYTES 8
#define KVC_HEAD_DIM 512
#define KVC_NOPE_DIM 448
#define KVC_ROPE_DIM 64

#if defined(_WIN32) && defined(KVC_BUILDING_SHARED)
#define KVC_API __declspec(dllexport)
#elif defined(__GNUC__)
#define KVC_API __attribute__((visibility("default")))
#else
#define KVC_API
#endif

/**
 * kvc_version_number() -- runtime version, KVC_VERSION_NUMBER of the library
 * actually linked.  @return e.g. 100 for 0.1.0.
 */
KVC_API unsigned kvc_version_number(void);
/** kvc_version_string() -- @return "MAJOR.MINOR.PATCH" of the linked library. */
KVC_API const char *kvc_version_string(void);

/* ------------------------------------------------------------------------ */
/* Status codes.  Values are pinned: they never change between versions.     */
/* ------------------------------------------------------------------------ */
typedef enum kvc_status {
    KVC_OK = 0,
    KVC_ERROR_GENERIC = 1,              /* unexpected internal failure         */
    KVC_ERROR_NULL_POINTER = 2,         /* a required pointer is NULL          */
    KVC_ERROR_BAD_SHAPE = 3,            /* a size or stride is out of range    */
    KVC_ERROR_BAD_PARAMETER = 4,        /* ratio, block size, eps, enum value  */
    KVC_ERROR_INDEX_OUT_OF_RANGE = 5,   /* an index VALUE inside a tensor      */
    KVC_ERROR_DUPLICATE_SLOT = 6,       /* two outputs write the same slot     */
    KVC_ERROR_BACKEND_UNAVAILABLE = 7,  /* backend not compiled in / no device */
    KVC_ERROR_OUT_OF_MEMORY = 8,        /* host or device allocation failed    */
    KVC_ERROR_DEVICE = 9,               /* CUDA / OpenCL runtime error         */
    KVC_ERROR_ALIASING = 10,            /* kv_cache overlaps an input          */
    KVC_ERROR_MAX_CODE = 11             /* not a status; one past the last     */
} kvc_status;

/**
 * kvc_status_string() -- short fixed name of a status ("KVC_ERROR_BAD_SHAPE").
 * @return a static string; "unknown kvc_status" for values out of range.
 */
KVC_API const char *kvc_status_string(kvc_status status);

/**
 * kvc_last_error_message() -- detailed message of the last error raised on
 * the CALLING THREAD, e.g.
 *   "positions[boundary_token_indices[17]] = 3 < compress_ratio - 1 = 127".
 * @return a thread-local string, valid until the next library call on this
 *         thread; "" when the last call succeeded.
 */
KVC_API const char *kvc_last_error_message(void);

/* ------------------------------------------------------------------------ */
/* Engine format settings (docs/CONTRACT.md section 7).  Zero = the statement's format.  */
/* ------------------------------------------------------------------------ */
/* The slot format (the field kvc_args.nope_format; Python: kv_format).  The
 * first two are head width 512's 584-byte slots, the last two head width
 * 128's (SPEC 9); any other pair is refused (KVC_ERROR_BAD_PARAMETER). */
typedef enum kvc_nope_format {
    KVC_NOPE_INT8 = 0,      /* 448 int8, power-of-two scale per 64 dims      */
    KVC_NOPE_FP8_E4M3 = 1,  /* 448 e4m3fn bytes, same scale bytes            */
    KVC_INDEXER_FP8 = 2,    /* head width 128: 128 e4m3fn values, then (after
                               the page's S x 128 value bytes) one binary32
                               power-of-two scale: 132 bytes a slot          */
    KVC_INDEXER_MXFP4 = 3   /* head width 128: 64 bytes of e2m1 pairs, then
                               4 UE8M0 scale bytes (one per 32 dims): 68
                               bytes a slot                                  */
} kvc_nope_format;
typedef kvc_nope_format kvc_kv_format;

/* Rotation of the indexer's keys before quantisation (head width 128). */
typedef enum kvc_rotation {
    KVC_ROTATE_OFF = 0,      /* vLLM's indexer                              */
    KVC_ROTATE_HADAMARD = 1  /* Walsh-Hadamard / sqrt(128): DeepSeek's
                                reference, TensorRT-LLM (SPEC 9)            */
} kvc_rotation;

/* Element type of state_cache (SPEC 10). */
typedef enum kvc_state_dtype {
    KVC_STATE_FLOAT32 = 0,
    KVC_STATE_BFLOAT16 = 1   /* raw bf16 bits, widened exactly when read    */
} kvc_state_dtype;

typedef enum kvc_overlap {
    KVC_OVERLAP_OFF = 0,   /* window = the C rows ending at the boundary     */
    KVC_OVERLAP_ON = 1     /* 2C half-rows, state row 2048 floats (CSA, C=4) */
} kvc_overlap;

typedef enum kvc_cos_sin_layout {
    KVC_COS_SIN_SPLIT = 0,       /* row: 32 cos then 32 sin                  */
    KVC_COS_SIN_INTERLEAVED = 1  /* row: cos_0 sin_0 cos_1 sin_1 ...         */
} kvc_cos_sin_layout;

/* Numerics mode (docs/CONTRACT.md section 8).  Zero = EXACT. */
typedef enum kvc_numerics {
    KVC_NUMERICS_EXACT = 0, /* the canonical arithmetic: the CPU's bytes on
                               every backend                                 */
    KVC_NUMERICS_FAST = 1   /* opt-in: a GPU backend may use its hardware
                               exp and fused multiply-adds in the window
                               reduction (same segments, tree order,
                               finaliser and non-finite rule).  Bytes conform
                               to the reference and are deterministic and
                               batch-invariant on one GPU model and library
                               version, but may differ from the CPU's.  A
                               path without a faster form computes EXACT
                               bytes; kvc_report.numerics says which ran.   */
} kvc_numerics;

/* ------------------------------------------------------------------------ */
/* Arguments: every tensor of the operation, as pointer + sizes + strides.   */
/* Initialise with kvc_args_init(), then set what you have.                  */
/* ------------------------------------------------------------------------ */
typedef struct kvc_args {
    /* state_cache: [num_blocks][block_size][state_width] float32 (or bf16
     * bits, state_dtype; the pointer then holds uint16_t elements).
     * state_width must be 2 x head_dim (overlap off: 1024) or 4 x head_dim
     * (overlap on: 2048); the last dimension is contiguous.  Strides in
     * elements; 0 = contiguous (stride_token = state_width, stride_block =
     * block_size * stride_token). */
    const float *state_cache;
    int64_t num_blocks;
    int64_t block_size;
    int64_t state_width;
    int64_t state_stride_block;
    int64_t state_stride_token;

    /* token_to_req: [num_tokens] int32, contiguous.  Request of each token. */
    const int32_t *token_to_req;
    /* positions: [num_tokens] int64, contiguous.  Position inside request.  */
    const int64_t *positions;
    /* kv_slot_mapping: [num_tokens] int64, contiguous.  Destination slot of
     * each token; read at boundary tokens only; < 0 = padding (skipped).    */
    const int64_t *kv_slot_mapping;
    int64_t num_tokens;

    /* boundary_token_indices: [num_outputs] int64, contiguous.  One output
     * per entry, in any order.                                              */
    const int64_t *boundary_token_indices;
    int64_t num_outputs;

    /* block_table: [num_reqs][blocks_per_req] int32; row stride in int32
     * elements, 0 = blocks_per_req.  Logical -> physical state block.       */
    const int32_t *block_table;
    int64_t num_reqs;
    int64_t blocks_per_req;
    int64_t block_table_stride;

    /* rms_norm_weight: [head_dim] bfloat16, raw bits, contiguous.           */
    const uint16_t *rms_norm_weight;

    /* cos_sin_cache: [max_pos][64] float32; row stride in floats, 0 = 64.   */
    const float *cos_sin_cache;
    int64_t max_pos;
    int64_t cos_sin_stride;

    /* kv_cache: [num_pages][page_stride] uint8, written IN PLACE: only the
     * bytes of each written slot change.  page_stride >= slot bytes (584,
     * or 132 / 68 for the indexer formats) * kv_block_size; 0 = exactly
     * that.                                                                */
    uint8_t *kv_cache;
    int64_t num_pages;
    int64_t page_stride;
    int64_t kv_block_size;   /* slots per page, >= 1 (statement: 64)      */

    int64_t compress_ratio;  /* C >= 1                                      */
    float rms_norm_eps;      /* finite, >= 0; kvc_args_init sets 1e-6       */

    kvc_nope_format nope_format;
    kvc_overlap overlap;
    kvc_cos_sin_layout cos_sin_layout;
    kvc_numerics numerics;   /* EXACT (default) or FAST                     */

    /* DeepSeek-V4's indexer compressor and the engines' state conventions
     * (SPEC 9, 10).  Zero values are the above.                            */
    int64_t head_dim;        /* D: 0 or 512 (main compressor, INT8 / FP8
                                slots), or 128 (indexer, INDEXER_* slots)   */
    kvc_rotation rotate;     /* head width 128 only                          */
    kvc_state_dtype state_dtype;
    /* score_bias: optional [compress_ratio][state_width / 2] float32, last
     * dimension contiguous, row stride in floats (0 = state_width / 2).
     * Added to every score a window row contributes: score + bias[t mod C][k]
     * (t: the row's position, k: the score's index in the row's score half).
     * NULL = scores as stored.  Must not overlap kv_cache.                  */
    const float *score_bias;
    int64_t score_bias_stride;
} kvc_args;

/**
 * kvc_args_init() -- zero every field, then set the defaults: state_width
 * 1024, kv_block_size 64, rms_norm_eps 1e-6, INT8, overlap off, SPLIT,
 * head width 512, float32 state, no rotation, no score bias.
 * @param args  struct to initialise (NULL is ignored).
 */
KVC_API void kvc_args_init(kvc_args *args);

/**
 * kvc_slot_bytes() -- bytes of one slot of a format: 584 (INT8, FP8), 132
 * (INDEXER_FP8), 68 (INDEXER_MXFP4).  @return 0 for a value that is not a
 * kvc_nope_format.
 */
KVC_API int64_t kvc_slot_bytes(kvc_nope_format format);

/* ------------------------------------------------------------------------ */
/* Execution                                                                 */
/* ------------------------------------------------------------------------ */
typedef enum kvc_backend {
    KVC_BACKEND_AUTO = 0,   /* CUDA if state_cache is CUDA device memory,
                               else CPU                                     */
    KVC_BACKEND_CPU = 1,
    KVC_BACKEND_CUDA = 2,
    KVC_BACKEND_OPENCL = 3
} kvc_backend;

/**
 * Device-side status word (GPU backends).  Lives in device memory (the
 * library's own is one per CUDA stream); the
 * library resets it at the start of every call (in stream order) and the
 * kernel records the first device-side index error into it.  Read it with
 * kvc_cuda_read_status() after the stream has reached the call.
 */
typedef struct kvc_device_status {
    int32_t status;          /* kvc_status of the first recorded error, 0 = none */
    int32_t check;           /* which check failed, see kvc_check_string()      */
    int64_t output;          /* output index o of that error                   */
    int64_t value;           /* the offending value                            */
    int64_t outputs_written;
    int64_t outputs_padding;
    int64_t outputs_nonfinite;
    int64_t outputs_invalid; /* outputs skipped because of an index error     */
} kvc_device_status;

typedef struct kvc_exec {
    kvc_backend backend;
    int num_threads;     /* CPU: worker threads (at most one per output);
                            0 = up to all online cores, one per 2 MiB of
                            window rows at least (a thread's start costs
                            about what reducing that much does)             */
    void *stream;        /* CUDA: cudaStream_t (NULL = legacy default stream);
                            OpenCL: cl_command_queue (required); then every
                            tensor pointer of kvc_args holds a cl_mem (cast),
                            the tensor at offset 0 of that buffer            */
    int device;          /* CUDA device ordinal; -1 = the device that holds
                            the tensors (the current one for host pointers).
                            Tensors on another device are refused; the
                            caller's current device is left as it was       */
    kvc_device_status *device_status; /* GPU: optional caller-owned device
                            memory for the status word (CUDA: >= 64 bytes of
                            the call's device; OpenCL: a cl_mem of >= 40
                            bytes), apart from every tensor (else refused:
                            KVC_ERROR_BAD_PARAMETER / _BAD_SHAPE /
                            _ALIASING); NULL = the library's own word; the
                            CPU backend ignores it                          */
} kvc_exec;

/** kvc_exec_init() -- AUTO backend, all threads, default stream, device -1.
 * num_threads must be in [0, 1024] (else KVC_ERROR_BAD_PARAMETER); a CUDA
 * backend without a device or driver is KVC_ERROR_BACKEND_UNAVAILABLE. */
KVC_API void kvc_exec_init(kvc_exec *exec);

/** What one call did. */
typedef struct kvc_report {
    int64_t outputs_written;   /* slots written (finite or non-finite)      */
    int64_t outputs_padding;   /* outputs skipped because the slot was < 0  */
    int64_t outputs_nonfinite; /* slots written as non-finite (NaN slot)    */
    int device_async;          /* 1: GPU backend, counts above are -1; read
                                  them with kvc_cuda_read_status()          */
    kvc_numerics numerics;     /* the mode the call computed: FAST only where
                                  the chosen kernel has a fast form         */
} kvc_report;

/**
 * kvc_compress() -- run the operation.
 *
 * @param args    the tensors; validated first (see kvc_validate()).
 * @param exec    where to run; NULL = kvc_exec_init() defaults.
 * @param report  optional (NULL allowed): what was written.
 * @return KVC_OK, or an error status (message: kvc_last_error_message()).
 *
 * CPU backend: every check runs before anything is written; on error
 * kv_cache is untouched.  Outputs sharing a slot are refused.
 * GPU backends: shapes and strides are checked on the host; index values
 * are checked by the kernel, which skips a bad output and records the first
 * error in the device status word; all other outputs are still written.
 * Outputs sharing a slot are not detected on the GPU: the slot then holds
 * the bytes of one of them (which one is unspecified) -- or a mix of
 * them, so callers must not rely on it.
 */
KVC_API kvc_status kvc_compress(const kvc_args *args, const kvc_exec *exec,
                                kvc_report *report);

/** The most argument sets one kvc_compress_many() call takes. */
#define KVC_MANY_MAX 8

/**
 * kvc_compress_many() -- n argument sets in one call, e.g. the two
 * compressors of a DeepSeek-V4 CSA layer (the main one and the indexer's):
 * the same bytes as n kvc_compress() calls, on one backend and stream.  On
 * CUDA, sets of one-segment windows (C4 with overlap, C <= 8) of one
 * numerics mode and state dtype run as one kernel launch -- a decode step's
 * pair -- and other sets one launch after another; every call is
 * graph-capturable.
 *
 * @param args    n argument sets, each validated as kvc_compress() does; a
 *                message names the set ("args[1]: ...").  No set may write
 *                where another set reads or writes (KVC_ERROR_ALIASING), and
 *                KVC_BACKEND_AUTO must pick the same backend for every set.
 * @param n       0 .. KVC_MANY_MAX (0: nothing to do).
 * @param exec    as for kvc_compress().
 * @param report  optional: the sums over the sets (numerics: FAST only where
 *                every set computed FAST).
 * @return KVC_OK or an error status.  CPU backend: every set is checked
 * before anything is written.  GPU backends: one status word for the call,
 * its counts summed over the sets, an error's `output` numbered across the
 * sets in order (set i's output o is num_outputs of the sets before it + o).
 */
KVC_API kvc_status kvc_compress_many(const kvc_args *args, int n, const kvc_exec *exec, kvc_report *report);

/**
 * kvc_validate() -- every check of the contract on host-resident arguments
 * (shapes, strides, parameters and every index value), writing nothing.
 * @return KVC_OK or the status of the first failing check.
 * @note reads the index tensors: they must be host memory.
 */
KVC_API kvc_status kvc_validate(const kvc_args *args);

/** Names the device-side check numbers stored in kvc_device_status.check. */
KVC_API const char *kvc_check_string(int check);

/**
 * kvc_backend_available() -- @return 1 if the backend is compiled in and has
 * a usable device now, else 0.  AUTO and CPU always return 1.
 */
KVC_API int kvc_backend_available(kvc_backend backend);

/**
 * kvc_cpu_default_threads() -- @return the most threads num_threads=0 uses:
 * the processors online when it was first called (read once per process),
 * clamped to [1, 1024].
 */
KVC_API int kvc_cpu_default_threads(void);

/**
 * kvc_read_status() -- the device status word of the last call of a GPU
 * backend (exec->backend: CUDA or OpenCL) on exec's stream / queue, or
 * exec->device_status if set; waits for that stream / queue.  The backend
 * headers name it per backend: kvc_cuda_read_status() in kvcompress_cuda.h,
 * kvc_opencl_read_status() in kvcompress_opencl.h.
 * @return KVC_OK; KVC_ERROR_BACKEND_UNAVAILABLE for a backend that is not
 * compiled in or has no status word (CPU: its report is complete); or a
 * device error.
 */
KVC_API kvc_status kvc_read_status(const kvc_exec *exec, kvc_device_status *out);

#ifdef __cplusplus
}
#endif
#endif /* KVCOMPRESS_H */
