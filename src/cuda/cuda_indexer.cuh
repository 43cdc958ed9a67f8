/*
 * cuda_indexer.cuh -- the indexer's compressor (SPEC 9: head width 128) for
 * windows of one segment (C <= 8, or C <= 4 with overlap: DeepSeek-V4's CSA
 * layers).  A warp per output, lane l holding dims 4l .. 4l + 3: one
 * 16-byte load per row and half (8 bytes for a bf16 state), the reduction
 * in registers, every exchange of the finaliser a shuffle, no barrier.
 *
 * A CTA of IDX_WARPS warps; warp w takes P.pl.small_k <= IDX_OPW
 * consecutive outputs: their index checks at once (lane k: output k), then
 * their rows at once (lane 8k + i: row i of output k, its block checked),
 * then it reduces and finalises them in turn, the next output's loads in
 * flight during the current one's finalisation.  Same bytes as the general
 * body (kvc_general.h) and the CPU's kvc_finalize_indexer.
 *
 * Included by cuda_kernels.cuh for DPT = 2 (namespaces kvc_cuda_d2 and
 * kvc_cuda_d2f: FASTNUM 0 / 1).
 */
#define IDX_WARPS 8
#define IDX_OPW 4  /* outputs per warp at most: 8 rows each, a lane per row */
#define IDX_MINB 2 /* resident CTAs per SM asked of the compiler: 128 registers (a window is 64 floats a lane) */
#define IDX_FULL 0xFFFFFFFFu

/* A warp's outputs: row offsets (lane 8k + i: output k's row i; -1 masked
 * or unused), their score bias rows, the outputs' slots and cos/sin rows. */
struct idx_warp {
    long long voff[32], boff[32];
    kv_slot at[IDX_OPW];
    long long pc[IDX_OPW];
};

/* A window's rows for lane `lane`: 4 values and 4 scores a row (masked: 0
 * and -Inf); rows i >= n are not read. */
struct idx_rows {
    float v[KVC_SEG][4], s[KVC_SEG][4];
};

/* vec: 16-byte (bf16: 8-byte) loads, every row offset a multiple of 4 elements */
template <bool BF16>
__device__ __forceinline__ void idx_load4(const float *state, long long off, int lane, int vec, float out[4]) {
    if (vec) {
        if constexpr (BF16) {
            const uint2 u = __ldcs(reinterpret_cast<const uint2 *>(reinterpret_cast<const unsigned short *>(state) + off) + lane);
            out[0] = __uint_as_float(u.x << 16);
            out[1] = __uint_as_float(u.x & 0xFFFF0000u);
            out[2] = __uint_as_float(u.y << 16);
            out[3] = __uint_as_float(u.y & 0xFFFF0000u);
        } else {
            const float4 f = KVC_LD(reinterpret_cast<const float4 *>(state + off) + lane);
            out[0] = f.x, out[1] = f.y, out[2] = f.z, out[3] = f.w;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < 4; j++) out[j] = ld_state1<BF16>(state, off + 4 * lane + j);
}

template <bool BF16>
__device__ __forceinline__ void idx_load(const launch_params &P, const idx_warp &w, int k, int n, int lane,
                                         idx_rows &x) {
    const long long sd = kvc_score_delta(P.a.overlap == KVC_OVERLAP_ON, 128);
    const int vec = (int)P.pl.vec;
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        if (i >= n) break;
        const long long off = w.voff[8 * k + i];
        if (off >= 0) {
            idx_load4<BF16>(P.a.state_cache, off, lane, vec, x.v[i]);
            idx_load4<BF16>(P.a.state_cache, off + sd, lane, vec, x.s[i]);
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) x.v[i][j] = 0.0f, x.s[i][j] = KVC_NEG_INF;
        }
    }
}

/* kvc_finalize_indexer on one warp: lane l's window sums c of dims 4l ..
 * 4l + 3, its weights w and (lanes >= 16) the cos / sin of its two RoPE
 * pairs.  @return 1 (every lane) for a non-finite slot. */
__device__ int idx_finalize(const kvc_args &a, const float c[4], const float w[4], const float cs[4], int lane,
                            uint8_t *payload, uint8_t *scales) {
    int bad = 0;
    float x[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        bad |= kvc_nonfinite(c[j]);
        x[j] = KVC_MUL(c[j], c[j]);
    }
    /* the pairwise sum over 128: two levels in the lane, five across lanes */
    float ss = KVC_ADD(KVC_ADD(x[0], x[1]), KVC_ADD(x[2], x[3]));
#pragma unroll
    for (int h = 1; h < 32; h <<= 1) ss = KVC_ADD(ss, __shfl_down_sync(IDX_FULL, ss, h));
    ss = __shfl_sync(IDX_FULL, ss, 0);
    const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(ss, KVC_INV128), a.rms_norm_eps)));
#pragma unroll
    for (int j = 0; j < 4; j++) {
        x[j] = kvc_rms_apply(c[j], rr, w[j]);
        bad |= kvc_nonfinite(x[j]);
    }
    if (lane >= 16) /* RoPE on dims 64 .. 127: the lane's pairs (4l, 4l + 1), (4l + 2, 4l + 3) */
#pragma unroll
        for (int t = 0; t < 2; t++) kvc_rope(x[2 * t], x[2 * t + 1], cs[2 * t], cs[2 * t + 1], &x[2 * t], &x[2 * t + 1]);
    if (a.rotate) { /* Walsh-Hadamard: h = 1, 2 in the lane, 4 .. 64 across lanes */
#pragma unroll
        for (int h = 1; h < 4; h <<= 1)
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (!(j & h)) {
                    const float u = x[j], v = x[j + h];
                    x[j] = KVC_ADD(u, v);
                    x[j + h] = KVC_SUB(u, v);
                }
#pragma unroll
        for (int m = 1; m < 32; m <<= 1)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float b = __shfl_xor_sync(IDX_FULL, x[j], m);
                x[j] = (lane & m) ? KVC_SUB(b, x[j]) : KVC_ADD(x[j], b);
            }
#pragma unroll
        for (int j = 0; j < 4; j++) x[j] = KVC_MUL(x[j], KVC_INV_SQRT128);
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        bad |= kvc_nonfinite(x[j]);
        bad |= kvc_nope_bf16(x[j], &x[j]);
        amax = kvc_max(amax, x[j] < 0.0f ? -x[j] : x[j]);
    }
    bad = __any_sync(IDX_FULL, bad);
    if (a.nope_format == KVC_FMT_IFP8) {
#pragma unroll
        for (int m = 1; m < 32; m <<= 1) amax = kvc_max(amax, __shfl_xor_sync(IDX_FULL, amax, m));
        const int e = kvc_ifp8_exponent(amax);
        const float inv = kvc_pow2(-e);
        uint32_t wd = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) wd |= (uint32_t)kvc_ifp8_code(x[j], inv) << (8 * j);
        if (bad) wd = 0;
        const uint32_t sb = bad ? 0x7FC00000u : KVC_BITS(kvc_pow2(e)); /* a quiet NaN for a non-finite slot */
        if (((uintptr_t)payload & 3) == 0) {
            reinterpret_cast<uint32_t *>(payload)[lane] = wd;
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) payload[4 * lane + j] = (uint8_t)(wd >> (8 * j));
        }
        if (lane < 4) scales[lane] = (uint8_t)(sb >> (8 * lane));
    } else { /* INDEXER_MXFP4: blocks of 32 dims = 8 lanes */
#pragma unroll
        for (int m = 1; m < 8; m <<= 1) amax = kvc_max(amax, __shfl_xor_sync(IDX_FULL, amax, m));
        const int e = kvc_mx_exponent(amax);
        const float inv = kvc_pow2(-e);
        uint8_t b[2];
#pragma unroll
        for (int t = 0; t < 2; t++)
            b[t] = bad ? (uint8_t)0
                       : (uint8_t)(kvc_e2m1_code(KVC_MUL(x[2 * t], inv)) | (kvc_e2m1_code(KVC_MUL(x[2 * t + 1], inv)) << 4));
        payload[2 * lane] = b[0];
        payload[2 * lane + 1] = b[1];
        if ((lane & 7) == 0) scales[lane >> 3] = bad ? (uint8_t)0xFF : (uint8_t)(e + 127);
    }
    return bad;
}

/* BF16: a bf16 state (SPEC 10); a score bias is added where P.a.score_bias is set. */
template <bool BF16>
__global__ void __launch_bounds__(IDX_WARPS * 32, IDX_MINB) indexer_kernel(const launch_params P) {
    __shared__ idx_warp ws[IDX_WARPS];
    __shared__ unsigned long long s_count[2]; /* the CTA's written, non-finite outputs */
    const kvc_args &a = P.a;
    const int lane = threadIdx.x & 31, wi = threadIdx.x >> 5, opw = (int)P.pl.small_k;
    idx_warp &w = ws[wi];
    const long long o0 = ((long long)blockIdx.x * IDX_WARPS + wi) * opw;
    const long long left = a.num_outputs - o0;
    const int kn = left <= 0 ? 0 : left < opw ? (int)left : opw;
    if (threadIdx.x < 2) s_count[threadIdx.x] = 0;
    /* the outputs' checks: lane k, output k */
    kvc_out_info inf;
    inf.r = inf.p = inf.pc = inf.slot = 0;
    int ok = 0;
    if (lane < kn) {
        const long long o = o0 + lane;
        ok = !skip_output(P, kvc_check_output(&a, o, &inf, 0), o, inf, 1);
        if (ok) {
            w.at[lane] = slot_at(P, inf.slot);
            w.pc[lane] = inf.pc;
        }
    }
    const unsigned okm = __ballot_sync(IDX_FULL, ok);
    /* their rows: lane 8k + i, row i of output k */
    const int k = lane >> 3, i = lane & 7, rows = (int)P.pl.rows, ovl = a.overlap == KVC_OVERLAP_ON;
    const long long r = __shfl_sync(IDX_FULL, inf.r, k), p = __shfl_sync(IDX_FULL, inf.p, k);
    long long voff = -1, boff = -1, blk = 0;
    int badrow = 0;
    if ((okm >> k & 1) && i < rows) {
        int vo, so;
        const long long pos = kvc_window_row(p, a.compress_ratio, ovl, 128, i, &vo, &so);
        if (pos >= 0) {
            blk = a.block_table[r * a.block_table_stride + pos / a.block_size];
            if (blk < 0 || blk >= a.num_blocks) {
                badrow = 1;
            } else {
                voff = kvc_state_row_offset(&a, blk, pos) + vo;
                if (a.score_bias) boff = kvc_bias_offset(pos, a.compress_ratio, a.score_bias_stride, so, ovl, 128);
            }
        }
    }
    w.voff[lane] = voff;
    w.boff[lane] = boff;
    const unsigned badm = __ballot_sync(IDX_FULL, badrow);
    float wt[4], cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; j++) wt[j] = kvc_bf16_to_f32(a.rms_norm_weight[4 * lane + j]);
    __syncthreads(); /* (s_count; w is the warp's own) */
    /* an output with a bad row: the first such row's block, reported */
    unsigned live = 0;
    for (int kk = 0; kk < kn; kk++) {
        if (!(okm >> kk & 1)) continue;
        const unsigned bg = (badm >> (8 * kk)) & 0xFFu;
        if (!bg) {
            live |= 1u << kk;
            continue;
        }
        const long long g = __shfl_sync(IDX_FULL, blk, 8 * kk + __ffs(bg) - 1);
        if (lane == 0) {
            record_error(P, KVC_CHECK_PHYSICAL_BLOCK, o0 + kk, g);
            count(&P.status->outputs_invalid);
        }
    }
    int written = 0, nonfinite = 0;
    idx_rows x;
    int kk = live ? __ffs(live) - 1 : kn;
    if (kk < kn) idx_load<BF16>(P, w, kk, rows, lane, x);
    while (kk < kn) {
        if (lane >= 16) {
            const float *row = a.cos_sin_cache + w.pc[kk] * a.cos_sin_stride;
            const int il = a.cos_sin_layout == KVC_COS_SIN_INTERLEAVED;
#pragma unroll
            for (int t = 0; t < 2; t++) kvc_cos_sin(row, il, 2 * (lane - 16) + t, &cs[2 * t], &cs[2 * t + 1]);
        }
        if (a.score_bias)
#pragma unroll
            for (int ii = 0; ii < KVC_SEG; ii++) {
                const long long b = ii < rows ? w.boff[8 * kk + ii] : -1;
                if (b >= 0)
#pragma unroll
                    for (int j = 0; j < 4; j++) x.s[ii][j] = KVC_ADD(x.s[ii][j], __ldg(a.score_bias + b + 4 * lane + j));
            }
        float c[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float m = x.s[0][j], den = 0.0f, num = 0.0f;
#pragma unroll
            for (int ii = 1; ii < KVC_SEG; ii++)
                if (ii < rows) m = kvc_max(m, x.s[ii][j]);
#pragma unroll
            for (int ii = 0; ii < KVC_SEG; ii++)
                if (ii < rows) red_step(m, x.s[ii][j], x.v[ii][j], &den, &num);
            kvc_seg_close(m, &den, &num);
            c[j] = KVC_DIV(num, den);
        }
        const unsigned rest = live & ~((2u << kk) - 1u);
        const int kn2 = rest ? __ffs(rest) - 1 : kn;
        if (kn2 < kn) idx_load<BF16>(P, w, kn2, rows, lane, x); /* in flight while kk finalises */
        const kv_slot at = w.at[kk];
        const int bad = idx_finalize(a, c, wt, cs, lane, a.kv_cache + at.po, a.kv_cache + at.so);
        written++;
        nonfinite += bad;
        kk = kn2;
    }
    /* one atomic per CTA and counter */
    if (lane == 0 && written) atomicAdd(&s_count[0], (unsigned long long)written);
    if (lane == 0 && nonfinite) atomicAdd(&s_count[1], (unsigned long long)nonfinite);
    __syncthreads();
    if (threadIdx.x == 0 && s_count[0])
        atomicAdd(reinterpret_cast<unsigned long long *>(&P.status->outputs_written), s_count[0]);
    if (threadIdx.x == 0 && s_count[1])
        atomicAdd(reinterpret_cast<unsigned long long *>(&P.status->outputs_nonfinite), s_count[1]);
}

#undef IDX_FULL
