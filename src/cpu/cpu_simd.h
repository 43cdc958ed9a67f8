/*
 * cpu_simd.h -- what the CPU backend's files share about its SIMD forms.
 *
 * x86-64 with GCC or clang: AVX-512F forms of the segment loop
 * (cpu_backend.c) and of the finaliser (cpu_finalize.c), taken at run time
 * where the CPU has AVX-512F.  They compute SPEC 3's operations in SPEC 3's
 * order, so the bytes never depend on which form ran.
 */
#ifndef KVC_CPU_SIMD_H
#define KVC_CPU_SIMD_H

#include <stdint.h>

#include "kvc_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(KVC_NO_TARGET_CLONES)
#define KVC_CPU_AVX512 1
#else
#define KVC_CPU_AVX512 0
#endif

#if KVC_CPU_AVX512
/**
 * kvc_finalize_slot (kvc_canon.h) in AVX-512F: the same arguments, the same
 * bytes.  c[512] the reduced window, y[512] scratch, w[512] the RMSNorm
 * weight (bf16 bits), cs the cos/sin row; payload[576] and scales[8] the
 * slot.  @return 1 if the slot was written as non-finite.  Callers check
 * for AVX-512F first.
 */
KVC_HIDDEN int kvc_cpu_finalize_avx512(const float *c, float *y, const uint16_t *w, const float *cs, int interleaved,
                                       float eps, int fp8, uint8_t *payload, uint8_t *scales);
#endif

#endif /* KVC_CPU_SIMD_H */
