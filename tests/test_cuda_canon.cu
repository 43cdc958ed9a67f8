/*
 * test_cuda_canon -- the device's forms of kvc_canon.h's operations against
 * their literal forms, for EVERY binary32 argument each can be passed:
 *  - the canonical exp (written without branches, compiled with the _rn
 *    intrinsics) against SPEC 3's kexp written out literally (NaN and
 *    cutoff as early returns, every operation a separate _rn intrinsic): all
 *    x <= 0 (-0, subnormals, -Inf, every negative NaN), +0 and the positive
 *    NaNs; any NaN equals any NaN (the contract only observes "is NaN");
 *  - kvc_fp8_code2 and kvc_fp8_code (sm_89+: the hardware's saturating
 *    conversion) against the integer form kvc_fp8_code_int, both bytes of
 *    the pair, for every non-NaN binary32 (+-Inf and |v| > 448 saturate);
 *  - kvc_bf16_bits_flagged (sm_80+: the hardware conversion) against
 *    kvc_bf16_bits for every non-NaN binary32; a NaN must give a NaN.
 * Exit 0 all equal, 1 a mismatch (first ones printed), 77 no CUDA device.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "kvc_canon.h"

/* SPEC 3's kexp, operation by operation. */
__device__ float exp_spec(float x) {
    if (x != x) return x;
    if (x < -87.0f) return 0.0f;
    float m = __fadd_rn(__fmul_rn(x, 0x1.715476p+0f), 0x1.8p+23f);
    float k = __fsub_rn(m, 0x1.8p+23f);
    float r = __fsub_rn(__fsub_rn(x, __fmul_rn(k, 0x1.62e400p-1f)), __fmul_rn(k, 0x1.7f7d1cp-20f));
    float q = 0x1.6c16c2p-10f;
    q = __fadd_rn(__fmul_rn(q, r), 0x1.111112p-7f);
    q = __fadd_rn(__fmul_rn(q, r), 0x1.555556p-5f);
    q = __fadd_rn(__fmul_rn(q, r), 0x1.555556p-3f);
    q = __fadd_rn(__fmul_rn(q, r), 0x1.000000p-1f);
    q = __fadd_rn(__fmul_rn(q, r), 1.0f);
    q = __fadd_rn(__fmul_rn(q, r), 1.0f);
    unsigned eb = ((__float_as_uint(m) - 0x4B400000u) + 127u) << 23;
    return __fmul_rn(q, __uint_as_float(eb));
}

/* Each operation's comparison for one argument's bits: true when equal. */
struct exp_same {
    __device__ bool operator()(unsigned bits) const {
        const float a = kvc_exp(__uint_as_float(bits)), b = exp_spec(__uint_as_float(bits));
        return (a != a && b != b) || __float_as_uint(a) == __float_as_uint(b);
    }
};
struct fp8_same {
    __device__ bool operator()(unsigned bits) const {
        const float v = __uint_as_float(bits);
        if (v != v) return true; /* a NaN product only occurs in a slot flagged non-finite */
        const kvc_u16 h = kvc_fp8_code2(v, -v, 1.0f);
        return (h & 0xFFu) == kvc_fp8_code_int(v, 1.0f) && (h >> 8) == kvc_fp8_code_int(-v, 1.0f) &&
               kvc_fp8_code(v, 1.0f) == kvc_fp8_code_int(v, 1.0f);
    }
};
struct bf16_same {
    __device__ bool operator()(unsigned bits) const {
        const float f = __uint_as_float(bits);
        const kvc_u16 h = kvc_bf16_bits_flagged(f);
        if (f != f) return (h & 0x7F80u) == 0x7F80u && (h & 0x7Fu) != 0u;
        return h == kvc_bf16_bits(f);
    }
};

struct result {
    unsigned long long mismatches;
    unsigned first[8];
};

/* bits = base + i for i < n (64-bit loop over a 32-bit range) */
template <class SAME>
__global__ void check(unsigned long long base, unsigned long long n, result *res, SAME same) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)gridDim.x * blockDim.x) {
        const unsigned bits = (unsigned)(base + i);
        if (!same(bits)) {
            const unsigned long long k = atomicAdd(&res->mismatches, 1ull);
            if (k < 8) res->first[k] = bits;
        }
    }
}

struct range {
    unsigned long long base, n;
};

/* Runs one operation's comparison over its ranges; 0 when all equal. */
template <class SAME>
static int run(const char *what, const range *ranges, int nr, result *d) {
    result h;
    if (cudaMemset(d, 0, sizeof h) != cudaSuccess) {
        printf("FAIL: cudaMemset\n");
        return 1;
    }
    unsigned long long total = 0;
    for (int i = 0; i < nr; i++) {
        check<<<132 * 16, 256>>>(ranges[i].base, ranges[i].n, d, SAME());
        total += ranges[i].n;
    }
    cudaError_t e = cudaMemcpy(&h, d, sizeof h, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        printf("FAIL: %s\n", cudaGetErrorString(e));
        return 1;
    }
    if (h.mismatches) {
        printf("FAIL: %s: %llu of %llu arguments differ, e.g.", what, h.mismatches, total);
        for (int i = 0; i < 8 && i < (int)h.mismatches; i++) printf(" 0x%08X", h.first[i]);
        printf("\n");
        return 1;
    }
    printf("PASS: %s for all %llu arguments\n", what, total);
    return 0;
}

int main(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    result *d = NULL;
    if (cudaMalloc(&d, sizeof *d) != cudaSuccess) {
        printf("FAIL: cudaMalloc\n");
        return 1;
    }
    /* exp: [+0 .. +Inf) is outside the domain except +0; positive NaNs; all negatives */
    const range exp_r[] = {
        {0x00000000ull, 1ull},                              /* +0                           */
        {0x7F800001ull, 0x7FFFFFFFull - 0x7F800001ull + 1}, /* +NaN                         */
        {0x80000000ull, 0x80000000ull},                     /* every x < 0, -0, -Inf, -NaN  */
    };
    const range all_r[] = {{0x00000000ull, 0x100000000ull}};
    int bad = run<exp_same>("kvc_exp on the device equals SPEC 3's kexp", exp_r, 3, d);
    bad |= run<fp8_same>("kvc_fp8_code2 / kvc_fp8_code on the device equal kvc_fp8_code_int (NaN: any)", all_r, 1, d);
    bad |= run<bf16_same>("kvc_bf16_bits_flagged on the device equals kvc_bf16_bits (NaN: a NaN)", all_r, 1, d);
    cudaFree(d);
    return bad;
}
