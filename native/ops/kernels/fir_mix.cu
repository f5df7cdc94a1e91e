// Fused fir -> mix (op kind "fir_mix", native/ops/fir_mix.cpp) for real float32 input, real
// taps and a real (C_out, C_in) matrix with C_out * C_in <= 4096, in ONE launch per block:
//
//     y[c][t]   = sum_k h[c][k] x[c][t - k]        (streaming: x before t = 0 is the history)
//     out[o][t] = sum_c M[o][c] y[c][t]
//
// Why this shape: W1 (64 ch x 256 samples, 256 taps, 16 x 64 mix) is latency-bound; the FIR is
// 4.2 M multiply-adds, the mix 0.26 M. Two launches cost a few microseconds of launch gap on the
// block's critical path; one launch removes it. A CTA per time tile over *all* channels would
// give only 256 / 16 = 16 CTAs for W1 (16 of 132 SMs busy for the whole FIR), so the FIR is
// split over (time tile, channel group) like the fir op, and the mix of a tile is done by the
// last CTA of that tile to finish (an arrival counter per tile): no second launch, no spin-wait
// on other CTAs (no co-residency assumption), and every CTA but 16 ends right after its FIR.
//
// Grid (ceil(n / TILE), ceil(C_in / CG)), 128 threads. CTA (x, g):
// 1. FIR for channels c0 = g*CG ... c0+CG-1 (fewer in the last group) and outputs
//    t0 = x*TILE ... t0+TILE-1: exactly the fir op's direct kernel (kernels/fir.cu) with its 64
//    outputs re-cut as 4 channels x 16 samples: taps walked in stages of KT (32 or 128, the device
//    taps zero-padded to a multiple of KT), each stage's taps and input windows copied to shared
//    memory with cp.async, double-buffered; thread (og, ks) = (tid % 16, tid / 16) owns outputs
//    4q .. 4q+3 (q = og % 4) of channel og / 4 and the tap slice ks of every stage, with the same
//    8-sample register window and the same summation order (stage, group, tap; then the 8 slices
//    in order), so y is bit-identical to what the fir op writes.
// 2. y goes to a scratch (C_in, n) in global memory (L2-resident: 64 KiB for W1), every thread
//    fences, and thread 0 bumps the tile's arrival counter.
// 3. Every CTA copies M (<= 4096 floats) into shared memory with its first FIR stage (only the
//    tile's last CTA uses it, but which CTA is last is known only after the FIR, and a copy then
//    would be one more L2 round trip on the block's critical path). The last CTA of the tile
//    stages, when C_in <= 64, the tile of y in shared memory (y read with ld.global.cg: L1 is not coherent, and a tile shares its 128-byte
//    lines with its neighbours, whose last CTAs may run on the same SM), then computes
//    out[o][t0 .. t0+16) like the mix op's kernel (kernels/mix.cu): thread (tx, ty) =
//    (tid % 16, tid / 16) sums channels ty, ty+8, ... for 8 output rows at a time (fmaf chain),
//    and the 8 slices are added in order: the same order as the mix op, so the fused output
//    equals fir -> mix bit for bit on the same GPU (tests allow float32 rounding anyway).
// 4. History: like the fir op, two copies on the device and a phase flag: the launch reads
//    history[phase] and writes the next history (the last hist_len samples of [history | block])
//    into history[phase ^ 1]. CTA (x, g) writes, for channels c0.., the block samples of its own
//    tile (from its stage-0 window in shared memory: no global load on the critical path) and,
//    when the block is shorter than the history, its even share of the part that shifts
//    (keep_history). The last CTA of each tile counts the tile done when it arrives; the one
//    that completes the count flips the phase after its mix: by then every CTA has read it.
// Final partial block: columns t >= n_valid of the output are written as 0 (the fir op zeroes
// its output past n_in and the mix then mixes zeros), so no zero_after launch is needed.
#include "gk_common.cuh"

namespace {

constexpr int TILE = 16;         // output samples per CTA
constexpr int CG = 4;            // input channels per CTA in the FIR part
constexpr int THREADS = 128;     // FIR: 16 output groups (4 channels x 4 quads) x 8 tap slices
constexpr int KSPLIT = 8;        // tap slices per stage
constexpr int MIX_ROWS = 8;      // output rows per pass of the mix (the mix op's kRows)
constexpr int Y_STAGE = 64;      // C_in up to this: the tile of y is staged in shared memory
constexpr int MAX_ENTRIES = 4096;  // C_out * C_in (M lives in shared memory)

// cp.async (sm_80+): global -> shared without a register round trip; src_bytes < the copy size
// zero-fills the rest (samples past the end of the block).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// A float another CTA of this launch wrote: read through L2 (never a stale L1 line).
__device__ __forceinline__ float load_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ void load4(const float* p, float (&v)[4]) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
}

template <int KT>
struct FirSmem {
    // Double-buffered stage: taps (one row, or one per channel) and the CG input windows
    // x[first .. first + TILE + KT); rows of 16-byte multiples, so every row is 16-byte aligned.
    __align__(16) float taps[2][CG][KT];
    __align__(16) float window[2][CG][TILE + KT];
    float partial[KSPLIT][CG * TILE];
};

struct MixSmem {
    float y[Y_STAGE][TILE];
    // [row][slice * TILE + column], rows padded by TILE floats: the slice writes and the row
    // reads of a warp (two slices / two rows) fall in different banks.
    float partial[MIX_ROWS][MIX_ROWS * TILE + TILE];
};

// The FIR buffers are dead when the mix starts (a barrier in between): share the memory.
template <int KT>
union FusedSmem {
    FirSmem<KT> fir;
    MixSmem mix;
};

// Queue the copies of stage `stage` (taps k0 = stage*KT ...) into buffer `b`. Channels past the
// group's last one (the last group of C_in % CG != 0) load the last channel again: their
// results are computed and dropped, and no copy reads outside the arrays.
template <int KT>
__device__ __forceinline__ void load_stage(FirSmem<KT>& sm, int b, int stage,
                                           const float* __restrict__ in,
                                           const float* __restrict__ hist,
                                           const float* __restrict__ taps, long long c0,
                                           int cg_here, long long t0, long long n,
                                           long long hist_len, long long tap_row, bool vec_in) {
    const int tid = threadIdx.x;
    const long long k0 = (long long)stage * KT;
    constexpr int TAP_CHUNKS = KT / 4;  // 16-byte chunks per taps row (device taps padded, aligned)
    const int tap_rows = tap_row != 0 ? CG : 1;
    for (int q = tid; q < tap_rows * TAP_CHUNKS; q += THREADS) {
        const int r = q / TAP_CHUNKS, j = q - r * TAP_CHUNKS;
        const long long c = c0 + (r < cg_here ? r : cg_here - 1);
        cp_async_16(&sm.taps[b][r][4 * j], taps + c * tap_row + k0 + 4 * j, 16);
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
                cp_async_16(dst, hist + c * hist_len + (hist_len + m), 16);
            } else {
                const long long left = n - m;  // samples of the block from m on
                const int bytes = left >= 4 ? 16 : (left > 0 ? (int)(left * 4) : 0);
                cp_async_16(dst, bytes > 0 ? (const void*)(in_row + m) : (const void*)in_row, bytes);
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
                cp_async_4(dst, hist + c * hist_len + (hist_len + m), 4);
            } else {
                const bool ok = m < n;
                cp_async_4(dst, ok ? in_row + m : in_row, ok ? 4 : 0);
            }
        }
    }
}

// The part of the next history that comes from the history itself, when the block is shorter
// than it (next[i] = history[i + n] for i < hist_len - n), shared out evenly over the tiles;
// the block's own samples are written during the FIR (stage 0).
__device__ __forceinline__ void keep_history(float* __restrict__ next_hist, const float* __restrict__ hist,
                                             long long c0, int cg_here, gk_size_t n, gk_size_t hist_len) {
    const gk_size_t kept = hist_len > n ? hist_len - n : 0;
    if (kept == 0) return;
    const gk_size_t begin = kept * blockIdx.x / gridDim.x;
    const gk_size_t len = kept * (blockIdx.x + 1) / gridDim.x - begin;
    for (gk_size_t f = threadIdx.x; f < (gk_size_t)cg_here * len; f += THREADS) {
        const gk_size_t r = f / len, i = begin + (f - r * len);
        const gk_size_t c = (gk_size_t)c0 + r;
        next_hist[c * hist_len + i] = hist[c * hist_len + i + n];
    }
}

template <int KT>
__device__ __forceinline__ void fir_mix(float* __restrict__ out, const float* __restrict__ in,
                                        float* __restrict__ y, float* __restrict__ hist2,
                                        unsigned* __restrict__ sync,
                                        const float* __restrict__ taps,
                                        const float* __restrict__ matrix, gk_size_t n,
                                        gk_size_t n_valid, gk_size_t hist_len, gk_size_t tap_row,
                                        int stages, int c_in, int c_out) {
    constexpr int SLICE = KT / KSPLIT;  // taps per thread per stage
    constexpr int GROUPS = SLICE / 4;
    __shared__ FusedSmem<KT> smem;
    // M is copied in with the first FIR stage by every CTA, so the tile's last CTA (which only
    // turns out to be last after its FIR) mixes without another round trip to L2.
    __shared__ __align__(16) float m_sh[MAX_ENTRIES];
    __shared__ unsigned last_of_tile;

    const int tid = threadIdx.x;
    const long long t0 = (long long)blockIdx.x * TILE;
    const long long c0 = (long long)blockIdx.y * CG;
    const int cg_here = c_in - (int)c0 < CG ? c_in - (int)c0 : CG;
    // Ping-pong history (as the fir op): read history[phase], write history[phase ^ 1].
    const unsigned phase = *reinterpret_cast<volatile unsigned*>(sync);
    const gk_size_t hist_size = hist_len * (gk_size_t)c_in;
    const float* hist = hist2 + (gk_size_t)phase * hist_size;
    float* next_hist = hist2 + (gk_size_t)(phase ^ 1u) * hist_size;
    unsigned* tiles_done = sync + 1;
    unsigned* tile_arrivals = sync + 2;
    const bool vec_in = (n % 4 == 0) && gk_aligned(in, 16);

    // ---- 1. FIR of CG channels x TILE samples (the fir op's direct kernel, re-cut)
    {
        FirSmem<KT>& sm = smem.fir;
        const int og = tid % 16, ks = tid / 16;
        const int cl = og / 4, q = og % 4;  // channel in the group, quad of 4 outputs
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        const int entries = c_out * c_in;
        if (entries % 4 == 0 && gk_aligned(matrix, 16)) {
            for (int e = tid; e < entries / 4; e += THREADS) cp_async_16(m_sh + 4 * e, matrix + 4 * e, 16);
        } else {
            for (int e = tid; e < entries; e += THREADS) cp_async_4(m_sh + e, matrix + e, 4);
        }
        load_stage<KT>(sm, 0, 0, in, hist, taps, c0, cg_here, t0, (long long)n,
                       (long long)hist_len, (long long)tap_row, vec_in);
        cp_async_commit();
        for (int s = 0; s < stages; ++s) {
            const int b = s & 1;
            if (s + 1 < stages) {
                load_stage<KT>(sm, b ^ 1, s + 1, in, hist, taps, c0, cg_here, t0, (long long)n,
                               (long long)hist_len, (long long)tap_row, vec_in);
                cp_async_commit();
                cp_async_wait<1>();
            } else {
                cp_async_wait<0>();
            }
            __syncthreads();
            if (s == 0) {
                // The block's samples of the next history that lie in this CTA's own tile come
                // from stage 0's window (x[t0 + j] at KT + j): no load on the critical path.
                const long long lo = (long long)n - (long long)hist_len;  // first block sample kept
                for (int f = tid; f < cg_here * TILE; f += THREADS) {
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
        if (tid < CG * TILE) {
            const int r = tid / TILE, tt = tid % TILE;  // partial index 4*og + j = TILE*cl + 4q + j
            float sum = sm.partial[0][tid];
#pragma unroll
            for (int k = 1; k < KSPLIT; ++k) sum += sm.partial[k][tid];
            const long long t = t0 + tt;
            if (r < cg_here && t < (long long)n) y[(c0 + r) * (long long)n + t] = sum;
        }
    }

    keep_history(next_hist, hist, c0, cg_here, n, hist_len);

    // ---- 2. hand y over: the last CTA of this time tile mixes it
    __threadfence();  // this thread's y and history stores, device-wide, before the arrival
    __syncthreads();
    unsigned tiles_before = 0u;
    if (tid == 0) {
        const unsigned before = atomicAdd(tile_arrivals + blockIdx.x, 1u);
        const bool last = before == gridDim.y - 1u;
        if (last) {
            tile_arrivals[blockIdx.x] = 0u;  // every CTA of the tile has arrived: rearm for the next launch
            // Counted now (its result is needed only at the end): once every tile has counted,
            // every CTA of the launch has read the phase, so the last one may flip it.
            tiles_before = atomicAdd(tiles_done, 1u);
        }
        last_of_tile = last ? 1u : 0u;
    }
    __syncthreads();
    if (last_of_tile == 0u) return;

    // ---- 3. mix of the tile: out[o][t0 + tx] = sum_c M[o][c] y[c][t0 + tx]
    {
        MixSmem& sm = smem.mix;
        const bool staged = c_in <= Y_STAGE;
        if (staged) {
            for (int f = tid; f < c_in * TILE; f += THREADS) {
                const int i = f / TILE, j = f % TILE;
                const long long t = t0 + j;
                sm.y[i][j] = t < (long long)n ? load_cg(y + i * (long long)n + t) : 0.0f;
            }
        }
        __syncthreads();
        const int tx = tid % TILE, ty = tid / TILE;
        const long long t = t0 + tx;
        const bool col_ok = t < (long long)n;
        for (int o0 = 0; o0 < c_out; o0 += MIX_ROWS) {
            const int rows_here = c_out - o0 < MIX_ROWS ? c_out - o0 : MIX_ROWS;
            float acc[MIX_ROWS];
#pragma unroll
            for (int r = 0; r < MIX_ROWS; ++r) acc[r] = 0.0f;
            if (col_ok) {
                for (int i = ty; i < c_in; i += MIX_ROWS) {
                    const float xv = staged ? sm.y[i][tx] : load_cg(y + i * (long long)n + t);
                    const float* mi = m_sh + o0 * c_in + i;
#pragma unroll
                    for (int r = 0; r < MIX_ROWS; ++r)
                        if (r < rows_here) acc[r] = fmaf(mi[r * c_in], xv, acc[r]);
                }
            }
#pragma unroll
            for (int r = 0; r < MIX_ROWS; ++r) sm.partial[r][ty * TILE + tx] = acc[r];
            __syncthreads();
            if (ty < rows_here && col_ok) {
                float sum = sm.partial[ty][tx];
#pragma unroll
                for (int s = 1; s < MIX_ROWS; ++s) sum += sm.partial[ty][s * TILE + tx];
                // write-through: `out` may be mapped host memory (Op::writes_output_once)
                __stwt(out + (long long)(o0 + ty) * (long long)n + t, t < (long long)n_valid ? sum : 0.0f);
            }
            __syncthreads();
        }
    }

    // ---- 4. the last tile to count flips the history phase for the next launch (which starts
    // after this one has ended: stream order, no fence needed)
    if (tid == 0 && tiles_before == gridDim.x - 1u) {
        *tiles_done = 0u;
        sync[0] = phase ^ 1u;
    }
}

}  // namespace

// grid (ceil(n / 16), ceil(c_in / 4)), block 128. out (c_out, n); in (c_in, n); y: scratch
// (c_in, n); hist2: two histories of (c_in, hist_len), hist_len = taps padded to a multiple of
// KT; sync: {phase, tiles done, one arrival counter per tile}, zero at the start and rearmed by
// every launch; taps (1 or c_in rows of hist_len, zero-padded), tap_row = hist_len for
// per-channel taps, 0 for shared taps; stages = hist_len / KT; matrix (c_out, c_in),
// c_out * c_in <= 4096; out columns from n_valid on are written as zeros.
#define GK_FIR_MIX(NAME, KT)                                                                     \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME(                                  \
        float* out, const float* in, float* y, float* hist2, unsigned* sync, const float* taps,  \
        const float* matrix, gk_size_t n, gk_size_t n_valid, gk_size_t hist_len,                 \
        gk_size_t tap_row, int stages, int c_in, int c_out) {                                    \
        fir_mix<KT>(out, in, y, hist2, sync, taps, matrix, n, n_valid, hist_len, tap_row, stages, \
                    c_in, c_out);                                                                \
    }

GK_FIR_MIX(gk_fir_mix_k32, 32)
GK_FIR_MIX(gk_fir_mix_k128, 128)
