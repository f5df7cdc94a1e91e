// delay: per-channel integer delay line (pygpukit_dsp/stages/delay.py; kernels/delay.cu).
// The history (the last D = max(delay) input samples of every channel) lives on the device.
// Per block: one kernel writes the output and the next history, then a device copy moves the
// next history over the current one (both are captured into the engine's graph). D = 0 is a
// plain device copy. The output has as many samples as the input (final block included).
//
// Units (the scheduler's pacing, Op::units): channels, grouped by dsp::split_units (<= 64 units,
// >= 4096 samples + history each). The state is per channel, so a unit runs the kernel on its
// channels' rows (offset pointers) and then copies its channels' rows of the next history; any
// split gives bit-identical results.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp_util.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/memory.h"
#include "gk/op.h"

namespace gk {
namespace {

class DelayOp final : public Op {
public:
    explicit DelayOp(const OpArgs& a) : device_(a.device), desc_(a.in) {
        const std::string label = "stage '" + a.name + "' (delay)";
        if (a.in.frames())
            throw UnsupportedError(a.name, "cuda", "delay works on time-domain samples");
        if (a.out.channels != a.in.channels || a.out.items != a.in.items || a.out.bins != a.in.bins ||
            a.out.dtype != a.in.dtype)
            throw std::invalid_argument(label + ": the output layout must equal the input's");
        const ParamArray& d = a.params.get_array("delays");
        if (d.size() != a.in.channels)
            throw std::invalid_argument(label + ": " + std::to_string(d.size()) + " delays for " +
                                        std::to_string(a.in.channels) + " channels");
        std::vector<long long> delays;
        for (double v : d.real_f64()) {
            if (v < 0 || v != static_cast<double>(static_cast<long long>(v)))
                throw std::invalid_argument(label + ": delays must be integers >= 0");
            delays.push_back(static_cast<long long>(v));
        }
        depth_ = delays.empty() ? 0 : *std::max_element(delays.begin(), delays.end());
        esz_ = dtype_size(a.in.dtype);
        split_ = dsp::split_units(a.in.channels, a.in.items + depth_);
        if (depth_ == 0) return;
        hist_bytes_ = static_cast<size_t>(a.in.channels) * static_cast<size_t>(depth_) * esz_;
        hist_ = std::make_unique<DeviceBuffer>(device_, hist_bytes_);
        hist_next_ = std::make_unique<DeviceBuffer>(device_, hist_bytes_);
        delays_ = std::make_unique<DeviceBuffer>(device_, delays.size() * sizeof(long long));
        delays_->copy_from_host(delays.data(), delays.size() * sizeof(long long), 0, nullptr);
        hist_->memset(0, hist_bytes_, 0, nullptr);
        hist_next_->memset(0, hist_bytes_, 0, nullptr);
        module_ = load_embedded_module(device_, "delay", CompileOptions{});
        kernel_ = module_->function(a.in.dtype == DType::C64 ? "gk_delay_c64" : "gk_delay_f32");
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range("delay", begin, end, split_.units);
        const int64_t c0 = split_.begin(begin), count = split_.end_item(end) - c0;
        run(stream, in, out, desc_.items, c0, count);
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool) override {
        run(stream, in, out, n_in, 0, desc_.channels);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }

    void reset(CUstream stream) override {
        if (!hist_) return;
        cu_check(driver().cuMemsetD8Async(hist_->ptr(), 0, hist_bytes_, stream), "cuMemsetD8Async",
                 "resetting the delay history");
    }

    const char* kind() const override { return "delay"; }

private:
    // Channels [c0, c0 + count) of a block with n_in valid samples: the kernel on those rows,
    // then those rows of the next history over the current one.
    void run(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t n_in, int64_t c0, int64_t count) {
        if (n_in <= 0 || count <= 0) return;
        const DriverApi& api = driver();
        const size_t row_bytes = static_cast<size_t>(desc_.row()) * esz_;
        const CUdeviceptr x = in + static_cast<CUdeviceptr>(c0) * row_bytes;
        CUdeviceptr y = out + static_cast<CUdeviceptr>(c0) * row_bytes;
        if (depth_ == 0) {
            cu_check(api.cuMemcpyDtoDAsync(y, x, static_cast<size_t>(count) * row_bytes, stream),
                     "cuMemcpyDtoDAsync_v2", "copying a block through a zero delay");
            return;
        }
        const size_t hist_row = static_cast<size_t>(depth_) * esz_;
        CUdeviceptr hist_next = hist_next_->ptr() + static_cast<CUdeviceptr>(c0) * hist_row;
        CUdeviceptr xx = x;
        CUdeviceptr hist = hist_->ptr() + static_cast<CUdeviceptr>(c0) * hist_row;
        CUdeviceptr delays = delays_->ptr() + static_cast<CUdeviceptr>(c0) * sizeof(long long);
        unsigned long long channels = static_cast<unsigned long long>(count);
        unsigned long long n = static_cast<unsigned long long>(n_in);
        unsigned long long depth = static_cast<unsigned long long>(depth_);
        unsigned long long row = static_cast<unsigned long long>(desc_.row());
        void* params[] = {&y, &hist_next, &xx, &hist, &delays, &channels, &n, &depth, &row};
        const unsigned long long span = n + depth;
        const unsigned long long cap = static_cast<unsigned long long>(device_->properties().multiprocessors) * 8;
        unsigned long long gx = (span + kThreads - 1) / kThreads;
        Dim3 grid, block;
        grid.x = static_cast<unsigned>(gx < cap ? gx : cap);
        grid.y = static_cast<unsigned>(channels < 65535 ? channels : 65535);
        block.x = kThreads;
        kernel_->launch(grid, block, params, 0, stream);
        cu_check(api.cuMemcpyDtoDAsync(hist, hist_next, static_cast<size_t>(count) * hist_row, stream),
                 "cuMemcpyDtoDAsync_v2", "updating the delay history");
    }

    static constexpr unsigned kThreads = 256;
    std::shared_ptr<Device> device_;
    TensorDesc desc_;
    long long depth_ = 0;
    size_t esz_ = 4;
    size_t hist_bytes_ = 0;
    std::unique_ptr<DeviceBuffer> hist_, hist_next_, delays_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    dsp::UnitSplit split_;
};

}  // namespace

GK_REGISTER_OP("delay", [](const OpArgs& a) { return std::make_unique<DelayOp>(a); });

}  // namespace gk
