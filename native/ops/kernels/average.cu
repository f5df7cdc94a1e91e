// Frames-domain averaging (pygpukit_dsp/stages/average.py): mean of each run of k frames.
//
//     y[c, g, b] = sum_{f in [g*k, min(g*k + k, n))} x[c, f, b] / count      g < ceil(n / k)
//
// x is (channels, frames, bins), y is (channels, groups, bins), both C-contiguous full blocks;
// n is the number of valid input frames (a final block may hold fewer than `frames`, its last
// group then averages the frames that remain). Sums are taken in double precision like the CPU
// stage (float32 sums over thousands of frames drift).
//
// Block (32, R): threadIdx.x picks the bin (32 consecutive bins: coalesced), the R rows of
// threadIdx.y stride over the frames of a group; a shared-memory tree adds the R partial sums
// (deterministic order). Grid: x tiles the bins, y strides over groups, z over channels.
#include "gk_common.cuh"

namespace {

constexpr int kMaxRows = 32;

struct Real {
    double v;
    __device__ void add(float x) { v += (double)x; }
    __device__ void add(const Real& o) { v += o.v; }
};
struct Cplx {
    double re, im;
    __device__ void add(float2 x) { re += (double)x.x; im += (double)x.y; }
    __device__ void add(const Cplx& o) { re += o.re; im += o.im; }
};

__device__ __forceinline__ Real zero_of(Real) { return Real{0.0}; }
__device__ __forceinline__ Cplx zero_of(Cplx) { return Cplx{0.0, 0.0}; }
__device__ __forceinline__ float mean_of(const Real& s, double count) { return (float)(s.v / count); }
__device__ __forceinline__ float2 mean_of(const Cplx& s, double count) {
    return make_float2((float)(s.re / count), (float)(s.im / count));
}

template <class T, class Acc>
__device__ __forceinline__ void average_frames(T* __restrict__ y, const T* __restrict__ x,
                                               gk_size_t channels, gk_size_t frames,
                                               gk_size_t bins, gk_size_t k, gk_size_t n,
                                               gk_size_t groups_out) {
    __shared__ Acc partial[kMaxRows][33];
    const int tx = threadIdx.x, ty = threadIdx.y, rows = blockDim.y;
    const gk_size_t b = (gk_size_t)blockIdx.x * 32 + tx;
    const gk_size_t groups = (n + k - 1) / k;  // valid output groups
    for (gk_size_t c = blockIdx.z; c < channels; c += gridDim.z) {
        const T* xc = x + c * frames * bins;
        T* yc = y + c * groups_out * bins;
        for (gk_size_t g = blockIdx.y; g < groups; g += gridDim.y) {
            const gk_size_t f0 = g * k;
            const gk_size_t f1 = f0 + k < n ? f0 + k : n;
            Acc acc = zero_of(Acc{});
            if (b < bins)
                for (gk_size_t f = f0 + ty; f < f1; f += rows) acc.add(xc[f * bins + b]);
            partial[ty][tx] = acc;
            __syncthreads();
            for (int s = rows / 2; s > 0; s >>= 1) {
                if (ty < s) partial[ty][tx].add(partial[ty + s][tx]);
                __syncthreads();
            }
            if (ty == 0 && b < bins) yc[g * bins + b] = mean_of(partial[0][tx], (double)(f1 - f0));
            __syncthreads();  // `partial` is reused by the next group
        }
    }
}

// One unit of a chunked full block (Op::enqueue_units): the frames [f_begin, f_end) of every
// channel. A group wholly inside the range is averaged as above. A group cut by the range
// boundaries (a unit shorter than the group) carries its double-precision sum in acc
// (channels, groups_out, bins): the unit holding the group's first frame writes it, later
// units add to it, and the unit holding its last frame writes the mean. Units run in order on
// one stream, so acc is never read and written by two launches at once.
template <class T, class Acc>
__device__ __forceinline__ void average_frame_range(T* __restrict__ y, const T* __restrict__ x,
                                                    Acc* __restrict__ acc, gk_size_t channels,
                                                    gk_size_t frames, gk_size_t bins,
                                                    gk_size_t k, gk_size_t groups_out,
                                                    gk_size_t f_begin, gk_size_t f_end) {
    __shared__ Acc partial[kMaxRows][33];
    const int tx = threadIdx.x, ty = threadIdx.y, rows = blockDim.y;
    const gk_size_t b = (gk_size_t)blockIdx.x * 32 + tx;
    const gk_size_t g_first = f_begin / k, g_stop = (f_end + k - 1) / k;
    for (gk_size_t c = blockIdx.z; c < channels; c += gridDim.z) {
        const T* xc = x + c * frames * bins;
        T* yc = y + c * groups_out * bins;
        Acc* ac = acc + c * groups_out * bins;
        for (gk_size_t g = g_first + blockIdx.y; g < g_stop; g += gridDim.y) {
            const gk_size_t g0 = g * k, g1 = g0 + k;
            const gk_size_t f0 = g0 > f_begin ? g0 : f_begin;
            const gk_size_t f1 = g1 < f_end ? g1 : f_end;
            Acc sum = zero_of(Acc{});
            if (b < bins)
                for (gk_size_t f = f0 + ty; f < f1; f += rows) sum.add(xc[f * bins + b]);
            partial[ty][tx] = sum;
            __syncthreads();
            for (int s = rows / 2; s > 0; s >>= 1) {
                if (ty < s) partial[ty][tx].add(partial[ty + s][tx]);
                __syncthreads();
            }
            if (ty == 0 && b < bins) {
                Acc total = partial[0][tx];
                if (f0 != g0) total.add(ac[g * bins + b]);  // the group's frames in earlier units
                if (f1 == g1)
                    yc[g * bins + b] = mean_of(total, (double)k);
                else
                    ac[g * bins + b] = total;
            }
            __syncthreads();  // `partial` is reused by the next group
        }
    }
}

}  // namespace

// blockDim = (32, R) with R a power of two <= 32.
extern "C" __global__ void gk_average_f32(float* y, const float* x, gk_size_t channels,
                                          gk_size_t frames, gk_size_t bins, gk_size_t k,
                                          gk_size_t n, gk_size_t groups_out) {
    average_frames<float, Real>(y, x, channels, frames, bins, k, n, groups_out);
}

extern "C" __global__ void gk_average_c64(float2* y, const float2* x, gk_size_t channels,
                                          gk_size_t frames, gk_size_t bins, gk_size_t k,
                                          gk_size_t n, gk_size_t groups_out) {
    average_frames<float2, Cplx>(y, x, channels, frames, bins, k, n, groups_out);
}

// Chunked full blocks: frames [f_begin, f_end) of every channel; acc (channels, groups_out,
// bins) of double / double2 sums carries the groups cut by a unit boundary. blockDim = (32, R),
// grid (ceil(bins / 32), groups touched by the range (grid-stride), channels (grid-stride)).
extern "C" __global__ void gk_average_frames_f32(float* y, const float* x, double* acc,
                                                 gk_size_t channels, gk_size_t frames,
                                                 gk_size_t bins, gk_size_t k,
                                                 gk_size_t groups_out, gk_size_t f_begin,
                                                 gk_size_t f_end) {
    average_frame_range<float, Real>(y, x, reinterpret_cast<Real*>(acc), channels, frames, bins,
                                     k, groups_out, f_begin, f_end);
}

extern "C" __global__ void gk_average_frames_c64(float2* y, const float2* x, double2* acc,
                                                 gk_size_t channels, gk_size_t frames,
                                                 gk_size_t bins, gk_size_t k,
                                                 gk_size_t groups_out, gk_size_t f_begin,
                                                 gk_size_t f_end) {
    average_frame_range<float2, Cplx>(y, x, reinterpret_cast<Cplx*>(acc), channels, frames, bins,
                                      k, groups_out, f_begin, f_end);
}
