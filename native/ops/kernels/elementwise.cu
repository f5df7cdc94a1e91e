// Element-wise kernels over contiguous float32 / complex64 (float2) arrays.
//
// Every kernel is a grid-stride loop (any grid size covers any n) and uses 16-byte vector loads
// when both pointers allow it, with a scalar tail. y may alias x (in place).
// Launch with n as numpy.uint64 and scalars as numpy.float32 / numpy.complex64.
#include "gk_common.cuh"

namespace {

// y[i] = op(x[i]) for float -> float.
template <class Op>
__device__ __forceinline__ void map_f32(float* y, const float* x, gk_size_t n, Op op) {
    const gk_size_t first = gk_thread_index(), stride = gk_grid_stride();
    gk_size_t done = 0;
    if (gk_aligned(x, 16) && gk_aligned(y, 16)) {
        const gk_size_t n4 = n / 4;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (gk_size_t i = first; i < n4; i += stride) {
            float4 v = x4[i];
            y4[i] = make_float4(op(v.x), op(v.y), op(v.z), op(v.w));
        }
        done = n4 * 4;
    }
    for (gk_size_t i = done + first; i < n; i += stride) y[i] = op(x[i]);
}

// y[i] = op(x[i]) for complex -> complex (a float4 holds two complex values).
template <class Op>
__device__ __forceinline__ void map_c64(float2* y, const float2* x, gk_size_t n, Op op) {
    const gk_size_t first = gk_thread_index(), stride = gk_grid_stride();
    gk_size_t done = 0;
    if (gk_aligned(x, 16) && gk_aligned(y, 16)) {
        const gk_size_t n2 = n / 2;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (gk_size_t i = first; i < n2; i += stride) {
            float4 v = x4[i];
            float2 a = op(make_float2(v.x, v.y));
            float2 b = op(make_float2(v.z, v.w));
            y4[i] = make_float4(a.x, a.y, b.x, b.y);
        }
        done = n2 * 2;
    }
    for (gk_size_t i = done + first; i < n; i += stride) y[i] = op(x[i]);
}

// y[i] = op(x[i]) for complex -> float (two complex in, two floats out per vector step).
template <class Op>
__device__ __forceinline__ void map_c64_to_f32(float* y, const float2* x, gk_size_t n, Op op) {
    const gk_size_t first = gk_thread_index(), stride = gk_grid_stride();
    gk_size_t done = 0;
    if (gk_aligned(x, 16) && gk_aligned(y, 8)) {
        const gk_size_t n2 = n / 2;
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float2* y2 = reinterpret_cast<float2*>(y);
        for (gk_size_t i = first; i < n2; i += stride) {
            float4 v = x4[i];
            y2[i] = make_float2(op(make_float2(v.x, v.y)), op(make_float2(v.z, v.w)));
        }
        done = n2 * 2;
    }
    for (gk_size_t i = done + first; i < n; i += stride) y[i] = op(x[i]);
}

struct Scale {
    float g;
    __device__ float operator()(float v) const { return v * g; }
};
struct ComplexScale {
    float2 g;
    __device__ float2 operator()(float2 v) const { return gk_cmul(v, g); }
};
struct Square {
    __device__ float operator()(float v) const { return v * v; }
};
struct Norm2 {
    __device__ float operator()(float2 v) const { return gk_norm2(v); }
};
struct Abs {
    __device__ float operator()(float v) const { return fabsf(v); }
};
struct ComplexAbs {
    __device__ float operator()(float2 v) const { return hypotf(v.x, v.y); }
};
struct Decibel {
    float scale, ref, floor_db;
    __device__ float operator()(float v) const { return gk_db(v, scale, ref, floor_db); }
};
struct PowerDecibel {
    float ref, floor_db;
    __device__ float operator()(float2 v) const { return gk_db(gk_norm2(v), 10.0f, ref, floor_db); }
};

}  // namespace

// y = gain * x
extern "C" __global__ void gk_gain_f32(float* y, const float* x, float gain, gk_size_t n) {
    map_f32(y, x, n, Scale{gain});
}

// y = gain * x, complex gain
extern "C" __global__ void gk_gain_c64(float2* y, const float2* x, float2 gain, gk_size_t n) {
    map_c64(y, x, n, ComplexScale{gain});
}

// y = x^2
extern "C" __global__ void gk_power_f32(float* y, const float* x, gk_size_t n) {
    map_f32(y, x, n, Square{});
}

// y = |x|^2
extern "C" __global__ void gk_power_c64(float* y, const float2* x, gk_size_t n) {
    map_c64_to_f32(y, x, n, Norm2{});
}

// y = |x|
extern "C" __global__ void gk_magnitude_f32(float* y, const float* x, gk_size_t n) {
    map_f32(y, x, n, Abs{});
}

// y = |x| (hypot: no overflow for large components)
extern "C" __global__ void gk_magnitude_c64(float* y, const float2* x, gk_size_t n) {
    map_c64_to_f32(y, x, n, ComplexAbs{});
}

// y = max(scale * log10(|x| / ref), floor_db); scale 10 for power, 20 for amplitude.
extern "C" __global__ void gk_db_f32(float* y, const float* x, float scale, float ref,
                                     float floor_db, gk_size_t n) {
    map_f32(y, x, n, Decibel{scale, ref, floor_db});
}

// y = max(10 * log10(|x|^2 / ref), floor_db), fused.
extern "C" __global__ void gk_power_db_c64(float* y, const float2* x, float ref, float floor_db,
                                           gk_size_t n) {
    map_c64_to_f32(y, x, n, PowerDecibel{ref, floor_db});
}

// ---------------------------------------------------------------------------------------------
// Decibels exactly as the CPU stage computes them (pygpukit_dsp/stages/elementwise.py, Db):
//     y = max(scale * log10(max(level(x) * inv_ref, floor)), floor_db)
// with floor = 10^(floor_db / scale), so zeros and negative levels give floor_db, and NaN stays
// NaN. The level floor keeps zeros out of the log; the dB floor after it makes the floor exact
// (log10 of the rounded level floor can land an ulp below floor_db). floor_db is the float32 at
// or just above the stage's floor_db.
// level() is x itself (db of a real input), x^2 / |x|^2 (power, fused power -> db) or |x|
// (magnitude, fused magnitude -> db).
// One pass over the data: the fused kernels never write the intermediate level.
// ---------------------------------------------------------------------------------------------

namespace {

struct LevelToDb {
    float scale, inv_ref, floor, floor_db;
    __device__ __forceinline__ float operator()(float level) const {
        float v = level * inv_ref;
        v = v < floor ? floor : v;  // NaN compares false and stays NaN, like numpy.maximum
        const float y = scale * log10f(v);
        return y < floor_db ? floor_db : y;
    }
};
struct SquareToDb {
    LevelToDb db;
    __device__ float operator()(float v) const { return db(v * v); }
};
struct AbsToDb {
    LevelToDb db;
    __device__ float operator()(float v) const { return db(fabsf(v)); }
};
struct IdentityToDb {
    LevelToDb db;
    __device__ float operator()(float v) const { return db(v); }
};
struct Norm2ToDb {
    LevelToDb db;
    __device__ float operator()(float2 v) const { return db(gk_norm2(v)); }
};
struct HypotToDb {
    LevelToDb db;
    __device__ float operator()(float2 v) const { return db(hypotf(v.x, v.y)); }
};

}  // namespace

// y = max(scale * log10(max(x * inv_ref, floor)), floor_db)
extern "C" __global__ void gk_todb_f32(float* y, const float* x, float scale, float inv_ref,
                                       float floor, float floor_db, gk_size_t n) {
    map_f32(y, x, n, IdentityToDb{{scale, inv_ref, floor, floor_db}});
}

// y = max(scale * log10(max(x^2 * inv_ref, floor)), floor_db): power -> db in one pass
extern "C" __global__ void gk_power_todb_f32(float* y, const float* x, float scale, float inv_ref,
                                             float floor, float floor_db, gk_size_t n) {
    map_f32(y, x, n, SquareToDb{{scale, inv_ref, floor, floor_db}});
}

// y = max(scale * log10(max(|x| * inv_ref, floor)), floor_db): magnitude -> db in one pass
extern "C" __global__ void gk_magnitude_todb_f32(float* y, const float* x, float scale,
                                                 float inv_ref, float floor, float floor_db,
                                                 gk_size_t n) {
    map_f32(y, x, n, AbsToDb{{scale, inv_ref, floor, floor_db}});
}

// y = max(scale * log10(max(|x|^2 * inv_ref, floor)), floor_db): complex power -> db (or db of
// a spectrum, kind power)
extern "C" __global__ void gk_power_todb_c64(float* y, const float2* x, float scale, float inv_ref,
                                             float floor, float floor_db, gk_size_t n) {
    map_c64_to_f32(y, x, n, Norm2ToDb{{scale, inv_ref, floor, floor_db}});
}

// y = max(scale * log10(max(|x| * inv_ref, floor)), floor_db): complex magnitude -> db (or kind
// amplitude)
extern "C" __global__ void gk_magnitude_todb_c64(float* y, const float2* x, float scale,
                                                 float inv_ref, float floor, float floor_db,
                                                 gk_size_t n) {
    map_c64_to_f32(y, x, n, HypotToDb{{scale, inv_ref, floor, floor_db}});
}
