/*
 * kvc_kernel.cl -- the OpenCL kernel.  Compiled at run time from one string:
 * kvc_canon.h + kvc_check.h + kvc_cl_shared.h + this file (embedded at build time, #include
 * lines removed), built with FP_CONTRACT OFF (kvc_canon.h) and
 * -cl-fp32-correctly-rounded-divide-sqrt, so every operation is the
 * canonical binary32 operation: the bytes equal the CPU backend's.
 *
 * Work decomposition (as the CUDA kernel's): a window's segments are cut
 * into chunks (kvc_chunk_of: complete subtrees of the canonical tree); one
 * work-group of 256 work-items reduces one chunk of one output, work-item q
 * holding dims 2q, 2q+1.  The group first resolves the chunk's row offsets
 * into local memory (one work-item per row, which also checks that row's
 * physical block: the device half of the PHYSICAL_BLOCK check), then every
 * work-item walks the chunk's segments with the next segment's loads in
 * flight, combining segment states with a binary counter in private memory.
 * With one chunk per output the group finalises at once; otherwise it
 * publishes its chunk state and the last group of the output (ticket
 * counter) merges the chunk states in canonical order; the group then
 * finalises the slot together (finalize_group).  Chunks of full segments
 * without masked rows take straight-line code on GPUs (reduce_full),
 * with 8-byte loads where every row is 8-byte aligned.
 */
#include "kvc_canon.h"
#include "kvc_check.h"
#include "kvc_general.h"
#include "kvc_cl_shared.h" /* kvc_cl_status */

#define KVC_CL_WG 256
#ifndef KVC_CL_MAX_CH
#define KVC_CL_MAX_CH 128     /* segments per chunk: the host passes KVC_OPENCL_MAX_CH */
#endif
#define KVC_CL_SEG_STACK 9    /* segments per chunk <= 128                    */
#define KVC_CL_CHUNK_STACK 40 /* chunk merge: any chunk count < 2^38            */
#define KVC_CL_BAD_BIT 0x40000000


/* A row's dims 2q, 2q+1.  vload2 promises only 4-byte alignment, and
 * NVIDIA's compiler makes it two 4-byte loads; with every row 8-byte
 * aligned (pl.vec: buffers start aligned, both strides even) a float2
 * load is one 8-byte load (H200). */
#define KVC_CL_LD2(p, q) (((__global const float2 *)(p))[q])

typedef struct {
    float m[2], d[2], n[2];
} st2;

static inline void st_merge(st2 *a, const st2 *b) {
    for (int j = 0; j < 2; j++) kvc_merge(&a->m[j], &a->d[j], &a->n[j], b->m[j], b->d[j], b->n[j]);
}
#define CL_MERGE(l, r) st_merge(&stack[l], &stack[r])

static void record_error(__global kvc_cl_status *st, int check, long o, long value) {
    if (atomic_cmpxchg(&st->status, 0, 5 /* KVC_ERROR_INDEX_OUT_OF_RANGE */) == 0) {
        st->check = check;
        st->output = o;
        st->value = value;
    }
}

/* Rows [lr, lr + n) of the chunk (row offsets in local memory, < 0: masked)
 * for dims 2q, 2q+1: value and score pairs.  plain: no masked (or bad)
 * row in the chunk, so the loads need no per-row test.  bf16 (a literal):
 * a bf16 state, each pair's two bf16 as loaded (a masked row's too),
 * widened by seg_widen. */
static inline float2 ld2_bf16(__global const float *state, long off, int q, int vec) {
    __global const ushort *b = (__global const ushort *)state + off;
    return (float2)(as_float(vec ? ((__global const uint *)b)[q] : b[2 * q] | (uint)b[2 * q + 1] << 16), 0.0f);
}
static inline void seg_load(__global const float *state, __local const long *rowoff, long sdelta, int lr, int n,
                            int q, float2 *v, float2 *s, int plain, int vec, int bf16) {
    if (bf16 && plain && vec && n == KVC_SEG) { /* 8 unmasked bf16 rows of 4-byte pairs: straight-line, each
                                                  * load one shifted add from the work-item's base */
        __global const uchar *bv = (__global const uchar *)state + 4 * q, *bs = bv + 2 * sdelta;
        for (int i = 0; i < KVC_SEG; i++) {
            const long off2 = 2 * rowoff[lr + i];
            v[i] = (float2)(as_float(*(__global const uint *)(bv + off2)), 0.0f);
            s[i] = (float2)(as_float(*(__global const uint *)(bs + off2)), 0.0f);
        }
        return;
    }
    for (int i = 0; i < KVC_SEG; i++) {
        if (i >= n) break;
        const long off = rowoff[lr + i];
        if ((plain || off >= 0) && bf16) {
            v[i] = ld2_bf16(state, off, q, vec);
            s[i] = ld2_bf16(state, off + sdelta, q, vec);
        } else if (bf16) { /* 0 and -Inf as bf16 pairs */
            v[i] = (float2)(as_float(0u), 0.0f);
            s[i] = (float2)(as_float(0xFF80FF80u), 0.0f);
        } else if ((plain || off >= 0) && vec) {
            v[i] = KVC_CL_LD2(state + off, q);
            s[i] = KVC_CL_LD2(state + off + sdelta, q);
        } else if (plain || off >= 0) {
            v[i] = vload2(q, state + off);
            s[i] = vload2(q, state + off + sdelta);
        } else {
            v[i] = (float2)(0.0f);
            s[i] = (float2)(KVC_NEG_INF);
        }
    }
}

/* The state of one segment of n rows.  nmax (a literal or n) bounds the
 * loops: with nmax = KVC_SEG the row arrays are indexed by constants only
 * and stay in registers (the one-segment kernel: with n as the bound
 * NVIDIA's driver put them on the stack); nmax = n is the plain loop (the
 * 2-dims kernel: the constant form cost it 28 registers and one group per
 * SM). */
static inline st2 seg_reduce(const float2 *v, const float2 *s, int n, int nmax) {
    st2 cur;
    cur.m[0] = s[0].x;
    cur.m[1] = s[0].y;
    for (int j = 0; j < 2; j++) {
        cur.d[j] = 0.0f;
        cur.n[j] = 0.0f;
    }
    for (int i = 1; i < nmax; i++)
        if (i < n) {
            cur.m[0] = kvc_max(cur.m[0], s[i].x);
            cur.m[1] = kvc_max(cur.m[1], s[i].y);
        }
    for (int i = 0; i < nmax; i++)
        if (i < n) {
            kvc_seg_step(cur.m[0], s[i].x, v[i].x, &cur.d[0], &cur.n[0]);
            kvc_seg_step(cur.m[1], s[i].y, v[i].y, &cur.d[1], &cur.n[1]);
        }
    for (int j = 0; j < 2; j++) kvc_seg_close(cur.m[j], &cur.d[j], &cur.n[j]);
    return cur;
}

/* Reduce the chunk's segments [s0, s0 + count) (row r0 = 8 s0 is local row 0). */
static st2 reduce_segments(const kvc_plan *pl, __global const float *state, __local const long *rowoff,
                           long sdelta, long s0, long count, int q, int plain) {
    st2 stack[KVC_CL_SEG_STACK];
    long sizes[KVC_CL_SEG_STACK];
    int top = -1;
    float2 v[KVC_SEG], s[KVC_SEG], vn[KVC_SEG], sn[KVC_SEG];
    int n = (int)(pl->rows - s0 * KVC_SEG < KVC_SEG ? pl->rows - s0 * KVC_SEG : KVC_SEG);
    seg_load(state, rowoff, sdelta, 0, n, q, vn, sn, plain, (int)pl->vec, 0);
    for (long k = 0; k < count; k++) {
        const int nc = n;
        for (int i = 0; i < KVC_SEG; i++) {
            v[i] = vn[i];
            s[i] = sn[i];
        }
        if (k + 1 < count) { /* the next segment's loads in flight during this one */
            const long r1 = (s0 + k + 1) * KVC_SEG;
            n = (int)(pl->rows - r1 < KVC_SEG ? pl->rows - r1 : KVC_SEG);
            seg_load(state, rowoff, sdelta, (int)((k + 1) * KVC_SEG), n, q, vn, sn, plain, (int)pl->vec, 0);
        }
        top++;
        stack[top] = seg_reduce(v, s, nc, nc);
        sizes[top] = 1;
        KVC_TREE_PUSH(sizes, top, CL_MERGE);
    }
    KVC_TREE_FOLD(top, CL_MERGE);
    return stack[0];
}

/*
 * The common case as straight-line code: a chunk whose segments are all
 * full and whose rows are all present.  Everything below is unrolled by
 * hand (no private arrays indexed at run time: those live in memory), so one
 * segment's loads can overlap another's arithmetic (on the H200 much
 * faster than the loop form), exact on all golden cases.
 *
 * KVC_CL_STRAIGHT (set by the host for GPU devices) enables it.  PoCL 3.1
 * (Debian 12, CI) computes wrong bytes with it -- with this form, with
 * `#pragma unroll` on a loop form, and with a recursive form -- while
 * the same source is exact through NVIDIA's compiler, and the loop form
 * (reduce_segments) is exact on both; so CPU devices keep the loop form.
 * To reproduce: build with -DKVC_CL_STRAIGHT=1 on PoCL (the test build of the library takes extra build options).
 */
#ifndef KVC_CL_STRAIGHT
#define KVC_CL_STRAIGHT 0
#endif
#define KVC_CL_LD(i)                                         \
    const long o##i = rowoff[lr + i];                        \
    const float2 v##i = KVC_CL_LD2(state + o##i, q);         \
    const float2 s##i = KVC_CL_LD2(state + o##i + sdelta, q);
#define KVC_CL_STEP(i)                                                                  \
    kvc_seg_step(r.m[0], s##i.x, v##i.x, &r.d[0], &r.n[0]);                            \
    kvc_seg_step(r.m[1], s##i.y, v##i.y, &r.d[1], &r.n[1]);
static inline void sub_full_1(__global const float *state, __local const long *rowoff, long sdelta, int lr, int q,
                              st2 *out) {
    KVC_CL_LD(0) KVC_CL_LD(1) KVC_CL_LD(2) KVC_CL_LD(3) KVC_CL_LD(4) KVC_CL_LD(5) KVC_CL_LD(6) KVC_CL_LD(7)
    st2 r;
    r.m[0] = kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(s0.x, s1.x), s2.x), s3.x), s4.x), s5.x), s6.x),
                     s7.x);
    r.m[1] = kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(s0.y, s1.y), s2.y), s3.y), s4.y), s5.y), s6.y),
                     s7.y);
    r.d[0] = r.d[1] = r.n[0] = r.n[1] = 0.0f;
    KVC_CL_STEP(0) KVC_CL_STEP(1) KVC_CL_STEP(2) KVC_CL_STEP(3) KVC_CL_STEP(4) KVC_CL_STEP(5) KVC_CL_STEP(6)
    KVC_CL_STEP(7)
    kvc_seg_close(r.m[0], &r.d[0], &r.n[0]);
    kvc_seg_close(r.m[1], &r.d[1], &r.n[1]);
    *out = r;
}
/*
 * The 8-segment block, software-pipelined: two named segment buffers,
 * the next segment's 16 loads issued before the current one's arithmetic.
 * Faster on the H200 than the forms measured against it and removed (each
 * segment loading then computing; one buffer with row i of the next segment
 * loaded as soon as row i is consumed, the CUDA kernel's order).
 */
typedef struct {
    float2 v[KVC_SEG], s[KVC_SEG];
} seg8;
#define KVC_CL_ROWLD(X_, i, lr)                                \
    do {                                                      \
        const long o_ = rowoff[(lr) + (i)];                   \
        (X_).v[i] = KVC_CL_LD2(state + o_, q);                 \
        (X_).s[i] = KVC_CL_LD2(state + o_ + sdelta, q);        \
    } while (0)
#define KVC_CL_SEGLD(X_, lr)                                                                                     \
    do {                                                                                                        \
        KVC_CL_ROWLD(X_, 0, lr); KVC_CL_ROWLD(X_, 1, lr); KVC_CL_ROWLD(X_, 2, lr); KVC_CL_ROWLD(X_, 3, lr);         \
        KVC_CL_ROWLD(X_, 4, lr); KVC_CL_ROWLD(X_, 5, lr); KVC_CL_ROWLD(X_, 6, lr); KVC_CL_ROWLD(X_, 7, lr);         \
    } while (0)
#define KVC_CL_XSTEP(X_, i)                                                   \
    kvc_seg_step(r.m[0], (X_).s[i].x, (X_).v[i].x, &r.d[0], &r.n[0]);         \
    kvc_seg_step(r.m[1], (X_).s[i].y, (X_).v[i].y, &r.d[1], &r.n[1]);
#define KVC_CL_XMAX(X_, c)                                                                                     \
    kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max((X_).s[0].c, (X_).s[1].c), (X_).s[2].c), (X_).s[3].c), \
                                    (X_).s[4].c), (X_).s[5].c), (X_).s[6].c), (X_).s[7].c)
/* out = the segment state of X_ (8 full rows, 2 dims) */
#define KVC_CL_SEG2(X_, out)                                            \
    do {                                                                \
        st2 r;                                                          \
        r.m[0] = KVC_CL_XMAX(X_, x);                                    \
        r.m[1] = KVC_CL_XMAX(X_, y);                                    \
        r.d[0] = r.d[1] = r.n[0] = r.n[1] = 0.0f;                       \
        KVC_CL_XSTEP(X_, 0) KVC_CL_XSTEP(X_, 1) KVC_CL_XSTEP(X_, 2) KVC_CL_XSTEP(X_, 3) \
        KVC_CL_XSTEP(X_, 4) KVC_CL_XSTEP(X_, 5) KVC_CL_XSTEP(X_, 6) KVC_CL_XSTEP(X_, 7) \
        kvc_seg_close(r.m[0], &r.d[0], &r.n[0]);                        \
        kvc_seg_close(r.m[1], &r.d[1], &r.n[1]);                        \
        out = r;                                                        \
    } while (0)

/* Form 1 of an 8-segment block (shared by the 2-dims and the 1-dim
 * kernels): buffers A_ (holding the block's first segment, loads issued)
 * and X_ alternate, each segment's successor loaded before its arithmetic;
 * with `more` the segment after the block is left loading in A_.  States
 * out, b, c, d end as out = s0..3 merged, b = s4..7 merged (canonical
 * tree); the caller merges out with b.  LD(buf, lr), SEG(buf, state),
 * MERGE(into, from). */
#define KVC_CL_BLOCK8(LD, SEG, MERGE, A_, X_, lr, more, out, b, c, d) \
    do {                                                             \
        LD(X_, lr + 8);                                              \
        SEG(A_, out);                                                \
        LD(A_, lr + 16);                                             \
        SEG(X_, b);                                                  \
        MERGE(out, b);                                               \
        LD(X_, lr + 24);                                             \
        SEG(A_, c);                                                  \
        LD(A_, lr + 32);                                             \
        SEG(X_, d);                                                  \
        MERGE(c, d);                                                 \
        MERGE(out, c);                                               \
        LD(X_, lr + 40);                                             \
        SEG(A_, b);                                                  \
        LD(A_, lr + 48);                                             \
        SEG(X_, c);                                                  \
        MERGE(b, c);                                                 \
        LD(X_, lr + 56);                                             \
        SEG(A_, c);                                                  \
        if (more) LD(A_, lr + 64);                                   \
        SEG(X_, d);                                                  \
        MERGE(c, d);                                                 \
        MERGE(b, c);                                                 \
    } while (0)
#define KVC_CL_MERGE2(a, b) st_merge(&(a), &(b))

/* One block of 8 full segments from local row lr, canonical tree order.
 * On entry the block's first segment is in a (loads issued); more: the
 * segment after the block exists, and is left in a on return. */
static inline st2 block8_pipe(__global const float *state, __local const long *rowoff, long sdelta, int lr, int q,
                              seg8 *ap, int more) {
    seg8 a = *ap;
    st2 out, b, c, d;
    seg8 x;
    KVC_CL_BLOCK8(KVC_CL_SEGLD, KVC_CL_SEG2, KVC_CL_MERGE2, a, x, lr, more, out, b, c, d);
    st_merge(&out, &b);
    *ap = a;
    return out;
}

/* A chunk of count full, present segments (a power of two, as every
 * chunk): blocks of 8 (single segments below 8) through the binary
 * counter.  (Two blocks of 8 inlined for count = 16 instead of the loop
 * were much slower.) */
static st2 reduce_full(__global const float *state, __local const long *rowoff, long sdelta, long count, int q) {
    st2 stack[KVC_CL_SEG_STACK];
    long sizes[KVC_CL_SEG_STACK];
    int top = -1;
    const long blk = count < 8 ? 1 : 8;
    seg8 a;
    if (blk == 8) KVC_CL_SEGLD(a, 0);
    for (long b = 0; b < count / blk; b++) {
        top++;
        if (blk == 8)
            stack[top] = block8_pipe(state, rowoff, sdelta, (int)(b * 8 * KVC_SEG), q, &a, b + 1 < count / 8);
        else
            sub_full_1(state, rowoff, sdelta, (int)(b * KVC_SEG), q, &stack[top]);
        sizes[top] = blk;
        KVC_TREE_PUSH(sizes, top, CL_MERGE);
    }
    KVC_TREE_FOLD(top, CL_MERGE);
    return stack[0];
}

/* Balanced pairwise sum of x[0..7] (three tree levels). */
static inline float tree8_local(__local const float *x) {
    return KVC_ADD(KVC_ADD(KVC_ADD(x[0], x[1]), KVC_ADD(x[2], x[3])),
                   KVC_ADD(KVC_ADD(x[4], x[5]), KVC_ADD(x[6], x[7])));
}

/* finalize_group's inputs from global memory for work-item q (dims 2q,
 * 2q+1): the RMSNorm weights, and for q >= 224 RoPE pair q - 224's cos/sin
 * (else 0). */
static inline void fin_inputs(__global const ushort *w, __global const float *cs, int interleaved, int q, float *w0,
                              float *w1, float *cj, float *sj) {
    *w0 = kvc_bf16_to_f32(w[2 * q]);
    *w1 = kvc_bf16_to_f32(w[2 * q + 1]);
    *cj = *sj = 0.0f;
    if (q >= 224) {
        kvc_cos_sin(cs, interleaved, q - 224, cj, sj);
    }
}

/*
 * The finaliser's stages for work-item q (dims 2q, 2q+1), in the canonical
 * order of kvc_finalize_slot (kvc_canon.h); each stage reads what the one
 * before it left in local memory, so a barrier separates them.  What is
 * one value per output or per NOPE group (the RMS scale, the exponents) is
 * computed once, by the first warp's work-items, not by every work-item:
 * the one-segment kernel is issue-bound (measured on the H200).
 * Local memory: t 256 floats, u 33 (u[32]: the RMS scale), fl
 * KVC_CL_FIN_FLAGS ints, 16-byte aligned: fl[0] = 1 where anything is
 * non-finite, fl[KVC_CL_AM(q)] work-item q's amax bits (q < 224; 36 ints
 * per NOPE group, so that the 7 readers' 16-byte reads meet no bank
 * conflict), fl[256 + g] NOPE group g's exponent.
 *   1. fin_level1: t[q], level 1 of the RMS sum's balanced pairwise tree of
 *      512 leaves (in registers); fl[0] zeroed;
 *   2. fin_levels2to4: levels 2-4 by work-items 0..31 into u[0..31];
 *   3. fin_scale: levels 5-9 and the RMS scale into u[32], by work-item 0
 *      (with work-items 0..31 computing it alike, PoCL 3.1 gave wrong
 *      bytes);
 *   4. fin_prepare: y and the bf16 values: NOPE dims (q < 224) into z, the
 *      larger |z| into fl[KVC_CL_AM(q)]; RoPE pair q - 224 (q >= 224)
 *      rotated into h;
 *   5. fin_exponents: work-item g < 7 NOPE group g's amax and exponent.
 *      The amax is a max of non-negative values, exact in any order, taken
 *      as an integer max of the float bits (+0 = 0; a NaN only where the
 *      slot is non-finite anyway);
 *   6. fin_store: the slot's bytes.  @return 1 if it was written non-finite.
 * w0, w1: the RMSNorm weights of the work-item's dims, cj, sj: the cos/sin
 * of its RoPE pair (fin_inputs).
 */
#define KVC_CL_FIN_FLAGS 264
#define KVC_CL_AM(q) (8 + (q) + 4 * ((q) / 32))
static inline void fin_level1(float c0, float c1, __local float *t, __local int *fl, int q) {
    if (q == 0) fl[0] = 0;
    t[q] = KVC_ADD(KVC_MUL(c0, c0), KVC_MUL(c1, c1));
}
static inline void fin_levels2to4(__local const float *t, __local float *u, int q) {
    if (q < 32) u[q] = tree8_local(t + 8 * q);
}
static inline void fin_scale(__local float *u, float eps, int q) {
    if (q == 0)
        u[32] = kvc_rms_scale(
            KVC_ADD(KVC_ADD(tree8_local(u), tree8_local(u + 8)), KVC_ADD(tree8_local(u + 16), tree8_local(u + 24))),
            eps);
}
static inline void fin_prepare(float c0, float c1, float rr, float w0, float w1, float cj, float sj, int q, float z[2],
                               ushort h[2], __local int *fl) {
    const float y0 = kvc_rms_apply(c0, rr, w0);
    const float y1 = kvc_rms_apply(c1, rr, w1);
    int bad = kvc_nonfinite(c0) | kvc_nonfinite(c1) | kvc_nonfinite(y0) | kvc_nonfinite(y1);
    z[0] = z[1] = 0.0f;
    h[0] = h[1] = 0;
    if (q < 224) { /* NOPE */
        bad |= kvc_nope_bf16(y0, &z[0]) | kvc_nope_bf16(y1, &z[1]);
        const float a0 = z[0] < 0.0f ? -z[0] : z[0], a1 = z[1] < 0.0f ? -z[1] : z[1];
        fl[KVC_CL_AM(q)] = (int)as_uint(kvc_max(a0, a1));
    } else { /* RoPE pair j = q - 224 */
        bad |= kvc_rope_bf16(y0, y1, cj, sj, &h[0], &h[1]);
    }
    if (bad) fl[0] = 1;
}
static inline void fin_exponents(__local int *fl, int fp8, int q) {
    if (q < 7) {
        __local const int4 *a = (__local const int4 *)(fl + KVC_CL_AM(32 * q));
        int4 m = a[0];
        for (int k = 1; k < 8; k++) m = max(m, a[k]);
        fl[256 + q] = kvc_group_exponent(as_float((uint)max(max(m.x, m.y), max(m.z, m.w))), fp8);
    }
}
static inline int fin_store(const float z[2], const ushort h[2], __local const int *fl, int fp8,
                            __global uchar *payload, __global uchar *scales, int q) {
    const int bad = fl[0];
    if (q < 224) {
        const int e = fl[256 + q / 32];
        payload[2 * q] = bad ? 0 : kvc_nope_code(z[0], e, fp8);
        payload[2 * q + 1] = bad ? 0 : kvc_nope_code(z[1], e, fp8);
        if (q % 32 == 0) scales[q / 32] = kvc_scale_byte(e, bad);
    } else {
        __global uchar *rp = payload + 448 + 4 * (q - 224);
        const ushort h0 = bad ? KVC_BF16_QNAN : h[0], h1 = bad ? KVC_BF16_QNAN : h[1];
        rp[0] = (uchar)(h0 & 0xFF);
        rp[1] = (uchar)(h0 >> 8);
        rp[2] = (uchar)(h1 & 0xFF);
        rp[3] = (uchar)(h1 >> 8);
    }
    if (q == 0) scales[7] = 0;
    return bad;
}

/*
 * Finalise one output from c[512] with the whole group, the six stages
 * above between five barriers.  Every work-item calls it (its barriers);
 * active = 0 writes nothing; wide (a literal): 512 work-items call it,
 * those from 256 on only for the barriers.  @return (all work-items) 1 if
 * the slot was written as non-finite.
 */
static int finalize_group(int active, __local const float *c, __local float *t, __local float *u,
                          __local int *fl, float w0, float w1, float cj, float sj, float eps, int fp8,
                          __global uchar *payload, __global uchar *scales, int q0, int wide) {
    const int on = !wide || q0 < 256, q = wide ? (q0 & 255) : q0;
    const float c0 = c[2 * q], c1 = c[2 * q + 1];
    float z[2];
    ushort h[2];
    if (on) fin_level1(c0, c1, t, fl, q);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (on) fin_levels2to4(t, u, q);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (on) fin_scale(u, eps, q);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (on) fin_prepare(c0, c1, u[32], w0, w1, cj, sj, q, z, h, fl);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (on) fin_exponents(fl, fp8, q);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (active && on) fin_store(z, h, fl, fp8, payload, scales, q);
    return fl[0];
}

/* Every kernel takes the same arguments, set the same way by the host
 * (opencl_backend.c); kvc_compress_small leaves the last two unused. */
#define KVC_CL_KERNEL_ARGS                                                                                      \
    const kvc_shape sh, const kvc_plan pl, __global const float *state, __global const int *t2r,              \
        __global const long *positions, __global const long *slots, __global const long *bidx,                 \
        __global const int *table, __global const ushort *weight, __global const float *cos_sin,               \
        __global uchar *kv, __global kvc_cl_status *st, __global float *chunk_states,                          \
        __global volatile int *tickets

/* Output o's check result (chk and the offending value from
 * kvc_check_output_s, its slot): `first` (one caller per output: one
 * work-item of one of its groups, or the one-segment kernel's work-item for
 * it) records an error or the padding count.  @return 1 if the output is to
 * be computed, 0 if it is invalid or padding. */
static int report_check(__global kvc_cl_status *st, long o, int chk, long value, long slot, int first) {
    if (chk != KVC_CHECK_NONE) {
        if (first) {
            record_error(st, chk, o, value);
            atomic_inc(&st->invalid);
        }
        return 0;
    }
    if (slot < 0) {
        if (first) atomic_inc(&st->padding);
        return 0;
    }
    return 1;
}
/* Output o's index checks, reported as report_check says (inf filled; an
 * error names output base + o: kvc_plan's out_base). */
static int output_of(const kvc_shape *sh, __global const long *bidx, __global const long *slots,
                     __global const int *t2r, __global const long *positions, __global const int *table,
                     __global kvc_cl_status *st, long base, long o, int first, kvc_out_info *inf) {
    const int chk = kvc_check_output_s(sh, bidx, slots, t2r, positions, table, o, inf, 0);
    return report_check(st, base + o, chk, inf->value, inf->slot, first);
}

/* The chunk's rows [r0, r0 + 8 csize) (clipped to the window): offsets of the
 * value halves into rowoff[] (-1: masked or bad), one work-item per row,
 * each row's physical block checked (the device half of the PHYSICAL_BLOCK
 * check: *bad set, *bad_g its value), *masked set for an overlap row before
 * the request.  Every work-item calls it (its barriers). */
static void fill_rows(const kvc_shape *sh, const kvc_plan *pl, const kvc_out_info *inf, __global const int *table,
                      long cstart, long csize, __local long *rowoff, __local int *bad, __local int *masked,
                      __local long *bad_g, int q, int wg) {
    const long r0 = cstart * KVC_SEG;
    const long rend = (cstart + csize) * KVC_SEG < pl->rows ? (cstart + csize) * KVC_SEG : pl->rows;
    __global const int *trow = table + inf->r * sh->block_table_stride;
    if (q == 0) *bad = *masked = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long t = q; t < rend - r0; t += wg) {
        long g;
        const long off = kvc_row_lookup(sh, trow, inf->p, r0 + t, &g);
        if (off == KVC_ROW_MASKED) *masked = 1;
        if (off == KVC_ROW_BAD && atomic_xchg(bad, 1) == 0) *bad_g = g;
        rowoff[t] = off;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Output o's chunk states (all published), merged in canonical order for
 * dims 2q, 2q+1: binary counter over the chunk sizes.  Chunk states cross
 * work-groups, where OpenCL 1.2 promises nothing for plain memory (NVIDIA's
 * mem_fence is work-group scoped: the last group read stale states now and
 * then), so they are written with atomic_xchg (see publish below) and read
 * with atomic_or(p, 0): global atomics are coherent across work-groups. */
static st2 merge_chunk_states(const kvc_plan *pl, __global float *chunk_states, long o, int q) {
    __global volatile int *all = (__global volatile int *)(chunk_states + o * pl->nchunk * KVC_CL_CHUNK_STATE);
    st2 stack[KVC_CL_CHUNK_STACK];
    long sizes[KVC_CL_CHUNK_STACK];
    int top = -1;
    for (long k = 0; k < pl->nchunk; k++) {
        long s0, sz;
        kvc_chunk_of(pl->nseg, pl->ch, k, &s0, &sz);
        top++;
        for (int u = 0; u < 2; u++) {
            stack[top].m[u] = as_float(atomic_or(&all[k * KVC_CL_CHUNK_STATE + 2 * q + u], 0));
            stack[top].d[u] = as_float(atomic_or(&all[k * KVC_CL_CHUNK_STATE + 512 + 2 * q + u], 0));
            stack[top].n[u] = as_float(atomic_or(&all[k * KVC_CL_CHUNK_STATE + 1024 + 2 * q + u], 0));
        }
        sizes[top] = sz;
        KVC_TREE_PUSH(sizes, top, CL_MERGE);
    }
    KVC_TREE_FOLD(top, CL_MERGE);
    return stack[0];
}

/* The group's ticket for output o after its chunk state is published
 * (arrivals: groups per output).  @return (all work-items) 1 if this group
 * is the last and every group was clean (it finalises), 2 if the last and
 * some group had a bad row (the output counts invalid), 0 otherwise. */
static int take_ticket(__global volatile int *tickets, long o, int arrivals, int bad_rows, __local int *last, int q) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (q == 0) {
        /* the bad mark is or-ed in before the count (a sum of marks of
         * several bad groups would carry out of the bit) */
        if (bad_rows) atomic_or(&tickets[o], KVC_CL_BAD_BIT);
        const int t = atomic_add(&tickets[o], 1);
        *last = (t & ~KVC_CL_BAD_BIT) == arrivals - 1 ? ((t & KVC_CL_BAD_BIT) || bad_rows ? 2 : 1) : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    return *last;
}

/* fin 1: finalise the output from c[512] (filled by the caller) into its
 * slot and count it; 2: count it invalid; 0: nothing.  Every work-item
 * calls it; wide: a 512-item group (finalize_group). */
static void finish_output(int fin, __local float *c, __local float *t, __local float *u, __local int *flags,
                          const kvc_shape *sh, const kvc_out_info *inf, const float *fi, __global uchar *kv,
                          __global kvc_cl_status *st, int q, int wide) {
    /* the count first: the atomic's round trip then overlaps the
     * finalisation instead of holding the group after it (measured on the
     * H200) */
    if (q == 0 && fin == 1) atomic_inc(&st->written);
    barrier(CLK_LOCAL_MEM_FENCE);
    long po, so;
    kvc_slot_offsets_s(inf->slot, sh->kv_block_size, sh->page_stride, sh->nope_format, &po, &so);
    const int badv = finalize_group(fin == 1, c, t, u, flags, fi[0], fi[1], fi[2], fi[3], sh->rms_norm_eps,
                                    sh->nope_format == 1, kv + po, kv + so, q, wide);
    if (q == 0 && fin == 2) atomic_inc(&st->invalid);
    if (q == 0 && fin == 1 && badv) atomic_inc(&st->nonfinite);
}

/* The 2-dims kernel.  Its row table and finalisation are written out
 * instead of calling fill_rows and finish_output: through all the helpers
 * the same code compiled to 153 registers instead of 128 on NVIDIA's driver
 * (one work-group per SM, much slower). */
__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void kvc_compress_kernel(KVC_CL_KERNEL_ARGS) {
    __local float c[512], t[256], u[256];
    __local int flags[KVC_CL_FIN_FLAGS] __attribute__((aligned(16)));
    __local long rowoff[KVC_CL_MAX_CH * KVC_SEG];
    __local int last, bad, masked;
    __local long bad_g;
    const long o = get_group_id(0) / pl.nchunk, j = get_group_id(0) % pl.nchunk;
    const int q = (int)get_local_id(0);

    kvc_out_info inf;
    const int chk = kvc_check_output_s(&sh, bidx, slots, t2r, positions, table, o, &inf, 0);
    if (chk != KVC_CHECK_NONE) { /* every group of the output sees it: all return */
        if (q == 0 && j == 0) {
            record_error(st, chk, pl.out_base + o, inf.value);
            atomic_inc(&st->invalid);
        }
        return;
    }
    if (inf.slot < 0) {
        if (q == 0 && j == 0) atomic_inc(&st->padding);
        return;
    }
    long cstart, csize;
    kvc_chunk_of(pl.nseg, pl.ch, j, &cstart, &csize);
    /* the chunk's rows: offsets of the value halves, each row's block checked */
    const long r0 = cstart * KVC_SEG;
    const long rend = (cstart + csize) * KVC_SEG < pl.rows ? (cstart + csize) * KVC_SEG : pl.rows;
    __global const int *trow = table + inf.r * sh.block_table_stride;
    if (q == 0) bad = masked = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (long t = q; t < rend - r0; t += KVC_CL_WG) {
        long g;
        const long off = kvc_row_lookup(&sh, trow, inf.p, r0 + t, &g);
        if (off == KVC_ROW_MASKED) masked = 1;
        if (off == KVC_ROW_BAD && atomic_xchg(&bad, 1) == 0) bad_g = g;
        rowoff[t] = off;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int bad_rows = bad;
    if (bad_rows && q == 0) record_error(st, KVC_CHECK_PHYSICAL_BLOCK, pl.out_base + o, bad_g);
    const long sdelta = kvc_score_delta(sh.overlap != 0, 512);
    /* (with a bad row the offsets are -1 and the result is discarded) */
    st2 res;
    if (KVC_CL_STRAIGHT && pl.vec && !masked && !bad && (cstart + csize) * KVC_SEG <= pl.rows)
        res = reduce_full(state, rowoff, sdelta, csize, q);
    else
        res = reduce_segments(&pl, state, rowoff, sdelta, cstart, csize, q, !masked && !bad);

    /* fin: 1 finalise here, 0 nothing (another group of the output will),
     * 2 count the output invalid.  No early return before the barriers
     * below: PoCL then lost work-items at them. */
    int fin = bad_rows ? 2 : 1;
    if (pl.nchunk > 1) {
        /* publish (merge_chunk_states says why atomics): atomic_xchg, whose
         * returned values are consumed so that every write is performed
         * before the barrier and the ticket */
        if (!bad_rows) {
            __global volatile int *mine = (__global volatile int *)(chunk_states + (o * pl.nchunk + j) * KVC_CL_CHUNK_STATE);
            int sink = 0;
            for (int k = 0; k < 2; k++) {
                sink ^= atomic_xchg(&mine[2 * q + k], as_int(res.m[k]));
                sink ^= atomic_xchg(&mine[512 + 2 * q + k], as_int(res.d[k]));
                sink ^= atomic_xchg(&mine[1024 + 2 * q + k], as_int(res.n[k]));
            }
            if (sink == 0x5A5A5A5A) masked = 2; /* uses sink: waits for the writes */
        }
        fin = take_ticket(tickets, o, (int)pl.nchunk, bad_rows, &last, q);
        if (fin == 1) res = merge_chunk_states(&pl, chunk_states, o, q);
    }
    float w0, w1, cj, sj; /* (loads issued before the barriers) */
    fin_inputs(weight, cos_sin + inf.pc * sh.cos_sin_stride, sh.cos_sin_layout == 1, q, &w0, &w1, &cj, &sj);
    for (int k = 0; k < 2; k++) c[2 * q + k] = fin == 1 ? KVC_DIV(res.n[k], res.d[k]) : 0.0f;
    if (q == 0 && fin == 1) atomic_inc(&st->written); /* (first: see finish_output) */
    barrier(CLK_LOCAL_MEM_FENCE);
    long po, so;
    kvc_slot_offsets_s(inf.slot, sh.kv_block_size, sh.page_stride, sh.nope_format, &po, &so);
    const int badv = finalize_group(fin == 1, c, t, u, flags, w0, w1, cj, sj, sh.rms_norm_eps, sh.nope_format == 1,
                                    kv + po, kv + so, q, 0);
    if (q == 0 && fin == 2) atomic_inc(&st->invalid);
    if (q == 0 && fin == 1 && badv) atomic_inc(&st->nonfinite);
}

/*
 * One dim per work-item: half the registers per work-item for
 * the same loads in flight, so more resident warps per SM (the 2-dims
 * kernel holds 128 registers at 256 work-items: 2 groups, 16 warps per
 * SM), with 4-byte loads (a warp still reads 128 contiguous bytes per row).
 * kvc_compress_wide (the default): 512 work-items per chunk, work-item
 * q reducing dim q, finalised at once with one chunk per output (the first
 * 256 work-items finalise; the others only meet the barriers), through the
 * chunk states and the ticket otherwise; on NVIDIA held to 64 registers
 * (.minnctapersm 2: 32 warps per SM).  The host takes it for windows
 * of full segments without overlap (every chunk straight-line, no masked
 * rows) on GPU devices.  Compiled only with
 * KVC_CL_STRAIGHT (GPU devices): PoCL 3.1's LLVM 15 crashes in IPSCCP
 * building it for the CPU (and miscomputes the straight-line forms, above).
 */
#if KVC_CL_STRAIGHT
typedef struct {
    float v[KVC_SEG], s[KVC_SEG];
} seg1;
typedef struct {
    float m, d, n;
} st1;
static inline void st1_merge(st1 *a, const st1 *b) { kvc_merge(&a->m, &a->d, &a->n, b->m, b->d, b->n); }
#define CL_MERGE1(l, r) st1_merge(&stack[l], &stack[r])
#define KVC_CL_MERGE1(a, b) st1_merge(&(a), &(b))
#define KVC_CL_ROWLD1(X_, i, lr)                     \
    do {                                             \
        const long o_ = rowoff[(lr) + (i)];          \
        (X_).v[i] = col[o_];                         \
        (X_).s[i] = col[o_ + sdelta];                \
    } while (0)
#define KVC_CL_SEGLD1(X_, lr)                                                                                  \
    do {                                                                                                       \
        KVC_CL_ROWLD1(X_, 0, lr); KVC_CL_ROWLD1(X_, 1, lr); KVC_CL_ROWLD1(X_, 2, lr); KVC_CL_ROWLD1(X_, 3, lr); \
        KVC_CL_ROWLD1(X_, 4, lr); KVC_CL_ROWLD1(X_, 5, lr); KVC_CL_ROWLD1(X_, 6, lr); KVC_CL_ROWLD1(X_, 7, lr); \
    } while (0)
#define KVC_CL_STEP1(X_, i) kvc_seg_step(r.m, (X_).s[i], (X_).v[i], &r.d, &r.n);
#define KVC_CL_SEGX1(X_, out)                                                                                   \
    do {                                                                                                        \
        st1 r;                                                                                                  \
        r.m = kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max(kvc_max((X_).s[0], (X_).s[1]), (X_).s[2]),         \
                                                          (X_).s[3]), (X_).s[4]), (X_).s[5]), (X_).s[6]),       \
                      (X_).s[7]);                                                                               \
        r.d = r.n = 0.0f;                                                                                       \
        KVC_CL_STEP1(X_, 0) KVC_CL_STEP1(X_, 1) KVC_CL_STEP1(X_, 2) KVC_CL_STEP1(X_, 3)                         \
        KVC_CL_STEP1(X_, 4) KVC_CL_STEP1(X_, 5) KVC_CL_STEP1(X_, 6) KVC_CL_STEP1(X_, 7)                         \
        kvc_seg_close(r.m, &r.d, &r.n);                                                                         \
        out = r;                                                                                                \
    } while (0)

/* 8 full segments from local row lr in tree order, pipelined as
 * block8_pipe (form 1); col: the work-item's dim of the state (value half). */
static inline st1 block8_1(__global const float *col, __local const long *rowoff, long sdelta, int lr, seg1 *ap,
                           int more) {
    seg1 a = *ap, x;
    st1 out, b, c, d;
    KVC_CL_BLOCK8(KVC_CL_SEGLD1, KVC_CL_SEGX1, KVC_CL_MERGE1, a, x, lr, more, out, b, c, d);
    st1_merge(&out, &b);
    *ap = a;
    return out;
}

/* count (a power of two <= KVC_CL_MAX_CH) full, present segments. */
static st1 reduce_wide(__global const float *col, __local const long *rowoff, long sdelta, long count) {
    seg1 a, b;
    st1 x, y, z, w;
    KVC_CL_SEGLD1(a, 0);
    if (count >= 8) {
        st1 stack[KVC_CL_SEG_STACK];
        long sizes[KVC_CL_SEG_STACK];
        int top = -1;
        for (long k = 0; k < count / 8; k++) {
            top++;
            stack[top] = block8_1(col, rowoff, sdelta, (int)(k * 8 * KVC_SEG), &a, k + 1 < count / 8);
            sizes[top] = 8;
            KVC_TREE_PUSH(sizes, top, CL_MERGE1);
        }
        KVC_TREE_FOLD(top, CL_MERGE1);
        return stack[0];
    }
    if (count == 1) {
        KVC_CL_SEGX1(a, x);
        return x;
    }
    KVC_CL_SEGLD1(b, 8);
    KVC_CL_SEGX1(a, x);
    if (count == 2) {
        KVC_CL_SEGX1(b, y);
        st1_merge(&x, &y);
        return x;
    }
    KVC_CL_SEGLD1(a, 16);
    KVC_CL_SEGX1(b, y);
    st1_merge(&x, &y);
    KVC_CL_SEGLD1(b, 24);
    KVC_CL_SEGX1(a, z);
    KVC_CL_SEGX1(b, w);
    st1_merge(&z, &w);
    st1_merge(&x, &z);
    return x;
}

/* kvc_compress_wide: 512 work-items, all dims, one group per chunk,
 * finalised at once with one chunk per output. */
__kernel __attribute__((reqd_work_group_size(2 * KVC_CL_WG, 1, 1))) void kvc_compress_wide(KVC_CL_KERNEL_ARGS) {
    __local float c[512], t[256], u[256];
    __local int flags[KVC_CL_FIN_FLAGS] __attribute__((aligned(16)));
    __local long rowoff[KVC_CL_MAX_CH * KVC_SEG];
    __local int last, bad, masked;
    __local long bad_g;
    const long per = pl.nchunk; /* groups per output */
    const long o = get_group_id(0) / per, j = get_group_id(0) % per;
    const int q = (int)get_local_id(0);

    kvc_out_info inf;
    if (!output_of(&sh, bidx, slots, t2r, positions, table, st, pl.out_base, o, q == 0 && j == 0, &inf)) return;
    long cstart, csize;
    kvc_chunk_of(pl.nseg, pl.ch, j, &cstart, &csize);
    fill_rows(&sh, &pl, &inf, table, cstart, csize, rowoff, &bad, &masked, &bad_g, q, 512);
    const int bad_rows = bad;
    if (bad_rows && q == 0) record_error(st, KVC_CHECK_PHYSICAL_BLOCK, pl.out_base + o, bad_g);
    st1 r1;
    r1.m = r1.d = r1.n = 0.0f;
    if (!bad_rows) /* (a bad row: offsets -1, nothing read, the output is invalid) */
        r1 = reduce_wide(state + q, rowoff, 512, csize);
    int fin;
    if (pl.nchunk == 1) { /* the group holds the whole state: c = num / den at once */
        fin = bad_rows ? 2 : 1;
        c[q] = fin == 1 ? KVC_DIV(r1.n, r1.d) : 0.0f;
    } else {
        if (!bad_rows) {
            __global volatile int *mine =
                (__global volatile int *)(chunk_states + (o * pl.nchunk + j) * KVC_CL_CHUNK_STATE + q);
            int sink = atomic_xchg(&mine[0], as_int(r1.m));
            sink ^= atomic_xchg(&mine[512], as_int(r1.d));
            sink ^= atomic_xchg(&mine[1024], as_int(r1.n));
            if (sink == 0x5A5A5A5A) masked = 2; /* uses sink: waits for the writes */
        }
        fin = take_ticket(tickets, o, (int)per, bad_rows, &last, q);
        if (q < 256) {
            st2 res;
            for (int k = 0; k < 2; k++) res.m[k] = res.d[k] = res.n[k] = 0.0f;
            if (fin == 1) res = merge_chunk_states(&pl, chunk_states, o, q);
            for (int k = 0; k < 2; k++) c[2 * q + k] = fin == 1 ? KVC_DIV(res.n[k], res.d[k]) : 0.0f;
        }
    }
    /* finalize_group's inputs for dims 2 (q & 255) + {0, 1}, loaded before
     * finish_output's barriers */
    float fi[4];
    fin_inputs(weight, cos_sin + inf.pc * sh.cos_sin_stride, sh.cos_sin_layout == 1, q & 255, &fi[0], &fi[1], &fi[2],
               &fi[3]);
    finish_output(fin, c, t, u, flags, &sh, &inf, fi, kv, st, q, 1);
}
#endif /* KVC_CL_STRAIGHT */

/*
 * Windows of one segment (C <= 8, or C <= 4 with overlap: the C4
 * compressor), as the CUDA backend's compress_small_kernel: a work-group
 * takes pl.small_k <= KVC_CL_SMALL_K consecutive outputs.  Their index checks
 * run in parallel (work-item k: output k), their rows are resolved in
 * parallel (one work-item per row, each row's block checked), then the
 * outputs are reduced and finalised one after another, the next output's
 * loads in flight during the current one's finalisation.  Loop forms only
 * (PoCL: see KVC_CL_STRAIGHT).  Four kernels share the body: binary32
 * rows (kvc_compress_small), bf16 rows (kvc_small_bf16) and each with a
 * score bias (kvc_small_bias, kvc_bf16_small_bias: SPEC 10), the dtype a
 * literal in each.  (No name begins with another's: Oclgrind counts such a
 * kernel's local memory as the longer name's too.)
 */
#ifndef KVC_CL_SMALL_K
#define KVC_CL_SMALL_K 32 /* outputs per work-group at most: the host passes KVC_OPENCL_SMALL_K */
#endif

/* The one-segment kernels' local memory: the finaliser's (c, t, u, flags),
 * the rows of output k (8k .. 8k + 7: element offsets of the value halves,
 * < 0: masked; with a score bias each row's offset in the group's copy of
 * the bias, a masked row's or a row past the window its row of zeros), and
 * the outputs' check results. */
typedef struct {
    float c[512], t[256], u[256];
    int flags[KVC_CL_FIN_FLAGS] __attribute__((aligned(16)));
    long rowoff[KVC_CL_SMALL_K * KVC_SEG];
    int boff[KVC_CL_SMALL_K * KVC_SEG];
    long po[KVC_CL_SMALL_K], so[KVC_CL_SMALL_K], pc[KVC_CL_SMALL_K], r[KVC_CL_SMALL_K], p[KVC_CL_SMALL_K],
        badg[KVC_CL_SMALL_K];
    int ok[KVC_CL_SMALL_K], bad[KVC_CL_SMALL_K], masked[KVC_CL_SMALL_K], ph0[KVC_CL_SMALL_K];
} small_lds;

/* bf16 rows (bf16): the pairs of bits seg_load left in v and s (dims 2q,
 * 2q+1 of each row) widened in place to binary32, exactly; the widening
 * comes where the rows are used, so the loads stay in flight until then. */
static inline void seg_widen(float2 *v, float2 *s) {
    for (int i = 0; i < KVC_SEG; i++) {
        const uint a = as_uint(v[i].x), b = as_uint(s[i].x);
        v[i] = (float2)(as_float(a << 16), as_float(a & 0xFFFF0000u));
        s[i] = (float2)(as_float(b << 16), as_float(b & 0xFFFF0000u));
    }
}

/* SPEC 10's score bias on the scores of local rows [lr, lr + n): row i's
 * bias row at sb + boff[lr + i] (a masked row's: a row of zeros, -Inf + 0
 * = -Inf), or with boff NULL at sb + 512 i (rows of a window with p + 1 =
 * 0 mod C), dims 2q, 2q+1. */
static inline void seg_add_bias(__local const float *sb, __local const int *boff, int lr, int n, int q, float2 *s) {
    for (int i = 0; i < KVC_SEG; i++)
        if (i < n) {
            const float2 b = vload2(q, sb + (boff ? boff[lr + i] : 512 * i));
            s[i].x = KVC_ADD(s[i].x, b.x);
            s[i].y = KVC_ADD(s[i].y, b.y);
        }
}

/* The body of the one-segment kernels.  bf16: the state is bf16 (a
 * literal, or sh.state_bf16); bias: the score bias (NULL: none), copied
 * into sb once per group as the rows of a window with p + 1 = 0 mod C take
 * it (a row's bias row depends only on (p + 1) mod C): row i of the copy is
 * bias row i mod C (with overlap, rows C .. 2C - 1 the B halves), 512
 * floats a row, KVC_SEG rows at most; then a row of 512 zeros
 * (KVC_CL_BIAS_ZERO). */
#define KVC_CL_BIAS_ZERO (KVC_SEG * 512)
static inline void small_body(const kvc_shape *shp, const kvc_plan *plp, __global const float *state,
                              __global const int *t2r, __global const long *positions, __global const long *slots,
                              __global const long *bidx, __global const int *table, __global const ushort *weight,
                              __global const float *cos_sin, __global uchar *kv, __global kvc_cl_status *st,
                              __global const float *bias, __local float *sb, int bf16, __local small_lds *L) {
    const kvc_shape sh = *shp;
    const int q = (int)get_local_id(0);
    const long o0 = (long)get_group_id(0) * plp->small_k;
    const int kn = (int)(sh.num_outputs - o0 < plp->small_k ? sh.num_outputs - o0 : plp->small_k);
    const int ovl = sh.overlap != 0;
    if (q < kn) { /* work-item q: output o0 + q's checks (it records its own error or padding) */
        kvc_out_info inf;
        const int ok = output_of(&sh, bidx, slots, t2r, positions, table, st, plp->out_base, o0 + q, 1, &inf);
        long po = 0, so = 0;
        if (ok) kvc_slot_offsets_s(inf.slot, sh.kv_block_size, sh.page_stride, sh.nope_format, &po, &so);
        L->ok[q] = ok;
        L->bad[q] = 0;
        L->masked[q] = 0;
        L->ph0[q] = bias && (inf.p + 1) % sh.compress_ratio == 0;
        L->po[q] = po;
        L->so[q] = so;
        L->pc[q] = inf.pc;
        L->r[q] = inf.r;
        L->p[q] = inf.p;
    }
    const long C = sh.compress_ratio;
    if (bias) {
        for (int x = q; x < plp->rows * 512; x += KVC_CL_WG) { /* copy row i: bias row i mod C, B half from C on */
            const int i = x >> 9;
            sb[x] = bias[(i % C) * sh.score_bias_stride + (i >= C ? 512 : 0) + (x & 511)];
        }
        for (int x = q; x < 512; x += KVC_CL_WG) sb[KVC_CL_BIAS_ZERO + x] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int rows = (int)plp->rows; /* <= 8 */
    for (int x = q; x < kn * KVC_SEG; x += KVC_CL_WG) {
        const int k = x / KVC_SEG, i = x % KVC_SEG;
        long off = -1, g;
        if (bias) L->boff[x] = KVC_CL_BIAS_ZERO;
        if (L->ok[k] && i < rows) {
            off = kvc_row_lookup(&sh, table + L->r[k] * sh.block_table_stride, L->p[k], i, &g);
            if (off == KVC_ROW_MASKED) L->masked[k] = 1;
            if (off == KVC_ROW_BAD && atomic_xchg(&L->bad[k], 1) == 0) L->badg[k] = g;
            if (bias && off >= 0) {
                int vo, so;
                const long pos = kvc_window_row(L->p[k], sh.compress_ratio, ovl, 512, i, &vo, &so);
                L->boff[x] = 512 * (int)(pos % C + (so != kvc_score_delta(ovl, 512) ? C : 0)); /* its copy row */
            }
        }
        L->rowoff[x] = off;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const long sdelta = kvc_score_delta(ovl, 512);
    int written = 0, nonfinite = 0; /* work-item 0's counts */
    /* the next output to reduce from k on; the skipped ones with a bad block
     * are reported (the choice is the same in every work-item) */
    int k = 0;
    while (k < kn && (!L->ok[k] || L->bad[k])) {
        if (q == 0 && L->ok[k]) {
            record_error(st, KVC_CHECK_PHYSICAL_BLOCK, plp->out_base + o0 + k, L->badg[k]);
            atomic_inc(&st->invalid);
        }
        k++;
    }
    const int vec = (int)plp->vec;
    float2 v[KVC_SEG], s[KVC_SEG];
    if (k < kn) seg_load(state, L->rowoff, sdelta, k * KVC_SEG, rows, q, v, s, !L->masked[k], vec, bf16);
    while (k < kn) {
        if (bf16) seg_widen(v, s);
        if (bias && L->ph0[k] && !L->masked[k] && rows == KVC_SEG) /* row i's bias: row i of the copy */
            seg_add_bias(sb, 0, 0, KVC_SEG, q, s);
        else if (bias)
            seg_add_bias(sb, L->boff, k * KVC_SEG, rows, q, s);
        const st2 res = seg_reduce(v, s, rows, KVC_SEG);
        int kk = k + 1;
        while (kk < kn && (!L->ok[kk] || L->bad[kk])) {
            if (q == 0 && L->ok[kk]) {
                record_error(st, KVC_CHECK_PHYSICAL_BLOCK, plp->out_base + o0 + kk, L->badg[kk]);
                atomic_inc(&st->invalid);
            }
            kk++;
        }
        if (kk < kn) /* in flight while k finalises */
            seg_load(state, L->rowoff, sdelta, kk * KVC_SEG, rows, q, v, s, !L->masked[kk], vec, bf16);
        float w0, w1, cj, sj; /* (loads issued before the barriers) */
        fin_inputs(weight, cos_sin + L->pc[k] * sh.cos_sin_stride, sh.cos_sin_layout == 1, q, &w0, &w1, &cj, &sj);
        for (int j = 0; j < 2; j++) L->c[2 * q + j] = KVC_DIV(res.n[j], res.d[j]);
        barrier(CLK_LOCAL_MEM_FENCE);
        const int bad = finalize_group(1, L->c, L->t, L->u, L->flags, w0, w1, cj, sj, sh.rms_norm_eps,
                                       sh.nope_format == 1, kv + L->po[k], kv + L->so[k], q, 0);
        written++;
        nonfinite += bad;
        barrier(CLK_LOCAL_MEM_FENCE); /* c, t, u, flags free for the next output */
        k = kk;
    }
    if (q == 0 && written) atomic_add(&st->written, written);
    if (q == 0 && nonfinite) atomic_add(&st->nonfinite, nonfinite);
}

#define KVC_CL_SMALL_ARGS &sh, &pl, state, t2r, positions, slots, bidx, table, weight, cos_sin, kv, st
__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void kvc_compress_small(KVC_CL_KERNEL_ARGS) {
    __local small_lds L;
    small_body(KVC_CL_SMALL_ARGS, 0, L.c, 0, &L);
}
__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void kvc_small_bf16(KVC_CL_KERNEL_ARGS) {
    __local small_lds L;
    small_body(KVC_CL_SMALL_ARGS, 0, L.c, 1, &L);
}
__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void kvc_small_bias(KVC_CL_KERNEL_ARGS,
                                                                                           __global const float *bias) {
    __local small_lds L;
    __local float sb[KVC_CL_BIAS_ZERO + 512];
    small_body(KVC_CL_SMALL_ARGS, bias, sb, 0, &L);
}
__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void
kvc_bf16_small_bias(KVC_CL_KERNEL_ARGS, __global const float *bias) {
    __local small_lds L;
    __local float sb[KVC_CL_BIAS_ZERO + 512];
    small_body(KVC_CL_SMALL_ARGS, bias, sb, 1, &L);
}

/* The general kernel (kvc_general.h): head width 128, a bf16 state or a
 * score bias (at head width 512 windows of more than one segment; the
 * one-segment kernels take those of one).  One work-group of pl.small_k x head_dim / R work-items for
 * pl.small_k outputs, R = 2 dimensions a work-item at head width 512, else
 * 1; bias: the score bias (any buffer where sh.score_bias_stride is 0:
 * none). */
__kernel void kvc_compress_general(KVC_CL_KERNEL_ARGS, __global const float *bias) {
    __local kvc_gen_scratch scs[KVC_GEN_K_MAX];
    const int D = (int)sh.head_dim, nt = (int)(get_local_size(0) / pl.small_k), R = D / nt;
    const int k = (int)get_local_id(0) / nt, t = (int)get_local_id(0) % nt;
    __local kvc_gen_scratch *sc = &scs[k];
    const long o = get_group_id(0) * pl.small_k + k;
    kvc_out_info inf;
    inf.r = inf.p = inf.pc = inf.slot = 0;
    /* no return past the first barrier (PoCL): a skipped output only stops the writes */
    const int live =
        o < sh.num_outputs && output_of(&sh, bidx, slots, t2r, positions, table, st, pl.out_base, o, t == 0, &inf);
    if (t == 0) sc->bad_row = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    float c[KVC_GEN_R];
    KVC_GEN_EACH(r, R) c[r] = live ? kvc_gen_reduce(&sh, state, table + inf.r * sh.block_table_stride,
                                                    sh.score_bias_stride ? bias : 0, inf.p, t + r * nt, 0, sc)
                                   : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int ok = live && !sc->bad_row;
    if (live && !ok && t == 0) {
        record_error(st, KVC_CHECK_PHYSICAL_BLOCK, pl.out_base + o, sc->bad_g);
        atomic_inc(&st->invalid);
    }
    long po = 0, so = 0;
    if (ok) kvc_slot_offsets_s(inf.slot, sh.kv_block_size, sh.page_stride, sh.nope_format, &po, &so);
    const int bad =
        kvc_gen_finalize(&sh, c, t, R, ok, weight, cos_sin + inf.pc * sh.cos_sin_stride, kv + po, kv + so, sc);
    if (ok && t == 0) {
        atomic_inc(&st->written);
        if (bad) atomic_inc(&st->nonfinite);
    }
}
