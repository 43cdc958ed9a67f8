/*
 * cuda_cluster.cuh -- the cluster kernel: windows of S full segments without
 * overlap, S a power of two (2..64).  Included by cuda_kernels.cuh for
 * DPT = 2 (exact and FAST); uses its seg_data, seg_load, seg_load_full,
 * seg_compute, red_merge, record_error, count, fin_* and finalize.
 *
 * Work: one thread-block cluster of N = S / L CTAs per output (N <= 16).
 * CTA rank r has L lanes of DG = 256 threads; lane l reduces segment
 * r L + l, thread q dims 2q, 2q + 1:
 *   1. warp 0 runs the output's checks and resolves the CTA's 8 L rows (one
 *      lane per row, each row's block checked) into shared memory;
 *   2. every thread issues its segment's 16 loads at once, then reduces
 *      them: small CTAs, several per SM, keep the window in flight without
 *      prefetch code, and each segment is reduced as soon as it lands;
 *   3. the L lane states merge in tree order through shared memory into the
 *      CTA's state (a complete subtree of L segments);
 *   4. cluster barrier; rank r merges dims (512 / N) r .. + 512 / N over
 *      the N ranks' states (distributed shared memory, tree order) and
 *      writes their c into rank 0;
 *   5. cluster barrier; rank 0's first 128 threads finalise the slot.
 * No global workspace.  A bad row (its block out of range) marks its CTA;
 * rank 0 reads the marks after the first barrier and skips the output.
 * Needs <cooperative_groups.h> (included by cuda_backend.cu, outside the
 * namespaces).
 */
template <int L>
struct cl_shared {
    float st[3][512];                         /* the CTA's state: m, d, n per dim            */
    float scratch[L > 1 ? L / 2 : 1][3][512]; /* lane states during the lane merge           */
    float c[512];                             /* rank 0: c, written by every rank's mergers   */
    float red[8];                             /* rank 0: the finaliser's scratch             */
    float hi[3][32];                          /* N = 16: ranks 8..15's subtree of a dim      */
    long long voff[8 * L], soff[8 * L];       /* the CTA's rows (seg_load's table)           */
    long long slot, pc, value, bad_g, first_bad_g;
    int chk, bad, any_bad;
};

template <int L>
__global__ void __launch_bounds__(DG * L, 4 / L) cluster_kernel(const __grid_constant__ launch_params P) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* the host launches it on sm_90 and newer only */
    namespace cg = cooperative_groups;
    __shared__ cl_shared<L> S;
    cg::cluster_group cl = cg::this_cluster();
    const int N = (int)cl.num_blocks(), rank = (int)cl.block_rank();
    const long long o = blockIdx.x / N;
    const int tid = threadIdx.x, q = tid % DG, lane = tid / DG;
    fin_in f;
    if (rank == 0) fin_load_weights(P, tid, f); /* threads < 128: the finaliser's */
    if (tid < 32) {
        kvc_out_info inf;
        const int chk = kvc_check_output(&P.a, o, &inf, 0);
        int bad = 0;
        kvc_i64 blk = 0;
        if (chk == KVC_CHECK_NONE && inf.slot >= 0 && tid < 8 * L) {
            const kvc_shape sh = kvc_shape_of(&P.a);
            const kvc_i32 *trow = P.a.block_table + inf.r * P.a.block_table_stride;
            const long long off = kvc_row_lookup(&sh, trow, inf.p, (long long)rank * (8 * L) + tid, &blk);
            bad = off == KVC_ROW_BAD;
            S.voff[tid] = off;
            S.soff[tid] = off + 512;
        }
        const unsigned badm = __ballot_sync(0xffffffffu, bad);
        const long long g = __shfl_sync(0xffffffffu, (long long)blk, badm ? __ffs(badm) - 1 : 0);
        if (tid == 0) {
            S.chk = chk;
            S.slot = inf.slot;
            S.pc = inf.pc;
            S.value = inf.value;
            S.bad = badm != 0;
            S.bad_g = g;
        }
    }
    __syncthreads();
    if (S.chk != KVC_CHECK_NONE || S.slot < 0) { /* the same in every CTA of the cluster: all leave */
        if (rank == 0 && tid == 0) {
            if (S.chk != KVC_CHECK_NONE) {
                record_error(P.status, S.chk, o, S.value);
                count(&P.status->outputs_invalid);
            } else {
                count(&P.status->outputs_padding);
            }
        }
        return;
    }
    if (rank == 0) fin_load_cos_sin(P, S.pc, tid, f);
    const int bad = S.bad;
    stv st;
    if (!bad) {
        seg_data x;
        if (P.pl.vec) seg_load_full(P, &S, lane * KVC_SEG, q, x);
        else seg_load(P, &S, lane * KVC_SEG, KVC_SEG, q, x);
        st = seg_compute(x, KVC_SEG);
    }
    /* lanes: a complete subtree of L segments, in tree order */
#pragma unroll
    for (int w = 1; w < L; w *= 2) {
        if (lane % (2 * w) == w) st_store(st, &S.scratch[lane / (2 * w)][0][0], q);
        __syncthreads();
        if (lane % (2 * w) == 0) {
            const stv B = st_load_shared(&S.scratch[lane / (2 * w)][0][0], q);
            if (!bad) st_merge(st, B);
        }
        __syncthreads();
    }
    if (lane == 0) st_store(st, &S.st[0][0], q);
    cl.sync(); /* every rank's state (and bad mark) is in its shared memory */

    /* dim dm over the N ranks, tree order: thread t < 512 / N of the rank
     * merges ranks 0..7 of dim dm, and for N = 16 thread t + 512 / N ranks
     * 8..15, handed over through shared memory (8 states per thread: no spills) */
    const int per = 512 / N, h = tid / per, dm = per * rank + tid % per, nk = N < 8 ? N : 8;
    float m[8], d[8], n[8];
    if (h < N / nk) {
#pragma unroll
        for (int k = 0; k < 8; k++)
            if (k < nk) {
                const cl_shared<L> *R = cl.map_shared_rank(&S, 8 * h + k);
                m[k] = R->st[0][dm];
                d[k] = R->st[1][dm];
                n[k] = R->st[2][dm];
            }
#pragma unroll
        for (int w = 1; w < 8; w *= 2)
#pragma unroll
            for (int k = 0; k + w < 8; k += 2 * w)
                if (k + w < nk) red_merge(&m[k], &d[k], &n[k], m[k + w], d[k + w], n[k + w]);
        if (h == 1) {
            S.hi[0][tid % per] = m[0];
            S.hi[1][tid % per] = d[0];
            S.hi[2][tid % per] = n[0];
        }
    }
    __syncthreads();
    if (h == 0) {
        if (N == 16) red_merge(&m[0], &d[0], &n[0], S.hi[0][tid], S.hi[1][tid], S.hi[2][tid]);
        cl.map_shared_rank(&S, 0)->c[dm] = KVC_DIV(n[0], d[0]);
    }
    if (rank == 0 && tid == 0) { /* any rank's bad mark: the first in rank order */
        int any = 0;
        long long g = 0;
        for (int k = N - 1; k >= 0; k--) {
            const cl_shared<L> *R = cl.map_shared_rank(&S, k);
            if (R->bad) any = 1, g = R->bad_g;
        }
        S.any_bad = any;
        S.first_bad_g = g;
    }
    cl.sync(); /* c complete in rank 0; no rank reads another's memory after this */
    if (rank != 0 || tid >= 128) return;
    if (S.any_bad) {
        if (tid == 0) {
            record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, o, S.first_bad_g);
            count(&P.status->outputs_invalid);
        }
        return;
    }
    float c[4];
#pragma unroll
    for (int j = 0; j < 4; j++) c[j] = S.c[4 * tid + j];
    if (tid == 0) count(&P.status->outputs_written);
    const int nonfinite = finalize(P, S.slot, c, tid, S.red, f);
    if (tid == 0 && nonfinite) count(&P.status->outputs_nonfinite);
#endif
}
