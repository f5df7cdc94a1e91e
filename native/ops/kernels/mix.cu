// Channel mixing (pygpukit_dsp/stages/mix.py): y[o, p] = sum_i M[o, i] * x[i, p].
//
// Letters in the entry names: r = float32, c = complex64 (float2); the first is the matrix's,
// the second the input's. The output is complex when either is (real input with a complex
// matrix, or the reverse, as the CPU stage promotes).
//
// gk_mix_XY (small matrices; the W1 path, e.g. 16 x 64 on 64 ch x 256 samples): one launch,
// block (32, 8): threadIdx.x picks a column p (coalesced loads and stores), threadIdx.y one of 8
// interleaved slices of the inputs i; each thread keeps 8 output rows in registers, the 8
// slices are added through shared memory and thread (x, y) writes output row o0 + y. The matrix
// is read through the read-only cache (a warp reads one entry: a broadcast). Grid: x strides
// over the columns, y over chunks of 8 output rows.
//
// gk_mixbin_XY (one matrix per bin, frames domain): y[o, f, b] = sum_i Mt[o, i, b] * x[i, f, b]
// with Mt the per-bin stack stored (C_out, C_in, bins) so consecutive threads (consecutive b)
// read consecutive entries. One thread per (f, b) position, 8 output rows at a time.
//
// gk_transpose_*: out (cols x rows) = in (rows x cols)^T through 32 x 32 shared tiles (and a
// promotion of real to complex); with it a (C, F, bins) block becomes (bins, C, F) and back,
// the layout cuBLAS's strided-batched gemm needs for per-bin mixing of large matrices.
#include "gk_common.cuh"

namespace {

constexpr int kRows = 8;    // output rows per thread (and input slices per block)
constexpr int kTile = 32;   // columns per block row

template <class T> __device__ __forceinline__ T zero();
template <> __device__ __forceinline__ float zero<float>() { return 0.0f; }
template <> __device__ __forceinline__ float2 zero<float2>() { return make_float2(0.0f, 0.0f); }

// acc += m * x for the four type combinations.
__device__ __forceinline__ void mac(float& acc, float m, float x) { acc = fmaf(m, x, acc); }
__device__ __forceinline__ void mac(float2& acc, float m, float2 x) {
    acc.x = fmaf(m, x.x, acc.x);
    acc.y = fmaf(m, x.y, acc.y);
}
__device__ __forceinline__ void mac(float2& acc, float2 m, float x) {
    acc.x = fmaf(m.x, x, acc.x);
    acc.y = fmaf(m.y, x, acc.y);
}
__device__ __forceinline__ void mac(float2& acc, float2 m, float2 x) {
    acc.x = fmaf(m.x, x.x, fmaf(-m.y, x.y, acc.x));
    acc.y = fmaf(m.x, x.y, fmaf(m.y, x.x, acc.y));
}
__device__ __forceinline__ void add_to(float& a, float b) { a += b; }
__device__ __forceinline__ void add_to(float2& a, float2 b) {
    a.x += b.x;
    a.y += b.y;
}

template <class MT, class XT, class YT>
__device__ __forceinline__ void mix_small(YT* __restrict__ y, const MT* __restrict__ m,
                                          const XT* __restrict__ x, int c_out, int c_in,
                                          gk_size_t len, gk_size_t row) {
    __shared__ YT partial[kRows][kRows][kTile + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int o0 = blockIdx.y * kRows;
    const int rows_here = c_out - o0 < kRows ? c_out - o0 : kRows;
    for (gk_size_t col0 = (gk_size_t)blockIdx.x * kTile; col0 < len; col0 += (gk_size_t)gridDim.x * kTile) {
        const gk_size_t col = col0 + tx;
        YT acc[kRows];
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r] = zero<YT>();
        if (col < len) {
            for (int i = ty; i < c_in; i += kRows) {
                const XT xv = x[(gk_size_t)i * row + col];
                const MT* mi = m + (gk_size_t)o0 * c_in + i;
#pragma unroll
                for (int r = 0; r < kRows; ++r)
                    if (r < rows_here) mac(acc[r], __ldg(mi + (gk_size_t)r * c_in), xv);
            }
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) partial[ty][r][tx] = acc[r];
        __syncthreads();
        if (ty < rows_here && col < len) {
            YT sum = partial[0][ty][tx];
#pragma unroll
            for (int s = 1; s < kRows; ++s) add_to(sum, partial[s][ty][tx]);
            y[(gk_size_t)(o0 + ty) * row + col] = sum;
        }
        __syncthreads();
    }
}

template <class MT, class XT, class YT>
__device__ __forceinline__ void mix_per_bin(YT* __restrict__ y, const MT* __restrict__ mt,
                                            const XT* __restrict__ x, int c_out, int c_in,
                                            gk_size_t positions, gk_size_t bins, gk_size_t row) {
    for (gk_size_t p = gk_thread_index(); p < positions; p += gk_grid_stride()) {
        const gk_size_t b = p % bins;
        for (int o0 = 0; o0 < c_out; o0 += kRows) {
            const int rows_here = c_out - o0 < kRows ? c_out - o0 : kRows;
            YT acc[kRows];
#pragma unroll
            for (int r = 0; r < kRows; ++r) acc[r] = zero<YT>();
            for (int i = 0; i < c_in; ++i) {
                const XT xv = x[(gk_size_t)i * row + p];
#pragma unroll
                for (int r = 0; r < kRows; ++r)
                    if (r < rows_here)
                        mac(acc[r], __ldg(mt + ((gk_size_t)(o0 + r) * c_in + i) * bins + b), xv);
            }
#pragma unroll
            for (int r = 0; r < kRows; ++r)
                if (r < rows_here) y[(gk_size_t)(o0 + r) * row + p] = acc[r];
        }
    }
}

__device__ __forceinline__ float convert(float v, float) { return v; }
__device__ __forceinline__ float2 convert(float2 v, float2) { return v; }
__device__ __forceinline__ float2 convert(float v, float2) { return make_float2(v, 0.0f); }

// out[c * rows + r] = in[r * cols + c]; block (32, 8).
template <class TI, class TO>
__device__ __forceinline__ void transpose(TO* __restrict__ out, const TI* __restrict__ in,
                                          gk_size_t rows, gk_size_t cols) {
    __shared__ TO tile[kTile][kTile + 1];
    for (gk_size_t by = blockIdx.y; by * kTile < rows; by += gridDim.y) {
        for (gk_size_t bx = blockIdx.x; bx * kTile < cols; bx += gridDim.x) {
            for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
                const gk_size_t r = by * kTile + j, c = bx * kTile + threadIdx.x;
                if (r < rows && c < cols) tile[j][threadIdx.x] = convert(in[r * cols + c], TO{});
            }
            __syncthreads();
            for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
                const gk_size_t c = bx * kTile + j, r = by * kTile + threadIdx.x;
                if (c < cols && r < rows) out[c * rows + r] = tile[threadIdx.x][j];
            }
            __syncthreads();
        }
    }
}

// Batched strided transpose: for z < batches, r < rows, c < cols:
//   out[z * out_batch + c * ldo + r] = in[z * in_batch + r * ldi + c]
// (the frame ranges of the cuBLAS per-bin path when a block runs in units); block (32, 8),
// grid (x: column tiles, y: row tiles, z: batches), all grid-stride.
template <class TI, class TO>
__device__ __forceinline__ void transpose_strided(TO* __restrict__ out, const TI* __restrict__ in,
                                                  gk_size_t rows, gk_size_t cols, gk_size_t ldi,
                                                  gk_size_t ldo, gk_size_t batches,
                                                  gk_size_t in_batch, gk_size_t out_batch) {
    __shared__ TO tile[kTile][kTile + 1];
    for (gk_size_t z = blockIdx.z; z < batches; z += gridDim.z) {
        const TI* src = in + z * in_batch;
        TO* dst = out + z * out_batch;
        for (gk_size_t by = blockIdx.y; by * kTile < rows; by += gridDim.y) {
            for (gk_size_t bx = blockIdx.x; bx * kTile < cols; bx += gridDim.x) {
                for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
                    const gk_size_t r = by * kTile + j, c = bx * kTile + threadIdx.x;
                    if (r < rows && c < cols) tile[j][threadIdx.x] = convert(src[r * ldi + c], TO{});
                }
                __syncthreads();
                for (int j = threadIdx.y; j < kTile; j += blockDim.y) {
                    const gk_size_t c = bx * kTile + j, r = by * kTile + threadIdx.x;
                    if (c < cols && r < rows) dst[c * ldo + r] = tile[threadIdx.x][j];
                }
                __syncthreads();
            }
        }
    }
}

}  // namespace

// Small-matrix mixing. m: (c_out, c_in) row-major; x: (c_in, row), y: (c_out, row); the first
// `len` columns of each row are mixed.
extern "C" __global__ void gk_mix_rr(float* y, const float* m, const float* x, int c_out, int c_in,
                                     gk_size_t len, gk_size_t row) {
    mix_small<float, float, float>(y, m, x, c_out, c_in, len, row);
}
extern "C" __global__ void gk_mix_rc(float2* y, const float* m, const float2* x, int c_out,
                                     int c_in, gk_size_t len, gk_size_t row) {
    mix_small<float, float2, float2>(y, m, x, c_out, c_in, len, row);
}
extern "C" __global__ void gk_mix_cr(float2* y, const float2* m, const float* x, int c_out,
                                     int c_in, gk_size_t len, gk_size_t row) {
    mix_small<float2, float, float2>(y, m, x, c_out, c_in, len, row);
}
extern "C" __global__ void gk_mix_cc(float2* y, const float2* m, const float2* x, int c_out,
                                     int c_in, gk_size_t len, gk_size_t row) {
    mix_small<float2, float2, float2>(y, m, x, c_out, c_in, len, row);
}

// Per-bin mixing. mt: (c_out, c_in, bins); x: (c_in, row), y: (c_out, row) with row = frames *
// bins; the first `positions` (= valid frames * bins) entries of each row are mixed.
extern "C" __global__ void gk_mixbin_rr(float* y, const float* mt, const float* x, int c_out,
                                        int c_in, gk_size_t positions, gk_size_t bins, gk_size_t row) {
    mix_per_bin<float, float, float>(y, mt, x, c_out, c_in, positions, bins, row);
}
extern "C" __global__ void gk_mixbin_rc(float2* y, const float* mt, const float2* x, int c_out,
                                        int c_in, gk_size_t positions, gk_size_t bins, gk_size_t row) {
    mix_per_bin<float, float2, float2>(y, mt, x, c_out, c_in, positions, bins, row);
}
extern "C" __global__ void gk_mixbin_cr(float2* y, const float2* mt, const float* x, int c_out,
                                        int c_in, gk_size_t positions, gk_size_t bins, gk_size_t row) {
    mix_per_bin<float2, float, float2>(y, mt, x, c_out, c_in, positions, bins, row);
}
extern "C" __global__ void gk_mixbin_cc(float2* y, const float2* mt, const float2* x, int c_out,
                                        int c_in, gk_size_t positions, gk_size_t bins, gk_size_t row) {
    mix_per_bin<float2, float2, float2>(y, mt, x, c_out, c_in, positions, bins, row);
}

// Transposes for the cuBLAS per-bin path (out = in^T; in is rows x cols).
extern "C" __global__ void gk_transpose_f32(float* out, const float* in, gk_size_t rows, gk_size_t cols) {
    transpose<float, float>(out, in, rows, cols);
}
extern "C" __global__ void gk_transpose_c64(float2* out, const float2* in, gk_size_t rows, gk_size_t cols) {
    transpose<float2, float2>(out, in, rows, cols);
}
extern "C" __global__ void gk_transpose_f32_c64(float2* out, const float* in, gk_size_t rows,
                                                gk_size_t cols) {
    transpose<float, float2>(out, in, rows, cols);
}

// Strided batched transposes (see transpose_strided): per-bin cuBLAS mixing of a frame range.
extern "C" __global__ void gk_transpose_strided_f32(float* out, const float* in, gk_size_t rows,
                                                    gk_size_t cols, gk_size_t ldi, gk_size_t ldo,
                                                    gk_size_t batches, gk_size_t in_batch,
                                                    gk_size_t out_batch) {
    transpose_strided<float, float>(out, in, rows, cols, ldi, ldo, batches, in_batch, out_batch);
}
extern "C" __global__ void gk_transpose_strided_c64(float2* out, const float2* in, gk_size_t rows,
                                                    gk_size_t cols, gk_size_t ldi, gk_size_t ldo,
                                                    gk_size_t batches, gk_size_t in_batch,
                                                    gk_size_t out_batch) {
    transpose_strided<float2, float2>(out, in, rows, cols, ldi, ldo, batches, in_batch, out_batch);
}
extern "C" __global__ void gk_transpose_strided_f32_c64(float2* out, const float* in,
                                                        gk_size_t rows, gk_size_t cols,
                                                        gk_size_t ldi, gk_size_t ldo,
                                                        gk_size_t batches, gk_size_t in_batch,
                                                        gk_size_t out_batch) {
    transpose_strided<float, float2>(out, in, rows, cols, ldi, ldo, batches, in_batch, out_batch);
}

// out = complex(in, 0): a real input promoted for a complex gemm.
extern "C" __global__ void gk_promote_f32_c64(float2* out, const float* in, gk_size_t n) {
    for (gk_size_t i = gk_thread_index(); i < n; i += gk_grid_stride()) out[i] = make_float2(in[i], 0.0f);
}
