// Causal streaming STFT, and the fused stft -> power -> average op of workload W2.
//
// gk_stft_frames_*: frames[c][k][i] = w[i] * x[c][k*hop + hop - nfft + i] (the history of the
// previous blocks before sample 0), the window applied while framing; cuFFT then transforms the
// frames (R2C for real input, C2C for complex).
//
// gk_stft_pa_<NFFT> (NFFT = 256 ... 4096, a power of two): for complex input with hop == nfft,
// computes mean_f |FFT(w * frame_f)|^2 over groups of `avg` frames without writing the spectra:
//   * a CTA of 256 threads owns a run of frames of one averaging group and loops over them;
//     for NFFT < 4096 it transforms B = 4096/NFFT frames at once (NFFT/16 threads per frame);
//   * each thread loads 16 samples of its frame (x[tl + 16*r... see below]) straight from global
//     memory, multiplied by the window (kept in registers), and the FFT runs as Stockham passes:
//     radix 16 (span 1), radix 16 (span 16), and for NFFT > 256 a last pass of radix NFFT/256
//     (span 256), with the data exchanged through shared memory (padded: index i -> i + i/16,
//     so the strided writes hit distinct banks) and twiddles from sincospif'd bases raised to
//     powers by multiplication;
//   * the last pass leaves bin j + span*r in the thread's registers: |X|^2 is accumulated there
//     in float32 for every frame of the run, then the slots' sums are combined through shared
//     memory and written as one partial spectrum per CTA;
//   * gk_stft_pa_reduce adds the partials of each group in float64 and divides by the number of
//     frames of the group (fewer for the last group of a final block).
// Stockham pass (radix R, span Ns, N points, butterfly j < N/R):
//   a[r] = data[j + r*N/R] * exp(-2 pi i (j mod Ns) r / (Ns R)); A = DFT_R(a);
//   out[(j / Ns) * Ns * R + (j mod Ns) + r * Ns] = A[r]
#include "gk_common.cuh"

namespace {

__device__ __forceinline__ float2 cadd(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ __forceinline__ float2 csub(float2 a, float2 b) { return make_float2(a.x - b.x, a.y - b.y); }
// a * (-i) and a * (+i)
__device__ __forceinline__ float2 mul_mi(float2 a) { return make_float2(a.y, -a.x); }
__device__ __forceinline__ float2 mul_pi(float2 a) { return make_float2(-a.y, a.x); }
__device__ __forceinline__ float2 cmulc(float2 a, float re, float im) {
    return make_float2(a.x * re - a.y * im, a.x * im + a.y * re);
}

// Forward DFTs (exp(-2 pi i n k / R)), in place on registers a[0..R-1], natural order out.
__device__ __forceinline__ void dft2(float2& a, float2& b) {
    const float2 t = a;
    a = cadd(t, b);
    b = csub(t, b);
}

__device__ __forceinline__ void dft4(float2& x0, float2& x1, float2& x2, float2& x3) {
    const float2 A = cadd(x0, x2), B = csub(x0, x2), C = cadd(x1, x3), D = csub(x1, x3);
    x0 = cadd(A, C);
    x2 = csub(A, C);
    x1 = cadd(B, mul_mi(D));
    x3 = cadd(B, mul_pi(D));
}

constexpr float kC1 = 0.923879532511286756f;  // cos(pi/8)
constexpr float kS1 = 0.382683432365089772f;  // sin(pi/8)
constexpr float kH = 0.707106781186547524f;   // sqrt(1/2)

// 8 = 2 x 4: n = 4 n1 + n2, k = k1 + 2 k2.
__device__ __forceinline__ void dft8(float2 (&a)[8]) {
#pragma unroll
    for (int n2 = 0; n2 < 4; ++n2) dft2(a[n2], a[4 + n2]);  // y[n2][k1] in a[n2 + 4*k1]
    a[5] = cmulc(a[5], kH, -kH);   // W8^1
    a[6] = mul_mi(a[6]);           // W8^2
    a[7] = cmulc(a[7], -kH, -kH);  // W8^3
    float2 y[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = a[i];
#pragma unroll
    for (int k1 = 0; k1 < 2; ++k1) {
        float2 b0 = y[0 + 4 * k1], b1 = y[1 + 4 * k1], b2 = y[2 + 4 * k1], b3 = y[3 + 4 * k1];
        dft4(b0, b1, b2, b3);
        a[k1] = b0;
        a[k1 + 2] = b1;
        a[k1 + 4] = b2;
        a[k1 + 6] = b3;
    }
}

// 16 = 4 x 4: n = 4 n1 + n2, k = k1 + 4 k2.
__device__ __forceinline__ void dft16(float2 (&a)[16]) {
#pragma unroll
    for (int n2 = 0; n2 < 4; ++n2) dft4(a[n2], a[4 + n2], a[8 + n2], a[12 + n2]);
    // now a[n2 + 4*k1] = y[n2][k1]; twiddle by W16^(n2*k1)
    a[5] = cmulc(a[5], kC1, -kS1);    // n2=1,k1=1: W^1
    a[9] = cmulc(a[9], kH, -kH);      // n2=1,k1=2: W^2
    a[13] = cmulc(a[13], kS1, -kC1);  // n2=1,k1=3: W^3
    a[6] = cmulc(a[6], kH, -kH);      // n2=2,k1=1: W^2
    a[10] = mul_mi(a[10]);            // n2=2,k1=2: W^4
    a[14] = cmulc(a[14], -kH, -kH);   // n2=2,k1=3: W^6
    a[7] = cmulc(a[7], kS1, -kC1);    // n2=3,k1=1: W^3
    a[11] = cmulc(a[11], -kH, -kH);   // n2=3,k1=2: W^6
    a[15] = cmulc(a[15], -kC1, kS1);  // n2=3,k1=3: W^9
    float2 y[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) y[i] = a[i];
#pragma unroll
    for (int k1 = 0; k1 < 4; ++k1) {
        float2 b0 = y[0 + 4 * k1], b1 = y[1 + 4 * k1], b2 = y[2 + 4 * k1], b3 = y[3 + 4 * k1];
        dft4(b0, b1, b2, b3);
        a[k1] = b0;
        a[k1 + 4] = b1;
        a[k1 + 8] = b2;
        a[k1 + 12] = b3;
    }
}

template <int R>
__device__ __forceinline__ void dft_r(float2 (&a)[R]);
template <> __device__ __forceinline__ void dft_r<2>(float2 (&a)[2]) { dft2(a[0], a[1]); }
template <> __device__ __forceinline__ void dft_r<4>(float2 (&a)[4]) { dft4(a[0], a[1], a[2], a[3]); }
template <> __device__ __forceinline__ void dft_r<8>(float2 (&a)[8]) { dft8(a); }
template <> __device__ __forceinline__ void dft_r<16>(float2 (&a)[16]) { dft16(a); }

// a[r] *= w^r for r = 1..R-1
template <int R>
__device__ __forceinline__ void twiddle(float2 (&a)[R], float2 w) {
    float2 t = w;
#pragma unroll
    for (int r = 1; r < R; ++r) {
        a[r] = gk_cmul(a[r], t);
        if (r + 1 < R) t = gk_cmul(t, w);
    }
}

__device__ __forceinline__ float2 unit(float half_turns) {  // exp(i * pi * half_turns)
    float s, c;
    sincospif(half_turns, &s, &c);
    return make_float2(c, s);
}

__device__ __forceinline__ int pad(int i) { return i + (i >> 4); }

constexpr int PA_THREADS = 256;

// STEPS (chunked blocks, Op::enqueue_units): the CTA transforms only the steps
// [step_begin, step_end) of its run (a step = the B frames transformed at once, frames
// first + B * step ...), and adds its sums to its partial spectrum (accumulate) instead of
// writing them. Without STEPS the code is the full block's, unchanged.
template <int NFFT, bool STEPS>
__device__ __forceinline__ void stft_power_average(float* __restrict__ partial,
                                                   const float2* __restrict__ in,
                                                   const float* __restrict__ window,
                                                   gk_size_t frames_per_channel, gk_size_t avg,
                                                   gk_size_t valid_frames, int parts,
                                                   int frames_per_part, int step_begin,
                                                   int step_end, bool accumulate) {
    constexpr int T = NFFT / 16;          // threads per frame
    constexpr int B = PA_THREADS / T;     // frames transformed at once
    constexpr int PS = NFFT + NFFT / 16;  // padded frame in shared memory
    constexpr int R3 = NFFT / 256;        // radix of the last pass (1: no third pass)
    constexpr int Q3 = R3 > 1 ? 16 / R3 : 1;
    __shared__ float2 sm[B * PS];

    const int tid = threadIdx.x;
    const int slot = tid / T, tl = tid - slot * T;
    float2* frame_sm = sm + slot * PS;

    const gk_size_t groups_per_channel = frames_per_channel / avg;
    const gk_size_t g = blockIdx.x / parts;
    const int p = blockIdx.x - (int)(g * parts);
    const gk_size_t gi = g % groups_per_channel;   // group within its channel
    long long first = (long long)p * frames_per_part;
    long long end = first + frames_per_part;
    if (end > (long long)avg) end = (long long)avg;
    // frames of this group that exist in the (possibly final) block
    long long group_valid = (long long)valid_frames - (long long)(gi * avg);
    if (group_valid < 0) group_valid = 0;
    if (end > group_valid) end = group_valid;
    if (STEPS) {
        const long long run = first;
        first = run + (long long)step_begin * B;
        const long long stop = run + (long long)step_end * B;
        if (end > stop) end = stop;
    }

    const float2 w2 = unit(-2.0f * (float)(tl % 16) / 256.0f);
    float2 w3[Q3];
#pragma unroll
    for (int q = 0; q < Q3; ++q) w3[q] = unit(-2.0f * (float)(tl + q * T) / (float)NFFT);

    float acc[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[i] = 0.0f;

    for (long long f0 = first; f0 < end; f0 += B) {
        const long long f = f0 + slot;
        const bool live = f < end;
        float2 a[16];
        if (live) {
            const float2* src = in + ((g * avg + (gk_size_t)f) * (gk_size_t)NFFT);
#pragma unroll
            for (int r = 0; r < 16; ++r) {
                const float2 v = __ldcs(src + tl + r * T);
                const float w = __ldg(window + tl + r * T);  // 16 KiB at most: stays in L1
                a[r] = make_float2(v.x * w, v.y * w);
            }
        } else {
#pragma unroll
            for (int r = 0; r < 16; ++r) a[r] = make_float2(0.0f, 0.0f);
        }
        // pass 1: radix 16, span 1 (no twiddles): out[16 j + r]
        dft16(a);
        __syncthreads();  // the previous frame's last pass has read shared memory
#pragma unroll
        for (int r = 0; r < 16; ++r) frame_sm[pad(16 * tl + r)] = a[r];
        __syncthreads();
        // pass 2: radix 16, span 16: in[j + r*T], out[(j/16)*256 + j%16 + 16 r]
#pragma unroll
        for (int r = 0; r < 16; ++r) a[r] = frame_sm[pad(tl + r * T)];
        twiddle<16>(a, w2);
        dft16(a);
        if (R3 == 1) {
            // NFFT == 256: bin tl + 16 r
            if (live) {
#pragma unroll
                for (int r = 0; r < 16; ++r) acc[r] += gk_norm2(a[r]);
            }
            continue;
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < 16; ++r) frame_sm[pad((tl / 16) * 256 + (tl % 16) + 16 * r)] = a[r];
        __syncthreads();
        // pass 3: radix R3, span 256, butterflies j = tl + q*T: in[j + 256 r], out bin j + 256 r
#pragma unroll
        for (int q = 0; q < Q3; ++q) {
            const int j = tl + q * T;
            float2 b[R3 > 1 ? R3 : 2];
#pragma unroll
            for (int r = 0; r < R3; ++r) b[r] = frame_sm[pad(j + 256 * r)];
            if (R3 > 1) {
                twiddle<(R3 > 1 ? R3 : 2)>(b, w3[q]);
                dft_r<(R3 > 1 ? R3 : 2)>(b);
            }
            if (live) {
#pragma unroll
                for (int r = 0; r < R3; ++r) acc[q * R3 + r] += gk_norm2(b[r]);
            }
        }
    }

    // Combine the B slots: bins of (slot, thread) -> shared floats, then one partial per CTA.
    __syncthreads();
    float* red = reinterpret_cast<float*>(sm);  // B * NFFT floats fit in B * PS float2
    if (R3 == 1) {
#pragma unroll
        for (int r = 0; r < 16; ++r) red[slot * NFFT + tl + 16 * r] = acc[r];
    } else {
#pragma unroll
        for (int q = 0; q < Q3; ++q)
#pragma unroll
            for (int r = 0; r < R3; ++r) red[slot * NFFT + tl + q * T + 256 * r] = acc[q * R3 + r];
    }
    __syncthreads();
    float* dst = partial + (gk_size_t)blockIdx.x * NFFT;
    for (int b = tid; b < NFFT; b += PA_THREADS) {
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < B; ++k) s += red[k * NFFT + b];
        if (STEPS && accumulate) s += dst[b];
        dst[b] = s;
    }
}

}  // namespace

// Two CTAs per SM on Hopper (128 registers, no spills); sm_8x compiles spill-free only above 128.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define GK_PA_MIN_BLOCKS 1
#else
#define GK_PA_MIN_BLOCKS 2
#endif

#define GK_STFT_PA(NFFT)                                                                          \
    extern "C" __global__ void __launch_bounds__(PA_THREADS, GK_PA_MIN_BLOCKS) gk_stft_pa_##NFFT(                   \
        float* partial, const float2* in, const float* window, gk_size_t frames_per_channel,      \
        gk_size_t avg, gk_size_t valid_frames, int parts, int frames_per_part) {                 \
        stft_power_average<NFFT, false>(partial, in, window, frames_per_channel, avg,            \
                                        valid_frames, parts, frames_per_part, 0, 0, false);      \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(PA_THREADS, GK_PA_MIN_BLOCKS)                   \
        gk_stft_pa_steps_##NFFT(float* partial, const float2* in, const float* window,            \
                                gk_size_t frames_per_channel, gk_size_t avg,                      \
                                gk_size_t valid_frames, int parts, int frames_per_part,           \
                                int step_begin, int step_end, int accumulate) {                   \
        stft_power_average<NFFT, true>(partial, in, window, frames_per_channel, avg,             \
                                       valid_frames, parts, frames_per_part, step_begin,         \
                                       step_end, accumulate != 0);                                \
    }

// grid (groups * parts), block 256; groups = channels * frames_per_channel / avg. CTA
// (g, p) = blockIdx.x / parts, % parts averages frames [p * frames_per_part, ...) of group g.
// valid_frames: frames per channel present in this block (all of them but on a final block).
// gk_stft_pa_steps_<NFFT>: the same grid, one unit of a chunked full block: every CTA transforms
// steps [step_begin, step_end) of its run (B = 4096 / NFFT frames a step) and writes
// (accumulate == 0, the first unit) or adds to (later units) its partial spectrum.
GK_STFT_PA(256)
GK_STFT_PA(512)
GK_STFT_PA(1024)
GK_STFT_PA(2048)
GK_STFT_PA(4096)

// out[g][b] = sum_p partial[g][p][b] / (frames of group g present), 0 for a group with none.
// grid (nfft / 32) * groups, block (32, 8): thread (x, y) adds the partials p = y, y + 8, ... of
// bin 32 * tile + x in float64; the 8 rows are combined through shared memory.
extern "C" __global__ void __launch_bounds__(256) gk_stft_pa_reduce(
    float* out, const float* partial, gk_size_t nfft, int parts, gk_size_t groups_per_channel,
    gk_size_t avg, gk_size_t valid_frames) {
    __shared__ double rows[8][33];
    const gk_size_t tiles = nfft / 32;
    const gk_size_t g = blockIdx.x / tiles;
    const gk_size_t b = (blockIdx.x - g * tiles) * 32 + threadIdx.x;
    const float* src = partial + g * (gk_size_t)parts * nfft + b;
    double s = 0.0;
    for (int p = threadIdx.y; p < parts; p += 8) s += (double)src[(gk_size_t)p * nfft];
    rows[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0) {
        double total = 0.0;
#pragma unroll
        for (int y = 0; y < 8; ++y) total += rows[y][threadIdx.x];
        const gk_size_t gi = g % groups_per_channel;
        long long count = (long long)valid_frames - (long long)(gi * avg);
        if (count > (long long)avg) count = (long long)avg;
        out[g * nfft + b] = count > 0 ? (float)(total / (double)count) : 0.0f;
    }
}

// ---------------------------------------------------------------------------------------------
// Framing for the general STFT: frames[c][k][i] = w[i] * x(k*hop + hop - nfft + i), with
// x(m) = hist[c][hist_len + m] for m < 0 (hist_len = nfft - hop when nfft > hop, else 0).

namespace {

template <class T> __device__ __forceinline__ T scale_by(T v, float w);
template <> __device__ __forceinline__ float scale_by<float>(float v, float w) { return v * w; }
template <> __device__ __forceinline__ float2 scale_by<float2>(float2 v, float w) {
    return make_float2(v.x * w, v.y * w);
}

// One CTA per frame row (c, k), its threads striding over the nfft samples of the frame.
template <class T>
__device__ __forceinline__ void stft_frames(T* __restrict__ frames, const T* __restrict__ in,
                                            const T* __restrict__ hist,
                                            const float* __restrict__ window, gk_size_t n,
                                            gk_size_t hist_len, gk_size_t nfft, gk_size_t hop,
                                            gk_size_t nframes, gk_size_t row) {
    const gk_size_t c = row / nframes, k = row - c * nframes;
    const long long start = (long long)(k * hop) + (long long)hop - (long long)nfft;
    const T* in_row = in + c * n;
    const T* hist_row = hist + c * hist_len;
    T* dst = frames + row * nfft;
    for (unsigned i = threadIdx.x; i < (unsigned)nfft; i += blockDim.x) {
        const long long m = start + (long long)i;
        const T v = m < 0 ? hist_row[(long long)hist_len + m] : in_row[m];
        dst[i] = scale_by<T>(v, __ldg(window + i));
    }
}

}  // namespace

// grid channels * nframes (one CTA per frame), block 256.
extern "C" __global__ void gk_stft_frames_f32(float* frames, const float* in, const float* hist,
                                              const float* window, gk_size_t n, gk_size_t hist_len,
                                              gk_size_t nfft, gk_size_t hop, gk_size_t nframes) {
    stft_frames<float>(frames, in, hist, window, n, hist_len, nfft, hop, nframes, blockIdx.x);
}

extern "C" __global__ void gk_stft_frames_c64(float2* frames, const float2* in, const float2* hist,
                                              const float* window, gk_size_t n, gk_size_t hist_len,
                                              gk_size_t nfft, gk_size_t hop, gk_size_t nframes) {
    stft_frames<float2>(frames, in, hist, window, n, hist_len, nfft, hop, nframes, blockIdx.x);
}

// One unit of a chunked block (Op::enqueue_units): the frame rows row0 .. row0 + gridDim.x - 1
// (row = c * nframes + k) of the whole block's frames, same indexing as above.
extern "C" __global__ void gk_stft_frames_rows_f32(float* frames, const float* in,
                                                   const float* hist, const float* window,
                                                   gk_size_t n, gk_size_t hist_len, gk_size_t nfft,
                                                   gk_size_t hop, gk_size_t nframes,
                                                   gk_size_t row0) {
    stft_frames<float>(frames, in, hist, window, n, hist_len, nfft, hop, nframes, row0 + blockIdx.x);
}

extern "C" __global__ void gk_stft_frames_rows_c64(float2* frames, const float2* in,
                                                   const float2* hist, const float* window,
                                                   gk_size_t n, gk_size_t hist_len, gk_size_t nfft,
                                                   gk_size_t hop, gk_size_t nframes,
                                                   gk_size_t row0) {
    stft_frames<float2>(frames, in, hist, window, n, hist_len, nfft, hop, nframes,
                        row0 + blockIdx.x);
}
