// The X-engine on tensor cores (method "tensor" of native/ops/xcorr.cpp, at most 64 inputs, SM 8.0+):
// FP32 accuracy from FP16 tensor cores (mma.sync.m16n8k16, FP32 accumulate) by splitting each
// value in two: with a per-row power-of-two scale s (the row's largest magnitude so far maps to
// [2^13, 2^14)), x s = hi + lo, hi = fp16(x s), lo = fp16(x s - hi), and a product a b is
// (lo_a hi_b + hi_a lo_b + hi_a hi_b) / (s_a s_b): 22 significant bits, as 3xTF32 gives, at half
// the instructions (16 frames an mma). A row's scale only falls (when a round holds a larger value
// than any before, its accumulators are scaled down to match), so nothing overflows FP16.
//
// For one bin and run of N frames, with Xr, Xi the C x N real and imaginary parts:
//   Re R = Xr Xr^T + Xi Xi^T,   Im R = Xi Xr^T - Xr Xi^T   (R = X X^H, pairs i <= j kept).
// The inputs are 16-row blocks; a tile is the 16 x 16 pairs of blocks (I, J), I <= J. Every
// operand comes from one set of fragments: with v[r][h][q] the frames k0 + 2 tid + 8q (and + 1)
// of row 16r + 8h + gid, the B operand (col-major 16 x 8) of block r's half h is {v[r][h][0],
// v[r][h][1]} and the A operand (row-major 16 x 16) of block r is {v[r][0][0], v[r][1][0],
// v[r][0][1], v[r][1][1]}. So a warp splits a block's frames once and uses them as A and as B;
// it keeps two blocks' fragments at a time (stream_tiles), so that 4 bins a CTA fit the 128
// registers a thread has at 2 CTAs an SM (with four blocks' fragments live, ptxas spilled 332
// bytes at 64 inputs; now 128).
//
// A CTA takes GK_XT_BINS bins; each bin has roles_of(CT) warps (CT = ceil(C / 16)): one up to 16
// inputs, three (a tile each) up to 32, two above, which split its CT(CT+1)/2 tiles as rows of
// tiles, paired so that at 64 inputs each warp holds 5 tiles (80 accumulators). Frames stream
// through shared memory in rounds of 16, double-buffered by cp.async (zero-filled past the
// inputs, the bins and the run; each copy asks L2 for the 128 bytes around it, which the CTAs of
// the next bins read: a CTA's 4 bins are 32 bytes of a row's frame), raw complex rows of
// GK_XT_LD 8-byte words with the frames in the order 0 1 8 9 2 3 10 11 ...: a thread's four
// frames of a row are adjacent (two 16-byte loads) and a warp's loads fall in distinct banks.
// The epilogue puts the tiles in shared memory (bins innermost) and writes the pairs with the
// CTA's bins adjacent: whole 32-byte sectors (with 2 bins a CTA, half sectors, the writes alone ran
// at 0.78 TB/s on an H200 against 2.09 whole; benchmarks/xcorr_memory_floor.py), divided by the
// run's frame count and the rows' scales. Shared memory is dynamic (GK_XT_SMEM floats, over
// 48 KiB). Input element (c, f, b) at c*sc + f*sf + b*sb, as gk_xcorr_gather (kernels/xcorr.cu).
#include "gk_common.cuh"

#ifndef GK_XT_BINS
#define GK_XT_BINS 4  // bins a CTA (GK_XT_BINS * 96 threads at most): 32 bytes, a sector, of each output row
#endif
#ifndef GK_XT_MIN_CTAS
#define GK_XT_MIN_CTAS 2  // CTAs an SM (__launch_bounds__: 128 registers a thread)
#endif
#define GK_XT_FRAMES 16
#define GK_XT_LD 18
#define GK_XT_ROWS 64
#define GK_XT_BUF (GK_XT_BINS * GK_XT_ROWS * GK_XT_LD)  // float2 a buffer
#define GK_XT_RLD 264  // floats per (tile, part, bin) 16 x 16 in the epilogue: bins 8 banks apart
#define GK_XT_TILES 10
#define GK_XT_EPI (GK_XT_BINS * GK_XT_TILES * 2 * GK_XT_RLD)
#define GK_XT_SMEM (4 * GK_XT_BUF > GK_XT_EPI ? 4 * GK_XT_BUF : GK_XT_EPI)  // floats (dynamic: kTensorSmemBytes of xcorr.cpp)
#define GK_XT_TOP 14  // a row's largest magnitude so far, scaled, is below 2^GK_XT_TOP (FP16: 65504)
#define GK_XT_KMAX 126  // scale exponents stay in [-126, 126] (a float's normal range)

namespace {

// {lo, hi} as FP16 (rounded to nearest)
__device__ __forceinline__ unsigned f16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ float2 f16x2_to_float2(unsigned v) {
    unsigned short a, b;
    asm("mov.b32 {%0, %1}, %2;\n" : "=h"(a), "=h"(b) : "r"(v));
    float x, y;
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(x) : "h"(a));
    asm("cvt.f32.f16 %0, %1;\n" : "=f"(y) : "h"(b));
    return make_float2(x, y);
}

// d += a b on the tensor cores (not volatile: the compiler may schedule it among the others)
__device__ __forceinline__ void mma(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                    unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 16-row block's values split in two FP16 parts, as fragments: real and imaginary, hi and
// lo, [half][q], two frames a register
struct Frag {
    unsigned rh[2][2], rl[2][2], ih[2][2], il[2][2];
};

// d += A B(half h) for one part of A and one of B given as hi / lo fragments, small terms first
__device__ __forceinline__ void mma3(float (&d)[4], const unsigned (&ah)[2][2], const unsigned (&al)[2][2],
                                     const unsigned (&bh)[2][2], const unsigned (&bl)[2][2], int h) {
    mma(d, al[0][0], al[1][0], al[0][1], al[1][1], bh[h][0], bh[h][1]);
    mma(d, ah[0][0], ah[1][0], ah[0][1], ah[1][1], bl[h][0], bl[h][1]);
    mma(d, ah[0][0], ah[1][0], ah[0][1], ah[1][1], bh[h][0], bh[h][1]);
}

// The tiles of a warp: rows of tiles, paired (row 0 with row 3 at CT = 4) so the warps of a bin
// hold about as many; at CT = 2 a tile a warp (one warp a bin would leave the SMs short of
// warps). Tile (I, J) is number I*CT - I(I-1)/2 + J - I of the row-major triangle.
struct Tiles {
    int n, i[5], j[5];
};

__device__ constexpr Tiles role_tiles(int CT, int role) {
    return CT == 1   ? Tiles{1, {0, 0, 0, 0, 0}, {0, 0, 0, 0, 0}}
           : CT == 2 ? Tiles{1, {role == 2 ? 1 : 0, 0, 0, 0, 0}, {role == 0 ? 0 : 1, 0, 0, 0, 0}}
           : CT == 3 ? (role == 0 ? Tiles{3, {0, 0, 0, 0, 0}, {0, 1, 2, 0, 0}}
                                  : Tiles{3, {1, 1, 2, 0, 0}, {1, 2, 2, 0, 0}})
                     : (role == 0 ? Tiles{5, {0, 0, 0, 0, 3}, {0, 1, 2, 3, 3}}
                                  : Tiles{5, {1, 1, 1, 2, 2}, {1, 2, 3, 2, 3}});
}

typedef float Acc[5][2][2][4];  // [tile][half][re, im][c0..c3]

// Position of frame f (0..15) in a staged row: a thread's frames 2t, 2t+1, 2t+8, 2t+9 adjacent
__device__ __forceinline__ unsigned frame_slot(unsigned f) { return 4 * ((f & 7) >> 1) + 2 * (f >> 3) + (f & 1); }

// A bin's rows' scales: s = 2^k (k_of), and the factor f = 2^-(fall of k) of this round
struct Scales {
    int* k;     // [GK_XT_BINS][GK_XT_ROWS]
    float* f;   // [GK_XT_BINS][GK_XT_ROWS]
};

__device__ __forceinline__ float pow2(int k) { return __uint_as_float((unsigned)(k + 127) << 23); }

// Block r's rows of the staged round, scaled by their rows' scales and split
__device__ __forceinline__ void load_frag(Frag& f, const float2* __restrict__ sb, const int* __restrict__ sk, int r,
                                          unsigned gid, unsigned tid) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = r * 16 + h * 8 + gid;
        const float s = pow2(sk[row]);
        const float4* p = reinterpret_cast<const float4*>(sb + row * GK_XT_LD + 4 * tid);
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            const float4 v = p[q];  // frames 2 tid + 8q, + 1: (re, im, re, im)
            const float x0 = v.x * s, y0 = v.y * s, x1 = v.z * s, y1 = v.w * s;
            f.rh[h][q] = f16x2(x0, x1);
            f.ih[h][q] = f16x2(y0, y1);
            const float2 rh = f16x2_to_float2(f.rh[h][q]), ih = f16x2_to_float2(f.ih[h][q]);
            f.rl[h][q] = f16x2(x0 - rh.x, x1 - rh.y);
            f.il[h][q] = f16x2(y0 - ih.x, y1 - ih.y);
        }
    }
}

__device__ __forceinline__ void negate_im(Frag& f) {
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int q = 0; q < 2; ++q) {
            f.ih[h][q] ^= 0x80008000u;
            f.il[h][q] ^= 0x80008000u;
        }
}

// Tile (I, J) += X_I X_J^H over the round from the fragments of blocks I (a) and J (b), which
// are one in a diagonal tile: Re += Ar Br + Ai Bi; Im += Ai Br - Ar Bi (Bi negated in place, in a
// diagonal tile Ai with it once its products are done, then restored)
__device__ __forceinline__ void tile_mma(float (&acc)[2][2][4], const Frag& a, Frag& b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        mma3(acc[h][0], a.rh, a.rl, b.rh, b.rl, h);
        mma3(acc[h][0], a.ih, a.il, b.ih, b.il, h);
        mma3(acc[h][1], a.ih, a.il, b.rh, b.rl, h);
    }
    negate_im(b);
#pragma unroll
    for (int h = 0; h < 2; ++h) mma3(acc[h][1], a.rh, a.rl, b.ih, b.il, h);
    negate_im(b);
}

// A warp's round as steps: split block `block` into fragment set `load` (-1: none), then tile
// `tile` of acc (-1: none) += sets a, b. Two sets live at a time: at 64 inputs the fragments of
// four blocks and the 80 accumulators would not fit the 128 registers a thread has at two CTAs
// an SM (the second role splits block 2 twice for it).
struct Step {
    int load, block, tile, a, b;
};
struct Schedule {
    int n;
    Step s[5];
};

__device__ constexpr Schedule schedule_of(int CT, int role) {
    // acc numbered as role_tiles; CT 1 and 2: a tile a warp
    return CT == 4 && role == 0 ? Schedule{5, {{0, 0, 0, 0, 0}, {1, 1, 1, 0, 1}, {1, 2, 2, 0, 1}, {1, 3, 3, 0, 1},
                                               {-1, 0, 4, 1, 1}}}  // (0,0) (0,1) (0,2) (0,3) (3,3)
           : CT == 4 ? Schedule{5, {{0, 2, 3, 0, 0}, {1, 3, 4, 0, 1}, {0, 1, 2, 0, 1}, {-1, 0, 0, 0, 0},
                                    {1, 2, 1, 0, 1}}}  // (2,2) (2,3) (1,3) (1,1) (1,2)
           : CT == 3 && role == 0 ? Schedule{3, {{0, 0, 0, 0, 0}, {1, 1, 1, 0, 1}, {1, 2, 2, 0, 1}}}
           : CT == 3 ? Schedule{3, {{0, 1, 0, 0, 0}, {1, 2, 1, 0, 1}, {-1, 0, 2, 1, 1}}}
           : CT == 2 && role == 1 ? Schedule{2, {{0, 0, -1, 0, 0}, {1, 1, 0, 0, 1}}}  // (0,1)
                                  : Schedule{1, {{0, CT == 2 && role == 2 ? 1 : 0, 0, 0, 0}}};  // (0,0), (1,1)
}

template <int CT, int ROLE>
__device__ __forceinline__ void stream_tiles(Acc& acc, const float2* __restrict__ sb, const int* __restrict__ sk,
                                             unsigned gid, unsigned tid) {
    constexpr Schedule S = schedule_of(CT, ROLE);
    Frag F[2];
#pragma unroll
    for (int k = 0; k < 5; ++k) {
        if (k >= S.n) continue;
        if (S.s[k].load >= 0) load_frag(F[S.s[k].load], sb, sk, S.s[k].block, gid, tid);
        if (S.s[k].tile >= 0) tile_mma(acc[S.s[k].tile], F[S.s[k].a], F[S.s[k].b]);
    }
}

// One round of a warp's tiles; sb: the bin's staged rows, sk / sf: its rows' scale exponents and
// this round's factors; rescale: some row's scale fell this round
template <int CT, int ROLE>
__device__ __forceinline__ void round_tiles(Acc& acc, const float2* __restrict__ sb, const int* __restrict__ sk,
                                            const float* __restrict__ sf, bool rescale, unsigned gid, unsigned tid) {
    constexpr Tiles T = role_tiles(CT, ROLE);
    if (rescale) {  // the accumulators to the rows' new scales: element (i, j) times f_i f_j
#pragma unroll
        for (int t = 0; t < 5; ++t) {
            if (t >= T.n) continue;
            const float r0 = sf[T.i[t] * 16 + gid], r1 = sf[T.i[t] * 16 + 8 + gid];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float c0 = sf[T.j[t] * 16 + h * 8 + 2 * tid], c1 = sf[T.j[t] * 16 + h * 8 + 2 * tid + 1];
#pragma unroll
                for (int p = 0; p < 2; ++p) {
                    acc[t][h][p][0] *= r0 * c0;
                    acc[t][h][p][1] *= r0 * c1;
                    acc[t][h][p][2] *= r1 * c0;
                    acc[t][h][p][3] *= r1 * c1;
                }
            }
        }
    }
    stream_tiles<CT, ROLE>(acc, sb, sk, gid, tid);
}

// The warp's tiles into the epilogue's shared memory
template <int CT, int ROLE>
__device__ __forceinline__ void store_tiles(const Acc& acc, float* sm, unsigned bb, unsigned gid, unsigned tid) {
    constexpr Tiles T = role_tiles(CT, ROLE);
#pragma unroll
    for (int t = 0; t < 5; ++t) {
        if (t >= T.n) continue;
        const int tile = T.i[t] * CT - T.i[t] * (T.i[t] - 1) / 2 + T.j[t] - T.i[t];
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int p = 0; p < 2; ++p) {
                float* R = sm + ((tile * 2 + p) * GK_XT_BINS + bb) * GK_XT_RLD;
                const unsigned s = h * 8 + 2 * tid;
                R[gid * 16 + s] = acc[t][h][p][0];
                R[gid * 16 + s + 1] = acc[t][h][p][1];
                R[(gid + 8) * 16 + s] = acc[t][h][p][2];
                R[(gid + 8) * 16 + s + 1] = acc[t][h][p][3];
            }
    }
}

// warps a bin
__host__ __device__ constexpr unsigned roles_of(unsigned CT) { return CT == 2 ? 3 : CT >= 3 ? 2 : 1; }

struct RoundOp {  // a round of the warp's tiles
    Acc& acc;
    const float2* s;
    const int* k;
    const float* f;
    bool rescale;
    unsigned gid, tid;
    template <int CT, int ROLE>
    __device__ __forceinline__ void run() { round_tiles<CT, ROLE>(acc, s, k, f, rescale, gid, tid); }
};

struct StoreOp {  // the warp's tiles into the epilogue's memory
    const Acc& acc;
    float* sm;
    unsigned bb, gid, tid;
    template <int CT, int ROLE>
    __device__ __forceinline__ void run() { store_tiles<CT, ROLE>(acc, sm, bb, gid, tid); }
};

// op.run<CT, role>() for this warp: WIDE kernels take 33 to 64 inputs, the others up to 32
template <bool WIDE, class Op>
__device__ __forceinline__ void by_role(unsigned CT, unsigned role, Op&& op) {
    if (WIDE) {
        if (CT == 4) {
            if (role == 0) op.template run<4, 0>();
            else op.template run<4, 1>();
        } else {
            if (role == 0) op.template run<3, 0>();
            else op.template run<3, 1>();
        }
    } else if (CT == 2) {
        if (role == 0) op.template run<2, 0>();
        else if (role == 1) op.template run<2, 1>();
        else op.template run<2, 2>();
    } else {
        op.template run<1, 0>();
    }
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

__device__ __forceinline__ void copy_async(float2* dst, const float* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0));
}

__device__ __forceinline__ void copy_async(float2* dst, const float2* src, bool valid) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global.L2::128B [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 8 : 0));
}

template <bool WIDE, class T>
__device__ __forceinline__ void xcorr_tc(float2* __restrict__ out, const T* __restrict__ x, unsigned C,
                                         gk_size_t sc, gk_size_t sf, gk_size_t sb, unsigned bins, unsigned N,
                                         unsigned G, unsigned n_valid, unsigned b_begin, unsigned b_end) {
    extern __shared__ __align__(16) float sm[];  // GK_XT_SMEM floats
    __shared__ int scale_k[GK_XT_BINS * GK_XT_ROWS];     // each row's scale exponent so far
    __shared__ float scale_f[GK_XT_BINS * GK_XT_ROWS];   // this round's factor of its accumulators
    float2* stage = reinterpret_cast<float2*>(sm);  // 2 buffers of GK_XT_BUF
    const unsigned CT = (C + 15) / 16, tiles = CT * (CT + 1) / 2, rows = CT * 16, roles = roles_of(CT);
    const unsigned warp = threadIdx.x / 32, lane = threadIdx.x % 32, gid = lane >> 2, tid = lane & 3;
    const unsigned bb = warp / roles, role = warp % roles;
    const unsigned b0 = b_begin + blockIdx.x * GK_XT_BINS, g = blockIdx.y;
    const unsigned f0 = g * N, rounds = (N + GK_XT_FRAMES - 1) / GK_XT_FRAMES;
    if (sizeof(T) == 4)  // real input: the copies fill .x only
        for (unsigned e = threadIdx.x; e < 2 * GK_XT_BUF; e += blockDim.x) stage[e] = make_float2(0.0f, 0.0f);
    for (unsigned e = threadIdx.x; e < GK_XT_BINS * GK_XT_ROWS; e += blockDim.x) scale_k[e] = GK_XT_KMAX;
    __syncthreads();
    // Each thread copies one bin's one frame of every (blockDim / 32)-th row: GK_XT_BINS *
    // GK_XT_FRAMES = 32 divides blockDim, so its bin, frame and first row are fixed, and a round
    // only moves its pointers (no index arithmetic per element)
    const unsigned my_bin = threadIdx.x % GK_XT_BINS, my_frame = (threadIdx.x / GK_XT_BINS) % GK_XT_FRAMES;
    const unsigned row0 = threadIdx.x / (GK_XT_BINS * GK_XT_FRAMES), row_step = blockDim.x / (GK_XT_BINS * GK_XT_FRAMES);
    const bool my_bin_valid = b0 + my_bin < b_end;
    const T* my_x = x + (gk_size_t)row0 * sc + (gk_size_t)(f0 + my_frame) * sf + (gk_size_t)(b0 + my_bin) * sb;
    const gk_size_t x_step = (gk_size_t)row_step * sc;
    float2* my_stage = stage + (my_bin * GK_XT_ROWS + row0) * GK_XT_LD + frame_slot(my_frame);
    // round r's frames of the CTA's bins into buffer r & 1
    auto fill = [&](unsigned r) {
        float2* dst = my_stage + (r & 1) * GK_XT_BUF;
        const T* src = my_x + (gk_size_t)(r * GK_XT_FRAMES) * sf;
        const bool frame_valid = my_bin_valid && r * GK_XT_FRAMES + my_frame < N;
        for (unsigned c = row0; c < rows; c += row_step, dst += row_step * GK_XT_LD, src += x_step) {
            const bool valid = frame_valid && c < C;
            copy_async(dst, valid ? src : x, valid);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    };
    Acc acc;
#pragma unroll
    for (int t = 0; t < 5; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int p = 0; p < 2; ++p)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[t][h][p][e] = 0.0f;
    fill(0);
    for (unsigned r = 0; r < rounds; ++r) {
        if (r + 1 < rounds) {
            fill(r + 1);
            asm volatile("cp.async.wait_group 1;\n" ::);
        } else {
            asm volatile("cp.async.wait_group 0;\n" ::);
        }
        __syncthreads();
        const float2* s = stage + (r & 1) * GK_XT_BUF;
        // each row's largest magnitude this round sets its scale; a fall rescales its accumulators
        bool fell = false;
        for (unsigned e = threadIdx.x; e < GK_XT_BINS * rows; e += blockDim.x) {
            const unsigned bin = e / rows, row = e % rows;
            const float4* p = reinterpret_cast<const float4*>(s + (bin * GK_XT_ROWS + row) * GK_XT_LD);
            float m = 0.0f;
#pragma unroll
            for (int i = 0; i < GK_XT_FRAMES / 2; ++i) {
                const float4 v = p[i];
                m = fmaxf(m, fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
            }
            // m = u 2^e, u in [0.5, 1): m 2^(TOP - e) in [2^(TOP-1), 2^TOP)
            const int e2 = (int)((__float_as_uint(m) >> 23) & 0xffu) - 126;
            int k = GK_XT_TOP - e2;
            k = k > GK_XT_KMAX ? GK_XT_KMAX : k < -GK_XT_KMAX ? -GK_XT_KMAX : k;
            const int* kp = scale_k + bin * GK_XT_ROWS + row;
            const int old = *kp;
            const int knew = k < old ? k : old;
            scale_k[bin * GK_XT_ROWS + row] = knew;
            // 2^-(fall): 1 if none; below a float's range 0 (a row that was all zeros: so are its sums)
            scale_f[bin * GK_XT_ROWS + row] = knew - old < -GK_XT_KMAX ? 0.0f : pow2(knew - old);
            fell |= knew < old;
        }
        const bool rescale = __syncthreads_or(fell) && r > 0;  // round 0: the accumulators are zero
        by_role<WIDE>(CT, role, RoundOp{acc, s + bb * GK_XT_ROWS * GK_XT_LD, scale_k + bb * GK_XT_ROWS,
                                        scale_f + bb * GK_XT_ROWS, rescale, gid, tid});
        __syncthreads();  // the buffer and the factors are read: the next round may take them
    }
    by_role<WIDE>(CT, role, StoreOp{acc, sm, bb, gid, tid});
    __syncthreads();
    const long long valid = (long long)n_valid - (long long)g * N;
    const float scale = valid <= 0 ? 0.0f : 1.0f / (float)(valid < (long long)N ? valid : N);
    const unsigned total = tiles * 256 * GK_XT_BINS;
    for (unsigned e = threadIdx.x; e < total; e += blockDim.x) {
        const unsigned i0 = e % GK_XT_BINS, el = (e / GK_XT_BINS) % 256, tile = e / (GK_XT_BINS * 256);
        unsigned I, J;
        tile_of(tile, CT, I, J);
        const unsigned i = I * 16 + el / 16, j = J * 16 + el % 16, b = b0 + i0;
        if (i <= j && j < C && b < b_end) {
            // undo the rows' scales one at a time: their product may leave a float's range
            const float si = pow2(-scale_k[i0 * GK_XT_ROWS + i]), sj = pow2(-scale_k[i0 * GK_XT_ROWS + j]);
            const float re = sm[((tile * 2) * GK_XT_BINS + i0) * GK_XT_RLD + el] * si * sj;
            const float im = sm[((tile * 2 + 1) * GK_XT_BINS + i0) * GK_XT_RLD + el] * si * sj;
            const gk_size_t p = (gk_size_t)i * C - ((gk_size_t)i * (i - 1)) / 2 + (j - i);
            out[(p * G + g) * bins + b] = make_float2(re * scale, im * scale);
        }
    }
}

}  // namespace

// gk_xcorr_tc_*: 33 to 64 inputs (2 warps a bin); gk_xcorr_tc_narrow_*: up to 32 (1 or 3)
#define GK_XC_TC_KERNEL(NAME, WIDE, T)                                                            \
    extern "C" __global__ void __launch_bounds__(GK_XT_BINS * 32 * roles_of(WIDE ? 4 : 2), GK_XT_MIN_CTAS) \
        NAME(float2* out, const T* x, unsigned C, gk_size_t sc, gk_size_t sf, gk_size_t sb,       \
             unsigned bins, unsigned N, unsigned G, unsigned n_valid, unsigned b_begin, unsigned b_end) { \
        xcorr_tc<WIDE, T>(out, x, C, sc, sf, sb, bins, N, G, n_valid, b_begin, b_end);            \
    }

GK_XC_TC_KERNEL(gk_xcorr_tc_f32, true, float)
GK_XC_TC_KERNEL(gk_xcorr_tc_c64, true, float2)
GK_XC_TC_KERNEL(gk_xcorr_tc_narrow_f32, false, float)
GK_XC_TC_KERNEL(gk_xcorr_tc_narrow_c64, false, float2)
