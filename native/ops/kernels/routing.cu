// The flowgraph stages (pygpukit_dsp/stages/routing.py, arith.py): select (pick and reorder
// channels), combine (stack the channels of several inputs), add and multiply (element-wise over
// several inputs). A stage that reads several inputs gets them in one buffer, input k at byte
// offset offset[k] from `in` (the engine's plan stacks them), each with its own dtype.
//
// Scalar grid-stride loops: any grid covers any size, any 4-byte alignment works. Products and
// sums are rounded step by step (__fmul_rn, __fadd_rn: no fused multiply-add) in input order, as
// NumPy reduces them (out = in_0; out = out op in_k).
#include "gk_common.cuh"

#define GK_MAX_INPUTS 16

struct GkInputs {
    gk_size_t offset[GK_MAX_INPUTS];  // bytes from `in`
    gk_size_t begin[GK_MAX_INPUTS];   // combine: the first output element of input k
    unsigned complex_mask;            // bit k: input k is complex64
    unsigned count;
};

namespace {

__device__ __forceinline__ float2 load_input(const unsigned char* in, const GkInputs& ins, unsigned k, gk_size_t i) {
    const unsigned char* base = in + ins.offset[k];
    if (ins.complex_mask & (1u << k)) return reinterpret_cast<const float2*>(base)[i];
    return make_float2(reinterpret_cast<const float*>(base)[i], 0.0f);
}

// NumPy's complex64 product (a complex times a real input is a complex times (b, 0)).
__device__ __forceinline__ float2 cmul_rn(float2 a, float2 b) {
    return make_float2(__fsub_rn(__fmul_rn(a.x, b.x), __fmul_rn(a.y, b.y)),
                       __fadd_rn(__fmul_rn(a.x, b.y), __fmul_rn(a.y, b.x)));
}

}  // namespace

// y[c][r] = x[channels[c]][r]; words: 32-bit words per channel row (2 per complex64 sample),
// n: the output's words.
extern "C" __global__ void gk_select(unsigned* y, const unsigned* x, const int* channels, gk_size_t words,
                                     gk_size_t n) {
    for (gk_size_t j = gk_thread_index(); j < n; j += gk_grid_stride()) {
        const gk_size_t c = j / words, r = j - c * words;
        y[j] = x[static_cast<gk_size_t>(channels[c]) * words + r];
    }
}

// Output element j (of n) comes from the input k whose [begin[k], begin[k+1]) holds it.
extern "C" __global__ void gk_combine(unsigned char* out, const unsigned char* in, GkInputs ins,
                                      unsigned out_complex, gk_size_t n) {
    for (gk_size_t j = gk_thread_index(); j < n; j += gk_grid_stride()) {
        unsigned k = 0;
        while (k + 1 < ins.count && j >= ins.begin[k + 1]) ++k;
        const float2 v = load_input(in, ins, k, j - ins.begin[k]);
        if (out_complex)
            reinterpret_cast<float2*>(out)[j] = v;
        else
            reinterpret_cast<float*>(out)[j] = v.x;
    }
}

// op 0: the sum of the inputs, op 1: their product; n elements of each input.
extern "C" __global__ void gk_reduce_inputs(unsigned char* out, const unsigned char* in, GkInputs ins,
                                            unsigned out_complex, unsigned op, gk_size_t n) {
    for (gk_size_t i = gk_thread_index(); i < n; i += gk_grid_stride()) {
        float2 acc = load_input(in, ins, 0, i);
        for (unsigned k = 1; k < ins.count; ++k) {
            const float2 v = load_input(in, ins, k, i);
            if (!out_complex)
                acc.x = op ? __fmul_rn(acc.x, v.x) : __fadd_rn(acc.x, v.x);
            else if (op)
                acc = cmul_rn(acc, v);
            else
                acc = make_float2(__fadd_rn(acc.x, v.x), __fadd_rn(acc.y, v.y));
        }
        if (out_complex)
            reinterpret_cast<float2*>(out)[i] = acc;
        else
            reinterpret_cast<float*>(out)[i] = acc.x;
    }
}
