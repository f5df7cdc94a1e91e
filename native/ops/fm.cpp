// fm_demod: the FM discriminator with optional de-emphasis (pygpukit_dsp/stages/fm.py;
// kernels/fm.cu).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/fm.py:
//   gain   the output scale
//   pole   a = exp(-1 / (fs * tau)) of the de-emphasis (absent: none)
// State on the device: the last input sample of every channel (dsp::DeviceHistory of one sample)
// and, with de-emphasis, the filter's last output per channel. The discriminator is elementwise
// over the whole GPU; the de-emphasis then runs in place: one CTA per channel scanning its
// recurrence for short blocks, and for long ones (more than kTiledAbove samples) a scan over the
// tiles of every channel that fills the GPU (fm.cu: tiles, carry, fix). One unit: the scan is a
// recurrence along each channel.
#include <cmath>
#include <string>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::dim;
using dsp::launch;

class FmDemodOp : public Op {
public:
    explicit FmDemodOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "fm_demod")), in_(a.in), util_(a.device) {
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "fm_demod needs time-domain input");
        if (a.out.dtype != DType::F32 || a.out.channels != in_.channels || a.out.items != in_.items ||
            a.out.frames())
            throw std::invalid_argument(label_ + ": the output must be float32 of the input's shape");
        if (in_.items < 1) throw std::invalid_argument(label_ + ": empty blocks");
        gain_ = static_cast<float>(a.params.get_float("gain"));
        deemph_ = a.params.has("pole");
        if (deemph_) {
            const double pole = a.params.get_float("pole");
            if (!(pole > 0.0 && pole < 1.0)) throw std::invalid_argument(label_ + ": the pole must be in (0, 1)");
            b_ = static_cast<float>(1.0 - pole);  // fm.cu: why b and log(a), not a
            lg_ = static_cast<float>(std::log(pole));
            const size_t bytes = static_cast<size_t>(in_.channels) * sizeof(float);
            state_ = std::make_unique<DeviceBuffer>(device_, bytes);
            state_->memset(0, bytes, 0, nullptr);
            tiled_ = in_.items > kTiledAbove && in_.channels <= 65535;
            if (tiled_) {
                tiles_ = (in_.items + kTile - 1) / kTile;
                const size_t scratch = static_cast<size_t>(in_.channels * tiles_) * sizeof(float);
                agg_m_ = std::make_unique<DeviceBuffer>(device_, scratch);
                agg_e_ = std::make_unique<DeviceBuffer>(device_, scratch);
                carry_ = std::make_unique<DeviceBuffer>(device_, scratch);
            }
        }
        prev_ = std::make_unique<dsp::DeviceHistory>(device_, in_.dtype, in_.channels, 1, in_.items);
        module_ = load_embedded_module(device_, "fm", CompileOptions{});
        kernel_ = module_->function(in_.dtype == DType::C64 ? "gk_fm_demod_c64" : "gk_fm_demod_f32");
        if (deemph_ && tiled_) {
            tiles_kernel_ = module_->function("gk_fm_deemph_tiles");
            carry_kernel_ = module_->function("gk_fm_deemph_carry");
            fix_kernel_ = module_->function("gk_fm_deemph_fix");
        } else if (deemph_) {
            deemph_kernel_ = module_->function("gk_fm_deemphasis");
        }
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        const unsigned long long channels = static_cast<unsigned long long>(in_.channels);
        const unsigned long long n = static_cast<unsigned long long>(in_.items);
        const unsigned gx = dsp::grid_for(*device_, in_.items);
        const unsigned gy = static_cast<unsigned>(in_.channels < 65535 ? in_.channels : 65535);
        launch(*kernel_, dim(gx, gy), dim(256), 0, s, out, in, prev_->ptr(), channels, n, gain_);
        if (deemph_ && tiled_) {
            const Dim3 grid = dim(static_cast<unsigned>(tiles_), static_cast<unsigned>(in_.channels));
            const unsigned long long tiles = static_cast<unsigned long long>(tiles_);
            launch(*tiles_kernel_, grid, dim(kTileThreads), 0, s, out, agg_m_->ptr(), agg_e_->ptr(), n, b_, lg_);
            launch(*carry_kernel_, dim(static_cast<unsigned>(in_.channels)), dim(kCarryThreads), 0, s,
                   carry_->ptr(), state_->ptr(), agg_m_->ptr(), agg_e_->ptr(), tiles);
            launch(*fix_kernel_, grid, dim(kTileThreads), 0, s, out, carry_->ptr(), n, lg_);
        } else if (deemph_) {
            launch(*deemph_kernel_, dim(static_cast<unsigned>(in_.channels)), dim(kScanThreads), 0, s, out,
                   state_->ptr(), n, b_, lg_);
        }
        prev_->update(s, util_, in);
        if (final)  // the next op reads zeros past a final block's n_in (op.h)
            dsp::zero_after(s, util_, out, in_.channels, in_.items, sizeof(float), n_in);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }

    void reset(CUstream s) override {
        prev_->reset(s);
        if (state_)
            cu_check(driver().cuMemsetD8Async(state_->ptr(), 0, state_->nbytes(), s), "cuMemsetD8Async",
                     "resetting the de-emphasis state");
    }

    const char* kind() const override { return "fm_demod"; }

private:
    static constexpr unsigned kScanThreads = 1024;  // fm.cu's kScanThreads
    static constexpr unsigned kTileThreads = 256;   // fm.cu's kTileThreads, kTile and kCarryThreads
    static constexpr int64_t kTile = 4096;
    static constexpr unsigned kCarryThreads = 1024;
    static constexpr int64_t kTiledAbove = 16384;   // at most 16 samples a thread in one CTA: below, one launch
    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_;
    dsp::UtilKernels util_;
    float gain_ = 1.0f, b_ = 0.0f, lg_ = 0.0f;
    bool deemph_ = false, tiled_ = false;
    int64_t tiles_ = 0;
    std::unique_ptr<DeviceBuffer> state_, agg_m_, agg_e_, carry_;
    std::unique_ptr<dsp::DeviceHistory> prev_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_, deemph_kernel_, tiles_kernel_, carry_kernel_, fix_kernel_;
};

GK_REGISTER_OP("fm_demod", [](const OpArgs& a) { return std::make_unique<FmDemodOp>(a); });

}  // namespace
}  // namespace gk
