// Fused fir -> mix (op kind "fir_mix", native/ops/fir_mix.cpp) for real float32 input, real
// taps and a real (C_out, C_in) matrix with C_out * C_in <= 4096, in ONE launch per block:
//
//     y[c][t]   = sum_k h[c][k] x[c][t - k]        (streaming: x before t = 0 is the history)
//     out[o][t] = sum_c M[o][c] y[c][t]
//
// Why this shape: W1 (64 ch x 256 samples, 256 taps, 16 x 64 mix) is latency-bound; the FIR is
// 4.2 M multiply-adds, the mix 0.26 M. Two launches cost a few microseconds of launch gap on the
// block's critical path; one launch removes it. A CTA per time tile over *all* channels would
// give only 256 / 16 = 16 CTAs for W1 (16 of 132 SMs busy for the whole FIR; session 5 measured
// a variant of it: not faster), so the FIR is split over (time tile, group of channels) like the
// fir op, and the groups of a tile meet for the mix. Two kernels differ in how they meet:
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
//   session 5). The sums are in another order than the mix op's: fir -> mix within float32
//   rounding, not bit for bit.
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
#include "gk_common.cuh"

namespace {

constexpr int TILE = 16;         // output samples per CTA
constexpr int KSPLIT = 8;        // tap slices per stage
constexpr int MIX_ROWS = 8;      // output rows per pass of the split kernel's mix (the mix op's kRows)
constexpr int Y_STAGE = 64;      // C_in up to this: the split kernel stages the tile of y in shared memory
constexpr int MAX_ENTRIES = 4096;  // C_out * C_in (M, or a CTA's columns of it, in shared memory)

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
                if (own) cp_async_16(dst, hist + c * hist_len + (hist_len + m), 16);
            } else if (block) {
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
                if (own) cp_async_4(dst, hist + c * hist_len + (hist_len + m), 4);
            } else if (block) {
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
    cp_async_commit();
    for (int s = 0; s < stages; ++s) {
        const int b = s & 1;
        if (s + 1 < stages) {
            load_stage<KT, CG>(sm, b ^ 1, s + 1, in, hist, taps, c0, cg_here, t0, (long long)n,
                               (long long)hist_len, (long long)tap_row, vec_in);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
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

// ---- The split kernel (any C_in; every SM generation): CTAs (time tile x, group g of 4
// channels), 128 threads; the last CTA of a tile to finish mixes it.
template <int KT>
__device__ __forceinline__ void fir_mix_split(float* __restrict__ out, const float* __restrict__ in,
                                              float* __restrict__ y, float* __restrict__ hist2,
                                              unsigned* __restrict__ sync,
                                              const float* __restrict__ taps,
                                              const float* __restrict__ matrix, gk_size_t n,
                                              gk_size_t n_valid, gk_size_t hist_len, gk_size_t tap_row,
                                              int stages, int c_in, int c_out) {
    constexpr int CG = 4, THREADS = CG * 32;
    __shared__ SplitSmem<KT> smem;
    // M is copied in by every CTA (only the tile's last CTA uses it, but which CTA is last is
    // known only after the FIR, and a copy then would be one more L2 round trip on the block's
    // critical path).
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
    const float yv = fir_tile<KT, CG>(
        smem.fir,
        [&] {
            const int entries = c_out * c_in;
            if (entries % 4 == 0 && gk_aligned(matrix, 16)) {
                for (int e = tid; e < entries / 4; e += THREADS) cp_async_16(m_sh + 4 * e, matrix + 4 * e, 16);
            } else {
                for (int e = tid; e < entries; e += THREADS) cp_async_4(m_sh + e, matrix + e, 4);
            }
        },
        [] {}, in, hist, next_hist, taps, c0, cg_here, t0, n, hist_len, tap_row, stages, vec_in);
    if (tid < CG * TILE) {
        const int r = tid / TILE;
        const long long t = t0 + tid % TILE;
        if (r < cg_here && t < (long long)n) y[(c0 + r) * (long long)n + t] = yv;
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
        if (staged && vec_in) {
            // the whole tile of y in flight at once (rows 16-byte aligned: n % 4 == 0), read
            // through L2 (cp.async.cg); columns past the block's end zero-filled
            constexpr int CHUNKS = TILE / 4;
            for (int f = tid; f < c_in * CHUNKS; f += THREADS) {
                const int i = f / CHUNKS, j = f - i * CHUNKS;
                const long long t = t0 + 4 * j;
                const long long left = (long long)n - t;
                const int bytes = left >= 4 ? 16 : (left > 0 ? (int)(left * 4) : 0);
                cp_async_16(&sm.y[i][4 * j], bytes > 0 ? (const void*)(y + i * (long long)n + t) : (const void*)y,
                            bytes);
            }
            cp_async_commit();
            cp_async_wait<0>();
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
    if (tid == 0 && tiles_before == gridDim.x - 1u) {
        *tiles_done = 0u;
        sync[0] = phase ^ 1u;
    }
}

#if __CUDA_ARCH__ >= 900
// ---- The cluster kernel (SM 9.0+, C_in <= 64): CTAs (time tile x, group g of 8 channels),
// 256 threads, the CL groups of a tile in one thread-block cluster. Each CTA mixes its own
// channels (a share: sum over r of M[o][c0 + r] y[c0 + r][t], an fmaf chain in channel order),
// stores the share into the shared memory of the cluster's CTA 0 (distributed shared memory),
// and CTA 0 adds the shares up in group order after the cluster barrier. No scratch in global
// memory, no fence, no arrival atomic, no reload through L2 on the critical path.
__device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_release() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// v into the shared memory of the cluster's CTA `rank`, at the address `local` has here.
__device__ __forceinline__ void store_to_cta(float* local, unsigned rank, float v) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}

template <int KT>
__device__ __forceinline__ void fir_mix_cluster(float* __restrict__ out, const float* __restrict__ in,
                                                float* __restrict__ hist2, unsigned* __restrict__ sync,
                                                const float* __restrict__ taps,
                                                const float* __restrict__ matrix, gk_size_t n,
                                                gk_size_t n_valid, gk_size_t hist_len,
                                                gk_size_t tap_row, int stages, int c_in, int c_out) {
    constexpr int CG = 8, THREADS = CG * 32;
    __shared__ FirSmem<KT, CG> sm;
    __shared__ __align__(16) float m_sh[MAX_ENTRIES];  // M[o][c0 + r] at o * cgs + r
    __shared__ float y_sh[CG][TILE];
    extern __shared__ float shares[];  // [CTAs per cluster][c_out * TILE]: used in the cluster's CTA 0

    // Arrive now, wait before the first store into CTA 0: every CTA of the cluster has started.
    cluster_arrive_relaxed();
    const int tid = threadIdx.x;
    const unsigned rank = cluster_rank();
    const long long t0 = (long long)blockIdx.x * TILE;
    const long long c0 = (long long)blockIdx.y * CG;
    const int cg_here = c_in - (int)c0 < CG ? c_in - (int)c0 : CG;  // <= 0: a CTA padding the cluster
    const int cgs = c_in < CG ? c_in : CG;  // row stride of m_sh
    const unsigned phase = *reinterpret_cast<volatile unsigned*>(sync);
    const gk_size_t hist_size = hist_len * (gk_size_t)c_in;
    const float* hist = hist2 + (gk_size_t)phase * hist_size;
    float* next_hist = hist2 + (gk_size_t)(phase ^ 1u) * hist_size;
    unsigned* ctas_done = sync + 1;
    const bool vec_in = (n % 4 == 0) && gk_aligned(in, 16);
    const int tile_items = c_out * TILE;
    unsigned counted_before = 0u;

    if (cg_here > 0) {
        const float yv = fir_tile<KT, CG>(
            sm,
            [&] {
                if (cg_here == CG && c_in % 4 == 0 && gk_aligned(matrix, 16)) {
                    for (int e = tid; e < c_out * (CG / 4); e += THREADS) {
                        const int o = e / (CG / 4), j = e - o * (CG / 4);
                        cp_async_16(m_sh + o * cgs + 4 * j, matrix + o * c_in + c0 + 4 * j, 16);
                    }
                } else {
                    for (int e = tid; e < c_out * cg_here; e += THREADS) {
                        const int o = e / cg_here, r = e - o * cg_here;
                        cp_async_4(m_sh + o * cgs + r, matrix + o * c_in + c0 + r, 4);
                    }
                }
            },
            [&] {
                // Every thread of this CTA has read the phase: count the CTA (the result is
                // needed only at the end); once every CTA has counted, the last may flip it.
                if (tid == 0) counted_before = atomicAdd(ctas_done, 1u);
            },
            in, hist, next_hist, taps, c0, cg_here, t0, n, hist_len, tap_row, stages, vec_in);
        if (tid < CG * TILE) y_sh[tid / TILE][tid % TILE] = yv;
        __syncthreads();
        cluster_wait();  // every CTA of the cluster has started: CTA 0's shared memory is there
        for (int f = tid; f < tile_items; f += THREADS) {
            const int o = f / TILE, tt = f - o * TILE;
            float acc = 0.0f;
            for (int r = 0; r < cg_here; ++r) acc = fmaf(m_sh[o * cgs + r], y_sh[r][tt], acc);
            store_to_cta(shares + rank * tile_items + f, 0u, acc);
        }
        keep_history(next_hist, hist, c0, cg_here, n, hist_len);
    } else {
        if (tid == 0) counted_before = atomicAdd(ctas_done, 1u);
        cluster_wait();
    }
    cluster_arrive_release();  // the shares stored, visible to CTA 0 after its wait
    cluster_wait();
    if (tid == 0 && counted_before == gridDim.x * gridDim.y - 1u) {
        *ctas_done = 0u;  // every CTA has read the phase: flip it for the next launch
        sync[0] = phase ^ 1u;
    }
    if (rank != 0u) return;

    // CTA 0: out[o][t] = the shares added in group order
    const int groups = (c_in + CG - 1) / CG;
    for (int f = tid; f < tile_items; f += THREADS) {
        const int o = f / TILE, tt = f - o * TILE;
        const long long t = t0 + tt;
        if (t >= (long long)n) continue;
        float sum = shares[f];
        for (int g = 1; g < groups; ++g) sum += shares[g * tile_items + f];
        // write-through: `out` may be mapped host memory (Op::writes_output_once)
        __stwt(out + (long long)o * (long long)n + t, t < (long long)n_valid ? sum : 0.0f);
    }
}
#endif

}  // namespace

// Split kernel: grid (ceil(n / 16), ceil(c_in / 4)), block 128. out (c_out, n); in (c_in, n);
// y: scratch (c_in, n); hist2: two histories of (c_in, hist_len), hist_len = taps padded to a
// multiple of KT; sync: {phase, tiles done, one arrival counter per tile}, zero at the start and
// rearmed by every launch; taps (1 or c_in rows of hist_len, zero-padded), tap_row = hist_len for
// per-channel taps, 0 for shared taps; stages = hist_len / KT; matrix (c_out, c_in),
// c_out * c_in <= 4096; out columns from n_valid on are written as zeros.
#define GK_FIR_MIX(NAME, KT)                                                                     \
    extern "C" __global__ void __launch_bounds__(128) NAME(                                      \
        float* out, const float* in, float* y, float* hist2, unsigned* sync, const float* taps,  \
        const float* matrix, gk_size_t n, gk_size_t n_valid, gk_size_t hist_len,                 \
        gk_size_t tap_row, int stages, int c_in, int c_out) {                                    \
        fir_mix_split<KT>(out, in, y, hist2, sync, taps, matrix, n, n_valid, hist_len, tap_row,  \
                          stages, c_in, c_out);                                                  \
    }

GK_FIR_MIX(gk_fir_mix_k32, 32)
GK_FIR_MIX(gk_fir_mix_k128, 128)

#if __CUDA_ARCH__ >= 900
// Cluster kernel (SM 9.0+): grid (ceil(n / 16), CL), block 256, launched in clusters of (1, CL, 1)
// (cuLaunchKernelEx; CL a power of two >= ceil(c_in / 8), at most 8: CTAs past the last channel
// only join the barriers); dynamic shared memory CL * c_out * 16 floats; sync: {phase, CTAs
// done}; the other arguments as above.
#define GK_FIR_MIX_CLUSTER(NAME, KT)                                                             \
    extern "C" __global__ void __launch_bounds__(256) NAME(                                      \
        float* out, const float* in, float* hist2, unsigned* sync, const float* taps,            \
        const float* matrix, gk_size_t n, gk_size_t n_valid, gk_size_t hist_len,                 \
        gk_size_t tap_row, int stages, int c_in, int c_out) {                                    \
        fir_mix_cluster<KT>(out, in, hist2, sync, taps, matrix, n, n_valid, hist_len, tap_row,   \
                            stages, c_in, c_out);                                                \
    }

GK_FIR_MIX_CLUSTER(gk_fir_mix_cluster_k32, 32)
GK_FIR_MIX_CLUSTER(gk_fir_mix_cluster_k128, 128)
#endif
