// ddc: the (frequency-translating) decimating FIR (kernels/ddc.cu, nco.cuh), used by the ddc
// stage and by fir with decimate > 1 (pygpukit_dsp/backends/cuda_ops/shift.py and fir.py).
//
// Parameters:
//   taps       (L,) or (channels, L), real or complex: g[l] = h[l] * exp(-2j*pi*inc*l) for ddc
//              (the lowering makes them), h itself for fir
//   decimate   D: outputs at the block's samples 0, D, 2D... (the block size is a multiple of D)
//   step       the 64-bit phase step of inc cycles per sample (0: no rotation, fir)
// Kernels: the tiled form (a CTA of T <= 256 outputs stages its input window in shared memory,
// ordered by phase) when D * (T + (L-1)/D) samples fit in 48 KiB, else one thread per output
// reading global memory (kernels/ddc.cu).
// State on the device: the last L - 1 input samples of every channel (dsp::DeviceHistory) and
// the stream's sample index (one uint64, advanced by the block size after each block).
//
// Units (the scheduler's pacing): output samples, grouped by dsp::split_units (<= 64 units,
// >= 4096 outputs over the channels each) as resample does; a unit computes its outputs of every
// channel from the block and the history (unchanged until the last unit, which updates it and
// the sample index, as enqueue() does after its launch); bit-identical in any split.
#include <string>
#include <vector>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

unsigned u32(int64_t v) { return static_cast<unsigned>(v); }

class DdcOp : public Op {
public:
    explicit DdcOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "ddc")), in_(a.in), out_(a.out), util_(a.device) {
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "ddc needs time-domain input");
        const ParamArray& taps = a.params.get_array("taps");
        if (taps.shape.empty() || taps.shape.size() > 2 || taps.size() == 0)
            throw std::invalid_argument(label_ + ": taps must have shape (L,) or (channels, L)");
        channels_ = in_.channels;
        n_ = in_.items;
        D_ = a.params.get_int("decimate");
        step_ = static_cast<unsigned long long>(a.params.get_int("step", 0));
        L_ = taps.shape.back();
        const int64_t rows = taps.shape.size() == 2 ? taps.shape[0] : 1;
        if (rows != 1 && rows != channels_)
            throw std::invalid_argument(label_ + ": per-channel taps need one row per channel");
        if (D_ < 1 || n_ % D_ != 0 || out_.items != n_ / D_ || out_.channels != channels_ || out_.frames())
            throw std::invalid_argument(label_ + ": the block size must be a multiple of decimate and "
                                                 "the output block block_size / decimate");
        const bool x_complex = in_.dtype == DType::C64, h_complex = taps.is_complex;
        if ((out_.dtype == DType::C64) != (x_complex || h_complex))
            throw std::invalid_argument(label_ + ": output dtype does not follow the taps and input");
        if (step_ != 0 && out_.dtype != DType::C64)
            throw std::invalid_argument(label_ + ": a rotation needs a complex output");
        if (n_ >= (int64_t(1) << 31) || channels_ > 65535 || L_ >= (int64_t(1) << 31))
            throw UnsupportedError(a.name, "cuda", "the CUDA decimating filter takes blocks below 2^31 "
                                                   "samples and at most 65535 channels");
        taps_row_ = rows == 1 ? 0 : L_;
        if (h_complex) {
            const std::vector<float> t = taps.interleaved_c64();
            taps_ = std::make_unique<DeviceBuffer>(device_, t.size() * sizeof(float));
            taps_->copy_from_host(t.data(), t.size() * sizeof(float), 0, nullptr);
        } else {
            const std::vector<float> t = taps.real_f32();
            taps_ = std::make_unique<DeviceBuffer>(device_, t.size() * sizeof(float));
            taps_->copy_from_host(t.data(), t.size() * sizeof(float), 0, nullptr);
        }
        index_ = std::make_unique<DeviceBuffer>(device_, sizeof(unsigned long long));
        index_->memset(0, sizeof(unsigned long long), 0, nullptr);
        history_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, channels_, L_ - 1, n_);
        module_ = load_embedded_module(device_, "ddc", CompileOptions{});
        const std::string variant = x_complex ? (h_complex ? "cc" : "cr") : (h_complex ? "rc" : "rr");
        // the tiled kernel when a CTA's phase-ordered window fits in 48 KiB of shared memory
        const int64_t esz = static_cast<int64_t>(dtype_size(in_.dtype));
        for (int64_t t : {256, 128, 64, 32}) {
            const int64_t bytes = D_ * (t + (L_ - 1) / D_) * esz;
            if (bytes <= kMaxSharedBytes) {
                tile_ = t;
                shared_bytes_ = static_cast<unsigned>(bytes);
                break;
            }
        }
        kernel_ = module_->function((tile_ ? "gk_ddc_tiled_" : "gk_ddc_") + variant);
        advance_ = module_->function("gk_nco_advance");
        split_ = dsp::split_units(out_.items, channels_);
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("ddc", begin, end, split_.units);
        run(s, in, out, split_.begin(begin), split_.end_item(end));
        if (end == split_.units) finish_block(s, in);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        run(s, in, out, 0, out_.items);
        finish_block(s, in);
        if (final)
            dsp::zero_after(s, util_, out, channels_, out_.items, dsp::item_bytes(out_), output_items(n_in));
    }

    // ceil(n_in / D): the outputs at the block's samples 0, D, 2D... below n_in.
    int64_t output_items(int64_t n_in) const override {
        if (n_in >= n_) return out_.items;
        return ceil_div(n_in, D_);
    }

    void reset(CUstream s) override {
        history_->reset(s);
        cu_check(driver().cuMemsetD8Async(index_->ptr(), 0, sizeof(unsigned long long), s),
                 "cuMemsetD8Async", "resetting the ddc's sample index");
    }

    const char* kind() const override { return "ddc"; }

private:
    // Outputs [k0, k1) of every channel.
    void run(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t k0, int64_t k1) const {
        if (k1 <= k0) return;
        const int64_t threads = tile_ ? tile_ : 256;
        launch(*kernel_, dim(static_cast<unsigned>(ceil_div(k1 - k0, threads)), static_cast<unsigned>(channels_)),
               dim(static_cast<unsigned>(threads)), shared_bytes_, s, out, in, history_->ptr(), taps_->ptr(),
               index_->ptr(), step_, u32(n_), u32(out_.items), u32(L_), u32(D_), u32(taps_row_), u32(k0),
               u32(k1));
    }

    void finish_block(CUstream s, CUdeviceptr in) const {
        history_->update(s, util_, in);
        if (step_ != 0)
            launch(*advance_, dim(1), dim(1), 0, s, index_->ptr(), static_cast<unsigned long long>(n_));
    }

    static constexpr int64_t kMaxSharedBytes = 48 * 1024;  // without opting in to more
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t channels_ = 1, n_ = 0, D_ = 1, L_ = 1, taps_row_ = 0;
    int64_t tile_ = 0;  // outputs per CTA of the tiled kernel; 0: the plain kernel
    unsigned shared_bytes_ = 0;
    unsigned long long step_ = 0;
    std::unique_ptr<DeviceBuffer> taps_, index_;
    std::unique_ptr<dsp::DeviceHistory> history_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_, advance_;
    dsp::UnitSplit split_;
};

GK_REGISTER_OP("ddc", [](const OpArgs& a) { return std::make_unique<DdcOp>(a); });

}  // namespace
}  // namespace gk
