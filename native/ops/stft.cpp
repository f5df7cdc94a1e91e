// stft: causal streaming STFT (framing + window kernel, then a batched cuFFT), and the fused
// stft -> power -> average op "stft_power_average" of workload W2 (kernels/stft.cu).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/stft.py:
//   stft                 nfft, hop, window (nfft values)
//   stft_power_average   nfft (= hop, a power of two in 256..4096), window, frames (averaged)
#include <string>
#include <vector>

#include "dsp_util.h"
#include "gk/cufft_plan.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

std::unique_ptr<DeviceBuffer> upload_window(const std::shared_ptr<Device>& device,
                                            const ParamArray& window, int64_t nfft,
                                            const std::string& label) {
    if (window.size() != nfft)
        throw std::invalid_argument(label + ": the window must have nfft = " + std::to_string(nfft) +
                                    " values, got " + std::to_string(window.size()));
    const std::vector<float> w = window.real_f32();
    auto buf = std::make_unique<DeviceBuffer>(device, w.size() * sizeof(float));
    buf->copy_from_host(w.data(), w.size() * sizeof(float), 0, nullptr);
    return buf;
}

unsigned long long u64(int64_t v) { return static_cast<unsigned long long>(v); }

class StftOp : public Op {
public:
    explicit StftOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "stft")), in_(a.in), out_(a.out),
          util_(a.device) {
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "stft needs time-domain input");
        nfft_ = a.params.get_int("nfft");
        hop_ = a.params.get_int("hop");
        if (nfft_ < 1 || hop_ < 1 || in_.items % hop_ != 0)
            throw std::invalid_argument(label_ + ": needs nfft >= 1, hop >= 1 and a block size "
                                                 "that is a multiple of hop");
        channels_ = in_.channels;
        n_ = in_.items;
        frames_ = n_ / hop_;
        real_ = in_.dtype == DType::F32;
        bins_ = real_ ? nfft_ / 2 + 1 : nfft_;
        if (out_.items != frames_ || out_.bins != bins_ || out_.dtype != DType::C64)
            throw std::invalid_argument(label_ + ": output layout does not match nfft and hop");
        hist_len_ = nfft_ > hop_ ? nfft_ - hop_ : 0;
        window_ = upload_window(device_, a.params.get_array("window"), nfft_, label_);
        history_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, channels_, hist_len_, n_);
        frames_buf_ = std::make_unique<DeviceBuffer>(
            device_, static_cast<size_t>(channels_ * frames_ * nfft_) * (real_ ? 4 : 8));
        FftLayout layout;
        layout.n = nfft_;
        layout.batch = channels_ * frames_;
        layout.type = real_ ? CUFFT_R2C : CUFFT_C2C;
        plan_ = std::make_unique<CufftPlan>(device_, layout, label_);
        module_ = load_embedded_module(device_, "stft", CompileOptions{});
        framing_ = module_->function(real_ ? "gk_stft_frames_f32" : "gk_stft_frames_c64");
        make_units(layout);
    }

    // Units: the block's frames (channel x frame rows, in memory order), grouped by
    // dsp::split_units (<= 64 units, >= 4096 windowed samples each, unit offsets on 16-byte
    // boundaries); each unit frames its rows (reading the previous blocks' history, which stays
    // untouched until the block's last unit) and transforms them with a plan of its batch. The
    // last unit then updates the history once, as enqueue() does after its transform.
    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range(kind(), begin, end, split_.units);
        if (begin == 0 && end == split_.units) {
            enqueue(s, in, out, n_, false);
            return;
        }
        const int64_t frame_bytes = nfft_ * (real_ ? 4 : 8);
        for (int64_t u = begin; u < end; ++u) {
            const int64_t r0 = split_.begin(u), rows = split_.size(u);
            launch(*framing_rows_, dim(static_cast<unsigned>(rows)), dim(256), 0, s,
                   frames_buf_->ptr(), in, history_->ptr(), window_->ptr(), u64(n_),
                   u64(hist_len_), u64(nfft_), u64(hop_), u64(frames_), u64(r0));
            CufftPlan& plan = rows == split_.per ? *unit_plan_ : *tail_plan_;
            const CUdeviceptr src = frames_buf_->ptr() + static_cast<CUdeviceptr>(r0 * frame_bytes);
            const CUdeviceptr dst = out + static_cast<CUdeviceptr>(r0 * bins_ * 8);
            if (real_)
                plan.exec_r2c(s, src, dst);
            else
                plan.exec_c2c(s, src, dst, CUFFT_FORWARD);
        }
        if (end == split_.units) history_->update(s, util_, in);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        launch(*framing_, dim(static_cast<unsigned>(channels_ * frames_)), dim(256), 0, s,
               frames_buf_->ptr(), in, history_->ptr(), window_->ptr(), u64(n_), u64(hist_len_),
               u64(nfft_), u64(hop_), u64(frames_));
        if (real_)
            plan_->exec_r2c(s, frames_buf_->ptr(), out);
        else
            plan_->exec_c2c(s, frames_buf_->ptr(), out, CUFFT_FORWARD);
        history_->update(s, util_, in);
        if (final)
            dsp::zero_after(s, util_, out, channels_, frames_, dsp::item_bytes(out_),
                            output_items(n_in));
    }

    int64_t output_items(int64_t n_in) const override {
        return n_in >= n_ ? frames_ : ceil_div(n_in, hop_);
    }

    void reset(CUstream s) override { history_->reset(s); }

    const char* kind() const override { return "stft"; }

private:
    void make_units(const FftLayout& full) {
        const int64_t align = dsp::lcm64(dsp::align_items(nfft_ * (real_ ? 4 : 8)),
                                         dsp::align_items(bins_ * 8));
        split_ = dsp::split_units(channels_ * frames_, nfft_, align);
        if (split_.units <= 1) return;
        framing_rows_ =
            module_->function(real_ ? "gk_stft_frames_rows_f32" : "gk_stft_frames_rows_c64");
        FftLayout unit = full;
        unit.batch = split_.per;
        unit_plan_ = std::make_unique<CufftPlan>(device_, unit, label_ + " (unit)");
        if (split_.last() != split_.per) {
            unit.batch = split_.last();
            tail_plan_ = std::make_unique<CufftPlan>(device_, unit, label_ + " (last unit)");
        }
    }

    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t nfft_ = 1, hop_ = 1, channels_ = 1, n_ = 0, frames_ = 0, bins_ = 0, hist_len_ = 0;
    bool real_ = true;
    std::unique_ptr<DeviceBuffer> window_, frames_buf_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    std::unique_ptr<CufftPlan> plan_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> framing_;
    // chunking
    dsp::UnitSplit split_;
    std::shared_ptr<Kernel> framing_rows_;
    std::unique_ptr<CufftPlan> unit_plan_, tail_plan_;
};

// How the fused op splits its frames over CTAs: each averaging group of `avg` frames is cut into
// `parts` runs of `frames_per_part` frames (a multiple of the frames one CTA transforms at once),
// sized so that all CTAs together make about two per SM.
struct PaSplit {
    int64_t frames_per_part = 1;
    int64_t parts = 1;
};

PaSplit split_frames(int64_t groups, int64_t avg, int64_t nfft, int multiprocessors) {
    const int64_t at_once = 4096 / nfft;
    const int64_t slots = 2 * static_cast<int64_t>(multiprocessors > 0 ? multiprocessors : 80);
    int64_t per = ceil_div(groups * avg, slots);
    per = ceil_div(per < at_once ? at_once : per, at_once) * at_once;
    const int64_t whole = ceil_div(avg, at_once) * at_once;
    if (per > whole) per = whole;
    PaSplit split;
    split.frames_per_part = per;
    split.parts = ceil_div(avg, per);
    return split;
}

class StftPowerAverageOp : public Op {
public:
    explicit StftPowerAverageOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "stft_power_average")), in_(a.in),
          out_(a.out), util_(a.device) {
        nfft_ = a.params.get_int("nfft");
        avg_ = a.params.get_int("frames");
        if (in_.frames() || in_.dtype != DType::C64)
            throw UnsupportedError(a.name, "cuda", "the fused stft/power/average op takes complex "
                                                   "time-domain input");
        if (nfft_ < 256 || nfft_ > 4096 || (nfft_ & (nfft_ - 1)) != 0)
            throw UnsupportedError(a.name, "cuda", "the fused stft/power/average op needs nfft a "
                                                   "power of two from 256 to 4096, got " +
                                                       std::to_string(nfft_));
        channels_ = in_.channels;
        n_ = in_.items;
        if (avg_ < 1 || n_ % nfft_ != 0 || (n_ / nfft_) % avg_ != 0)
            throw std::invalid_argument(label_ + ": the block must hold a whole number of "
                                                 "averaging groups of frames");
        frames_ = n_ / nfft_;
        groups_per_channel_ = frames_ / avg_;
        groups_ = channels_ * groups_per_channel_;
        if (out_.items != groups_per_channel_ || out_.bins != nfft_ || out_.dtype != DType::F32)
            throw std::invalid_argument(label_ + ": output layout does not match");
        window_ = upload_window(device_, a.params.get_array("window"), nfft_, label_);
        const PaSplit split =
            split_frames(groups_, avg_, nfft_, device_->properties().multiprocessors);
        frames_per_part_ = split.frames_per_part;
        parts_ = split.parts;
        partial_ = std::make_unique<DeviceBuffer>(
            device_, static_cast<size_t>(groups_ * parts_ * nfft_) * sizeof(float));
        module_ = load_embedded_module(device_, "stft", CompileOptions{});
        fused_ = module_->function("gk_stft_pa_" + std::to_string(nfft_));
        reduce_ = module_->function("gk_stft_pa_reduce");
        // Units: every unit launches the full block's grid (all CTAs: the GPU stays full), each
        // CTA transforming a slice of the steps of its run (a step = the 4096 / nfft frames a CTA
        // transforms at once) and adding into its partial spectrum; the last unit reduces. Units
        // hold >= kPaUnitSamples samples (256 CTA-steps of 4096 samples) and whole steps, <= 64.
        const int64_t steps = frames_per_part_ / (4096 / nfft_);
        int64_t by_size = channels_ * n_ / kPaUnitSamples;
        if (by_size < 1) by_size = 1;
        units_ = steps < by_size ? steps : by_size;
        if (units_ > dsp::kMaxUnits) units_ = dsp::kMaxUnits;
        if (units_ < 1) units_ = 1;
        steps_ = steps;
        if (units_ > 1) fused_steps_ = module_->function("gk_stft_pa_steps_" + std::to_string(nfft_));
    }

    int64_t units() const override { return units_; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range(kind(), begin, end, units_);
        if (begin == 0 && end == units_) {
            enqueue(s, in, out, n_, false);
            return;
        }
        // Unit u is steps [u * S / U, (u + 1) * S / U) (every unit at least one step, U <= S).
        // One launch for the whole chunk: each CTA reads and writes its partial spectrum once per
        // chunk, not once per unit (measured on the H100: a launch per unit made a chunked block
        // ~3x slower than a whole one).
        const int step_begin = static_cast<int>(begin * steps_ / units_);
        const int step_end = static_cast<int>(end * steps_ / units_);
        launch(*fused_steps_, dim(static_cast<unsigned>(groups_ * parts_)), dim(256), 0, s,
               partial_->ptr(), in, window_->ptr(), u64(frames_), u64(avg_), u64(frames_),
               static_cast<int>(parts_), static_cast<int>(frames_per_part_), step_begin, step_end,
               begin == 0 ? 0 : 1);
        if (end == units_)
            launch(*reduce_, dim(static_cast<unsigned>(groups_ * (nfft_ / 32))), dim(32, 8), 0, s,
                   out, partial_->ptr(), u64(nfft_), static_cast<int>(parts_),
                   u64(groups_per_channel_), u64(avg_), u64(frames_));
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        const int64_t valid = final && n_in < n_ ? ceil_div(n_in, nfft_) : frames_;
        launch(*fused_, dim(static_cast<unsigned>(groups_ * parts_)), dim(256), 0, s,
               partial_->ptr(), in, window_->ptr(), u64(frames_), u64(avg_), u64(valid),
               static_cast<int>(parts_), static_cast<int>(frames_per_part_));
        launch(*reduce_, dim(static_cast<unsigned>(groups_ * (nfft_ / 32))), dim(32, 8), 0, s, out,
               partial_->ptr(), u64(nfft_), static_cast<int>(parts_), u64(groups_per_channel_),
               u64(avg_), u64(valid));
    }

    int64_t output_items(int64_t n_in) const override {
        if (n_in >= n_) return groups_per_channel_;
        return ceil_div(ceil_div(n_in, nfft_), avg_);
    }

    void reset(CUstream) override {}  // hop == nfft: frames never straddle blocks

    const char* kind() const override { return "stft_power_average"; }

private:
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t nfft_ = 256, avg_ = 1, channels_ = 1, n_ = 0, frames_ = 0, groups_per_channel_ = 0,
            groups_ = 0, frames_per_part_ = 1, parts_ = 1;
    std::unique_ptr<DeviceBuffer> window_, partial_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> fused_, reduce_;
    // chunking
    static constexpr int64_t kPaUnitSamples = int64_t(1) << 20;
    int64_t units_ = 1, steps_ = 1;
    std::shared_ptr<Kernel> fused_steps_;
};

GK_REGISTER_OP("stft", [](const OpArgs& a) { return std::make_unique<StftOp>(a); });
GK_REGISTER_OP("stft_power_average",
               [](const OpArgs& a) { return std::make_unique<StftPowerAverageOp>(a); });

}  // namespace
}  // namespace gk
