// gain: y = factor * x (pygpukit_dsp/stages/gain.py), float32 or complex64, any domain.
// A real factor scales re and im alike, so complex64 runs the float32 kernel over 2n floats;
// the float32 product equals NumPy's complex64 * float32 exactly.
//
// Units (the scheduler's pacing, Op::units): ranges of the block's floats, split by
// dsp::split_units (<= 64 units, >= 4096 floats each, a multiple of 64 floats per unit so that
// every unit starts 16-byte aligned for the kernel's vector loads). Element-wise: any split gives
// bit-identical results.
#include <stdexcept>

#include "dsp_util.h"
#include "gk/device.h"
#include "gk/jit.h"
#include "gk/op.h"

namespace gk {
namespace {

class GainOp final : public Op {
public:
    explicit GainOp(const OpArgs& a) : device_(a.device) {
        if (a.in.dtype != a.out.dtype || a.in.elements() != a.out.elements())
            throw std::invalid_argument("stage '" + a.name + "' (gain): output layout must equal the input's");
        factor_ = static_cast<float>(a.params.get_float("factor"));
        module_ = load_embedded_module(a.device, "elementwise", CompileOptions{});
        kernel_ = module_->function("gk_gain_f32");
        floats_ = static_cast<unsigned long long>(a.in.elements()) * (a.in.dtype == DType::C64 ? 2u : 1u);
        const unsigned long long vectors = (floats_ + 3) / 4;
        const unsigned long long cap = static_cast<unsigned long long>(device_->properties().multiprocessors) * 8;
        unsigned long long blocks = (vectors + kThreads - 1) / kThreads;
        grid_ = static_cast<unsigned>(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
        split_ = dsp::split_units(static_cast<int64_t>(floats_), 1, 64);
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range("gain", begin, end, split_.units);
        const int64_t first = split_.begin(begin), stop = split_.end_item(end);
        const unsigned long long n = static_cast<unsigned long long>(stop - first);
        const unsigned long long blocks = ((n + 3) / 4 + kThreads - 1) / kThreads;
        run(stream, in + static_cast<CUdeviceptr>(first * 4), out + static_cast<CUdeviceptr>(first * 4), n,
            static_cast<unsigned>(blocks < 1 ? 1 : (blocks < grid_ ? blocks : grid_)));
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t, bool) override {
        run(stream, in, out, floats_, grid_);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }
    void reset(CUstream) override {}
    const char* kind() const override { return "gain"; }

private:
    void run(CUstream stream, CUdeviceptr in, CUdeviceptr out, unsigned long long count, unsigned grid_x) {
        CUdeviceptr y = out, x = in;
        float g = factor_;
        unsigned long long n = count;
        void* params[] = {&y, &x, &g, &n};
        Dim3 grid, block;
        grid.x = grid_x;
        block.x = kThreads;
        kernel_->launch(grid, block, params, 0, stream);
    }

    static constexpr unsigned kThreads = 256;
    std::shared_ptr<Device> device_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    float factor_ = 1.0f;
    unsigned long long floats_ = 0;
    unsigned grid_ = 1;
    dsp::UnitSplit split_;
};

}  // namespace

GK_REGISTER_OP("gain", [](const OpArgs& a) { return std::make_unique<GainOp>(a); });

}  // namespace gk
