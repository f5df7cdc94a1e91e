// fft, rfft, ifft, irfft: batched cuFFT over channels x frames (NumPy's normalisation).
//
//   fft   complex input: one C2C (forward) from the block straight into the frames.
//         real input:    an R2C writing bins 0..n/2 into frames of n slots, then the other half
//                        filled with the Hermitian mirror (gk_hermitian_fill).
//   rfft  one R2C.
//   ifft  C2C (inverse) into the output, then the 1/n scale in place (gk_scale_c64).
//   irfft the bins copied to scratch scaled by 1/n (C2R overwrites its input; the imaginary parts
//         of bin 0 and of bin n/2 for even n are dropped as NumPy does), then one C2R.
// Parameters from pygpukit_dsp/backends/cuda_ops/fft.py: n (frame length / samples per frame).
#include <string>

#include "dsp_util.h"
#include "gk/cufft_plan.h"

namespace gk {
namespace {

using dsp::ceil_div;

enum class FftKind { Fft, Rfft, Ifft, Irfft };

const char* kind_name(FftKind k) {
    switch (k) {
        case FftKind::Fft: return "fft";
        case FftKind::Rfft: return "rfft";
        case FftKind::Ifft: return "ifft";
        default: return "irfft";
    }
}

class FftOp : public Op {
public:
    FftOp(const OpArgs& a, FftKind kind)
        : device_(a.device), kind_(kind), label_(dsp::op_label(a, kind_name(kind))), in_(a.in),
          out_(a.out), util_(a.device) {
        n_ = a.params.get_int("n");
        if (n_ < 1) throw std::invalid_argument(label_ + ": n must be >= 1");
        channels_ = in_.channels;
        FftLayout layout;
        layout.n = n_;
        if (forward()) {
            if (in_.frames() || in_.items % n_ != 0)
                throw std::invalid_argument(label_ + ": input must be time-domain samples, a whole "
                                                     "number of frames of n");
            frames_ = in_.items / n_;
            bins_ = kind_ == FftKind::Rfft ? n_ / 2 + 1 : n_;
            if (out_.bins != bins_ || out_.items != frames_ || out_.dtype != DType::C64)
                throw std::invalid_argument(label_ + ": output layout does not match n");
            real_in_ = in_.dtype == DType::F32;
            if (kind_ == FftKind::Rfft && !real_in_)
                throw UnsupportedError(a.name, "cuda", "rfft needs real (float32) input");
            layout.batch = channels_ * frames_;
            if (real_in_) {
                layout.type = CUFFT_R2C;
                layout.odist = bins_;  // rfft: n/2+1; fft of real input: frames of n slots
            } else {
                layout.type = CUFFT_C2C;
            }
        } else {
            if (!in_.frames() || in_.dtype != DType::C64)
                throw std::invalid_argument(label_ + ": input must be complex frames");
            frames_ = in_.items;
            bins_ = in_.bins;
            const int64_t want_bins = kind_ == FftKind::Irfft ? n_ / 2 + 1 : n_;
            if (bins_ != want_bins || out_.items != frames_ * n_)
                throw std::invalid_argument(label_ + ": input bins / output samples do not match n");
            layout.batch = channels_ * frames_;
            if (kind_ == FftKind::Irfft) {
                layout.type = CUFFT_C2R;
                scratch_ = std::make_unique<DeviceBuffer>(
                    device_, static_cast<size_t>(channels_ * frames_ * bins_) * 8);
            } else {
                layout.type = CUFFT_C2C;
            }
        }
        plan_ = std::make_unique<CufftPlan>(device_, layout, label_);
        make_units(layout);
    }

    // Units: the block's transforms (channel x frame rows, in memory order), grouped by
    // dsp::split_units (<= 64 units, >= 4096 points each, unit offsets on 16-byte boundaries).
    // A block of one transform per channel thus splits over channels. Plans for a unit's batch
    // (and the shorter last unit's) are made here.
    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range(kind(), begin, end, split_.units);
        if (begin == 0 && end == split_.units) {
            enqueue(s, in, out, in_.items, false);
            return;
        }
        for (int64_t u = begin; u < end; ++u) {
            const int64_t r0 = split_.begin(u), rows = split_.size(u);
            CufftPlan& plan = rows == split_.per ? *unit_plan_ : *tail_plan_;
            run_rows(s, plan, in + static_cast<CUdeviceptr>(r0 * in_row_bytes_),
                     out + static_cast<CUdeviceptr>(r0 * out_row_bytes_),
                     scratch_ ? scratch_->ptr() + static_cast<CUdeviceptr>(r0 * bins_ * 8) : 0,
                     rows);
        }
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        run_rows(s, *plan_, in, out, scratch_ ? scratch_->ptr() : 0, channels_ * frames_);
        if (final)
            dsp::zero_after(s, util_, out, channels_, out_.items, dsp::item_bytes(out_),
                            output_items(n_in));
    }

    int64_t output_items(int64_t n_in) const override {
        if (forward()) return n_in >= in_.items ? frames_ : ceil_div(n_in, n_);
        return (n_in >= frames_ ? frames_ : n_in) * n_;
    }

    void reset(CUstream) override {}  // frames never straddle blocks: no state

    const char* kind() const override { return kind_name(kind_); }

private:
    bool forward() const { return kind_ == FftKind::Fft || kind_ == FftKind::Rfft; }

    // The transforms of `count` consecutive rows (channel x frame) with `plan` (batch == count);
    // in/out/scratch point at the first row. Every step is row-local, so a subrange of rows
    // gives exactly its part of the whole block.
    void run_rows(CUstream s, CufftPlan& plan, CUdeviceptr in, CUdeviceptr out,
                  CUdeviceptr scratch, int64_t count) {
        switch (kind_) {
            case FftKind::Fft:
                if (real_in_) {
                    plan.exec_r2c(s, in, out);
                    util_.hermitian_fill(s, out, n_, count);
                } else {
                    plan.exec_c2c(s, in, out, CUFFT_FORWARD);
                }
                break;
            case FftKind::Rfft:
                plan.exec_r2c(s, in, out);
                break;
            case FftKind::Ifft:
                plan.exec_c2c(s, in, out, CUFFT_INVERSE);
                util_.scale_c64(s, out, out, 1.0f / static_cast<float>(n_), count * n_);
                break;
            case FftKind::Irfft:
                util_.irfft_prepare(s, scratch, in, 1.0f / static_cast<float>(n_), bins_, n_,
                                    count * bins_);
                plan.exec_c2r(s, scratch, out);
                break;
        }
    }

    void make_units(const FftLayout& full) {
        const int64_t rows = channels_ * frames_;
        // Bytes of one row (one transform) of the input, the output and the irfft scratch.
        in_row_bytes_ = forward() ? n_ * static_cast<int64_t>(dtype_size(in_.dtype)) : bins_ * 8;
        out_row_bytes_ = forward() ? bins_ * 8 : n_ * static_cast<int64_t>(dtype_size(out_.dtype));
        int64_t align = dsp::lcm64(dsp::align_items(in_row_bytes_), dsp::align_items(out_row_bytes_));
        if (scratch_) align = dsp::lcm64(align, dsp::align_items(bins_ * 8));
        split_ = dsp::split_units(rows, n_, align);
        if (split_.units <= 1) return;
        FftLayout unit = full;
        unit.batch = split_.per;
        unit_plan_ = std::make_unique<CufftPlan>(device_, unit, label_ + " (unit)");
        if (split_.last() != split_.per) {
            unit.batch = split_.last();
            tail_plan_ = std::make_unique<CufftPlan>(device_, unit, label_ + " (last unit)");
        }
    }

    std::shared_ptr<Device> device_;
    FftKind kind_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t n_ = 1, channels_ = 1, frames_ = 0, bins_ = 0;
    bool real_in_ = false;
    std::unique_ptr<CufftPlan> plan_;
    std::unique_ptr<DeviceBuffer> scratch_;
    // chunking
    dsp::UnitSplit split_;
    int64_t in_row_bytes_ = 0, out_row_bytes_ = 0;
    std::unique_ptr<CufftPlan> unit_plan_, tail_plan_;
};

GK_REGISTER_OP("fft", [](const OpArgs& a) { return std::make_unique<FftOp>(a, FftKind::Fft); });
GK_REGISTER_OP("rfft", [](const OpArgs& a) { return std::make_unique<FftOp>(a, FftKind::Rfft); });
GK_REGISTER_OP("ifft", [](const OpArgs& a) { return std::make_unique<FftOp>(a, FftKind::Ifft); });
GK_REGISTER_OP("irfft", [](const OpArgs& a) { return std::make_unique<FftOp>(a, FftKind::Irfft); });

}  // namespace
}  // namespace gk
