// Helpers shared by the kernels. Embedded at build time and handed to NVRTC as a header, so a
// kernel file can `#include "gk_common.cuh"`. NVRTC alone compiles these: no CUDA headers.
#pragma once

typedef unsigned long long gk_size_t;

// First index and stride of a 1-D grid-stride loop.
__device__ __forceinline__ gk_size_t gk_thread_index() {
    return (gk_size_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ gk_size_t gk_grid_stride() { return (gk_size_t)gridDim.x * blockDim.x; }

__device__ __forceinline__ bool gk_aligned(const void* p, gk_size_t bytes) {
    return ((gk_size_t)p & (bytes - 1)) == 0;
}

__device__ __forceinline__ float2 gk_cmul(float2 a, float2 b) {
    return make_float2(a.x * b.x - a.y * b.y, a.x * b.y + a.y * b.x);
}

__device__ __forceinline__ float gk_norm2(float2 a) { return a.x * a.x + a.y * a.y; }

// max(scale * log10(|x| / ref), floor_db); NaN stays NaN (like numpy.maximum).
__device__ __forceinline__ float gk_db(float x, float scale, float ref, float floor_db) {
    float v = scale * log10f(fabsf(x) / ref);
    return v < floor_db ? floor_db : v;
}

// cp.async (SM 8.0+): global -> shared memory without a register round trip; src_bytes below the
// copy size zero-fills the rest (samples past the end of a block). Group with commit, wait with
// wait<N> (at most N of the latest groups still pending).
__device__ __forceinline__ unsigned gk_smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void gk_cp_async_16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(gk_smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void gk_cp_async_8(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(gk_smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void gk_cp_async_4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(gk_smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void gk_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void gk_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
