/*
 * kvc_slice.cl -- the slice kernels (the CUDA backend's design,
 * cuda_slice.cuh, in OpenCL C 1.2 without extensions): windows of 16, 32 or
 * 64 full segments without overlap (C = 128, 256, 512), rows 8-byte aligned.
 * Embedded after kvc_kernel.cl, whose seg_reduce, seg_load, st_merge,
 * tree8_local, report_check and record_error it uses.
 *
 * kvc_slice / kvc_slice_dense: a work-group of 256 work-items reduces one
 * (output, 16-segment chunk, 64-dim slice).  Work-items 32w .. 32w + 31 (a
 * "lane group" w) take the chunk's segments 2w and 2w + 1, work-item l of
 * the lane group the dims 64 sl + 2l and + 1.  Where the block size is a
 * power of two >= 8 and the window starts on a multiple of 8, each segment
 * lies in one block: every work-item reads the two table entries of its
 * lane group itself (the same address for all 32: one load) and issues its
 * 32 loads at once from the two segments' first rows and the token stride
 * (kvc_slice_dense: the stride 1024 of dense rows compiled in).  Otherwise
 * the group first resolves its 128 rows into local memory (one work-item
 * per row, each row's block checked).  The two segment states merge in
 * registers, the 8 lane groups' states in tree order through local memory;
 * lane group 0 stores the chunk's result and the group exits: no group
 * waits for another.  One chunk (C = 128): c = n / d of the slice's 64 dims
 * and their subtree of the RMS sum (the output's c record: c[512], then the
 * 8 slices' sums); else the chunk's state [3][512] floats (m, d, n).  Each
 * group leaves two ints in `tickets`: a bad-block flag and the block (the
 * first bad row of its window order).
 *
 * Nothing in the slice kernels writes the status word, so group 0 zeroes
 * it (the host enqueues no fill before them: a command fewer per call).
 *
 * The finisher (kvc_slice_finish, one 128-item group per output, work-item
 * q the dims 4q .. 4q + 3), enqueued after it, reads the output's check
 * record (left by its first slice group; errors and padding are counted
 * there) and the groups' bad-block words, gets c and the RMS sum (C = 128:
 * the c record and the 8 slices' sums in tree order; C = 256 / 512: the 2
 * or 4 chunk states merged in tree order, the sum by the canonical tree)
 * and finalises the slot (fin128_*).
 */

/* Output o's check record, after the c records or chunk states: the result
 * of kvc_check_output_s (check, value, slot, pc), written by the output's
 * first slice group for the finisher. */
static inline __global long *check_record(const kvc_shape *sh, const kvc_plan *pl, __global float *out, long o) {
    const long per = pl->nchunk == 1 ? KVC_CL_SLICE_REC : pl->nchunk * KVC_CL_CHUNK_STATE;
    return (__global long *)(out + sh->num_outputs * per + KVC_CL_CHECK_REC * o);
}

/* The slice groups' local memory, declared by the kernels (OpenCL 1.2: only
 * a kernel may declare it). */
typedef struct {
    float xs[8][6][32]; /* lane-group states: m0 m1 d0 d1 n0 n1 */
    long rowoff[128];   /* the general path's row offsets */
    int wbad[8];        /* lane group w met a bad block ... */
    long wbadg[8];      /* ... this one */
    int first_bad;      /* general path: first bad row */
} kvc_slice_local;

/* SPEC 10's score bias on the scores s of window positions pos0 ..
 * pos0 + 7 (no overlap: none is masked), dims 2 dq, 2 dq + 1: bias row
 * pos mod C, by a mask (C is 128, 256 or 512 here), not kvc_bias_offset's
 * 64-bit remainder a row. */
static inline void slice_add_bias(const kvc_shape *sh, __global const float *bias, long pos0, int dq, float2 *s) {
    const int cm = (int)sh->compress_ratio - 1, r = (int)(pos0 & cm);
    for (int i = 0; i < KVC_SEG; i++) {
        const float2 b = vload2(dq, bias + ((r + i) & cm) * sh->score_bias_stride);
        s[i].x = KVC_ADD(s[i].x, b.x);
        s[i].y = KVC_ADD(s[i].y, b.y);
    }
}

/* The body of the slice kernels; TS > 0: the token stride, known at
 * compile time (immediate load offsets), 0: sh->state_stride_token; bf16
 * (a literal, or sh->state_bf16): a bf16 state, each pair of dims one
 * 4-byte load (both strides even), widened by seg_widen; bias: the score
 * bias (NULL: none). */
static inline void slice_body(const kvc_shape *sh, const kvc_plan *pl, __global const float *state,
                              __global const int *t2r, __global const long *positions, __global const long *slots,
                              __global const long *bidx, __global const int *table, __global float *out,
                              __global volatile int *bad_words, __local kvc_slice_local *L, const long TS,
                              const int bf16, __global const float *bias) {
    const long nch = pl->nchunk;
    const long gid = get_group_id(0);
    const long o = gid / (8 * nch);
    const int j = (int)((gid % (8 * nch)) >> 3), sl = (int)(gid & 7);
    const int q = (int)get_local_id(0), w = q >> 5, l = q & 31, dq = 32 * sl + l;
    /* what the loads need (the finisher runs every check and reports) */
    const long b = bidx[o];
    if (j == 0 && sl == 0 && q == 0) { /* the output's checks, for the finisher (its first loads) */
        kvc_out_info inf;
        const int chk = kvc_check_output_s(sh, bidx, slots, t2r, positions, table, o, &inf, 0);
        __global long *cr = check_record(sh, pl, out, o);
        cr[0] = chk;
        cr[1] = inf.value;
        cr[2] = inf.slot;
        cr[3] = inf.pc;
    }
    /* Branch-free to the rows (as the CUDA slice kernel): the token, request
     * and position clamped into range, so that the chain index -> token ->
     * table -> rows runs with no test between its links and every address
     * stays in bounds; the output's validity is tested once, with the slot,
     * after the table loads.  (The host takes these kernels only where the
     * clamps have a target: num_tokens, num_reqs, num_blocks >= 1 and
     * blocks_per_req x block_size >= C.) */
    const long nt = sh->num_tokens, nr = sh->num_reqs;
    const long bc = b < 0 ? 0 : b >= nt ? nt - 1 : b;
    const long r = t2r[bc], pp = positions[bc], slot = slots[bc];
    const long C = sh->compress_ratio, bs = sh->block_size;
    const int bsh = (bs & (bs - 1)) == 0 ? 63 - (int)clz(bs) : -1;
    const long pmax = sh->blocks_per_req * bs - 1;
    const long rc = r < 0 ? 0 : r >= nr ? nr - 1 : r, p = pp < C - 1 ? C - 1 : pp > pmax ? pmax : pp;
    const int ok = (b == bc) & (r == rc) & (pp == p); /* 0: the finisher reports the output */
    __global const int *trow = table + rc * sh->block_table_stride;
    const long ts = TS > 0 ? TS : sh->state_stride_token, bstride = sh->state_stride_block;
    const long pos0 = p - C + 1 + 128 * j + 16 * w; /* the lane group's first row */
    const int aligned = bsh >= 3 && ((p - C + 1) & 7) == 0; /* the same for the whole group */
    int bad;
    st2 st;
    if (aligned) {
        long o0, o1;
        const long l0 = pos0 >> bsh, l1 = (pos0 + KVC_SEG) >> bsh;
        const long g0 = trow[l0], g1 = trow[l1];
        const int bad0 = g0 < 0 || g0 >= sh->num_blocks, bad1 = g1 < 0 || g1 >= sh->num_blocks;
        bad = bad0 | bad1;
        if (l == 0) {
            L->wbad[w] = bad;
            L->wbadg[w] = bad0 ? g0 : g1;
        }
        o0 = bad ? 0 : g0 * bstride + (pos0 - (l0 << bsh)) * ts; /* (a bad lane group loads row 0: */
        o1 = bad ? 0 : g1 * bstride + (pos0 + KVC_SEG - (l1 << bsh)) * ts; /* its state is never used) */
        if (!ok || slot < 0) return; /* invalid or padding (tested after the table loads: they need no test) */
        float2 va[KVC_SEG], sa[KVC_SEG], vb[KVC_SEG], sb[KVC_SEG]; /* the two segments' values, scores */
        const long t2 = ts / 2;
        if (bf16) { /* a pair a 4-byte word, the scores 256 words on */
            __global const uint *pa = (__global const uint *)((__global const ushort *)state + o0) + dq;
            __global const uint *pb = (__global const uint *)((__global const ushort *)state + o1) + dq;
            for (int i = 0; i < KVC_SEG; i++) {
                va[i] = (float2)(as_float(pa[i * t2]), 0.0f);
                sa[i] = (float2)(as_float(pa[i * t2 + 256]), 0.0f);
                vb[i] = (float2)(as_float(pb[i * t2]), 0.0f);
                sb[i] = (float2)(as_float(pb[i * t2 + 256]), 0.0f);
            }
            seg_widen(va, sa);
            seg_widen(vb, sb);
        } else {
            __global const float2 *pa = (__global const float2 *)(state + o0) + dq;
            __global const float2 *pb = (__global const float2 *)(state + o1) + dq;
            for (int i = 0; i < KVC_SEG; i++) {
                va[i] = pa[i * t2];
                sa[i] = pa[i * t2 + 256];
                vb[i] = pb[i * t2];
                sb[i] = pb[i * t2 + 256];
            }
        }
        if (bias) {
            slice_add_bias(sh, bias, pos0, dq, sa);
            slice_add_bias(sh, bias, pos0 + KVC_SEG, dq, sb);
        }
        st = seg_reduce(va, sa, KVC_SEG, KVC_SEG);
        const st2 st1 = seg_reduce(vb, sb, KVC_SEG, KVC_SEG);
        st_merge(&st, &st1);
    } else {
        if (!ok || slot < 0) return;
        if (q == 0) L->first_bad = 128;
        barrier(CLK_LOCAL_MEM_FENCE);
        long g = 0; /* work-item q's row's block */
        if (q < 128) {
            const long off = kvc_row_lookup(sh, trow, p, 128 * j + q, &g);
            L->rowoff[q] = off;
            if (off == KVC_ROW_BAD) atomic_min(&L->first_bad, q);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        bad = L->first_bad < 128;
        /* the group's first bad row as lane group 0's (read after the
         * merge's barriers) */
        if (q < 8) L->wbad[q] = q == 0 && bad;
        if (q < 128 && q == L->first_bad) L->wbadg[0] = g;
        if (!bad) { /* one segment at a time through the row table (else nothing is loaded) */
            float2 v[KVC_SEG], sc[KVC_SEG];
            seg_load(state, L->rowoff, kvc_score_delta(0, 512), 16 * w, KVC_SEG, dq, v, sc, 1, 1, bf16);
            if (bf16) seg_widen(v, sc);
            if (bias) slice_add_bias(sh, bias, pos0, dq, sc);
            st = seg_reduce(v, sc, KVC_SEG, KVC_SEG);
            seg_load(state, L->rowoff, kvc_score_delta(0, 512), 16 * w + 8, KVC_SEG, dq, v, sc, 1, 1, bf16);
            if (bf16) seg_widen(v, sc);
            if (bias) slice_add_bias(sh, bias, pos0 + KVC_SEG, dq, sc);
            const st2 st1 = seg_reduce(v, sc, KVC_SEG, KVC_SEG);
            st_merge(&st, &st1);
        }
    }
    /* the lane groups' states in tree order: group w stores its state once,
     * at the level where it stops merging, so one barrier per level suffices */
    for (int lv = 1; lv < 8; lv *= 2) {
        if (w % (2 * lv) == lv)
            for (int k = 0; k < 2; k++) {
                L->xs[w][k][l] = st.m[k];
                L->xs[w][2 + k][l] = st.d[k];
                L->xs[w][4 + k][l] = st.n[k];
            }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (w % (2 * lv) == 0) {
            st2 x;
            for (int k = 0; k < 2; k++) {
                x.m[k] = L->xs[w + lv][k][l];
                x.d[k] = L->xs[w + lv][2 + k][l];
                x.n[k] = L->xs[w + lv][4 + k][l];
            }
            st_merge(&st, &x);
        }
    }
    if (nch == 1) { /* c of the slice and its subtree of the RMS sum (the canonical
                     * pairwise tree over 512 dims has a 64-dim slice as one subtree) */
        __global float *rec = out + o * KVC_CL_SLICE_REC;
        __local float *t = &L->xs[0][0][0], *u = &L->xs[1][0][0];
        if (w == 0) {
            const float c0 = KVC_DIV(st.n[0], st.d[0]), c1 = KVC_DIV(st.n[1], st.d[1]);
            ((__global float2 *)rec)[dq] = (float2)(c0, c1);
            t[l] = KVC_ADD(KVC_MUL(c0, c0), KVC_MUL(c1, c1));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (q < 4) u[q] = tree8_local(t + 8 * q);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (q == 0) rec[512 + sl] = KVC_ADD(KVC_ADD(u[0], u[1]), KVC_ADD(u[2], u[3]));
    } else if (w == 0) {
        __global float *cs = out + (o * nch + j) * KVC_CL_CHUNK_STATE;
        for (int k = 0; k < 2; k++) {
            cs[2 * dq + k] = st.m[k];
            cs[512 + 2 * dq + k] = st.d[k];
            cs[1024 + 2 * dq + k] = st.n[k];
        }
    }
    if (q == 0) { /* the group's bad-block words: the first bad lane group's block */
        int f = 0;
        long g = 0;
        for (int k = 7; k >= 0; k--)
            if (L->wbad[k]) {
                f = 1;
                g = L->wbadg[k];
            }
        bad_words[2 * gid] = f;
        bad_words[2 * gid + 1] = (int)g;
    }
}

/* The call's status word: zero (group 0; nothing reads or writes it before
 * kvc_slice_finish, enqueued after the slice kernel), but for a set after
 * the first of kvc_compress_many. */
static inline void zero_status(__global kvc_cl_status *st, const kvc_plan *pl) {
    if (!pl->keep_status && get_group_id(0) == 0 && get_local_id(0) < sizeof(kvc_cl_status) / sizeof(int))
        ((__global int *)st)[get_local_id(0)] = 0;
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void kvc_slice(KVC_CL_KERNEL_ARGS) {
    __local kvc_slice_local L;
    zero_status(st, &pl);
    slice_body(&sh, &pl, state, t2r, positions, slots, bidx, table, chunk_states, tickets, &L, 0, 0, 0);
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void kvc_slice_dense(KVC_CL_KERNEL_ARGS) {
    __local kvc_slice_local L;
    zero_status(st, &pl);
    slice_body(&sh, &pl, state, t2r, positions, slots, bidx, table, chunk_states, tickets, &L, 1024, 0, 0);
}

/* A bf16 state (SPEC 10), any token stride.  (Named so that no kernel's
 * name begins with another's: see kvc_compress_small.) */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void kvc_bf16_slice(KVC_CL_KERNEL_ARGS) {
    __local kvc_slice_local L;
    zero_status(st, &pl);
    slice_body(&sh, &pl, state, t2r, positions, slots, bidx, table, chunk_states, tickets, &L, 0, 1, 0);
}

/* A score bias (SPEC 10), any token stride: a float32 state, a bf16 state
 * (the state a literal in each: one load path compiled a kernel). */
__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void kvc_bias_slice(KVC_CL_KERNEL_ARGS,
                                                                            __global const float *bias) {
    __local kvc_slice_local L;
    zero_status(st, &pl);
    slice_body(&sh, &pl, state, t2r, positions, slots, bidx, table, chunk_states, tickets, &L, 0, 0, bias);
}

__kernel __attribute__((reqd_work_group_size(256, 1, 1))) void kvc_bf16_bias_slice(KVC_CL_KERNEL_ARGS,
                                                                                 __global const float *bias) {
    __local kvc_slice_local L;
    zero_status(st, &pl);
    slice_body(&sh, &pl, state, t2r, positions, slots, bidx, table, chunk_states, tickets, &L, 0, 1, bias);
}

/* A chunk state's dims 2q, 2q + 1. */
static inline st2 chunk_state(__global const float *cs, int q) {
    st2 x;
    for (int k = 0; k < 2; k++) {
        x.m[k] = cs[2 * q + k];
        x.d[k] = cs[512 + 2 * q + k];
        x.n[k] = cs[1024 + 2 * q + k];
    }
    return x;
}


/*
 * The finaliser on 128 work-items (kvc_slice_finish): work-item q holds
 * dims 4q .. 4q + 3 -- a quarter of NOPE group q / 16 for q < 112, RoPE
 * pairs 2 (q - 112) and + 1 above -- and the output's RMS sum ss (the
 * canonical tree, summed by the caller).
 * fin128_weights: its RMSNorm weights (loaded first: they wait for
 * nothing); fin128_cos_sin: its cos/sin, once the check record names the
 * row.  fin128_prepare: y, the bf16 values (NOPE) or rotated bits (RoPE)
 * into z / h, and the flags in local memory fl[0..7] (zeroed by the caller
 * before a barrier): fl[0] a non-finite value anywhere, fl[1 + g] group g's
 * amax bits (the integer max of finalize_group's stages, here by local
 * atomics: 16 work-items per address).  After a barrier, fin128_store
 * writes the slot.
 */
static inline void fin128_weights(__global const ushort *weight, int q, float w[4]) {
    for (int k = 0; k < 4; k++) w[k] = kvc_bf16_to_f32(weight[4 * q + k]);
}
static inline void fin128_cos_sin(__global const float *cs, int interleaved, int q, float csv[4]) {
    for (int k = 0; k < 4; k++) csv[k] = 0.0f;
    if (q >= 112)
        for (int k = 0; k < 2; k++) kvc_cos_sin(cs, interleaved, 2 * (q - 112) + k, &csv[2 * k], &csv[2 * k + 1]);
}
static inline void fin128_prepare(const float c[4], float ss, const float w[4], const float csv[4], float eps, int q,
                                  float z[4], ushort h[4], __local int *fl) {
    const float rr = kvc_rms_scale(ss, eps);
    int bad = 0;
    float y[4], amax = 0.0f;
    for (int k = 0; k < 4; k++) {
        y[k] = kvc_rms_apply(c[k], rr, w[k]);
        bad |= kvc_nonfinite(c[k]) | kvc_nonfinite(y[k]);
        z[k] = 0.0f;
        h[k] = 0;
    }
    if (q < 112) {
        for (int k = 0; k < 4; k++) {
            bad |= kvc_nope_bf16(y[k], &z[k]);
            amax = kvc_max(amax, z[k] < 0.0f ? -z[k] : z[k]);
        }
        atomic_max(&fl[1 + q / 16], (int)as_uint(amax));
    } else {
        for (int k = 0; k < 2; k++)
            bad |= kvc_rope_bf16(y[2 * k], y[2 * k + 1], csv[2 * k], csv[2 * k + 1], &h[2 * k], &h[2 * k + 1]);
    }
    if (bad) fl[0] = 1;
}
/* @return 1 if the slot was written non-finite */
static inline int fin128_store(const float z[4], const ushort h[4], __local const int *fl, int fp8,
                               __global uchar *payload, __global uchar *scales, int q) {
    const int bad = fl[0];
    if (q < 112) {
        const int e = kvc_group_exponent(as_float((uint)fl[1 + q / 16]), fp8);
        for (int k = 0; k < 4; k++) payload[4 * q + k] = bad ? 0 : kvc_nope_code(z[k], e, fp8);
        if (q % 16 == 0) scales[q / 16] = kvc_scale_byte(e, bad);
    } else {
        __global uchar *rp = payload + 448 + 8 * (q - 112);
        for (int k = 0; k < 4; k++) {
            const ushort hk = bad ? KVC_BF16_QNAN : h[k];
            rp[2 * k] = (uchar)(hk & 0xFF);
            rp[2 * k + 1] = (uchar)(hk >> 8);
        }
    }
    if (q == 0) scales[7] = 0;
    return bad;
}

/* The finisher: a 128-item group per output, work-item q the dims 4q ..
 * 4q + 3 (NOPE group q / 16, or RoPE pairs 2 (q - 112) and + 1).  C = 128:
 * c from the c record, the RMS sum from the 8 slices' sums in tree order;
 * C = 256 / 512: the 2 or 4 chunk states merged in tree order, the RMS sum
 * by the canonical tree through local memory (two barriers more). */
__kernel __attribute__((reqd_work_group_size(128, 1, 1))) void kvc_slice_finish(KVC_CL_KERNEL_ARGS) {
    __local int flags[9]; /* [0] any non-finite, [1..7] NOPE groups' amax bits, [8] first bad slice group */
    __local float t[128], u[16]; /* C = 256 / 512: the RMS tree's levels 2 and 5 */
    const long o = get_group_id(0), nch = pl.nchunk;
    const int ngroups = (int)(8 * nch);
    const int q = (int)get_local_id(0);
    __global const long *cr = check_record(&sh, &pl, chunk_states, o);
    /* every load but cos/sin (row pc of the check record) at once, none
     * waiting for the check: the records, states, bad-block words and
     * weights of every output lie at fixed places (what an invalid or
     * padding output left there is read but not used) */
    const long chk = cr[0], value = cr[1], slot = cr[2], pc = cr[3];
    float z[4], c[4], ss = 0.0f, w[4], csv[4];
    ushort h[4];
    fin128_weights(weight, q, w);
    const int gbad = q < ngroups && tickets[2 * (ngroups * o + q)]; /* slice group q met a bad block */
    if (nch == 1) { /* (the same branch for the whole group: its barriers below) */
        __global const float *rec = chunk_states + o * KVC_CL_SLICE_REC;
        const float4 c4 = vload4(q, rec), sa = vload4(128, rec), sb = vload4(129, rec);
        c[0] = c4.x, c[1] = c4.y, c[2] = c4.z, c[3] = c4.w;
        ss = KVC_ADD(KVC_ADD(KVC_ADD(sa.x, sa.y), KVC_ADD(sa.z, sa.w)),
                     KVC_ADD(KVC_ADD(sb.x, sb.y), KVC_ADD(sb.z, sb.w)));
    } else { /* 2 or 4 chunks of 16 segments: complete subtrees, merged pairwise */
        __global const float *cs = chunk_states + o * nch * KVC_CL_CHUNK_STATE;
        for (int hf = 0; hf < 2; hf++) { /* dims 4q + 2 hf, + 1 */
            st2 x0 = chunk_state(cs, 2 * q + hf), x1 = chunk_state(cs + KVC_CL_CHUNK_STATE, 2 * q + hf);
            st_merge(&x0, &x1);
            if (nch == 4) {
                st2 x2 = chunk_state(cs + 2 * KVC_CL_CHUNK_STATE, 2 * q + hf);
                const st2 x3 = chunk_state(cs + 3 * KVC_CL_CHUNK_STATE, 2 * q + hf);
                st_merge(&x2, &x3);
                st_merge(&x0, &x2);
            }
            for (int k = 0; k < 2; k++) c[2 * hf + k] = KVC_DIV(x0.n[k], x0.d[k]);
        }
    }
    /* (the same for all work-items) */
    const int fin = report_check(st, pl.out_base + o, (int)chk, value, slot, q == 0);
    if (fin) fin128_cos_sin(cos_sin + pc * sh.cos_sin_stride, sh.cos_sin_layout == 1, q, csv);
    if (q < 8) flags[q] = 0;
    if (q == 8) flags[8] = ngroups;
    barrier(CLK_LOCAL_MEM_FENCE);
    /* no return before the last barrier (PoCL 3.1 lost work-items at one) */
    if (fin && gbad) atomic_min(&flags[8], q);
    if (nch != 1) {
        /* the RMS tree: levels 1-2 in registers, 3-5 by 16 work-items, the rest by all */
        t[q] = KVC_ADD(KVC_ADD(KVC_MUL(c[0], c[0]), KVC_MUL(c[1], c[1])),
                       KVC_ADD(KVC_MUL(c[2], c[2]), KVC_MUL(c[3], c[3])));
        barrier(CLK_LOCAL_MEM_FENCE);
        if (q < 16) u[q] = tree8_local(t + 8 * q);
        barrier(CLK_LOCAL_MEM_FENCE);
        ss = KVC_ADD(tree8_local(u), tree8_local(u + 8));
    }
    if (fin) fin128_prepare(c, ss, w, csv, sh.rms_norm_eps, q, z, h, flags);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (!fin) return; /* invalid or padding: counted above */
    const int fb = flags[8];
    if (fb < ngroups) { /* a slice group met a bad physical block: the output is invalid */
        if (q == 0) {
            record_error(st, KVC_CHECK_PHYSICAL_BLOCK, pl.out_base + o, tickets[2 * (ngroups * o + fb) + 1]);
            atomic_inc(&st->invalid);
        }
        return;
    }
    long po, so;
    kvc_slot_offsets_s(slot, sh.kv_block_size, sh.page_stride, sh.nope_format, &po, &so);
    const int bad = fin128_store(z, h, flags, sh.nope_format == 1, kv + po, kv + so, q);
    if (q == 0) atomic_inc(&st->written);
    if (q == 0 && bad) atomic_inc(&st->nonfinite);
}
