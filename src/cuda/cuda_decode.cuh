/*
 * cuda_decode.cuh -- decode-sized calls of one-segment windows (C <= 8, or
 * C <= 4 with overlap: a CSA layer's two compressors at every decode step):
 * an output a CTA of D threads (head width D = 512 or 128), thread t
 * holding dim t.  A call whose outputs fit one wave of these CTAs
 * (cuda_backend.cu: seg1_wave) has no later output whose loads could hide
 * an output's latency, so this kernel shortens the one output's chain:
 *   - every warp checks the output and resolves its window's rows itself
 *     (lane i: row i, shuffled to the others): no barrier before the loads;
 *   - a thread's window is 8 exps (the one-segment kernel's 16, the
 *     indexer kernel's 32), so the reduction's latency is a fraction;
 *   - head width 512: c through shared memory to the one-segment kernel's
 *     finaliser (threads 0..127); 128: idx_finalize's layout of a dim a
 *     thread;
 *   - thread 0 writes the output's status whole at the end: the call's
 *     word for a call of one output (P.status_out), else the CTA's record
 *     (P.records, status_of): no memset before the launch.
 * Same bytes as those kernels: the same operations per dim, rows past a
 * short window masked (value 0, score -Inf: +0 added, the max unchanged).
 *
 * Included by cuda_kernels.cuh for DPT = 2 (namespaces kvc_cuda_d2 and
 * kvc_cuda_d2f: FASTNUM 0 / 1), after cuda_indexer.cuh.
 */

/* The status of one output written whole (the call's word for a call of
 * one output, else the CTA's record): the index check that failed
 * (KVC_CHECK_NONE: none) for output `output` and its value, or where it
 * passed a padding, written or non-finite output. */
__device__ __forceinline__ void seg1_status(kvc_device_status *st, long long output, int check, long long value,
                                            int padding, int written, int nonfinite) {
    const int err = check != KVC_CHECK_NONE;
    st->status = err ? (int)KVC_ERROR_INDEX_OUT_OF_RANGE : 0;
    st->check = check;
    st->output = err ? output : 0;
    st->value = err ? value : 0;
    st->outputs_written = written;
    st->outputs_padding = padding;
    st->outputs_nonfinite = nonfinite;
    st->outputs_invalid = err;
}

template <int D, bool BF16, bool BIAS> __global__ void __launch_bounds__(D) segment1_kernel(const launch_params P) {
    __shared__ float xbuf[D + 8]; /* c (D = 512) or the finaliser's exchanges (128); the RMS sum's 4 floats */
    const kvc_args &a = P.a;
    const int t = threadIdx.x, lane = t & 31;
    const long long o = blockIdx.x;
    if (t == 0 && o == 0 && P.records) status_header(P);
    /* thread 0 writes the output's status whole (direct): to the call's word
     * (a call of one output) or this CTA's record; else counts in P.status */
    kvc_device_status *const whole = P.status_out ? P.status_out : P.records ? P.records + o : nullptr;
    kvc_out_info inf;
    const int chk = kvc_check_output(&a, o, &inf, 0), direct = whole != nullptr;
    const int skip = skip_output(P, P.status, chk, o, inf, t == 0 && !direct);
    long long voff = -1, boff = -1, blk = 0;
    const int badrow =
        !skip && lane < (int)P.pl.rows && seg1_row(a, inf.p, inf.r, lane, D, a.score_bias_stride, &voff, &boff, &blk);
    const unsigned badm = __ballot_sync(0xFFFFFFFFu, badrow);
    if (skip || badm) { /* (the same in every warp) */
        const long long badg = __shfl_sync(0xFFFFFFFFu, blk, badm ? __ffs(badm) - 1 : 0);
        if (t == 0 && direct)
            seg1_status(whole, P.pl.out_base + o, skip ? chk : (int)KVC_CHECK_PHYSICAL_BLOCK, skip ? inf.value : badg,
                        skip && chk == KVC_CHECK_NONE, 0, 0);
        else if (t == 0 && !skip) {
            record_error(P, P.status, KVC_CHECK_PHYSICAL_BLOCK, o, badg);
            count(&P.status->outputs_invalid);
        }
        return;
    }
    const long long sd = kvc_score_delta(a.overlap == KVC_OVERLAP_ON, D);
    float v[KVC_SEG], s[KVC_SEG];
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) {
        const long long off = __shfl_sync(0xFFFFFFFFu, voff, i), b = BIAS ? __shfl_sync(0xFFFFFFFFu, boff, i) : -1;
        v[i] = 0.0f;
        s[i] = KVC_NEG_INF;
        if (off >= 0) {
            if constexpr (BF16) {
                const unsigned short *h = reinterpret_cast<const unsigned short *>(a.state_cache) + off + t;
                v[i] = kvc_bf16_to_f32(__ldcs(h));
                s[i] = kvc_bf16_to_f32(__ldcs(h + sd));
            } else {
                v[i] = KVC_LD(a.state_cache + off + t);
                s[i] = KVC_LD(a.state_cache + off + sd + t);
            }
        }
        if (b >= 0) s[i] = KVC_ADD(s[i], __ldg(a.score_bias + b + t));
    }
    /* the finaliser's inputs, in flight with the rows */
    fin_in f;
    if constexpr (D == 128) {
        f.w[0] = kvc_bf16_to_f32(a.rms_norm_weight[t]);
        if (t >= 64)
            kvc_cos_sin(a.cos_sin_cache + inf.pc * a.cos_sin_stride, a.cos_sin_layout == KVC_COS_SIN_INTERLEAVED,
                        (t - 64) >> 1, &f.cs[0], &f.cs[1]);
    } else {
        fin_load_weights(P, t, f);
        fin_load_cos_sin(P, inf.pc, t, f);
    }
    float m = s[0], den = 0.0f, num = 0.0f;
#pragma unroll
    for (int i = 1; i < KVC_SEG; i++) m = kvc_max(m, s[i]);
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) s[i] = red_weight(m, s[i]);
#pragma unroll
    for (int i = 0; i < KVC_SEG; i++) red_acc(s[i], v[i], &den, &num);
    kvc_seg_close(m, &den, &num);
    const float c = KVC_DIV(num, den);
    const kv_slot at = slot_at(P, inf.slot);
    int bad = 0;
    if constexpr (D == 128) {
        const idx_cta_xg xg = {xbuf, t};
        bad = idx_finalize<1>(a, &c, f.w, f.cs, t, xg, a.kv_cache + at.po, a.kv_cache + at.so);
    } else {
        xbuf[t] = c;
        __syncthreads();
        if (t < 128) {
            float c4[4];
#pragma unroll
            for (int j = 0; j < 4; j++) c4[j] = xbuf[4 * t + j];
            bad = finalize(P, at, c4, rms_sum_128(c4, t, xbuf + 512), t, f);
        }
    }
    if (t == 0 && direct) {
        seg1_status(whole, P.pl.out_base + o, KVC_CHECK_NONE, 0, 0, 1, bad);
    } else if (t == 0) {
        count(&P.status->outputs_written);
        if (bad) count(&P.status->outputs_nonfinite);
    }
}
