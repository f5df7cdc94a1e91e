// fir: streaming FIR filter on the GPU (kernels in kernels/fir.cu).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/fir.py:
//   taps      (L,) or (channels, L), real or complex
//   method    "direct" | "overlap_save" (the lowering applies the cost rule)
//   nfft, step, spectrum   overlap-save only: FFT size, new samples per frame (nfft - L + 1) and
//                          the taps' spectrum scaled by 1/nfft, shape (1 or channels, bins)
#include <string>
#include <vector>

#include "dsp_util.h"
#include "gk/cufft_plan.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;
using dsp::UtilKernels;

std::unique_ptr<DeviceBuffer> upload(const std::shared_ptr<Device>& device, const void* data,
                                     size_t bytes) {
    auto buf = std::make_unique<DeviceBuffer>(device, bytes);
    buf->copy_from_host(data, bytes, 0, nullptr);
    return buf;
}

// Taps rows (rows x L) zero-padded to rows x padded, as float or interleaved complex.
std::vector<float> padded_taps(const ParamArray& taps, bool as_complex, int64_t rows, int64_t L,
                               int64_t padded) {
    const int64_t width = as_complex ? 2 : 1;
    std::vector<float> out(static_cast<size_t>(rows * padded * width), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < L; ++k) {
            const std::complex<double> v = taps.values[static_cast<size_t>(r * L + k)];
            float* dst = &out[static_cast<size_t>((r * padded + k) * width)];
            dst[0] = static_cast<float>(v.real());
            if (as_complex) dst[1] = static_cast<float>(v.imag());
        }
    return out;
}

class FirOp : public Op {
public:
    explicit FirOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "fir")), label_name_(a.name), in_(a.in),
          out_(a.out), util_(a.device) {
        const ParamArray& taps = a.params.get_array("taps");
        if (taps.shape.empty() || taps.shape.size() > 2 || taps.size() == 0)
            throw std::invalid_argument(label_ + ": taps must have shape (L,) or (channels, L)");
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "fir needs time-domain input");
        channels_ = in_.channels;
        n_ = in_.items;
        L_ = taps.shape.back();
        tap_rows_ = taps.shape.size() == 2 ? taps.shape[0] : 1;
        if (tap_rows_ != 1 && tap_rows_ != channels_)
            throw std::invalid_argument(label_ + ": per-channel taps need one row per channel");
        x_complex_ = in_.dtype == DType::C64;
        h_complex_ = taps.is_complex;
        if ((out_.dtype == DType::C64) != (x_complex_ || h_complex_))
            throw std::invalid_argument(label_ + ": output dtype does not follow the taps and input");
        method_ = a.params.get_str("method", "direct");
        if (method_ == "direct")
            make_direct(taps);
        else if (method_ == "overlap_save")
            make_overlap_save(a);
        else
            throw std::invalid_argument(label_ + ": unknown method '" + method_ + "'");
        make_units();
    }

    // Units: channels, grouped by dsp::split_units (<= 64 units, >= 4096 samples each); the state
    // is per channel, so a unit filters its channels over the whole block.
    //   direct: the _ch kernel over the unit's channels reads history[phase] and writes its
    //           channels' next history; the block's last CTA (arrivals counted over all units)
    //           flips the phase, exactly once per block.
    //   overlap-save: framing, FFT (plans of a unit's batch, made here), spectrum product,
    //           inverse FFT and output for the unit's channels (their rows are contiguous);
    //           the history update for every channel after the last unit, as enqueue() does.
    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range("fir", begin, end, split_.units);
        if (begin == 0 && end == split_.units) {
            enqueue(s, in, out, n_, false);
            return;
        }
        if (method_ == "direct") {
            // Consecutive units are consecutive channels: one launch covers [begin, end).
            const int64_t c0 = split_.begin(begin), count = split_.end_item(end) - c0;
            const int64_t tiles = ceil_div(n_, 64);
            launch(*direct_ch_, dim(static_cast<unsigned>(tiles), static_cast<unsigned>(count)),
                   dim(128), 0, s, out, in, hist2_->ptr(), sync_->ptr(), taps_->ptr(), u64(n_),
                   u64(padded_), u64(tap_rows_ == 1 ? 0 : padded_), static_cast<int>(padded_ / kt_),
                   u64(c0), u64(channels_), static_cast<unsigned>(tiles * channels_));
            return;
        }
        const int64_t in_bytes = static_cast<int64_t>(dtype_size(in_.dtype));
        const int64_t out_bytes = static_cast<int64_t>(dtype_size(out_.dtype));
        const int64_t frame_bytes = real_fft_ ? 4 : 8;
        for (int64_t u = begin; u < end; ++u) {
            const int64_t c0 = split_.begin(u), count = split_.size(u);
            const int64_t r0 = c0 * frames_;  // first frame row of the unit
            const CUdeviceptr frames = frames_buf_->ptr() + static_cast<CUdeviceptr>(r0 * nfft_ * frame_bytes);
            const CUdeviceptr spectra = spectra_->ptr() + static_cast<CUdeviceptr>(r0 * bins_ * 8);
            const CUdeviceptr x = in + static_cast<CUdeviceptr>(c0 * n_ * in_bytes);
            const CUdeviceptr hist = history_->ptr() == 0 ? 0 : history_->ptr() +
                                     static_cast<CUdeviceptr>(c0 * hist_len_ * in_bytes);
            const CUdeviceptr h = spectrum_->ptr() +
                                  static_cast<CUdeviceptr>(tap_rows_ == 1 ? 0 : c0 * bins_ * 8);
            const CUdeviceptr y = out + static_cast<CUdeviceptr>(c0 * n_ * out_bytes);
            const bool full = count == split_.per;
            CufftPlan& fwd = full ? *unit_forward_ : *tail_forward_;
            const unsigned rows = static_cast<unsigned>(count * frames_);
            launch(*ols_frames_, dim(rows), dim(256), 0, s, frames, x, hist, u64(n_),
                   u64(hist_len_), u64(nfft_), u64(step_), u64(frames_));
            if (real_fft_)
                fwd.exec_r2c(s, frames, spectra);
            else
                fwd.exec_c2c(s, frames, spectra, CUFFT_FORWARD);
            launch(*ols_multiply_, dim(rows), dim(256), 0, s, spectra, h, u64(bins_), u64(frames_),
                   u64(tap_rows_));
            if (real_fft_)
                (full ? *unit_inverse_ : *tail_inverse_).exec_c2r(s, spectra, frames);
            else
                fwd.exec_c2c(s, spectra, frames, CUFFT_INVERSE);
            launch(*ols_output_, dim(static_cast<unsigned>(frames_), static_cast<unsigned>(count)),
                   dim(256), 0, s, y, frames, u64(n_), u64(hist_len_), u64(nfft_), u64(step_),
                   u64(frames_));
        }
        if (end == split_.units) history_->update(s, util_, in);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        if (method_ == "direct") {
            // The kernel also writes the next history (double-buffered): no update launch.
            launch(*direct_, dim(static_cast<unsigned>(ceil_div(n_, 64)),
                                 static_cast<unsigned>(channels_)),
                   dim(128), 0, s, out, in, hist2_->ptr(), sync_->ptr(), taps_->ptr(), u64(n_),
                   u64(padded_), u64(tap_rows_ == 1 ? 0 : padded_), static_cast<int>(padded_ / kt_));
        } else {
            const unsigned rows = static_cast<unsigned>(channels_ * frames_);
            launch(*ols_frames_, dim(rows), dim(256), 0, s, frames_buf_->ptr(), in,
                   history_->ptr(), u64(n_), u64(hist_len_), u64(nfft_), u64(step_), u64(frames_));
            if (real_fft_)
                forward_->exec_r2c(s, frames_buf_->ptr(), spectra_->ptr());
            else
                forward_->exec_c2c(s, frames_buf_->ptr(), spectra_->ptr(), CUFFT_FORWARD);
            launch(*ols_multiply_, dim(rows), dim(256), 0, s, spectra_->ptr(), spectrum_->ptr(),
                   u64(bins_), u64(frames_), u64(tap_rows_));
            if (real_fft_)
                inverse_->exec_c2r(s, spectra_->ptr(), frames_buf_->ptr());
            else
                forward_->exec_c2c(s, spectra_->ptr(), frames_buf_->ptr(), CUFFT_INVERSE);
            launch(*ols_output_, dim(static_cast<unsigned>(frames_), static_cast<unsigned>(channels_)),
                   dim(256), 0, s, out, frames_buf_->ptr(), u64(n_), u64(hist_len_), u64(nfft_),
                   u64(step_), u64(frames_));
            history_->update(s, util_, in);
        }
        if (final)
            dsp::zero_after(s, util_, out, channels_, n_, dsp::item_bytes(out_), output_items(n_in));
    }

    int64_t output_items(int64_t n_in) const override { return n_in < n_ ? n_in : n_; }

    void reset(CUstream s) override {
        if (method_ == "direct") {
            cu_check(driver().cuMemsetD8Async(hist2_->ptr(), 0, hist2_->nbytes(), s),
                     "cuMemsetD8Async", "resetting " + label_);
            cu_check(driver().cuMemsetD8Async(sync_->ptr(), 0, sync_->nbytes(), s),
                     "cuMemsetD8Async", "resetting " + label_);
        } else {
            history_->reset(s);
        }
    }

    const char* kind() const override { return "fir"; }

private:
    static unsigned long long u64(int64_t v) { return static_cast<unsigned long long>(v); }

    void make_units() {
        if (method_ == "direct") {
            split_ = dsp::split_units(channels_, n_);
            if (split_.units > 1) direct_ch_ = module_->function(direct_name_ + "_ch");
            return;
        }
        // Unit offsets of the frames and spectra scratch on 16-byte boundaries (cuFFT).
        const int64_t align = dsp::lcm64(dsp::align_items(frames_ * nfft_ * (real_fft_ ? 4 : 8)),
                                         dsp::align_items(frames_ * bins_ * 8));
        split_ = dsp::split_units(channels_, n_, align);
        if (split_.units <= 1) return;
        FftLayout layout;
        layout.n = nfft_;
        layout.type = real_fft_ ? CUFFT_R2C : CUFFT_C2C;
        auto plans = [&](int64_t ch, std::unique_ptr<CufftPlan>& fwd,
                         std::unique_ptr<CufftPlan>& inv, const std::string& what) {
            layout.batch = ch * frames_;
            layout.type = real_fft_ ? CUFFT_R2C : CUFFT_C2C;
            fwd = std::make_unique<CufftPlan>(device_, layout, label_ + what);
            if (real_fft_) {
                layout.type = CUFFT_C2R;
                inv = std::make_unique<CufftPlan>(device_, layout, label_ + what);
            }
        };
        plans(split_.per, unit_forward_, unit_inverse_, " (unit)");
        if (split_.last() != split_.per) plans(split_.last(), tail_forward_, tail_inverse_, " (last unit)");
    }

    void make_direct(const ParamArray& taps) {
        kt_ = L_ <= 32 ? 32 : 128;
        padded_ = ceil_div(L_, kt_) * kt_;
        std::vector<float> host = padded_taps(taps, h_complex_, tap_rows_, L_, padded_);
        taps_ = upload(device_, host.data(), host.size() * sizeof(float));
        // The kernel reads padded_ samples before each output (the padded taps are zero); two
        // copies of that history, and {phase, arrival counter}, all zero at the start.
        const size_t hist_bytes =
            2 * static_cast<size_t>(channels_ * padded_) * dtype_size(in_.dtype);
        hist2_ = std::make_unique<DeviceBuffer>(device_, hist_bytes);
        hist2_->memset(0, hist_bytes, 0, nullptr);
        sync_ = std::make_unique<DeviceBuffer>(device_, 2 * sizeof(unsigned));
        sync_->memset(0, 2 * sizeof(unsigned), 0, nullptr);
        if (channels_ > 65535)
            throw UnsupportedError(label_name_, "cuda", "the direct FIR kernel takes at most 65535 "
                                                        "channels; use method: overlap_save");
        module_ = load_embedded_module(device_, "fir", CompileOptions{});
        const std::string name = std::string("gk_fir_direct_") + (x_complex_ ? "c" : "r") +
                                 (h_complex_ ? "c" : "r") + "_k" + std::to_string(kt_);
        direct_ = module_->function(name);
        direct_name_ = name;
    }

    void make_overlap_save(const OpArgs& a) {
        nfft_ = a.params.get_int("nfft");
        step_ = a.params.get_int("step");
        if (step_ < 1 || step_ > nfft_ || nfft_ - step_ < L_ - 1)
            throw std::invalid_argument(label_ + ": overlap-save needs 1 <= step <= nfft - L + 1");
        hist_len_ = nfft_ - step_;
        frames_ = ceil_div(n_, step_);
        if (channels_ > 65535)
            throw UnsupportedError(label_name_, "cuda", "the CUDA FIR takes at most 65535 channels");
        real_fft_ = !x_complex_ && !h_complex_;
        bins_ = real_fft_ ? nfft_ / 2 + 1 : nfft_;
        const ParamArray& spectrum = a.params.get_array("spectrum");
        if (spectrum.shape.size() != 2 || spectrum.shape[1] != bins_ ||
            spectrum.shape[0] != tap_rows_)
            throw std::invalid_argument(label_ + ": spectrum must have shape (" +
                                        std::to_string(tap_rows_) + ", " + std::to_string(bins_) +
                                        ")");
        std::vector<float> spec = spectrum.interleaved_c64();
        spectrum_ = upload(device_, spec.data(), spec.size() * sizeof(float));
        const size_t frame_elem = real_fft_ ? 4 : 8;
        frames_buf_ = std::make_unique<DeviceBuffer>(
            device_, static_cast<size_t>(channels_ * frames_ * nfft_) * frame_elem);
        spectra_ = std::make_unique<DeviceBuffer>(
            device_, static_cast<size_t>(channels_ * frames_ * bins_) * 8);
        history_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, channels_, hist_len_, n_);
        FftLayout layout;
        layout.n = nfft_;
        layout.batch = channels_ * frames_;
        layout.type = real_fft_ ? CUFFT_R2C : CUFFT_C2C;
        forward_ = std::make_unique<CufftPlan>(device_, layout, label_);
        if (real_fft_) {
            layout.type = CUFFT_C2R;
            inverse_ = std::make_unique<CufftPlan>(device_, layout, label_);
        }
        module_ = load_embedded_module(device_, "fir", CompileOptions{});
        ols_frames_ = module_->function(real_fft_ ? "gk_ols_frames_rr"
                                                  : (x_complex_ ? "gk_ols_frames_cc"
                                                                : "gk_ols_frames_rc"));
        ols_multiply_ = module_->function("gk_ols_multiply");
        ols_output_ = module_->function(real_fft_ ? "gk_ols_output_r" : "gk_ols_output_c");
    }

    std::shared_ptr<Device> device_;
    std::string label_, label_name_;
    TensorDesc in_, out_;
    UtilKernels util_;
    int64_t channels_ = 1, n_ = 0, L_ = 1, tap_rows_ = 1;
    bool x_complex_ = false, h_complex_ = false;
    std::string method_;
    std::shared_ptr<Module> module_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    // direct
    int64_t kt_ = 32, padded_ = 32;
    std::unique_ptr<DeviceBuffer> taps_, hist2_, sync_;
    std::shared_ptr<Kernel> direct_;
    // overlap-save
    int64_t nfft_ = 0, step_ = 0, hist_len_ = 0, frames_ = 0, bins_ = 0;
    bool real_fft_ = false;
    std::unique_ptr<DeviceBuffer> spectrum_, frames_buf_, spectra_;
    std::unique_ptr<CufftPlan> forward_, inverse_;
    std::shared_ptr<Kernel> ols_frames_, ols_multiply_, ols_output_;
    // chunking
    dsp::UnitSplit split_;
    std::string direct_name_;
    std::shared_ptr<Kernel> direct_ch_;
    std::unique_ptr<CufftPlan> unit_forward_, unit_inverse_, tail_forward_, tail_inverse_;
};

GK_REGISTER_OP("fir", [](const OpArgs& a) { return std::make_unique<FirOp>(a); });

}  // namespace
}  // namespace gk
