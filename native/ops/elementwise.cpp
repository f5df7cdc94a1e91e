// power, magnitude, db and the fused power -> db / magnitude -> db
// (pygpukit_dsp/stages/elementwise.py; kernels in kernels/elementwise.cu).
//
// Kinds and kernels:
//   power         x^2 (f32), |x|^2 (c64)                         gk_power_{f32,c64}
//   magnitude     |x|                                             gk_magnitude_{f32,c64}
//   db            max(scale*log10(max(x*inv_ref, floor)), floor_db), real input: gk_todb_f32
//   power_db      the same of x^2 / |x|^2, one pass               gk_power_todb_{f32,c64}
//   magnitude_db  the same of |x|, one pass                       gk_magnitude_todb_{f32,c64}
// db of complex input (a spectrum as an amplitude) is lowered to power_db (kind power) or
// magnitude_db (kind amplitude), which is what the CPU stage computes.
#include <stdexcept>
#include <string>

#include "dsp_util.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/op.h"

namespace gk {
namespace {

class ElementwiseOp final : public Op {
public:
    ElementwiseOp(const OpArgs& a, const char* kind) : device_(a.device), kind_(kind) {
        const std::string k = kind;
        const bool cplx = a.in.dtype == DType::C64;
        if (a.out.dtype != DType::F32 || a.in.elements() != a.out.elements())
            throw std::invalid_argument("stage '" + a.name + "' (" + k +
                                        "): the output must be float32 with the input's shape");
        std::string entry;
        if (k == "power") {
            entry = cplx ? "gk_power_c64" : "gk_power_f32";
        } else if (k == "magnitude") {
            entry = cplx ? "gk_magnitude_c64" : "gk_magnitude_f32";
        } else {
            if (k == "db") {
                if (cplx)
                    throw UnsupportedError(a.name, "cuda",
                                           "the 'db' op takes real input; complex input is lowered "
                                           "to 'power_db' or 'magnitude_db'");
                entry = "gk_todb_f32";
            } else if (k == "power_db") {
                entry = cplx ? "gk_power_todb_c64" : "gk_power_todb_f32";
            } else {
                entry = cplx ? "gk_magnitude_todb_c64" : "gk_magnitude_todb_f32";
            }
            db_ = true;
            scale_ = static_cast<float>(a.params.get_float("scale"));
            inv_ref_ = static_cast<float>(a.params.get_float("inv_ref"));
            floor_ = static_cast<float>(a.params.get_float("floor"));
            floor_db_ = static_cast<float>(a.params.get_float("floor_db"));
            if (!(floor_ > 0.0f))
                throw std::invalid_argument("stage '" + a.name + "' (" + k +
                                            "): floor must be > 0 (it is 10^(floor_db/scale))");
        }
        module_ = load_embedded_module(a.device, "elementwise", CompileOptions{});
        kernel_ = module_->function(entry);
        n_ = static_cast<unsigned long long>(a.in.elements());
        // Vector steps: four floats or two complex values per load.
        const unsigned long long per_thread = cplx ? 2 : 4;
        const unsigned long long blocks = ((n_ + per_thread - 1) / per_thread + kThreads - 1) / kThreads;
        const unsigned long long cap = static_cast<unsigned long long>(device_->properties().multiprocessors) * 8;
        grid_ = static_cast<unsigned>(blocks < 1 ? 1 : (blocks < cap ? blocks : cap));
        in_bytes_ = static_cast<int64_t>(dtype_size(a.in.dtype));
        // Units: element ranges of the whole block (frames, channels and bins flattened), split
        // by dsp::split_units (<= 64 units, >= 4096 elements each), a multiple of 64 elements
        // per unit so that every unit starts 16-byte aligned (vector loads). Element-wise: any
        // split gives bit-identical results.
        split_ = dsp::split_units(static_cast<int64_t>(n_), 1, 64);
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range(kind_, begin, end, split_.units);
        const int64_t first = split_.begin(begin), stop = split_.end_item(end);
        const unsigned long long n = static_cast<unsigned long long>(stop - first);
        const unsigned long long per_thread = in_bytes_ == 8 ? 2 : 4;
        const unsigned long long blocks = ((n + per_thread - 1) / per_thread + kThreads - 1) / kThreads;
        run(stream, in + static_cast<CUdeviceptr>(first * in_bytes_),
            out + static_cast<CUdeviceptr>(first * 4), n,
            static_cast<unsigned>(blocks < 1 ? 1 : (blocks < grid_ ? blocks : grid_)));
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t, bool) override {
        run(stream, in, out, n_, grid_);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }
    void reset(CUstream) override {}
    const char* kind() const override { return kind_; }

private:
    // The kernel over n elements from in/out (the whole block, or one chunk's element range).
    void run(CUstream stream, CUdeviceptr in, CUdeviceptr out, unsigned long long count,
             unsigned grid_x) {
        CUdeviceptr y = out, x = in;
        unsigned long long n = count;
        float scale = scale_, inv_ref = inv_ref_, floor = floor_, floor_db = floor_db_;
        Dim3 grid, block;
        grid.x = grid_x;
        block.x = kThreads;
        if (db_) {
            void* params[] = {&y, &x, &scale, &inv_ref, &floor, &floor_db, &n};
            kernel_->launch(grid, block, params, 0, stream);
        } else {
            void* params[] = {&y, &x, &n};
            kernel_->launch(grid, block, params, 0, stream);
        }
    }

    static constexpr unsigned kThreads = 256;
    std::shared_ptr<Device> device_;
    const char* kind_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    bool db_ = false;
    float scale_ = 10.0f, inv_ref_ = 1.0f, floor_ = 1e-20f, floor_db_ = -200.0f;
    unsigned long long n_ = 0;
    unsigned grid_ = 1;
    int64_t in_bytes_ = 4;
    dsp::UnitSplit split_;
};

}  // namespace

GK_REGISTER_OP("power", [](const OpArgs& a) { return std::make_unique<ElementwiseOp>(a, "power"); });
GK_REGISTER_OP("magnitude", [](const OpArgs& a) { return std::make_unique<ElementwiseOp>(a, "magnitude"); });
GK_REGISTER_OP("db", [](const OpArgs& a) { return std::make_unique<ElementwiseOp>(a, "db"); });
GK_REGISTER_OP("power_db", [](const OpArgs& a) { return std::make_unique<ElementwiseOp>(a, "power_db"); });
GK_REGISTER_OP("magnitude_db",
               [](const OpArgs& a) { return std::make_unique<ElementwiseOp>(a, "magnitude_db"); });

}  // namespace gk
