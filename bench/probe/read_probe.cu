// read_probe.cu -- what a plain streaming read reaches on this GPU at the
// sizes of the benchmark cases, timed as SPEC 6 times a call (L2 flushed by
// writing a 4x-L2 buffer, device events, median), and with the L2 flushed by
// READING a 4x-L2 buffer instead (no dirty lines to write back during the
// timed kernel).  Build: nvcc -O3 -arch=sm_90 read_probe.cu -o read_probe
#include <algorithm>
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>

__global__ void rd(const float4 *p, size_t n, float *sink) {
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = __ldcs(p + i);
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f) *sink = acc;
}
// 4 independent 16-byte loads per thread per iteration
__global__ void rd4(const float4 *p, size_t n, float *sink) {
    float acc = 0.f;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        float4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
        acc += a.x + b.y + c.z + d.w;
    }
    for (; i < n; i += stride) acc += __ldcs(p + i).x;
    if (acc == 1234.5f) *sink = acc;
}

int main() {
    int sms = 132, l2 = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0);
    size_t fl = (size_t)l2 * 4, big = (size_t)2 << 30;
    char *f, *p;
    float *sink;
    cudaMalloc(&f, fl);
    cudaMalloc(&p, big);
    cudaMalloc(&sink, 4);
    cudaMemset(p, 0x3c, big);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    size_t sizes[] = {(size_t)32 << 20, (size_t)128 << 20, (size_t)256 << 20, (size_t)512 << 20, big};
    printf("L2 %d MB, flush buffer %zu MB\n", l2 >> 20, fl >> 20);
    printf("%10s %8s %8s %12s %12s\n", "MB", "kernel", "flush", "median_us", "GB/s");
    for (size_t b : sizes)
        for (int k = 0; k < 2; k++)
            for (int how = 0; how < 2; how++) {
                std::vector<float> t;
                for (int i = -3; i < 50; i++) {
                    if (how == 0) cudaMemsetAsync(f, i & 0xFF, fl);
                    else rd<<<sms * 8, 512>>>((const float4 *)f, fl / 16, sink);
                    cudaEventRecord(e0);
                    if (k == 0) rd<<<sms * 8, 512>>>((const float4 *)p, b / 16, sink);
                    else rd4<<<sms * 4, 512>>>((const float4 *)p, b / 16, sink);
                    cudaEventRecord(e1);
                    cudaEventSynchronize(e1);
                    float ms;
                    cudaEventElapsedTime(&ms, e0, e1);
                    if (i >= 0) t.push_back(ms);
                }
                std::sort(t.begin(), t.end());
                double us = t[t.size() / 2] * 1e3;
                printf("%10zu %8s %8s %12.1f %12.1f\n", b >> 20, k ? "rd4" : "rd", how ? "read" : "write", us, b / us / 1e3);
            }
    return 0;
}
