/*
 * cuda_pages.cuh -- the page path of the main kernel (compress_kernel<0,
 * true>): a chunk's segments come into shared memory by bulk copies instead
 * of register loads.  Included by cuda_kernels.cuh (the host launches it for
 * DPT = 1, exact and FAST); uses its stv, seg_data, seg_compute, st_merge and
 * row_table.
 *
 * The CTA (one lane of DG threads, thread q = dims DPT q ..) owns PAGE_NS stages of one segment
 * each: [8 rows][1024 floats], a row's value and score halves as in the
 * state cache.  Warp 0 fills a stage with 8 row copies of 4 KiB (one per
 * lane, completing on the stage's mbarrier) as soon as the chunk's rows are
 * resolved, so that PAGE_NS segments are in flight from the start; a stage
 * is refilled with the segment PAGE_NS ahead once every thread has read it
 * (one CTA barrier per segment).  Two CTAs per SM.  The segments reduce in
 * the canonical tree (page_subtree), and the rest of the kernel (chunk
 * states, ticket, finaliser) is the register path's.
 *
 * Needs: full segments without overlap, every row 16-byte aligned (the
 * host's page_ok), sm_90 and newer.
 */
#define PAGE_NS KVC_CUDA_PAGE_STAGES
#define PAGE_FLOATS (KVC_SEG * 1024) /* one stage: 8 rows of 1024 floats */
#define PAGE_STAGE_OFF 2048          /* floats: the stages follow the kernel's 3 x 512 state floats */

/* Warp 0: stage st <- local rows lr .. lr + 7 (8 copies of 4 KiB). */
__device__ __forceinline__ void page_fill(const launch_params &P, const row_table *rt, int lr, float *st,
                                          unsigned long long *bar) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    const int lane = threadIdx.x;
    if (lane == 0) {
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); /* the stage's last reads before the copy */
        mbar_expect(bar, PAGE_FLOATS * 4);
    }
    __syncwarp();
    if (lane < KVC_SEG) mbar_copy(st + lane * 1024, P.a.state_cache + rt->voff[lr + lane], 4096, bar);
#endif
}

/* The chunk's segment j (local rows 8j ..): wait for its stage, read thread q's dims
 * of its 8 rows, hand the stage back (refilled with segment j + PAGE_NS when
 * the chunk has one: nseg segments), reduce. */
__device__ __forceinline__ stv page_segment(const launch_params &P, const row_table *rt, float *stages,
                                            unsigned long long *bars, int j, int nseg, int q) {
    seg_data x;
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    const int s = j % PAGE_NS;
    float *st = stages + s * PAGE_FLOATS;
    mbar_wait(bars + s, (unsigned)(j / PAGE_NS) & 1u);
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++)
#pragma unroll
        for (int d = 0; d < DPT; d++) {
            x.v[i][d] = st[i * 1024 + DPT * q + d];
            x.s[i][d] = st[i * 1024 + 512 + DPT * q + d];
        }
    __syncthreads();
    if (threadIdx.x < 32 && j + PAGE_NS < nseg) page_fill(P, rt, (j + PAGE_NS) * KVC_SEG, st, bars + s);
#endif
    return seg_compute(x, KVC_SEG);
}

/* A complete subtree of KK segments from the chunk's segment j (canonical order). */
template <int KK>
__device__ __forceinline__ stv page_subtree(const launch_params &P, const row_table *rt, float *stages,
                                            unsigned long long *bars, int j, int nseg, int q) {
    if constexpr (KK == 1) {
        return page_segment(P, rt, stages, bars, j, nseg, q);
    } else {
        stv A = page_subtree<KK / 2>(P, rt, stages, bars, j, nseg, q);
        const stv B = page_subtree<KK / 2>(P, rt, stages, bars, j + KK / 2, nseg, q);
        st_merge(A, B);
        return A;
    }
}

/* The chunk's state: its nseg (a power of two <= MAX_CH) segments, whose rows
 * rt holds; every thread of the CTA calls (bars initialised, rt published). */
__device__ stv page_chunk(const launch_params &P, const row_table *rt, float *stages, unsigned long long *bars,
                          int nseg, int q) {
    if (threadIdx.x < 32)
        for (int s = 0; s < PAGE_NS && s < nseg; s++) page_fill(P, rt, s * KVC_SEG, stages + s * PAGE_FLOATS, bars + s);
    switch (nseg) {
    case 1: return page_subtree<1>(P, rt, stages, bars, 0, nseg, q);
    case 2: return page_subtree<2>(P, rt, stages, bars, 0, nseg, q);
    case 4: return page_subtree<4>(P, rt, stages, bars, 0, nseg, q);
    case 8: return page_subtree<8>(P, rt, stages, bars, 0, nseg, q);
    default: return page_subtree<16>(P, rt, stages, bars, 0, nseg, q);
    }
}

/* Thread 0: the stage barriers, before the CTA barrier that publishes rt. */
__device__ __forceinline__ void page_init(unsigned long long *bars) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
    for (int s = 0; s < PAGE_NS; s++) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(mbar_su32(bars + s)));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

constexpr size_t kPageSmem = (PAGE_STAGE_OFF + PAGE_NS * PAGE_FLOATS) * sizeof(float);
