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
// Chunked form, for few lanes and long blocks (the sequential kernel above would leave the GPU
// idle). The cascade is linear in (state, input), so with the block cut into chunks of `chunk`
// samples and D = 2 * sections state values:
//   A. gk_sos_chunks: every chunk filtered from a zero state, in parallel: its zero-state output
//      y0 (double) and final state zf;
//   B. gk_sos_carry: one thread per lane walks the chunks in order: the true state at the start
//      of chunk c+1 is zf[c] + Phi * start[c] (Phi: the state transition over a chunk with zero
//      input, phi_last for a shorter last chunk); the state after the block goes back to zi;
//   C. gk_sos_fix: y[t] = y0[t] + sum_d G[t mod chunk][d] * start[chunk of t][d], G[t][d] the
//      output at t of the cascade started from unit state d with zero input.
// Phi, phi_last and G are computed on the host in float64 (sos.cpp); at most 8 sections.
namespace {
constexpr int CHUNK_SECTIONS = 8;
constexpr int CHUNK_STATE = 2 * CHUNK_SECTIONS;
}  // namespace

// grid-stride over lanes * (c_end - c_begin): chunks [c_begin, c_end) of every lane (the whole
// block: 0, chunks); y0: (lanes, n) double; zf: (lanes, chunks, 2*sections).
extern "C" __global__ void gk_sos_chunks(double* y0, double* zf, const float* in, const double* coef,
                                         int sections, gk_size_t n, gk_size_t lanes,
                                         gk_size_t chunk, gk_size_t chunks, int complex_data,
                                         gk_size_t c_begin, gk_size_t c_end) {
    const int D = 2 * sections;
    const gk_size_t span = c_end - c_begin;
    for (gk_size_t k = gk_thread_index(); k < lanes * span; k += gk_grid_stride()) {
        const gk_size_t lane = k / span, c = c_begin + (k - lane * span);
        const gk_size_t idx = lane * chunks + c;
        double z0[CHUNK_SECTIONS], z1[CHUNK_SECTIONS];
#pragma unroll
        for (int s = 0; s < CHUNK_SECTIONS; ++s) z0[s] = z1[s] = 0.0;
        const gk_size_t t0 = c * chunk;
        const gk_size_t t1 = t0 + chunk < n ? t0 + chunk : n;
        for (gk_size_t t = t0; t < t1; ++t) {
            double x = (double)in[lane_index(lane, t, n, complex_data != 0)];
#pragma unroll
            for (int s = 0; s < CHUNK_SECTIONS; ++s) {
                if (s < sections) {
                    const double* cs = coef + 5 * s;
                    const double y = fma(cs[0], x, z0[s]);
                    z0[s] = fma(cs[1], x, fma(-cs[3], y, z1[s]));
                    z1[s] = fma(cs[2], x, -cs[4] * y);
                    x = y;
                }
            }
            y0[lane * n + t] = x;
        }
        double* dst = zf + idx * (gk_size_t)D;
#pragma unroll
        for (int s = 0; s < CHUNK_SECTIONS; ++s)
            if (s < sections) {
                dst[2 * s] = z0[s];
                dst[2 * s + 1] = z1[s];
            }
    }
}

// one thread per lane; starts: (lanes, chunks, D); zi: [(2*s + k) * lanes + lane]; phi: (D, D).
extern "C" __global__ void gk_sos_carry(double* starts, double* zi, const double* zf,
                                        const double* phi, const double* phi_last, int sections,
                                        gk_size_t lanes, gk_size_t chunks) {
    const gk_size_t lane = gk_thread_index();
    if (lane >= lanes) return;
    const int D = 2 * sections;
    double s[CHUNK_STATE];
#pragma unroll
    for (int d = 0; d < CHUNK_STATE; ++d) s[d] = d < D ? zi[(gk_size_t)d * lanes + lane] : 0.0;
    for (gk_size_t c = 0; c < chunks; ++c) {
        const gk_size_t row = (lane * chunks + c) * (gk_size_t)D;
        const double* P = c + 1 == chunks ? phi_last : phi;
        double next[CHUNK_STATE];
#pragma unroll
        for (int i = 0; i < CHUNK_STATE; ++i) {
            if (i < D) {
                starts[row + i] = s[i];
                double v = zf[row + i];
#pragma unroll
                for (int j = 0; j < CHUNK_STATE; ++j)
                    if (j < D) v = fma(P[i * D + j], s[j], v);
                next[i] = v;
            } else {
                next[i] = 0.0;
            }
        }
#pragma unroll
        for (int d = 0; d < CHUNK_STATE; ++d) s[d] = next[d];
    }
#pragma unroll
    for (int d = 0; d < CHUNK_STATE; ++d)
        if (d < D) zi[(gk_size_t)d * lanes + lane] = s[d];
}

// grid-stride over lanes * (t_end - t_begin): samples [t_begin, t_end) of every lane (the whole
// block: 0, n); G: (chunk, D).
extern "C" __global__ void gk_sos_fix(float* out, const double* y0, const double* starts,
                                      const double* G, int sections, gk_size_t n, gk_size_t lanes,
                                      gk_size_t chunk, gk_size_t chunks, int complex_data,
                                      gk_size_t t_begin, gk_size_t t_end) {
    const int D = 2 * sections;
    const gk_size_t span = t_end - t_begin;
    for (gk_size_t k = gk_thread_index(); k < lanes * span; k += gk_grid_stride()) {
        const gk_size_t lane = k / span, t = t_begin + (k - lane * span);
        const gk_size_t idx = lane * n + t;
        const gk_size_t c = t / chunk, tl = t - c * chunk;
        const double* st = starts + (lane * chunks + c) * (gk_size_t)D;
        const double* g = G + tl * (gk_size_t)D;
        double v = y0[idx];
        for (int d = 0; d < D; ++d) v = fma(g[d], st[d], v);
        out[lane_index(lane, t, n, complex_data != 0)] = (float)v;
    }
}
