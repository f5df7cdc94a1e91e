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
// split over (time tile, channel group) like the fir op, and the tile is finished by the last
// CTA of that tile to arrive (an arrival counter per tile): no second launch, no spin-wait on
// other CTAs (no co-residency assumption), and every other CTA ends right after its own work.
//
// The kernel is latency-bound: its duration is one CTA's chain of dependent steps, counted here
// in L2 round trips (RT, ~600-800 cycles on an H100) plus the arithmetic on that chain.
//
// v2, gk_fir_mix2_k{32,128} (the default). Grid (ceil(n / TILE), ceil(C_in / CG)), 128 threads.
// CTA (x, g):
// 1. Prologue, one cp.async group: stages 0 and 1 of the taps and input windows (below) and the
//    CTA's columns of M (M[o][c0 .. c0+CG), <= 4096 floats). The windows of these two stages are
//    loaded once per history copy (both [history 0 | block] and [history 1 | block]), so no copy
//    waits for the phase flag; the flag is loaded at the start and picks the copy the FIR reads.
//    While the copies fly, the CTA copies its share of the next history (global -> global; the
//    samples from the block first: those loads do not wait for the flag either). One RT.
// 2. FIR for channels c0 = g*CG ... (fewer in the last group) and outputs t0 = x*TILE ...: the
//    fir op's direct kernel (kernels/fir.cu) with its 64 outputs re-cut as 4 channels x 16
//    samples: taps in stages of KT (32 or 128; device taps zero-padded to a multiple of KT), thread
//    (og, ks) = (tid % 16, tid / 16) owns outputs 4q .. 4q+3 (q = og % 4) of channel og / 4 and tap
//    slice ks of every stage, the same 8-sample register window and summation order (stage,
//    group, tap; then the 8 slices in order): y is bit-identical to the fir op's. Stage s + 2 is
//    queued into buffer s & 1 after stage s (history[phase] only). y stays in shared memory.
// 3. Partial mix of the CTA's channels: p[o][tt] = sum_r M[o][c0+r] y[c0+r][t0+tt] (fmaf chain,
//    r in order), all C_out x TILE of them. With one group (C_in <= CG) p is the output: it is
//    written (zeros from n_valid on) and the CTA is done. Otherwise p goes to the scratch
//    part[x][g] (C_out x TILE floats), then barrier, thread 0: fence.acq_rel.gpu (release of the
//    whole CTA's stores, cumulative through the barrier), atomicAdd on the tile's counter. 2 RT.
// 4. The tile's last CTA (acquire fence) sums the groups' partials in a FIXED order,
//    out = ((p_0 + p_1) + p_2) + ..., whatever order the CTAs arrived in: deterministic. Each
//    thread owns 4 consecutive samples of one output row and issues its 16-byte ld.global.cg
//    loads (L2: other SMs wrote them) 16 groups at a time. One RT for W1 (16 groups).
// 5. Phase flip: every CTA (thread 32, beside thread 0's tile atomic, so off the chain) counts
//    itself in one grid-wide counter; the last one flips the phase and rearms the counter. Every
//    CTA read the phase before it arrived, and the kernel boundary orders the flip with the next
//    launch: no fence.
// W1 chain (the last tile's last CTA): 1 RT + ~700 cycles of FIR, reductions and partial mix +
// 2 RT + 1 RT + ~100 cycles: about 4 RT + 800 ~ 3,000-4,000 cycles. The mix sums in another order
// than the mix op (groups of 4 channels, then groups), so fir -> mix and the fused op agree to
// float32 rounding (~1e-7 relative), not bit for bit.
//
// v1, gk_fir_mix_k{32,128} (GK_FIR_MIX_V1=1 when the op is built; kept for A/B timing). Same
// grid and FIR, but it reads the phase before it can queue the history copies (phase RT, then
// windows RT), writes y to a (C_in, n) scratch, copies its history share after the FIR (1 RT),
// and the tile's last CTA stages M and the tile's y in shared memory (loops of dependent
// load -> store: several RT) and mixes the whole 16 x 64 tile alone in the mix op's order
// (8 channel slices x 8 output rows per thread, slices summed in order: bit for bit fir -> mix),
// then a fence and a second counter (tiles done) whose last tile flips the phase (2 RT). Its
// chain is ~13-17 RT + ~1,400 cycles; Nsight Compute measured 9.8 us on an H100 for W1.
//
// Final partial block (both): columns t >= n_valid of the output are written as 0 (the fir op
// zeroes its output past n_in and the mix then mixes zeros), so no zero_after launch is needed.
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
    float m[MAX_ENTRIES];
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

    // This CTA's share of the next history: the last hist_len samples of [history | block].
    {
        const gk_size_t begin = hist_len * blockIdx.x / gridDim.x;
        const gk_size_t len = hist_len * (blockIdx.x + 1) / gridDim.x - begin;
        for (gk_size_t f = tid; f < (gk_size_t)cg_here * len; f += THREADS) {
            const gk_size_t r = f / len, i = begin + (f - r * len);
            const gk_size_t c = (gk_size_t)c0 + r, j = i + n;
            next_hist[c * hist_len + i] = j < hist_len ? hist[c * hist_len + j] : in[c * n + (j - hist_len)];
        }
    }

    // ---- 2. hand y over: the last CTA of this time tile mixes it
    __threadfence();  // this thread's y (and history) stores, device-wide, before the arrival
    __syncthreads();
    if (tid == 0) {
        const unsigned before = atomicAdd(tile_arrivals + blockIdx.x, 1u);
        const bool last = before == gridDim.y - 1u;
        if (last) {
            tile_arrivals[blockIdx.x] = 0u;  // every CTA of the tile has arrived: rearm for the next launch
            __threadfence();
        }
        last_of_tile = last ? 1u : 0u;
    }
    __syncthreads();
    if (last_of_tile == 0u) return;

    // ---- 3. mix of the tile: out[o][t0 + tx] = sum_c M[o][c] y[c][t0 + tx]
    {
        MixSmem& sm = smem.mix;
        const int entries = c_out * c_in;
        for (int e = tid; e < entries; e += THREADS) sm.m[e] = __ldg(matrix + e);
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
                    const float* mi = sm.m + o0 * c_in + i;
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
                out[(long long)(o0 + ty) * (long long)n + t] = t < (long long)n_valid ? sum : 0.0f;
            }
            __syncthreads();
        }
    }

    // ---- 4. the last tile to finish flips the history phase for the next launch
    if (tid == 0) {
        __threadfence();
        if (atomicAdd(tiles_done, 1u) == gridDim.x - 1u) {
            *tiles_done = 0u;
            sync[0] = phase ^ 1u;
            __threadfence();
        }
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

// ---------------------------------------------------------------------------------------------
// v2 (the default; see the header): partial mixes per CTA, a fixed-order sum by the tile's last
// CTA, both history copies in the prologue, one grid-wide arrival counter for the phase flip.

namespace {

__device__ __forceinline__ void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;\n" ::: "memory"); }

template <int KT>
struct Fir2Smem {
    __align__(16) float taps[2][CG][KT];
    // [history copy][buffer]: stages 0 and 1 are loaded once per history copy, so no copy waits
    // for the phase flag; later stages load history[phase] into [phase] only.
    __align__(16) float window[2][2][CG][TILE + KT];
    float partial[KSPLIT][CG * TILE];
    float y[CG][TILE];
    float m[MAX_ENTRIES];  // the CTA's columns of M: M[o][c0 + r] at o * cg_here + r
};

// Queue the copies of stage `stage` into buffer `b` of history copies p_lo .. p_hi (the block's
// samples go to each copy, the history samples come from history[p]). As load_stage otherwise.
template <int KT>
__device__ __forceinline__ void load_stage2(Fir2Smem<KT>& sm, int b, int stage, int p_lo, int p_hi,
                                            const float* __restrict__ in,
                                            const float* __restrict__ hist2, long long hist_size,
                                            const float* __restrict__ taps, long long c0,
                                            int cg_here, long long t0, long long n,
                                            long long hist_len, long long tap_row, bool vec_in) {
    const int tid = threadIdx.x;
    const long long k0 = (long long)stage * KT;
    constexpr int TAP_CHUNKS = KT / 4;
    const int tap_rows = tap_row != 0 ? CG : 1;
    for (int q = tid; q < tap_rows * TAP_CHUNKS; q += THREADS) {
        const int r = q / TAP_CHUNKS, j = q - r * TAP_CHUNKS;
        const long long c = c0 + (r < cg_here ? r : cg_here - 1);
        cp_async_16(&sm.taps[b][r][4 * j], taps + c * tap_row + k0 + 4 * j, 16);
    }
    const long long first = t0 - k0 - KT;  // a multiple of 4, >= -hist_len
    constexpr int WIN = TILE + KT;
    if (vec_in) {
        constexpr int CHUNKS = WIN / 4;
        for (int q = tid; q < CG * CHUNKS; q += THREADS) {
            const int r = q / CHUNKS, j = q - r * CHUNKS;
            const long long c = c0 + (r < cg_here ? r : cg_here - 1);
            const long long m = first + 4LL * j;
            for (int p = p_lo; p <= p_hi; ++p) {
                float* dst = &sm.window[p][b][r][4 * j];
                if (m < 0) {
                    cp_async_16(dst, hist2 + p * hist_size + c * hist_len + (hist_len + m), 16);
                } else {
                    const long long left = n - m;
                    const int bytes = left >= 4 ? 16 : (left > 0 ? (int)(left * 4) : 0);
                    const float* in_row = in + c * n;
                    cp_async_16(dst, bytes > 0 ? (const void*)(in_row + m) : (const void*)in_row, bytes);
                }
            }
        }
    } else {
        for (int q = tid; q < CG * WIN; q += THREADS) {
            const int r = q / WIN, j = q - r * WIN;
            const long long c = c0 + (r < cg_here ? r : cg_here - 1);
            const long long m = first + j;
            for (int p = p_lo; p <= p_hi; ++p) {
                float* dst = &sm.window[p][b][r][j];
                if (m < 0) {
                    cp_async_4(dst, hist2 + p * hist_size + c * hist_len + (hist_len + m), 4);
                } else {
                    const bool ok = m < n;
                    const float* in_row = in + c * n;
                    cp_async_4(dst, ok ? in_row + m : in_row, ok ? 4 : 0);
                }
            }
        }
    }
}

template <int KT>
__device__ __forceinline__ void fir_mix2(float* __restrict__ out, const float* __restrict__ in,
                                         float* __restrict__ part, float* __restrict__ hist2,
                                         unsigned* __restrict__ sync,
                                         const float* __restrict__ taps,
                                         const float* __restrict__ matrix, gk_size_t n,
                                         gk_size_t n_valid, gk_size_t hist_len, gk_size_t tap_row,
                                         int stages, int c_in, int c_out) {
    constexpr int SLICE = KT / KSPLIT;
    constexpr int GROUPS = SLICE / 4;
    __shared__ Fir2Smem<KT> sm;
    __shared__ unsigned last_of_tile;

    const int tid = threadIdx.x;
    const long long t0 = (long long)blockIdx.x * TILE;
    const long long c0 = (long long)blockIdx.y * CG;
    const int cg_here = c_in - (int)c0 < CG ? c_in - (int)c0 : CG;
    const unsigned groups = gridDim.y;
    // Issued first, used late: nothing before the first barrier waits for it but the history
    // stores below (whose loads are in flight meanwhile).
    const unsigned phase = *reinterpret_cast<volatile unsigned*>(sync);
    const long long hist_size = (long long)hist_len * c_in;
    const bool vec_in = (n % 4 == 0) && gk_aligned(in, 16);

    // ---- prologue: stages 0 and 1 (both history copies) and the CTA's columns of M, one group
    load_stage2<KT>(sm, 0, 0, 0, 1, in, hist2, hist_size, taps, c0, cg_here, t0, (long long)n,
                    (long long)hist_len, (long long)tap_row, vec_in);
    if (stages > 1)
        load_stage2<KT>(sm, 1, 1, 0, 1, in, hist2, hist_size, taps, c0, cg_here, t0, (long long)n,
                        (long long)hist_len, (long long)tap_row, vec_in);
    for (int e = tid; e < c_out * cg_here; e += THREADS) {
        const int o = e / cg_here, r = e - o * cg_here;
        cp_async_4(&sm.m[e], matrix + (long long)o * c_in + c0 + r, 4);
    }
    cp_async_commit();

    // ---- this CTA's share of the next history (as v1), while the copies are in flight: first
    // the samples that come from the block (loaded without waiting for the phase flag), then
    // those from the old history (only when the history is longer than the block). 32-bit
    // indices within the share: cg_here * len <= 4 * 4096.
    {
        const gk_size_t begin = hist_len * blockIdx.x / gridDim.x;
        const gk_size_t end = hist_len * (blockIdx.x + 1) / gridDim.x;
        const gk_size_t split = hist_len > n ? hist_len - n : 0;  // i < split: old history
        float* next_hist = hist2 + (gk_size_t)(phase ^ 1u) * (gk_size_t)hist_size + c0 * hist_len;
        const gk_size_t b1 = begin > split ? begin : split;
        if (end > b1) {
            const unsigned len = (unsigned)(end - b1);
            const float* src = in + c0 * (long long)n + (b1 + n - hist_len);
            float* dst = next_hist + b1;
#pragma unroll 4
            for (unsigned f = tid; f < (unsigned)cg_here * len; f += THREADS) {
                const unsigned r = f / len, i = f - r * len;
                dst[r * hist_len + i] = src[r * n + i];
            }
        }
        const gk_size_t e0 = end < split ? end : split;
        if (e0 > begin) {
            const unsigned len = (unsigned)(e0 - begin);
            const float* src = hist2 + (gk_size_t)phase * (gk_size_t)hist_size + c0 * hist_len + begin + n;
            float* dst = next_hist + begin;
#pragma unroll 4
            for (unsigned f = tid; f < (unsigned)cg_here * len; f += THREADS) {
                const unsigned r = f / len, i = f - r * len;
                dst[r * hist_len + i] = src[r * hist_len + i];
            }
        }
    }

    // ---- 1. FIR of CG channels x TILE samples: v1's (= the fir op's) arithmetic, same order
    {
        const int og = tid % 16, ks = tid / 16;
        const int cl = og / 4, q = og % 4;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int s = 0; s < stages; ++s) {
            const int b = s & 1;
            // pending groups: stage s, and stage s + 1 when it exists (the prologue holds both 0, 1)
            if (s == 0 || s + 1 >= stages)
                cp_async_wait<0>();
            else
                cp_async_wait<1>();
            __syncthreads();
            const float* xw = sm.window[phase][b][cl];
            const float* hs = sm.taps[b][tap_row != 0 ? cl : 0];
            const int kbase = ks * SLICE;
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
            if (s + 2 < stages) {
                __syncthreads();  // buffer b is refilled with stage s + 2
                load_stage2<KT>(sm, b, s + 2, (int)phase, (int)phase, in, hist2, hist_size, taps,
                                c0, cg_here, t0, (long long)n, (long long)hist_len,
                                (long long)tap_row, vec_in);
                cp_async_commit();
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) sm.partial[ks][4 * og + j] = acc[j];
        __syncthreads();
        if (tid < CG * TILE) {
            float sum = sm.partial[0][tid];
#pragma unroll
            for (int k = 1; k < KSPLIT; ++k) sum += sm.partial[k][tid];
            sm.y[tid / TILE][tid % TILE] = sum;  // partial index TILE * channel + sample
        }
        __syncthreads();
    }

    // ---- 2. this CTA's share of the mix: p[o][tt] = sum_r M[o][c0 + r] y[c0 + r][t0 + tt]
    const bool alone = groups == 1u;  // every channel is here: p is the output
    const gk_size_t tile_stride = (gk_size_t)c_out * TILE;
    float* my_part = part + ((gk_size_t)blockIdx.x * groups + blockIdx.y) * tile_stride;
    for (int e = tid; e < c_out * TILE; e += THREADS) {
        const int o = e / TILE, tt = e % TILE;
        const float* mo = sm.m + o * cg_here;
        float v = 0.0f;
#pragma unroll
        for (int r = 0; r < CG; ++r)
            if (r < cg_here) v = fmaf(mo[r], sm.y[r][tt], v);
        if (alone) {
            const gk_size_t t = (gk_size_t)t0 + tt;
            if (t < n) out[(gk_size_t)o * n + t] = t < n_valid ? v : 0.0f;
        } else {
            my_part[e] = v;
        }
    }

    // ---- 3. arrivals. Every CTA counts itself in the grid counter (the last one flips the
    // phase: each CTA read it at its start) and, with several groups, in its tile's counter.
    __syncthreads();
    if (tid == 32) {
        if (atomicAdd(sync + 1, 1u) == gridDim.x * gridDim.y - 1u) {
            sync[1] = 0u;  // rearmed for the next launch (the kernel boundary orders it)
            sync[0] = phase ^ 1u;
        }
    }
    if (alone) return;
    if (tid == 0) {
        // Release (after the barrier, cumulative: every thread's partials) and, for the last
        // CTA, acquire around a relaxed atomic, as CUTLASS's semaphore does.
        unsigned* arrivals = sync + 2 + blockIdx.x;
        fence_acq_rel_gpu();
        const bool last = atomicAdd(arrivals, 1u) == groups - 1u;
        if (last) {
            fence_acq_rel_gpu();
            *arrivals = 0u;  // rearmed for the next launch
        }
        last_of_tile = last ? 1u : 0u;
    }
    __syncthreads();
    if (last_of_tile == 0u) return;

    // ---- 4. the tile's last CTA: out = sum of the groups' partials, group 0 first (fixed order,
    // whatever the arrival order), read through L2 (written by other SMs)
    const float* tile_part = part + (gk_size_t)blockIdx.x * groups * tile_stride;
    for (int qd = tid; qd < c_out * (TILE / 4); qd += THREADS) {
        const int o = qd / (TILE / 4), qq = qd % (TILE / 4);
        const float* p = tile_part + (gk_size_t)o * TILE + 4 * qq;
        float4 s = __ldcg(reinterpret_cast<const float4*>(p));
#pragma unroll 16
        for (unsigned g = 1; g < groups; ++g) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(p + g * tile_stride));
            s.x += v.x;
            s.y += v.y;
            s.z += v.z;
            s.w += v.w;
        }
        const float sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const gk_size_t t = (gk_size_t)t0 + 4 * qq + j;
            if (t < n) out[(gk_size_t)o * n + t] = t < n_valid ? sv[j] : 0.0f;
        }
    }
}

}  // namespace

// v2, grid (ceil(n / 16), ceil(c_in / 4)), block 128. The arguments of v1 but `part` in place of
// `y`: the groups' partial mixes (ceil(n / 16), groups, c_out, 16), unused (may be 0) with one
// group; sync: {phase, grid arrivals, one arrival counter per tile}, zero at the start, rearmed
// by every launch.
#define GK_FIR_MIX2(NAME, KT)                                                                    \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME(                                  \
        float* out, const float* in, float* part, float* hist2, unsigned* sync,                  \
        const float* taps, const float* matrix, gk_size_t n, gk_size_t n_valid,                  \
        gk_size_t hist_len, gk_size_t tap_row, int stages, int c_in, int c_out) {                \
        fir_mix2<KT>(out, in, part, hist2, sync, taps, matrix, n, n_valid, hist_len, tap_row,    \
                     stages, c_in, c_out);                                                       \
    }

GK_FIR_MIX2(gk_fir_mix2_k32, 32)
GK_FIR_MIX2(gk_fir_mix2_k128, 128)
