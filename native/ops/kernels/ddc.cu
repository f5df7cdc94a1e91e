// ddc and fir with decimate: the (frequency-translating) decimating FIR, only the kept outputs.
//
// Output k of a block (block_size a multiple of D, so output k sits at the block's sample k*D):
//     y[c][k] = r(n0 + k*D) * sum_{l < L} g[l] * x[c][k*D - l]
// with x[c][m] for m < 0 taken from the history (the last hist_len = L - 1 samples of earlier
// blocks). For fir decimate g = h and r = 1; for ddc (a shift by inc cycles per sample, then h)
// g[l] = h[l] * exp(-2j*pi*inc*l) (made on the host in float64) and r(n) = exp(2j*pi*inc*n)
// from nco.cuh, since sum_l h[l] x[m-l] r(m-l) = r(m) sum_l h[l] r(-l) x[m-l]. One thread per
// output: a 2-D grid of (outputs, channels); taps_row = 0 when every channel shares the taps.
#include "nco.cuh"

namespace {

__device__ __forceinline__ void madd(float& acc, float h, float x) { acc = fmaf(h, x, acc); }
__device__ __forceinline__ void madd(float2& acc, float h, float2 x) {
    acc.x = fmaf(h, x.x, acc.x);
    acc.y = fmaf(h, x.y, acc.y);
}
__device__ __forceinline__ void madd(float2& acc, float2 h, float x) {
    acc.x = fmaf(h.x, x, acc.x);
    acc.y = fmaf(h.y, x, acc.y);
}
__device__ __forceinline__ void madd(float2& acc, float2 h, float2 x) {
    acc.x = fmaf(h.x, x.x, fmaf(-h.y, x.y, acc.x));
    acc.y = fmaf(h.x, x.y, fmaf(h.y, x.x, acc.y));
}
template <class T> __device__ __forceinline__ T zero();
template <> __device__ __forceinline__ float zero<float>() { return 0.0f; }
template <> __device__ __forceinline__ float2 zero<float2>() { return make_float2(0.0f, 0.0f); }

__device__ __forceinline__ float finish(float acc, const unsigned long long*, unsigned long long,
                                        unsigned long long) {
    return acc;
}
__device__ __forceinline__ float2 finish(float2 acc, const unsigned long long* index,
                                         unsigned long long step, unsigned long long at) {
    if (step == 0) return acc;
    return gk_cmul(acc, gk_nco(step, index[0] + at));
}

template <class X, class H, class Y>
__device__ __forceinline__ void ddc(Y* __restrict__ out, const X* __restrict__ in,
                                    const X* __restrict__ hist, const H* __restrict__ taps,
                                    const unsigned long long* __restrict__ index,
                                    unsigned long long step, unsigned n, unsigned out_n,
                                    unsigned L, unsigned D, unsigned taps_row, unsigned k_begin,
                                    unsigned k_end) {
    const unsigned k = k_begin + blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= k_end) return;
    const gk_size_t c = blockIdx.y;
    const unsigned hist_len = L - 1;
    const unsigned base = k * D;  // < n: the kernel's index math is 32-bit (the op checks it)
    const H* h = taps + c * taps_row;
    const X* in_row = in + c * n;
    const X* hist_row = hist + c * hist_len;
    Y acc = zero<Y>();
    const unsigned in_taps = base + 1 < L ? base + 1 : L;  // taps l <= base read the block
    for (unsigned l = 0; l < in_taps; ++l) madd(acc, __ldg(h + l), __ldg(in_row + (base - l)));
    for (unsigned l = in_taps; l < L; ++l)  // base - l < 0: hist_row[hist_len + base - l]
        madd(acc, __ldg(h + l), __ldg(hist_row + (hist_len + base - l)));
    out[c * out_n + k] = finish(acc, index, step, (unsigned long long)base);
}

// The tiled form: a CTA of T threads computes T consecutive outputs [k0, k0 + T) of one channel.
// It stages the input window they read, w[i] = x[k0*D - (L-1) + i] (history before the block,
// zeros past it), in shared memory *by phase*, sh[r][j] = w[j*D + r], J = T + (L-1)/D columns per
// phase (coalesced global loads, once per sample). Output t is
//     sum_{m < L} h[L-1-m] * w[t*D + m] = sum_{q, r: qD + r < L} h[L-1-qD-r] * sh[r][t + q],
// so for every tap the CTA's threads read consecutive words of one row: no bank conflicts, where
// a plain strided read (t*D + m) would serialise on D-way conflicts.
template <class X, class H, class Y>
__device__ __forceinline__ void ddc_tiled(Y* __restrict__ out, const X* __restrict__ in,
                                          const X* __restrict__ hist, const H* __restrict__ taps,
                                          const unsigned long long* __restrict__ index,
                                          unsigned long long step, unsigned n, unsigned out_n,
                                          unsigned L, unsigned D, unsigned taps_row,
                                          unsigned k_begin, unsigned k_end) {
    extern __shared__ __align__(16) unsigned char gk_ddc_smem[];
    X* sh = reinterpret_cast<X*>(gk_ddc_smem);
    const unsigned T = blockDim.x;
    const unsigned J = T + (L - 1) / D;
    const unsigned k0 = k_begin + blockIdx.x * T;
    const gk_size_t c = blockIdx.y;
    const unsigned hist_len = L - 1;
    const X* in_row = in + c * n;
    const X* hist_row = hist + c * hist_len;
    const long long first = (long long)k0 * D - (long long)hist_len;  // w[0]'s stream index in the block
    const unsigned span = J * D;
    for (unsigned i = threadIdx.x; i < span; i += T) {
        const long long g = first + (long long)i;
        X v = zero<X>();
        if (g >= 0) {
            if (g < (long long)n) v = __ldg(in_row + g);
        } else {
            v = __ldg(hist_row + (hist_len + g));  // g >= -hist_len
        }
        const unsigned j = i / D, r = i - j * D;
        sh[(gk_size_t)r * J + j] = v;
    }
    __syncthreads();
    const unsigned t = threadIdx.x;
    const unsigned k = k0 + t;
    if (k >= k_end) return;
    const H* h = taps + c * taps_row;
    Y acc = zero<Y>();
    unsigned m = 0;
    for (unsigned q = 0; m < L; ++q) {
        const X* col = sh + t + q;
        for (unsigned r = 0; r < D && m < L; ++r, ++m) madd(acc, __ldg(h + (L - 1 - m)), col[(gk_size_t)r * J]);
    }
    out[c * out_n + k] = finish(acc, index, step, (unsigned long long)k * D);
}

}  // namespace

// Tiled: grid (ceil((k_end - k_begin) / T), channels), block T, dynamic shared memory
// D * (T + (L-1)/D) samples (the op picks T so that it fits in 48 KiB).
#define GK_DDC_TILED_KERNEL(name, X, H, Y)                                                      \
    extern "C" __global__ void name(Y* out, const X* in, const X* hist, const H* taps,          \
                                    const unsigned long long* index, unsigned long long step,   \
                                    unsigned n, unsigned out_n, unsigned L, unsigned D,         \
                                    unsigned taps_row, unsigned k_begin, unsigned k_end) {      \
        ddc_tiled<X, H, Y>(out, in, hist, taps, index, step, n, out_n, L, D, taps_row, k_begin, \
                           k_end);                                                               \
    }

GK_DDC_TILED_KERNEL(gk_ddc_tiled_rr, float, float, float)
GK_DDC_TILED_KERNEL(gk_ddc_tiled_rc, float, float2, float2)
GK_DDC_TILED_KERNEL(gk_ddc_tiled_cr, float2, float, float2)
GK_DDC_TILED_KERNEL(gk_ddc_tiled_cc, float2, float2, float2)

// Plain (windows too large to stage): grid (ceil((k_end - k_begin) / 256), channels), block 256:
// outputs [k_begin, k_end) of every channel. index: the stream's sample index of the block's
// first input (read only when step != 0).
#define GK_DDC_KERNEL(name, X, H, Y)                                                            \
    extern "C" __global__ void name(Y* out, const X* in, const X* hist, const H* taps,          \
                                    const unsigned long long* index, unsigned long long step,   \
                                    unsigned n, unsigned out_n, unsigned L, unsigned D,         \
                                    unsigned taps_row, unsigned k_begin, unsigned k_end) {      \
        ddc<X, H, Y>(out, in, hist, taps, index, step, n, out_n, L, D, taps_row, k_begin, k_end); \
    }

GK_DDC_KERNEL(gk_ddc_rr, float, float, float)
GK_DDC_KERNEL(gk_ddc_rc, float, float2, float2)
GK_DDC_KERNEL(gk_ddc_cr, float2, float, float2)
GK_DDC_KERNEL(gk_ddc_cc, float2, float2, float2)
