// average: mean of each run of `frames` frames (pygpukit_dsp/stages/average.py;
// kernels/average.cu). Frames domain, float32 or complex64, sums in double precision. No state:
// a block always holds whole groups; a final block of n frames gives ceil(n / frames) frames,
// the last one the mean of the frames that remain.
#include <stdexcept>
#include <string>

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
    TensorDesc in_, out_;
    int64_t k_ = 1;
    int rows_ = 1;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
};

}  // namespace

GK_REGISTER_OP("average", [](const OpArgs& a) { return std::make_unique<AverageOp>(a); });

}  // namespace gk
