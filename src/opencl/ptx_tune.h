/*
 * ptx_tune.h -- text edits of a PTX program (NVIDIA's OpenCL program binary)
 * that change how the PTX compiler allocates registers or caches loads,
 * never what is computed.  Pure C (no OpenCL), so that CTest checks them on
 * any machine (tests/test_ptx_tune.c).  Used by opencl_backend.c.
 */
#ifndef KVC_PTX_TUNE_H
#define KVC_PTX_TUNE_H

#include "kvc_internal.h" /* KVC_HIDDEN */

/**
 * Insert the directive ".minnctapersm n" (n resident thread blocks per SM
 * asked of the PTX compiler) after the parameter list of `.entry entry(`.
 *
 * @param ptx    NUL-terminated PTX text, malloc'ed; owned by the call
 * @param entry  kernel name
 * @param n      blocks per SM; n <= 0 changes nothing
 * @param done   set to 1 if the directive was inserted (else left as is)
 * @return the edited text (malloc'ed; ptx is freed or returned), or ptx
 *         unchanged when the entry is missing, n <= 0 or memory is short.
 */
KVC_HIDDEN char *kvc_ptx_minb(char *ptx, const char *entry, int n, int *done);

/* The global load forms kvc_ptx_streaming edits (a mask). */
#define KVC_PTX_LD_F32 1   /* ld.global.f32    */
#define KVC_PTX_LD_V2F32 2 /* ld.global.v2.f32 */
#define KVC_PTX_LD_V4F32 4 /* ld.global.v4.f32 */
#define KVC_PTX_LD_V2U32 8 /* ld.global.v2.u32 */
#define KVC_PTX_LD_U32 16  /* ld.global.u32    */

/**
 * In the body of `.entry entry(` (up to the next ".entry"), make the global
 * loads of the forms in `forms` (KVC_PTX_LD_*) streaming (evict-first):
 * "ld.global.f32" -> "ld.global.cs.f32", the same for the others.
 *
 * @param ptx, entry, done  as for kvc_ptx_minb
 * @param forms  the load forms to edit
 * @return as for kvc_ptx_minb
 */
KVC_HIDDEN char *kvc_ptx_streaming(char *ptx, const char *entry, int forms, int *done);

#endif
