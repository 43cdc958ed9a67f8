/*
 * kvc_kernel.cl -- the OpenCL kernel.  Compiled at run time from one string:
 * kvc_canon.h + kvc_check.h + this file (embedded at build time, #include
 * lines removed), built with FP_CONTRACT OFF (kvc_canon.h) and
 * -cl-fp32-correctly-rounded-divide-sqrt, so every operation is the
 * canonical binary32 operation: the bytes equal the CPU backend's.
 *
 * Work decomposition (as the CUDA kernel's): a window's segments are cut
 * into chunks (kvc_chunk_of: complete subtrees of the canonical tree); one
 * work-group of 128 work-items reduces one chunk of one output, work-item q
 * holding dims 4q..4q+3 and combining its segments with a binary counter in
 * private memory.  With one chunk per output the group finalises at once;
 * otherwise it publishes its chunk state and the last group of the output
 * (ticket counter) merges the chunk states in canonical order.  Work-item 0
 * finalises the slot from c[512] in local memory.
 */
#include "kvc_canon.h"
#include "kvc_check.h"

#define KVC_CL_WG 128
#define KVC_CL_SEG_STACK 9    /* segments per chunk <= 128                    */
#define KVC_CL_CHUNK_STACK 40 /* chunk merge: any chunk count < 2^38            */

/* Per-launch plan (mirrors kvc_cl_plan of opencl_backend.c). */
typedef struct {
    long rows, nseg, ch, nchunk;
} kvc_cl_plan;

/* Mirrors the host's kvc_cl_status (opencl_backend.c). */
typedef struct {
    int status, check;
    long output, value;
    int written, padding, nonfinite, invalid;
} kvc_cl_status;

typedef struct {
    float m[4], d[4], n[4];
} st4;

static inline void st_merge(st4 *a, const st4 *b) {
    for (int j = 0; j < 4; j++) kvc_merge(&a->m[j], &a->d[j], &a->n[j], b->m[j], b->d[j], b->n[j]);
}
#define CL_MERGE(l, r) st_merge(&stack[l], &stack[r])

/* Reduce segments [s0, s0 + count) of one output for dims 4q..4q+3. */
static st4 reduce_segments(const kvc_shape *sh, const kvc_cl_plan *pl, __global const float *state,
                           __global const int *trow, long p, long s0, long count, int q) {
    const long C = sh->compress_ratio;
    const int ovl = sh->overlap != 0;
    st4 stack[KVC_CL_SEG_STACK];
    long sizes[KVC_CL_SEG_STACK];
    int top = -1;
    for (long sg = s0; sg < s0 + count; sg++) {
        const long r0 = sg * KVC_SEG;
        const int n = (int)(pl->rows - r0 < KVC_SEG ? pl->rows - r0 : KVC_SEG);
        float4 v[KVC_SEG], s[KVC_SEG];
        for (int i = 0; i < n; i++) {
            int vo, so;
            const long pos = kvc_window_row(p, C, ovl, r0 + i, &vo, &so);
            if (pos < 0) {
                v[i] = (float4)(0.0f);
                s[i] = (float4)(KVC_NEG_INF);
                continue;
            }
            const long base = kvc_row_offset(trow[pos / sh->block_size], pos, sh->block_size,
                                             sh->state_stride_block, sh->state_stride_token);
            v[i] = vload4(q, state + base + vo);
            s[i] = vload4(q, state + base + so);
        }
        st4 cur;
        cur.m[0] = s[0].x; cur.m[1] = s[0].y; cur.m[2] = s[0].z; cur.m[3] = s[0].w;
        for (int j = 0; j < 4; j++) {
            cur.d[j] = 0.0f;
            cur.n[j] = 0.0f;
        }
        for (int i = 1; i < n; i++) {
            cur.m[0] = kvc_max(cur.m[0], s[i].x);
            cur.m[1] = kvc_max(cur.m[1], s[i].y);
            cur.m[2] = kvc_max(cur.m[2], s[i].z);
            cur.m[3] = kvc_max(cur.m[3], s[i].w);
        }
        for (int i = 0; i < n; i++) {
            kvc_seg_step(cur.m[0], s[i].x, v[i].x, &cur.d[0], &cur.n[0]);
            kvc_seg_step(cur.m[1], s[i].y, v[i].y, &cur.d[1], &cur.n[1]);
            kvc_seg_step(cur.m[2], s[i].z, v[i].z, &cur.d[2], &cur.n[2]);
            kvc_seg_step(cur.m[3], s[i].w, v[i].w, &cur.d[3], &cur.n[3]);
        }
        for (int j = 0; j < 4; j++) kvc_seg_close(cur.m[j], &cur.d[j], &cur.n[j]);
        /* push; merge the complete subtrees this segment completes */
        top++;
        stack[top] = cur;
        sizes[top] = 1;
        KVC_TREE_PUSH(sizes, top, CL_MERGE);
    }
    KVC_TREE_FOLD(top, CL_MERGE);
    return stack[0];
}

__kernel __attribute__((reqd_work_group_size(KVC_CL_WG, 1, 1))) void kvc_compress_kernel(
    const kvc_shape sh, const kvc_cl_plan pl, __global const float *state, __global const int *t2r,
    __global const long *positions, __global const long *slots, __global const long *bidx,
    __global const int *table, __global const ushort *weight, __global const float *cos_sin, __global uchar *kv,
    __global kvc_cl_status *st, __global float *chunk_states, __global volatile int *tickets) {
    __local float c[512], y[512];
    __local int last;
    const long o = get_group_id(0) / pl.nchunk, j = get_group_id(0) % pl.nchunk;
    const int q = (int)get_local_id(0);

    kvc_out_info inf;
    const int chk = kvc_check_output_s(&sh, bidx, slots, t2r, positions, table, o, &inf, 1);
    if (chk != KVC_CHECK_NONE) { /* every group of the output sees it: all return */
        if (q == 0 && j == 0) {
            if (atomic_cmpxchg(&st->status, 0, 5 /* KVC_ERROR_INDEX_OUT_OF_RANGE */) == 0) {
                st->check = chk;
                st->output = o;
                st->value = inf.value;
            }
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
    __global const int *trow = table + inf.r * sh.block_table_stride;
    st4 res = reduce_segments(&sh, &pl, state, trow, inf.p, cstart, csize, q);

    if (pl.nchunk > 1) {
        __global float *mine = chunk_states + (o * pl.nchunk + j) * 1536;
        for (int k = 0; k < 4; k++) {
            mine[4 * q + k] = res.m[k];
            mine[512 + 4 * q + k] = res.d[k];
            mine[1024 + 4 * q + k] = res.n[k];
        }
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        if (q == 0) last = atomic_inc(&tickets[o]) == (int)(pl.nchunk - 1);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (!last) return;
        mem_fence(CLK_GLOBAL_MEM_FENCE);
        /* canonical merge of the chunks: binary counter over their sizes */
        __global volatile const float *all = chunk_states + o * pl.nchunk * 1536;
        st4 stack[KVC_CL_CHUNK_STACK];
        long sizes[KVC_CL_CHUNK_STACK];
        int top = -1;
        for (long k = 0; k < pl.nchunk; k++) {
            long s0, sz;
            kvc_chunk_of(pl.nseg, pl.ch, k, &s0, &sz);
            top++;
            for (int u = 0; u < 4; u++) {
                stack[top].m[u] = all[k * 1536 + 4 * q + u];
                stack[top].d[u] = all[k * 1536 + 512 + 4 * q + u];
                stack[top].n[u] = all[k * 1536 + 1024 + 4 * q + u];
            }
            sizes[top] = sz;
            KVC_TREE_PUSH(sizes, top, CL_MERGE);
        }
        KVC_TREE_FOLD(top, CL_MERGE);
        res = stack[0];
    }
    for (int k = 0; k < 4; k++) c[4 * q + k] = KVC_DIV(res.n[k], res.d[k]);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (q == 0) {
        long po, so;
        kvc_slot_offsets_s(inf.slot, sh.kv_block_size, sh.page_stride, &po, &so);
        const int bad = kvc_finalize_slot(c, y, weight, cos_sin + inf.pc * sh.cos_sin_stride,
                                          sh.cos_sin_layout == 1, sh.rms_norm_eps, sh.nope_format == 1, kv + po,
                                          kv + so);
        atomic_inc(&st->written);
        if (bad) atomic_inc(&st->nonfinite);
    }
}
