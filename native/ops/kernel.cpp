// kernel: a user's CUDA C kernel as a stage (pygpukit_dsp/stages/kernel.py).
//
// Compiled by NVRTC for this GPU when the engine is built (a compile failure is a CompileError
// naming the stage and the entry, with NVRTC's log, before the first block). The kernel's
// contract:
//   extern "C" __global__ void entry(const T* in, T_out* out, long long channels,
//                                    long long items_in, long long row_in, long long row_out,
//                                    [float p0, float p1, ...])
//                                    [, S* state])
// in/out: full blocks, C-contiguous (channels, items[, bins]); channels: input channels;
// items_in: valid items (samples or frames) in this block; row_in/row_out: elements per channel
// row of the input/output block; p0...: the stage's `params`. Launched with `threads` threads
// per block and `grid` blocks (0 = one thread per output element).
// state (only when the stage declares `state`: params state_elements > 0 and state_dtype): the
// op's own device buffer of state_elements float32 or complex64 values, kept between blocks,
// zeroed when the op is made and on reset(); the kernel reads and writes it as it likes. A kernel
// without declared state gets exactly the arguments above, as before.
//
// Units (the scheduler's pacing, Op::units): with `split: channels` (the stage's declaration that
// the kernel treats channels independently: output channel c depends on input channel c only,
// and the channel counts are equal), channels grouped by dsp::split_units (<= 64 units, >= 4096
// elements each); a unit is one launch on offset pointers with `channels` = the unit's count
// (grid auto: one thread per output element of the unit). Without it (the default: a kernel may
// mix channels) the block is one unit.
#include <cctype>
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

std::string program_name(const std::string& stage) {
    std::string out;
    for (char c : stage) out += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
    return out.empty() ? std::string("kernel") : out;
}

class CustomKernelOp final : public Op {
public:
    explicit CustomKernelOp(const OpArgs& a) : in_(a.in), out_(a.out) {
        const std::string label = "stage '" + a.name + "' (kernel)";
        const std::string& source = a.params.get_str("source");
        entry_ = a.params.get_str("entry");
        const int64_t threads = a.params.get_int("threads", 256);
        const int64_t grid = a.params.get_int("grid", 0);
        if (threads < 1 || threads > 1024)
            throw std::invalid_argument(label + ": threads must be 1..1024, got " + std::to_string(threads));
        if (grid < 0 || grid > 2147483647)
            throw std::invalid_argument(label + ": grid must be 'auto' (0) or 1..2^31-1 blocks");
        if (a.out.items != a.in.items || a.out.bins != a.in.bins)
            throw std::invalid_argument(label + ": a kernel stage keeps the number of items and bins");
        if (a.params.has("params")) {
            const ParamArray& p = a.params.get_array("params");
            if (p.shape.size() > 1) throw std::invalid_argument(label + ": params must be a flat list of numbers");
            fparams_ = p.real_f32();
        }
        const int64_t state_elements = a.params.get_int("state_elements", 0);
        if (state_elements < 0)
            throw std::invalid_argument(label + ": state_elements must be >= 0, got " +
                                        std::to_string(state_elements));
        if (state_elements > 0) {
            const std::string sd = a.params.get_str("state_dtype", "float32");
            if (sd != "float32" && sd != "complex64")
                throw std::invalid_argument(label + ": state dtype must be float32 or complex64, got '" + sd + "'");
            state_bytes_ = static_cast<size_t>(state_elements) * (sd == "complex64" ? 8u : 4u);
            state_ = std::make_unique<DeviceBuffer>(a.device, state_bytes_);
            state_->memset(0, state_bytes_, 0, nullptr);  // zero at open (completes before returning)
            state_ptr_ = state_->ptr();
        }
        const std::string what = a.name + " (entry '" + entry_ + "')";
        CompileOptions options;
        options.arch = a.device->arch();
        CompiledKernel compiled;
        try {
            compiled = compile(program_name(a.name), source, options);
        } catch (const CompileError& e) {
            throw CompileError(what, e.log());
        }
        module_ = load_cubin_module(a.device, compiled.cubin, program_name(a.name));
        try {
            kernel_ = module_->function(entry_);
        } catch (const DeviceError&) {
            throw CompileError(what, "the source defines no kernel named '" + entry_ +
                                         "'; declare it extern \"C\" __global__ void " + entry_ + "(...)");
        }
        if (threads > kernel_->max_threads_per_block())
            throw UnsupportedError(a.name, "cuda", "threads: " + std::to_string(threads) +
                                                       " per block exceeds what kernel '" + entry_ +
                                                       "' can run with (" +
                                                       std::to_string(kernel_->max_threads_per_block()) +
                                                       ", limited by its registers); lower threads");
        if (kernel_->parameters_known()) {
            std::vector<size_t> expected = {8, 8, 8, 8, 8, 8};
            expected.insert(expected.end(), fparams_.size(), 4);
            if (state_) expected.push_back(8);
            if (kernel_->parameter_sizes() != expected) {
                std::string got;
                for (size_t s : kernel_->parameter_sizes()) got += (got.empty() ? "" : ", ") + std::to_string(s);
                throw CompileError(what, "kernel '" + entry_ + "' takes " +
                                             std::to_string(kernel_->parameter_sizes().size()) +
                                             " parameters of [" + got + "] bytes; the kernel stage passes " +
                                             std::to_string(expected.size()) +
                                             ": (const T* in, T_out* out, long long channels, long long "
                                             "items_in, long long row_in, long long row_out" +
                                             (fparams_.empty() ? std::string()
                                                               : ", " + std::to_string(fparams_.size()) + " float params") +
                                             (state_ ? std::string(", S* state") : std::string()) + ")");
            }
        }
        threads_ = static_cast<unsigned>(threads);
        if (grid > 0) {
            grid_ = static_cast<unsigned>(grid);
        } else {
            const long long total = static_cast<long long>(a.out.elements());
            long long blocks = (total + threads - 1) / threads;
            grid_ = static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 2147483647LL ? 2147483647LL : blocks));
        }
        // Stable storage: a launch reads its arguments through these addresses.
        params_.push_back(&in_ptr_);
        params_.push_back(&out_ptr_);
        params_.push_back(&channels_);
        params_.push_back(&items_);
        params_.push_back(&row_in_);
        params_.push_back(&row_out_);
        for (float& p : fparams_) params_.push_back(&p);
        if (state_) params_.push_back(&state_ptr_);  // the state buffer: the last argument
        channels_ = a.in.channels;
        items_full_ = a.in.items;
        row_in_ = a.in.row();
        row_out_ = a.out.row();
        grid_auto_ = grid == 0;
        in_bytes_ = static_cast<int64_t>(dtype_size(a.in.dtype));
        out_bytes_ = static_cast<int64_t>(dtype_size(a.out.dtype));
        const std::string split = a.params.get_str("split", "none");
        if (split != "none" && split != "channels")
            throw std::invalid_argument(label + ": split must be none or channels, got '" + split + "'");
        if (split == "channels") {
            if (state_)
                throw std::invalid_argument(label + ": split: channels cannot be used with state (a chunk of "
                                                    "channels would see the whole state buffer)");
            if (a.out.channels != a.in.channels)
                throw std::invalid_argument(label + ": split: channels needs as many output channels as input "
                                                    "channels (" + std::to_string(a.out.channels) + " != " +
                                            std::to_string(a.in.channels) + ")");
            split_ = dsp::split_units(a.in.channels, a.out.row());
        }
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range("kernel", begin, end, split_.units);
        const int64_t c0 = split_.begin(begin), count = split_.end_item(end) - c0;
        in_ptr_ = in + static_cast<CUdeviceptr>(c0 * row_in_ * in_bytes_);
        out_ptr_ = out + static_cast<CUdeviceptr>(c0 * row_out_ * out_bytes_);
        const long long all = channels_;
        channels_ = count;
        items_ = items_full_;
        Dim3 grid, block;
        grid.x = grid_;
        if (grid_auto_) {
            const long long blocks = (static_cast<long long>(count) * row_out_ + threads_ - 1) / threads_;
            grid.x = static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 2147483647LL ? 2147483647LL : blocks));
        }
        block.x = threads_;
        try {
            kernel_->launch(grid, block, params_.data(), 0, stream);
        } catch (...) {
            channels_ = all;
            throw;
        }
        channels_ = all;
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool) override {
        channels_ = channels_all();
        in_ptr_ = in;
        out_ptr_ = out;
        items_ = n_in;
        Dim3 grid, block;
        grid.x = grid_;
        block.x = threads_;
        kernel_->launch(grid, block, params_.data(), 0, stream);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }
    void reset(CUstream stream) override {
        if (!state_) return;
        cu_check(driver().cuMemsetD8Async(state_->ptr(), 0, state_bytes_, stream), "cuMemsetD8Async",
                 "resetting the kernel stage's state");
    }
    const char* kind() const override { return "kernel"; }

private:
    TensorDesc in_, out_;
    std::string entry_;
    std::vector<float> fparams_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    unsigned threads_ = 256, grid_ = 1;
    CUdeviceptr in_ptr_ = 0, out_ptr_ = 0;
    long long channels_ = 0, items_ = 0, row_in_ = 0, row_out_ = 0;
    std::vector<void*> params_;
    bool grid_auto_ = true;
    int64_t in_bytes_ = 4, out_bytes_ = 4;
    long long items_full_ = 0;
    dsp::UnitSplit split_;
    std::unique_ptr<DeviceBuffer> state_;  // declared state: kept between blocks, zeroed on reset
    size_t state_bytes_ = 0;
    CUdeviceptr state_ptr_ = 0;            // the launch reads the state argument through this address
    long long channels_all() const { return in_.channels; }
};

}  // namespace

GK_REGISTER_OP("kernel", [](const OpArgs& a) { return std::make_unique<CustomKernelOp>(a); });

}  // namespace gk
