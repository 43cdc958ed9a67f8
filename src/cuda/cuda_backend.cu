/*
 * cuda_backend.cu -- the CUDA backend.  Same bytes as the CPU backend: every
 * float operation goes through kvc_canon.h, which uses the _rn intrinsics
 * (never contracted) on the device.
 *
 * Work decomposition (one launch per call):
 *   - 128 "dimension groups" of 4 dims each cover the 512 dims; a thread
 *     loads one float4 of values and one of scores per row (16-byte loads).
 *   - The window's S = ceil(rows / 8) segments are cut into CHUNKS that are
 *     complete, aligned subtrees of the canonical tree: floor(S / CH) chunks
 *     of CH segments, then one chunk per set bit of S % CH (descending).
 *   - A CTA (128 x L threads) reduces one chunk of one output: lane l of a
 *     dimension group reduces a complete subtree of K segments in registers,
 *     then the L lane states are merged in tree order through shared memory.
 *   - With one chunk per output the CTA finalises directly; otherwise chunk
 *     states go to a workspace and the last CTA of the output (ticket
 *     counter) merges them in canonical order and finalises.
 *   - Index values are checked on the device (kvc_check.h); a bad output is
 *     skipped and the first error is recorded in the status word.
 */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "kvc_canon.h"
#include "kvc_check.h"
#include "kvc_internal.h"

#define DG 128        /* dimension groups (threads per lane)  */
#define MAX_LANES 4   /* lanes per CTA -> at most 512 threads  */
#define STACK_MAX 48  /* chunk-merge stack depth (any S < 2^47) */

struct st4 {
    float m[4], d[4], n[4];
};

__device__ __forceinline__ void st_merge(st4 &a, const st4 &b) {
#pragma unroll
    for (int j = 0; j < 4; j++) kvc_merge(&a.m[j], &a.d[j], &a.n[j], b.m[j], b.d[j], b.n[j]);
}

/* Per-launch constants (one struct, passed by value). */
struct launch_params {
    kvc_args a;                 /* resolved args (device pointers)               */
    kvc_device_status *status;  /* device status word                            */
    unsigned *tickets;          /* [num_outputs] arrival counters (zeroed)       */
    float *chunk_states;        /* [num_outputs][nchunk][3][512]                 */
    long long rows;             /* window rows: C or 2C                          */
    long long nseg;             /* segments per window                           */
    long long nchunk;           /* chunks per output                             */
    long long ch;               /* full chunk size in segments (L * K)           */
    int lanes;                  /* L                                             */
    int vec;                    /* 16-byte loads allowed (alignment)            */
};

/* Chunk j of a window of nseg segments: start segment and size (power of 2). */
__device__ void chunk_of(long long nseg, long long ch, long long j, long long *start, long long *size) {
    long long full = nseg / ch;
    if (j < full) {
        *start = j * ch;
        *size = ch;
        return;
    }
    long long s = full * ch, rem = nseg - s, k = j - full;
    for (long long bit = ch >> 1; bit >= 1; bit >>= 1) {
        if (rem & bit) {
            if (k == 0) {
                *start = s;
                *size = bit;
                return;
            }
            k--;
            s += bit;
        }
    }
    *start = s; /* unreachable for valid j */
    *size = 1;
}

/* Value and score float4 of window row i for dimension group q. */
__device__ __forceinline__ void load_row(const launch_params &P, const kvc_out_info &inf, long long i, int q,
                                         float4 &v, float4 &s) {
    const kvc_args &a = P.a;
    const long long C = a.compress_ratio;
    long long pos;
    int vo, so;
    if (a.overlap == KVC_OVERLAP_ON) {
        if (i < C) {
            pos = inf.p - 2 * C + 1 + i;
            vo = 0;
            so = 1024;
        } else {
            pos = inf.p - C + 1 + (i - C);
            vo = 512;
            so = 1536;
        }
        if (pos < 0) {
            v = make_float4(0.f, 0.f, 0.f, 0.f);
            float ni = KVC_NEG_INF;
            s = make_float4(ni, ni, ni, ni);
            return;
        }
    } else {
        pos = inf.p - C + 1 + i;
        vo = 0;
        so = 512;
    }
    const long long blk = a.block_table[inf.r * a.block_table_stride + pos / a.block_size];
    const float *row = a.state_cache + blk * a.state_stride_block + (pos % a.block_size) * a.state_stride_token;
    if (P.vec) {
        v = __ldcs(reinterpret_cast<const float4 *>(row + vo) + q);
        s = __ldcs(reinterpret_cast<const float4 *>(row + so) + q);
    } else {
        const float *pv = row + vo + 4 * q, *ps = row + so + 4 * q;
        v = make_float4(pv[0], pv[1], pv[2], pv[3]);
        s = make_float4(ps[0], ps[1], ps[2], ps[3]);
    }
}

/* One segment (rows [8 sg, min(rows, 8 sg + 8))) for 4 dims. */
__device__ __forceinline__ st4 seg_reduce(const launch_params &P, const kvc_out_info &inf, long long sg, int q) {
    float4 v[KVC_SEG], s[KVC_SEG];
    const long long r0 = sg * KVC_SEG;
    const int n = (int)((P.rows - r0) < KVC_SEG ? (P.rows - r0) : KVC_SEG);
    if (n == KVC_SEG && P.a.overlap == KVC_OVERLAP_OFF) {
        /* fast path: one division for the segment, then step through rows */
        const kvc_args &a = P.a;
        long long pos = inf.p - a.compress_ratio + 1 + r0;
        long long bi = pos / a.block_size, off = pos - bi * a.block_size;
        const int32_t *trow = a.block_table + inf.r * a.block_table_stride;
        const float *row = a.state_cache + (long long)trow[bi] * a.state_stride_block + off * a.state_stride_token;
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) {
            if (P.vec) {
                v[i] = __ldcs(reinterpret_cast<const float4 *>(row) + q);
                s[i] = __ldcs(reinterpret_cast<const float4 *>(row + 512) + q);
            } else {
                const float *pv = row + 4 * q;
                v[i] = make_float4(pv[0], pv[1], pv[2], pv[3]);
                s[i] = make_float4(pv[512], pv[513], pv[514], pv[515]);
            }
            if (++off == a.block_size) {
                off = 0;
                ++bi;
                if (i + 1 < KVC_SEG) row = a.state_cache + (long long)trow[bi] * a.state_stride_block;
            } else {
                row += a.state_stride_token;
            }
        }
    } else {
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++)
            if (i < n) load_row(P, inf, r0 + i, q, v[i], s[i]);
    }
    st4 st;
    const float *sv0 = reinterpret_cast<const float *>(&s[0]);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        st.m[j] = sv0[j];
        st.d[j] = 0.0f;
        st.n[j] = 0.0f;
    }
#pragma unroll
    for (int i = 1; i < KVC_SEG; i++) {
        if (i < n) {
            const float *si = reinterpret_cast<const float *>(&s[i]);
#pragma unroll
            for (int j = 0; j < 4; j++) st.m[j] = kvc_max(st.m[j], si[j]);
        }
    }
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        if (i < n) {
            const float *si = reinterpret_cast<const float *>(&s[i]);
            const float *vi = reinterpret_cast<const float *>(&v[i]);
#pragma unroll
            for (int j = 0; j < 4; j++) kvc_seg_step(st.m[j], si[j], vi[j], &st.d[j], &st.n[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++) kvc_seg_close(st.m[j], &st.d[j], &st.n[j]);
    return st;
}

/* Complete subtree of KK segments starting at segment sg. */
template <int KK>
__device__ __forceinline__ st4 subtree(const launch_params &P, const kvc_out_info &inf, long long sg, int q) {
    if constexpr (KK == 1) {
        return seg_reduce(P, inf, sg, q);
    } else {
        st4 A = subtree<KK / 2>(P, inf, sg, q);
        st4 B = subtree<KK / 2>(P, inf, sg + KK / 2, q);
        st_merge(A, B);
        return A;
    }
}

__device__ st4 subtree_rt(const launch_params &P, const kvc_out_info &inf, long long sg, long long kk, int q) {
    switch (kk) {
    case 1: return subtree<1>(P, inf, sg, q);
    case 2: return subtree<2>(P, inf, sg, q);
    case 4: return subtree<4>(P, inf, sg, q);
    default: return subtree<8>(P, inf, sg, q); /* kk <= K <= 8 by construction */
    }
}

__device__ void record_error(kvc_device_status *st, int check, long long o, long long value) {
    if (atomicCAS(&st->status, 0, (int)KVC_ERROR_INDEX_OUT_OF_RANGE) == 0) {
        st->check = check;
        st->output = o;
        st->value = value;
    }
    atomicAdd(reinterpret_cast<unsigned long long *>(&st->outputs_invalid), 1ull);
}

/* Finalise one output from c (thread q < 128 holds dims 4q..4q+3).  All 128
 * threads of the first lane call this together; uses 8 floats of smem. */
__device__ void finalize(const launch_params &P, const kvc_out_info &inf, const float c[4], int q, float *red) {
    const kvc_args &a = P.a;
    int bad = 0;
    float sq[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        bad |= kvc_nonfinite(c[j]);
        sq[j] = KVC_MUL(c[j], c[j]);
    }
    float ss = KVC_ADD(KVC_ADD(sq[0], sq[1]), KVC_ADD(sq[2], sq[3]));
#pragma unroll
    for (int k = 1; k < 32; k <<= 1) ss = KVC_ADD(ss, __shfl_xor_sync(0xffffffffu, ss, k)); /* a+b == b+a */
    if ((q & 31) == 0) red[q >> 5] = ss;
    asm volatile("bar.sync 1, 128;");
    ss = KVC_ADD(KVC_ADD(red[0], red[1]), KVC_ADD(red[2], red[3]));
    const float rr = kvc_rms_scale(ss, a.rms_norm_eps);
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        y[j] = kvc_rms_apply(c[j], rr, kvc_bf16_to_f32(a.rms_norm_weight[4 * q + j]));
        bad |= kvc_nonfinite(y[j]);
    }
    const int fp8 = a.nope_format == KVC_NOPE_FP8_E4M3;
    const long long S = a.kv_block_size;
    uint8_t *page = a.kv_cache + (inf.slot / S) * a.page_stride;
    const long long s_in = inf.slot % S;
    uint8_t *payload = page + s_in * KVC_PAYLOAD_BYTES;
    uint8_t *scales = page + S * KVC_PAYLOAD_BYTES + s_in * KVC_SCALE_BYTES;
    uint8_t out[8];
    int nout = 0, e = 0;
    /* bf16 and group amax on all 128 threads: the shuffles must not diverge
     * (xor < 16 stays inside a 16-thread group; q >= 112 is RoPE, unused). */
    float z[4], amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        kvc_u16 h = kvc_bf16_bits(y[j]);
        if (q < 112) bad |= kvc_bf16_nonfinite(h);
        z[j] = kvc_bf16_to_f32(h);
        amax = fmaxf(amax, fabsf(z[j])); /* NaN only where bad is set */
    }
#pragma unroll
    for (int k = 1; k < 16; k <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, k));
    if (q < 112) { /* NOPE: groups of 16 threads */
        e = kvc_group_exponent(amax, fp8);
#pragma unroll
        for (int j = 0; j < 4; j++) out[j] = kvc_nope_code(z[j], e, fp8);
        nout = 4;
    } else { /* RoPE: 2 pairs per thread */
        const float *cs = a.cos_sin_cache + inf.pc * a.cos_sin_stride;
        const int il = a.cos_sin_layout == KVC_COS_SIN_INTERLEAVED;
#pragma unroll
        for (int t = 0; t < 2; t++) {
            const int jj = 2 * (q - 112) + t;
            float cj = il ? cs[2 * jj] : cs[jj];
            float sj = il ? cs[2 * jj + 1] : cs[32 + jj];
            float uo, wo;
            kvc_rope(y[2 * t], y[2 * t + 1], cj, sj, &uo, &wo);
            bad |= kvc_nonfinite(uo) | kvc_nonfinite(wo);
            kvc_u16 hu = kvc_bf16_bits(uo), hw = kvc_bf16_bits(wo);
            bad |= kvc_bf16_nonfinite(hu) | kvc_bf16_nonfinite(hw);
            out[4 * t + 0] = (uint8_t)(hu & 0xFF);
            out[4 * t + 1] = (uint8_t)(hu >> 8);
            out[4 * t + 2] = (uint8_t)(hw & 0xFF);
            out[4 * t + 3] = (uint8_t)(hw >> 8);
        }
        nout = 8;
    }
    /* block-wide OR over the 128 threads of lane 0 */
    __shared__ int any_bad;
    if (q == 0) any_bad = 0;
    asm volatile("bar.sync 1, 128;");
    if (bad) any_bad = 1;
    asm volatile("bar.sync 1, 128;");
    bad = any_bad;
    if (q < 112) {
        for (int j = 0; j < 4; j++) payload[4 * q + j] = bad ? 0 : out[j];
        if ((q & 15) == 0) scales[q >> 4] = bad ? 0xFF : (uint8_t)(e + 127);
    } else {
        uint8_t *rp = payload + 448 + 8 * (q - 112);
        for (int j = 0; j < nout; j++) rp[j] = bad ? (uint8_t)((j & 1) ? 0x7F : 0xC0) : out[j];
    }
    if (q == 0) {
        scales[7] = 0;
        atomicAdd(reinterpret_cast<unsigned long long *>(&P.status->outputs_written), 1ull);
        if (bad) atomicAdd(reinterpret_cast<unsigned long long *>(&P.status->outputs_nonfinite), 1ull);
    }
}

__global__ void __launch_bounds__(DG *MAX_LANES) compress_kernel(const launch_params P) {
    extern __shared__ float smem[]; /* [lanes][12][128] lane states, then 8 floats */
    const int tid = threadIdx.x, q = tid % DG, lane = tid / DG;
    const long long o = blockIdx.x / P.nchunk, j = blockIdx.x % P.nchunk;

    kvc_out_info inf;
    int chk = kvc_check_output(&P.a, o, &inf);
    if (chk != KVC_CHECK_NONE) {
        if (j == 0 && tid == 0) record_error(P.status, chk, o, inf.value);
        return;
    }
    if (inf.slot < 0) {
        if (j == 0 && tid == 0) atomicAdd(reinterpret_cast<unsigned long long *>(&P.status->outputs_padding), 1ull);
        return;
    }
    long long cstart, csize;
    chunk_of(P.nseg, P.ch, j, &cstart, &csize);
    const long long active = csize < P.lanes ? csize : P.lanes; /* lanes with work */
    const long long kk = csize / active;                        /* segments per lane */

    st4 st;
    if (lane < active) st = subtree_rt(P, inf, cstart + lane * kk, kk, q);
    /* merge lane states in tree order */
    if (active > 1) {
        if (lane < active) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                smem[(lane * 12 + k) * DG + q] = st.m[k];
                smem[(lane * 12 + 4 + k) * DG + q] = st.d[k];
                smem[(lane * 12 + 8 + k) * DG + q] = st.n[k];
            }
        }
        __syncthreads();
        if (lane == 0) {
            st4 L[MAX_LANES];
            for (int l = 0; l < active; l++)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    L[l].m[k] = smem[(l * 12 + k) * DG + q];
                    L[l].d[k] = smem[(l * 12 + 4 + k) * DG + q];
                    L[l].n[k] = smem[(l * 12 + 8 + k) * DG + q];
                }
            for (int w = 1; w < active; w *= 2)
                for (int l = 0; l + w < active; l += 2 * w) st_merge(L[l], L[l + w]);
            st = L[0];
        }
    }
    if (lane != 0) return;
    float *red = smem + MAX_LANES * 12 * DG;

    if (P.nchunk == 1) {
        float c[4];
#pragma unroll
        for (int k = 0; k < 4; k++) c[k] = KVC_DIV(st.n[k], st.d[k]);
        finalize(P, inf, c, q, red);
        return;
    }
    /* publish the chunk state; the last CTA of the output merges them */
    float *cs = P.chunk_states + (o * P.nchunk + j) * (3 * 512);
#pragma unroll
    for (int k = 0; k < 4; k++) {
        cs[4 * q + k] = st.m[k];
        cs[512 + 4 * q + k] = st.d[k];
        cs[1024 + 4 * q + k] = st.n[k];
    }
    __threadfence();
    __shared__ unsigned ticket;
    asm volatile("bar.sync 1, 128;");
    if (q == 0) ticket = atomicAdd(&P.tickets[o], 1u);
    asm volatile("bar.sync 1, 128;");
    if (ticket != (unsigned)(P.nchunk - 1)) return;
    __threadfence();
    /* canonical merge of the chunks: binary counter over chunk sizes */
    st4 stack[STACK_MAX];
    long long sizes[STACK_MAX];
    int top = -1;
    const float *base = P.chunk_states + o * P.nchunk * (3 * 512);
    for (long long k = 0; k < P.nchunk; k++) {
        long long s0, sz;
        chunk_of(P.nseg, P.ch, k, &s0, &sz);
        const float *src = base + k * (3 * 512);
        top++;
#pragma unroll
        for (int t = 0; t < 4; t++) {
            stack[top].m[t] = __ldcg(src + 4 * q + t);
            stack[top].d[t] = __ldcg(src + 512 + 4 * q + t);
            stack[top].n[t] = __ldcg(src + 1024 + 4 * q + t);
        }
        sizes[top] = sz;
        while (top >= 1 && sizes[top - 1] == sizes[top]) {
            st_merge(stack[top - 1], stack[top]);
            sizes[top - 1] *= 2;
            top--;
        }
    }
    for (int k = top - 1; k >= 0; k--) st_merge(stack[k], stack[k + 1]);
    float c[4];
#pragma unroll
    for (int k = 0; k < 4; k++) c[k] = KVC_DIV(stack[0].n[k], stack[0].d[k]);
    finalize(P, inf, c, q, red);
}

/* ---- host side --------------------------------------------------------- */

typedef struct {
    void *buf;
    size_t bytes;
} device_ws;

static pthread_mutex_t g_ws_lock = PTHREAD_MUTEX_INITIALIZER;
static device_ws g_ws[64];

static kvc_status cuda_fail(cudaError_t e, const char *what) {
    return kvc_fail(KVC_ERROR_DEVICE, "CUDA %s: %s", what, cudaGetErrorString(e));
}

extern "C" int kvc_cuda_available(void) {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

extern "C" int kvc_cuda_is_device_pointer(const void *p) {
    cudaPointerAttributes at;
    if (cudaPointerGetAttributes(&at, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

static long long pow2_floor(long long x) {
    long long p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

extern "C" kvc_status kvc_cuda_compress(const kvc_args *a, const kvc_exec *e, kvc_report *rep) {
    int dev = e->device;
    cudaError_t err;
    if (dev < 0) {
        if ((err = cudaGetDevice(&dev)) != cudaSuccess) return cuda_fail(err, "cudaGetDevice");
    } else if ((err = cudaSetDevice(dev)) != cudaSuccess) {
        return cuda_fail(err, "cudaSetDevice");
    }
    if (dev >= 64) return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "CUDA device %d >= 64", dev);
    cudaStream_t stream = (cudaStream_t)e->stream;
    if (rep) {
        rep->outputs_written = rep->outputs_padding = rep->outputs_nonfinite = -1;
        rep->device_async = 1;
    }
    launch_params P;
    memset(&P, 0, sizeof P);
    P.a = *a;
    const long long C = a->compress_ratio;
    P.rows = a->overlap == KVC_OVERLAP_ON ? 2 * C : C;
    P.nseg = (P.rows + KVC_SEG - 1) / KVC_SEG;
    const long long nout = a->num_outputs;
    /* chunk size: enough CTAs to fill the GPU, as few chunk states as that allows */
    const long long total = nout * P.nseg;
    long long K = pow2_floor(total / 2048 > 0 ? total / 2048 : 1);
    if (K > 8) K = 8;
    long long L = 2;
    long long ch = K * L;
    while (ch > P.nseg && ch > 1) ch /= 2;
    if (ch < L) L = ch;
    P.ch = ch;
    P.lanes = (int)L;
    P.nchunk = P.nseg / ch;
    for (long long r = P.nseg % ch; r; r &= r - 1) P.nchunk++;
    P.vec = ((uintptr_t)a->state_cache % 16 == 0) && a->state_stride_block % 4 == 0 && a->state_stride_token % 4 == 0;

    /* workspace: status word, tickets, chunk states */
    size_t st_bytes = 256, tk_bytes = ((size_t)nout * 4 + 255) & ~(size_t)255;
    size_t cs_bytes = P.nchunk > 1 ? (size_t)nout * (size_t)P.nchunk * 3 * 512 * 4 : 0;
    size_t need = st_bytes + tk_bytes + cs_bytes;
    pthread_mutex_lock(&g_ws_lock);
    device_ws *ws = &g_ws[dev];
    if (ws->bytes < need) {
        if (ws->buf) cudaFree(ws->buf);
        ws->buf = NULL;
        ws->bytes = 0;
        size_t grow = need + need / 4;
        if ((err = cudaMalloc(&ws->buf, grow)) != cudaSuccess) {
            pthread_mutex_unlock(&g_ws_lock);
            return kvc_fail(KVC_ERROR_OUT_OF_MEMORY, "CUDA workspace of %zu bytes: %s", grow, cudaGetErrorString(err));
        }
        ws->bytes = grow;
    }
    char *buf = (char *)ws->buf;
    pthread_mutex_unlock(&g_ws_lock);
    P.status = e->device_status ? e->device_status : (kvc_device_status *)buf;
    P.tickets = (unsigned *)(buf + st_bytes);
    P.chunk_states = (float *)(buf + st_bytes + tk_bytes);
    if ((err = cudaMemsetAsync(P.status, 0, sizeof(kvc_device_status), stream)) != cudaSuccess)
        return cuda_fail(err, "cudaMemsetAsync(status)");
    if (nout == 0) return KVC_OK;
    if (P.nchunk > 1 && (err = cudaMemsetAsync(P.tickets, 0, (size_t)nout * 4, stream)) != cudaSuccess)
        return cuda_fail(err, "cudaMemsetAsync(tickets)");
    long long blocks = nout * P.nchunk;
    if (blocks > 0x7FFFFFFFLL)
        return kvc_fail(KVC_ERROR_BAD_SHAPE, "num_outputs * chunks = %lld exceeds the CUDA grid", blocks);
    size_t smem = (MAX_LANES * 12 * DG + 8) * sizeof(float);
    compress_kernel<<<(unsigned)blocks, (unsigned)(DG * L), smem, stream>>>(P);
    if ((err = cudaGetLastError()) != cudaSuccess) return cuda_fail(err, "kernel launch");
    return KVC_OK;
}

extern "C" kvc_status kvc_cuda_read_status_impl(const kvc_exec *e, kvc_device_status *out) {
    int dev = e && e->device >= 0 ? e->device : -1;
    cudaError_t err;
    if (dev < 0 && (err = cudaGetDevice(&dev)) != cudaSuccess) return cuda_fail(err, "cudaGetDevice");
    if (dev >= 64) return kvc_fail(KVC_ERROR_BACKEND_UNAVAILABLE, "CUDA device %d >= 64", dev);
    const void *src = e && e->device_status ? (const void *)e->device_status : g_ws[dev].buf;
    if (!src) {
        memset(out, 0, sizeof *out);
        return KVC_OK;
    }
    cudaStream_t stream = e ? (cudaStream_t)e->stream : 0;
    if ((err = cudaMemcpyAsync(out, src, sizeof *out, cudaMemcpyDeviceToHost, stream)) != cudaSuccess)
        return cuda_fail(err, "cudaMemcpyAsync(status)");
    if ((err = cudaStreamSynchronize(stream)) != cudaSuccess) return cuda_fail(err, "cudaStreamSynchronize");
    return KVC_OK;
}
