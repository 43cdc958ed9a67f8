/*
 * cuda_indexer.cuh -- the indexer's compressor (SPEC 9: head width 128) for
 * windows of one segment (C <= 8, or C <= 4 with overlap: DeepSeek-V4's CSA
 * layers).  A warp per output, lane l holding dims 4l .. 4l + 3: one
 * 16-byte load per row and half (8 bytes for a bf16 state), the reduction
 * in registers, every exchange of the finaliser a shuffle, no barrier.
 *
 * A CTA of IDX_WARPS warps takes K = P.pl.small_k <= IDX_K_SOLO consecutive
 * outputs (K sized for whole waves, as the one-segment kernel's): their
 * index checks at once (thread k: output k), then their 8 K rows (a thread
 * a row, each row's block checked); then warp w reduces and finalises
 * output w, then whichever the CTA's next unclaimed output is when it
 * claims one (a shared counter: warps whose loads come back sooner take
 * more, and the CTA's warps end closer together; EXACT with a bf16 state:
 * outputs w + IDX_WARPS, w + 2 IDX_WARPS, ...), the next one's loads in flight
 * during the current one's finalisation (with a bf16 state or a score
 * bias, from the moment each row of the current one is consumed).  Same
 * bytes as the general body (kvc_general.h) and the CPU's
 * kvc_finalize_indexer.
 *
 * Included by cuda_kernels.cuh for DPT = 2 (namespaces kvc_cuda_d2 and
 * kvc_cuda_d2f: FASTNUM 0 / 1).
 */
#define IDX_WARPS 8
#define IDX_K 96       /* outputs per CTA at most in kvc_compress_many's fused launch (its shared memory) */
#define IDX_K_SOLO 128 /* ... in the indexer kernel (4 x 131072 C4 tokens in one wave of K = 125) */
#define IDX_MINB 2     /* resident CTAs per SM asked of the compiler: 128 registers (a window is 64 floats a lane) */
/* ... with a bf16 state and no score bias: 85 registers (the raw window is 32 a lane; more warps to hide
 * the arithmetic's latency) */
#define IDX_MINB16 3
__host__ __device__ constexpr int idx_minb(bool bf16, bool bias) { return bf16 && !bias ? IDX_MINB16 : IDX_MINB; }
#define IDX_FULL 0xFFFFFFFFu
/* The score bias in shared memory: its C x W / 2 floats (at most 8 rows of
 * 128: "units", unit u at floats 128 u), then a unit of zeros for the
 * masked rows and the rows past the window */
#define IDX_ZERO_UNIT KVC_SEG
/* (the kernel copies it in one pass of 4 floats a thread) */
static_assert(IDX_WARPS * 32 * 4 >= IDX_ZERO_UNIT * 128, "a CTA's threads must cover the whole bias in one pass");

/* The CTA's outputs: row offsets (8k + i: output k's row i; -1 masked or
 * unused), their bias units (byte i of bu[k]: row i's), the outputs'
 * checks, slots and cos/sin rows. */
template <int K> struct idx_cta {
    long long voff[K * KVC_SEG];
    unsigned long long bu[K];
    kv_slot at[K];
    long long pc[K], r[K], p[K], badg[K];
    int ok[K], bad[K];
};

/* A window's rows for lane `lane` as loaded: 4 values and 4 scores a row,
 * float32 (a float4) or bf16 (their 8 bytes, widened where they are used:
 * a widening right after the load would stall the warp on it); masked: 0
 * and -Inf. */
template <bool BF16> struct idx_raw {
    typedef float4 T;
    static __device__ __forceinline__ float get(const T &u, int j) {
        return j == 0 ? u.x : j == 1 ? u.y : j == 2 ? u.z : u.w;
    }
    static __device__ __forceinline__ T masked(float f) { return make_float4(f, f, f, f); }
};
template <> struct idx_raw<true> {
    typedef uint2 T;
    static __device__ __forceinline__ float get(const T &u, int j) {
        const unsigned w = j < 2 ? u.x : u.y;
        return __uint_as_float(j & 1 ? w & 0xFFFF0000u : w << 16);
    }
    static __device__ __forceinline__ T masked(float f) { /* 0 or -Inf: exact in bf16 */
        const unsigned h = __float_as_uint(f) >> 16;
        return make_uint2(h | h << 16, h | h << 16);
    }
};
template <bool BF16> struct idx_rows {
    typename idx_raw<BF16>::T v[KVC_SEG], s[KVC_SEG];
};

/* 4 elements at element offset off + 4 lane; vec: 16-byte (bf16: 8-byte)
 * loads, every row offset a multiple of 4 elements */
template <bool BF16>
__device__ __forceinline__ typename idx_raw<BF16>::T idx_load4(const float *state, long long off, int lane, int vec) {
    if constexpr (BF16) {
        const unsigned short *h = reinterpret_cast<const unsigned short *>(state) + off;
        if (vec) return __ldcs(reinterpret_cast<const uint2 *>(h) + lane);
        return make_uint2(h[4 * lane] | (unsigned)h[4 * lane + 1] << 16,
                          h[4 * lane + 2] | (unsigned)h[4 * lane + 3] << 16);
    } else {
        if (vec) return KVC_LD(reinterpret_cast<const float4 *>(state + off) + lane);
        const float *f = state + off + 4 * lane;
        return make_float4(f[0], f[1], f[2], f[3]);
    }
}

/* Row i of output k into x (a row past the window: offset -1, masked) */
template <bool BF16, class W>
__device__ __forceinline__ void idx_load_row(const launch_params &P, const W &w, int k, int i, int lane,
                                             idx_rows<BF16> &x) {
    typedef idx_raw<BF16> R;
    const long long off = w.voff[8 * k + i];
    if (off >= 0) {
        const int vec = (int)P.pl.vec;
        x.v[i] = idx_load4<BF16>(P.a.state_cache, off, lane, vec);
        x.s[i] = idx_load4<BF16>(P.a.state_cache, off + kvc_score_delta(P.a.overlap == KVC_OVERLAP_ON, 128), lane,
                                 vec);
    } else {
        x.v[i] = R::masked(0.0f);
        x.s[i] = R::masked(KVC_NEG_INF);
    }
}

/* The finaliser's exchanges between the threads of one output, for a
 * layout of DPL dims a thread (thread t: dims DPL t .. DPL t + DPL - 1):
 * xor(v, m) is thread t ^ m's v, any(b) the or of every thread's b; all
 * threads of the output call each of them. */
struct idx_warp_xg { /* DPL = 4: a warp, shuffles */
    __device__ __forceinline__ float xor_(float v, int m) const { return __shfl_xor_sync(IDX_FULL, v, m); }
    __device__ __forceinline__ int any(int b) const { return __any_sync(IDX_FULL, b); }
};
struct idx_cta_xg { /* DPL = 1: a CTA of 128 threads, shuffles within a warp, buf[128] across */
    float *buf;
    int t;
    __device__ __forceinline__ float xor_(float v, int m) const {
        if (m < 32) return __shfl_xor_sync(IDX_FULL, v, m);
        buf[t] = v;
        __syncthreads();
        const float r = buf[t ^ m];
        __syncthreads();
        return r;
    }
    __device__ __forceinline__ int any(int b) const { return __syncthreads_or(b); }
};

/* kvc_finalize_indexer over the 128 / DPL threads of one output (xg their
 * exchanges): thread t's window sums c of dims DPL t .., its weights w
 * and, on dims >= 64, the cos / sin of its RoPE pairs (DPL = 1: of the
 * pair its dim belongs to).  The pairwise sums, the butterflies and the
 * maxima take the same operands in every layout: the same bytes.
 * @return 1 (every thread) for a non-finite slot. */
template <int DPL, class XG>
__device__ int idx_finalize(const kvc_args &a, const float c[DPL], const float w[DPL], const float cs[DPL < 2 ? 2 : DPL],
                            int t, const XG &xg, uint8_t *payload, uint8_t *scales) {
    constexpr int T = 128 / DPL; /* threads */
    const int d0 = DPL * t;
    int bad = 0;
    float x[DPL];
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        bad |= kvc_nonfinite(c[j]);
        x[j] = KVC_MUL(c[j], c[j]);
    }
    /* the pairwise sum over 128: its levels below DPL in the thread, the rest across threads */
#pragma unroll
    for (int h = 1; h < DPL; h <<= 1)
#pragma unroll
        for (int j = 0; j < DPL; j += 2 * h) x[j] = KVC_ADD(x[j], x[j + h]);
    float ss = x[0];
#pragma unroll
    for (int m = 1; m < T; m <<= 1) ss = KVC_ADD(ss, xg.xor_(ss, m)); /* (a + b == b + a: every thread the same) */
    const float rr = KVC_DIV(1.0f, KVC_SQRT(KVC_ADD(KVC_MUL(ss, KVC_INV128), a.rms_norm_eps)));
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        x[j] = kvc_rms_apply(c[j], rr, w[j]);
        bad |= kvc_nonfinite(x[j]);
    }
    /* RoPE on dims 64 .. 127: pairs (2p, 2p + 1) */
    if constexpr (DPL >= 2) {
        if (d0 >= 64)
#pragma unroll
            for (int q = 0; q < DPL / 2; q++)
                kvc_rope(x[2 * q], x[2 * q + 1], cs[2 * q], cs[2 * q + 1], &x[2 * q], &x[2 * q + 1]);
    } else {
        const float o = xg.xor_(x[0], 1);
        if (d0 >= 64) {
            const int odd = d0 & 1;
            float u, v;
            kvc_rope(odd ? o : x[0], odd ? x[0] : o, cs[0], cs[1], &u, &v);
            x[0] = odd ? v : u;
        }
    }
    if (a.rotate) { /* Walsh-Hadamard: h = 1, 2, .., 64, in the thread below DPL */
#pragma unroll
        for (int h = 1; h < 128; h <<= 1) {
            if (h < DPL) {
#pragma unroll
                for (int j = 0; j < DPL; j++)
                    if (!(j & h)) {
                        const float u = x[j], v = x[j + h];
                        x[j] = KVC_ADD(u, v);
                        x[j + h] = KVC_SUB(u, v);
                    }
            } else {
#pragma unroll
                for (int j = 0; j < DPL; j++) {
                    const float b = xg.xor_(x[j], h / DPL);
                    x[j] = (t & (h / DPL)) ? KVC_SUB(b, x[j]) : KVC_ADD(x[j], b);
                }
            }
        }
#pragma unroll
        for (int j = 0; j < DPL; j++) x[j] = KVC_MUL(x[j], KVC_INV_SQRT128);
    }
    float amax = 0.0f; /* (a signed zero's order never shows: the exponents take max(amax, floor)) */
#pragma unroll
    for (int j = 0; j < DPL; j++) {
        bad |= kvc_nonfinite(x[j]);
        bad |= kvc_nope_bf16(x[j], &x[j]);
        amax = kvc_max(amax, x[j] < 0.0f ? -x[j] : x[j]);
    }
    bad = xg.any(bad);
    if (a.nope_format == KVC_FMT_IFP8) {
#pragma unroll
        for (int m = 1; m < T; m <<= 1) amax = kvc_max(amax, xg.xor_(amax, m));
        const int e = kvc_group_exponent(amax, 1);
        const float inv = kvc_pow2(-e);
        uint32_t wd = 0;
        if constexpr (DPL == 4) wd = fp8_word4(x, inv);
        else wd = kvc_fp8_code(x[0], inv);
        if (bad) wd = 0;
        const uint32_t sb = bad ? 0x7FC00000u : KVC_BITS(kvc_pow2(e)); /* a quiet NaN for a non-finite slot */
        if (DPL == 4 && ((uintptr_t)payload & 3) == 0) {
            reinterpret_cast<uint32_t *>(payload)[t] = wd;
        } else {
#pragma unroll
            for (int j = 0; j < DPL; j++) payload[d0 + j] = (uint8_t)(wd >> (8 * j));
        }
        if (t < 4) scales[t] = (uint8_t)(sb >> (8 * t));
    } else { /* INDEXER_MXFP4: blocks of 32 dims */
#pragma unroll
        for (int m = 1; m < 32 / DPL; m <<= 1) amax = kvc_max(amax, xg.xor_(amax, m));
        const int e = kvc_mx_exponent(amax);
        const float inv = kvc_pow2(-e);
        if constexpr (DPL >= 2) {
#pragma unroll
            for (int q = 0; q < DPL / 2; q++)
                payload[d0 / 2 + q] = bad ? (uint8_t)0
                                          : (uint8_t)(kvc_e2m1_code(KVC_MUL(x[2 * q], inv)) |
                                                      (kvc_e2m1_code(KVC_MUL(x[2 * q + 1], inv)) << 4));
        } else {
            const int code = kvc_e2m1_code(KVC_MUL(x[0], inv));
            const int hi = __shfl_xor_sync(IDX_FULL, code, 1);
            if (!(t & 1)) payload[t / 2] = bad ? (uint8_t)0 : (uint8_t)(code | hi << 4);
        }
        if (d0 % 32 == 0) scales[d0 / 32] = bad ? (uint8_t)0xFF : (uint8_t)(e + 127);
    }
    return bad;
}

/* Row i (< the window's rows) of the window of boundary position p in
 * request r, head width D: the element offsets of its values (*voff; its
 * scores kvc_score_delta() further) and, with a score bias, of its bias row
 * in a bias of row stride bstride (*boff), both left as they are for a
 * masked row (value 0, score -Inf).  @return 1 with *blk set where the
 * row's block is out of range. */
__device__ __forceinline__ int seg1_row(const kvc_args &a, long long p, long long r, int i, int D, long long bstride,
                                        long long *voff, long long *boff, long long *blk) {
    const int ovl = a.overlap == KVC_OVERLAP_ON;
    int vo, so;
    const long long pos = kvc_window_row(p, a.compress_ratio, ovl, D, i, &vo, &so);
    if (pos < 0) return 0;
    const long long b = a.block_table[r * a.block_table_stride + pos / a.block_size];
    if (b < 0 || b >= a.num_blocks) {
        *blk = b;
        return 1;
    }
    *voff = kvc_state_row_offset(&a, b, pos) + vo;
    if (a.score_bias) *boff = kvc_bias_offset(pos, a.compress_ratio, bstride, so, ovl, D);
    return 0;
}

/* BF16: a bf16 state (SPEC 10).  BIAS: a score bias is added where
 * P.a.score_bias is set, from the CTA's copy in shared memory: every row's,
 * a masked row's from the unit of zeros (-Inf + 0 = -Inf), so that no row
 * needs a predicate.  With either (ROLL), row i of a warp's next output is
 * loaded as soon as row i of the current one is consumed, in flight during
 * the rest of its reduction; a float32 state without a bias, whose
 * reduction is shorter and whose registers are full, loads it after the
 * reduction (rolled, it measured slower).  KMAX: outputs a CTA at most. */
template <bool BF16, bool BIAS, int KMAX = IDX_K>
__device__ __forceinline__ void indexer_body(const launch_params &P, unsigned cta) {
    constexpr bool ROLL = BF16 || BIAS;
    __shared__ idx_cta<KMAX> w;
    __shared__ float4 s_bias[BIAS ? (IDX_ZERO_UNIT + 1) * 32 : 1]; /* [unit][lane]: dims 4 lane .. 4 lane + 3 */
    __shared__ unsigned long long s_count[2]; /* the CTA's written, non-finite outputs */
    __shared__ int s_next;                    /* the CTA's next unclaimed output */
    const kvc_args &a = P.a;
    kvc_device_status *const st = status_of(P);
    const int q = threadIdx.x, lane = q & 31, wi = q >> 5;
    const long long o0 = (long long)cta * P.pl.small_k;
    const int kn = (int)(a.num_outputs - o0 < P.pl.small_k ? a.num_outputs - o0 : P.pl.small_k);
    if (q < 2) s_count[q] = 0;
    if (q == 0) s_next = IDX_WARPS; /* (warp w starts with output w) */
    /* the bias, C x W / 2 <= 1024 floats: thread q its floats 4q .. 4q + 3 */
    const bool has_bias = BIAS && a.score_bias;
    const int half = (int)a.state_width / 2, nb = has_bias ? (int)a.compress_ratio * half : 0;
    float4 bq = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (4 * q < nb) {
        const float *b = a.score_bias + (4 * q / half) * a.score_bias_stride + 4 * q % half;
        bq = make_float4(__ldg(b), __ldg(b + 1), __ldg(b + 2), __ldg(b + 3));
    }
    /* the index chain's second link into L2 while its first loads: the
     * token, request and position of output o's boundary token on the guess
     * of a dense prefill (token o C + C - 1, clamped into the arrays; a wrong
     * guess costs a line) */
    for (int k = q; k < kn; k += IDX_WARPS * 32) {
        const long long nt = a.num_tokens, g = (o0 + k) * a.compress_ratio + a.compress_ratio - 1;
        const long long b = g >= nt ? nt - 1 : g;
        if (b < 0) break;
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a.positions + b));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a.token_to_req + b));
        asm volatile("prefetch.global.L2 [%0];" ::"l"(a.kv_slot_mapping + b));
    }
    for (int k = q; k < kn; k += IDX_WARPS * 32) { /* the outputs' checks: thread k, output k */
        kvc_out_info inf;
        const long long o = o0 + k;
        const int ok = !skip_output(P, st, kvc_check_output(&a, o, &inf, 0), o, inf, 1);
        w.ok[k] = ok;
        w.bad[k] = 0;
        if (ok) w.at[k] = slot_at(P, inf.slot);
        w.pc[k] = inf.pc;
        w.r[k] = inf.r;
        w.p[k] = inf.p;
    }
    if (BIAS && 4 * q < nb) s_bias[q] = bq;
    if (BIAS && q < 32) s_bias[IDX_ZERO_UNIT * 32 + q] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    __syncthreads();
    /* their rows: a thread a row */
    const int rows = (int)P.pl.rows;
    for (int t = q; t < kn * KVC_SEG; t += IDX_WARPS * 32) {
        const int k = t / KVC_SEG, i = t % KVC_SEG;
        long long blk, bo = 128 * IDX_ZERO_UNIT; /* (its bias at floats bo of the shared copy) */
        w.voff[t] = -1;
        if (w.ok[k] && i < rows && seg1_row(a, w.p[k], w.r[k], i, 128, half, &w.voff[t], &bo, &blk) &&
            atomicCAS(&w.bad[k], 0, 1) == 0)
            w.badg[k] = blk;
        if (BIAS) reinterpret_cast<unsigned char *>(w.bu)[t] = (unsigned char)(bo / 128);
    }
    float wt[4], cs[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; j++) wt[j] = kvc_bf16_to_f32(a.rms_norm_weight[4 * lane + j]);
    __syncthreads();
    /* warp wi's output after k, the same in all its lanes: claimed, or
     * k + IDX_WARPS (EXACT with a bf16 state: claiming measured 0.4-1.9%
     * slower there, 2% faster in FAST) */
    auto claim = [&](int k) {
        if constexpr (BF16 && !FASTNUM) return k + IDX_WARPS;
        int c = 0;
        if (lane == 0) c = atomicAdd(&s_next, 1);
        return __shfl_sync(IDX_FULL, c, 0);
    };
    /* from output k on, the first live one (checked, no bad row; the
     * others' errors reported) */
    auto next_live = [&](int k) {
        for (; k < kn; k = claim(k)) {
            if (!w.ok[k]) continue;
            if (!w.bad[k]) return k;
            if (lane == 0) {
                record_error(P, st, KVC_CHECK_PHYSICAL_BLOCK, o0 + k, w.badg[k]);
                count(&st->outputs_invalid);
            }
        }
        return kn;
    };
    int written = 0, nonfinite = 0;
    typedef idx_raw<BF16> R;
    idx_rows<BF16> x;
    int k = next_live(wi);
    /* A window of fewer than 8 rows is reduced as 8, the rows past it
     * masked (offset -1: value 0, score -Inf): such a row leaves the max as
     * it is and adds +0 to the sums, which never changes their bits (a sum
     * from +0 is never -0).  So no row needs a guard, whose predicate would
     * be held through the reduction (a guard a row took the predicate
     * registers, and the exps ran one after the other). */
    if (k < kn)
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) idx_load_row<BF16>(P, w, k, i, lane, x);
    while (k < kn) {
        if (lane >= 16) {
            const float *row = a.cos_sin_cache + w.pc[k] * a.cos_sin_stride;
            const int il = a.cos_sin_layout == KVC_COS_SIN_INTERLEAVED;
#pragma unroll
            for (int t = 0; t < 2; t++) kvc_cos_sin(row, il, 2 * (lane - 16) + t, &cs[2 * t], &cs[2 * t + 1]);
        }
        float sc[KVC_SEG][4]; /* the scores, a score bias added */
        const unsigned long long bu = has_bias ? w.bu[k] : 0;
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) {
            const float4 bv = has_bias ? s_bias[(int)(bu >> 8 * i & 0xFF) * 32 + lane] : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                sc[i][j] = R::get(x.s[i], j);
                if (has_bias) sc[i][j] = KVC_ADD(sc[i][j], idx_raw<false>::get(bv, j));
            }
        }
        float m[4], den[4], num[4], c[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            m[j] = sc[0][j];
            den[j] = num[j] = 0.0f;
#pragma unroll
            for (int i = 1; i < KVC_SEG; i++) m[j] = kvc_max(m[j], sc[i][j]);
        }
        const int kk = next_live(claim(k));
        /* a float32 state: every row's weight first (independent, their
         * exps' long chains overlap), then the sums in row order; bf16 (the
         * next output's rows loaded as these are consumed, 85 registers):
         * row by row (weights first spilled) */
        if constexpr (!BF16)
#pragma unroll
            for (int i = 0; i < KVC_SEG; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) sc[i][j] = red_weight(m[j], sc[i][j]);
#pragma unroll
        for (int i = 0; i < KVC_SEG; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++)
                red_acc(BF16 ? red_weight(m[j], sc[i][j]) : sc[i][j], R::get(x.v[i], j), &den[j], &num[j]);
            if (ROLL && kk < kn) idx_load_row<BF16>(P, w, kk, i, lane, x);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            kvc_seg_close(m[j], &den[j], &num[j]);
            c[j] = KVC_DIV(num[j], den[j]);
        }
        if (!ROLL && kk < kn) /* in flight while k finalises */
#pragma unroll
            for (int i = 0; i < KVC_SEG; i++) idx_load_row<BF16>(P, w, kk, i, lane, x);
        const kv_slot at = w.at[k];
        const int bad = idx_finalize<4>(a, c, wt, cs, lane, idx_warp_xg(), a.kv_cache + at.po, a.kv_cache + at.so);
        written++;
        nonfinite += bad;
        k = kk;
    }
    /* one atomic per CTA and counter */
    if (lane == 0 && written) atomicAdd(&s_count[0], (unsigned long long)written);
    if (lane == 0 && nonfinite) atomicAdd(&s_count[1], (unsigned long long)nonfinite);
    __syncthreads();
    if (q == 0 && s_count[0]) atomicAdd(reinterpret_cast<unsigned long long *>(&st->outputs_written), s_count[0]);
    if (q == 0 && s_count[1]) atomicAdd(reinterpret_cast<unsigned long long *>(&st->outputs_nonfinite), s_count[1]);
}
template <bool BF16, bool BIAS>
__global__ void __launch_bounds__(IDX_WARPS * 32, idx_minb(BF16, BIAS)) indexer_kernel(const launch_params P) {
    status_begin(P);
    indexer_body<BF16, BIAS, IDX_K_SOLO>(P, blockIdx.x);
    status_end(P);
}

#undef IDX_FULL
