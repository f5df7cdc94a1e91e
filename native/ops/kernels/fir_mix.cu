// Fused fir -> mix (op kind "fir_mix", native/ops/fir_mix.cpp) for real float32 input, real
// taps and a real (C_out, C_in) matrix with C_out * C_in <= 4096, in ONE launch per block:
//
//     y[c][t]   = sum_k h[c][k] x[c][t - k]        (streaming: x before t = 0 is the history)
//     out[o][t] = sum_c M[o][c] y[c][t]
//
// Why this shape: W1 (64 ch x 256 samples, 256 taps, 16 x 64 mix) is latency-bound; the FIR is
// 4.2 M multiply-adds, the mix 0.26 M. Two launches cost a few microseconds of launch gap on the
// block's critical path; one launch removes it. A CTA per time tile over *all* channels would
// give only 256 / 16 = 16 CTAs for W1 (16 of 132 SMs busy for the whole FIR; a variant measured
// on the H100 on 2026-11-22 was not faster: docs/cuda.md), so the FIR is split over (time tile,
// group of channels) like the fir op, and the groups of a tile meet for the mix. Two kernels
// differ in how they meet (this file: split; fir_mix_cluster.cu: cluster; the FIR both run, in
// fir_mix_common.cuh):
//
// * split (any C_in, SM 8.0+): groups of CG = 4 channels, 128 threads. Each CTA stores its y to
//   a scratch (C_in, n) in global memory (L2-resident: 64 KiB for W1), fences, and bumps the
//   tile's arrival counter; the last CTA of the tile to arrive reads the tile of y back through
//   L2 (cp.async.cg / ld.global.cg: L1 is not coherent, and a tile shares its 128-byte lines
//   with its neighbours, whose last CTAs may run on the same SM) and mixes it like the mix op's
//   kernel (kernels/mix.cu): thread (tx, ty) = (tid % 16, tid / 16) sums channels ty, ty+8, ...
//   for 8 output rows at a time (fmaf chain), and the 8 slices are added in order: the same
//   order as the mix op, so the output equals fir -> mix bit for bit on the same GPU. Every CTA
//   copies all of M into shared memory (which CTA is last is known only after the FIR).
//   No spin-wait on other CTAs (no co-residency assumption); every CTA but one per tile ends
//   right after its FIR.
// * cluster (C_in <= 64, SM 9.0+): groups of CG = 8 channels, 256 threads, the (at most 8)
//   groups of a time tile in one thread-block cluster (padded to 1, 2, 4 or 8 CTAs; padding
//   CTAs only join the barriers). Each CTA mixes its own channels (a share: an fmaf chain over
//   its channels in order, from its columns of M) and stores the share into the shared memory
//   of the cluster's CTA 0 (distributed shared memory); after one cluster barrier CTA 0 adds the
//   shares in group order and writes the output. No scratch, fence, arrival atomic or L2 round
//   trip on the critical path: W1's kernel takes 5.2 us against the split kernel's 6.9 (H100,
//   2026-11-22, 1e6f84a). The sums are in another order than the mix op's: fir -> mix within
//   float32 rounding, not bit for bit.
//
// Grid (ceil(n / TILE), groups), CG * 32 threads. CTA (x, g):
// 1. FIR for channels c0 = g*CG ... c0+CG-1 (fewer in the last group) and outputs
//    t0 = x*TILE ... t0+TILE-1: exactly the fir op's direct kernel (kernels/fir.cu) with its
//    outputs re-cut as CG channels x 16 samples: taps walked in stages of KT (32 or 128, the
//    device taps zero-padded to a multiple of KT), each stage's taps and input windows copied to
//    shared memory with cp.async, double-buffered; thread (og, ks) = (tid % 4CG, tid / 4CG) owns
//    outputs 4q .. 4q+3 (q = og % 4) of channel og / 4 and the tap slice ks of every stage, with
//    the same 8-sample register window and the same summation order (stage, group, tap; then the
//    8 slices in order), so y is bit-identical to what the fir op writes. M (or the CTA's
//    columns of it) is copied in a cp.async group of its own after stage 0's: only the last
//    stage waits for it.
// 2. The mix, as the kernel's bullet above says.
// 3. History: like the fir op, two copies on the device and a phase flag: the launch reads
//    history[phase] and writes the next history (the last hist_len samples of [history | block])
//    into history[phase ^ 1]. CTA (x, g) writes, for channels c0.., the block samples of its own
//    tile (from its stage-0 window in shared memory: no global load on the critical path) and,
//    when the block is shorter than the history, its even share of the part that shifts
//    (keep_history). A count of CTAs (split: of tiles, taken by each tile's last CTA; cluster:
//    of CTAs, taken after the first barrier) tells the CTA that completes it that every CTA has
//    read the phase: it flips the phase for the next launch (stream order: that one starts after
//    this one ends).
// Final partial block: columns t >= n_valid of the output are written as 0 (the fir op zeroes
// its output past n_in and the mix then mixes zeros), so no zero_after launch is needed.
#include "fir_mix_common.cuh"

namespace {

constexpr int MIX_ROWS = 8;  // output rows per pass of the split kernel's mix (the mix op's kRows)
constexpr int Y_STAGE = 64;  // C_in up to this: the split kernel stages the tile of y in shared memory

// A float another CTA of this launch wrote: read through L2 (never a stale L1 line).
__device__ __forceinline__ float load_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];\n" : "=f"(v) : "l"(p));
    return v;
}

struct MixSmem {
    __align__(16) float y[Y_STAGE][TILE];
    // [row][slice * TILE + column], rows padded by TILE floats: the slice writes and the row
    // reads of a warp (two slices / two rows) fall in different banks.
    float partial[MIX_ROWS][MIX_ROWS * TILE + TILE];
};

// The FIR buffers are dead when the mix starts (a barrier in between): share the memory.
template <int KT>
union SplitSmem {
    FirSmem<KT, 4> fir;
    MixSmem mix;
};

// ---- The split kernel (any C_in; every SM generation): CTAs (time tile x, group g of 4
// channels), 128 threads; the last CTA of a tile to finish mixes it.
template <int KT>
__device__ __forceinline__ void fir_mix_split(float* __restrict__ out, const float* __restrict__ in,
                                              float* __restrict__ y, float* __restrict__ hist2,
                                              unsigned* __restrict__ sync,
                                              const float* __restrict__ taps,
                                              const float* __restrict__ matrix, gk_size_t n,
                                              gk_size_t n_valid, gk_size_t hist_len, gk_size_t tap_row,
                                              int stages, int c_in, int c_out, unsigned tile0,
                                              unsigned tiles_total) {
    constexpr int CG = 4, THREADS = CG * 32;
    __shared__ SplitSmem<KT> smem;
    // M is copied in by every CTA (only the tile's last CTA uses it, but which CTA is last is
    // known only after the FIR, and a copy then would be one more L2 round trip on the block's
    // critical path).
    __shared__ __align__(16) float m_sh[MAX_ENTRIES];
    __shared__ unsigned last_of_tile;

    const int tid = threadIdx.x;
    const unsigned tile = tile0 + blockIdx.x;  // this CTA's time tile in the whole block
    const long long t0 = (long long)tile * TILE;
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
    const float yv = fir_tile<KT, CG>(
        smem.fir,
        [&] {
            const int entries = c_out * c_in;
            if (entries % 4 == 0 && gk_aligned(matrix, 16)) {
                for (int e = tid; e < entries / 4; e += THREADS) gk_cp_async_16(m_sh + 4 * e, matrix + 4 * e, 16);
            } else {
                for (int e = tid; e < entries; e += THREADS) gk_cp_async_4(m_sh + e, matrix + e, 4);
            }
        },
        [] {}, in, hist, next_hist, taps, c0, cg_here, t0, n, hist_len, tap_row, stages, vec_in);
    if (tid < CG * TILE) {
        const int r = tid / TILE;
        const long long t = t0 + tid % TILE;
        if (r < cg_here && t < (long long)n) y[(c0 + r) * (long long)n + t] = yv;
    }
    keep_history(next_hist, hist, c0, cg_here, n, hist_len, tile, tiles_total);

    // ---- 2. hand y over: the last CTA of this time tile mixes it
    __threadfence();  // this thread's y and history stores, device-wide, before the arrival
    __syncthreads();
    unsigned tiles_before = 0u;
    if (tid == 0) {
        const unsigned before = atomicAdd(tile_arrivals + tile, 1u);
        const bool last = before == gridDim.y - 1u;
        if (last) {
            tile_arrivals[tile] = 0u;  // every CTA of the tile has arrived: rearm for the next launch
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
        if (staged && vec_in) {
            // the whole tile of y in flight at once (rows 16-byte aligned: n % 4 == 0), read
            // through L2 (cp.async.cg); columns past the block's end zero-filled
            constexpr int CHUNKS = TILE / 4;
            for (int f = tid; f < c_in * CHUNKS; f += THREADS) {
                const int i = f / CHUNKS, j = f - i * CHUNKS;
                const long long t = t0 + 4 * j;
                const long long left = (long long)n - t;
                const int bytes = left >= 4 ? 16 : (left > 0 ? (int)(left * 4) : 0);
                gk_cp_async_16(&sm.y[i][4 * j], bytes > 0 ? (const void*)(y + i * (long long)n + t) : (const void*)y,
                            bytes);
            }
            gk_cp_async_commit();
            gk_cp_async_wait<0>();
        } else if (staged) {
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
    if (tid == 0 && tiles_before == tiles_total - 1u) {
        *tiles_done = 0u;
        sync[0] = phase ^ 1u;
    }
}

}  // namespace

// Split kernel: grid (ceil(n / 16), ceil(c_in / 4)), block 128. out (c_out, n); in (c_in, n);
// y: scratch (c_in, n); hist2: two histories of (c_in, hist_len), hist_len = taps padded to a
// multiple of KT; sync: {phase, tiles done, one arrival counter per tile}, zero at the start and
// rearmed by every launch; taps (1 or c_in rows of hist_len, zero-padded), tap_row = hist_len for
// per-channel taps, 0 for shared taps; stages = hist_len / KT; matrix (c_out, c_in),
// c_out * c_in <= 4096; out columns from n_valid on are written as zeros; the launch runs time
// tiles [tile0, tile0 + gridDim.x) of the block's tiles_total (the whole block: 0, ceil(n / 16);
// a range is a chunk of the scheduler's units: the launches of one block's ranges, in stream
// order, do what one launch over all tiles does).
#define GK_FIR_MIX(NAME, KT)                                                                     \
    extern "C" __global__ void __launch_bounds__(128) NAME(                                      \
        float* out, const float* in, float* y, float* hist2, unsigned* sync, const float* taps,  \
        const float* matrix, gk_size_t n, gk_size_t n_valid, gk_size_t hist_len,                 \
        gk_size_t tap_row, int stages, int c_in, int c_out, unsigned tile0,                      \
        unsigned tiles_total) {                                                                  \
        fir_mix_split<KT>(out, in, y, hist2, sync, taps, matrix, n, n_valid, hist_len, tap_row,  \
                          stages, c_in, c_out, tile0, tiles_total);                              \
    }

GK_FIR_MIX(gk_fir_mix_k32, 32)
GK_FIR_MIX(gk_fir_mix_k128, 128)
