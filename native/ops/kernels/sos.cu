// Streaming IIR filter in second-order sections, as scipy.signal.sosfilt computes it (direct
// form II transposed, float64), with the section state carried across blocks on the device.
//
// One thread per "lane": a real channel, or one component (re or im) of a complex channel; the
// coefficients are real, so the real and imaginary parts filter independently (sosfilt in
// complex128 gives the same numbers). A CTA is one warp of 32 lanes. The block is walked in
// chunks of 32 samples: the warp stages a 32 x 32 tile through shared memory (coalesced loads
// and stores, converted to double), then each thread runs its lane's 32 samples through every
// section, 8 sections at a time with their state in registers:
//     y  = b0*x + z0
//     z0 = b1*x - a1*y + z1
//     z1 = b2*x - a2*y
// State layout: zi[(s*2 + k) * lanes + lane] (double), zero at the start of a stream.
#include "gk_common.cuh"

namespace {

constexpr int LANES = 32;
constexpr int CHUNK = 32;
constexpr int GROUP = 8;  // sections whose state sits in registers at once

// element (lane, n) of the input/output: real rows of n floats, or complex rows viewed as floats
__device__ __forceinline__ gk_size_t lane_index(gk_size_t lane, gk_size_t t, gk_size_t n,
                                                bool complex_data) {
    return complex_data ? (lane >> 1) * 2 * n + 2 * t + (lane & 1) : lane * n + t;
}

// Samples [t_begin, t_end) of every lane (the whole block: 0, n; t_begin a multiple of CHUNK). The
// state is read from zi at the start and written back at the end, so consecutive ranges in
// stream order do exactly what one launch over the block does (a chunk of the scheduler's units).
__device__ __forceinline__ void sos_block(float* __restrict__ out, const float* __restrict__ in,
                                          double* __restrict__ zi,
                                          const double* __restrict__ coef, int sections,
                                          gk_size_t n, gk_size_t lanes, gk_size_t t_begin,
                                          gk_size_t t_end, bool complex_data) {
    extern __shared__ double sos_shared[];
    double* c = sos_shared;                        // [sections][5]: b0 b1 b2 a1 a2
    double (*tile)[CHUNK + 1] = reinterpret_cast<double (*)[CHUNK + 1]>(sos_shared + 5 * sections);

    const int t = threadIdx.x;
    for (int i = t; i < 5 * sections; i += LANES) c[i] = coef[i];
    const gk_size_t lane0 = (gk_size_t)blockIdx.x * LANES;
    const gk_size_t my_lane = lane0 + t;
    const bool active = my_lane < lanes;
    const int groups = (sections + GROUP - 1) / GROUP;
    __syncwarp();

    double z0[GROUP], z1[GROUP];
    // With one group the state stays in registers for the whole block.
    if (groups == 1 && active) {
#pragma unroll
        for (int s = 0; s < GROUP; ++s)
            if (s < sections) {
                z0[s] = zi[(2 * s) * lanes + my_lane];
                z1[s] = zi[(2 * s + 1) * lanes + my_lane];
            }
    }

    for (gk_size_t n0 = t_begin; n0 < t_end; n0 += CHUNK) {
        const int count = (int)((t_end - n0) < (gk_size_t)CHUNK ? (t_end - n0) : (gk_size_t)CHUNK);
        for (int r = 0; r < LANES; ++r) {
            const gk_size_t lane = lane0 + r;
            double v = 0.0;
            if (lane < lanes && t < count) v = (double)in[lane_index(lane, n0 + t, n, complex_data)];
            tile[r][t] = v;
        }
        __syncwarp();
        if (active) {
            for (int g = 0; g < groups; ++g) {
                const int s0 = g * GROUP;
                if (groups > 1) {
#pragma unroll
                    for (int s = 0; s < GROUP; ++s)
                        if (s0 + s < sections) {
                            z0[s] = zi[(2 * (s0 + s)) * lanes + my_lane];
                            z1[s] = zi[(2 * (s0 + s) + 1) * lanes + my_lane];
                        }
                }
                for (int k = 0; k < count; ++k) {
                    double x = tile[t][k];
#pragma unroll
                    for (int s = 0; s < GROUP; ++s) {
                        if (s0 + s < sections) {
                            const double* cs = c + 5 * (s0 + s);
                            const double y = fma(cs[0], x, z0[s]);
                            z0[s] = fma(cs[1], x, fma(-cs[3], y, z1[s]));
                            z1[s] = fma(cs[2], x, -cs[4] * y);
                            x = y;
                        }
                    }
                    tile[t][k] = x;
                }
                if (groups > 1) {
#pragma unroll
                    for (int s = 0; s < GROUP; ++s)
                        if (s0 + s < sections) {
                            zi[(2 * (s0 + s)) * lanes + my_lane] = z0[s];
                            zi[(2 * (s0 + s) + 1) * lanes + my_lane] = z1[s];
                        }
                }
            }
        }
        __syncwarp();
        for (int r = 0; r < LANES; ++r) {
            const gk_size_t lane = lane0 + r;
            if (lane < lanes && t < count)
                out[lane_index(lane, n0 + t, n, complex_data)] = (float)tile[r][t];
        }
        __syncwarp();
    }

    if (groups == 1 && active) {
#pragma unroll
        for (int s = 0; s < GROUP; ++s)
            if (s < sections) {
                zi[(2 * s) * lanes + my_lane] = z0[s];
                zi[(2 * s + 1) * lanes + my_lane] = z1[s];
            }
    }
}

}  // namespace

// grid ceil(lanes / 32), block 32, dynamic shared memory (5 * sections + 32 * 33) doubles.
// lanes = channels (float32) or 2 * channels (complex64, `in`/`out` viewed as floats); samples
// [t_begin, t_end) of each lane (the whole block: 0, n).
extern "C" __global__ void __launch_bounds__(32) gk_sos_f32(float* out, const float* in, double* zi,
                                                            const double* coef, int sections,
                                                            gk_size_t n, gk_size_t lanes,
                                                            gk_size_t t_begin, gk_size_t t_end) {
    sos_block(out, in, zi, coef, sections, n, lanes, t_begin, t_end, false);
}

extern "C" __global__ void __launch_bounds__(32) gk_sos_c64(float* out, const float* in, double* zi,
                                                            const double* coef, int sections,
                                                            gk_size_t n, gk_size_t lanes,
                                                            gk_size_t t_begin, gk_size_t t_end) {
    sos_block(out, in, zi, coef, sections, n, lanes, t_begin, t_end, true);
}

// ---------------------------------------------------------------------------------------------
// Parallel scan along time, for few lanes and long blocks (the kernels above walk each lane's
// block in one thread and would leave the GPU idle). At most 8 sections: the cascade is a
// linear system in a state of 2 * sections values (zero-padded to SCAN_STATE), so over a chunk
// the final state is PHI * (start state) + (the chunk's final state from a zero start). With the
// block cut into chunks of `chunk` samples and the chunks into groups of `per_group`:
//   1. gk_sos_scan_local: every chunk filtered from a zero state: its final state zf;
//   2. gk_sos_scan_groups: per group, s <- PHI s + zf[c] over its chunks from zero: agg;
//   3. gk_sos_scan_top: per lane, the true start state of each group (gstart), from the stream's
//      state zi and s <- PHI_GROUP s + agg[g];
//   4. gk_sos_scan_starts: per group, from gstart, the true start state of each chunk (starts);
//   5. gk_sos_scan_apply: every chunk filtered again from its start state, writing the output;
//      the last chunk's final state goes back to zi.
// PHI = A^chunk and PHI_GROUP = A^(chunk * per_group) (A: one sample's state transition with zero
// input) come from the host in float64 (pygpukit_dsp/backends/cuda_ops/sos_scan.py).
// Layouts: zf, starts (lanes, chunks, SCAN_STATE); agg, gstart (lanes, groups, SCAN_STATE);
// phi (SCAN_STATE, SCAN_STATE), row i = new state value i.
namespace {
constexpr int SCAN_SECTIONS = 8;
constexpr int SCAN_STATE = 2 * SCAN_SECTIONS;
constexpr int SCAN_ROWS = 32;    // chunks per CTA in steps 1 and 5 (one warp, a chunk a thread)
constexpr int SCAN_WALKERS = 8;  // half-warps per CTA in steps 2-4 (128 threads)
constexpr int SCAN_BATCH = 8;    // rows of `add` loaded ahead by a walker

__device__ __forceinline__ gk_size_t min_size(gk_size_t a, gk_size_t b) { return a < b ? a : b; }

// Steps 1 (APPLY false) and 5 (APPLY true) over chunks [c_begin, c_end) of every lane: thread t
// of CTA b takes row q = 32 b + t, i.e. chunk c_begin + q % span of lane q / span. The warp
// stages its 32 chunks 32 samples at a time through shared memory as sos_block does (coalesced
// loads and stores), and each thread runs its chunk's samples through the cascade.
template <bool APPLY>
__device__ __forceinline__ void scan_chunks(float* __restrict__ out, double* __restrict__ state_out,
                                            const double* __restrict__ starts,
                                            const float* __restrict__ in,
                                            const double* __restrict__ coef, int sections,
                                            gk_size_t n, gk_size_t lanes, gk_size_t chunk,
                                            gk_size_t chunks, bool complex_data, gk_size_t c_begin,
                                            gk_size_t c_end) {
    __shared__ double c[5 * SCAN_SECTIONS];
    __shared__ double tile[SCAN_ROWS][CHUNK + 1];
    __shared__ gk_size_t row_lane[SCAN_ROWS], row_t0[SCAN_ROWS], row_len[SCAN_ROWS];

    const int t = threadIdx.x;
    for (int i = t; i < 5 * sections; i += SCAN_ROWS) c[i] = coef[i];
    const gk_size_t span = c_end - c_begin;
    const gk_size_t q = (gk_size_t)blockIdx.x * SCAN_ROWS + t;
    const bool active = q < lanes * span;
    gk_size_t lane = 0, ch = 0, len = 0;
    if (active) {
        lane = q / span;
        ch = c_begin + (q - lane * span);
        len = min_size(chunk, n - ch * chunk);
    }
    row_lane[t] = lane;
    row_t0[t] = ch * chunk;
    row_len[t] = len;  // 0 for a row past the last chunk: nothing loaded or stored
    const gk_size_t idx = lane * chunks + ch;

    double z0[SCAN_SECTIONS], z1[SCAN_SECTIONS];
#pragma unroll
    for (int s = 0; s < SCAN_SECTIONS; ++s) {
        z0[s] = APPLY && active && s < sections ? starts[idx * SCAN_STATE + 2 * s] : 0.0;
        z1[s] = APPLY && active && s < sections ? starts[idx * SCAN_STATE + 2 * s + 1] : 0.0;
    }
    __syncwarp();

    for (gk_size_t n0 = 0; n0 < chunk; n0 += CHUNK) {
        for (int r = 0; r < SCAN_ROWS; ++r) {
            const gk_size_t k = n0 + t;
            double v = 0.0;
            if (k < row_len[r]) v = (double)in[lane_index(row_lane[r], row_t0[r] + k, n, complex_data)];
            tile[r][t] = v;
        }
        __syncwarp();
        const int count = len > n0 ? (int)min_size(len - n0, (gk_size_t)CHUNK) : 0;
        for (int k = 0; k < count; ++k) {
            double x = tile[t][k];
#pragma unroll
            for (int s = 0; s < SCAN_SECTIONS; ++s) {
                if (s < sections) {
                    const double* cs = c + 5 * s;
                    const double y = fma(cs[0], x, z0[s]);
                    z0[s] = fma(cs[1], x, fma(-cs[3], y, z1[s]));
                    z1[s] = fma(cs[2], x, -cs[4] * y);
                    x = y;
                }
            }
            if (APPLY) tile[t][k] = x;
        }
        __syncwarp();
        if (APPLY) {
            for (int r = 0; r < SCAN_ROWS; ++r) {
                const gk_size_t k = n0 + t;
                if (k < row_len[r])
                    out[lane_index(row_lane[r], row_t0[r] + k, n, complex_data)] = (float)tile[r][t];
            }
            __syncwarp();
        }
    }

    if (!active) return;
    if (!APPLY) {
        double* dst = state_out + idx * SCAN_STATE;
#pragma unroll
        for (int s = 0; s < SCAN_SECTIONS; ++s) {
            dst[2 * s] = s < sections ? z0[s] : 0.0;
            dst[2 * s + 1] = s < sections ? z1[s] : 0.0;
        }
    } else if (ch + 1 == chunks) {  // the block's last chunk: the stream's state
#pragma unroll
        for (int s = 0; s < SCAN_SECTIONS; ++s)
            if (s < sections) {
                state_out[(gk_size_t)(2 * s) * lanes + lane] = z0[s];
                state_out[(gk_size_t)(2 * s + 1) * lanes + lane] = z1[s];
            }
    }
}

// One half-warp (thread r holding state value r and row r of P) walks s <- P s + add[i] for i in
// [0, count), add[i] being SCAN_STATE consecutive doubles; stores the state before each step at
// before[i * SCAN_STATE + r] when `before` is not null; returns the state after the last step.
// The state is exchanged through sv (SCAN_STATE doubles of this half-warp); `count` is the same
// for the 16 threads, so the __syncwarp(mask) calls are reached by all of them. The rows of
// `add` are loaded SCAN_BATCH steps ahead (they do not depend on the walk).
__device__ __forceinline__ double scan_walk(double s, const double (&p)[SCAN_STATE],
                                            const double* __restrict__ add, gk_size_t count,
                                            double* __restrict__ before, double* sv, unsigned mask,
                                            int r) {
    double cur[SCAN_BATCH], nxt[SCAN_BATCH];
#pragma unroll
    for (int b = 0; b < SCAN_BATCH; ++b)
        cur[b] = (gk_size_t)b < count ? add[(gk_size_t)b * SCAN_STATE + r] : 0.0;
    for (gk_size_t i0 = 0; i0 < count; i0 += SCAN_BATCH) {
#pragma unroll
        for (int b = 0; b < SCAN_BATCH; ++b) {
            const gk_size_t i = i0 + SCAN_BATCH + b;
            nxt[b] = i < count ? add[i * SCAN_STATE + r] : 0.0;
        }
#pragma unroll
        for (int b = 0; b < SCAN_BATCH; ++b) {
            if (i0 + b < count) {
                if (before != nullptr) before[(i0 + b) * SCAN_STATE + r] = s;
                sv[r] = s;
                __syncwarp(mask);
                double a0 = cur[b], a1 = 0.0, a2 = 0.0, a3 = 0.0;
#pragma unroll
                for (int j = 0; j < SCAN_STATE; j += 4) {
                    a0 = fma(p[j], sv[j], a0);
                    a1 = fma(p[j + 1], sv[j + 1], a1);
                    a2 = fma(p[j + 2], sv[j + 2], a2);
                    a3 = fma(p[j + 3], sv[j + 3], a3);
                }
                __syncwarp(mask);  // every thread has read sv before it is written again
                s = (a0 + a1) + (a2 + a3);
            }
        }
#pragma unroll
        for (int b = 0; b < SCAN_BATCH; ++b) cur[b] = nxt[b];
    }
    return s;
}

// The half-warp of thread threadIdx.x: its walker slot, its state value r and its sync mask.
struct Walker {
    int slot, r;
    unsigned mask;
    __device__ Walker()
        : slot((int)(threadIdx.x >> 4)), r((int)(threadIdx.x & 15)),
          mask(0xFFFFu << (threadIdx.x & 16)) {}
    __device__ void load_row(double (&p)[SCAN_STATE], const double* __restrict__ phi) const {
#pragma unroll
        for (int j = 0; j < SCAN_STATE; ++j) p[j] = phi[r * SCAN_STATE + j];
    }
};
}  // namespace

// Step 1. grid ceil(lanes * (c_end - c_begin) / 32), block 32: chunks [c_begin, c_end) of every
// lane (the whole block: 0, chunks).
extern "C" __global__ void __launch_bounds__(32) gk_sos_scan_local(
    double* zf, const float* in, const double* coef, int sections, gk_size_t n, gk_size_t lanes,
    gk_size_t chunk, gk_size_t chunks, int complex_data, gk_size_t c_begin, gk_size_t c_end) {
    scan_chunks<false>(nullptr, zf, nullptr, in, coef, sections, n, lanes, chunk, chunks,
                       complex_data != 0, c_begin, c_end);
}

// Step 2. grid ceil(lanes * groups / 8), block 128: one half-warp per (lane, group).
extern "C" __global__ void __launch_bounds__(128) gk_sos_scan_groups(
    double* agg, const double* zf, const double* phi, gk_size_t lanes, gk_size_t chunks,
    gk_size_t per_group, gk_size_t groups) {
    __shared__ double sv[SCAN_WALKERS][SCAN_STATE];
    const Walker w;
    const gk_size_t seq = (gk_size_t)blockIdx.x * SCAN_WALKERS + w.slot;
    if (seq >= lanes * groups) return;  // the whole half-warp leaves together
    double p[SCAN_STATE];
    w.load_row(p, phi);
    const gk_size_t lane = seq / groups, g = seq - lane * groups;
    const gk_size_t c0 = g * per_group, count = min_size(per_group, chunks - c0);
    const double* add = zf + (lane * chunks + c0) * SCAN_STATE;
    agg[seq * SCAN_STATE + w.r] = scan_walk(0.0, p, add, count, nullptr, sv[w.slot], w.mask, w.r);
}

// Step 3. grid ceil(lanes / 8), block 128: one half-warp per lane; zi: [(2 s + k) * lanes + lane].
extern "C" __global__ void __launch_bounds__(128) gk_sos_scan_top(
    double* gstart, const double* zi, const double* agg, const double* phi_group, int sections,
    gk_size_t lanes, gk_size_t groups) {
    __shared__ double sv[SCAN_WALKERS][SCAN_STATE];
    const Walker w;
    const gk_size_t lane = (gk_size_t)blockIdx.x * SCAN_WALKERS + w.slot;
    if (lane >= lanes) return;
    double p[SCAN_STATE];
    w.load_row(p, phi_group);
    const double s0 = w.r < 2 * sections ? zi[(gk_size_t)w.r * lanes + lane] : 0.0;
    const gk_size_t row = lane * groups * SCAN_STATE;
    scan_walk(s0, p, agg + row, groups, gstart + row, sv[w.slot], w.mask, w.r);
}

// Step 4. grid ceil(lanes * groups / 8), block 128: one half-warp per (lane, group).
extern "C" __global__ void __launch_bounds__(128) gk_sos_scan_starts(
    double* starts, const double* gstart, const double* zf, const double* phi, gk_size_t lanes,
    gk_size_t chunks, gk_size_t per_group, gk_size_t groups) {
    __shared__ double sv[SCAN_WALKERS][SCAN_STATE];
    const Walker w;
    const gk_size_t seq = (gk_size_t)blockIdx.x * SCAN_WALKERS + w.slot;
    if (seq >= lanes * groups) return;
    double p[SCAN_STATE];
    w.load_row(p, phi);
    const gk_size_t lane = seq / groups, g = seq - lane * groups;
    const gk_size_t c0 = g * per_group, count = min_size(per_group, chunks - c0);
    const gk_size_t row = (lane * chunks + c0) * SCAN_STATE;
    scan_walk(gstart[seq * SCAN_STATE + w.r], p, zf + row, count, starts + row, sv[w.slot], w.mask,
              w.r);
}

// Step 5. grid ceil(lanes * (c_end - c_begin) / 32), block 32: chunks [c_begin, c_end) of every
// lane; zi: [(2 s + k) * lanes + lane], written by the block's last chunk.
extern "C" __global__ void __launch_bounds__(32) gk_sos_scan_apply(
    float* out, double* zi, const double* starts, const float* in, const double* coef,
    int sections, gk_size_t n, gk_size_t lanes, gk_size_t chunk, gk_size_t chunks,
    int complex_data, gk_size_t c_begin, gk_size_t c_end) {
    scan_chunks<true>(out, zi, starts, in, coef, sections, n, lanes, chunk, chunks,
                      complex_data != 0, c_begin, c_end);
}
