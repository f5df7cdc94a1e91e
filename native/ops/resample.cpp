// resample: streaming polyphase resampler (kernels/resample.cu), history on the device.
//
// Parameters from pygpukit_dsp/backends/cuda_ops/resample.py:
//   up, down   the reduced ratio (1/1: the op copies its input, as the CPU stage does)
//   taps       the stage's padded filter (Resample.padded_filter(): length a multiple of up)
//
// Units (the scheduler's pacing, Op::units): output samples, grouped by dsp::split_units (<= 64
// units, >= 4096 outputs over the channels each); a unit computes its outputs of every channel
// from the block and the history (unchanged until the last unit, which updates it, as enqueue()
// does after its launch); bit-identical in any split. The 1/1 ratio (a copy) is one unit.
#include <string>
#include <vector>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

unsigned u32(int64_t v) { return static_cast<unsigned>(v); }

class ResampleOp : public Op {
public:
    explicit ResampleOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "resample")), in_(a.in), out_(a.out),
          util_(a.device) {
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "resample needs time-domain input");
        up_ = a.params.get_int("up");
        down_ = a.params.get_int("down");
        channels_ = in_.channels;
        n_ = in_.items;
        if (up_ < 1 || down_ < 1 || n_ % down_ != 0 || out_.items != n_ * up_ / down_)
            throw std::invalid_argument(label_ + ": the block size must be a multiple of down and "
                                                 "the output block block_size * up / down");
        if (up_ == down_) return;  // a copy
        const ParamArray& taps = a.params.get_array("taps");
        const std::vector<double> h = taps.real_f64();
        if (h.empty() || static_cast<int64_t>(h.size()) % up_ != 0)
            throw std::invalid_argument(label_ + ": the padded filter length must be a multiple of up");
        taps_per_phase_ = static_cast<int64_t>(h.size()) / up_;
        std::vector<float> phases(h.size());
        for (int64_t phi = 0; phi < up_; ++phi)
            for (int64_t l = 0; l < taps_per_phase_; ++l)
                phases[static_cast<size_t>(phi * taps_per_phase_ + l)] =
                    static_cast<float>(h[static_cast<size_t>(phi + up_ * l)]);
        phases_ = std::make_unique<DeviceBuffer>(device_, phases.size() * sizeof(float));
        phases_->copy_from_host(phases.data(), phases.size() * sizeof(float), 0, nullptr);
        // {phase, floor(r*down/up)} of output r of every run of `up` outputs
        std::vector<uint32_t> steps(static_cast<size_t>(2 * up_));
        for (int64_t r = 0; r < up_; ++r) {
            steps[static_cast<size_t>(2 * r)] = static_cast<uint32_t>((r * down_) % up_);
            steps[static_cast<size_t>(2 * r + 1)] = static_cast<uint32_t>((r * down_) / up_);
        }
        steps_ = std::make_unique<DeviceBuffer>(device_, steps.size() * sizeof(uint32_t));
        steps_->copy_from_host(steps.data(), steps.size() * sizeof(uint32_t), 0, nullptr);
        if (out_.items >= (int64_t(1) << 31) || n_ >= (int64_t(1) << 31) || channels_ > 65535 ||
            up_ >= (int64_t(1) << 16) || down_ >= (int64_t(1) << 16))
            throw UnsupportedError(a.name, "cuda", "the CUDA resampler takes blocks below 2^31 "
                                                   "samples, at most 65535 channels and up/down "
                                                   "below 65536");
        hist_len_ = taps_per_phase_ - 1;
        history_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, channels_, hist_len_, n_);
        module_ = load_embedded_module(device_, "resample", CompileOptions{});
        kernel_ = module_->function(in_.dtype == DType::C64 ? "gk_resample_c64" : "gk_resample_f32");
        split_ = dsp::split_units(out_.items, channels_);
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("resample", begin, end, split_.units);
        if (up_ == down_) {  // one unit: the whole copy
            enqueue(s, in, out, n_, false);
            return;
        }
        run(s, in, out, split_.begin(begin), split_.end_item(end));
        if (end == split_.units) history_->update(s, util_, in);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        if (up_ == down_) {
            cu_check(driver().cuMemcpyDtoDAsync(out, in, in_.nbytes(), s), "cuMemcpyDtoDAsync_v2",
                     "copying the block through " + label_);
        } else {
            run(s, in, out, 0, out_.items);
            history_->update(s, util_, in);
        }
        if (final)
            dsp::zero_after(s, util_, out, channels_, out_.items, dsp::item_bytes(out_),
                            output_items(n_in));
    }

    // ceil(n_in * up / down): every sample of a stream of N gives ceil(N * up / down) in all.
    int64_t output_items(int64_t n_in) const override {
        if (n_in >= n_) return out_.items;
        return ceil_div(n_in * up_, down_);
    }

    void reset(CUstream s) override {
        if (history_) history_->reset(s);
    }

    const char* kind() const override { return "resample"; }

private:
    // Outputs [k0, k1) of every channel.
    void run(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t k0, int64_t k1) const {
        launch(*kernel_, dim(static_cast<unsigned>(ceil_div(k1 - k0, 256)), static_cast<unsigned>(channels_)),
               dim(256), 0, s, out, in, history_->ptr(), phases_->ptr(), steps_->ptr(), u32(n_),
               u32(hist_len_), u32(out_.items), u32(up_), u32(down_), u32(taps_per_phase_), u32(k0), u32(k1));
    }

    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t up_ = 1, down_ = 1, channels_ = 1, n_ = 0, taps_per_phase_ = 1, hist_len_ = 0;
    std::unique_ptr<DeviceBuffer> phases_, steps_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    dsp::UnitSplit split_;  // up == down: one unit
};

GK_REGISTER_OP("resample", [](const OpArgs& a) { return std::make_unique<ResampleOp>(a); });

}  // namespace
}  // namespace gk
