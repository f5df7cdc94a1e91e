// Critically sampled polyphase analysis filterbank (M subchannels, decimation M):
//     y_k[m] = sum_l h[l] exp(+2 pi i k l / M) x[m*M - l]
//            = sum_p exp(+2 pi i k p / M) v[m][p],   v[m][p] = sum_r H[r][p] x[(m - r)*M - p]
// with H[r][p] = h[p + M*r] (T = ceil(L/M) rows). gk_channelizer_branches computes v (complex; the
// imaginary part is zero for real input), cuFFT's unnormalised inverse C2C over p gives y[m][k],
// and gk_channelizer_transpose writes output channel c*M + k. x[c][j] for j < 0 comes from the
// history of earlier blocks (the last T*M samples).
//
// v and y are laid out (rows, channels, M): the rows (output frames) [m_begin, m_end) of every
// channel are contiguous, so a range of rows is one batched FFT (a chunk of the scheduler's
// units); the whole block is the range [0, rows).
#include "gk_common.cuh"

namespace {

__device__ __forceinline__ void madd(float2& acc, float h, float x) { acc.x = fmaf(h, x, acc.x); }
__device__ __forceinline__ void madd(float2& acc, float h, float2 x) {
    acc.x = fmaf(h, x.x, acc.x);
    acc.y = fmaf(h, x.y, acc.y);
}

// grid (ceil((m_end - m_begin) * M / 256), channels): thread -> (m, p) of channel blockIdx.y,
// 32-bit math.
template <class T>
__device__ __forceinline__ void branches(float2* __restrict__ v, const T* __restrict__ in,
                                         const T* __restrict__ hist, const float* __restrict__ H,
                                         unsigned n, unsigned hist_len, unsigned M, unsigned T_,
                                         unsigned channels, unsigned m_begin, unsigned m_end) {
    const unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (m_end - m_begin) * M) return;
    const gk_size_t c = blockIdx.y;
    const unsigned m = m_begin + idx / M, p = idx % M;
    const T* in_row = in + c * n;
    const T* hist_row = hist + c * hist_len;
    float2 acc = make_float2(0.0f, 0.0f);
    for (unsigned r = 0; r < T_; ++r) {
        const long long j = ((long long)m - (long long)r) * (long long)M - (long long)p;
        const T x = j >= 0 ? in_row[j] : hist_row[(long long)hist_len + j];
        madd(acc, __ldg(H + r * M + p), x);
    }
    v[((gk_size_t)m * channels + c) * M + p] = acc;
}

}  // namespace

// grid (ceil((m_end - m_begin) * M / 256), channels), block 256; v: (rows, channels, M)
// complex; H: (T, M) row-major; rows [m_begin, m_end) of v.
extern "C" __global__ void gk_channelizer_branches_f32(float2* v, const float* in, const float* hist,
                                                       const float* H, unsigned n,
                                                       unsigned hist_len, unsigned M, unsigned T_,
                                                       unsigned channels, unsigned m_begin,
                                                       unsigned m_end) {
    branches<float>(v, in, hist, H, n, hist_len, M, T_, channels, m_begin, m_end);
}

extern "C" __global__ void gk_channelizer_branches_c64(float2* v, const float2* in,
                                                       const float2* hist, const float* H,
                                                       unsigned n, unsigned hist_len, unsigned M,
                                                       unsigned T_, unsigned channels,
                                                       unsigned m_begin, unsigned m_end) {
    branches<float2>(v, in, hist, H, n, hist_len, M, T_, channels, m_begin, m_end);
}

// out[(c*M + k) * rows + m] = y[m][c][k] for rows m in [m_begin, m_end); grid
// (ceil((m_end - m_begin) / 32), ceil(M / 32), channels), block (32, 8): a 32 x 32 tile through
// shared memory, so reads and writes are both coalesced.
extern "C" __global__ void __launch_bounds__(256) gk_channelizer_transpose(
    float2* out, const float2* y, unsigned M, unsigned rows, unsigned channels, unsigned m_begin,
    unsigned m_end) {
    __shared__ float2 tile[32][33];
    const gk_size_t c = blockIdx.z;
    const unsigned m0 = m_begin + blockIdx.x * 32, k0 = blockIdx.y * 32;
    const float2* src = y + c * (gk_size_t)M;
    float2* dst = out + c * ((gk_size_t)M * rows);
    const gk_size_t row_stride = (gk_size_t)channels * M;
    for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
        const unsigned m = m0 + dy, k = k0 + threadIdx.x;
        if (m < m_end && k < M) tile[dy][threadIdx.x] = src[(gk_size_t)m * row_stride + k];
    }
    __syncthreads();
    for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
        const unsigned k = k0 + dy, m = m0 + threadIdx.x;
        if (m < m_end && k < M) dst[(gk_size_t)k * rows + m] = tile[threadIdx.x][dy];
    }
}
