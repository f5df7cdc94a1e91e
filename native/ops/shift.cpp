// shift: frequency translation (pygpukit_dsp/stages/shift.py; kernels/shift.cu, nco.cuh).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/shift.py:
//   step   round(freq_hz / fs * 2^64) mod 2^64 as a signed int64: the 64-bit phase step
// State: the stream's sample index (one uint64 on the device), advanced by the block size by a
// one-thread kernel after each block (captured into the graph like the rest). One unit: an
// elementwise pass is not worth splitting.
#include <string>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::dim;
using dsp::launch;

class ShiftOp : public Op {
public:
    explicit ShiftOp(const OpArgs& a) : device_(a.device), label_(dsp::op_label(a, "shift")), in_(a.in) {
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "shift needs time-domain input");
        if (a.out.dtype != DType::C64 || a.out.channels != in_.channels || a.out.items != in_.items ||
            a.out.frames())
            throw std::invalid_argument(label_ + ": the output must be complex64 of the input's shape");
        step_ = static_cast<unsigned long long>(a.params.get_int("step"));
        index_ = std::make_unique<DeviceBuffer>(device_, sizeof(unsigned long long));
        index_->memset(0, sizeof(unsigned long long), 0, nullptr);
        module_ = load_embedded_module(device_, "shift", CompileOptions{});
        kernel_ = module_->function(in_.dtype == DType::C64 ? "gk_shift_c64" : "gk_shift_f32");
        advance_ = module_->function("gk_nco_advance");
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        (void)n_in;
        (void)final;  // the zero padding of a final block shifts to zeros: nothing to clear
        const unsigned long long channels = static_cast<unsigned long long>(in_.channels);
        const unsigned long long n = static_cast<unsigned long long>(in_.items);
        const unsigned gx = dsp::grid_for(*device_, in_.items);
        const unsigned gy = static_cast<unsigned>(in_.channels < 65535 ? in_.channels : 65535);
        launch(*kernel_, dim(gx, gy), dim(256), 0, s, out, in, index_->ptr(), step_, channels, n);
        launch(*advance_, dim(1), dim(1), 0, s, index_->ptr(), n);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }

    void reset(CUstream s) override {
        cu_check(driver().cuMemsetD8Async(index_->ptr(), 0, sizeof(unsigned long long), s),
                 "cuMemsetD8Async", "resetting the shift's sample index");
    }

    const char* kind() const override { return "shift"; }

private:
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_;
    unsigned long long step_ = 0;
    std::unique_ptr<DeviceBuffer> index_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_, advance_;
};

GK_REGISTER_OP("shift", [](const OpArgs& a) { return std::make_unique<ShiftOp>(a); });

}  // namespace
}  // namespace gk
