// Streaming rational resampler (up/down, polyphase), the causal counterpart of
// scipy.signal.resample_poly with the stage's padded filter h (length a multiple of up).
//
// Output k of a block (block-relative; every block starts at phase 0 because the block size is a
// multiple of down):
//     y[c][k] = sum_{l < taps_per_phase} hp[phi][l] * x[c][floor(k*down/up) - l],
//     phi = (k*down) mod up,  hp[phi][l] = h[phi + up*l]
// with x[c][m] for m < 0 taken from the history of earlier blocks (the last hist_len samples,
// hist_len >= taps_per_phase - 1). One thread per output sample: a 2-D grid of
// (output samples, channels).
#include "gk_common.cuh"

namespace {

__device__ __forceinline__ void madd(float& acc, float h, float x) { acc = fmaf(h, x, acc); }
__device__ __forceinline__ void madd(float2& acc, float h, float2 x) {
    acc.x = fmaf(h, x.x, acc.x);
    acc.y = fmaf(h, x.y, acc.y);
}
template <class T> __device__ __forceinline__ T zero();
template <> __device__ __forceinline__ float zero<float>() { return 0.0f; }
template <> __device__ __forceinline__ float2 zero<float2>() { return make_float2(0.0f, 0.0f); }

// Output k = q*up + r (r < up): floor(k*down/up) = q*down + floor(r*down/up), phase
// (r*down) mod up; `steps` holds {phase, floor(r*down/up)} for every r, so the per-sample index
// math is one 32-bit division.
template <class T>
__device__ __forceinline__ void resample(T* __restrict__ out, const T* __restrict__ in,
                                         const T* __restrict__ hist,
                                         const float* __restrict__ phases,
                                         const uint2* __restrict__ steps, unsigned n,
                                         unsigned hist_len, unsigned out_n, unsigned up,
                                         unsigned down, unsigned taps_per_phase, unsigned k_begin,
                                         unsigned k_end) {
    const unsigned k = k_begin + blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= k_end) return;
    const gk_size_t c = blockIdx.y;
    const unsigned q = k / up, r = k - q * up;
    const uint2 step = steps[r];
    const long long base = (long long)q * down + step.y;
    const float* hp = phases + (gk_size_t)step.x * taps_per_phase;
    const T* in_row = in + c * n;
    const T* hist_row = hist + c * hist_len;
    T acc = zero<T>();
    for (unsigned l = 0; l < taps_per_phase; ++l) {
        const long long m = base - (long long)l;
        const T v = m >= 0 ? in_row[m] : hist_row[(long long)hist_len + m];
        madd(acc, __ldg(hp + l), v);
    }
    out[c * out_n + k] = acc;
}

}  // namespace

// grid (ceil((k_end - k_begin) / 256), channels), block 256: outputs [k_begin, k_end) of every
// channel (the whole block: 0, out_n; a range is a chunk of the scheduler's units);
// phases: (up, taps_per_phase) row-major; steps[r] = {(r*down) mod up, floor(r*down/up)} for r < up.
extern "C" __global__ void gk_resample_f32(float* out, const float* in, const float* hist,
                                           const float* phases, const uint2* steps, unsigned n,
                                           unsigned hist_len, unsigned out_n, unsigned up,
                                           unsigned down, unsigned taps_per_phase, unsigned k_begin,
                                           unsigned k_end) {
    resample<float>(out, in, hist, phases, steps, n, hist_len, out_n, up, down, taps_per_phase, k_begin, k_end);
}

extern "C" __global__ void gk_resample_c64(float2* out, const float2* in, const float2* hist,
                                           const float* phases, const uint2* steps, unsigned n,
                                           unsigned hist_len, unsigned out_n, unsigned up,
                                           unsigned down, unsigned taps_per_phase, unsigned k_begin,
                                           unsigned k_end) {
    resample<float2>(out, in, hist, phases, steps, n, hist_len, out_n, up, down, taps_per_phase, k_begin, k_end);
}
