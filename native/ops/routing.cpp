// select, combine, add, multiply: the flowgraph stages (pygpukit_dsp/stages/routing.py, arith.py;
// kernels in kernels/routing.cu). A stage that reads several inputs gets them stacked in one
// buffer by the engine's plan: input k at byte offset offsets[k] from `in` (params "offsets"),
// complex64 where complex[k] is 1, channels[k] channels of the first input's row.
//   select    out[c] = in[channels[c]]                                 gk_select
//   combine   the inputs' channels one after the other (real -> (x, 0))  gk_combine
//   add       in_0 + in_1 + ... element by element, in order             gk_reduce_inputs (op 0)
//   multiply  in_0 * in_1 * ... (complex64: a mixer)                     gk_reduce_inputs (op 1)
// No streaming state; one unit per block; a final block's valid items are its input's.
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "gk/device.h"
#include "gk/jit.h"
#include "gk/memory.h"
#include "gk/op.h"

namespace gk {
namespace {

constexpr unsigned kThreads = 256;
constexpr int kMaxInputs = 16;

// As GkInputs in kernels/routing.cu (passed by value).
struct GkInputs {
    unsigned long long offset[kMaxInputs];
    unsigned long long begin[kMaxInputs];
    unsigned complex_mask;
    unsigned count;
};

unsigned grid_for(const std::shared_ptr<Device>& device, unsigned long long n) {
    const unsigned long long cap = static_cast<unsigned long long>(device->properties().multiprocessors) * 8;
    const unsigned long long blocks = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
}

std::vector<long long> int_list(const OpArgs& a, const char* key) {
    std::vector<long long> out;
    for (double v : a.params.get_array(key).real_f64()) out.push_back(static_cast<long long>(v));
    return out;
}

class SelectOp final : public Op {
public:
    explicit SelectOp(const OpArgs& a) : device_(a.device) {
        if (a.in.dtype != a.out.dtype || a.in.items != a.out.items || a.in.bins != a.out.bins)
            throw std::invalid_argument("stage '" + a.name + "' (select): the output must be the input's channels");
        const std::vector<long long> ch = int_list(a, "channels");
        if (static_cast<int64_t>(ch.size()) != a.out.channels)
            throw std::invalid_argument("stage '" + a.name + "' (select): " + std::to_string(ch.size()) +
                                        " channels for an output of " + std::to_string(a.out.channels));
        std::vector<int> index;
        for (long long c : ch) {
            if (c < 0 || c >= a.in.channels)
                throw std::invalid_argument("stage '" + a.name + "' (select): channel " + std::to_string(c) +
                                            " is not in the input (" + std::to_string(a.in.channels) + " channels)");
            index.push_back(static_cast<int>(c));
        }
        channels_ = std::make_unique<DeviceBuffer>(device_, index.size() * sizeof(int));
        channels_->copy_from_host(index.data(), index.size() * sizeof(int), 0, nullptr);
        words_ = static_cast<unsigned long long>(a.in.row()) * (a.in.dtype == DType::C64 ? 2u : 1u);
        n_ = words_ * static_cast<unsigned long long>(a.out.channels);
        module_ = load_embedded_module(a.device, "routing", CompileOptions{});
        kernel_ = module_->function("gk_select");
        grid_ = grid_for(device_, n_);
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t, bool) override {
        CUdeviceptr y = out, x = in, ch = channels_->ptr();
        unsigned long long words = words_, n = n_;
        void* params[] = {&y, &x, &ch, &words, &n};
        Dim3 grid, block;
        grid.x = grid_;
        block.x = kThreads;
        kernel_->launch(grid, block, params, 0, stream);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }
    void reset(CUstream) override {}
    const char* kind() const override { return "select"; }

private:
    std::shared_ptr<Device> device_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    std::unique_ptr<DeviceBuffer> channels_;
    unsigned long long words_ = 0, n_ = 0;
    unsigned grid_ = 1;
};

// combine, add, multiply: several inputs stacked in `in`.
class InputsOp final : public Op {
public:
    InputsOp(const OpArgs& a, const char* kind) : device_(a.device), kind_(kind) {
        const std::string k = kind;
        const std::vector<long long> offsets = int_list(a, "offsets"), cplx = int_list(a, "complex"),
                                     channels = int_list(a, "channels");
        const size_t K = offsets.size();
        if (K < 2 || K > static_cast<size_t>(kMaxInputs) || cplx.size() != K || channels.size() != K)
            throw std::invalid_argument("stage '" + a.name + "' (" + k + "): 2.." + std::to_string(kMaxInputs) +
                                        " inputs, each with an offset, a dtype and a channel count");
        std::memset(&inputs_, 0, sizeof(inputs_));
        inputs_.count = static_cast<unsigned>(K);
        const int64_t row = a.in.row();  // every input's row: the first input's layout
        unsigned long long begin = 0;
        for (size_t i = 0; i < K; ++i) {
            if (offsets[i] < 0 || offsets[i] % 4)
                throw std::invalid_argument("stage '" + a.name + "' (" + k + "): input offsets are whole words");
            inputs_.offset[i] = static_cast<unsigned long long>(offsets[i]);
            inputs_.begin[i] = begin;
            if (cplx[i]) inputs_.complex_mask |= 1u << i;
            begin += static_cast<unsigned long long>(channels[i] * row);
        }
        out_complex_ = a.out.dtype == DType::C64 ? 1u : 0u;
        if (!out_complex_ && inputs_.complex_mask)
            throw std::invalid_argument("stage '" + a.name + "' (" + k + "): complex inputs give a complex64 output");
        if (k == "combine") {
            n_ = begin;
            if (static_cast<int64_t>(n_) != a.out.elements())
                throw std::invalid_argument("stage '" + a.name + "' (combine): the output holds every input's channels");
        } else {
            n_ = static_cast<unsigned long long>(a.out.elements());
            for (size_t i = 0; i < K; ++i)
                if (channels[i] * row != a.out.elements())
                    throw std::invalid_argument("stage '" + a.name + "' (" + k + "): every input has the output's shape");
            op_ = k == "multiply" ? 1u : 0u;
        }
        module_ = load_embedded_module(a.device, "routing", CompileOptions{});
        kernel_ = module_->function(k == "combine" ? "gk_combine" : "gk_reduce_inputs");
        grid_ = grid_for(device_, n_);
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t, bool) override {
        CUdeviceptr y = out, x = in;
        GkInputs ins = inputs_;
        unsigned out_complex = out_complex_, op = op_;
        unsigned long long n = n_;
        Dim3 grid, block;
        grid.x = grid_;
        block.x = kThreads;
        if (std::string(kind_) == "combine") {
            void* params[] = {&y, &x, &ins, &out_complex, &n};
            kernel_->launch(grid, block, params, 0, stream);
        } else {
            void* params[] = {&y, &x, &ins, &out_complex, &op, &n};
            kernel_->launch(grid, block, params, 0, stream);
        }
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }
    void reset(CUstream) override {}
    const char* kind() const override { return kind_; }

private:
    std::shared_ptr<Device> device_;
    const char* kind_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    GkInputs inputs_{};
    unsigned out_complex_ = 0, op_ = 0;
    unsigned long long n_ = 0;
    unsigned grid_ = 1;
};

}  // namespace

GK_REGISTER_OP("select", [](const OpArgs& a) { return std::make_unique<SelectOp>(a); });
GK_REGISTER_OP("combine", [](const OpArgs& a) { return std::make_unique<InputsOp>(a, "combine"); });
GK_REGISTER_OP("add", [](const OpArgs& a) { return std::make_unique<InputsOp>(a, "add"); });
GK_REGISTER_OP("multiply", [](const OpArgs& a) { return std::make_unique<InputsOp>(a, "multiply"); });

}  // namespace gk
