// The X-engine on tensor cores (method "tensor" of native/ops/xcorr.cpp, at most 64 inputs, SM 8.0+):
// FP32 accuracy from TF32 tensor cores by 3xTF32: each value x is split into hi = tf32(x) and
// lo = tf32(x - hi), and a product a*b is hi_a*hi_b + hi_a*lo_b + lo_a*hi_b (the lo*lo term is
// below FP32's rounding), accumulated in FP32 by mma.sync.m16n8k8.tf32.
//
// For one bin and run of N frames, with Xr, Xi the C x N real and imaginary parts:
//   Re R = Xr Xr^T + Xi Xi^T,   Im R = Xi Xr^T - Xr Xi^T   (R = X X^H, pairs i <= j kept),
// so every product's A operand is a 16-row block of the inputs and its B operand (col-major
// 8 x 8, element (k, n) = row n's frame k) an 8-row block of the same staged rows.
//
// grid (ceil((b_end - b_begin) / GK_XT_BINS), G), block 32 * max(ceil(GK_XT_BINS * tiles / 2),
// ceil(GK_XT_BINS * CT * 16 * GK_XT_FRAMES / (32 * GK_XT_PER))) threads (each stages at most GK_XT_PER
// values a round: native/ops/xcorr.cpp computes it),
// tiles = CT(CT+1)/2 upper-triangle tiles of 16 x 16 pairs, CT = ceil(C / 16). Warp w owns jobs
// 2w and 2w+1 (job = bin * tiles + tile) and keeps each tile's Re and Im accumulators (2 halves
// of 16 x 8) in registers over the run. Each round stages GK_XT_FRAMES frames of the CTA's bins
// in shared memory (a plane of real and one of imaginary parts), loaded into registers while the
// round before is multiplied; each value is split into its TF32 parts as a fragment takes it
// (shared memory holds each value once). The epilogue puts the tiles
// in shared memory (bins innermost) and writes the pairs with the CTA's bins adjacent (coalesced
// along bins), divided by the run's frame count. Input element (c, f, b) at c*sc + f*sf + b*sb,
// as gk_xcorr_gather (kernels/xcorr.cu).
#include "gk_common.cuh"

#ifndef GK_XT_BINS
#define GK_XT_BINS 2  // bins a CTA
#endif
#ifndef GK_XT_MIN_CTAS
#define GK_XT_MIN_CTAS 2  // CTAs an SM (__launch_bounds__): ptxas for sm_90: 91 registers, none spilled
#endif
#define GK_XT_FRAMES 16  // frames staged a round
#define GK_XT_LD 24      // floats per staged row
#define GK_XT_MAX_C 64
#define GK_XT_PLANE (GK_XT_MAX_C * GK_XT_LD)
#define GK_XT_THREADS (GK_XT_BINS * 5 * 32)  // at 64 inputs: 10 tiles a bin, two a warp
#define GK_XT_PER ((GK_XT_BINS * GK_XT_MAX_C * GK_XT_FRAMES + GK_XT_THREADS - 1) / GK_XT_THREADS)
#define GK_XT_RLD 264  // floats per (tile, part, bin) 16 x 16 in the epilogue: bins 8 banks apart
#define GK_XT_TILES 10
#define GK_XT_STAGE (GK_XT_BINS * 2 * GK_XT_PLANE)
#define GK_XT_EPI (GK_XT_BINS * GK_XT_TILES * 2 * GK_XT_RLD)
#define GK_XT_SMEM (GK_XT_STAGE > GK_XT_EPI ? GK_XT_STAGE : GK_XT_EPI)

namespace {

__device__ __forceinline__ float2 as_c64(float x) { return make_float2(x, 0.0f); }
__device__ __forceinline__ float2 as_c64(float2 x) { return x; }

__device__ __forceinline__ unsigned tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
    return r;
}

__device__ __forceinline__ void mma(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm(  // not volatile: a pure function of its operands, so the compiler may schedule it
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void tile_of(unsigned t, unsigned CT, unsigned& ti, unsigned& tj) {
    ti = 0;
    unsigned row = CT;
    while (t >= row) {
        t -= row;
        ++ti;
        --row;
    }
    tj = ti + t;
}

// hi = tf32(v), lo = tf32(v - hi): the two TF32 parts of v (3xTF32)
__device__ __forceinline__ void split(float v, unsigned& hi, unsigned& lo) {
    hi = tf32(v);
    lo = tf32(v - __uint_as_float(hi));
}

// next[s]: element e = t + s * nthreads of a round (bin e % BINS, frame (e / BINS) % FRAMES,
// input e / (BINS * FRAMES)); 0 outside the inputs, the bins or the run's N frames.
template <class T>
__device__ __forceinline__ void fetch_round(float2 (&next)[GK_XT_PER], const T* __restrict__ x, unsigned nthreads,
                                            unsigned elems, unsigned C, gk_size_t sc, gk_size_t sf, gk_size_t sb,
                                            unsigned f0, unsigned f, unsigned N, unsigned b0, unsigned b_end) {
#pragma unroll
    for (unsigned s = 0; s < GK_XT_PER; ++s) {
        const unsigned e = threadIdx.x + s * nthreads;
        const unsigned bb = e % GK_XT_BINS, fr = (e / GK_XT_BINS) % GK_XT_FRAMES, c = e / (GK_XT_BINS * GK_XT_FRAMES);
        float2 v = make_float2(0.0f, 0.0f);
        if (e < elems && c < C && b0 + bb < b_end && f + fr < N)
            v = as_c64(x[c * sc + (f0 + f + fr) * sf + (b0 + bb) * sb]);
        next[s] = v;
    }
}

// Shared memory of a round: per bin two planes (re, im) of GK_XT_MAX_C rows x GK_XT_LD floats.
// Lane (g, t) of a warp reads frames 2t and 2t+1 of a k-step's 8 as one float2 and uses them as
// the fragments' columns t and t + 4 (A and B alike: the sum over frames pairs the same frames);
// rows GK_XT_LD = 24 floats apart put the 8-byte reads of a half warp in 32 different banks.
template <class T>
__device__ __forceinline__ void xcorr_tc(float2* __restrict__ out, const T* __restrict__ x, unsigned C,
                                         gk_size_t sc, gk_size_t sf, gk_size_t sb, unsigned bins, unsigned N,
                                         unsigned G, unsigned n_valid, unsigned b_begin, unsigned b_end) {
    __shared__ __align__(16) float sm[GK_XT_SMEM];
    const unsigned CT = (C + 15) / 16, tiles = CT * (CT + 1) / 2, rows = CT * 16;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tid = lane & 3;
    const unsigned b0 = b_begin + blockIdx.x * GK_XT_BINS, g = blockIdx.y;
    const unsigned jobs = GK_XT_BINS * tiles, nthreads = blockDim.x;
    bool has[2];
    unsigned jb[2], ti[2], tj[2];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        const unsigned j = warp * 2 + q;
        has[q] = j < jobs;
        const unsigned jj = has[q] ? j : 0;
        jb[q] = jj / tiles;
        tile_of(jj % tiles, CT, ti[q], tj[q]);
    }
    float acc[2][2][2][4];  // [job][half][re, im][c0..c3]
#pragma unroll
    for (int q = 0; q < 2; ++q)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int p = 0; p < 2; ++p)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[q][h][p][e] = 0.0f;
    const unsigned f0 = g * N;
    const unsigned elems = GK_XT_BINS * rows * GK_XT_FRAMES;  // <= GK_XT_PER * nthreads
    float2 next[GK_XT_PER];
    fetch_round<T>(next, x, nthreads, elems, C, sc, sf, sb, f0, 0, N, b0, b_end);
    for (unsigned f = 0; f < N; f += GK_XT_FRAMES) {
        __syncthreads();  // the previous round's frames are no longer read
#pragma unroll
        for (unsigned s = 0; s < GK_XT_PER; ++s) {
            const unsigned e = threadIdx.x + s * nthreads;
            if (e < elems) {
                const unsigned bb = e % GK_XT_BINS, fr = (e / GK_XT_BINS) % GK_XT_FRAMES,
                               c = e / (GK_XT_BINS * GK_XT_FRAMES);
                float* row = sm + (bb * 2) * GK_XT_PLANE + c * GK_XT_LD + fr;
                row[0] = next[s].x;
                row[GK_XT_PLANE] = next[s].y;
            }
        }
        __syncthreads();
        if (f + GK_XT_FRAMES < N)  // the next round's loads fly while this one is multiplied
            fetch_round<T>(next, x, nthreads, elems, C, sc, sf, sb, f0, f + GK_XT_FRAMES, N, b0, b_end);
        const unsigned left = N - f < GK_XT_FRAMES ? N - f : GK_XT_FRAMES;
        const unsigned ksteps = (left + 7) / 8;  // frames past N were staged as zeros
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            if (!has[q]) continue;
            const float* re_plane = sm + (jb[q] * 2) * GK_XT_PLANE;
            const float* im_plane = re_plane + GK_XT_PLANE;
#pragma unroll
            for (unsigned k = 0; k < GK_XT_FRAMES / 8; ++k) {
                if (k >= ksteps) break;
                const unsigned col = k * 8 + 2 * tid;
                // A: rows ti*16 + gid and + 8; [plane][hi, lo][a0..a3]
                unsigned A[2][2][4];
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    const float* base = (p ? im_plane : re_plane) + (ti[q] * 16 + gid) * GK_XT_LD + col;
                    const float2 top = *reinterpret_cast<const float2*>(base);
                    const float2 bot = *reinterpret_cast<const float2*>(base + 8 * GK_XT_LD);
                    split(top.x, A[p][0][0], A[p][1][0]);
                    split(bot.x, A[p][0][1], A[p][1][1]);
                    split(top.y, A[p][0][2], A[p][1][2]);
                    split(bot.y, A[p][0][3], A[p][1][3]);
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    // B: row tj*16 + h*8 + gid; [plane][hi, lo][b0, b1]
                    unsigned B[2][2][2];
#pragma unroll
                    for (int p = 0; p < 2; ++p) {
                        const float2 v = *reinterpret_cast<const float2*>(
                            (p ? im_plane : re_plane) + (tj[q] * 16 + h * 8 + gid) * GK_XT_LD + col);
                        split(v.x, B[p][0][0], B[p][1][0]);
                        split(v.y, B[p][0][1], B[p][1][1]);
                    }
                    float(&re)[4] = acc[q][h][0];
                    float(&im)[4] = acc[q][h][1];
                    // re += Ar Br + Ai Bi; im += Ai Br - Ar Bi (small terms first)
                    mma(re, A[0][1], B[0][0][0], B[0][0][1]);
                    mma(im, A[1][1], B[0][0][0], B[0][0][1]);
                    mma(re, A[0][0], B[0][1][0], B[0][1][1]);
                    mma(im, A[1][0], B[0][1][0], B[0][1][1]);
                    mma(re, A[0][0], B[0][0][0], B[0][0][1]);
                    mma(im, A[1][0], B[0][0][0], B[0][0][1]);
                    mma(re, A[1][1], B[1][0][0], B[1][0][1]);
                    mma(re, A[1][0], B[1][1][0], B[1][1][1]);
                    mma(re, A[1][0], B[1][0][0], B[1][0][1]);
                    unsigned nA[2][4];  // -Ar (hi, lo): the sign bit flipped
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        nA[0][e] = A[0][0][e] ^ 0x80000000u;
                        nA[1][e] = A[0][1][e] ^ 0x80000000u;
                    }
                    mma(im, nA[1], B[1][0][0], B[1][0][1]);
                    mma(im, nA[0], B[1][1][0], B[1][1][1]);
                    mma(im, nA[0], B[1][0][0], B[1][0][1]);
                }
            }
        }
    }
    __syncthreads();  // staging no longer read: the epilogue's tiles take its memory
#pragma unroll
    for (int q = 0; q < 2; ++q) {
        if (!has[q]) continue;
        const unsigned tile = (warp * 2 + q) % tiles;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                float* R = sm + ((tile * 2 + p) * GK_XT_BINS + jb[q]) * GK_XT_RLD;
                const unsigned s = h * 8 + 2 * tid;
                R[gid * 16 + s] = acc[q][h][p][0];
                R[gid * 16 + s + 1] = acc[q][h][p][1];
                R[(gid + 8) * 16 + s] = acc[q][h][p][2];
                R[(gid + 8) * 16 + s + 1] = acc[q][h][p][3];
            }
    }
    __syncthreads();
    const long long valid = (long long)n_valid - (long long)g * N;
    const float scale = valid <= 0 ? 0.0f : 1.0f / (float)(valid < (long long)N ? valid : N);
    const unsigned total = tiles * 256 * GK_XT_BINS;
    for (unsigned e = threadIdx.x; e < total; e += nthreads) {
        const unsigned bb = e % GK_XT_BINS, el = (e / GK_XT_BINS) % 256, tile = e / (GK_XT_BINS * 256);
        unsigned I, J;
        tile_of(tile, CT, I, J);
        const unsigned i = I * 16 + el / 16, j = J * 16 + el % 16, b = b0 + bb;
        if (i <= j && j < C && b < b_end) {
            const float re = sm[((tile * 2) * GK_XT_BINS + bb) * GK_XT_RLD + el];
            const float im = sm[((tile * 2 + 1) * GK_XT_BINS + bb) * GK_XT_RLD + el];
            const gk_size_t p = (gk_size_t)i * C - ((gk_size_t)i * (i - 1)) / 2 + (j - i);
            out[(p * G + g) * bins + b] = make_float2(re * scale, im * scale);
        }
    }
}

}  // namespace

#define GK_XC_TC_KERNEL(NAME, T)                                                                  \
    extern "C" __global__ void __launch_bounds__(GK_XT_THREADS, GK_XT_MIN_CTAS) NAME(       \
        float2* out, const T* x, unsigned C, gk_size_t sc, gk_size_t sf, gk_size_t sb,            \
        unsigned bins, unsigned N, unsigned G, unsigned n_valid, unsigned b_begin, unsigned b_end) { \
        xcorr_tc<T>(out, x, C, sc, sf, sb, bins, N, G, n_valid, b_begin, b_end);                  \
    }

GK_XC_TC_KERNEL(gk_xcorr_tc_f32, float)
GK_XC_TC_KERNEL(gk_xcorr_tc_c64, float2)
