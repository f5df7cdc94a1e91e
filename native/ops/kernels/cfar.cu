// Cell-averaging CFAR (pygpukit_dsp/stages/cfar.py states the definition). Power P = x (real)
// or |x|^2 (complex); for each cell the noise sum is taken over `train` cells on each side beyond
// `guard` guard cells; threshold = coef * sum (coef = alpha / N, from the lowering); the output is
// the threshold, or 1.0 where P(cell) > threshold else 0.0.
#include "gk_common.cuh"

namespace {

__device__ __forceinline__ float power_of(float x) { return x; }
__device__ __forceinline__ float power_of(float2 x) { return gk_norm2(x); }

// Along time, channel blockIdx.y, outputs [blockIdx.x * blockDim.x, +blockDim.x) of a block of
// n samples. Output i is for the cell i - D (D = guard + train): its window is the samples
// [i - 2D, i], i.e. indices [i, i + 2D] of [history (2D samples) | block]. The block's window,
// blockDim.x + 2D powers, is staged in shared memory (dynamic, (blockDim.x + 2D) floats).
template <class T>
__device__ __forceinline__ void cfar_time(float* __restrict__ out, const T* __restrict__ in,
                                          const T* __restrict__ hist, unsigned n, unsigned D,
                                          unsigned guard, unsigned train, float coef, int mask) {
    extern __shared__ float window[];
    const gk_size_t c = blockIdx.y;
    const unsigned i0 = blockIdx.x * blockDim.x;
    const unsigned span = blockDim.x + 2u * D;
    const T* in_row = in + c * n;
    const T* hist_row = hist + c * (gk_size_t)(2u * D);
    for (unsigned e = threadIdx.x; e < span; e += blockDim.x) {
        const unsigned g = i0 + e;  // index in [history | block]
        float p = 0.0f;
        if (g < 2u * D)
            p = power_of(hist_row[g]);
        else if (g - 2u * D < n)
            p = power_of(in_row[g - 2u * D]);
        window[e] = p;
    }
    __syncthreads();
    const unsigned i = i0 + threadIdx.x;
    if (i >= n) return;
    const float* w = window + threadIdx.x;
    float left = 0.0f, right = 0.0f;
    const float* r = w + D + guard + 1u;
    for (unsigned k = 0; k < train; ++k) {
        left += w[k];
        right += r[k];
    }
    const float thr = coef * (left + right);
    out[c * n + i] = mask ? (w[D] > thr ? 1.0f : 0.0f) : thr;
}

// Along the bins of each frame: row blockIdx.x of rows = channels * frames, bins cells; a cell b
// sums its training cells inside [0, bins); coef[b] = alpha_b / N_b.
template <class T>
__device__ __forceinline__ void cfar_bins(float* __restrict__ out, const T* __restrict__ in,
                                          const float* __restrict__ coef, unsigned bins,
                                          unsigned guard, unsigned train, int mask) {
    const gk_size_t row = blockIdx.x;
    const T* x = in + row * bins;
    const int D = (int)(guard + train), G = (int)guard, B = (int)bins;
    for (int b = threadIdx.x; b < B; b += blockDim.x) {
        const int l_lo = max(b - D, 0), l_hi = max(b - G, 0);
        const int r_lo = min(b + G + 1, B), r_hi = min(b + D + 1, B);
        float sum = 0.0f;
        for (int k = l_lo; k < l_hi; ++k) sum += power_of(x[k]);
        for (int k = r_lo; k < r_hi; ++k) sum += power_of(x[k]);
        const float thr = __ldg(coef + b) * sum;
        out[row * bins + b] = mask ? (power_of(x[b]) > thr ? 1.0f : 0.0f) : thr;
    }
}

}  // namespace

// grid (ceil(n / 256), channels), block 256, dynamic shared memory (256 + 2D) * 4 bytes;
// hist: (channels, 2D) of the input's dtype.
extern "C" __global__ void gk_cfar_time_f32(float* out, const float* in, const float* hist,
                                            unsigned n, unsigned D, unsigned guard,
                                            unsigned train, float coef, int mask) {
    cfar_time<float>(out, in, hist, n, D, guard, train, coef, mask);
}

extern "C" __global__ void gk_cfar_time_c64(float* out, const float2* in, const float2* hist,
                                            unsigned n, unsigned D, unsigned guard,
                                            unsigned train, float coef, int mask) {
    cfar_time<float2>(out, in, hist, n, D, guard, train, coef, mask);
}

// grid (channels * frames), block 256.
extern "C" __global__ void gk_cfar_bins_f32(float* out, const float* in, const float* coef,
                                            unsigned bins, unsigned guard, unsigned train,
                                            int mask) {
    cfar_bins<float>(out, in, coef, bins, guard, train, mask);
}

extern "C" __global__ void gk_cfar_bins_c64(float* out, const float2* in, const float* coef,
                                            unsigned bins, unsigned guard, unsigned train,
                                            int mask) {
    cfar_bins<float2>(out, in, coef, bins, guard, train, mask);
}
