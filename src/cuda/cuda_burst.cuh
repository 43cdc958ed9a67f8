/*
 * cuda_burst.cuh -- the burst kernel: EXACT windows of 64 full segments (C =
 * 512, where the ring kernel spills and the chunked kernel is slowest) in
 * calls of more outputs than half the SMs.  Included by cuda_kernels.cuh
 * after cuda_ring.cuh (DPT = 2, EXACT only); uses the ring's helpers.
 *
 * Work: one output per CTA of 16 warps, all CTAs launched at once (one per
 * SM resident).  Warp w reduces half w % 2 (S / 2 consecutive segments: the
 * two subtrees under the window's root) of slice w / 2: its segments come
 * through two shared-memory stages (ring_fill: a tensor copy or per-row bulk
 * copies) into a register binary counter.  The two half states of a slice
 * merge in tree order through shared memory, c goes to shared memory, and
 * the first 128 threads finalise the slot (finalize, as the chunked kernel).
 * No workspace.
 *
 * Shared memory, kBurstSmem bytes in all:
 *   stages  [16 warps][2][1024 floats]: rows 0-7 x (64 values, 64 scores)
 *   out     ring_out: the output as warp 0 resolved it
 *   xch     burst_x: c and the slices' bad-row marks
 *   marks   [16 warps] ring_mark: bad rows of the warp's per-row copies
 *   states  [8 slices][32 lanes] stv: the second halves' states
 *   bars    [16 warps][2] stage mbarriers
 */
#define BURST_WARPS 16
#define BURST_STAGE 1024 /* floats per stage */

/* c and the slices' bad-row marks (shared memory). */
struct burst_x {
    float c[512];
    float red[8]; /* the finaliser's scratch */
    int rowbad[8];
    long long rowbad_g[8];
};

constexpr size_t kBurstSmem = (size_t)BURST_WARPS * 2 * BURST_STAGE * 4 + sizeof(ring_out) + sizeof(burst_x) +
                              BURST_WARPS * sizeof(ring_mark) + 8 * 32 * sizeof(stv) + BURST_WARPS * 2 * 8;

/* CS: segments per half window (S = 2 CS). */
template <int CS>
__global__ void __launch_bounds__(BURST_WARPS * 32, 1) burst_kernel(const __grid_constant__ launch_params P) {
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900 /* the host launches it on sm_90 and newer only */
    constexpr int LEVELS = CS == 4 ? 2 : CS == 8 ? 3 : CS == 16 ? 4 : 5;
    static_assert((1 << LEVELS) == CS, "CS: 4, 8, 16 or 32");
    extern __shared__ __align__(128) unsigned char bsm[];
    float *stages = reinterpret_cast<float *>(bsm);
    ring_out *d = reinterpret_cast<ring_out *>(stages + BURST_WARPS * 2 * BURST_STAGE);
    burst_x *X = reinterpret_cast<burst_x *>(d + 1);
    ring_mark *marks = reinterpret_cast<ring_mark *>(X + 1);
    stv *states = reinterpret_cast<stv *>(marks + BURST_WARPS); /* [8 slices][32 lanes] */
    unsigned long long *bars = reinterpret_cast<unsigned long long *>(states + 8 * 32);

    const long long o = blockIdx.x;
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, sl = w >> 1, half = w & 1;
    unsigned long long *bar = bars + 2 * w;
    if (lane < 2) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(ring_su32(bar + lane)));
    if (lane == 0) marks[w].bad = 0;
    if (w == 0) ring_next(P, o, P.a.num_outputs, 2 * CS, lane, d);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    __syncthreads();
    if (d->o < 0) return; /* invalid or padding */

    /* the half window: segments j0 .. j0 + CS - 1 through the two stages */
    float *stg = stages + w * 2 * BURST_STAGE;
    const int j0 = half * CS;
    ring_fill(P, d, j0, stg, bar, sl, lane, &marks[w]);
    ring_fill(P, d, j0 + 1, stg + BURST_STAGE, bar + 1, sl, lane, &marks[w]);
    __syncwarp();
    stv L[LEVELS], T;
#pragma unroll 2
    for (int j = 0; j < CS; j++) {
        const int s = j & 1;
        float *st = stg + s * BURST_STAGE;
        ring_wait(bar + s, (unsigned)(j >> 1) & 1u);
        float2 v[KVC_SEG], sc[KVC_SEG];
        ring_read(st, lane, v, sc);
        __syncwarp();
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        if (j + 2 < CS) ring_fill(P, d, j0 + j + 2, st, bar + s, sl, lane, &marks[w]);
        ring_count<LEVELS>(L, ring_reduce(v, sc), j, T);
    }

    fin_in f; /* the finalisers' inputs, in flight during the merge */
    fin_load_weights(P, threadIdx.x, f);
    fin_load_cos_sin(P, d->pc, threadIdx.x, f);
    if (half) states[32 * sl + lane] = T;
    __syncthreads();
    if (!half) { /* the window's root: merge(first half, second half); c and the slice's bad-row mark */
        st_merge(T, states[32 * sl + lane]);
        reinterpret_cast<float2 *>(X->c)[32 * sl + lane] = make_float2(KVC_DIV(T.n[0], T.d[0]), KVC_DIV(T.n[1], T.d[1]));
        if (lane == 0) {
            const ring_mark *m = marks[w].bad ? &marks[w] : &marks[w + 1];
            X->rowbad[sl] = d->bad | m->bad;
            X->rowbad_g[sl] = m->bad ? m->g : d->bad_g;
        }
    }
    __syncthreads();
    const int q = threadIdx.x;
    if (q >= 128) return;
    int rbk = -1;
#pragma unroll
    for (int i = 7; i >= 0; i--)
        if (X->rowbad[i]) rbk = i;
    if (rbk >= 0) { /* a bad row: the output is skipped */
        if (q == 0) {
            record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, d->o, X->rowbad_g[rbk]);
            count(&P.status->outputs_invalid);
        }
        return;
    }
    float c[4];
#pragma unroll
    for (int j = 0; j < 4; j++) c[j] = X->c[4 * q + j];
    if (q == 0) count(&P.status->outputs_written);
    const int bad = finalize(P, d->slot, c, q, X->red, f);
    if (q == 0 && bad) count(&P.status->outputs_nonfinite);
#endif
}
#undef BURST_WARPS
#undef BURST_STAGE
