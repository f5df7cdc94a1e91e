// hilbert (pygpukit_dsp/stages/hilbert.py): the analytic signal of a real input,
//     y[n] = x[n - d] + j * sum_k h[k] x[n - k],   L = 2d + 1 taps,
// with the transformer's symmetry used: h[d + m] = -h[d - m] and h = 0 at even m, so
//     imag y[n] = sum_{odd m <= d} h[d + m] * (x[n - d - m] - x[n - d + m])
// ((d + 1) / 2 multiply-adds per output instead of 2L complex ones). odd[j] = h[d + 2j + 1].
//
// A CTA of T = blockDim.x threads computes outputs [n0, n0 + T) of one channel from the window
// w[i] = x[n0 - 2d + i] (i < T + 2d; the history of the last 2d samples before the block, zeros
// past it) staged in shared memory: output t reads w[t + d] and w[t + d -+ m] (consecutive words
// across the CTA: no bank conflicts). Grid (ceil((k_end - k_begin) / T), channels).
#include "gk_common.cuh"

extern "C" __global__ void gk_hilbert(float2* __restrict__ out, const float* __restrict__ in,
                                      const float* __restrict__ hist, const float* __restrict__ odd,
                                      unsigned n, unsigned d, unsigned k_begin, unsigned k_end) {
    extern __shared__ float gk_hilbert_window[];
    const unsigned T = blockDim.x;
    const unsigned n0 = k_begin + blockIdx.x * T;
    const gk_size_t c = blockIdx.y;
    const unsigned hist_len = 2 * d;
    const float* in_row = in + c * n;
    const float* hist_row = hist + c * hist_len;
    const long long first = (long long)n0 - (long long)hist_len;
    const unsigned span = T + hist_len;
    for (unsigned i = threadIdx.x; i < span; i += T) {
        const long long g = first + (long long)i;
        float v = 0.0f;
        if (g >= 0) {
            if (g < (long long)n) v = __ldg(in_row + g);
        } else {
            v = __ldg(hist_row + (hist_len + g));  // g >= -hist_len
        }
        gk_hilbert_window[i] = v;
    }
    __syncthreads();
    const unsigned t = threadIdx.x;
    const unsigned k = n0 + t;
    if (k >= k_end) return;
    const float* w = gk_hilbert_window + t + d;  // w[0] = x[k - d]
    float acc = 0.0f;
    const unsigned pairs = (d + 1) / 2;
    for (unsigned j = 0; j < pairs; ++j) {
        const unsigned m = 2 * j + 1;
        acc = fmaf(__ldg(odd + j), w[-(int)m] - w[m], acc);
    }
    out[c * n + k] = make_float2(w[0], acc);
}
