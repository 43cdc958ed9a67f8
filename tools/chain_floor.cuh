/*
 * chain_floor.cuh -- the chain floor of a CUDA case: what any kernel of the
 * contract does before it can reduce a window -- output -> boundary token ->
 * (slot, request, position) -> block table -> the window's rows -- with no
 * arithmetic and no write.  A CTA of 256 threads per 8 rows of PER
 * outputs (1, or 4 at head width 128 where the call has more than 4
 * outputs an SM: then a thread reads the bytes it reads at width 512;
 * grid.y: the window's 8-row chunks): their rows resolved at once (a thread
 * a row), then every row's value and score columns read with streaming
 * loads, all in flight together (the bytes of read_floor.cuh's floor less
 * the slot and the score bias, gathered as the call gathers them).
 * `kvcompress bench` times it beside the floor: the floor is what bandwidth
 * allows, the chain floor what the index chain's dependent loads allow on
 * top (decode-sized calls).
 */
#ifndef KVC_CHAIN_FLOOR_CUH
#define KVC_CHAIN_FLOOR_CUH

#include "kvc_check.h"

#define CHAIN_THREADS 256
#define CHAIN_ROWS 8 /* rows a CTA */
#define CHAIN_BATCH 8 /* loads in flight per thread */

/* 4 elements at element offset o: 16 bytes of float32 or 8 of bf16 */
template <bool BF16> struct chain_elem;
template <> struct chain_elem<false> {
    typedef float4 T;
    static __device__ T load(const char *s, long long o) { return __ldcs((const float4 *)(s + o * 4)); }
    static __device__ float sum(T v) { return v.x + v.y + v.z + v.w; }
};
template <> struct chain_elem<true> {
    typedef uint2 T;
    static __device__ T load(const char *s, long long o) { return __ldcs((const uint2 *)(s + o * 2)); }
    static __device__ float sum(T v) { return __uint_as_float(v.x ^ v.y); }
};

/* a: resolved (kvc_resolve_strides), device pointers, head width 128 or
 * 512 (PER = 4: 128); grid (ceil(outputs / PER), chunks of CHAIN_ROWS rows) */
template <bool BF16, int PER>
__global__ void __launch_bounds__(CHAIN_THREADS) chain_kernel(const kvc_args a, float *sink) {
    typedef chain_elem<BF16> E;
    constexpr int TPO = CHAIN_THREADS / PER; /* threads an output */
    /* output k's row-half h of row r: off[k][2r + h], element offset; -1: none */
    __shared__ long long off[PER][2 * CHAIN_ROWS];
    const int k = PER == 1 ? 0 : threadIdx.x / TPO, t = PER == 1 ? threadIdx.x : threadIdx.x % TPO;
    const long long o = (long long)blockIdx.x * PER + k;
    kvc_out_info inf;
    const int live = o < a.num_outputs && kvc_check_output(&a, o, &inf, 0) == KVC_CHECK_NONE && inf.slot >= 0;
    if (PER == 1 && !live) return; /* (the CTA's one output) */
    const int D = a.head_dim, ovl = a.overlap == KVC_OVERLAP_ON, q = D / 4; /* 4-element groups a half row */
    const long long rows = kvc_window_rows(a.compress_ratio, ovl);
    const char *state = (const char *)a.state_cache;
    const int g = t % q, step = TPO / q;
    float acc = 0.f;
    const long long r0 = (long long)blockIdx.y * CHAIN_ROWS;
    const int n = live ? (int)(rows - r0 < CHAIN_ROWS ? rows - r0 : CHAIN_ROWS) : 0;
    if (t < n) {
        int vo, so;
        const long long pos = kvc_window_row(inf.p, a.compress_ratio, ovl, D, r0 + t, &vo, &so);
        long long blk = -1;
        if (pos >= 0) blk = a.block_table[inf.r * a.block_table_stride + pos / a.block_size];
        const int ok = pos >= 0 && blk >= 0 && blk < a.num_blocks;
        const long long row = ok ? kvc_state_row_offset(&a, blk, pos) : 0;
        off[k][2 * t] = ok ? row + vo : -1;
        off[k][2 * t + 1] = ok ? row + so : -1;
    }
    __syncthreads();
    for (int h0 = t / q; h0 < 2 * n; h0 += CHAIN_BATCH * step) {
        typename E::T v[CHAIN_BATCH];
#pragma unroll
        for (int u = 0; u < CHAIN_BATCH; u++) {
            const int h = h0 + u * step;
            const long long e = h < 2 * n ? off[k][h] : -1;
            if (e >= 0) v[u] = E::load(state, e + 4 * g);
            else memset(&v[u], 0, sizeof v[u]);
        }
#pragma unroll
        for (int u = 0; u < CHAIN_BATCH; u++) acc += E::sum(v[u]);
    }
    if (acc == 1234.5f) *sink = acc; /* keeps the loads */
}

#endif
