// Integer delay line per channel (pygpukit_dsp/stages/delay.py), history kept on the device.
//
// For a block of n samples per channel (row stride `row`), delay d_c <= depth D = max(d):
//     y[c, i]         = i < d_c       ? hist[c, D - d_c + i] : x[c, i - d_c]        i < n
//     hist_next[c, k] = k + n < D     ? hist[c, k + n]       : x[c, k + n - D]      k < D
// One pass writes both; the op then copies hist_next over hist (a captured memcpy), so no
// thread ever reads what another one writes. Grid: x strides over the n + D items of a
// channel (coalesced), y strides over the channels.
#include "gk_common.cuh"

namespace {

template <class T>
__device__ __forceinline__ void delay_line(T* __restrict__ y, T* __restrict__ hist_next,
                                           const T* __restrict__ x, const T* __restrict__ hist,
                                           const long long* __restrict__ delays, gk_size_t channels,
                                           gk_size_t n, gk_size_t depth, gk_size_t row) {
    const gk_size_t span = n + depth;
    for (gk_size_t c = blockIdx.y; c < channels; c += gridDim.y) {
        const gk_size_t d = (gk_size_t)delays[c];
        const T* xc = x + c * row;
        T* yc = y + c * row;
        const T* hc = hist + c * depth;
        T* hn = hist_next + c * depth;
        for (gk_size_t j = gk_thread_index(); j < span; j += gk_grid_stride()) {
            if (j < n) {
                yc[j] = j < d ? hc[depth - d + j] : xc[j - d];
            } else {
                const gk_size_t k = j - n;
                hn[k] = k + n < depth ? hc[k + n] : xc[k + n - depth];
            }
        }
    }
}

}  // namespace

extern "C" __global__ void gk_delay_f32(float* y, float* hist_next, const float* x, const float* hist,
                                        const long long* delays, gk_size_t channels, gk_size_t n,
                                        gk_size_t depth, gk_size_t row) {
    delay_line(y, hist_next, x, hist, delays, channels, n, depth, row);
}

extern "C" __global__ void gk_delay_c64(float2* y, float2* hist_next, const float2* x,
                                        const float2* hist, const long long* delays,
                                        gk_size_t channels, gk_size_t n, gk_size_t depth,
                                        gk_size_t row) {
    delay_line(y, hist_next, x, hist, delays, channels, n, depth, row);
}
