/*
 * test_cuda_fast -- SPEC 8's FAST mode on the CUDA backend, on kvc-rand
 * cases (the golden cases are test_golden numerics=fast):
 *   - conformance (SPEC 4 / 7; 9 for the indexer formats) to the CPU backend's exact bytes;
 *   - run-to-run identity: the same call twice gives the same bytes;
 *   - batch invariance: the outputs in reverse order, and every third one
 *     alone, give each output the same bytes as the full call;
 *   - the report says FAST (every CUDA kernel has a fast form).
 * Exit 0 pass, 1 fail, 77 no CUDA device.
 */
#include "cuda_case.cuh"
#include "kvcompress_cuda.h"

static const char *kSpecs[] = {
    "reqs=2,tokens=8192,C=128,block=8",
    "reqs=1,tokens=8192,C=256,block=8,layout=shuffle",
    "reqs=2,tokens=8192,C=512,block=16,format=fp8",
    "reqs=2,tokens=4096,C=128,block=8,kv_block=2,format=fp8,cos_sin=interleaved",
    "reqs=1,tokens=8192,C=128,block=7,layout=shuffle,seed=5",
    "reqs=1,tokens=6400,C=100,block=16",
    "reqs=4,tokens=4096,C=4,block=8,overlap=1,format=fp8",
    /* large calls of the slice kernels (the subsets of the batch-invariance
     * check are smaller calls: same bytes required) */
    "reqs=8,tokens=65536,C=128,block=8",
    "reqs=4,tokens=65536,C=256,block=16,layout=shuffle,format=fp8",
    /* the general kernel (SPEC 9 / 10) */
    "reqs=4,tokens=8192,C=4,block=4,overlap=1,format=indexer_fp8",
    "reqs=2,tokens=4096,C=4,block=4,overlap=1,format=indexer_mxfp4,rotate=1,layout=shuffle",
    "reqs=2,tokens=8192,C=128,block=8,kv_block=2,format=fp8,bias=1,state=bf16",
};
#define NCASES (int)(sizeof kSpecs / sizeof kSpecs[0])

/* Run x on the device in `mode` with the outputs `bidx` (n of them, device copy made here). */
static kvc_numerics run(dev_case *x, kvc_numerics mode, const int64_t *bidx, int64_t n, uint8_t *rows) {
    kvc_args a = x->d;
    a.numerics = mode;
    a.num_outputs = n;
    int64_t *d_bidx = NULL;
    TC_CHECK(cudaMalloc(&d_bidx, (size_t)(n > 0 ? n : 1) * 8));
    TC_CHECK(cudaMemcpy(d_bidx, bidx, (size_t)n * 8, cudaMemcpyHostToDevice));
    a.boundary_token_indices = d_bidx;
    TC_CHECK(cudaMemset(x->d.kv_cache, 0xA5, x->bytes[KVC_KIT_KV]));
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_CUDA;
    kvc_report rep;
    if (kvc_compress(&a, &ex, &rep) != KVC_OK) {
        printf("FAIL %s: %s\n", x->name, kvc_last_error_message());
        exit(1);
    }
    kvc_device_status s;
    if (kvc_cuda_read_status(&ex, &s) != KVC_OK || s.status != 0 || s.outputs_written != n) {
        printf("FAIL %s: device status %d, %lld written of %lld\n", x->name, s.status, (long long)s.outputs_written,
               (long long)n);
        exit(1);
    }
    TC_CHECK(cudaMemcpy(x->got, x->d.kv_cache, x->bytes[KVC_KIT_KV], cudaMemcpyDeviceToHost));
    cudaFree(d_bidx);
    /* rows in the order of bidx (584, 132 or 68 bytes each) */
    kvc_args t = x->host.args;
    t.kv_cache = x->got;
    const int64_t sb = kvc_slot_bytes(t.nope_format);
    for (int64_t o = 0; o < n; o++) kvc_kit_slot_row(&t, x->host.kv_slot_mapping[bidx[o]], rows + o * sb);
    return rep.numerics;
}

int main(void) {
    if (!tc_have_gpu()) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    int failures = 0;
    for (int c = 0; c < NCASES; c++) {
        dev_case x;
        if (tc_make(kSpecs[c], &x)) return 1;
        const int64_t n = x.host.args.num_outputs;
        const int64_t SB = kvc_slot_bytes(x.host.args.nope_format);
        const size_t rb = (size_t)(n * SB);
        uint8_t *full = (uint8_t *)malloc(rb), *again = (uint8_t *)malloc(rb), *part = (uint8_t *)malloc(rb);
        int64_t *bidx = (int64_t *)malloc((size_t)n * 8);
        const int64_t *b0 = x.host.boundary_token_indices;
        const kvc_numerics used = run(&x, KVC_NUMERICS_FAST, b0, n, full);
        char msg[512] = "";
        int64_t differ = 0;
        int bad = 0;
        if (used != KVC_NUMERICS_FAST) {
            snprintf(msg, sizeof msg, "report says EXACT");
            bad = 1;
        } else if (kvc_kit_conforms(full, x.cpu_rows, n, (int)x.host.args.nope_format, &differ, msg, sizeof msg)) {
            bad = 1;
        }
        if (!bad) {
            run(&x, KVC_NUMERICS_FAST, b0, n, again);
            if (memcmp(full, again, rb)) snprintf(msg, sizeof msg, "two identical calls differ"), bad = 1;
        }
        if (!bad) { /* reversed order */
            for (int64_t o = 0; o < n; o++) bidx[o] = b0[n - 1 - o];
            run(&x, KVC_NUMERICS_FAST, bidx, n, part);
            for (int64_t o = 0; o < n && !bad; o++)
                if (memcmp(part + o * SB, full + (n - 1 - o) * SB, (size_t)SB))
                    snprintf(msg, sizeof msg, "output %lld differs when the outputs are reversed", (long long)(n - 1 - o)),
                        bad = 1;
        }
        if (!bad) { /* every third output alone */
            int64_t m = 0;
            for (int64_t o = 1; o < n; o += 3) bidx[m++] = b0[o];
            run(&x, KVC_NUMERICS_FAST, bidx, m, part);
            for (int64_t k = 0; k < m && !bad; k++)
                if (memcmp(part + k * SB, full + (1 + 3 * k) * SB, (size_t)SB))
                    snprintf(msg, sizeof msg, "output %lld differs in a batch of every third output", (long long)(1 + 3 * k)),
                        bad = 1;
        }
        printf("%s %-70s %s %s%s\n", bad ? "FAIL" : "ok  ", x.name, used == KVC_NUMERICS_FAST ? "fast" : "exact",
               bad ? msg : "", bad ? "" : "");
        if (!bad && used == KVC_NUMERICS_FAST)
            printf("     %lld NOPE values differ from the exact bytes\n", (long long)differ);
        failures += bad;
        free(full);
        free(again);
        free(part);
        free(bidx);
        tc_free(&x);
    }
    printf("%d cases, %d failed\n", NCASES, failures);
    return failures ? 1 : 0;
}
