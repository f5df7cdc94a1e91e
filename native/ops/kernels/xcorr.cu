// Correlator X-engine around cuBLAS (native/ops/xcorr.cpp): per bin b and group g of N frames,
// R_{b,g} = A_{b,g} A_{b,g}^H with A_{b,g} the C x N matrix of inputs x frames, by
// cublasCgemmStridedBatched. These kernels move the data to and from the gemm's layouts:
//   gk_xcorr_gather_*   the input (element (c, f, b) at c*sc + f*sf + b*sb: (C, F, bins) frames,
//                       or a channelizer's (C*M, n) time-domain block) -> A (bins, F, C), so that
//                       A_{b,g} is column-major C x N at A + (b*F + g*N)*C (lda = C);
//   gk_xcorr_pack       R (bins*G, C, C), column-major per (b, g) at batch b*G + g, entry (i, j) =
//                       sum_f X_i conj(X_j) at i + j*C -> the output (P, G, bins), row
//                       p = i*C - i*(i-1)/2 + (j - i) for i <= j, divided by the run's frame count.
#include "gk_common.cuh"

namespace {

__device__ __forceinline__ float2 as_c64(float x) { return make_float2(x, 0.0f); }
__device__ __forceinline__ float2 as_c64(float2 x) { return x; }

// grid (ceil((b_end - b_begin) / 32), ceil(C / 32), min(F, 65535)), block (32, 8): a 32 x 32
// tile of (c, b) per frame f through shared memory (reads along b, writes along c coalesced
// for frames-domain input); frames by a grid-stride loop over z.
template <class T>
__device__ __forceinline__ void gather(float2* __restrict__ A, const T* __restrict__ x,
                                       unsigned C, unsigned F, gk_size_t sc, gk_size_t sf,
                                       gk_size_t sb, unsigned b_begin, unsigned b_end) {
    __shared__ float2 tile[32][33];
    const unsigned b0 = b_begin + blockIdx.x * 32, c0 = blockIdx.y * 32;
    for (unsigned f = blockIdx.z; f < F; f += gridDim.z) {
        for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
            const unsigned c = c0 + dy, b = b0 + threadIdx.x;
            if (c < C && b < b_end)
                tile[dy][threadIdx.x] = as_c64(x[c * sc + f * sf + b * sb]);
        }
        __syncthreads();
        for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
            const unsigned b = b0 + dy, c = c0 + threadIdx.x;
            if (c < C && b < b_end)
                A[((gk_size_t)b * F + f) * C + c] = tile[threadIdx.x][dy];
        }
        __syncthreads();
    }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) gk_xcorr_gather_f32(
    float2* A, const float* x, unsigned C, unsigned F, gk_size_t sc, gk_size_t sf, gk_size_t sb,
    unsigned b_begin, unsigned b_end) {
    gather<float>(A, x, C, F, sc, sf, sb, b_begin, b_end);
}

extern "C" __global__ void __launch_bounds__(256) gk_xcorr_gather_c64(
    float2* A, const float2* x, unsigned C, unsigned F, gk_size_t sc, gk_size_t sf, gk_size_t sb,
    unsigned b_begin, unsigned b_end) {
    gather<float2>(A, x, C, F, sc, sf, sb, b_begin, b_end);
}

// grid (ceil((b_end - b_begin) / 32), ceil(C / 32), min(C * G, 65535)), block (32, 8). Block
// (x, y, z): bins b0 .. b0+31, rows i0 .. i0+31 of column j of group g, z = g*C + j by a
// grid-stride loop. A column's 32 entries of 32 bins are read along i (contiguous in R) and
// written along b (contiguous in the output). Group g holds min(N, n_valid - g*N) valid frames:
// the mean divides by that count; a group with none is written as zeros.
extern "C" __global__ void __launch_bounds__(256) gk_xcorr_pack(
    float2* out, const float2* R, unsigned C, unsigned G, unsigned bins, unsigned N,
    unsigned n_valid, unsigned b_begin, unsigned b_end) {
    __shared__ float2 tile[32][33];
    const unsigned b0 = b_begin + blockIdx.x * 32, i0 = blockIdx.y * 32;
    const gk_size_t CC = (gk_size_t)C * C;
    for (unsigned z = blockIdx.z; z < C * G; z += gridDim.z) {
        const unsigned j = z % C, g = z / C;
        if (i0 > j) continue;  // uniform over the block: every row of the tile is below i0 > j
        for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
            const unsigned b = b0 + dy, i = i0 + threadIdx.x;
            if (b < b_end && i <= j)
                tile[dy][threadIdx.x] = R[((gk_size_t)b * G + g) * CC + (gk_size_t)j * C + i];
        }
        __syncthreads();
        const long long valid = (long long)n_valid - (long long)g * N;
        const float scale = valid <= 0 ? 0.0f : 1.0f / (float)(valid < (long long)N ? valid : N);
        for (unsigned dy = threadIdx.y; dy < 32; dy += 8) {
            const unsigned i = i0 + dy, b = b0 + threadIdx.x;
            if (b < b_end && i <= j) {
                const gk_size_t p = (gk_size_t)i * C - ((gk_size_t)i * (i - 1)) / 2 + (j - i);
                const float2 v = valid <= 0 ? make_float2(0.0f, 0.0f) : tile[threadIdx.x][dy];
                out[(p * G + g) * bins + b] = make_float2(v.x * scale, v.y * scale);
            }
        }
        __syncthreads();
    }
}

// The direct X-engine kernel (method "kernel", at most 64 inputs): no gather, no C x C scratch.
// grid (ceil((b_end - b_begin) / BINS), G), block max(BINS * tiles, 64) threads, tiles =
// CT(CT+1)/2 with CT = ceil(C / 8), BINS 8 (gk_xcorr_tiles_*: up to 56 inputs) or 7
// (gk_xcorr_tiles7_*: 57..64 inputs, 36 tiles x 7 bins = 252 threads, the most a CTA takes at the
// tiles' 224 registers; one CTA an SM); input element (c, f, b) at c*sc + f*sf + b*sb (as
// gk_xcorr_gather). Thread t < BINS * tiles works on bin b0 + t / tiles (the others only stage)
// and the 8 x 8 tile (ti, tj), ti <= tj, of the pair matrix (tile index t % tiles, upper-triangle
// tiles in row-major order), accumulating acc[k][l] = sum_f X[ti*8 + k, f, b] conj(X[tj*8 + l, f, b])
// in registers over the group's N frames. The inputs of the block's bins for up to 4 frames at a
// time, X[c, f .. f+3, b0 ..], are staged in shared memory; the next frames' are loaded into
// registers while these are used. A staged row holds the 8 inputs of each tile 10 float2 apart,
// so that the 8 threads of a quarter warp, which read one k of 8 different tiles, hit 8 different
// bank groups (GK_XC_SEG; measured on an H200 at 64 inputs, 1024 bins: 4 bins a CTA at rows of 8
// apart 409 us, 10 apart 393 us; 7 bins a CTA 297 us, cuBLAS 345 us).
// __maxnreg__(224): the 64 complex accumulators fit without spilling (ptxas for sm_90: 219-224
// registers, none spilled).
#define GK_XC_MAX_C 64
#define GK_XC_SEG 10                 // float2 per tile's 8 inputs in a staged row (8 + 2 apart)
#define GK_XC_ROW (8 * GK_XC_SEG + 2)  // float2 per staged row: rows 4 banks apart
#define GK_XC_FRAMES 4               // frames staged per round at most

namespace {

__device__ __forceinline__ void tile_of(unsigned t, unsigned CT, unsigned& ti, unsigned& tj) {
    ti = 0;
    unsigned row = CT;  // tiles in row ti: CT - ti
    while (t >= row) {
        t -= row;
        ++ti;
        --row;
    }
    tj = ti + t;
}

// next[s] = element e = t + s*nthreads of the round's slice (frame f + e / (BINS * 64), then
// c = w / BINS, bin b0 + w % BINS of w = e % (BINS * 64)); 0 outside the inputs, the bins or the
// group's N frames.
template <class T, unsigned BINS>
__device__ __forceinline__ void fetch_frames(float2 (&next)[8], const T* __restrict__ x, unsigned t,
                                             unsigned nthreads, unsigned per, unsigned fs, unsigned C,
                                             gk_size_t sc, gk_size_t sf, gk_size_t sb, unsigned f0,
                                             unsigned f, unsigned N, unsigned b0, unsigned b_end) {
    constexpr unsigned ELEMS = BINS * GK_XC_MAX_C;
#pragma unroll
    for (unsigned s = 0; s < 8; ++s) {
        const unsigned e = t + s * nthreads;
        float2 v = make_float2(0.0f, 0.0f);
        if (s < per && e < fs * ELEMS) {
            const unsigned fr = e / ELEMS, w = e % ELEMS;
            const unsigned c = w / BINS, b = b0 + w % BINS;
            if (c < C && b < b_end && f + fr < N) v = as_c64(x[c * sc + (f0 + f + fr) * sf + b * sb]);
        }
        next[s] = v;
    }
}

template <class T, unsigned BINS>
__device__ __forceinline__ void xcorr_tiles(float2* __restrict__ out, const T* __restrict__ x,
                                            unsigned C, gk_size_t sc, gk_size_t sf, gk_size_t sb,
                                            unsigned bins, unsigned N, unsigned G, unsigned n_valid,
                                            unsigned b_begin, unsigned b_end) {
    constexpr unsigned ELEMS = BINS * GK_XC_MAX_C;
    __shared__ __align__(16) float2 xs[GK_XC_FRAMES][BINS][GK_XC_ROW];
    const unsigned CT = (C + 7) / 8, tiles = CT * (CT + 1) / 2;
    const unsigned t = threadIdx.x, nthreads = blockDim.x;
    const unsigned b0 = b_begin + blockIdx.x * BINS, g = blockIdx.y;
    const unsigned bl = t / tiles;
    unsigned ti, tj;
    tile_of(t % tiles, CT, ti, tj);
    float2 acc[8][8];
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
        for (int l = 0; l < 8; ++l) acc[k][l] = make_float2(0.0f, 0.0f);
    // frames per round: as many as 8 staged elements a thread allow (nthreads >= 64: at least 1)
    unsigned fs = 8 * nthreads / ELEMS;
    fs = fs < 1 ? 1 : (fs > GK_XC_FRAMES ? GK_XC_FRAMES : fs);
    const unsigned per = (fs * ELEMS + nthreads - 1) / nthreads;  // <= 8
    float2 next[8];
    const unsigned f0 = g * N;
    fetch_frames<T, BINS>(next, x, t, nthreads, per, fs, C, sc, sf, sb, f0, 0, N, b0, b_end);
    for (unsigned f = 0; f < N; f += fs) {
        __syncthreads();  // the previous round's frames are no longer read
#pragma unroll
        for (unsigned s = 0; s < 8; ++s) {
            const unsigned e = t + s * nthreads;
            if (s < per && e < fs * ELEMS) {
                const unsigned w = e % ELEMS;
                const unsigned c = w / BINS;
                xs[e / ELEMS][w % BINS][c / 8 * GK_XC_SEG + c % 8] = next[s];
            }
        }
        __syncthreads();
        if (f + fs < N) fetch_frames<T, BINS>(next, x, t, nthreads, per, fs, C, sc, sf, sb, f0, f + fs, N, b0, b_end);
        if (bl < BINS) {
            for (unsigned fr = 0; fr < fs; ++fr) {  // frames past N were staged as zeros
                const float4* ra = reinterpret_cast<const float4*>(&xs[fr][bl][ti * GK_XC_SEG]);
                const float4* rc = reinterpret_cast<const float4*>(&xs[fr][bl][tj * GK_XC_SEG]);
                float2 a[8], c[8];
#pragma unroll
                for (int k = 0; k < 4; ++k) {
                    const float4 va = ra[k], vc = rc[k];
                    a[2 * k] = make_float2(va.x, va.y);
                    a[2 * k + 1] = make_float2(va.z, va.w);
                    c[2 * k] = make_float2(vc.x, vc.y);
                    c[2 * k + 1] = make_float2(vc.z, vc.w);
                }
#pragma unroll
                for (int k = 0; k < 8; ++k)
#pragma unroll
                    for (int l = 0; l < 8; ++l) {  // acc += a * conj(c)
                        acc[k][l].x = fmaf(a[k].x, c[l].x, fmaf(a[k].y, c[l].y, acc[k][l].x));
                        acc[k][l].y = fmaf(a[k].y, c[l].x, fmaf(-a[k].x, c[l].y, acc[k][l].y));
                    }
            }
        }
    }
    const unsigned b = b0 + bl;
    if (bl >= BINS || b >= b_end) return;
    const long long valid = (long long)n_valid - (long long)g * N;
    const float scale = valid <= 0 ? 0.0f : 1.0f / (float)(valid < (long long)N ? valid : N);
#pragma unroll
    for (int k = 0; k < 8; ++k)
#pragma unroll
        for (int l = 0; l < 8; ++l) {
            const unsigned i = ti * 8 + k, j = tj * 8 + l;
            if (i < C && j < C && i <= j) {
                const gk_size_t p = (gk_size_t)i * C - ((gk_size_t)i * (i - 1)) / 2 + (j - i);
                out[(p * G + g) * bins + b] = make_float2(acc[k][l].x * scale, acc[k][l].y * scale);
            }
        }
}

}  // namespace

#define GK_XC_KERNEL(NAME, T, BINS)                                                               \
    extern "C" __global__ void __maxnreg__(224) NAME(                                             \
        float2* out, const T* x, unsigned C, gk_size_t sc, gk_size_t sf, gk_size_t sb,            \
        unsigned bins, unsigned N, unsigned G, unsigned n_valid, unsigned b_begin, unsigned b_end) { \
        xcorr_tiles<T, BINS>(out, x, C, sc, sf, sb, bins, N, G, n_valid, b_begin, b_end);        \
    }

GK_XC_KERNEL(gk_xcorr_tiles_f32, float, 8)
GK_XC_KERNEL(gk_xcorr_tiles_c64, float2, 8)
GK_XC_KERNEL(gk_xcorr_tiles7_f32, float, 7)
GK_XC_KERNEL(gk_xcorr_tiles7_c64, float2, 7)
