// sos: streaming IIR filter in second-order sections (kernels/sos.cu), float64 state on the device.
//
// Parameters from pygpukit_dsp/backends/cuda_ops/sos.py:
//   sos   (n_sections, 6) rows [b0, b1, b2, 1, a1, a2]
//
// Two forms: one thread per lane (channel, or re/im part) walking the block (gk_sos_f32/c64), and
// for few lanes and long blocks the chunked form (gk_sos_chunks/carry/fix: chunks filtered in
// parallel from a zero state, then the true chunk start states carried through the precomputed
// state transition, then the zero-input responses added). Chunked when: at most 8 sections,
// block >= 4096 samples, at most 1024 lanes and lanes * block <= 2^27 (the float64 scratch).
//
// Units (the scheduler's pacing, Op::units), bit-identical to the whole block in any split:
// * one thread per lane: ranges of samples of every lane (multiples of the kernel's 32-sample
//   tile), grouped by dsp::split_units (<= 1024 units, >= 4096 samples over the lanes each). The
//   recursion runs along time, so a range of channels would take as long as the whole block
//   (its lanes run in parallel); a range of samples takes its share of it. Each launch reads the
//   state at its start and writes it back at its end, so the ranges in stream order do what one
//   launch over the block does.
// * chunked: the block's chunks in G groups (<= 32, >= 4096 samples each); units 0..G-1 run
//   step A (the zero-state filtering) of one group each, units G..2G-1 step C (the zero-input
//   fix) of one group each, and unit G first runs step B (the carry through every chunk, which
//   needs all of A's results): the three steps of enqueue() in the same order.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

constexpr int kMaxSections = 1024;  // the coefficients sit in shared memory (40 KiB)
constexpr int64_t kChunkedMinBlock = 4096;
constexpr int64_t kMaxTimeUnits = 1024;  // sample ranges of the one-thread-per-lane form
constexpr int64_t kChunkedMaxLanes = 1024;
constexpr int64_t kChunkedMaxScratch = int64_t(1) << 27;  // lanes * block doubles

// Zero-input response of the cascade (coef rows b0 b1 b2 a1 a2) from state `state` (D = 2 S
// values, section s at 2s, 2s+1) over `length` samples: the outputs, and the state left in `state`.
std::vector<double> zero_input_response(const std::vector<double>& coef, int64_t sections,
                                        std::vector<double>& state, int64_t length) {
    std::vector<double> y(static_cast<size_t>(length));
    for (int64_t t = 0; t < length; ++t) {
        double x = 0.0;
        for (int64_t s = 0; s < sections; ++s) {
            const double* c = &coef[static_cast<size_t>(5 * s)];
            double& z0 = state[static_cast<size_t>(2 * s)];
            double& z1 = state[static_cast<size_t>(2 * s + 1)];
            const double out = c[0] * x + z0;
            z0 = c[1] * x - c[3] * out + z1;
            z1 = c[2] * x - c[4] * out;
            x = out;
        }
        y[static_cast<size_t>(t)] = x;
    }
    return y;
}

class SosOp : public Op {
public:
    explicit SosOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "sos")), in_(a.in), out_(a.out),
          util_(a.device) {
        if (in_.frames()) throw UnsupportedError(a.name, "cuda", "sos needs time-domain input");
        const ParamArray& sos = a.params.get_array("sos");
        if (sos.shape.size() != 2 || sos.shape[1] != 6 || sos.shape[0] < 1)
            throw std::invalid_argument(label_ + ": sos must have shape (n_sections, 6)");
        sections_ = sos.shape[0];
        if (sections_ > kMaxSections)
            throw UnsupportedError(a.name, "cuda", std::to_string(sections_) +
                                                       " sections; the CUDA sos op takes at most " +
                                                       std::to_string(kMaxSections));
        const std::vector<double> rows = sos.real_f64();
        std::vector<double> coef(static_cast<size_t>(sections_ * 5));
        for (int64_t s = 0; s < sections_; ++s) {
            const double* r = &rows[static_cast<size_t>(s * 6)];
            if (r[3] != 1.0)
                throw std::invalid_argument(label_ + ": each section's a0 (column 3) must be 1");
            double* c = &coef[static_cast<size_t>(s * 5)];
            c[0] = r[0];
            c[1] = r[1];
            c[2] = r[2];
            c[3] = r[4];
            c[4] = r[5];
        }
        complex_ = in_.dtype == DType::C64;
        lanes_ = in_.channels * (complex_ ? 2 : 1);
        n_ = in_.items;
        coef_ = std::make_unique<DeviceBuffer>(device_, coef.size() * sizeof(double));
        coef_->copy_from_host(coef.data(), coef.size() * sizeof(double), 0, nullptr);
        const size_t state_bytes = static_cast<size_t>(sections_ * 2 * lanes_) * sizeof(double);
        state_ = std::make_unique<DeviceBuffer>(device_, state_bytes);
        state_->memset(0, state_bytes, 0, nullptr);
        module_ = load_embedded_module(device_, "sos", CompileOptions{});
        chunked_ = sections_ <= 8 && n_ >= kChunkedMinBlock && lanes_ <= kChunkedMaxLanes &&
                   lanes_ * n_ <= kChunkedMaxScratch;
        if (chunked_) {
            make_chunked(coef);
            groups_ = dsp::split_units(chunks_, lanes_ * chunk_, 1, dsp::kMinUnitElements, dsp::kMaxUnits / 2);
            return;
        }
        kernel_ = module_->function(complex_ ? "gk_sos_c64" : "gk_sos_f32");
        shared_ = static_cast<unsigned>((5 * sections_ + 32 * 33) * sizeof(double));
        if (shared_ > 48 * 1024) kernel_->set_max_dynamic_shared_memory(static_cast<int>(shared_));
        // up to kMaxTimeUnits: a unit's time is its share of the block's serial walk whatever the
        // lanes, and the scheduler can only pace units that fit between realtime blocks (64 units
        // of a 2^18-sample block, 12 sections, took ~3 ms each on an H200: more than a 2 ms deadline)
        split_ = dsp::split_units(n_, lanes_, 32, dsp::kMinUnitElements, kMaxTimeUnits);
    }

    int64_t units() const override { return chunked_ ? 2 * groups_.units : split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("sos", begin, end, units());
        if (!chunked_) {
            run_samples(s, in, out, split_.begin(begin), split_.end_item(end));
            return;
        }
        const int64_t G = groups_.units;
        for (int64_t u = begin; u < end; ++u) {
            const int64_t g = u < G ? u : u - G;
            const int64_t c0 = groups_.begin(g), c1 = groups_.end_item(g + 1);
            if (u < G) {
                run_chunks(s, in, c0, c1);
            } else {
                if (u == G) run_carry(s);
                run_fix(s, out, c0 * chunk_, std::min(c1 * chunk_, n_));
            }
        }
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        if (chunked_) {
            run_chunks(s, in, 0, chunks_);
            run_carry(s);
            run_fix(s, out, 0, n_);
        } else {
            run_samples(s, in, out, 0, n_);
        }
        if (final)
            dsp::zero_after(s, util_, out, in_.channels, n_, dsp::item_bytes(out_),
                            output_items(n_in));
    }

    int64_t output_items(int64_t n_in) const override { return n_in < n_ ? n_in : n_; }

    void reset(CUstream s) override {
        cu_check(driver().cuMemsetD8Async(state_->ptr(), 0, state_->nbytes(), s), "cuMemsetD8Async",
                 "resetting " + label_);
    }

    const char* kind() const override { return "sos"; }

private:
    static unsigned long long u64(int64_t v) { return static_cast<unsigned long long>(v); }

    // One thread per lane: samples [t0, t1) of every lane.
    void run_samples(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t t0, int64_t t1) const {
        launch(*kernel_, dim(static_cast<unsigned>(ceil_div(lanes_, 32))), dim(32), shared_, s, out, in,
               state_->ptr(), coef_->ptr(), static_cast<int>(sections_), u64(n_), u64(lanes_), u64(t0), u64(t1));
    }
    // Chunked form, step A over chunks [c0, c1) of every lane.
    void run_chunks(CUstream s, CUdeviceptr in, int64_t c0, int64_t c1) const {
        launch(*chunks_kernel_, dim(dsp::grid_for(*device_, lanes_ * (c1 - c0), 128)), dim(128), 0, s,
               y0_->ptr(), zf_->ptr(), in, coef_->ptr(), static_cast<int>(sections_), u64(n_), u64(lanes_),
               u64(chunk_), u64(chunks_), complex_ ? 1 : 0, u64(c0), u64(c1));
    }
    // Step B: the carry through every chunk of every lane.
    void run_carry(CUstream s) const {
        launch(*carry_kernel_, dim(static_cast<unsigned>(ceil_div(lanes_, 64))), dim(64), 0, s,
               starts_->ptr(), state_->ptr(), zf_->ptr(), phi_->ptr(), phi_last_->ptr(),
               static_cast<int>(sections_), u64(lanes_), u64(chunks_));
    }
    // Step C over samples [t0, t1) of every lane.
    void run_fix(CUstream s, CUdeviceptr out, int64_t t0, int64_t t1) const {
        launch(*fix_kernel_, dim(dsp::grid_for(*device_, lanes_ * (t1 - t0))), dim(256), 0, s, out,
               y0_->ptr(), starts_->ptr(), G_->ptr(), static_cast<int>(sections_), u64(n_), u64(lanes_),
               u64(chunk_), u64(chunks_), complex_ ? 1 : 0, u64(t0), u64(t1));
    }

    std::unique_ptr<DeviceBuffer> upload(const std::vector<double>& v) const {
        auto buf = std::make_unique<DeviceBuffer>(device_, v.size() * sizeof(double));
        buf->copy_from_host(v.data(), v.size() * sizeof(double), 0, nullptr);
        return buf;
    }

    // G (chunk x D): output at t from unit state d; Phi (D x D, row i = new state i): the state
    // after a chunk from unit state d (column d), and the same over the shorter last chunk.
    void make_chunked(const std::vector<double>& coef) {
        const int64_t D = 2 * sections_;
        chunk_ = 256;
        while (chunk_ * chunk_ < n_ && chunk_ < 8192) chunk_ *= 2;
        chunks_ = ceil_div(n_, chunk_);
        const int64_t last = n_ - (chunks_ - 1) * chunk_;
        std::vector<double> G(static_cast<size_t>(chunk_ * D)), phi(static_cast<size_t>(D * D)),
            phi_last(static_cast<size_t>(D * D));
        for (int64_t d = 0; d < D; ++d) {
            std::vector<double> state(static_cast<size_t>(D), 0.0);
            state[static_cast<size_t>(d)] = 1.0;
            std::vector<double> y = zero_input_response(coef, sections_, state, last);
            for (int64_t i = 0; i < D; ++i) phi_last[static_cast<size_t>(i * D + d)] = state[static_cast<size_t>(i)];
            std::vector<double> rest = zero_input_response(coef, sections_, state, chunk_ - last);
            for (int64_t i = 0; i < D; ++i) phi[static_cast<size_t>(i * D + d)] = state[static_cast<size_t>(i)];
            y.insert(y.end(), rest.begin(), rest.end());
            for (int64_t t = 0; t < chunk_; ++t) G[static_cast<size_t>(t * D + d)] = y[static_cast<size_t>(t)];
        }
        G_ = upload(G);
        phi_ = upload(phi);
        phi_last_ = upload(phi_last);
        y0_ = std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(lanes_ * n_) * sizeof(double));
        const size_t per_chunk = static_cast<size_t>(lanes_ * chunks_ * D) * sizeof(double);
        zf_ = std::make_unique<DeviceBuffer>(device_, per_chunk);
        starts_ = std::make_unique<DeviceBuffer>(device_, per_chunk);
        chunks_kernel_ = module_->function("gk_sos_chunks");
        carry_kernel_ = module_->function("gk_sos_carry");
        fix_kernel_ = module_->function("gk_sos_fix");
    }

    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    dsp::UtilKernels util_;
    int64_t sections_ = 1, lanes_ = 1, n_ = 0;
    bool complex_ = false;
    unsigned shared_ = 0;
    std::unique_ptr<DeviceBuffer> coef_, state_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    // chunked form
    bool chunked_ = false;
    int64_t chunk_ = 0, chunks_ = 0;
    std::unique_ptr<DeviceBuffer> G_, phi_, phi_last_, y0_, zf_, starts_;
    std::shared_ptr<Kernel> chunks_kernel_, carry_kernel_, fix_kernel_;
    // units
    dsp::UnitSplit split_;   // one thread per lane: ranges of samples
    dsp::UnitSplit groups_;  // chunked: groups of chunks
};

GK_REGISTER_OP("sos", [](const OpArgs& a) { return std::make_unique<SosOp>(a); });

}  // namespace
}  // namespace gk
