// shift: y[c][i] = x[c][i] * exp(2j*pi*inc*(n0 + i)) (pygpukit_dsp/stages/shift.py), n0 the
// stream's sample index of the block's first sample, kept on the device (nco.cuh).
// Grid (ceil(n / 256) capped, channels capped at 65535), block 256: x strides over a channel's
// samples (coalesced), y over the channels. Real input gives a complex output.
#include "nco.cuh"

namespace {

__device__ __forceinline__ float2 rotate(float x, float2 r) { return make_float2(x * r.x, x * r.y); }
__device__ __forceinline__ float2 rotate(float2 x, float2 r) { return gk_cmul(x, r); }

template <class T>
__device__ __forceinline__ void shift(float2* __restrict__ y, const T* __restrict__ x,
                                      const unsigned long long* __restrict__ index,
                                      unsigned long long step, gk_size_t channels, gk_size_t n) {
    const unsigned long long n0 = index[0];
    for (gk_size_t c = blockIdx.y; c < channels; c += gridDim.y) {
        const T* xc = x + c * n;
        float2* yc = y + c * n;
        for (gk_size_t i = gk_thread_index(); i < n; i += gk_grid_stride())
            yc[i] = rotate(xc[i], gk_nco(step, n0 + i));
    }
}

}  // namespace

extern "C" __global__ void gk_shift_f32(float2* y, const float* x, const unsigned long long* index,
                                        unsigned long long step, gk_size_t channels, gk_size_t n) {
    shift(y, x, index, step, channels, n);
}

extern "C" __global__ void gk_shift_c64(float2* y, const float2* x, const unsigned long long* index,
                                        unsigned long long step, gk_size_t channels, gk_size_t n) {
    shift(y, x, index, step, channels, n);
}
