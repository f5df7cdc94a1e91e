// fm_demod (pygpukit_dsp/stages/fm.py): d[n] = gain * angle(x[n] * conj(x[n-1])), x[-1] from the
// previous block (prev: one sample per channel, zero at the stream's start), elementwise over
// the whole GPU (gk_fm_demod_*); optionally de-emphasised after it, in place,
// y[n] = a * y[n-1] + (1 - a) * d[n] (gk_fm_deemphasis), its state (y of the previous block's last
// sample) per channel in `state`: one CTA per channel for short blocks (gk_fm_deemphasis), and
// for long ones a scan over tiles of the whole GPU (gk_fm_deemph_tiles, _carry, _fix).
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

// The de-emphasis takes b = 1 - a and lg = log(a), both rounded from float64 on the host: a pole
// near 1 (0.99973 at 50 Msps) rounded to float32 would move the time constant 1 / (1 - a) by 1e-4,
// while y += b * (x - y) and a^k = exp(k * lg) keep it to float32's own precision.
//
// The de-emphasis of d (the discriminator's output, already in y), in place.
// grid (channels), block kScanThreads: one CTA per channel. Thread t takes the contiguous chunk
// [t*K, min(n, (t+1)*K)), K = ceil(n / threads): it runs the recurrence from 0 over its chunk
// (pass 1), the CTA scans the chunks' (a^len, end value) pairs to get each chunk's carry-in,
// and each thread adds a^(i - start + 1) * carry to its outputs (pass 2). The last chunk's end
// becomes the state.
__device__ __forceinline__ void deemphasis(float* __restrict__ y, float* __restrict__ state,
                                           gk_size_t n, float b, float lg) {
    __shared__ float scan_m[kScanThreads];
    __shared__ float scan_e[kScanThreads];
    const gk_size_t c = blockIdx.x;
    const int t = threadIdx.x;
    float* yc = y + c * n;
    const float s0 = state[c];
    const gk_size_t K = (n + kScanThreads - 1) / kScanThreads;
    gk_size_t i0 = (gk_size_t)t * K, i1 = i0 + K;
    if (i0 > n) i0 = n;
    if (i1 > n) i1 = n;
    float v = 0.0f;
    for (gk_size_t i = i0; i < i1; ++i) {
        v = fmaf(b, yc[i] - v, v);
        yc[i] = v;
    }
    float m = expf((float)(i1 - i0) * lg);  // a^0 = 1: an empty chunk passes the state through
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
    for (gk_size_t i = i0; i < i1; ++i) yc[i] = fmaf(expf((float)(i - i0 + 1) * lg), carry, yc[i]);
    if (t == kScanThreads - 1) state[c] = fmaf(m, s0, e);  // every thread read s0 before the scan
}

// ---------------------------------------------------------------------------------------------
// The de-emphasis of long blocks over the whole GPU, in three launches:
//   1. gk_fm_deemph_tiles, grid (tiles, channels), block kTileThreads: each tile of kTile samples
//      solved from a zero start (thread t: kPerThread contiguous samples staged through shared
//      memory; a CTA scan of the threads' (a^len, end) pairs gives each its start); writes y and the
//      tile's pair (agg_m, agg_e);
//   2. gk_fm_deemph_carry, grid (channels), block kCarryThreads: a scan of the tiles' pairs from the
//      channel's state gives every tile's true start value (carry) and the new state;
//   3. gk_fm_deemph_fix, grid (tiles, channels), block kTileThreads: y[k] += a^(k + 1) * carry of
//      its tile (k: the offset in the tile).
// A pair (m, e) is the map s -> m * s + e over a run of samples; (m2, e2) after (m1, e1) is
// (m1 * m2, m2 * e1 + e2).
constexpr int kTileThreads = 256;
constexpr int kPerThread = 16;
constexpr int kTile = kTileThreads * kPerThread;  // 4096 samples
constexpr int kCarryThreads = 1024;

__host__ __device__ constexpr int padded(int j) { return j + (j >> 4); }  // conflict-free rows of 16

// An inclusive scan of (m, e) over the CTA (blockDim.x threads, a multiple of 32, at most 1024);
// returns the exclusive prefix of this thread in (pm, pe) and the CTA's total in (tm, te).
__device__ __forceinline__ void cta_scan(float m, float e, float& pm, float& pe, float& tm, float& te) {
    __shared__ float wm[33], we[33];  // the warps' prefixes, then the total
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    float im = m, ie = e;  // the inclusive prefix within the warp
    for (int off = 1; off < 32; off <<= 1) {
        const float om = __shfl_up_sync(0xffffffffu, im, off);
        const float oe = __shfl_up_sync(0xffffffffu, ie, off);
        if (lane >= off) {
            ie = fmaf(im, oe, ie);
            im = im * om;
        }
    }
    float xm = __shfl_up_sync(0xffffffffu, im, 1), xe = __shfl_up_sync(0xffffffffu, ie, 1);
    if (lane == 0) {
        xm = 1.0f;
        xe = 0.0f;
    }
    if (lane == 31) {
        wm[warp] = im;
        we[warp] = ie;
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the warps' totals into exclusive prefixes, in order
        float am = 1.0f, ae = 0.0f;
        for (int w = 0; w < warps; ++w) {
            const float m2 = wm[w], e2 = we[w];
            wm[w] = am;
            we[w] = ae;
            ae = fmaf(m2, ae, e2);
            am = am * m2;
        }
        wm[warps] = am;  // the total
        we[warps] = ae;
    }
    __syncthreads();
    const float wpm = wm[warp], wpe = we[warp];
    pm = wpm * xm;
    pe = fmaf(xm, wpe, xe);
    tm = wm[warps];
    te = we[warps];
    __syncthreads();  // wm/we are reused by the next call
}

}  // namespace

// grid (ceil(n / kTile), channels), block kTileThreads; y holds the discriminator's output.
extern "C" __global__ void __launch_bounds__(kTileThreads) gk_fm_deemph_tiles(float* y, float* agg_m, float* agg_e,
                                                                              gk_size_t n, float b, float lg) {
    __shared__ float tile[padded(kTile)];
    const gk_size_t c = blockIdx.y, tiles = gridDim.x;
    const gk_size_t t0 = (gk_size_t)blockIdx.x * kTile;
    const int len = (int)(n - t0 < (gk_size_t)kTile ? n - t0 : (gk_size_t)kTile);
    float* yc = y + c * n + t0;
    for (int j = threadIdx.x; j < len; j += kTileThreads) tile[padded(j)] = yc[j];
    __syncthreads();
    const int i0 = threadIdx.x * kPerThread;
    float v[kPerThread];
    float e = 0.0f;
    int count = 0;
#pragma unroll
    for (int k = 0; k < kPerThread; ++k) {
        if (i0 + k < len) {
            e = fmaf(b, tile[padded(i0 + k)] - e, e);
            ++count;
        }
        v[k] = e;
    }
    const float m = expf((float)count * lg);
    float pm, pe, tm, te;
    cta_scan(m, e, pm, pe, tm, te);
    // pe: this thread's start value, the tile starting from zero
#pragma unroll
    for (int k = 0; k < kPerThread; ++k)
        if (i0 + k < len) tile[padded(i0 + k)] = fmaf(expf((float)(k + 1) * lg), pe, v[k]);
    __syncthreads();
    for (int j = threadIdx.x; j < len; j += kTileThreads) yc[j] = tile[padded(j)];
    if (threadIdx.x == 0) {
        agg_m[c * tiles + blockIdx.x] = tm;
        agg_e[c * tiles + blockIdx.x] = te;
    }
}

// grid (channels), block kCarryThreads: carry[c * tiles + k] = the true value before tile k;
// state[c] = the value after the last tile.
extern "C" __global__ void __launch_bounds__(kCarryThreads) gk_fm_deemph_carry(float* carry, float* state,
                                                                               const float* agg_m,
                                                                               const float* agg_e,
                                                                               gk_size_t tiles) {
    const gk_size_t c = blockIdx.x;
    float s = state[c];
    for (gk_size_t base = 0; base < tiles; base += kCarryThreads) {
        const gk_size_t k = base + threadIdx.x;
        const bool in = k < tiles;
        const float m = in ? agg_m[c * tiles + k] : 1.0f, e = in ? agg_e[c * tiles + k] : 0.0f;
        float pm, pe, tm, te;
        cta_scan(m, e, pm, pe, tm, te);
        if (in) carry[c * tiles + k] = fmaf(pm, s, pe);
        s = fmaf(tm, s, te);
    }
    if (threadIdx.x == 0) state[c] = s;
}

// grid (ceil(n / kTile), channels), block kTileThreads.
extern "C" __global__ void __launch_bounds__(kTileThreads) gk_fm_deemph_fix(float* y, const float* carry,
                                                                            gk_size_t n, float lg) {
    const gk_size_t c = blockIdx.y, tiles = gridDim.x;
    const float s = carry[c * tiles + blockIdx.x];
    if (s == 0.0f) return;
    const gk_size_t t0 = (gk_size_t)blockIdx.x * kTile;
    const int len = (int)(n - t0 < (gk_size_t)kTile ? n - t0 : (gk_size_t)kTile);
    float* yc = y + c * n + t0;
    for (int j = threadIdx.x; j < len; j += kTileThreads) yc[j] = fmaf(expf((float)(j + 1) * lg), s, yc[j]);
}

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
                                                                            gk_size_t n, float b, float lg) {
    deemphasis(y, state, n, b, lg);
}
