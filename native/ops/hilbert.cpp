// hilbert: the analytic signal of a real input (pygpukit_dsp/stages/hilbert.py; kernels/hilbert.cu),
// using the Hilbert transformer's antisymmetry and its zeros at even offsets.
//
// Parameters from pygpukit_dsp/backends/cuda_ops/hilbert.py:
//   numtaps    L = 2d + 1
//   odd_taps   h[d + 2j + 1] for j < (d + 1) / 2
// State on the device: the last 2d input samples of every channel (dsp::DeviceHistory).
// Units (the scheduler's pacing): output samples of every channel, grouped by dsp::split_units
// (<= 64 units, >= 4096 outputs over the channels each); the history is updated after the last
// unit, as enqueue() does after its launch; bit-identical in any split.
#include <string>
#include <vector>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

unsigned u32(int64_t v) { return static_cast<unsigned>(v); }

class HilbertOp : public Op {
public:
    explicit HilbertOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "hilbert")), in_(a.in), out_(a.out), util_(a.device) {
        if (in_.frames() || in_.dtype != DType::F32)
            throw UnsupportedError(a.name, "cuda", "hilbert needs real time-domain input");
        if (out_.dtype != DType::C64 || out_.channels != in_.channels || out_.items != in_.items || out_.frames())
            throw std::invalid_argument(label_ + ": the output must be complex64 of the input's shape");
        const int64_t L = a.params.get_int("numtaps");
        if (L < 3 || L % 2 == 0) throw std::invalid_argument(label_ + ": numtaps must be odd and >= 3");
        d_ = (L - 1) / 2;
        const std::vector<float> odd = a.params.get_array("odd_taps").real_f32();
        if (static_cast<int64_t>(odd.size()) != (d_ + 1) / 2)
            throw std::invalid_argument(label_ + ": odd_taps must hold (numtaps + 1) / 4 values");
        n_ = in_.items;
        channels_ = in_.channels;
        shared_bytes_ = static_cast<unsigned>((kThreads + 2 * d_) * static_cast<int64_t>(sizeof(float)));
        if (shared_bytes_ > 48 * 1024 || n_ >= (int64_t(1) << 31) || channels_ > 65535)
            throw UnsupportedError(a.name, "cuda", "the CUDA hilbert takes at most 12033 taps, blocks below "
                                                   "2^31 samples and at most 65535 channels");
        odd_ = std::make_unique<DeviceBuffer>(device_, odd.size() * sizeof(float));
        odd_->copy_from_host(odd.data(), odd.size() * sizeof(float), 0, nullptr);
        history_ = std::make_unique<dsp::DeviceHistory>(device_, DType::F32, channels_, 2 * d_, n_);
        module_ = load_embedded_module(device_, "hilbert", CompileOptions{});
        kernel_ = module_->function("gk_hilbert");
        split_ = dsp::split_units(n_, channels_);
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("hilbert", begin, end, split_.units);
        run(s, in, out, split_.begin(begin), split_.end_item(end));
        if (end == split_.units) history_->update(s, util_, in);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        run(s, in, out, 0, n_);
        history_->update(s, util_, in);
        if (final) dsp::zero_after(s, util_, out, channels_, n_, dsp::item_bytes(out_), n_in);
    }

    int64_t output_items(int64_t n_in) const override { return n_in < n_ ? n_in : n_; }

    void reset(CUstream s) override { history_->reset(s); }

    const char* kind() const override { return "hilbert"; }

private:
    void run(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t k0, int64_t k1) const {
        if (k1 <= k0) return;
        launch(*kernel_, dim(static_cast<unsigned>(ceil_div(k1 - k0, kThreads)), static_cast<unsigned>(channels_)),
               dim(static_cast<unsigned>(kThreads)), shared_bytes_, s, out, in, history_->ptr(), odd_->ptr(),
               u32(n_), u32(d_), u32(k0), u32(k1));
    }

    static constexpr int64_t kThreads = 256;
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t d_ = 1, n_ = 0, channels_ = 1;
    unsigned shared_bytes_ = 0;
    std::unique_ptr<DeviceBuffer> odd_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    dsp::UnitSplit split_;
};

GK_REGISTER_OP("hilbert", [](const OpArgs& a) { return std::make_unique<HilbertOp>(a); });

}  // namespace
}  // namespace gk
