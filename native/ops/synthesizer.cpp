// synthesizer: polyphase synthesis filterbank, the inverse of channelizer (kernels/synthesizer.cu
// + a batched cuFFT; pygpukit_dsp/stages/synthesizer.py).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/synthesizer.py:
//   channels    M, the subchannels per output channel (and the interpolation)
//   prototype   the channelizer's real prototype h (any length; zero-padded to T*M here)
//
// The last T-1 input samples of every subchannel are kept on the device (dsp::DeviceHistory);
// each block transforms its T-1 + rows rows (the history's rows again: T-1 extra transforms of
// M points per channel, instead of a second history of transformed rows). One unit per block.
#include <string>
#include <vector>

#include "dsp_util.h"
#include "gk/cufft_plan.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

unsigned u32(int64_t v) { return static_cast<unsigned>(v); }

class SynthesizerOp final : public Op {
public:
    explicit SynthesizerOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "synthesizer")), in_(a.in), out_(a.out),
          util_(a.device) {
        if (in_.frames())
            throw UnsupportedError(a.name, "cuda", "synthesizer needs time-domain input");
        M_ = a.params.get_int("channels");
        if (M_ < 2 || in_.channels % M_ != 0)
            throw std::invalid_argument(label_ + ": needs M >= 2 and input channels a multiple of M");
        C_ = in_.channels / M_;
        rows_ = in_.items;
        if (out_.channels != C_ || out_.items != rows_ * M_ || out_.dtype != DType::C64)
            throw std::invalid_argument(label_ + ": output layout does not match");
        const std::vector<double> h = a.params.get_array("prototype").real_f64();
        if (h.empty()) throw std::invalid_argument(label_ + ": empty prototype filter");
        T_ = ceil_div(static_cast<int64_t>(h.size()), M_);
        const int64_t L = T_ * M_;
        std::vector<double> padded(static_cast<size_t>(L), 0.0);
        for (size_t l = 0; l < h.size(); ++l) padded[l] = h[l];
        std::vector<float> G(static_cast<size_t>(L));  // G[r][p] = M * h[L - 1 - (r*M + p)]
        for (int64_t i = 0; i < L; ++i)
            G[static_cast<size_t>(i)] = static_cast<float>(static_cast<double>(M_) * padded[static_cast<size_t>(L - 1 - i)]);
        G_ = std::make_unique<DeviceBuffer>(device_, G.size() * sizeof(float));
        G_->copy_from_host(G.data(), G.size() * sizeof(float), 0, nullptr);
        hist_len_ = T_ - 1;
        const int64_t E = hist_len_ + rows_;
        if (rows_ * M_ >= (int64_t(1) << 31) || E * C_ * M_ >= (int64_t(1) << 31) || C_ > 65535)
            throw UnsupportedError(a.name, "cuda", "the CUDA synthesizer takes blocks below 2^31 "
                                                   "output samples and at most 65535 outputs");
        history_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, in_.channels, hist_len_, rows_);
        V_ = std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(E * C_ * M_) * 8);
        module_ = load_embedded_module(device_, "synthesizer", CompileOptions{});
        gather_ = module_->function(in_.dtype == DType::C64 ? "gk_synth_gather_c64" : "gk_synth_gather_f32");
        branches_ = module_->function("gk_synth_branches");
        FftLayout layout;
        layout.n = M_;
        layout.batch = E * C_;
        layout.type = CUFFT_C2C;
        plan_ = std::make_unique<CufftPlan>(device_, layout, label_);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        const int64_t E = hist_len_ + rows_;
        launch(*gather_, dim(u32(ceil_div(E, 32)), u32(ceil_div(M_, 32)), u32(C_)), dim(32, 8), 0, s,
               V_->ptr(), in, history_->ptr(), u32(rows_), u32(hist_len_), u32(M_), u32(C_));
        plan_->exec_c2c(s, V_->ptr(), V_->ptr(), CUFFT_INVERSE);
        launch(*branches_, dim(u32(ceil_div(rows_ * M_, 256)), u32(C_)), dim(256), 0, s, out,
               V_->ptr(), G_->ptr(), u32(rows_), u32(M_), u32(T_), u32(C_));
        history_->update(s, util_, in);
        if (final)
            dsp::zero_after(s, util_, out, C_, rows_ * M_, dsp::item_bytes(out_), output_items(n_in));
    }

    int64_t output_items(int64_t n_in) const override {
        return n_in >= rows_ ? rows_ * M_ : (n_in > 0 ? n_in : 0) * M_;
    }

    void reset(CUstream s) override { history_->reset(s); }

    const char* kind() const override { return "synthesizer"; }

private:
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t M_ = 2, C_ = 1, rows_ = 0, T_ = 1, hist_len_ = 0;
    std::unique_ptr<DeviceBuffer> G_, V_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    std::unique_ptr<CufftPlan> plan_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> gather_, branches_;
};

GK_REGISTER_OP("synthesizer", [](const OpArgs& a) { return std::make_unique<SynthesizerOp>(a); });

}  // namespace
}  // namespace gk
