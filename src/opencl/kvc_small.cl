/*
 * kvc_small.cl -- the one-segment kernel: windows of one segment (C <= 8,
 * or C <= 4 with overlap: the C4 compressor).  Embedded after kvc_kernel.cl,
 * whose seg_load, seg_reduce, output_of and record_error it uses.
 *
 * A work-group of 256 work-items takes pl.small_k <= KVC_CL_SMALL_K
 * consecutive outputs.  Their index checks run in parallel (work-item k:
 * output k), their rows are resolved in parallel (one work-item per row,
 * each row's block checked).  Then rounds of 8 outputs: the group reduces
 * them one after another (work-item q: dims 2q, 2q + 1; the next output's
 * loads in flight during the current one's arithmetic and across the
 * round's end) into local memory, and then finalises all 8 at once, lane
 * group g (work-items 32g .. 32g + 31) output g of the round, work-item l of
 * it dims 16l .. 16l + 15: four barriers per round of 8 outputs instead of
 * four per output.  The canonical order of kvc_finalize_slot: work-item l's
 * 16 dims are one subtree of the RMS sum's pairwise tree, the 32 subtrees
 * are added in tree order from local memory; a NOPE group of 64 dims is 4
 * work-items (l < 28), the 32 RoPE pairs are work-items 28 .. 31's.
 * Loop forms only (PoCL: see KVC_CL_STRAIGHT).
 */
#ifndef KVC_CL_SMALL_K
#define KVC_CL_SMALL_K 32 /* outputs per work-group at most: the host passes KVC_OPENCL_SMALL_K */
#endif
#define KVC_CL_ROUND 8 /* outputs finalised per round: one per lane group */

typedef struct {
    float c[KVC_CL_ROUND][512];      /* the round's c                          */
    float2 cs[KVC_CL_ROUND][32];     /* its outputs' (cos, sin) pairs          */
    int bad[KVC_CL_ROUND];           /* its outputs' non-finite marks          */
    float part[KVC_CL_ROUND][32];    /* RMS subtrees of 16 dims                */
    int amax[KVC_CL_ROUND][32];      /* |z| maxima of 16 NOPE dims (bits)      */
    float w[512];                    /* RMSNorm weights                        */
    long rowoff[KVC_CL_SMALL_K * KVC_SEG];
    long slot[KVC_CL_SMALL_K], pc[KVC_CL_SMALL_K], r[KVC_CL_SMALL_K], p[KVC_CL_SMALL_K], badg[KVC_CL_SMALL_K];
    int ok[KVC_CL_SMALL_K], badb[KVC_CL_SMALL_K], masked[KVC_CL_SMALL_K];
} kvc_small_local;

/* Balanced pairwise sum of x[0..7] (three tree levels), private memory. */
static inline float tree8_private(const float *x) {
    return KVC_ADD(KVC_ADD(KVC_ADD(x[0], x[1]), KVC_ADD(x[2], x[3])),
                   KVC_ADD(KVC_ADD(x[4], x[5]), KVC_ADD(x[6], x[7])));
}

/* The first output from k on that is reduced (checks passed, no bad
 * block); the skipped ones with a bad block are reported by work-item 0.
 * The choice is the same in every work-item. */
static int small_next(__local const kvc_small_local *L, __global kvc_cl_status *st, long o0, int k, int kn, int q) {
    for (; k < kn; k++) {
        if (!L->ok[k]) continue;
        if (!L->badb[k]) return k;
        if (q == 0) {
            record_error(st, KVC_CHECK_PHYSICAL_BLOCK, o0 + k, L->badg[k]);
            atomic_inc(&st->invalid);
        }
    }
    return kn;
}

/* Finalise output g of the round from L->c[g] into slot (lane group g,
 * work-item l: dims 16l .. 16l + 15), between the round's barriers A (c
 * ready, before the call), B (RMS subtrees) and C (amax, non-finite marks).
 * Every work-item calls it; live = 0 computes nothing.  @return 1 if the
 * slot was written non-finite (live lane groups, every work-item). */
static int small_finalize(__local kvc_small_local *L, int g, int l, int live, long slot, const kvc_shape *sh,
                          __global uchar *kv) {
    float y[16], z[16];
    ushort h[16];
    int bad = 0;
    if (live) {
        float p[8];
        for (int i = 0; i < 16; i++) {
            y[i] = L->c[g][16 * l + i];
            bad |= kvc_nonfinite(y[i]);
        }
        for (int i = 0; i < 8; i++) p[i] = KVC_ADD(KVC_MUL(y[2 * i], y[2 * i]), KVC_MUL(y[2 * i + 1], y[2 * i + 1]));
        L->part[g][l] = tree8_private(p); /* level 4 of the 512-leaf tree */
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* B */
    if (live) {
        __local const float *u = L->part[g];
        const float ss = KVC_ADD(KVC_ADD(tree8_local(u), tree8_local(u + 8)),
                                 KVC_ADD(tree8_local(u + 16), tree8_local(u + 24)));
        const float rr = kvc_rms_scale(ss, sh->rms_norm_eps);
        for (int i = 0; i < 16; i++) {
            y[i] = kvc_rms_apply(y[i], rr, L->w[16 * l + i]);
            bad |= kvc_nonfinite(y[i]);
        }
        if (l < 28) { /* NOPE: the group amax as an integer max of the bits (non-negative) */
            float m = 0.0f;
            for (int i = 0; i < 16; i++) {
                bad |= kvc_nope_bf16(y[i], &z[i]);
                m = kvc_max(m, z[i] < 0.0f ? -z[i] : z[i]);
            }
            L->amax[g][l] = (int)as_uint(m);
        } else { /* RoPE pairs 8 (l - 28) .. + 7 */
            for (int i = 0; i < 8; i++) {
                const float2 cs = L->cs[g][8 * (l - 28) + i];
                bad |= kvc_rope_bf16(y[2 * i], y[2 * i + 1], cs.x, cs.y, &h[2 * i], &h[2 * i + 1]);
            }
        }
        if (bad) L->bad[g] = 1;
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* C */
    if (!live) return 0;
    bad = L->bad[g];
    long po, so;
    kvc_slot_offsets_s(slot, sh->kv_block_size, sh->page_stride, &po, &so);
    __global uchar *payload = kv + po, *scales = kv + so;
    if (l < 28) {
        __local const int *a4 = L->amax[g] + (l & ~3);
        const int am = max(max(a4[0], a4[1]), max(a4[2], a4[3]));
        const int e = kvc_group_exponent(as_float((uint)am), sh->nope_format == 1);
        uchar code[16];
        for (int i = 0; i < 16; i++) code[i] = bad ? 0 : kvc_nope_code(z[i], e, sh->nope_format == 1);
        vstore16(vload16(0, code), 0, payload + 16 * l);
        if ((l & 3) == 0) scales[l / 4] = kvc_scale_byte(e, bad);
    } else {
        __global uchar *rp = payload + 448 + 32 * (l - 28);
        for (int i = 0; i < 16; i++) {
            const ushort x = bad ? KVC_BF16_QNAN : h[i];
            rp[2 * i] = (uchar)(x & 0xFF);
            rp[2 * i + 1] = (uchar)(x >> 8);
        }
    }
    if (l == 0) scales[7] = 0;
    return bad;
}

__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void kvc_compress_small(KVC_CL_KERNEL_ARGS) {
    __local kvc_small_local L;
    const int q = (int)get_local_id(0), g = q >> 5, l = q & 31;
    const long o0 = (long)get_group_id(0) * pl.small_k;
    const int kn = (int)(sh.num_outputs - o0 < pl.small_k ? sh.num_outputs - o0 : pl.small_k);
    if (q < kn) { /* work-item q: output o0 + q's checks (it records its own error or padding) */
        kvc_out_info inf;
        L.ok[q] = output_of(&sh, bidx, slots, t2r, positions, table, st, o0 + q, 1, &inf);
        L.badb[q] = 0;
        L.masked[q] = 0;
        L.slot[q] = inf.slot;
        L.pc[q] = inf.pc;
        L.r[q] = inf.r;
        L.p[q] = inf.p;
    }
    for (int d = q; d < 512; d += KVC_CL_WG) L.w[d] = kvc_bf16_to_f32(weight[d]);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int rows = (int)pl.rows; /* <= 8 */
    for (int x = q; x < kn * KVC_SEG; x += KVC_CL_WG) {
        const int k = x / KVC_SEG, i = x % KVC_SEG;
        long off = -1, bg;
        if (L.ok[k] && i < rows) {
            off = kvc_row_lookup(&sh, table + L.r[k] * sh.block_table_stride, L.p[k], i, &bg);
            if (off == KVC_ROW_MASKED) L.masked[k] = 1;
            if (off == KVC_ROW_BAD && atomic_xchg(&L.badb[k], 1) == 0) L.badg[k] = bg;
        }
        L.rowoff[x] = off;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const long sdelta = kvc_score_delta(sh.overlap != 0);
    int written = 0, nonfinite = 0; /* work-item l = 0's counts of its lane group's outputs */
    int k = small_next(&L, st, o0, 0, kn, q);
    float2 v[KVC_SEG], s[KVC_SEG];
    if (k < kn) seg_load(state, L.rowoff, sdelta, k * KVC_SEG, rows, q, v, s, !L.masked[k], (int)pl.vec);
    for (int r0 = 0; r0 < kn; r0 += KVC_CL_ROUND) {
        const int kr = r0 + g;
        const int live = kr < kn && L.ok[kr] && !L.badb[kr];
        /* the round's (cos, sin) pairs: work-item q = output r0 + g, pair l
         * (loaded here, stored after the reductions) */
        float cc = 0.0f, sc = 0.0f;
        if (live) kvc_cos_sin(cos_sin + L.pc[kr] * sh.cos_sin_stride, sh.cos_sin_layout == 1, l, &cc, &sc);
        if (q < KVC_CL_ROUND) L.bad[q] = 0;
        while (k < r0 + KVC_CL_ROUND && k < kn) { /* k: the next output to reduce */
            const st2 res = seg_reduce(v, s, rows, KVC_SEG);
            const int kk = small_next(&L, st, o0, k + 1, kn, q);
            if (kk < kn) /* in flight during the rest of the round */
                seg_load(state, L.rowoff, sdelta, kk * KVC_SEG, rows, q, v, s, !L.masked[kk], (int)pl.vec);
            for (int j = 0; j < 2; j++) L.c[k - r0][2 * q + j] = KVC_DIV(res.n[j], res.d[j]);
            k = kk;
        }
        L.cs[g][l] = (float2)(cc, sc);
        barrier(CLK_LOCAL_MEM_FENCE); /* A */
        const int bad = small_finalize(&L, g, l, live, live ? L.slot[kr] : -1, &sh, kv);
        if (live && l == 0) {
            written++;
            nonfinite += bad;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* D: c, cs, bad, part, amax free for the next round */
    }
    if (l == 0 && written) atomic_add(&st->written, written);
    if (l == 0 && nonfinite) atomic_add(&st->nonfinite, nonfinite);
}
