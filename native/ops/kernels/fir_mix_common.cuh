// The FIR part shared by fir_mix's two kernels (fir_mix.cu: split; fir_mix_cluster.cu: cluster):
// a CTA's FIR of CG channels x TILE samples, its copies into shared memory and the history it
// writes. kernels/fir_mix.cu's header says how the kernels use it.
#pragma once
#include "gk_common.cuh"

namespace {

constexpr int TILE = 16;         // output samples per CTA
constexpr int KSPLIT = 8;        // tap slices per stage
constexpr int MAX_ENTRIES = 4096;  // C_out * C_in (M, or a CTA's columns of it, in shared memory)

// Programmatic dependent launch (SM 9.0+): wait until the kernel before this one in the stream
// has finished and its writes are visible. Returns at once when this launch was not one.
__device__ __forceinline__ void grid_dependency_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
}

// CG input channels x TILE samples per CTA, CG * 32 threads: 4 quads of outputs per channel
// x KSPLIT tap slices.
template <int KT, int CG>
struct FirSmem {
    // Double-buffered stage: taps (one row, or one per channel) and the CG input windows
    // x[first .. first + TILE + KT); rows of 16-byte multiples, so every row is 16-byte aligned.
    __align__(16) float taps[2][CG][KT];
    __align__(16) float window[2][CG][TILE + KT];
    float partial[KSPLIT][CG * TILE];
};

// Queue the copies of stage `stage` (taps k0 = stage*KT ...) into buffer `b`. Channels past the
// group's last one (the last group of C_in % CG != 0) load the last channel again: their
// results are computed and dropped, and no copy reads outside the arrays.
enum StagePart { ALL, OWN, BLOCK };  // OWN: the taps and history windows; BLOCK: the block's samples

template <int KT, int CG>
__device__ __forceinline__ void load_stage(FirSmem<KT, CG>& sm, int b, int stage,
                                           const float* __restrict__ in,
                                           const float* __restrict__ hist,
                                           const float* __restrict__ taps, long long c0,
                                           int cg_here, long long t0, long long n,
                                           long long hist_len, long long tap_row, bool vec_in,
                                           StagePart part = ALL) {
    constexpr int THREADS = CG * 32;
    const int tid = threadIdx.x;
    const long long k0 = (long long)stage * KT;
    constexpr int TAP_CHUNKS = KT / 4;  // 16-byte chunks per taps row (device taps padded, aligned)
    const int tap_rows = tap_row != 0 ? CG : 1;
    const bool own = part != BLOCK, block = part != OWN;
    for (int q = tid; own && q < tap_rows * TAP_CHUNKS; q += THREADS) {
        const int r = q / TAP_CHUNKS, j = q - r * TAP_CHUNKS;
        const long long c = c0 + (r < cg_here ? r : cg_here - 1);
        gk_cp_async_16(&sm.taps[b][r][4 * j], taps + c * tap_row + k0 + 4 * j, 16);
    }
    // windows: x[c][first + j], j < TILE + KT, first = t0 - k0 - KT (a multiple of 4, >= -hist_len)
    const long long first = t0 - k0 - KT;
    constexpr int WIN = TILE + KT;
    if (vec_in) {
        constexpr int CHUNKS = WIN / 4;
        for (int q = tid; q < CG * CHUNKS; q += THREADS) {
            const int r = q / CHUNKS, j = q - r * CHUNKS;
            const long long c = c0 + (r < cg_here ? r : cg_here - 1);
            const float* in_row = in + c * n;
            const long long m = first + 4LL * j;
            float* dst = &sm.window[b][r][4 * j];
            if (m < 0) {
                // history (a whole chunk: 0 is a chunk edge, hist_len a multiple of 32)
                if (own) gk_cp_async_16(dst, hist + c * hist_len + (hist_len + m), 16);
            } else if (block) {
                const long long left = n - m;  // samples of the block from m on
                const int bytes = left >= 4 ? 16 : (left > 0 ? (int)(left * 4) : 0);
                gk_cp_async_16(dst, bytes > 0 ? (const void*)(in_row + m) : (const void*)in_row, bytes);
            }
        }
    } else {
        // Rows of the block are not 16-byte aligned (n % 4 != 0): copy sample by sample.
        for (int q = tid; q < CG * WIN; q += THREADS) {
            const int r = q / WIN, j = q - r * WIN;
            const long long c = c0 + (r < cg_here ? r : cg_here - 1);
            const float* in_row = in + c * n;
            const long long m = first + j;
            float* dst = &sm.window[b][r][j];
            if (m < 0) {
                if (own) gk_cp_async_4(dst, hist + c * hist_len + (hist_len + m), 4);
            } else if (block) {
                const bool ok = m < n;
                gk_cp_async_4(dst, ok ? in_row + m : in_row, ok ? 4 : 0);
            }
        }
    }
}

// The part of the next history that comes from the history itself, when the block is shorter
// than it (next[i] = history[i + n] for i < hist_len - n), shared out evenly over the tiles;
// the block's own samples are written during the FIR (stage 0). `tile` of `tiles`: the CTA's
// time tile in the whole block (a launch may cover a range of tiles: the scheduler's units).
__device__ __forceinline__ void keep_history(float* __restrict__ next_hist, const float* __restrict__ hist,
                                             long long c0, int cg_here, gk_size_t n, gk_size_t hist_len,
                                             gk_size_t tile, gk_size_t tiles) {
    const gk_size_t kept = hist_len > n ? hist_len - n : 0;
    if (kept == 0) return;
    const gk_size_t begin = kept * tile / tiles;
    const gk_size_t len = kept * (tile + 1) / tiles - begin;
    for (gk_size_t f = threadIdx.x; f < (gk_size_t)cg_here * len; f += blockDim.x) {
        const gk_size_t r = f / len, i = begin + (f - r * len);
        const gk_size_t c = (gk_size_t)c0 + r;
        next_hist[c * hist_len + i] = hist[c * hist_len + i + n];
    }
}

// Step 1 (both kernels): the FIR of channels c0 .. c0 + cg_here - 1 and outputs t0 .. t0 + 15;
// the next history's samples of the CTA's tile are written from stage 0's window. `load_m()`
// queues the copies of M (or the CTA's columns of it) with stage 0's, before the wait for the
// previous kernel. `at_stage0()` runs once every thread of the CTA is past the first barrier. Returns, in
// threads tid < CG * TILE, y[c0 + tid / TILE][t0 + tid % TILE] (garbage for rows >= cg_here).
template <int KT, int CG, class LoadM, class AtStage0>
__device__ __forceinline__ float fir_tile(FirSmem<KT, CG>& sm, LoadM load_m, AtStage0 at_stage0,
                                          const float* __restrict__ in, const float* __restrict__ hist,
                                          float* __restrict__ next_hist, const float* __restrict__ taps,
                                          long long c0, int cg_here, long long t0, gk_size_t n,
                                          gk_size_t hist_len, gk_size_t tap_row, int stages, bool vec_in) {
    constexpr int SLICE = KT / KSPLIT;  // taps per thread per stage
    constexpr int GROUPS = SLICE / 4;
    const int tid = threadIdx.x;
    const int og = tid % (CG * 4), ks = tid / (CG * 4);
    const int cl = og / 4, q = og % 4;  // channel in the group, quad of 4 outputs
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    // What does not depend on the kernel before this one (the pull of the block's input) first:
    // stage 0's taps and history windows, and M. Launched as a programmatic dependent launch
    // (SM 9.0+, Kernel::launch's after_kernel) this runs while that kernel does.
    load_stage<KT, CG>(sm, 0, 0, in, hist, taps, c0, cg_here, t0, (long long)n, (long long)hist_len,
                       (long long)tap_row, vec_in, OWN);
    load_m();
    grid_dependency_wait();
    load_stage<KT, CG>(sm, 0, 0, in, hist, taps, c0, cg_here, t0, (long long)n, (long long)hist_len,
                       (long long)tap_row, vec_in, BLOCK);
    gk_cp_async_commit();
    for (int s = 0; s < stages; ++s) {
        const int b = s & 1;
        if (s + 1 < stages) {
            load_stage<KT, CG>(sm, b ^ 1, s + 1, in, hist, taps, c0, cg_here, t0, (long long)n,
                               (long long)hist_len, (long long)tap_row, vec_in);
            gk_cp_async_commit();
            gk_cp_async_wait<1>();
        } else {
            gk_cp_async_wait<0>();
        }
        __syncthreads();
        if (s == 0) {
            at_stage0();
            // The block's samples of the next history that lie in this CTA's own tile come
            // from stage 0's window (x[t0 + j] at KT + j): no load on the critical path.
            const long long lo = (long long)n - (long long)hist_len;  // first block sample kept
            for (int f = tid; f < cg_here * TILE; f += CG * 32) {
                const int r = f / TILE, j = f - r * TILE;
                const long long m = t0 + j;
                if (m >= lo && m < (long long)n)
                    next_hist[(gk_size_t)(c0 + r) * hist_len + (gk_size_t)(m - lo)] = sm.window[0][r][KT + j];
            }
        }
        const float* xw = sm.window[b][cl];
        const float* hs = sm.taps[b][tap_row != 0 ? cl : 0];
        const int kbase = ks * SLICE;
        // w[m] = x[n0 - kg - 4 + m], n0 = t0 + 4q, kg = k0 + kbase + 4g; the window index
        // of x[n0 - kg] is 4q - kbase - 4g + KT (in [4, TILE + KT - 4]).
        float cur[4];
        load4(xw + (4 * q - kbase + KT), cur);
#pragma unroll
        for (int g = 0; g < GROUPS; ++g) {
            float prev[4], h[4];
            load4(xw + (4 * q - kbase - 4 * g + KT - 4), prev);
            load4(hs + (kbase + 4 * g), h);
            const float w[8] = {prev[0], prev[1], prev[2], prev[3], cur[0], cur[1], cur[2], cur[3]};
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) acc[j] = fmaf(h[i], w[4 + j - i], acc[j]);
#pragma unroll
            for (int i = 0; i < 4; ++i) cur[i] = prev[i];
        }
        __syncthreads();  // buffer b is refilled by the copies queued in the next iteration
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) sm.partial[ks][4 * og + j] = acc[j];
    __syncthreads();
    float sum = 0.0f;
    if (tid < CG * TILE) {  // partial index 4*og + j = TILE*cl + 4q + j
        sum = sm.partial[0][tid];
#pragma unroll
        for (int k = 1; k < KSPLIT; ++k) sum += sm.partial[k][tid];
    }
    return sum;
}

}  // namespace
