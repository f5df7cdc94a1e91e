// cfar: cell-averaging CFAR (pygpukit_dsp/stages/cfar.py; kernels/cfar.cu).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/cfar.py:
//   guard, train   cells on each side of the cell under test
//   mask           true: 1.0/0.0 detections; false: the threshold
//   coef           time domain: alpha / (2 train) (a number); frames domain: alpha_b / N_b per bin
//
// Time domain: the last 2 (guard + train) input samples of every channel are kept on the device
// (dsp::DeviceHistory), output sample n being for the cell n - (guard + train). Frames domain:
// each frame on its own, no state. One unit per block: one launch reads the block once.
#include <string>
#include <vector>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

constexpr int64_t kThreads = 256;
constexpr int64_t kMaxWindow = 4096;  // guard + train: (256 + 2 * 4096) floats of shared memory

unsigned u32(int64_t v) { return static_cast<unsigned>(v); }

class CfarOp final : public Op {
public:
    explicit CfarOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "cfar")), in_(a.in), out_(a.out),
          util_(a.device) {
        guard_ = a.params.get_int("guard");
        train_ = a.params.get_int("train");
        mask_ = a.params.get_bool("mask");
        D_ = guard_ + train_;
        if (guard_ < 0 || train_ < 1 || D_ > kMaxWindow)
            throw std::invalid_argument(label_ + ": needs guard >= 0, train >= 1 and guard + train <= " +
                                        std::to_string(kMaxWindow));
        if (out_.channels != in_.channels || out_.items != in_.items || out_.bins != in_.bins ||
            out_.dtype != DType::F32)
            throw std::invalid_argument(label_ + ": the output must be float32 of the input's shape");
        if (in_.channels > 65535 || in_.row() >= (int64_t(1) << 31) ||
            in_.channels * in_.items >= (int64_t(1) << 31))
            throw UnsupportedError(a.name, "cuda", "the CUDA cfar takes at most 65535 channels and "
                                                   "blocks below 2^31 cells");
        const bool cx = in_.dtype == DType::C64;
        module_ = load_embedded_module(device_, "cfar", CompileOptions{});
        if (in_.frames()) {
            if (in_.bins < 2 * D_ + 1)
                throw std::invalid_argument(label_ + ": frames shorter than the window 2 (guard + train) + 1");
            const std::vector<double> coef = a.params.get_array("coef").real_f64();
            if (static_cast<int64_t>(coef.size()) != in_.bins)
                throw std::invalid_argument(label_ + ": coef must have one value per bin");
            std::vector<float> c(coef.begin(), coef.end());
            coef_ = std::make_unique<DeviceBuffer>(device_, c.size() * sizeof(float));
            coef_->copy_from_host(c.data(), c.size() * sizeof(float), 0, nullptr);
            kernel_ = module_->function(cx ? "gk_cfar_bins_c64" : "gk_cfar_bins_f32");
        } else {
            coef_time_ = static_cast<float>(a.params.get_float("coef"));
            history_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, in_.channels, 2 * D_,
                                                            in_.items);
            kernel_ = module_->function(cx ? "gk_cfar_time_c64" : "gk_cfar_time_f32");
        }
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        const int mask = mask_ ? 1 : 0;
        if (in_.frames()) {
            launch(*kernel_, dim(u32(in_.channels * in_.items)), dim(u32(kThreads)), 0, s, out, in,
                   coef_->ptr(), u32(in_.bins), u32(guard_), u32(train_), mask);
        } else {
            const unsigned shared = static_cast<unsigned>((kThreads + 2 * D_) * sizeof(float));
            launch(*kernel_, dim(u32(ceil_div(in_.items, kThreads)), u32(in_.channels)),
                   dim(u32(kThreads)), shared, s, out, in, history_->ptr(), u32(in_.items), u32(D_),
                   u32(guard_), u32(train_), coef_time_, mask);
            history_->update(s, util_, in);
        }
        if (final)
            dsp::zero_after(s, util_, out, out_.channels, out_.items, dsp::item_bytes(out_), n_in);
    }

    int64_t output_items(int64_t n_in) const override { return n_in < in_.items ? n_in : in_.items; }

    void reset(CUstream s) override {
        if (history_) history_->reset(s);
    }

    const char* kind() const override { return "cfar"; }

private:
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t guard_ = 0, train_ = 1, D_ = 1;
    bool mask_ = true;
    float coef_time_ = 1.0f;
    std::unique_ptr<DeviceBuffer> coef_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
};

GK_REGISTER_OP("cfar", [](const OpArgs& a) { return std::make_unique<CfarOp>(a); });

}  // namespace
}  // namespace gk
