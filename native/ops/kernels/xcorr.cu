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
