// gain: y = factor * x (pygpukit_dsp/stages/gain.py), float32 or complex64, any domain.
// A real factor scales re and im alike, so complex64 runs the float32 kernel over 2n floats;
// the float32 product equals NumPy's complex64 * float32 exactly.
#include <stdexcept>

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
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t, bool) override {
        CUdeviceptr y = out, x = in;
        float g = factor_;
        unsigned long long n = floats_;
        void* params[] = {&y, &x, &g, &n};
        Dim3 grid, block;
        grid.x = grid_;
        block.x = kThreads;
        kernel_->launch(grid, block, params, 0, stream);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }
    void reset(CUstream) override {}
    const char* kind() const override { return "gain"; }

private:
    static constexpr unsigned kThreads = 256;
    std::shared_ptr<Device> device_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    float factor_ = 1.0f;
    unsigned long long floats_ = 0;
    unsigned grid_ = 1;
};

}  // namespace

GK_REGISTER_OP("gain", [](const OpArgs& a) { return std::make_unique<GainOp>(a); });

}  // namespace gk
