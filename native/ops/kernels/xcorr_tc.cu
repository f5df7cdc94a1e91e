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
// grid (ceil((b_end - b_begin) / GK_XT_BINS), G), block 32 * ceil(GK_XT_BINS * tiles / 2) threads,
// tiles = CT(CT+1)/2 upper-triangle tiles of 16 x 16 pairs, CT = ceil(C / 16). Warp w owns jobs
// 2w and 2w+1 (job = bin * tiles + tile) and keeps each tile's Re and Im accumulators (2 halves
// of 16 x 8) in registers over the run. Each round stages GK_XT_FRAMES frames of the CTA's bins
// in shared memory, already split: planes re hi, re lo, im hi, im lo, rows of GK_XT_LD floats
// (20: a fragment's 8 rows x 4 columns fall in 32 different banks). The epilogue puts the tiles
// in shared memory (bins innermost) and writes the pairs with the CTA's bins adjacent (coalesced
// along bins), divided by the run's frame count. Input element (c, f, b) at c*sc + f*sf + b*sb,
// as gk_xcorr_gather (kernels/xcorr.cu).
#include "gk_common.cuh"

#ifndef GK_XT_BINS
#define GK_XT_BINS 2  // bins a CTA
#endif
#ifndef GK_XT_MIN_CTAS
#define GK_XT_MIN_CTAS 2  // CTAs an SM (__launch_bounds__): 80 registers a thread, none spilled
#endif
#define GK_XT_FRAMES 16
#define GK_XT_LD 20
#define GK_XT_MAX_C 64
#define GK_XT_RLD 264  // floats per (tile, part, bin) 16 x 16 in the epilogue: bins 8 banks apart
#define GK_XT_TILES 10
#define GK_XT_STAGE (GK_XT_BINS * 4 * GK_XT_MAX_C * GK_XT_LD)
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
    asm volatile(
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

// planes of bin bb: 0 re hi, 1 re lo, 2 im hi, 3 im lo; each GK_XT_MAX_C rows of GK_XT_LD floats
template <class T>
__device__ __forceinline__ void xcorr_tc(float2* __restrict__ out, const T* __restrict__ x, unsigned C,
                                         gk_size_t sc, gk_size_t sf, gk_size_t sb, unsigned bins, unsigned N,
                                         unsigned G, unsigned n_valid, unsigned b_begin, unsigned b_end) {
    __shared__ __align__(16) float sm[GK_XT_SMEM];
    unsigned* su = reinterpret_cast<unsigned*>(sm);
    const unsigned CT = (C + 15) / 16, tiles = CT * (CT + 1) / 2, rows = CT * 16;
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tid = lane & 3;
    const unsigned b0 = b_begin + blockIdx.x * GK_XT_BINS, g = blockIdx.y;
    const unsigned jobs = GK_XT_BINS * tiles;
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
    const unsigned elems = GK_XT_BINS * rows * GK_XT_FRAMES;
    for (unsigned f = 0; f < N; f += GK_XT_FRAMES) {
        __syncthreads();
        for (unsigned e = threadIdx.x; e < elems; e += blockDim.x) {
            const unsigned bb = e % GK_XT_BINS, fr = (e / GK_XT_BINS) % GK_XT_FRAMES, c = e / (GK_XT_BINS * GK_XT_FRAMES);
            const unsigned b = b0 + bb;
            float2 v = make_float2(0.0f, 0.0f);
            if (c < C && b < b_end && f + fr < N) v = as_c64(x[c * sc + (f0 + f + fr) * sf + b * sb]);
            const unsigned rh = tf32(v.x), ih = tf32(v.y);
            const unsigned rl = tf32(v.x - __uint_as_float(rh)), il = tf32(v.y - __uint_as_float(ih));
            unsigned* base = su + (bb * 4) * GK_XT_MAX_C * GK_XT_LD + c * GK_XT_LD + fr;
            base[0] = rh;
            base[GK_XT_MAX_C * GK_XT_LD] = rl;
            base[2 * GK_XT_MAX_C * GK_XT_LD] = ih;
            base[3 * GK_XT_MAX_C * GK_XT_LD] = il;
        }
        __syncthreads();
        const unsigned left = N - f < GK_XT_FRAMES ? N - f : GK_XT_FRAMES;
        const unsigned ksteps = (left + 7) / 8;
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            if (!has[q]) continue;
            const unsigned* pl = su + (jb[q] * 4) * GK_XT_MAX_C * GK_XT_LD;
            for (unsigned k = 0; k < ksteps; ++k) {
                const unsigned k0 = k * 8;
                // A of rows ti*16 .. +15 for the 4 planes; B of rows tj*16 + h*8 .. +7
                unsigned A[4][4], B[2][4][2];
#pragma unroll
                for (int p = 0; p < 4; ++p) {
                    const unsigned* r0 = pl + p * GK_XT_MAX_C * GK_XT_LD + (ti[q] * 16 + gid) * GK_XT_LD + k0 + tid;
                    A[p][0] = r0[0];
                    A[p][1] = r0[8 * GK_XT_LD];
                    A[p][2] = r0[4];
                    A[p][3] = r0[8 * GK_XT_LD + 4];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const unsigned* r1 = pl + p * GK_XT_MAX_C * GK_XT_LD + (tj[q] * 16 + h * 8 + gid) * GK_XT_LD + k0 + tid;
                        B[h][p][0] = r1[0];
                        B[h][p][1] = r1[4];
                    }
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float(&re)[4] = acc[q][h][0];
                    // re += Ar Br + Ai Bi (small terms first)
                    mma(re, A[1], B[h][0][0], B[h][0][1]);
                    mma(re, A[0], B[h][1][0], B[h][1][1]);
                    mma(re, A[0], B[h][0][0], B[h][0][1]);
                    mma(re, A[3], B[h][2][0], B[h][2][1]);
                    mma(re, A[2], B[h][3][0], B[h][3][1]);
                    mma(re, A[2], B[h][2][0], B[h][2][1]);
                    float(&im)[4] = acc[q][h][1];
                    // im += Ai Br
                    mma(im, A[3], B[h][0][0], B[h][0][1]);
                    mma(im, A[2], B[h][1][0], B[h][1][1]);
                    mma(im, A[2], B[h][0][0], B[h][0][1]);
                }
#pragma unroll
                for (int p = 0; p < 2; ++p)
#pragma unroll
                    for (int e = 0; e < 4; ++e) A[p][e] ^= 0x80000000u;  // -Ar
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float(&im)[4] = acc[q][h][1];
                    // im -= Ar Bi
                    mma(im, A[1], B[h][2][0], B[h][2][1]);
                    mma(im, A[0], B[h][3][0], B[h][3][1]);
                    mma(im, A[0], B[h][2][0], B[h][2][1]);
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
    for (unsigned e = threadIdx.x; e < total; e += blockDim.x) {
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
    extern "C" __global__ void __launch_bounds__(GK_XT_BINS * 5 * 32, GK_XT_MIN_CTAS) NAME(       \
        float2* out, const T* x, unsigned C, gk_size_t sc, gk_size_t sf, gk_size_t sb,            \
        unsigned bins, unsigned N, unsigned G, unsigned n_valid, unsigned b_begin, unsigned b_end) { \
        xcorr_tc<T>(out, x, C, sc, sf, sb, bins, N, G, n_valid, b_begin, b_end);                  \
    }

GK_XC_TC_KERNEL(gk_xcorr_tc_f32, float)
GK_XC_TC_KERNEL(gk_xcorr_tc_c64, float2)
