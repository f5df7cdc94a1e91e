// Critically sampled polyphase analysis filterbank (M subchannels, decimation M):
//     y_k[m] = sum_l h[l] exp(+2 pi i k l / M) x[m*M - l]
//            = sum_p exp(+2 pi i k p / M) v[m][p],   v[m][p] = sum_r H[r][p] x[(m - r)*M - p]
// with H[r][p] = h[p + M*r] (T = ceil(L/M) rows). gk_channelizer_branches computes v (complex; the
// imaginary part is zero for real input), cuFFT's unnormalised inverse C2C over p gives y[m][k],
// and gk_channelizer_transpose writes output channel c*M + k. x[c][j] for j < 0 comes from the
// history of earlier blocks (the last T*M samples).
#include "gk_common.cuh"

namespace {

__device__ __forceinline__ void madd(float2& acc, float h, float x) { acc.x = fmaf(h, x, acc.x); }
__device__ __forceinline__ void madd(float2& acc, float h, float2 x) {
    acc.x = fmaf(h, x.x, acc.x);
    acc.y = fmaf(h, x.y, acc.y);
}

// grid (ceil(rows * M / 256), channels): thread -> (m, p) of channel blockIdx.y, 32-bit math.
template <class T>
__device__ __forceinline__ void branches(float2* __restrict__ v, const T* __restrict__ in,
                                         const T* __restrict__ hist, const float* __restrict__ H,
                                         unsigned n, unsigned hist_len, unsigned M, unsigned T_,
                                         unsigned rows) {
    const unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * M) return;
    const gk_size_t c = blockIdx.y;
    const unsigned m = idx / M, p = idx - m * M;
    const T* in_row = in + c * n;
    const T* hist_row = hist + c * hist_len;
    float2 acc = make_float2(0.0f, 0.0f);
    for (unsigned r = 0; r < T_; ++r) {
        const long long j = ((long long)m - (long long)r) * (long long)M - (long long)p;
        const T x = j >= 0 ? in_row[j] : hist_row[(long long)hist_len + j];
        madd(acc, __ldg(H + r * M + p), x);
    }
    v[c * ((gk_size_t)rows * M) + idx] = acc;
}

}  // namespace

// grid (ceil(rows * M / 256), channels), block 256; v: (channels, rows, M) complex;
// H: (T, M) row-major.
extern "C" __global__ void gk_channelizer_branches_f32(float2* v, const float* in, const float* hist,
                                                       const float* H, unsigned n,
                                                       unsigned hist_len, unsigned M, unsigned T_,
                                                       unsigned rows) {
    branches<float>(v, in, hist, H, n, hist_len, M, T_, rows);
}

extern "C" __global__ void gk_channelizer_branches_c64(float2* v, const float2* in,
                                                       const float2* hist, const float* H,
                                                       unsigned n, unsigned hist_len, unsigned M,
                                                       unsigned T_, unsigned rows) {
    branches<float2>(v, in, hist, H, n, hist_len, M, T_, rows);
}

// out[(c*M + k) * rows + m] = y[c][m][k]; grid (ceil(rows / 32), ceil(M / 32), channels),
// block (32, 8): a 32 x 32 tile through shared memory, so reads and writes are both coalesced.
extern "C" __global__ void __launch_bounds__(256) gk_channelizer_transpose(
    float2* out, const float2* y, unsigned M, unsigned rows) {
    __shared__ float2 tile[32][33];
    const gk_size_t c = blockIdx.z;
    const unsigned m0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
    const float2* src = y + c * ((gk_size_t)rows * M);
    float2* dst = out + c * ((gk_size_t)M * rows);
    for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
        const unsigned m = m0 + dy, k = k0 + threadIdx.x;
        if (m < rows && k < M) tile[dy][threadIdx.x] = src[(gk_size_t)m * M + k];
    }
    __syncthreads();
    for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
        const unsigned k = k0 + dy, m = m0 + threadIdx.x;
        if (m < rows && k < M) dst[(gk_size_t)k * rows + m] = tile[threadIdx.x][dy];
    }
}
