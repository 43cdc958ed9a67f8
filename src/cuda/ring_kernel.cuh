/*
 * ring_kernel.cuh -- the CUDA backend's main kernel (v11), included by
 * cuda_backend.cu after the shared device helpers (stv, seg_compute,
 * finalize, chunk-state merges).
 *
 * Why a ring: the classic kernel (v10) held the loads of a segment in
 * registers and was latency-bound at ~66% of read bandwidth (bench/NOTES.md).
 * Here the window rows travel by cp.async (16-byte LDGSTS, no registers) into
 * an NST-stage ring of shared memory, so NST-1 segments are always in flight
 * while the CTA computes the current one from shared memory.
 *
 * Decomposition: the work items are the (output, chunk) pairs of the classic
 * kernel (kvc_chunk_of); CTA b of a grid of G handles items b, b+G, b+2G, ...
 * one after the other with ONE pipeline running through all of them.
 *
 *   prologue  (a) item checks: thread k runs kvc_check_output for item k
 *             (all items' dependent loads in flight together);
 *             (b) a scan gives each item's first row in the CTA's row table;
 *             (c) the row table: one 64-bit element offset per window row of
 *             every item (block table read once per row, checked there), or a
 *             marker for a masked row (overlap, position < 0: value +0,
 *             score -Inf as the contract says) and for the padding rows of a
 *             partial last segment (value -0, score -Inf: adds exactly
 *             nothing to any state, see below).
 *   pipeline  segment g of the CTA is table rows 8g..8g+7, wherever item
 *             boundaries fall; warp w copies row w of a segment (4 KiB:
 *             values and scores, two 2 KiB halves).  Every thread computes
 *             its 2 dims of the segment from shared memory and adds the state
 *             to a binary counter of complete subtrees (levels), which for a
 *             power-of-two chunk ends with the chunk's canonical state.
 *   item end  one chunk per output: c = num/den, threads 0..127 finalise
 *             (cos/sin and RMS weights were loaded ahead into registers).
 *             Several chunks: chunk state to the workspace, ticket, the last
 *             CTA of the output merges the chunk states and finalises.
 *
 * Padding rows: with m the segment max of the real rows, a padding row adds
 * kexp(-Inf - m) = 0 to den (den >= +0, so den + 0 == den) and 0 * -0 = -0 to
 * num (x + -0 == x for every x, signed zeros included); max(m, -Inf) == m.
 * If m is -Inf the segment is closed to zeros anyway; if m is NaN or +Inf the
 * real rows already make den NaN.  So the bytes equal the n-row segment's.
 *
 * Two shapes (template N, bench/NOTES.md): N = 2 dims per thread in CTAs of
 * 256 threads, or N = 1 in CTAs of 512 (twice the warps per SM for the
 * same shared memory).
 *
 * Requirements (host checks, else the classic kernel runs): 16-byte aligned
 * state rows (state_cache % 16 == 0, both state strides % 4 == 0).
 */

#define RING_MAXK 64                     /* items per CTA                    */
#define RING_MAXROWS 768                 /* window rows per CTA              */
#define RING_ROW_FLOATS 1024             /* a staged row: 512 values, 512 scores */
#define RING_STAGE_FLOATS (KVC_SEG * RING_ROW_FLOATS)
#define RING_LEVELS 4                    /* stored subtrees: chunks of up to 2^4 = MAX_CH segments */
#define ROW_MASKED (-1LL)
#define ROW_PAD (-2LL)

struct ring_item {
    long long o;          /* output                                  */
    long long slot, pc;   /* destination slot, cos/sin row            */
    long long r, p;       /* request, boundary position               */
    long long bad_value;  /* a physical block out of range, if bad    */
    int j;                /* chunk index                              */
    int cstart;           /* first segment of the chunk               */
    int csize;            /* segments (0: nothing to do)              */
    int bad;              /* a row's physical block is out of range   */
};

/* Dynamic shared memory layout of the ring kernel (bytes). */
template <int NST> struct ring_smem {
    static constexpr size_t stages = (size_t)NST * RING_STAGE_FLOATS * sizeof(float);
    static constexpr size_t table = stages;                                     /* long long[MAXROWS] */
    static constexpr size_t items = table + RING_MAXROWS * sizeof(long long);   /* ring_item[MAXK]    */
    static constexpr size_t rowbase = items + RING_MAXK * sizeof(ring_item);    /* int[MAXK + 1]      */
    static constexpr size_t cbuf = rowbase + (RING_MAXK + 4) * sizeof(int);     /* float[512 + 8]     */
    static constexpr size_t total = cbuf + (512 + 8) * sizeof(float);
};

__device__ __forceinline__ void cp_async16(float *dst, const float *src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

/* Merge all chunk states of an output (uniform: nchunk a power of two <= 16)
 * or, otherwise, with the canonical binary counter over the chunk sizes. */
template <int N> __device__ stn<N> merge_all_chunks(const launch_params &P, const float *base, int q) {
    if (P.uniform_ring) {
        if (P.nchunk <= 8) return merge_chunks_tree<N>(base, 0, (int)P.nchunk, q);
        stn<N> A = merge_chunks_tree<N>(base, 0, 8, q);
        const stn<N> B = merge_chunks_tree<N>(base, 8, 8, q);
        st_merge(A, B);
        return A;
    }
    stn<N> stack[STACK_MAX];
    long long sizes[STACK_MAX];
    int top = -1;
    for (long long k = 0; k < P.nchunk; k++) {
        int64_t s0, sz;
        kvc_chunk_of(P.nseg, P.ch, k, &s0, &sz);
        top++;
        stack[top] = st_load<N>(base + k * (3 * 512), q);
        sizes[top] = sz;
#define KVC_RING_MERGE(l, r) st_merge(stack[l], stack[r])
        KVC_TREE_PUSH(sizes, top, KVC_RING_MERGE);
    }
    KVC_TREE_FOLD(top, KVC_RING_MERGE);
#undef KVC_RING_MERGE
    return stack[0];
}

/* Item checks and the row table (prologue steps a-c).  @return rows R. */
template <int THREADS>
__device__ int ring_prologue(const launch_params &P, int K, ring_item *items, int *rowbase, long long *table,
                             unsigned long long *cnt) {
    const kvc_args &a = P.a;
    const int tid = threadIdx.x;
    const long long G = gridDim.x;
    /* (a) one item per thread */
    for (int k = tid; k < K; k += THREADS) {
        const long long w = blockIdx.x + (long long)k * G;
        ring_item it;
        it.o = w / P.nchunk;
        it.j = (int)(w - it.o * P.nchunk);
        it.csize = it.cstart = it.bad = 0;
        it.slot = it.pc = it.r = it.p = it.bad_value = 0;
        kvc_out_info inf;
        const int chk = kvc_check_output(&a, it.o, &inf, 0);
        if (chk != KVC_CHECK_NONE) {
            if (it.j == 0) {
                record_error(P.status, chk, it.o, inf.value);
                atomicAdd(&cnt[3], 1ull);
            }
        } else if (inf.slot < 0) {
            if (it.j == 0) atomicAdd(&cnt[1], 1ull);
        } else {
            int64_t cs, sz;
            kvc_chunk_of(P.nseg, P.ch, it.j, &cs, &sz);
            it.cstart = (int)cs;
            it.csize = (int)sz;
            it.slot = inf.slot;
            it.pc = inf.pc;
            it.r = inf.r;
            it.p = inf.p;
        }
        items[k] = it;
    }
    __syncthreads();
    /* (b) rows of each item: exclusive scan by warp 0 */
    if (tid < 32) {
        int run = 0;
        for (int k0 = 0; k0 < K; k0 += 32) {
            const int k = k0 + tid;
            int v = k < K ? items[k].csize * KVC_SEG : 0;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const int n = __shfl_up_sync(0xffffffffu, v, d);
                if (tid >= d) v += n;
            }
            if (k < K) rowbase[k + 1] = run + v;
            run += __shfl_sync(0xffffffffu, v, 31);
        }
        if (tid == 0) rowbase[0] = 0;
    }
    __syncthreads();
    const int R = rowbase[K];
    /* (c) the row table: all block-table loads of a thread issued together */
    const long long C = a.compress_ratio;
    const int ov = a.overlap == KVC_OVERLAP_ON;
    constexpr int PER = (RING_MAXROWS + THREADS - 1) / THREADS;
    long long pos[PER], blk[PER];
    int itk[PER], vo[PER];
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int t = tid + u * THREADS;
        pos[u] = -1;
        itk[u] = -1;
        if (t >= R) continue;
        int lo = 0, hi = K - 1; /* the item whose rows hold t: last k with rowbase[k] <= t */
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (rowbase[mid] <= t) lo = mid;
            else hi = mid - 1;
        }
        itk[u] = lo;
        const long long i = (long long)items[lo].cstart * KVC_SEG + (t - rowbase[lo]);
        if (i >= P.rows) {
            pos[u] = ROW_PAD;
            continue;
        }
        int so;
        const long long ps = kvc_window_row(items[lo].p, C, ov, i, &vo[u], &so);
        if (ps < 0) {
            pos[u] = ROW_MASKED;
            continue;
        }
        pos[u] = ps;
        blk[u] = a.block_table[items[lo].r * a.block_table_stride + ps / a.block_size];
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int t = tid + u * THREADS;
        if (itk[u] < 0) continue;
        long long off = pos[u];
        if (off >= 0) {
            const long long g = blk[u];
            if (g < 0 || g >= a.num_blocks) {
                if (atomicExch(&items[itk[u]].bad, 1) == 0) items[itk[u]].bad_value = g;
                off = ROW_MASKED;
            } else {
                off = kvc_state_row_offset(&a, g, pos[u]) + vo[u];
            }
        }
        table[t] = off;
    }
    __syncthreads();
    return R;
}

/* Copy segment g (table rows 8g..8g+7) into its stage.  A row is 256
 * pieces of 16 bytes (128 of values, 128 of scores); TPR = THREADS / 8
 * threads copy a row, thread l of them pieces l, l + TPR, ... */
template <int THREADS>
__device__ __forceinline__ void ring_issue(const launch_params &P, const long long *table, float *stages, int g,
                                           int T, int nst, long long sdelta) {
    constexpr int TPR = THREADS / KVC_SEG, PPT = 256 / TPR, VPT = 128 / TPR; /* pieces: all, of values */
    if (g < T) {
        const int w = threadIdx.x / TPR, l = threadIdx.x % TPR;
        float *dst = stages + (g % nst) * RING_STAGE_FLOATS + w * RING_ROW_FLOATS + 4 * l;
        const long long off = table[g * KVC_SEG + w];
        if (off >= 0) {
            const float *sv = P.a.state_cache + off + 4 * l;
#pragma unroll
            for (int k = 0; k < PPT; k++) {
                if (k < VPT) cp_async16(dst + 4 * TPR * k, sv + 4 * TPR * k);
                else cp_async16(dst + 512 + 4 * TPR * (k - VPT), sv + sdelta + 4 * TPR * (k - VPT));
            }
        } else {
            const float v = off == ROW_PAD ? -0.0f : 0.0f;
            const float4 vv = make_float4(v, v, v, v);
            const float4 ni = make_float4(KVC_NEG_INF, KVC_NEG_INF, KVC_NEG_INF, KVC_NEG_INF);
#pragma unroll
            for (int k = 0; k < PPT; k++) {
                if (k < VPT) *reinterpret_cast<float4 *>(dst + 4 * TPR * k) = vv;
                else *reinterpret_cast<float4 *>(dst + 512 + 4 * TPR * (k - VPT)) = ni;
            }
        }
    }
    cp_async_commit(); /* an empty group past the end keeps the count uniform */
}

/* Output of a finished item: finalise, or publish the chunk state. */
template <int N>
__device__ void ring_item_end(const launch_params &P, const ring_item &it, const stn<N> &st, float *cbuf,
                              const fin_in &f, unsigned long long *cnt, unsigned *ticket) {
    const int q = threadIdx.x;
    stn<N> fin = st;
    if (P.nchunk > 1) {
        if (!it.bad) st_store(st, P.chunk_states + (it.o * P.nchunk + it.j) * (3 * 512), q);
        __threadfence();
        __syncthreads();
        if (q == 0) {
            *ticket = atomicAdd(&P.tickets[it.o], it.bad ? (BAD_BIT + 1u) : 1u);
            if (it.bad) record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, it.o, it.bad_value);
        }
        __syncthreads();
        const unsigned t = *ticket;
        if ((t & ~BAD_BIT) != (unsigned)(P.nchunk - 1)) return; /* not the last chunk */
        __threadfence();
        if ((t & BAD_BIT) || it.bad) {
            if (q == 0) cnt[3]++;
            return;
        }
        fin = merge_all_chunks<N>(P, P.chunk_states + it.o * P.nchunk * (3 * 512), q);
    } else if (it.bad) {
        if (q == 0) {
            record_error(P.status, KVC_CHECK_PHYSICAL_BLOCK, it.o, it.bad_value);
            cnt[3]++;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < N; j++) cbuf[N * q + j] = KVC_DIV(fin.n[j], fin.d[j]);
    __syncthreads();
    if (q >= 128) return;
    float c[4];
#pragma unroll
    for (int j = 0; j < 4; j++) c[j] = cbuf[4 * q + j];
    const int bad = finalize(P, it.slot, c, q, cbuf + 512, f);
    if (q == 0) {
        cnt[0]++;
        cnt[2] += bad;
    }
}

template <int NST, int N>
__global__ void __launch_bounds__(512 / N, NST <= 3 ? 2 : 1) ring_kernel(const launch_params P) {
    constexpr int THREADS = 512 / N;
    extern __shared__ __align__(16) unsigned char ring_sm[];
    using L = ring_smem<NST>;
    float *stages = reinterpret_cast<float *>(ring_sm);
    long long *table = reinterpret_cast<long long *>(ring_sm + L::table);
    ring_item *items = reinterpret_cast<ring_item *>(ring_sm + L::items);
    int *rowbase = reinterpret_cast<int *>(ring_sm + L::rowbase);
    float *cbuf = reinterpret_cast<float *>(ring_sm + L::cbuf);
    __shared__ unsigned long long scnt[4]; /* written, padding, nonfinite, invalid */
    __shared__ unsigned ticket;
    const int tid = threadIdx.x;
    unsigned long long cnt[4] = {0, 0, 0, 0}; /* thread 0's counts of finished items */

    if (tid < 4) scnt[tid] = 0;
    fin_in f;
    fin_load_weights(P, tid, f);
    __syncthreads();
    const long long total_items = P.a.num_outputs * P.nchunk;
    const int K = (int)((total_items - blockIdx.x + gridDim.x - 1) / gridDim.x);
    const int R = ring_prologue<THREADS>(P, K, items, rowbase, table, scnt);
    const int T = R / KVC_SEG;
    const long long sdelta = P.a.overlap == KVC_OVERLAP_ON ? 1024 : 512;

#pragma unroll
    for (int s = 0; s < NST - 1; s++) ring_issue<THREADS>(P, table, stages, s, T, NST, sdelta);

    int ci = 0, cs = 0; /* compute cursor: item, segment within it */
    while (ci < K && items[ci].csize == 0) ci++;
    stn<N> acc[RING_LEVELS];
    for (int g = 0; g < T; g++) {
        cp_async_wait<NST - 2>();
        __syncthreads(); /* stage g landed for all; stage g-1 free */
        ring_issue<THREADS>(P, table, stages, g + NST - 1, T, NST, sdelta);
        if (cs == 0) fin_load_cos_sin(P, items[ci].pc, tid, f); /* used at the item's end */
        const float *sd = stages + (g % NST) * RING_STAGE_FLOATS + N * tid;
        segd<N> x;
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) {
            if constexpr (N == 2) {
                const float2 v = *reinterpret_cast<const float2 *>(sd + i * RING_ROW_FLOATS);
                const float2 s = *reinterpret_cast<const float2 *>(sd + i * RING_ROW_FLOATS + 512);
                x.v[i][0] = v.x;
                x.v[i][N - 1] = v.y;
                x.s[i][0] = s.x;
                x.s[i][N - 1] = s.y;
            } else {
                x.v[i][0] = sd[i * RING_ROW_FLOATS];
                x.s[i][0] = sd[i * RING_ROW_FLOATS + 512];
            }
        }
        stn<N> cur;
        if (!P.diag_nocompute) {
            cur = seg_compute<N>(x, KVC_SEG);
        } else { /* diagnostic: the same loads, almost no arithmetic */
#pragma unroll
            for (int j = 0; j < N; j++) {
                float t = 0.0f;
#pragma unroll
                for (int i = 0; i < KVC_SEG; i++) t = t + x.v[i][j] + x.s[i][j];
                cur.m[j] = 0.0f;
                cur.d[j] = 1.0f;
                cur.n[j] = t;
            }
        }
        /* binary counter: segment cs closes every complete subtree it ends
         * (written without a break so that acc stays in registers) */
        bool placed = false;
#pragma unroll
        for (int lv = 0; lv < RING_LEVELS; lv++) {
            if (!placed) {
                if ((cs >> lv) & 1) {
                    st_merge(acc[lv], cur);
                    cur = acc[lv];
                } else {
                    acc[lv] = cur;
                    placed = true;
                }
            }
        }
        if (++cs == items[ci].csize) {
            ring_item_end<N>(P, items[ci], cur, cbuf, f, cnt, &ticket);
            cs = 0;
            ci++;
            while (ci < K && items[ci].csize == 0) ci++;
        }
    }
    cp_async_wait<0>();
    __syncthreads();
    if (tid == 0) {
        unsigned long long *dst[4] = {
            reinterpret_cast<unsigned long long *>(&P.status->outputs_written),
            reinterpret_cast<unsigned long long *>(&P.status->outputs_padding),
            reinterpret_cast<unsigned long long *>(&P.status->outputs_nonfinite),
            reinterpret_cast<unsigned long long *>(&P.status->outputs_invalid)};
#pragma unroll
        for (int k = 0; k < 4; k++)
            if (cnt[k] + scnt[k]) atomicAdd(dst[k], cnt[k] + scnt[k]);
    }
}
