// channelizer: polyphase analysis filterbank (kernels/channelizer.cu + a batched cuFFT).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/channelizer.py:
//   channels    M, the number of subchannels (and the decimation)
//   prototype   the real prototype lowpass h (any length; zero-padded to T*M here)
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

class ChannelizerOp : public Op {
public:
    explicit ChannelizerOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "channelizer")), in_(a.in), out_(a.out),
          util_(a.device) {
        if (in_.frames())
            throw UnsupportedError(a.name, "cuda", "channelizer needs time-domain input");
        M_ = a.params.get_int("channels");
        channels_ = in_.channels;
        n_ = in_.items;
        if (M_ < 2 || n_ % M_ != 0)
            throw std::invalid_argument(label_ + ": needs M >= 2 and a block size that is a "
                                                 "multiple of M");
        rows_ = n_ / M_;
        if (out_.channels != channels_ * M_ || out_.items != rows_ || out_.dtype != DType::C64)
            throw std::invalid_argument(label_ + ": output layout does not match");
        const std::vector<double> h = a.params.get_array("prototype").real_f64();
        if (h.empty()) throw std::invalid_argument(label_ + ": empty prototype filter");
        T_ = ceil_div(static_cast<int64_t>(h.size()), M_);
        std::vector<float> H(static_cast<size_t>(T_ * M_), 0.0f);  // H[r][p] = h[p + M r]
        for (size_t l = 0; l < h.size(); ++l) H[l] = static_cast<float>(h[l]);
        H_ = std::make_unique<DeviceBuffer>(device_, H.size() * sizeof(float));
        H_->copy_from_host(H.data(), H.size() * sizeof(float), 0, nullptr);
        hist_len_ = T_ * M_;
        if (n_ + hist_len_ >= (int64_t(1) << 31) || channels_ > 65535 || M_ > 65535 * 32)
            throw UnsupportedError(a.name, "cuda", "the CUDA channelizer takes blocks (plus the "
                                                   "filter length) below 2^31 samples and at most "
                                                   "65535 input channels");
        history_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, channels_, hist_len_, n_);
        branches_ = std::make_unique<DeviceBuffer>(
            device_, static_cast<size_t>(channels_ * rows_ * M_) * 8);
        FftLayout layout;
        layout.n = M_;
        layout.batch = channels_ * rows_;
        layout.type = CUFFT_C2C;
        plan_ = std::make_unique<CufftPlan>(device_, layout, label_);
        module_ = load_embedded_module(device_, "channelizer", CompileOptions{});
        branch_kernel_ = module_->function(in_.dtype == DType::C64 ? "gk_channelizer_branches_c64"
                                                                   : "gk_channelizer_branches_f32");
        transpose_ = module_->function("gk_channelizer_transpose");
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        launch(*branch_kernel_, dim(static_cast<unsigned>(ceil_div(rows_ * M_, 256)),
                                    static_cast<unsigned>(channels_)),
               dim(256), 0, s, branches_->ptr(), in, history_->ptr(), H_->ptr(), u32(n_),
               u32(hist_len_), u32(M_), u32(T_), u32(rows_));
        plan_->exec_c2c(s, branches_->ptr(), branches_->ptr(), CUFFT_INVERSE);
        launch(*transpose_, dim(static_cast<unsigned>(ceil_div(rows_, 32)),
                                static_cast<unsigned>(ceil_div(M_, 32)),
                                static_cast<unsigned>(channels_)),
               dim(32, 8), 0, s, out, branches_->ptr(), u32(M_), u32(rows_));
        history_->update(s, util_, in);
        if (final)
            dsp::zero_after(s, util_, out, channels_ * M_, rows_, dsp::item_bytes(out_),
                            output_items(n_in));
    }

    int64_t output_items(int64_t n_in) const override {
        return n_in >= n_ ? rows_ : ceil_div(n_in, M_);
    }

    void reset(CUstream s) override { history_->reset(s); }

    const char* kind() const override { return "channelizer"; }

private:
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t M_ = 2, channels_ = 1, n_ = 0, rows_ = 0, T_ = 1, hist_len_ = 0;
    std::unique_ptr<DeviceBuffer> H_, branches_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    std::unique_ptr<CufftPlan> plan_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> branch_kernel_, transpose_;
};

GK_REGISTER_OP("channelizer", [](const OpArgs& a) { return std::make_unique<ChannelizerOp>(a); });

}  // namespace
}  // namespace gk
