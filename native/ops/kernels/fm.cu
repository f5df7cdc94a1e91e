// fm_demod (pygpukit_dsp/stages/fm.py): d[n] = gain * angle(x[n] * conj(x[n-1])), x[-1] from the
// previous block (prev: one sample per channel, zero at the stream's start), elementwise over
// the whole GPU (gk_fm_demod_*); optionally de-emphasised after it, in place,
// y[n] = a * y[n-1] + (1 - a) * d[n] (gk_fm_deemphasis), its state (y of the previous block's last
// sample) per channel in `state`.
#include "gk_common.cuh"

namespace {

// angle(cur * conj(prev)) as NumPy computes it: (a + bi)(c - di) = (ac - b(-d)) + (a(-d) + bc)i
// in plain rounded products (no contraction), then atan2, so that even the signed zeros of the
// stream's first sample (prev = 0) give NumPy's angle.
__device__ __forceinline__ float discriminate(float2 cur, float2 prev) {
    const float nd = -prev.y;
    const float re = __fsub_rn(__fmul_rn(cur.x, prev.x), __fmul_rn(cur.y, nd));
    const float im = __fadd_rn(__fmul_rn(cur.x, nd), __fmul_rn(cur.y, prev.x));
    return atan2f(im, re);
}
// A real input: numpy.angle of the real product, atan2(0, cur * prev): pi where it is negative
// (-0 included), else 0.
__device__ __forceinline__ float discriminate(float cur, float prev) {
    return atan2f(0.0f, __fmul_rn(cur, prev));
}

// grid (ceil(n / 256) capped, channels capped at 65535), block 256.
template <class X>
__device__ __forceinline__ void demod(float* __restrict__ y, const X* __restrict__ x,
                                      const X* __restrict__ prev, gk_size_t channels, gk_size_t n,
                                      float gain) {
    for (gk_size_t c = blockIdx.y; c < channels; c += gridDim.y) {
        const X* xc = x + c * n;
        float* yc = y + c * n;
        for (gk_size_t i = gk_thread_index(); i < n; i += gk_grid_stride())
            yc[i] = gain * discriminate(xc[i], i == 0 ? prev[c] : xc[i - 1]);
    }
}

constexpr int kScanThreads = 1024;

// The de-emphasis of d (the discriminator's output, already in y), in place.
// grid (channels), block kScanThreads: one CTA per channel. Thread t takes the contiguous chunk
// [t*K, min(n, (t+1)*K)), K = ceil(n / threads): it runs the recurrence from 0 over its chunk
// (pass 1), the CTA scans the chunks' (a^len, end value) pairs to get each chunk's carry-in,
// and each thread adds a^(i - start + 1) * carry to its outputs (pass 2). The last chunk's end
// becomes the state.
__device__ __forceinline__ void deemphasis(float* __restrict__ y, float* __restrict__ state,
                                           gk_size_t n, float a) {
    __shared__ float scan_m[kScanThreads];
    __shared__ float scan_e[kScanThreads];
    const gk_size_t c = blockIdx.x;
    const int t = threadIdx.x;
    float* yc = y + c * n;
    const float s0 = state[c];
    const float b = 1.0f - a;
    const gk_size_t K = (n + kScanThreads - 1) / kScanThreads;
    gk_size_t i0 = (gk_size_t)t * K, i1 = i0 + K;
    if (i0 > n) i0 = n;
    if (i1 > n) i1 = n;
    float v = 0.0f;
    for (gk_size_t i = i0; i < i1; ++i) {
        v = fmaf(a, v, b * yc[i]);
        yc[i] = v;
    }
    float m = powf(a, (float)(i1 - i0));  // a^0 = 1: an empty chunk passes the state through
    float e = v;
    scan_m[t] = m;
    scan_e[t] = e;
    __syncthreads();
    // inclusive scan: (m, e) after (m', e') earlier = (m * m', m * e' + e)
    for (int off = 1; off < kScanThreads; off <<= 1) {
        float pm = 1.0f, pe = 0.0f;
        if (t >= off) {
            pm = scan_m[t - off];
            pe = scan_e[t - off];
        }
        __syncthreads();
        e = fmaf(m, pe, e);
        m = m * pm;
        scan_m[t] = m;
        scan_e[t] = e;
        __syncthreads();
    }
    float carry = t == 0 ? s0 : fmaf(scan_m[t - 1], s0, scan_e[t - 1]);
    for (gk_size_t i = i0; i < i1; ++i) {
        carry *= a;
        yc[i] += carry;
    }
    if (t == kScanThreads - 1) state[c] = fmaf(m, s0, e);  // every thread read s0 before the scan
}

}  // namespace

extern "C" __global__ void gk_fm_demod_f32(float* y, const float* x, const float* prev,
                                           gk_size_t channels, gk_size_t n, float gain) {
    demod(y, x, prev, channels, n, gain);
}
extern "C" __global__ void gk_fm_demod_c64(float* y, const float2* x, const float2* prev,
                                           gk_size_t channels, gk_size_t n, float gain) {
    demod(y, x, prev, channels, n, gain);
}
// grid (channels), block kScanThreads; after gk_fm_demod_* on the same y.
extern "C" __global__ void __launch_bounds__(kScanThreads) gk_fm_deemphasis(float* y, float* state,
                                                                            gk_size_t n, float a) {
    deemphasis(y, state, n, a);
}
