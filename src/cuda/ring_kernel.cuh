/*
 * ring_kernel.cuh -- the CUDA backend's main kernel (v11), included by
 * cuda_backend.cu after the shared device helpers (stv, seg_compute,
 * finalize, chunk-state merges).
 *
 * Why a ring: the classic kernel (v10) held the loads of a segment in
 * registers and was latency-bound at ~66% of read bandwidth (bench/NOTES.md).
 * Here the window rows travel by TMA bulk copies (cp.async.bulk, one per
 * 4 KiB row or 2 KiB half, sm_90) into an NST-stage ring of shared memory,
 * completing on one mbarrier per stage, so NST-1 segments are in flight while
 * the CTA computes the current one from shared memory.  (A first version
 * copied with per-thread 16-byte cp.async and was slower than the classic
 * kernel even with no arithmetic at all; a TMA ring with no arithmetic reads
 * at 4.1 TB/s: bench/probe/read_probe.cu.)
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
 *             boundaries fall; warp 0 issues the copies of a segment (lane i
 *             row i) and arms the stage's mbarrier.  Every thread computes
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
    static constexpr size_t bars = cbuf + (512 + 8) * sizeof(float);             /* u64[2 NST]: full, empty */
    static constexpr size_t total = bars + 2 * NST * sizeof(unsigned long long);
};

/* sm_90 TMA and mbarrier primitives (the ring only runs on sm_90+; the host
 * picks the classic kernel elsewhere, and this body traps if it is ever
 * reached on an older device). */
__device__ __forceinline__ unsigned smem_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long *bar, unsigned count) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive(unsigned long long *bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
#endif
}
__device__ __forceinline__ void mbar_arrive_tx(unsigned long long *bar, unsigned bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(unsigned long long *bar, unsigned parity) {
#if __CUDA_ARCH__ >= 900
    asm volatile("{\n\t.reg .pred p;\n"
                 "KVC_WAIT_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
                 "@!p bra KVC_WAIT_%=;\n}" ::"r"(smem_addr(bar)),
                 "r"(parity)
                 : "memory");
#else
    __trap();
#endif
}
/* L2 policy for the state rows: read once, evict first (so they, not other
 * lines, make room in L2). */
__device__ __forceinline__ unsigned long long l2_evict_first() {
    unsigned long long pol = 0;
#if __CUDA_ARCH__ >= 900
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#endif
    return pol;
}
/* Copy bytes (a multiple of 16, both addresses 16-byte aligned) global ->
 * shared, completing on bar. */
__device__ __forceinline__ void tma_copy(float *dst, const float *src, unsigned bytes, unsigned long long *bar,
                                         int hint, unsigned long long pol) {
#if __CUDA_ARCH__ >= 900
    if (hint)
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
                smem_addr(dst)),
            "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(pol)
            : "memory");
    else
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                         smem_addr(dst)),
                     "l"(src), "r"(bytes), "r"(smem_addr(bar))
                     : "memory");
#endif
}
/* Order this thread's earlier generic accesses of shared memory before later
 * async-proxy (TMA) writes to it. */
__device__ __forceinline__ void fence_proxy_async() {
#if __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

/* Merge all chunk states of an output (uniform: nchunk a power of two <= 16)
 * or, otherwise, with the canonical binary counter over the chunk sizes.
 */
template <int N> __device__ __noinline__ stn<N> merge_all_chunks(const launch_params &P, const float *base, int q) {
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

/* Copy segment g (table rows 8g..8g+7) into its stage; warp 0 only.
 * Lane i < 8 copies row i (one 4 KiB copy when the scores follow the values,
 * else two 2 KiB copies); masked and padding rows are written by the whole
 * warp with plain stores; lane 0 arms the stage's mbarrier with the bytes. */
__device__ __forceinline__ void ring_issue(const launch_params &P, const long long *table, float *stages,
                                           unsigned long long *bars, int g, int T, int nst, long long sdelta) {
    if (g >= T) return;
    const int l = threadIdx.x & 31;
    float *stage = stages + (g % nst) * RING_STAGE_FLOATS;
    unsigned long long *bar = bars + g % nst;
    const long long off = l < KVC_SEG ? table[g * KVC_SEG + l] : 0;
    unsigned bytes = l < KVC_SEG && off >= 0 ? 4096u : 0u;
    /* neutral rows (rare): the warp fills them, 16 floats per lane */
    unsigned neutral = __ballot_sync(0xffffffffu, l < KVC_SEG && off < 0);
    while (neutral) {
        const int i = __ffs(neutral) - 1;
        neutral &= neutral - 1;
        const long long oi = __shfl_sync(0xffffffffu, off, i);
        const float v = oi == ROW_PAD ? -0.0f : 0.0f;
        float *row = stage + i * RING_ROW_FLOATS;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            *reinterpret_cast<float4 *>(row + 4 * l + 128 * k) = make_float4(v, v, v, v);
            *reinterpret_cast<float4 *>(row + 512 + 4 * l + 128 * k) =
                make_float4(KVC_NEG_INF, KVC_NEG_INF, KVC_NEG_INF, KVC_NEG_INF);
        }
    }
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) bytes += __shfl_xor_sync(0xffffffffu, bytes, d);
    __syncwarp();
    if (l == 0) mbar_arrive_tx(bar, bytes);
    if (l < KVC_SEG && off >= 0) {
        float *dst = stage + l * RING_ROW_FLOATS;
        const float *src = P.a.state_cache + off;
        const unsigned long long pol = l2_evict_first();
        if (sdelta == 512) {
            tma_copy(dst, src, 4096u, bar, P.l2hint, pol);
        } else {
            tma_copy(dst, src, 2048u, bar, P.l2hint, pol);
            tma_copy(dst + 512, src + sdelta, 2048u, bar, P.l2hint, pol);
        }
    }
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

template <int NST, int N, bool EMPTYBAR>
__global__ void __launch_bounds__(512 / N, NST <= 3 ? 2 : 1) ring_kernel(const launch_params P) {
    constexpr int THREADS = 512 / N;
    extern __shared__ __align__(16) unsigned char ring_sm[];
    using L = ring_smem<NST>;
    float *stages = reinterpret_cast<float *>(ring_sm);
    long long *table = reinterpret_cast<long long *>(ring_sm + L::table);
    ring_item *items = reinterpret_cast<ring_item *>(ring_sm + L::items);
    int *rowbase = reinterpret_cast<int *>(ring_sm + L::rowbase);
    float *cbuf = reinterpret_cast<float *>(ring_sm + L::cbuf);
    unsigned long long *bars = reinterpret_cast<unsigned long long *>(ring_sm + L::bars);
    __shared__ unsigned long long scnt[4]; /* written, padding, nonfinite, invalid */
    __shared__ unsigned ticket;
    const int tid = threadIdx.x;
    unsigned long long cnt[4] = {0, 0, 0, 0}; /* thread 0's counts of finished items */

    if (tid < 4) scnt[tid] = 0;
    if (tid < NST) mbar_init(bars + tid, 1);                     /* full: the producer's arrive + bytes */
    if (tid >= NST && tid < 2 * NST) mbar_init(bars + tid, THREADS / 32); /* empty: one arrive per warp */
    fence_proxy_async();
    fin_in f;
    fin_load_weights(P, tid, f);
    __syncthreads();
    const long long total_items = P.a.num_outputs * P.nchunk;
    const int K = (int)((total_items - blockIdx.x + gridDim.x - 1) / gridDim.x);
    const int R = ring_prologue<THREADS>(P, K, items, rowbase, table, scnt);
    const int T = R / KVC_SEG;
    const long long sdelta = P.a.overlap == KVC_OVERLAP_ON ? 1024 : 512;

    if (tid < 32)
        for (int s = 0; s < NST - 1; s++) ring_issue(P, table, stages, bars, s, T, NST, sdelta);

    int ci = 0, cs = 0; /* compute cursor: item, segment within it */
    while (ci < K && items[ci].csize == 0) ci++;
    stn<N> acc[RING_LEVELS];
    for (int g = 0; g < T; g++) {
        /* warp 0 refills stage (g-1) % NST with segment g+NST-1 once every
         * warp has read segment g-1 out of it (its "empty" barrier) */
        if constexpr (EMPTYBAR) {
            if (tid < 32 && g + NST - 1 < T) {
                if (g >= 1) mbar_wait(bars + NST + (g - 1) % NST, (unsigned)((g - 1) / NST) & 1u);
                fence_proxy_async(); /* those reads before the copies into the stage */
                ring_issue(P, table, stages, bars, g + NST - 1, T, NST, sdelta);
            }
            mbar_wait(bars + g % NST, (unsigned)(g / NST) & 1u); /* segment g landed */
        } else {
            mbar_wait(bars + g % NST, (unsigned)(g / NST) & 1u); /* segment g landed */
            __syncthreads();                                    /* stage g-1 is free */
            if (tid < 32 && g + NST - 1 < T) {
                fence_proxy_async();
                ring_issue(P, table, stages, bars, g + NST - 1, T, NST, sdelta);
            }
        }
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
        if constexpr (EMPTYBAR) {
            __syncwarp();
            if ((tid & 31) == 0) mbar_arrive(bars + NST + g % NST); /* this warp is done with the stage */
        }
        stn<N> cur = seg_compute<N>(x, KVC_SEG);
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
