// channelizer: polyphase analysis filterbank (kernels/channelizer.cu + a batched cuFFT).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/channelizer.py:
//   channels    M, the number of subchannels (and the decimation)
//   prototype   the real prototype lowpass h (any length; zero-padded to T*M here)
//
// Units (the scheduler's pacing, Op::units): output frames (rows m), grouped by dsp::split_units
// (<= 64 units, >= 4096 outputs over every channel and subchannel each, offsets on 16-byte
// boundaries). The branch sums are laid out (rows, channels, M), so a unit's rows of every
// channel are one contiguous batch: its branch sums, one batched FFT (a plan of the unit's batch,
// made here) and the transpose of its rows; the history is updated after the last unit, as
// enqueue() does after its transpose. Another batch size may round the FFT differently: within
// float32 rounding of the whole block, not bit for bit.
#include <algorithm>
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
        make_units();
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("channelizer", begin, end, split_.units);
        if (begin == 0 && end == split_.units) {
            enqueue(s, in, out, n_, false);
            return;
        }
        for (int64_t u = begin; u < end; ++u) {
            const int64_t m0 = split_.begin(u), m1 = split_.end_item(u + 1);
            run(s, in, out, m0, m1, split_.size(u) == split_.per ? *unit_plan_ : *tail_plan_);
        }
        if (end == split_.units) history_->update(s, util_, in);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        run(s, in, out, 0, rows_, *plan_);
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
    // Rows [m0, m1) of every channel: branch sums, their FFT (`plan`: a batch of (m1 - m0) *
    // channels transforms), the transpose into the output.
    void run(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t m0, int64_t m1, CufftPlan& plan) {
        launch(*branch_kernel_, dim(static_cast<unsigned>(ceil_div((m1 - m0) * M_, 256)),
                                    static_cast<unsigned>(channels_)),
               dim(256), 0, s, branches_->ptr(), in, history_->ptr(), H_->ptr(), u32(n_),
               u32(hist_len_), u32(M_), u32(T_), u32(channels_), u32(m0), u32(m1));
        const CUdeviceptr v = branches_->ptr() + static_cast<CUdeviceptr>(m0 * channels_ * M_ * 8);
        plan.exec_c2c(s, v, v, CUFFT_INVERSE);
        launch(*transpose_, dim(static_cast<unsigned>(ceil_div(m1 - m0, 32)),
                                static_cast<unsigned>(ceil_div(M_, 32)),
                                static_cast<unsigned>(channels_)),
               dim(32, 8), 0, s, out, branches_->ptr(), u32(M_), u32(rows_), u32(channels_), u32(m0), u32(m1));
    }

    void make_units() {
        split_ = dsp::split_units(rows_, channels_ * M_, dsp::align_items(channels_ * M_ * 8));
        if (split_.units <= 1) return;
        FftLayout layout;
        layout.n = M_;
        layout.type = CUFFT_C2C;
        layout.batch = split_.per * channels_;
        unit_plan_ = std::make_unique<CufftPlan>(device_, layout, label_ + " (unit)");
        if (split_.last() != split_.per) {
            layout.batch = split_.last() * channels_;
            tail_plan_ = std::make_unique<CufftPlan>(device_, layout, label_ + " (last unit)");
        } else {
            tail_plan_ = nullptr;
        }
    }

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
    dsp::UnitSplit split_;
    std::unique_ptr<CufftPlan> unit_plan_, tail_plan_;
};

GK_REGISTER_OP("channelizer", [](const OpArgs& a) { return std::make_unique<ChannelizerOp>(a); });

}  // namespace
}  // namespace gk
