// sos: streaming IIR filter in second-order sections (kernels/sos.cu), float64 state on the device.
//
// Parameters from pygpukit_dsp/backends/cuda_ops/sos.py:
//   sos   (n_sections, 6) rows [b0, b1, b2, 1, a1, a2]
#include <string>
#include <vector>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

constexpr int kMaxSections = 1024;  // the coefficients sit in shared memory (40 KiB)

class SosOp : public Op {
public:
    explicit SosOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "sos")), in_(a.in), out_(a.out),
          util_(a.device) {
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "sos needs time-domain input");
        const ParamArray& sos = a.params.get_array("sos");
        if (sos.shape.size() != 2 || sos.shape[1] != 6 || sos.shape[0] < 1)
            throw std::invalid_argument(label_ + ": sos must have shape (n_sections, 6)");
        sections_ = sos.shape[0];
        if (sections_ > kMaxSections)
            throw UnsupportedError(a.name, "cuda", std::to_string(sections_) +
                                                       " sections; the CUDA sos op takes at most " +
                                                       std::to_string(kMaxSections));
        const std::vector<double> rows = sos.real_f64();
        std::vector<double> coef(static_cast<size_t>(sections_ * 5));
        for (int64_t s = 0; s < sections_; ++s) {
            const double* r = &rows[static_cast<size_t>(s * 6)];
            if (r[3] != 1.0)
                throw std::invalid_argument(label_ + ": each section's a0 (column 3) must be 1");
            double* c = &coef[static_cast<size_t>(s * 5)];
            c[0] = r[0];
            c[1] = r[1];
            c[2] = r[2];
            c[3] = r[4];
            c[4] = r[5];
        }
        complex_ = in_.dtype == DType::C64;
        lanes_ = in_.channels * (complex_ ? 2 : 1);
        n_ = in_.items;
        coef_ = std::make_unique<DeviceBuffer>(device_, coef.size() * sizeof(double));
        coef_->copy_from_host(coef.data(), coef.size() * sizeof(double), 0, nullptr);
        const size_t state_bytes = static_cast<size_t>(sections_ * 2 * lanes_) * sizeof(double);
        state_ = std::make_unique<DeviceBuffer>(device_, state_bytes);
        state_->memset(0, state_bytes, 0, nullptr);
        module_ = load_embedded_module(device_, "sos", CompileOptions{});
        kernel_ = module_->function(complex_ ? "gk_sos_c64" : "gk_sos_f32");
        shared_ = static_cast<unsigned>((5 * sections_ + 32 * 33) * sizeof(double));
        if (shared_ > 48 * 1024) kernel_->set_max_dynamic_shared_memory(static_cast<int>(shared_));
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        launch(*kernel_, dim(static_cast<unsigned>(ceil_div(lanes_, 32))), dim(32), shared_, s, out,
               in, state_->ptr(), coef_->ptr(), static_cast<int>(sections_),
               static_cast<unsigned long long>(n_), static_cast<unsigned long long>(lanes_));
        if (final)
            dsp::zero_after(s, util_, out, in_.channels, n_, dsp::item_bytes(out_),
                            output_items(n_in));
    }

    int64_t output_items(int64_t n_in) const override { return n_in < n_ ? n_in : n_; }

    void reset(CUstream s) override {
        cu_check(driver().cuMemsetD8Async(state_->ptr(), 0, state_->nbytes(), s), "cuMemsetD8Async",
                 "resetting " + label_);
    }

    const char* kind() const override { return "sos"; }

private:
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t sections_ = 1, lanes_ = 1, n_ = 0;
    bool complex_ = false;
    unsigned shared_ = 0;
    std::unique_ptr<DeviceBuffer> coef_, state_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
};

GK_REGISTER_OP("sos", [](const OpArgs& a) { return std::make_unique<SosOp>(a); });

}  // namespace
}  // namespace gk
