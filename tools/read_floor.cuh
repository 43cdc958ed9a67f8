/*
 * read_floor.cuh -- the floor of SPEC 6: a plain streaming read, grid-stride,
 * one 16-byte evict-first load per thread and iteration, no arithmetic to
 * speak of.  `kvcompress bench` (bench_cuda.cu) times it after every call.
 */
#ifndef KVC_READ_FLOOR_CUH
#define KVC_READ_FLOOR_CUH

__global__ void read_kernel(const float4 *p, size_t n, float *sink) {
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = __ldcs(p + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *sink = acc; /* keeps the loads */
}

#endif
