/*
 * test_no_hooks -- the library users link reads no test variable: with
 * KVC_OPENCL_TRUST_FP=1 set, an OpenCL device that does not report correctly
 * rounded divide / sqrt and denormals (Oclgrind) is still refused with
 * KVC_ERROR_BACKEND_UNAVAILABLE (in the test build of the library that
 * variable skips the check).  Run under Oclgrind by CTest.
 * Exit 0 pass, 1 fail, 77 no OpenCL device or a device that reports both.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvc_kit.h"
#include "kvcompress.h"
#include "kvcompress_rand.h"
#include "test_util.h"

#include <CL/cl.h>

int main(void) {
    cl_command_queue q = (cl_command_queue)kvc_kit_opencl_queue();
    if (!q) {
        printf("SKIP: no OpenCL device\n");
        return TU_SKIP;
    }
    cl_device_id dev;
    clGetCommandQueueInfo(q, CL_QUEUE_DEVICE, sizeof dev, &dev, NULL);
    cl_device_fp_config fp = 0;
    clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    if ((fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) && (fp & CL_FP_DENORM)) {
        printf("SKIP: the device reports both capabilities (run under Oclgrind)\n");
        return TU_SKIP;
    }
    setenv("KVC_OPENCL_TRUST_FP", "1", 1);
    kvc_case c;
    uint8_t *rows = NULL;
    char msg[256];
    if (!tu_case_with_cpu("reqs=1,tokens=256,C=128,block=8", &c, &rows)) return 1;
    kvc_kit_dev_args x;
    if (kvc_kit_upload(&kvc_kit_opencl_mem, &c.args, &x, msg, sizeof msg)) {
        printf("FAIL upload: %s\n", msg);
        return 1;
    }
    kvc_exec ex;
    kvc_exec_init(&ex);
    ex.backend = KVC_BACKEND_OPENCL;
    ex.stream = q;
    const kvc_status st = kvc_compress(&x.d, &ex, NULL);
    clFinish(q);
    const int ok = st == KVC_ERROR_BACKEND_UNAVAILABLE && strstr(kvc_last_error_message(), "lacks");
    printf("%s KVC_OPENCL_TRUST_FP=1 on a device without correct rounding: %s, \"%s\"\n", ok ? "ok  " : "FAIL",
           kvc_status_string(st), kvc_last_error_message());
    kvc_kit_release(&kvc_kit_opencl_mem, &x);
    free(rows);
    kvc_case_free(&c);
    return ok ? 0 : 1;
}
