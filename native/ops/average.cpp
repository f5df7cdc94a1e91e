// average: mean of each run of `frames` frames (pygpukit_dsp/stages/average.py;
// kernels/average.cu). Frames domain, float32 or complex64, sums in double precision. No state:
// a block always holds whole groups; a final block of n frames gives ceil(n / frames) frames,
// the last one the mean of the frames that remain.
#include <stdexcept>
#include <string>

#include "dsp_util.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/op.h"

namespace gk {
namespace {

class AverageOp final : public Op {
public:
    explicit AverageOp(const OpArgs& a) : in_(a.in), out_(a.out) {
        const std::string label = "stage '" + a.name + "' (average)";
        if (!a.in.frames())
            throw UnsupportedError(a.name, "cuda", "average needs frames-domain input (after fft/stft)");
        k_ = a.params.get_int("frames");
        if (k_ < 1) throw std::invalid_argument(label + ": frames must be >= 1");
        if (a.in.items % k_ != 0 || a.out.items != a.in.items / k_ || a.out.bins != a.in.bins ||
            a.out.channels != a.in.channels || a.out.dtype != a.in.dtype)
            throw std::invalid_argument(label + ": the output layout must be (channels, items / " +
                                        std::to_string(k_) + ", bins) of the input's dtype");
        rows_ = 1;
        while (rows_ < k_ && rows_ < 32) rows_ *= 2;
        module_ = load_embedded_module(a.device, "average", CompileOptions{});
        kernel_ = module_->function(a.in.dtype == DType::C64 ? "gk_average_c64" : "gk_average_f32");
        make_units(a);
    }

    // Units: the block's frames (the same frame range of every channel), grouped by
    // dsp::split_units (<= 64 units, >= 4096 elements each). A unit of at least `frames`
    // frames is rounded to whole averaging groups (each group averaged as by enqueue()); a
    // shorter one cuts groups, whose float64 sums are carried between the units of the block
    // in `acc_` (channels, groups, bins), the unit with a group's last frame writing the mean.
    // No state crosses blocks: a block always holds whole groups.
    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range("average", begin, end, split_.units);
        if (begin == 0 && end == split_.units) {
            enqueue(stream, in, out, in_.items, false);
            return;
        }
        for (int64_t u = begin; u < end; ++u) {
            const int64_t f_begin = split_.begin(u), f_end = f_begin + split_.size(u);
            const int64_t touched = dsp::ceil_div(f_end, k_) - f_begin / k_;
            CUdeviceptr y = out, x = in, acc = acc_ ? acc_->ptr() : 0;
            unsigned long long channels = static_cast<unsigned long long>(in_.channels);
            unsigned long long frames = static_cast<unsigned long long>(in_.items);
            unsigned long long bins = static_cast<unsigned long long>(in_.bins);
            unsigned long long k = static_cast<unsigned long long>(k_);
            unsigned long long groups_out = static_cast<unsigned long long>(out_.items);
            unsigned long long fb = static_cast<unsigned long long>(f_begin);
            unsigned long long fe = static_cast<unsigned long long>(f_end);
            void* params[] = {&y, &x, &acc, &channels, &frames, &bins, &k, &groups_out, &fb, &fe};
            Dim3 grid, block;
            grid.x = static_cast<unsigned>((bins + 31) / 32);
            grid.y = static_cast<unsigned>(touched < 65535 ? touched : 65535);
            grid.z = static_cast<unsigned>(channels < 65535 ? channels : 65535);
            block.x = 32;
            block.y = static_cast<unsigned>(rows_);
            frames_kernel_->launch(grid, block, params, 0, stream);
        }
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool) override {
        const int64_t groups = output_items(n_in);
        if (groups <= 0) return;
        CUdeviceptr y = out, x = in;
        unsigned long long channels = static_cast<unsigned long long>(in_.channels);
        unsigned long long frames = static_cast<unsigned long long>(in_.items);
        unsigned long long bins = static_cast<unsigned long long>(in_.bins);
        unsigned long long k = static_cast<unsigned long long>(k_);
        unsigned long long n = static_cast<unsigned long long>(n_in);
        unsigned long long groups_out = static_cast<unsigned long long>(out_.items);
        void* params[] = {&y, &x, &channels, &frames, &bins, &k, &n, &groups_out};
        Dim3 grid, block;
        grid.x = static_cast<unsigned>((bins + 31) / 32);
        grid.y = static_cast<unsigned>(groups < 65535 ? groups : 65535);
        grid.z = static_cast<unsigned>(channels < 65535 ? channels : 65535);
        block.x = 32;
        block.y = static_cast<unsigned>(rows_);
        kernel_->launch(grid, block, params, 0, stream);
    }

    int64_t output_items(int64_t n_in) const override { return (n_in + k_ - 1) / k_; }
    void reset(CUstream) override {}
    const char* kind() const override { return "average"; }

private:
    void make_units(const OpArgs& a) {
        split_ = dsp::split_units(in_.items, in_.channels * in_.bins);
        if (split_.per >= k_) {  // whole groups per unit: no carried sums
            split_.per = dsp::ceil_div(split_.per, k_) * k_;
            if (split_.per > in_.items) split_.per = in_.items;
            split_.units = dsp::ceil_div(in_.items, split_.per);
        }
        if (split_.units <= 1) return;
        frames_kernel_ = module_->function(a.in.dtype == DType::C64 ? "gk_average_frames_c64"
                                                                    : "gk_average_frames_f32");
        if (split_.per % k_ != 0) {
            const size_t bytes = static_cast<size_t>(out_.elements()) *
                                 (a.in.dtype == DType::C64 ? 16 : 8);
            acc_ = std::make_unique<DeviceBuffer>(a.device, bytes);
        }
    }

    TensorDesc in_, out_;
    int64_t k_ = 1;
    int rows_ = 1;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    // chunking
    dsp::UnitSplit split_;
    std::shared_ptr<Kernel> frames_kernel_;
    std::unique_ptr<DeviceBuffer> acc_;  // float64 sums of the groups cut by unit boundaries
};

}  // namespace

GK_REGISTER_OP("average", [](const OpArgs& a) { return std::make_unique<AverageOp>(a); });

}  // namespace gk
