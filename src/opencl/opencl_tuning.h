/*
 * opencl_tuning.h -- the OpenCL backend's tuning constants, each the winner
 * of an A/B measurement on the H200 through NVIDIA's driver.
 */
#ifndef KVC_OPENCL_TUNING_H
#define KVC_OPENCL_TUNING_H

/* chunk size ~ total segments / 132: about one wave of work-groups (several
 * waves of shorter chunks were slower at 32k-65k tokens) */
#define KVC_OPENCL_CHDIV 132
/* chunks per output at most: the last group's merge loads all chunk states first */
#define KVC_OPENCL_MAXCHUNKS 8
/* segments per chunk at most (the kernel's row table: 128 x 8 rows in local
 * memory); passed to the kernel build as KVC_CL_MAX_CH */
#define KVC_OPENCL_MAX_CH 128
/* one-segment kernel: outputs per work-group at most (its tables in local
 * memory); passed to the kernel build as KVC_CL_SMALL_K */
#define KVC_OPENCL_SMALL_K 32
/* one-segment kernel: groups per compute unit the waves are balanced for,
 * and on NVIDIA held resident by .minnctapersm (<= 80 registers; as built,
 * some forms of it ran 2 groups per SM, 16% slower at 4 x 131072 C4
 * tokens).  2 was 11% slower at 4 x 32768 C4 tokens, 4 slower everywhere */
#define KVC_OPENCL_SMALL_SLOTS 3
/* NVIDIA: .minnctapersm for the wide kernel (64 registers, 32 warps per SM;
 * 80 registers as built); the 2-dims kernel stays as built (3 and 4 spilled
 * and were slower) */
#define KVC_OPENCL_NV_MINB_WIDE 2
/* NVIDIA: .minnctapersm for the slice kernels (4 groups of 256 per SM:
 * <= 64 registers; 3 was 8% slower at 131k tokens) */
#define KVC_OPENCL_NV_MINB_SLICE 4
/* ... for the score-bias slice kernels: with a float32 state 2 groups
 * (<= 128 registers; at 3 they ran 5% slower, at 4 43%), bf16 3 (<= 80;
 * at 2 or as built 12% slower, at 4 14%) */
#define KVC_OPENCL_NV_MINB_BIAS_SLICE 2
#define KVC_OPENCL_NV_MINB_BF16_BIAS_SLICE 3
/* indexer kernel: outputs per work-group at most (KVC_CL_IDX_K) and groups
 * per compute unit the waves are balanced for, on NVIDIA held resident by
 * .minnctapersm (<= 128 registers; the one-segment kernel's 3 groups of
 * 32 outputs, as built, were slower at 4 x 32768 and 4 x 131072 C4 tokens) */
#define KVC_OPENCL_IDX_K 96
#define KVC_OPENCL_IDX_SLOTS 2

/* per-queue workspaces and per-context programs kept before the least
 * recently used are freed (a program rebuilds in about a second) */
#define KVC_OPENCL_QUEUES_KEPT 64
#define KVC_OPENCL_CONTEXTS_KEPT 8

#endif
