// Small kernels shared by the filtering and spectral ops (fir, sos, fft, stft, resample,
// channelizer): streaming-history updates, zeroing the unused tail of a final block, and the
// scale/copy steps around cuFFT (NumPy's 1/n for the inverse transforms, the Hermitian half of a
// real input's full spectrum).
//
// All arrays are C-contiguous; sizes are element counts (gk_size_t). Grid-stride loops: any grid
// covers any size.
#include "gk_common.cuh"

namespace {

// History after a block: the last `hist` items of [old history | block], per channel.
// dst[c][i] = i + n < hist ? old[c][i + n] : in[c][i + n - hist]  (in has rows of n items).
// dst must not alias old unless n >= hist (then old is never read).
template <class T>
__device__ __forceinline__ void history_update(T* dst, const T* old, const T* in, gk_size_t hist,
                                               gk_size_t n, gk_size_t channels) {
    const gk_size_t total = hist * channels;
    for (gk_size_t idx = gk_thread_index(); idx < total; idx += gk_grid_stride()) {
        const gk_size_t c = idx / hist, i = idx - c * hist;
        const gk_size_t j = i + n;
        dst[idx] = j < hist ? old[c * hist + j] : in[c * n + (j - hist)];
    }
}

}  // namespace

extern "C" __global__ void gk_history_f32(float* dst, const float* old, const float* in,
                                          gk_size_t hist, gk_size_t n, gk_size_t channels) {
    history_update(dst, old, in, hist, n, channels);
}

extern "C" __global__ void gk_history_c64(float2* dst, const float2* old, const float2* in,
                                          gk_size_t hist, gk_size_t n, gk_size_t channels) {
    history_update(dst, old, in, hist, n, channels);
}

// base[r * row_words + w] = 0 for w in [from_word, row_words), every row r < rows.
extern "C" __global__ void gk_zero_tail_u32(unsigned int* base, gk_size_t rows,
                                            gk_size_t row_words, gk_size_t from_word) {
    const gk_size_t width = row_words - from_word;
    const gk_size_t total = width * rows;
    for (gk_size_t idx = gk_thread_index(); idx < total; idx += gk_grid_stride()) {
        const gk_size_t r = idx / width, w = idx - r * width;
        base[r * row_words + from_word + w] = 0u;
    }
}

// y[i] = s * x[i] (complex by real scale); y may equal x.
extern "C" __global__ void gk_scale_c64(float2* y, const float2* x, float s, gk_size_t n) {
    for (gk_size_t i = gk_thread_index(); i < n; i += gk_grid_stride()) {
        const float2 v = x[i];
        y[i] = make_float2(v.x * s, v.y * s);
    }
}

// Input of an inverse real FFT of length n (bins = n/2 + 1 per frame), copied to scratch (C2R
// overwrites its input) and scaled by s = 1/n. NumPy's irfft ignores the imaginary parts of bin 0
// and, for even n, of bin n/2: they are zeroed so that cuFFT sees the same Hermitian input.
extern "C" __global__ void gk_irfft_prepare(float2* dst, const float2* src, float s,
                                            gk_size_t bins, gk_size_t n, gk_size_t total) {
    const bool even = (n & 1) == 0;
    for (gk_size_t i = gk_thread_index(); i < total; i += gk_grid_stride()) {
        const gk_size_t k = i % bins;
        float2 v = src[i];
        v.x *= s;
        v.y *= s;
        if (k == 0 || (even && k == n / 2)) v.y = 0.0f;
        dst[i] = v;
    }
}

// After an R2C into frames of n complex slots (bins 0..n/2 written), fill bins n/2+1 .. n-1 of
// every frame with the Hermitian mirror: X[k] = conj(X[n - k]).
extern "C" __global__ void gk_hermitian_fill(float2* frames, gk_size_t n, gk_size_t count) {
    const gk_size_t half = n / 2 + 1;
    const gk_size_t upper = n - half;  // bins to fill per frame
    if (upper == 0) return;
    const gk_size_t total = upper * count;
    for (gk_size_t idx = gk_thread_index(); idx < total; idx += gk_grid_stride()) {
        const gk_size_t f = idx / upper, k = half + (idx - f * upper);
        const float2 v = frames[f * n + (n - k)];
        frames[f * n + k] = make_float2(v.x, -v.y);
    }
}
