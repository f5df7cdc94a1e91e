// Streaming FIR filter: y[c][n] = sum_k h[k] x[c][n - k], with the input history of earlier blocks
// kept on the device (hist[c][i] = x[c][i - hist_len], the last hist_len samples).
//
// Two strategies (the op picks one with the cost rule in pygpukit_dsp/backends/cuda_ops/fir.py):
//
// * Direct form (gk_fir_direct_*): one CTA of 128 threads computes TILE_OUT = 64 consecutive
//   outputs of one channel. The taps are walked in stages of KT taps (KT = 32 or 128; the device
//   taps are zero-padded to a multiple of KT, and the history holds that many samples). Each stage's
//   taps and its input window x[t0 - k0 - KT .. t0 - k0 + TILE_OUT) are copied into shared memory
//   with cp.async, double-buffered: stage s+1 is in flight while stage s is computed. Thread
//   (og = tid % 16, ks = tid / 16) owns outputs t0 + 4*og .. +3 and the tap slice
//   [ks * KT/8, (ks+1) * KT/8) of every stage; it slides an 8-sample register window over its
//   taps four at a time (one 16-byte shared load of x and one of h per 16 multiply-adds). The 8
//   slices are summed through shared memory at the end. The history is double-buffered on the
//   device: a launch reads one copy and its CTAs write the next into the other (no separate
//   update launch, which matters for the W1 round trip); the last CTA flips a device phase flag.
//
// * Overlap-save through cuFFT (gk_ols_*): frames of nfft samples hop by `step` = nfft - L + 1; the
//   op transforms them, multiplies by the taps' spectrum (already scaled by 1/nfft), transforms
//   back and keeps the last `step` samples of each frame.
#include "gk_common.cuh"

namespace {

// ---------------------------------------------------------------------------------------------
// complex helpers and the multiply-accumulate for each (input, taps) type pair

__device__ __forceinline__ void mac(float& acc, float h, float x) { acc = fmaf(h, x, acc); }
__device__ __forceinline__ void mac(float2& acc, float h, float2 x) {
    acc.x = fmaf(h, x.x, acc.x);
    acc.y = fmaf(h, x.y, acc.y);
}
__device__ __forceinline__ void mac(float2& acc, float2 h, float x) {
    acc.x = fmaf(h.x, x, acc.x);
    acc.y = fmaf(h.y, x, acc.y);
}
__device__ __forceinline__ void mac(float2& acc, float2 h, float2 x) {
    acc.x = fmaf(h.x, x.x, acc.x);
    acc.x = fmaf(-h.y, x.y, acc.x);
    acc.y = fmaf(h.x, x.y, acc.y);
    acc.y = fmaf(h.y, x.x, acc.y);
}

__device__ __forceinline__ void add_to(float& a, float b) { a += b; }
__device__ __forceinline__ void add_to(float2& a, float2 b) {
    a.x += b.x;
    a.y += b.y;
}

template <class T> __device__ __forceinline__ T zero_of();
template <> __device__ __forceinline__ float zero_of<float>() { return 0.0f; }
template <> __device__ __forceinline__ float2 zero_of<float2>() { return make_float2(0.0f, 0.0f); }

// The output type of (input, taps): complex if either is.
template <class A, class B> struct Promote { typedef float2 type; };
template <> struct Promote<float, float> { typedef float type; };

// Four consecutive values from 16-byte aligned shared memory.
__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
}
__device__ __forceinline__ void load4(const float2* p, float2 (&v)[4]) {
    const float4 a = *reinterpret_cast<const float4*>(p);
    const float4 b = *reinterpret_cast<const float4*>(p + 2);
    v[0] = make_float2(a.x, a.y);
    v[1] = make_float2(a.z, a.w);
    v[2] = make_float2(b.x, b.y);
    v[3] = make_float2(b.z, b.w);
}

// ---------------------------------------------------------------------------------------------
// cp.async (gk_common.cuh) of one element of either sample type.

__device__ __forceinline__ void cp_async_elem(float* dst, const float* src, int src_bytes) {
    gk_cp_async_4(dst, src, src_bytes);
}
__device__ __forceinline__ void cp_async_elem(float2* dst, const float2* src, int src_bytes) {
    gk_cp_async_8(dst, src, src_bytes);
}

constexpr int TILE_OUT = 64;   // outputs per CTA
constexpr int THREADS = 128;   // 16 output groups of 4 x 8 tap slices
constexpr int KSPLIT = 8;

template <class TX, class TH, int KT>
struct DirectSmem {
    typedef typename Promote<TX, TH>::type TY;
    // Double-buffered stage: taps [KT] and the window [TILE_OUT + KT]; 16-byte aligned rows.
    __align__(16) TH taps[2][KT];
    __align__(16) TX window[2][TILE_OUT + KT];
    TY partial[KSPLIT][TILE_OUT];
};

// Queue the copies of stage `stage` (taps k0 = stage*KT ...) into buffer `b`.
template <class TX, class TH, int KT>
__device__ __forceinline__ void load_stage(DirectSmem<TX, TH, KT>& sm, int b, int stage,
                                           const TX* __restrict__ in_row,
                                           const TX* __restrict__ hist_row,
                                           const TH* __restrict__ taps_row, long long t0,
                                           long long n, long long hist_len, bool vec_in) {
    const int tid = threadIdx.x;
    const long long k0 = (long long)stage * KT;
    // taps: KT * sizeof(TH) bytes in 16-byte chunks (the device taps are padded and aligned)
    constexpr int TAP_CHUNKS = KT * (int)sizeof(TH) / 16;
    constexpr int TAP_PER_CHUNK = 16 / (int)sizeof(TH);
    for (int q = tid; q < TAP_CHUNKS; q += THREADS)
        gk_cp_async_16(&sm.taps[b][q * TAP_PER_CHUNK], taps_row + k0 + q * TAP_PER_CHUNK, 16);
    // window: x[first + j], j < TILE_OUT + KT, first = t0 - k0 - KT (a multiple of 4)
    const long long first = t0 - k0 - KT;
    constexpr int WIN = TILE_OUT + KT;
    constexpr int E = 16 / (int)sizeof(TX);  // samples per 16-byte chunk
    if (vec_in) {
        for (int q = tid; q < WIN / E; q += THREADS) {
            const long long m = first + (long long)q * E;
            TX* dst = &sm.window[b][q * E];
            if (m < 0) {
                gk_cp_async_16(dst, hist_row + (hist_len + m), 16);  // history (whole chunk: 0 is a chunk edge)
            } else {
                const long long left = n - m;  // samples of the block from m on
                const int bytes = left >= E ? 16 : (left > 0 ? (int)(left * sizeof(TX)) : 0);
                gk_cp_async_16(dst, bytes > 0 ? (const void*)(in_row + m) : (const void*)in_row, bytes);
            }
        }
    } else {
        // Rows of the block are not 16-byte aligned: copy sample by sample.
        for (int j = tid; j < WIN; j += THREADS) {
            const long long m = first + j;
            TX* dst = &sm.window[b][j];
            if (m < 0) {
                cp_async_elem(dst, hist_row + (hist_len + m), (int)sizeof(TX));
            } else {
                const bool ok = m < n;
                cp_async_elem(dst, ok ? in_row + m : in_row, ok ? (int)sizeof(TX) : 0);
            }
        }
    }
}

// RANGED (one unit of a chunked block, Op::enqueue_units): the launch covers channels
// c0 .. c0 + gridDim.y - 1 of `channels`, and the phase flips when `arrivals` CTAs (the whole
// block's, counted over the block's launches) have finished. Without RANGED: c0 = 0, channels =
// gridDim.y, arrivals = the launch's CTAs, i.e. the full block's code, unchanged.
template <class TX, class TH, int KT, bool RANGED>
__device__ __forceinline__ void fir_direct(typename Promote<TX, TH>::type* __restrict__ out,
                                           const TX* __restrict__ in, TX* __restrict__ hist2,
                                           unsigned* __restrict__ sync,
                                           const TH* __restrict__ taps, gk_size_t n,
                                           gk_size_t hist_len, gk_size_t tap_row, int stages,
                                           gk_size_t c0, gk_size_t channels, unsigned arrivals) {
    typedef typename Promote<TX, TH>::type TY;
    constexpr int SLICE = KT / KSPLIT;  // taps per thread per stage
    constexpr int GROUPS = SLICE / 4;
    __shared__ DirectSmem<TX, TH, KT> sm;

    const int tid = threadIdx.x;
    const int og = tid % 16, ks = tid / 16;
    const long long c = RANGED ? (long long)(c0 + blockIdx.y) : (long long)blockIdx.y;
    const long long t0 = (long long)blockIdx.x * TILE_OUT;
    // Ping-pong history: this block reads history `phase` and writes the next one into the other
    // buffer; the last CTA to finish flips the phase for the next launch (see the end).
    const unsigned phase = *reinterpret_cast<volatile unsigned*>(sync);
    const gk_size_t hist_size = hist_len * (RANGED ? channels : (gk_size_t)gridDim.y);
    const TX* hist = hist2 + (gk_size_t)phase * hist_size;
    TX* next_hist = hist2 + (gk_size_t)(phase ^ 1u) * hist_size;
    const TX* in_row = in + c * (long long)n;
    const TX* hist_row = hist + c * (long long)hist_len;
    const TH* taps_row = taps + c * (long long)tap_row;
    const bool vec_in = ((n * sizeof(TX)) % 16 == 0) && gk_aligned(in, 16);

    TY acc[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[j] = zero_of<TY>();

    load_stage<TX, TH, KT>(sm, 0, 0, in_row, hist_row, taps_row, t0, (long long)n,
                           (long long)hist_len, vec_in);
    gk_cp_async_commit();
    for (int s = 0; s < stages; ++s) {
        const int b = s & 1;
        if (s + 1 < stages) {
            load_stage<TX, TH, KT>(sm, b ^ 1, s + 1, in_row, hist_row, taps_row, t0, (long long)n,
                                   (long long)hist_len, vec_in);
            gk_cp_async_commit();
            gk_cp_async_wait<1>();
        } else {
            gk_cp_async_wait<0>();
        }
        __syncthreads();
        const TX* xw = sm.window[b];
        const TH* hs = sm.taps[b];
        const int kbase = ks * SLICE;
        // w[m] = x[n0 - kg - 4 + m] with n0 = t0 + 4*og, kg = k0 + kbase + 4g; window index of
        // x[n0 - kg] is 4*og - kbase - 4g + KT.
        TX cur[4];
        load4(xw + (4 * og - kbase + KT), cur);
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            TX prev[4];
            TH h[4];
            load4(xw + (4 * og - kbase - 4 * g + KT - 4), prev);
            load4(hs + (kbase + 4 * g), h);
            TX w[8] = {prev[0], prev[1], prev[2], prev[3], cur[0], cur[1], cur[2], cur[3]};
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) mac(acc[j], h[i], w[4 + j - i]);
#pragma unroll
            for (int i = 0; i < 4; ++i) cur[i] = prev[i];
        }
        __syncthreads();  // buffer b is refilled by the copies queued in the next iteration
    }

#pragma unroll
    for (int j = 0; j < 4; ++j) sm.partial[ks][4 * og + j] = acc[j];
    __syncthreads();
    if (tid < TILE_OUT) {
        TY sum = sm.partial[0][tid];
#pragma unroll
        for (int k = 1; k < KSPLIT; ++k) add_to(sum, sm.partial[k][tid]);
        const long long t = t0 + tid;
        if (t < (long long)n) out[c * (long long)n + t] = sum;
    }

    // This CTA's share of the next history: the last hist_len samples of [history | block].
    const gk_size_t share_begin = hist_len * blockIdx.x / gridDim.x;
    const gk_size_t share_end = hist_len * (blockIdx.x + 1) / gridDim.x;
    for (gk_size_t i = share_begin + tid; i < share_end; i += THREADS) {
        const gk_size_t j = i + n;
        next_hist[c * hist_len + i] = j < hist_len ? hist_row[j] : in_row[j - hist_len];
    }
    // Every CTA read `phase` before it got here: the last one to arrive flips it (and rearms the
    // counter) for the next launch; kernel boundaries order all of this with the next block.
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        const unsigned total = RANGED ? arrivals : gridDim.x * gridDim.y;
        if (atomicAdd(sync + 1, 1u) == total - 1u) {
            sync[1] = 0u;
            sync[0] = phase ^ 1u;
            __threadfence();
        }
    }
}

}  // namespace

#define GK_FIR_DIRECT(NAME, TX, TH, KT)                                                          \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME(                                  \
        Promote<TX, TH>::type* out, const TX* in, TX* hist2, unsigned* sync, const TH* taps,     \
        gk_size_t n, gk_size_t hist_len, gk_size_t tap_row, int stages) {                        \
        fir_direct<TX, TH, KT, false>(out, in, hist2, sync, taps, n, hist_len, tap_row, stages,  \
                                      0, 0, 0u);                                                 \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME##_ch(                             \
        Promote<TX, TH>::type* out, const TX* in, TX* hist2, unsigned* sync, const TH* taps,     \
        gk_size_t n, gk_size_t hist_len, gk_size_t tap_row, int stages, gk_size_t c0,            \
        gk_size_t channels, unsigned arrivals) {                                                 \
        fir_direct<TX, TH, KT, true>(out, in, hist2, sync, taps, n, hist_len, tap_row, stages,   \
                                     c0, channels, arrivals);                                    \
    }

// grid (ceil(n / 64), channels), block 128; hist_len = taps padded to a multiple of KT;
// tap_row = that padded length for per-channel taps, 0 for shared taps; stages = padded / KT.
// hist2: two histories of (channels, hist_len), zero at the start; sync: {phase, counter},
// zero at the start. Each launch reads history[phase], writes history[phase ^ 1] and flips
// the phase when its last CTA finishes: no separate history-update launch, no race.
// <name>_ch: one unit of a chunked block, grid (ceil(n / 64), unit channels): channels c0 ..;
// `channels` = all of them (history layout), `arrivals` = ceil(n / 64) * channels (the CTAs of
// the whole block): the last CTA of the block's last unit flips the phase, so every unit reads
// the same history and writes its channels' share of the next one.
GK_FIR_DIRECT(gk_fir_direct_rr_k32, float, float, 32)
GK_FIR_DIRECT(gk_fir_direct_rr_k128, float, float, 128)
GK_FIR_DIRECT(gk_fir_direct_rc_k32, float, float2, 32)
GK_FIR_DIRECT(gk_fir_direct_rc_k128, float, float2, 128)
GK_FIR_DIRECT(gk_fir_direct_cr_k32, float2, float, 32)
GK_FIR_DIRECT(gk_fir_direct_cr_k128, float2, float, 128)
GK_FIR_DIRECT(gk_fir_direct_cc_k32, float2, float2, 32)
GK_FIR_DIRECT(gk_fir_direct_cc_k128, float2, float2, 128)

// ---------------------------------------------------------------------------------------------
// Overlap-save

namespace {

template <class TF, class TX> __device__ __forceinline__ TF to_frame(TX v);
template <> __device__ __forceinline__ float to_frame<float, float>(float v) { return v; }
template <> __device__ __forceinline__ float2 to_frame<float2, float>(float v) {
    return make_float2(v, 0.0f);
}
template <> __device__ __forceinline__ float2 to_frame<float2, float2>(float2 v) { return v; }

// frames[c][f][i] = x[c][f*step - hist_len + i] (history before 0, zeros past n), i < nfft.
// One CTA per frame row (c, f).
template <class TX, class TF>
__device__ __forceinline__ void ols_frames(TF* __restrict__ frames, const TX* __restrict__ in,
                                           const TX* __restrict__ hist, gk_size_t n,
                                           gk_size_t hist_len, gk_size_t nfft, gk_size_t step,
                                           gk_size_t nframes) {
    const gk_size_t row = blockIdx.x;
    const gk_size_t c = row / nframes, f = row - c * nframes;
    const long long start = (long long)(f * step) - (long long)hist_len;
    const TX* in_row = in + c * n;
    const TX* hist_row = hist + c * hist_len;
    TF* dst = frames + row * nfft;
    for (gk_size_t i = threadIdx.x; i < nfft; i += blockDim.x) {
        const long long m = start + (long long)i;
        TX v;
        if (m < 0)
            v = hist_row[(long long)hist_len + m];
        else if (m < (long long)n)
            v = in_row[m];
        else
            v = zero_of<TX>();
        dst[i] = to_frame<TF, TX>(v);
    }
}

// y[c][f*step + j] = frames[c][f][hist_len + j] for j < step, f*step + j < n. CTA (f, c).
template <class TY>
__device__ __forceinline__ void ols_output(TY* __restrict__ out, const TY* __restrict__ frames,
                                           gk_size_t n, gk_size_t hist_len, gk_size_t nfft,
                                           gk_size_t step, gk_size_t nframes) {
    const gk_size_t f = blockIdx.x, c = blockIdx.y;
    const TY* src = frames + (c * nframes + f) * nfft + hist_len;
    TY* dst = out + c * n + f * step;
    const gk_size_t count = (f + 1) * step <= n ? step : n - f * step;
    for (gk_size_t j = threadIdx.x; j < count; j += blockDim.x) dst[j] = src[j];
}

}  // namespace

// grid channels * nframes, block 256.
extern "C" __global__ void gk_ols_frames_rr(float* frames, const float* in, const float* hist,
                                            gk_size_t n, gk_size_t hist_len, gk_size_t nfft,
                                            gk_size_t step, gk_size_t nframes) {
    ols_frames<float, float>(frames, in, hist, n, hist_len, nfft, step, nframes);
}
extern "C" __global__ void gk_ols_frames_rc(float2* frames, const float* in, const float* hist,
                                            gk_size_t n, gk_size_t hist_len, gk_size_t nfft,
                                            gk_size_t step, gk_size_t nframes) {
    ols_frames<float, float2>(frames, in, hist, n, hist_len, nfft, step, nframes);
}
extern "C" __global__ void gk_ols_frames_cc(float2* frames, const float2* in, const float2* hist,
                                            gk_size_t n, gk_size_t hist_len, gk_size_t nfft,
                                            gk_size_t step, gk_size_t nframes) {
    ols_frames<float2, float2>(frames, in, hist, n, hist_len, nfft, step, nframes);
}

// spectra[row][b] *= h[hr][b], row = c * nframes + f; hr = c for per-channel taps (h_rows > 1),
// else 0. grid rows (one CTA per frame spectrum), block 256.
extern "C" __global__ void gk_ols_multiply(float2* spectra, const float2* h, gk_size_t bins,
                                           gk_size_t nframes, gk_size_t h_rows) {
    const gk_size_t row = blockIdx.x;
    const gk_size_t hr = h_rows == 1 ? 0 : row / nframes;
    float2* x = spectra + row * bins;
    const float2* hrow = h + hr * bins;
    for (gk_size_t b = threadIdx.x; b < bins; b += blockDim.x) x[b] = gk_cmul(x[b], hrow[b]);
}

// grid (nframes, channels), block 256.
extern "C" __global__ void gk_ols_output_r(float* out, const float* frames, gk_size_t n,
                                           gk_size_t hist_len, gk_size_t nfft, gk_size_t step,
                                           gk_size_t nframes) {
    ols_output<float>(out, frames, n, hist_len, nfft, step, nframes);
}
extern "C" __global__ void gk_ols_output_c(float2* out, const float2* frames, gk_size_t n,
                                           gk_size_t hist_len, gk_size_t nfft, gk_size_t step,
                                           gk_size_t nframes) {
    ols_output<float2>(out, frames, n, hist_len, nfft, step, nframes);
}
