// Polyphase synthesis filterbank, the inverse of kernels/channelizer.cu (native/ops/synthesizer.cpp;
// pygpukit_dsp/stages/synthesizer.py states the definition). For output channel c and the
// E = T-1 + rows input rows of [history | block]:
//   gk_synth_gather_*   V[e][c][k] = y[c*M + k][e]   (rows e < T-1 from the history)
//   cuFFT               V[e][c][p] = sum_k V[e][c][k] exp(+2 pi i k p / M)   (inverse, unnormalised)
//   gk_synth_branches   out[c][q*M + p] = sum_r G[r][p] V[T-1 + q - r][c][(p + 1) % M]
// with G[r][p] = M * h[T*M - 1 - (r*M + p)] (the reversed, zero-padded prototype, scaled by M).
#include "gk_common.cuh"

namespace {

__device__ __forceinline__ float2 as_c64(float x) { return make_float2(x, 0.0f); }
__device__ __forceinline__ float2 as_c64(float2 x) { return x; }

// grid (ceil(E / 32), ceil(M / 32), C), block (32, 8): a 32 x 32 tile of (k, e) of channel
// blockIdx.z through shared memory; reads along e and writes along k are coalesced.
template <class T>
__device__ __forceinline__ void gather(float2* __restrict__ V, const T* __restrict__ in,
                                       const T* __restrict__ hist, unsigned rows, unsigned hist_len,
                                       unsigned M, unsigned C) {
    __shared__ float2 tile[32][33];
    const unsigned c = blockIdx.z;
    const unsigned e0 = blockIdx.x * 32, k0 = blockIdx.y * 32;
    const unsigned E = hist_len + rows;
    for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
        const unsigned k = k0 + dy, e = e0 + threadIdx.x;
        if (k < M && e < E) {
            const gk_size_t ch = (gk_size_t)c * M + k;
            tile[dy][threadIdx.x] = as_c64(e < hist_len ? hist[ch * hist_len + e]
                                                        : in[ch * rows + (e - hist_len)]);
        }
    }
    __syncthreads();
    for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
        const unsigned e = e0 + dy, k = k0 + threadIdx.x;
        if (k < M && e < E) V[((gk_size_t)e * C + c) * M + k] = tile[threadIdx.x][dy];
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) gk_synth_gather_f32(
    float2* V, const float* in, const float* hist, unsigned rows, unsigned hist_len, unsigned M,
    unsigned C) {
    gather<float>(V, in, hist, rows, hist_len, M, C);
}

extern "C" __global__ void __launch_bounds__(256) gk_synth_gather_c64(
    float2* V, const float2* in, const float2* hist, unsigned rows, unsigned hist_len, unsigned M,
    unsigned C) {
    gather<float2>(V, in, hist, rows, hist_len, M, C);
}

// grid (ceil(rows * M / 256), C), block 256: thread -> output sample q*M + p of channel blockIdx.y.
extern "C" __global__ void gk_synth_branches(float2* out, const float2* V, const float* G,
                                             unsigned rows, unsigned M, unsigned T_, unsigned C) {
    const unsigned idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * M) return;
    const unsigned c = blockIdx.y;
    const unsigned q = idx / M, p = idx % M;
    const unsigned pk = p + 1 == M ? 0 : p + 1;
    float2 acc = make_float2(0.0f, 0.0f);
    for (unsigned r = 0; r < T_; ++r) {
        const float g = __ldg(G + (gk_size_t)r * M + p);
        const float2 v = V[((gk_size_t)(T_ - 1 + q - r) * C + c) * M + pk];
        acc.x = fmaf(g, v.x, acc.x);
        acc.y = fmaf(g, v.y, acc.y);
    }
    out[(gk_size_t)c * rows * M + idx] = acc;
}
