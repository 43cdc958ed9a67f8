/*
 * chain_floor.cuh -- the chain floor of a CUDA case: what any kernel of the
 * contract does before it can reduce a window -- output -> boundary token ->
 * (slot, request, position) -> block table -> the window's rows -- with no
 * arithmetic and no write.  One CTA of 128 threads per output; every row's
 * value and score columns read once with streaming loads, as the call
 * gathers them (the bytes of read_floor.cuh's floor less the slot and the
 * score bias).  `kvcompress bench` times it beside the floor: the floor is
 * what bandwidth allows, the chain floor what the dependent loads of the
 * index chain allow on top (decode-sized calls, SPEC 6).
 */
#ifndef KVC_CHAIN_FLOOR_CUH
#define KVC_CHAIN_FLOOR_CUH

#include "kvc_check.h"

#define CHAIN_THREADS 128

/* a: resolved (kvc_resolve_strides), device pointers; one CTA per output */
__global__ void __launch_bounds__(CHAIN_THREADS) chain_kernel(const kvc_args a, float *sink) {
    kvc_out_info inf;
    if (kvc_check_output(&a, blockIdx.x, &inf, 0) != KVC_CHECK_NONE || inf.slot < 0) return;
    const int D = a.head_dim, ovl = a.overlap == KVC_OVERLAP_ON, bf16 = a.state_dtype == KVC_STATE_BFLOAT16;
    const long long rows = kvc_window_rows(a.compress_ratio, ovl);
    const char *state = (const char *)a.state_cache;
    float acc = 0.f;
#pragma unroll 8
    for (long long i = 0; i < rows; i++) {
        int vo, so;
        const long long pos = kvc_window_row(inf.p, a.compress_ratio, ovl, D, i, &vo, &so);
        if (pos < 0) continue;
        const long long blk = a.block_table[inf.r * a.block_table_stride + pos / a.block_size];
        if (blk < 0 || blk >= a.num_blocks) continue;
        const long long row = kvc_state_row_offset(&a, blk, pos);
        for (int d = 4 * threadIdx.x; d < D; d += 4 * CHAIN_THREADS) {
            if (bf16) { /* 4 values and 4 scores of 2 bytes */
                const uint2 v = __ldcs((const uint2 *)(state + (row + vo + d) * 2));
                const uint2 s = __ldcs((const uint2 *)(state + (row + so + d) * 2));
                acc += __uint_as_float(v.x ^ v.y ^ s.x ^ s.y);
            } else {
                const float4 v = __ldcs((const float4 *)(state + (row + vo + d) * 4));
                const float4 s = __ldcs((const float4 *)(state + (row + so + d) * 4));
                acc += v.x + v.y + v.z + v.w + s.x + s.y + s.z + s.w;
            }
        }
    }
    if (acc == 1234.5f) *sink = acc; /* keeps the loads */
}

#endif
