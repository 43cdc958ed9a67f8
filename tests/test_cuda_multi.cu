/*
 * test_cuda_multi -- one process, two CUDA devices (issue 22): different
 * cases on cuda:0 and cuda:1 at once, each on a stream of its own device with
 * no synchronisation between them, many times, byte-exact against the CPU;
 * explicit exec.device and the AUTO backend (which must take the tensors'
 * device, whatever the current device is); the caller's current device is
 * left as it was; a call whose tensors sit on two devices is refused.
 * With one device the two-device parts are skipped (said so) and the rest
 * runs on cuda:0.  Exit 0 pass, 1 fail, 77 no CUDA device.
 */
#include "cuda_case.cuh"
#include "kvcompress_cuda.h"

static const char *kSpecs[2] = {"reqs=2,tokens=8192,C=128,block=8,layout=shuffle",
                                "reqs=4,tokens=4096,C=4,block=8,overlap=1,format=fp8"};

int main(int argc, char **argv) {
    const int iters = argc > 1 ? atoi(argv[1]) : 40;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("SKIP: no CUDA device\n");
        return 77;
    }
    const int nd = n >= 2 ? 2 : 1;
    if (nd == 1) printf("note: one CUDA device: the two-device parts are skipped\n");
    dev_case cs[2];
    cudaStream_t st[2];
    for (int d = 0; d < nd; d++) {
        TC_CHECK(cudaSetDevice(d));
        if (tc_make(kSpecs[d], &cs[d])) return 1;
        TC_CHECK(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking));
    }
    TC_CHECK(cudaSetDevice(0));
    uint8_t *rows = (uint8_t *)malloc((size_t)64 << 20);
    int failures = 0;
    for (int it = 0; it < iters; it++) {
        kvc_exec ex[2];
        for (int d = 0; d < nd; d++) {
            dev_case *x = &cs[d];
            TC_CHECK(cudaSetDevice(d));
            TC_CHECK(cudaMemsetAsync(x->d.kv_cache, (it * 29 + 7 * d) | 1, x->bytes[KVC_KIT_KV], st[d]));
            kvc_exec_init(&ex[d]);
            ex[d].stream = st[d];
            if (it % 2 == 0) {
                ex[d].backend = KVC_BACKEND_CUDA;
                ex[d].device = d;
                TC_CHECK(cudaSetDevice(nd - 1 - d)); /* the library must not need the current device */
            } else { /* AUTO, device -1: the tensors' device, whatever is current */
                TC_CHECK(cudaSetDevice(nd - 1 - d));
            }
            int before = -1, after = -1;
            cudaGetDevice(&before);
            if (kvc_compress(&x->d, &ex[d], NULL) != KVC_OK) {
                printf("FAIL %s on device %d: %s\n", x->name, d, kvc_last_error_message());
                return 1;
            }
            cudaGetDevice(&after);
            if (after != before) {
                printf("FAIL iteration %d: the current device moved from %d to %d\n", it, before, after);
                failures++;
            }
            TC_CHECK(cudaSetDevice(d));
            TC_CHECK(cudaMemcpyAsync(x->got, x->d.kv_cache, x->bytes[KVC_KIT_KV], cudaMemcpyDeviceToHost, st[d]));
            ex[d].device = d; /* reading the status word: that device's, that stream's */
        }
        for (int d = 0; d < nd; d++) {
            dev_case *x = &cs[d];
            kvc_device_status s;
            if (kvc_cuda_read_status(&ex[d], &s) != KVC_OK || s.status != 0 ||
                s.outputs_written != x->host.args.num_outputs) {
                printf("FAIL iteration %d device %d: status %d, %lld written\n", it, d, s.status,
                       (long long)s.outputs_written);
                failures++;
                continue;
            }
            kvc_kit_output_rows(&x->host.args, &x->host, x->got, rows);
            if (memcmp(rows, x->cpu_rows, (size_t)x->host.args.num_outputs * KVC_SLOT_BYTES) != 0) {
                printf("FAIL iteration %d device %d (%s): bytes differ from the CPU\n", it, d, x->name);
                failures++;
            }
        }
    }
    if (nd == 2) { /* kv_cache of device 1 with the inputs of device 0: refused, nothing launched */
        kvc_args a = cs[0].d;
        a.kv_cache = cs[1].d.kv_cache;
        kvc_exec ex;
        kvc_exec_init(&ex);
        const kvc_status s = kvc_compress(&a, &ex, NULL);
        if (s != KVC_ERROR_BAD_PARAMETER || !strstr(kvc_last_error_message(), "one device per call")) {
            printf("FAIL tensors on two devices: %s (%s)\n", kvc_status_string(s), kvc_last_error_message());
            failures++;
        }
        ex.backend = KVC_BACKEND_CUDA;
        ex.device = 0;
        const kvc_status s2 = kvc_compress(&a, &ex, NULL);
        if (s2 != KVC_ERROR_BAD_PARAMETER || !strstr(kvc_last_error_message(), "exec->device = 0")) {
            printf("FAIL kv_cache of device 1 with exec->device 0: %s (%s)\n", kvc_status_string(s2),
                   kvc_last_error_message());
            failures++;
        }
    }
    printf("%d iterations on %d device(s) at once, %d failures%s\n", iters, nd, failures,
           nd == 1 ? " (two-device parts skipped: one device)" : "");
    for (int d = 0; d < nd; d++) {
        cudaSetDevice(d);
        tc_free(&cs[d]);
    }
    free(rows);
    return failures ? 1 : 0;
}
