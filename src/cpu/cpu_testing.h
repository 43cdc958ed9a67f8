/*
 * cpu_testing.h -- the CPU backend's test entry points (tests/test_units.c).
 * They exist only in the test build of the library (kvcompress_testing,
 * compiled with KVC_TEST_HOOKS): the installed library has none of them.
 */
#ifndef KVC_CPU_TESTING_H
#define KVC_CPU_TESTING_H

#include <stdint.h>

#include "cpu_simd.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The segment loop's and finaliser's forms a call takes: KVC_CPU_ISA_AUTO
 * (the widest the CPU has), _PORTABLE or _AVX2 (what a CPU with AVX2 and
 * FMA but no AVX-512F runs).  Set it only while no call runs. */
KVC_HIDDEN void kvc_cpu_force_isa(int isa);
/* The AVX-512F and AVX2 exps of the segment loops against kvc_exp on
 * every stride-th non-positive float (and -Inf, NaNs, +0): *bad16, *bad8
 * receive the number of differing results of each, -1 where the CPU lacks
 * its instructions. */
KVC_HIDDEN void kvc_cpu_exp_mismatches(uint32_t stride, int64_t *bad16, int64_t *bad8);
/* The AVX-512F finaliser against kvc_finalize_slot (head_dim 512) or
 * kvc_finalize_indexer (128: both indexer formats, rotation on and off) on
 * `trials` random inputs from `seed` (both formats and cos/sin layouts,
 * NaN / Inf / zero windows, overflowing and vanishing sums): @return the
 * number whose bytes differ, -1 without AVX-512F. */
KVC_HIDDEN int64_t kvc_cpu_finalize_mismatches(int trials, uint64_t seed, int head_dim);

#ifdef __cplusplus
}
#endif
#endif
