/*
 * cuda_mbar.cuh -- the mbarrier and bulk-copy helpers of the kernels that
 * stage state rows in shared memory by TMA (the ring, burst and page paths).
 * Included by cuda_kernels.cuh in every namespace; sm_90 and newer only.
 */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
__device__ __forceinline__ unsigned mbar_su32(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity) {
    asm volatile("{\n\t.reg .pred P1;\n\tW_%=:\n\tmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n\t"
                 "@!P1 bra W_%=;\n\t}" ::"r"(mbar_su32(bar)),
                 "r"(parity)
                 : "memory");
}
/* Lane 0: an arrival on stage barrier bar that expects `bytes` of copies. */
__device__ __forceinline__ void mbar_expect(unsigned long long *bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(mbar_su32(bar)), "r"(bytes)
                 : "memory");
}
/* One contiguous copy of `bytes` (a multiple of 16, both addresses 16-byte
 * aligned) from global src to shared dst, completing on mbarrier bar. */
__device__ __forceinline__ void mbar_copy(void *dst, const void *src, unsigned bytes, unsigned long long *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     mbar_su32(dst)),
                 "l"(src), "r"(bytes), "r"(mbar_su32(bar))
                 : "memory");
}
#endif
