/*
 * cuda_backend.cu -- the CUDA backend.  Same bytes as the CPU backend: every
 * float operation goes through kvc_canon.h, which uses the _rn intrinsics
 * (never contracted) on the device.
 *
 * Work decomposition (one launch per call):
 *   - DG = 512 / DPT "dimension groups" of DPT consecutive dims cover the 512
 *     dims; a thread loads DPT values and DPT scores per row (one 8-byte load
 *     each for DPT = 2).  Few registers per thread -> many resident warps:
 *     the kernel is latency-bound, so occupancy is what keeps HBM busy.
 *   - The window's S = ceil(rows / 8) segments are cut into CHUNKS that are
 *     complete, aligned subtrees of the canonical tree: floor(S / CH) chunks
 *     of CH segments, then one chunk per set bit of S % CH (descending).
 *   - A CTA (DG x L threads) reduces one chunk of one output: it first
 *     resolves the chunk's row addresses into shared memory (one thread per
 *     row, which also checks that row's physical block), then lane l of a
 *     dimension group reduces a complete subtree of segments in registers
 *     (full, aligned segments: one branch-free body, subtree_full), and the
 *     L lane states merge in tree order through shared memory.
 *   - With one chunk per output the CTA finalises directly; otherwise chunk
 *     states go to a workspace and the last CTA of the output (ticket
 *     counter) merges them in canonical order and finalises.
 *   - Index values are checked on the device (kvc_check.h); a bad output is
 *     skipped and the first error is recorded in the status word.
 *
 * Calls of 16, 32 or 64 full segments (C = 128, 256, 512) without overlap
 * go to the slice kernels (cuda_slice.cuh): one CTA per (output, 16-segment
 * chunk, 64-dim slice) that leaves its slice record or chunk state in the
 * workspace, then a finisher per output (programmatic dependent launch), no
 * CTA waiting for another.
 *
 * Windows of one segment (C <= 8, or C <= 4 with overlap) go to a second
 * kernel, compress_small_kernel: a CTA takes K outputs (K sized for one full
 * wave), resolves all their checks and rows in parallel, then reduces and
 * finalises them in turn with the next output's loads in flight.  At head
 * width 128 (SPEC 9) such windows go to the indexer kernel
 * (cuda_indexer.cuh: a warp per output); other head-128 windows, and a
 * bf16 state or score bias where no tuned kernel takes the window, to the
 * general kernel (kvc_general.h).  Calls of such windows whose outputs fit
 * one wave of an output a CTA (decode steps) go to segment1_kernel
 * (cuda_decode.cuh: a thread a dim, either head width) instead.
 *
 * Files: the device code is cuda_kernels.cuh, compiled here once per DPT
 * and numerics mode (namespaces kvc_cuda_d1, kvc_cuda_d2; FAST, SPEC 8:
 * kvc_cuda_d1f, kvc_cuda_d2f); this file holds the host side.
 *
 * Streams: the workspace and the library's status word belong to the
 * (device, stream) pair of the call, so calls on different streams never
 * share mutable memory (SPEC 2.6); they live in a registry
 * (kvc_registry.h) that frees idle ones past KVC_CUDA_STREAMS_KEPT.  Every
 * call checks its device tensors against their allocations and a caller's
 * status word (check_device_memory).
 * Per call the host picks: the kernel (one-segment, or compress_kernel<KF>
 * whose only reduction body is KF full segments per lane, or the generic
 * compress_kernel<0>), the chunk size (~one wave of CTAs), and the dims per
 * thread (1 for 16-segment chunks in <= 2 waves, else 2).
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_canon.h"
#include "kvc_check.h"
#include "kvc_general.h"
#include "kvc_backend.h"
#include "kvc_registry.h"

#include "cuda_tuning.h"

/* state loads: streaming (evict-first); __ldg measured no better */
#define KVC_LD(p) __ldcs(p)

/* The status word's `status` where it heads a call's per-CTA records (its
 * `value`: how many) -- never a kvc_status. */
#define KVC_CUDA_RECORDS (-0x4B5643)

/* Per-launch constants (one struct, passed by value). */
struct launch_params {
    kvc_args a;                 /* resolved args (device pointers)               */
    kvc_plan pl;                /* rows, segments, chunking, small_k, vec        */
    kvc_device_status *status;  /* device status word (zeroed before the call, or a
                                   header of the records below)                   */
    kvc_device_status *records; /* [CTAs] each CTA's status, summed by cuda_read_status
                                   (the indexer, one-segment, decode and fused
                                   kernels of a call on the library's word); else NULL */
    kvc_device_status *status_out; /* a call of one output on segment1_kernel: the
                                   status word, written whole by its thread 0 (no
                                   memset before it); else NULL                   */
    unsigned *tickets;          /* [num_outputs] arrival counters (zeroed)       */
    float *chunk_states;        /* [num_outputs][nchunk][3][512]; slice kernels at C = 128: [num_outputs][SLICE_REC] */
    long long *slice_bad;       /* slice kernels: [num_outputs][nchunk][8] bad-block words */
    int bs_shift;               /* slice kernels: log2(block_size) for a power of two, else -1 */
    long long ahead;            /* slice kernels: outputs per resident wave of CTAs (the index prefetch's distance) */
    int lanes;                  /* L                                             */
    int uniform;                /* all chunks full, nchunk a power of 2 <= kTreeMax L */
    int fast;                   /* vec and no overlap: straight-line full segments */
};

/* kvc_compress_many's sets in one launch: set s takes CTAs end[s - 1] ..
 * end[s] - 1 (cuda_kernels.cuh's segment1_many_kernel). */
struct many_params {
    launch_params p[KVC_MANY_MAX];
    unsigned end[KVC_MANY_MAX];
};
static_assert(sizeof(many_params) <= 32764, "kernel parameters");

/* The device code, once per dims-per-thread and numerics mode (cuda_kernels.cuh). */
namespace kvc_cuda_d1 {
#define DPT 1
#define FASTNUM 0
#include "cuda_kernels.cuh"
#undef FASTNUM
#undef DPT
} // namespace kvc_cuda_d1
namespace kvc_cuda_d2 {
#define DPT 2
#define FASTNUM 0
#include "cuda_kernels.cuh"
#undef FASTNUM
#undef DPT
} // namespace kvc_cuda_d2
namespace kvc_cuda_d1f {
#define DPT 1
#define FASTNUM 1
#include "cuda_kernels.cuh"
#undef FASTNUM
#undef DPT
} // namespace kvc_cuda_d1f
namespace kvc_cuda_d2f {
#define DPT 2
#define FASTNUM 1
#include "cuda_kernels.cuh"
#undef FASTNUM
#undef DPT
} // namespace kvc_cuda_d2f
namespace ks = kvc_cuda_d2; /* the one-segment kernel's constants */

/* The general kernel (kvc_general.h): head width 128, a bf16 state or a
 * score bias.  A CTA of P.pl.small_k x head_dim = 512 threads for
 * P.pl.small_k outputs (4 at head width 128, else 1); EXACT or FAST.  The
 * threads of a skipped output stay for the CTA's barriers and write
 * nothing.  Its body, CTA number cta of set P: */
__device__ __forceinline__ void general_body(const launch_params &P, unsigned cta, kvc_gen_scratch *scs) {
    const kvc_args &a = P.a;
    const kvc_shape sh = kvc_shape_of(&a);
    const int D = (int)a.head_dim, k = threadIdx.x / D, d = threadIdx.x % D;
    kvc_gen_scratch *sc = &scs[k];
    const long long o = (long long)cta * P.pl.small_k + k;
    kvc_out_info inf;
    inf.r = inf.p = inf.pc = inf.slot = 0;
    const int live =
        o < a.num_outputs && !ks::skip_output(P, P.status, kvc_check_output(&a, o, &inf, 0), o, inf, d == 0);
    if (d == 0) sc->bad_row = 0;
    __syncthreads();
    const float c[1] = {live ? kvc_gen_reduce(&sh, a.state_cache, a.block_table + inf.r * a.block_table_stride,
                                              a.score_bias, inf.p, d, a.numerics == KVC_NUMERICS_FAST, sc)
                             : 0.0f};
    __syncthreads();
    const int ok = live && !sc->bad_row;
    if (live && !ok && d == 0) {
        ks::record_error(P, P.status, KVC_CHECK_PHYSICAL_BLOCK, o, sc->bad_g);
        ks::count(&P.status->outputs_invalid);
    }
    ks::kv_slot at = {0, 0};
    if (ok) at = ks::slot_at(P, inf.slot);
    const int bad = kvc_gen_finalize(&sh, c, d, 1, ok, a.rms_norm_weight, a.cos_sin_cache + inf.pc * a.cos_sin_stride,
                                     a.kv_cache + at.po, a.kv_cache + at.so, sc);
    if (ok && d == 0) {
        ks::count(&P.status->outputs_written);
        if (bad) ks::count(&P.status->outputs_nonfinite);
    }
}
__global__ void __launch_bounds__(512) general_kernel(const launch_params P) {
    __shared__ kvc_gen_scratch scs[KVC_GEN_K_MAX];
    general_body(P, blockIdx.x, scs);
}

/* Every kernel this backend launches, one entry each: the reachable
 * (kernel, numerics, dims per thread, body) combinations and nothing else.
 * The main kernel compress_kernel<KF> has one reduction body of KF full
 * segments per lane (0: the generic one): with 1 dim per thread a call
 * takes it only for chunks of 16 full segments on one lane (KF 16), with 2
 * dims for chunks of 2-16 on two lanes (KF 1, 2, 4, 8); every other shape
 * runs the generic body.  The one-segment and slice kernels exist for 2
 * dims per thread; the slice kernels for 1, 2 or 4 chunks of 16 segments,
 * with the token stride 1024 compiled in or any. */
typedef void (*kernel_fn)(const launch_params);
struct main_kernel {
    int dpt, fast, kf;
    kernel_fn fn;
};
static const main_kernel kMainKernels[] = {
    {1, 0, 0, kvc_cuda_d1::compress_kernel<0>},   {1, 0, 16, kvc_cuda_d1::compress_kernel<16>},
    {1, 1, 0, kvc_cuda_d1f::compress_kernel<0>},  {1, 1, 16, kvc_cuda_d1f::compress_kernel<16>},
    {2, 0, 0, kvc_cuda_d2::compress_kernel<0>},   {2, 0, 1, kvc_cuda_d2::compress_kernel<1>},
    {2, 0, 2, kvc_cuda_d2::compress_kernel<2>},   {2, 0, 4, kvc_cuda_d2::compress_kernel<4>},
    {2, 0, 8, kvc_cuda_d2::compress_kernel<8>},   {2, 1, 0, kvc_cuda_d2f::compress_kernel<0>},
    {2, 1, 1, kvc_cuda_d2f::compress_kernel<1>},  {2, 1, 2, kvc_cuda_d2f::compress_kernel<2>},
    {2, 1, 4, kvc_cuda_d2f::compress_kernel<4>},  {2, 1, 8, kvc_cuda_d2f::compress_kernel<8>},
};
/* [fast][bf16][score bias] */
static const kernel_fn kSmallKernels[2][2][2] = {
    {{kvc_cuda_d2::compress_small_kernel<false, false>, kvc_cuda_d2::compress_small_kernel<false, true>},
     {kvc_cuda_d2::compress_small_kernel<true, false>, kvc_cuda_d2::compress_small_kernel<true, true>}},
    {{kvc_cuda_d2f::compress_small_kernel<false, false>, kvc_cuda_d2f::compress_small_kernel<false, true>},
     {kvc_cuda_d2f::compress_small_kernel<true, false>, kvc_cuda_d2f::compress_small_kernel<true, true>}}};
/* [fast][bf16] */
typedef void (*many_fn)(const many_params);
static const many_fn kManyKernels[2][2] = {
    {kvc_cuda_d2::segment1_many_kernel<false>, kvc_cuda_d2::segment1_many_kernel<true>},
    {kvc_cuda_d2f::segment1_many_kernel<false>, kvc_cuda_d2f::segment1_many_kernel<true>}};
/* [fast][bf16][score bias] */
#define KVC_IDX(ns, bf16) {ns::indexer_kernel<bf16, false>, ns::indexer_kernel<bf16, true>}
static const kernel_fn kIndexerKernels[2][2][2] = {{KVC_IDX(kvc_cuda_d2, false), KVC_IDX(kvc_cuda_d2, true)},
                                                   {KVC_IDX(kvc_cuda_d2f, false), KVC_IDX(kvc_cuda_d2f, true)}};
#undef KVC_IDX
/* [fast][head width 128][bf16][score bias] */
#define KVC_SEG1(ns, d) \
    {{ns::segment1_kernel<d, false, false>, ns::segment1_kernel<d, false, true>}, \
     {ns::segment1_kernel<d, true, false>, ns::segment1_kernel<d, true, true>}}
static const kernel_fn kSegment1Kernels[2][2][2][2] = {{KVC_SEG1(kvc_cuda_d2, 512), KVC_SEG1(kvc_cuda_d2, 128)},
                                                       {KVC_SEG1(kvc_cuda_d2f, 512), KVC_SEG1(kvc_cuda_d2f, 128)}};
#undef KVC_SEG1
/* [fast][log2 chunks][variant]: float32 state with any token stride or
 * 1024 (dense), the same with a bf16 state, then a score bias (any stride)
 * on float32 and bf16 states */
#define KVC_SLICE_NCH(ns, nch)                                                                                      \
    {ns::slice_kernel<nch, 0, false, false>, ns::slice_kernel<nch, 1024, false, false>,                           \
     ns::slice_kernel<nch, 0, true, false>,  ns::slice_kernel<nch, 1024, true, false>,                            \
     ns::slice_kernel<nch, 0, false, true>,  ns::slice_kernel<nch, 0, true, true>}
static const kernel_fn kSliceKernels[2][3][6] = {
    {KVC_SLICE_NCH(kvc_cuda_d2, 1), KVC_SLICE_NCH(kvc_cuda_d2, 2), KVC_SLICE_NCH(kvc_cuda_d2, 4)},
    {KVC_SLICE_NCH(kvc_cuda_d2f, 1), KVC_SLICE_NCH(kvc_cuda_d2f, 2), KVC_SLICE_NCH(kvc_cuda_d2f, 4)}};
#undef KVC_SLICE_NCH
static const kernel_fn kSliceFinish[2][3] = {
    {kvc_cuda_d2::slice_finish_kernel<1>, kvc_cuda_d2::slice_finish_kernel<2>, kvc_cuda_d2::slice_finish_kernel<4>},
    {kvc_cuda_d2f::slice_finish_kernel<1>, kvc_cuda_d2f::slice_finish_kernel<2>, kvc_cuda_d2f::slice_finish_kernel<4>}};

/* The main kernel for (dpt, fast, kf): its own body where the list has one, else the generic one. */
static kernel_fn main_kernel_for(int dpt, int fast, int kf) {
    kernel_fn generic = NULL;
    for (const main_kernel &k : kMainKernels) {
        if (k.dpt != dpt || k.fast != fast) continue;
        if (k.kf == kf) return k.fn;
        if (k.kf == 0) generic = k.fn;
    }
    return generic;
}

/* ---- host side --------------------------------------------------------- */

/* Workspace (status word, tickets, chunk states) per (device, stream), so
 * that calls on different streams never share mutable memory (SPEC 2.6).
 * cudaStreamPerThread names a different stream on every host thread: its
 * entries are keyed by the thread as well.  A call holds its entry's lock
 * from the workspace's growth to its last launch, so that the commands of
 * two threads' calls on one stream never interleave on the one workspace
 * (a finisher would poll records another call's finisher put back to
 * "empty": a hang).
 *
 * The entries form a list that grows with the streams a process calls on
 * and shrinks again: CUDA cannot tell that a stream was destroyed, so each
 * call records the entry's event after its launches, and once more than
 * KVC_CUDA_STREAMS_KEPT entries exist, a new stream's first call frees the
 * least recently used entries whose work is done (event complete, no call in
 * flight).  An entry used under a stream capture is never freed: a graph
 * captured there may replay on its workspace at any time. */
typedef struct device_ws {
    kvc_reg_entry reg;    /* key (device, stream, thread for cudaStreamPerThread); first member */
    int dev;
    pthread_mutex_t call; /* held by a call from the workspace's growth to its last launch */
    void *buf;
    size_t gen_cap;   /* bytes after the status word for the other kernels' tickets and chunk states */
    size_t slice_cap; /* bytes of the slice area after those: every word EMPTY (all bits set) between calls */
    void **old;       /* buffers the workspace outgrew (a graph may still use them), freed with the entry */
    int nold;
    int captured;     /* used under a stream capture: kept for good */
    cudaEvent_t done; /* recorded after each call's last launch (NULL before the first) */
} device_ws;

static pthread_mutex_t g_ws_lock = PTHREAD_MUTEX_INITIALIZER;
static kvc_registry g_ws; /* under g_ws_lock */

static void ws_free(kvc_reg_entry *r) {
    device_ws *w = (device_ws *)r;
    int prev = -1;
    if (cudaGetDevice(&prev) == cudaSuccess && prev != w->dev) cudaSetDevice(w->dev);
    if (w->buf) cudaFree(w->buf);
    for (int i = 0; i < w->nold; i++) cudaFree(w->old[i]);
    if (w->done) cudaEventDestroy(w->done);
    if (prev >= 0 && prev != w->dev) cudaSetDevice(prev);
    cudaGetLastError();
    free(w->old);
    pthread_mutex_destroy(&w->call);
    free(w);
}

/* An entry may go once its last call's work is done, unless a graph was captured on it. */
static int ws_idle(kvc_reg_entry *r) {
    const device_ws *w = (const device_ws *)r;
    if (w->captured) return 0;
    if (!w->done) return 1;
    const cudaError_t q = cudaEventQuery(w->done);
    cudaGetLastError();
    return q == cudaSuccess;
}

/* The entry of (dev, stream), created if `create`, with one more call in
 * flight on it (ws_release() after the call's last launch); NULL if none.
 * Caller holds g_ws_lock. */
static device_ws *ws_acquire_locked(int dev, cudaStream_t stream, int create) {
    const void *k0 = (const void *)(intptr_t)dev, *k2 =
        stream == cudaStreamPerThread ? (const void *)(uintptr_t)pthread_self() : NULL;
    device_ws *w = (device_ws *)kvc_reg_acquire(&g_ws, k0, stream, k2);
    if (w || !create) return w;
    kvc_reg_sweep(&g_ws, KVC_CUDA_STREAMS_KEPT, ws_idle, ws_free);
    w = (device_ws *)calloc(1, sizeof *w);
    if (!w) return NULL;
    pthread_mutex_init(&w->call, NULL);
    w->dev = dev;
    w->reg.key[0] = k0;
    w->reg.key[1] = stream;
    w->reg.key[2] = k2;
    kvc_reg_add(&g_ws, &w->reg);
    return w;
}

static void ws_release(device_ws *w) {
    pthread_mutex_lock(&g_ws_lock);
    kvc_reg_release(&g_ws, &w->reg);
    pthread_mutex_unlock(&g_ws_lock);
}

static kvc_status cuda_fail(cudaError_t e, const char *what) {
    /* no usable device or driver: the backend is unavailable (not a device fault) */
    const int none = e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorInitializationError;
    cudaGetLastError();
    return kvc_fail(none ? KVC_ERROR_BACKEND_UNAVAILABLE : e == cudaErrorInvalidDevice ? KVC_ERROR_BAD_PARAMETER
                                                                                         : KVC_ERROR_DEVICE,
                    "CUDA %s: %s", what, cudaGetErrorString(e));
}

static int cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static int cuda_owns(const void *p) {
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

/* A workspace area's new capacity: cap where it holds need, else doubled (at least need). */
static size_t ws_grow(size_t cap, size_t need) { return cap >= need ? cap : cap * 2 > need ? cap * 2 : need; }

/* A device attribute, read once per device (fallback where it cannot be read). */
static int dev_attr(int dev, cudaDeviceAttr at, int cache[64], int fallback) {
    if (!cache[dev] && cudaDeviceGetAttribute(&cache[dev], at, dev) != cudaSuccess) {
        cudaGetLastError();
        cache[dev] = fallback;
    }
    return cache[dev];
}
/* The compute capability's major number of device dev. */
static int sm_major(int dev) {
    static int major[64];
    return dev_attr(dev, cudaDevAttrComputeCapabilityMajor, major, 1);
}
static int sm_count(int dev) {
    static int count[64];
    return dev_attr(dev, cudaDevAttrMultiProcessorCount, count, 132);
}

/* The device of CUDA device (or managed) memory p; -1 for any other pointer. */
static int device_of(const void *p) {
    cudaPointerAttributes at;
    if (!p || cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged ? at.device : -1;
}

static kvc_status compress_on(const kvc_args *sets, int n, const kvc_exec *e, kvc_report *rep, int dev);
static const size_t kStatusBytes = 256; /* the workspace's status word (and room) */

/* The driver's cuMemGetAddressRange (base and size of the allocation that
 * holds an address), looked up once; NULL where the driver lacks it. */
typedef int (*mem_range_fn)(unsigned long long *base, size_t *size, unsigned long long ptr);
static mem_range_fn mem_range(void) {
    static mem_range_fn fn;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, [] {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (mem_range_fn)p;
        cudaGetLastError();
    });
    return fn;
}

/* Bytes of p's allocation from p on (device or managed memory), or -1 where it cannot be told. */
static long long bytes_from(const void *p) {
    mem_range_fn fn = mem_range();
    unsigned long long base = 0;
    size_t size = 0;
    if (!fn || fn(&base, &size, (unsigned long long)(uintptr_t)p) != 0) {
        cudaGetLastError();
        return -1;
    }
    return (long long)(base + size - (unsigned long long)(uintptr_t)p);
}

/* What the call writes and reads lies inside the tensors' allocations (a
 * kv_cache allocation shorter than its sizes and strides would take stray
 * writes), and the caller's status word is device memory of dev, whole,
 * apart from every tensor. */
static kvc_status check_device_memory(const kvc_args *a, const kvc_exec *e, const void *const ptrs[KVC_TENSORS],
                                      const int where[KVC_TENSORS], int dev) {
    int64_t need[KVC_TENSORS];
    kvc_status st = kvc_tensor_bytes(a, need);
    if (st != KVC_OK) return st;
    for (int i = 0; i < KVC_TENSORS && a->num_outputs > 0; i++) {
        if (where[i] < 0) continue;
        const long long have = bytes_from(ptrs[i]);
        if (have >= 0 && have < need[i])
            return kvc_fail(KVC_ERROR_BAD_SHAPE, "%s: its CUDA allocation holds %lld bytes from %p; its sizes and "
                            "strides reach %lld", kvc_tensor_names[i], have, ptrs[i], (long long)need[i]);
    }
    const void *s = e->device_status;
    if (!s) return KVC_OK;
    if (device_of(s) != dev)
        return kvc_fail(KVC_ERROR_BAD_PARAMETER, "exec->device_status at %p is not memory of CUDA device %d", s, dev);
    const long long have = bytes_from(s);
    if (have >= 0 && have < (long long)sizeof(kvc_device_status))
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "exec->device_status: its CUDA allocation holds %lld bytes from %p, the "
                        "status word needs %zu", have, s, sizeof(kvc_device_status));
    const uintptr_t lo = (uintptr_t)s, hi = lo + sizeof(kvc_device_status);
    for (int i = 0; i < KVC_TENSORS && a->num_outputs > 0; i++)
        if (ptrs[i] && lo < (uintptr_t)ptrs[i] + (uint64_t)need[i] && (uintptr_t)ptrs[i] < hi)
            return kvc_fail(KVC_ERROR_ALIASING, "exec->device_status and %s share memory: the status word would "
                            "overwrite it", kvc_tensor_names[i]);
    return KVC_OK;
}

/* Launch fn after the stream's previous kernel as its programmatic
 * dependent (sm_90 and later; before, in stream order as any launch). */
static cudaError_t launch_dependent(kernel_fn fn, unsigned grid, unsigned threads, const launch_params &P,
                                    cudaStream_t stream, int dev) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cfg.stream = stream;
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &at;
    cfg.numAttrs = sm_major(dev) >= 9 ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, fn, P);
}

/* The call runs on exec->device, or (-1) on the device that holds the
 * tensors; every tensor in device memory must be on that device.  The
 * calling thread's current device is restored afterwards. */
static kvc_status cuda_compress(const kvc_args *sets, int n, const kvc_exec *e, kvc_report *rep) {
    int prev = 0, dev = e->device;
    cudaError_t err;
    if ((err = cudaGetDevice(&prev)) != cudaSuccess) return cuda_fail(err, "cudaGetDevice");
    for (int s = 0; s < n; s++) {
        const kvc_args *a = &sets[s];
        const void *ptrs[KVC_TENSORS];
        kvc_tensor_ptrs(a, ptrs);
        int where[KVC_TENSORS], first = -1;
        for (int i = 0; i < KVC_TENSORS; i++) {
            where[i] = a->num_outputs > 0 ? device_of(ptrs[i]) : -1;
            if (first < 0 && where[i] >= 0) first = i;
        }
        if (dev < 0 && first >= 0) dev = where[first];
        const int d = dev < 0 ? prev : dev;
        kvc_status st = KVC_OK;
        for (int i = 0; i < KVC_TENSORS && st == KVC_OK; i++) {
            if (where[i] < 0 || where[i] == d) continue;
            st = e->device >= 0 ? kvc_fail(KVC_ERROR_BAD_PARAMETER, "%s is memory of CUDA device %d, exec->device = %d",
                                           kvc_tensor_names[i], where[i], d)
                 : s == 0 ? kvc_fail(KVC_ERROR_BAD_PARAMETER, "%s is memory of CUDA device %d, %s of device %d: one "
                                     "device per call", kvc_tensor_names[i], where[i], kvc_tensor_names[first], d)
                          : kvc_fail(KVC_ERROR_BAD_PARAMETER, "%s is memory of CUDA device %d, an earlier set's of "
                                     "device %d: one device per call", kvc_tensor_names[i], where[i], d);
        }
        if (st == KVC_OK && d >= 64) st = kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "CUDA device %d >= 64", d);
        if (st == KVC_OK) st = check_device_memory(a, e, ptrs, where, d);
        if (st != KVC_OK) return n > 1 ? kvc_prefix_error(st, "args[%d]: ", s) : st;
    }
    if (dev < 0) dev = prev;
    if (dev != prev && (err = cudaSetDevice(dev)) != cudaSuccess) return cuda_fail(err, "cudaSetDevice(exec->device)");
    const kvc_status st = compress_on(sets, n, e, rep, dev);
    if (dev != prev) cudaSetDevice(prev);
    return st;
}

/* One argument set's launch: its parameters, kernels and workspace. */
struct set_plan {
    launch_params P;
    int general, slice, indexer, seg1, dpt, kf; /* kf: the main kernel's body (main_kernel_for) */
    long long L;
    size_t tk_bytes, slice_bad_bytes; /* its tickets' bytes; the slice area's bad-block words */
    size_t gen_need, slice_need;      /* workspace bytes after the status word; of the slice area */
    long long rec_ctas; /* a kernel that can count into per-CTA records (status_of): its CTAs; else 0 */
};

/* Resident CTAs per SM of the one-segment kernel a call takes */
static int small_minb(const kvc_args *a, int bf16) {
    return a->numerics == KVC_NUMERICS_FAST ? kvc_cuda_d2f::small_minb(bf16) : kvc_cuda_d2::small_minb(bf16);
}

/* segment1_kernel's CTAs resident at once on device dev (one wave), asked
 * of the runtime once per device and variant. */
static long long seg1_wave(int dev, int fast, int d128, int bf16, int bias) {
    static int per_sm[64][16];
    int &n = per_sm[dev][8 * fast + 4 * d128 + 2 * bf16 + bias];
    if (!n && (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kSegment1Kernels[fast][d128][bf16][bias],
                                                             d128 ? 128 : 512, 0) != cudaSuccess ||
               n < 1)) {
        cudaGetLastError();
        n = 1;
    }
    return (long long)n * sm_count(dev);
}

/* Plan set a's launch on device dev (host arithmetic only). */
static void plan_set(const kvc_args *a, int dev, set_plan *sp) {
    /* head width 128 (SPEC 9): the indexer kernel for windows of one
     * segment, else the general kernel; a bf16 state or a score bias (SPEC
     * 10): the slice, one-segment and indexer kernels where they take the
     * window, else the general one.  Every kernel has a FAST form. */
    const int bf16 = a->state_dtype == KVC_STATE_BFLOAT16, esz = bf16 ? 2 : 4;
    int general = a->head_dim != KVC_HEAD_DIM;
    launch_params &P = sp->P;
    memset(&P, 0, sizeof P);
    P.a = *a;
    const long long nout = a->num_outputs;
    /* chunk size ~ total segments / CHDIV: at most one wave of CTAs (at 2
     * per SM) where the window allows, so that a CTA's prologue and merge are
     * spread over long chunks (fewer, longer CTAs won wherever the grid had
     * partial waves), but chunks of >= 4 segments,
     * <= KVC_CUDA_MAX_CH = 16 (2 lanes x 8), and <= KVC_CUDA_MAXCHUNKS = 8 chunks per
     * output (the last CTA's merge is the parallel, load-all-first one).
     * One-segment windows: always the one-segment kernel (head width 512) or
     * the indexer kernel (128: a warp per output), K outputs per CTA for
     * whole waves of their resident CTAs per SM. */
    sp->indexer = a->head_dim == 128 &&
                  kvc_num_segments(kvc_window_rows(a->compress_ratio, a->overlap == KVC_OVERLAP_ON)) == 1;
    const int minb = sp->indexer ? ks::idx_minb(bf16, a->score_bias != NULL) : small_minb(a, bf16);
    const kvc_plan_policy pol = {KVC_CUDA_CHDIV, KVC_CUDA_MAXCHUNKS, KVC_CUDA_MAX_CH, (long long)minb * sm_count(dev),
                                 sp->indexer ? ks::kIdxKSolo : ks::kSmallK, 0};
    kvc_plan_make(nout, a->compress_ratio, a->overlap == KVC_OVERLAP_ON, &pol, &P.pl);
    /* the slice kernels (cuda_slice.cuh): every call of 16, 32 or 64 full
     * segments (C = 128, 256, 512) without overlap, 8-byte rows (faster than
     * the chunked kernel at every such size, measured). */
    /* (the slice kernels read a bias in 8-byte pairs) */
    const int bias_pairs = !a->score_bias || ((uintptr_t)a->score_bias % 8 == 0 && a->score_bias_stride % 2 == 0);
    int slice = !general && bias_pairs && kvc_plan_slice(a, &P.pl, (uintptr_t)a->state_cache % (2 * esz) == 0);
    if (!general && !slice && !P.pl.small_k && (bf16 || a->score_bias)) general = 1;
    if (sp->indexer) {
        general = 0;
        /* 16-byte (bf16: 8-byte) row loads: every row offset a multiple of 4 elements */
        P.pl.vec = (uintptr_t)a->state_cache % (4 * esz) == 0 && a->state_stride_block % 4 == 0 &&
                   a->state_stride_token % 4 == 0;
    }
    if (general) { /* (its own layout below: no chunk states or tickets) */
        slice = 0;
        P.pl.nchunk = 1;
        P.pl.small_k = 0;
    }
    /* one-segment windows in at most one wave of segment1_kernel's CTAs
     * (decode steps): an output a CTA instead */
    sp->seg1 = P.pl.small_k > 0 &&
               nout <= seg1_wave(dev, a->numerics == KVC_NUMERICS_FAST, sp->indexer, bf16, a->score_bias != NULL);
    if (slice) { /* C = 128: slice records; else chunk states [nout][nseg / 16][3][512] */
        P.pl.vec = 1;
        P.bs_shift = (a->block_size & (a->block_size - 1)) == 0 ? __builtin_ctzll((unsigned long long)a->block_size) : -1;
    }
    const long long ch = P.pl.ch;
    /* dims per thread of the main kernel: 1 for
     * chunks of 16 full segments in at most two waves (one 512-thread lane
     * of 16 segments: faster for the 32k/65k-token cases), else 2 (two
     * 256-thread lanes of 8: faster for the 8k and 131k-token cases). */
    const int full = P.pl.full && P.pl.nseg % ch == 0;
    const int dpt = P.pl.small_k ? 2 /* one-segment windows: ks (DPT 2) */
                    : full && ch == 16 && P.pl.groups <= 2LL * KVC_CUDA_MINB * sm_count(dev) ? 1 : 2;
    const int max_lanes = dpt == 1 ? kvc_cuda_d1::kMaxLanes : kvc_cuda_d2::kMaxLanes;
    const int tree_max = dpt == 1 ? kvc_cuda_d1::kTreeMax : kvc_cuda_d2::kTreeMax;
    long long L = ch < max_lanes ? ch : max_lanes;
    P.lanes = (int)L;
    P.uniform = P.pl.nseg % ch == 0 && (P.pl.nchunk & (P.pl.nchunk - 1)) == 0 && P.pl.nchunk <= tree_max * L;
    /* DPT-float loads need DPT-float alignment of every row */
    if (!slice && !sp->indexer)
        P.pl.vec = ((uintptr_t)a->state_cache % (esz * dpt) == 0) && a->state_stride_block % dpt == 0 &&
                   a->state_stride_token % dpt == 0;
    P.fast = P.pl.vec && a->overlap == KVC_OVERLAP_OFF;

    /* workspace: the status word (256 B), the other kernels' area (tickets,
     * chunk states), then the slice area at a fixed offset: bad-block words,
     * then slice records (C = 128) or chunk states */
    static_assert(kvc_cuda_d2::kSliceRec == KVC_SLICE_REC, "the slice record of kvc_check.h");
    kvc_ws_plan wp;
    kvc_ws_plan_make(&P.pl, nout, slice, &wp);
    sp->tk_bytes = general || sp->indexer ? 0 : ((size_t)nout * 4 + 255) & ~(size_t)255;
    sp->slice_bad_bytes = ((size_t)wp.slice_bad + 255) & ~(size_t)255;
    sp->gen_need = slice ? 0 : sp->tk_bytes + (size_t)wp.states;
    /* the indexer, one-segment and decode kernels (a call of one output on
     * segment1_kernel writes the word itself) */
    sp->rec_ctas = general || slice || !(sp->indexer || P.pl.small_k) || (sp->seg1 && nout == 1) ? 0
                   : sp->seg1                                                                 ? nout
                                                                                              : P.pl.groups;
    sp->slice_need = slice ? sp->slice_bad_bytes + (size_t)wp.states : 0;
    sp->general = general;
    sp->slice = slice;
    sp->dpt = dpt;
    sp->L = L;
    /* every chunk kk = ch / L full segments on the fast path: a kernel with
     * only that body (1/8 of the code, and faster) */
    sp->kf = P.fast && full ? (int)(ch / L) : 0;
}

/* Launch set number `set` of a call (its outputs numbered from out_base)
 * on the workspace buf (gen_cap bytes after the status word), caller holding
 * its lock. */
static kvc_status launch_set(set_plan *sp, int set, long long out_base, char *buf, size_t gen_cap, const kvc_exec *e,
                             cudaStream_t stream, int dev, int records) {
    launch_params &P = sp->P;
    const kvc_args *a = &P.a;
    const long long nout = a->num_outputs, nseg = P.pl.nseg, L = sp->L;
    const int general = sp->general, slice = sp->slice, dpt = sp->dpt, fastnum = a->numerics == KVC_NUMERICS_FAST;
    const size_t st_bytes = kStatusBytes, tk_bytes = sp->tk_bytes, slice_bad_bytes = sp->slice_bad_bytes;
    const size_t slice_need = sp->slice_need;
    cudaError_t err;
    P.pl.out_base = out_base;
    P.pl.keep_status = set > 0;
    char *slice_area = buf + st_bytes + gen_cap;
    P.status = e->device_status ? e->device_status : (kvc_device_status *)buf;
    const int direct = set == 0 && sp->seg1 && nout == 1;
    P.status_out = direct ? P.status : NULL;
    P.records = records ? (kvc_device_status *)(buf + st_bytes) : NULL;
    P.tickets = (unsigned *)(buf + st_bytes);
    P.chunk_states = slice ? (float *)(slice_area + slice_bad_bytes)
                           : (float *)(buf + st_bytes + tk_bytes);
    P.slice_bad = (long long *)slice_area;
    /* The status word, by the first set only: zeroed by the slice kernel
     * itself, written whole by a one-output call's segment1_kernel or as the
     * header of per-CTA records, else zeroed by a memset, with the main
     * kernel's tickets where they are adjacent. */
    const int memset_status = set == 0 && !direct && !(slice && nout > 0) && !records;
    const size_t tickets = !slice && P.pl.nchunk > 1 ? (size_t)nout * 4 : 0;
    if (memset_status && e->device_status &&
        (err = cudaMemsetAsync(e->device_status, 0, sizeof(kvc_device_status), stream)) != cudaSuccess)
        return cuda_fail(err, "cudaMemsetAsync(status)");
    const int with_status = memset_status && !e->device_status;
    if ((with_status || tickets) &&
        (err = cudaMemsetAsync(with_status ? (void *)buf : (void *)P.tickets, 0, (with_status ? st_bytes : 0) + tickets,
                               stream)) != cudaSuccess)
        return cuda_fail(err, "cudaMemsetAsync(workspace)");
    if (nout == 0) return KVC_OK;
    if (general) {
        if (nout > 0x7FFFFFFFLL)
            return kvc_fail(KVC_ERROR_BAD_SHAPE, "num_outputs = %lld exceeds the CUDA grid", nout);
        P.pl.small_k = a->head_dim == 128 ? KVC_GEN_K_MAX : 1; /* outputs per CTA of 512 threads */
        const long long ctas = (nout + P.pl.small_k - 1) / P.pl.small_k;
        general_kernel<<<(unsigned)ctas, (unsigned)(P.pl.small_k * a->head_dim), 0, stream>>>(P);
        if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
        return KVC_OK;
    }
    if (slice) {
        /* one CTA per (output, 16-segment chunk, 64-dim slice) */
        const int nch = (int)(nseg / 16);
        const unsigned blocks = (unsigned)(nout * 8 * nch);
        P.ahead = (long long)sm_count(dev) * KVC_CUDA_SLICE_CTAS_PER_SM / (8 * nch);
        const int dense = a->state_stride_token == 1024; /* TS: the token stride at compile time */
        const int lg = nch == 1 ? 0 : nch == 2 ? 1 : 2;
        const int bf16 = a->state_dtype == KVC_STATE_BFLOAT16, variant = a->score_bias ? 4 + bf16 : 2 * bf16 + dense;
        const kernel_fn slice_k = kSliceKernels[fastnum][lg][variant], finish_k = kSliceFinish[fastnum][lg];
        slice_k<<<blocks, 256, 0, stream>>>(P);
        if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
        /* the finisher: programmatic dependent launch (sm_90), so that its
         * launch overlaps the slice kernel's last wave */
        err = launch_dependent(finish_k, (unsigned)nout, nch == 1 ? 128 : kvc_cuda_d2::kDG, P, stream, dev);
        if (err != cudaSuccess) { /* the slice area back to EMPTY for the next call: nothing will read it */
            cudaMemsetAsync(slice_area, 0xFF, slice_need, stream);
            return cuda_fail(err, "kernel launch");
        }
        return KVC_OK;
    }
    const long long blocks = P.pl.groups;
    if (blocks > 0x7FFFFFFFLL)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "%lld CTAs (num_outputs %lld) exceed the CUDA grid", blocks, nout);
    const int bf16 = a->state_dtype == KVC_STATE_BFLOAT16, bias = a->score_bias != NULL;
    if (sp->seg1) { /* decode-sized: an output a CTA */
        const int d = sp->indexer ? 128 : 512;
        kSegment1Kernels[fastnum][d == 128][bf16][bias]<<<(unsigned)nout, (unsigned)d, 0, stream>>>(P);
        if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
        return KVC_OK;
    }
    if (sp->indexer) { /* head width 128, one-segment windows: a warp per output */
        kIndexerKernels[fastnum][bf16][bias]<<<(unsigned)blocks, ks::kIdxWarps * 32, 0, stream>>>(P);
        if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
        return KVC_OK;
    }
    if (P.pl.small_k) { /* one-segment windows: several outputs per CTA */
        const kernel_fn small_k = kSmallKernels[fastnum][bf16][bias];
        small_k<<<(unsigned)blocks, ks::kDG, 0, stream>>>(P);
        if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
        return KVC_OK;
    }
    size_t smem = (size_t)(L * 3 * 512) * sizeof(float); /* lane states; >= 512 + 8 floats for the finaliser */
    const unsigned threads = (unsigned)((dpt == 1 ? kvc_cuda_d1::kDG : kvc_cuda_d2::kDG) * L);
    main_kernel_for(dpt, fastnum, sp->kf)<<<(unsigned)blocks, threads, smem, stream>>>(P);
    if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
    return KVC_OK;
}

static kvc_status compress_on(const kvc_args *sets, int n, const kvc_exec *e, kvc_report *rep, int dev) {
    cudaError_t err;
    cudaStream_t stream = (cudaStream_t)e->stream;
    int fast_all = 1;
    for (int s = 0; s < n; s++) fast_all &= sets[s].numerics == KVC_NUMERICS_FAST;
    if (rep) {
        rep->outputs_written = rep->outputs_padding = rep->outputs_nonfinite = -1;
        rep->device_async = 1;
        rep->numerics = fast_all ? KVC_NUMERICS_FAST : KVC_NUMERICS_EXACT;
    }
    /* every set planned, the workspace grown once to the largest need (the
     * status word stays where the first set zeroes it) */
    set_plan sp[KVC_MANY_MAX];
    size_t gen_need = 0, slice_need = 0;
    /* several sets, all of one-segment windows (decode's C4: a CSA layer's
     * main and indexer compressors), one numerics and state dtype: one
     * launch of their kernels' bodies (segment1_many_kernel) */
    int fuse = n > 1;
    long long fused_ctas = 0;
    for (int s = 0; s < n; s++) {
        plan_set(&sets[s], dev, &sp[s]);
        gen_need = sp[s].gen_need > gen_need ? sp[s].gen_need : gen_need;
        slice_need = sp[s].slice_need > slice_need ? sp[s].slice_need : slice_need;
        /* (the fused kernel's indexer body takes kIdxK outputs a CTA at most) */
        fuse &= sp[s].P.pl.small_k > 0 && (!sp[s].indexer || sp[s].P.pl.small_k <= ks::kIdxK) &&
                sets[s].numerics == sets[0].numerics &&
                sets[s].state_dtype == sets[0].state_dtype;
        fused_ctas += sp[s].P.pl.groups;
    }
    fuse &= fused_ctas <= 0x7FFFFFFFLL;
    /* per-CTA status records (status_of) for a call of one launch on the
     * library's word: no memset before it */
    const long long rec_ctas = e->device_status ? 0 : fuse ? fused_ctas : n == 1 ? sp[0].rec_ctas : 0;
    const size_t rec_bytes = (size_t)rec_ctas * sizeof(kvc_device_status);
    gen_need = rec_bytes > gen_need ? rec_bytes : gen_need;
    const size_t st_bytes = kStatusBytes;
    pthread_mutex_lock(&g_ws_lock);
    device_ws *ws = ws_acquire_locked(dev, stream, 1);
    pthread_mutex_unlock(&g_ws_lock);
    if (!ws) return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CUDA: no host memory for a stream's workspace entry");
    struct call_lock { /* ws->call and the entry, released on every return below, after the call's event */
        device_ws *w;
        cudaStream_t s;
        ~call_lock() {
            if (!w->captured && (w->done || cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming) == cudaSuccess))
                cudaEventRecord(w->done, s);
            cudaGetLastError();
            pthread_mutex_unlock(&w->call);
            ws_release(w);
        }
    } held = {ws, stream};
    pthread_mutex_lock(&ws->call);
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
        cudaGetLastError();
        capturing = cudaStreamCaptureStatusActive;
    }
    if (capturing != cudaStreamCaptureStatusNone) ws->captured = 1;
    if (!ws->buf || ws->gen_cap < gen_need || ws->slice_cap < slice_need) {
        /* A workspace only grows, and the old buffer is kept: a CUDA graph
         * captured earlier may still use it.  Doubling bounds the total at
         * twice the largest.  During a stream capture (a stream's first call
         * may be inside one, e.g. torch.cuda.graph's own stream) the
         * allocation and the slice area's EMPTY fill are made in relaxed
         * capture mode on a stream of their own: they are not captured. */
        const cudaStreamCaptureStatus cap = capturing;
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        if (cap != cudaStreamCaptureStatusNone) cudaThreadExchangeStreamCaptureMode(&mode);
        const size_t gen = ws_grow(ws->gen_cap, gen_need), sl = ws_grow(ws->slice_cap, slice_need);
        void *nb = NULL;
        err = cudaMalloc(&nb, st_bytes + gen + sl);
        cudaStream_t fs = stream;
        if (err == cudaSuccess && cap != cudaStreamCaptureStatusNone)
            err = cudaStreamCreateWithFlags(&fs, cudaStreamNonBlocking);
        if (err == cudaSuccess) err = cudaMemsetAsync(nb, 0, st_bytes, fs); /* (no header read before a call) */
        if (err == cudaSuccess && sl) err = cudaMemsetAsync((char *)nb + st_bytes + gen, 0xFF, sl, fs);
        if (cap != cudaStreamCaptureStatusNone && fs != stream) {
            if (err == cudaSuccess) err = cudaStreamSynchronize(fs);
            cudaStreamDestroy(fs);
        }
        if (cap != cudaStreamCaptureStatusNone) cudaThreadExchangeStreamCaptureMode(&mode);
        if (err != cudaSuccess) {
            cudaGetLastError();
            if (nb) cudaFree(nb);
            return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CUDA workspace of %zu bytes: %s", st_bytes + gen + sl,
                            cudaGetErrorString(err));
        }
        if (ws->buf) {
            void **grown = (void **)realloc(ws->old, sizeof(void *) * (size_t)(ws->nold + 1));
            if (!grown) {
                cudaFree(nb);
                return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CUDA: no host memory for the workspace's list");
            }
            ws->old = grown;
            ws->old[ws->nold++] = ws->buf;
        }
        ws->buf = nb;
        ws->gen_cap = gen;
        ws->slice_cap = sl;
    }
    long long base = 0;
    if (fuse) { /* one launch for every set */
        many_params M; /* (kernel parameters of over 4 KB: CUDA 12.1 on sm_70 and later) */
        unsigned ctas = 0;
        for (int s = 0; s < n; s++) {
            M.p[s] = sp[s].P;
            launch_params &P = M.p[s];
            P.status = e->device_status ? e->device_status : (kvc_device_status *)ws->buf;
            P.records = rec_ctas ? (kvc_device_status *)((char *)ws->buf + st_bytes) : NULL;
            P.pl.out_base = base;
            ctas += (unsigned)P.pl.groups;
            M.end[s] = ctas;
            base += P.a.num_outputs;
        }
        if (!rec_ctas && (err = cudaMemsetAsync(M.p[0].status, 0, sizeof(kvc_device_status), stream)) != cudaSuccess)
            return cuda_fail(err, "cudaMemsetAsync(status)");
        const int fastnum = sets[0].numerics == KVC_NUMERICS_FAST, bf16 = sets[0].state_dtype == KVC_STATE_BFLOAT16;
        kManyKernels[fastnum][bf16]<<<ctas, ks::kDG, 0, stream>>>(M);
        if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
        return KVC_OK;
    }
    for (int s = 0; s < n; s++) {
        const kvc_status st = launch_set(&sp[s], s, base, (char *)ws->buf, ws->gen_cap, e, stream, dev, rec_ctas > 0);
        if (st != KVC_OK) return st;
        base += sets[s].num_outputs;
    }
    return KVC_OK;
}

/* The status of a call whose n CTAs each wrote a record at rec (device
 * memory): the counts summed, the error of the first CTA that has one. */
static kvc_status sum_records(const kvc_device_status *rec, long long n, cudaStream_t stream, kvc_device_status *out) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return KVC_OK;
    kvc_device_status *h = (kvc_device_status *)malloc((size_t)n * sizeof *h);
    if (!h) return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CUDA: no host memory for %lld status records", n);
    cudaError_t err = cudaMemcpyAsync(h, rec, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    for (long long i = 0; err == cudaSuccess && i < n; i++) {
        if (!out->status && h[i].status) {
            out->status = h[i].status;
            out->check = h[i].check;
            out->output = h[i].output;
            out->value = h[i].value;
        }
        out->outputs_written += h[i].outputs_written;
        out->outputs_padding += h[i].outputs_padding;
        out->outputs_nonfinite += h[i].outputs_nonfinite;
        out->outputs_invalid += h[i].outputs_invalid;
    }
    free(h);
    return err == cudaSuccess ? KVC_OK : cuda_fail(err, "reading the status records");
}

static kvc_status cuda_read_status(const kvc_exec *e, kvc_device_status *out) {
    int dev = e && e->device >= 0 ? e->device : -1;
    cudaError_t err;
    if (dev < 0 && (err = cudaGetDevice(&dev)) != cudaSuccess) return cuda_fail(err, "cudaGetDevice");
    if (dev >= 64) return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "CUDA device %d >= 64", dev);
    cudaStream_t stream = e ? (cudaStream_t)e->stream : 0;
    const void *src = e && e->device_status ? (const void *)e->device_status : NULL;
    device_ws *w = NULL;
    size_t gen_cap = 0;
    if (!src) {
        pthread_mutex_lock(&g_ws_lock);
        w = ws_acquire_locked(dev, stream, 0);
        pthread_mutex_unlock(&g_ws_lock);
        if (w) { /* (buf changes under the call lock) */
            pthread_mutex_lock(&w->call);
            src = w->buf;
            gen_cap = w->gen_cap;
            pthread_mutex_unlock(&w->call);
        }
    }
    if (!src) {
        if (w) ws_release(w);
        memset(out, 0, sizeof *out);
        return KVC_OK;
    }
    err = cudaMemcpyAsync(out, src, sizeof *out, cudaMemcpyDeviceToHost, stream);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
    kvc_status st = err == cudaSuccess ? KVC_OK : cuda_fail(err, "reading the status word");
    if (st == KVC_OK && w && out->status == KVC_CUDA_RECORDS) { /* the header of per-CTA records (status_of) */
        const long long n = out->value, cap = (long long)(gen_cap / sizeof *out);
        st = sum_records((const kvc_device_status *)((const char *)src + kStatusBytes), n < cap ? n : cap, stream, out);
    }
    if (w) ws_release(w);
    return st;
}

extern "C" const kvc_backend_ops kvc_backend_cuda = {KVC_BACKEND_CUDA, "cuda", cuda_available, cuda_owns,
                                                     cuda_compress, cuda_read_status, 0};
