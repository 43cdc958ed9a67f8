/*
 * cuda_tuning.h -- the CUDA backend's tuning constants, each the winner of
 * an A/B measurement on the H200: the
 * chunked and one-segment kernels' here; the slice kernels' (256 threads,
 * 4 CTAs per SM, the token stride 1024 compiled in) are their launch
 * bounds and template arguments in cuda_slice.cuh.
 */
#ifndef KVC_CUDA_TUNING_H
#define KVC_CUDA_TUNING_H

/* main kernel: resident CTAs per SM asked of the compiler (64 registers);
 * 3-4 spilled the hot loop, 1 left HBM idle) */
#define KVC_CUDA_MINB 2
/* chunk size ~ total segments / 132: about one wave of CTAs (264 and 528
 * were slower at 32k/65k tokens) */
#define KVC_CUDA_CHDIV 132
/* segments per chunk at most: 2 lanes x 8 (16 per lane was slower at 131k
 * tokens, C >= 256) */
#define KVC_CUDA_MAX_CH 16
/* chunks per output at most: the last CTA's merge loads all chunk states first */
#define KVC_CUDA_MAXCHUNKS 8
/* lanes per CTA at 2 dims per thread (1 lane at 3-4 CTAs/SM was slower at 131k tokens) */
#define KVC_CUDA_LANES 2
/* one-segment kernel: resident CTAs per SM (4, with KVC_CUDA_SMALL_K 96, was slower at every C4 size) */
#define KVC_CUDA_SMALL_MINB 3
/* ... EXACT with a bf16 state (64 registers: 4 was faster at 65k / 131k tokens, with a score bias too;
 * FAST, at 65k, slower) */
#define KVC_CUDA_SMALL_MINB16 4
/* one-segment kernel: outputs per CTA at most (K is balanced over whole waves
 * per call; 96 puts 4 x 131072 C4 tokens in one wave of K = 83, faster than
 * three of 28 or two of 42) */
#define KVC_CUDA_SMALL_K 96

/* stream workspaces kept before idle ones are freed (least recently used first) */
#define KVC_CUDA_STREAMS_KEPT 64

#endif
