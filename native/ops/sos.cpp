// sos: streaming IIR filter in second-order sections (kernels/sos.cu), float64 state on the device.
//
// Parameters from pygpukit_dsp/backends/cuda_ops/sos.py:
//   sos   (n_sections, 6) rows [b0, b1, b2, 1, a1, a2]
//
// Two forms: one thread per lane (channel, or re/im part) walking the block (gk_sos_f32/c64), and
// for few lanes and long blocks the parallel scan along time (gk_sos_scan_*: chunks filtered in
// parallel from a zero state, their final states combined through the cascade's float64 state
// transition over a chunk and over a group of chunks into every chunk's true start state, then
// every chunk filtered again from it). The lowering chooses: it passes the scan's chunking and
// transition matrices (scan_chunk, scan_group, scan_phi, scan_phi_group; computed by
// pygpukit_dsp/backends/cuda_ops/sos_scan.py) when at most 8 sections, block >= 4096 samples and at
// most 1024 lanes; without them the op runs one thread per lane.
//
// Units (the scheduler's pacing, Op::units), bit-identical to the whole block in any split:
// * one thread per lane: ranges of samples of every lane (multiples of the kernel's 32-sample
//   tile), grouped by dsp::split_units (<= 1024 units, >= 4096 samples over the lanes each). The
//   recursion runs along time, so a range of channels would take as long as the whole block
//   (its lanes run in parallel); a range of samples takes its share of it. Each launch reads the
//   state at its start and writes it back at its end, so the ranges in stream order do what one
//   launch over the block does.
// * scan: the block's chunks in G unit groups (<= 32, >= 4096 samples each); units 0..G-1 run
//   step 1 (the zero-state filtering) of one unit group each, units G..2G-1 step 5 (the
//   filtering from the true start states) of one unit group each, and unit G first runs steps
//   2-4 (the carry through every chunk, which needs all of step 1's results): the steps of
//   enqueue() in the same order.
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
constexpr int64_t kMaxTimeUnits = 1024;  // sample ranges of the one-thread-per-lane form
constexpr int64_t kScanMaxSections = 8;  // the scan's state: 16 values (kernels/sos.cu)
constexpr int64_t kScanState = 16;
constexpr int64_t kScanTile = 32;        // the scan kernels stage 32 samples at a time
constexpr int64_t kScanRows = 32;        // chunks per CTA of steps 1 and 5
constexpr int64_t kScanWalkers = 8;      // half-warps per CTA of steps 2-4

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
        scan_ = a.params.has("scan_chunk");
        if (scan_) {
            make_scan(a.params);
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

    int64_t units() const override { return scan_ ? 2 * groups_.units : split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("sos", begin, end, units());
        if (!scan_) {
            run_samples(s, in, out, split_.begin(begin), split_.end_item(end));
            return;
        }
        const int64_t G = groups_.units;
        for (int64_t u = begin; u < end; ++u) {
            const int64_t g = u < G ? u : u - G;
            const int64_t c0 = groups_.begin(g), c1 = groups_.end_item(g + 1);
            if (u < G) {
                run_local(s, in, c0, c1);
            } else {
                if (u == G) run_carry(s);
                run_apply(s, in, out, c0, c1);
            }
        }
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        if (scan_) {
            run_local(s, in, 0, chunks_);
            run_carry(s);
            run_apply(s, in, out, 0, chunks_);
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
    // Scan step 1 over chunks [c0, c1) of every lane.
    void run_local(CUstream s, CUdeviceptr in, int64_t c0, int64_t c1) const {
        launch(*local_kernel_, dim(static_cast<unsigned>(ceil_div(lanes_ * (c1 - c0), kScanRows))),
               dim(static_cast<unsigned>(kScanRows)), 0, s, zf_->ptr(), in, coef_->ptr(),
               static_cast<int>(sections_), u64(n_), u64(lanes_), u64(chunk_), u64(chunks_), complex_ ? 1 : 0,
               u64(c0), u64(c1));
    }
    // Scan steps 2-4: every chunk's true start state, from the stream's state.
    void run_carry(CUstream s) const {
        const unsigned walkers = static_cast<unsigned>(ceil_div(lanes_ * cgroups_, kScanWalkers));
        const unsigned threads = static_cast<unsigned>(16 * kScanWalkers);  // a half-warp per walker
        launch(*groups_kernel_, dim(walkers), dim(threads), 0, s, agg_->ptr(), zf_->ptr(), phi_->ptr(),
               u64(lanes_), u64(chunks_), u64(per_group_), u64(cgroups_));
        launch(*top_kernel_, dim(static_cast<unsigned>(ceil_div(lanes_, kScanWalkers))), dim(threads), 0, s,
               gstart_->ptr(), state_->ptr(), agg_->ptr(), phi_group_->ptr(), static_cast<int>(sections_),
               u64(lanes_), u64(cgroups_));
        launch(*starts_kernel_, dim(walkers), dim(threads), 0, s, starts_->ptr(), gstart_->ptr(), zf_->ptr(),
               phi_->ptr(), u64(lanes_), u64(chunks_), u64(per_group_), u64(cgroups_));
    }
    // Scan step 5 over chunks [c0, c1) of every lane (the last chunk writes the stream's state).
    void run_apply(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t c0, int64_t c1) const {
        launch(*apply_kernel_, dim(static_cast<unsigned>(ceil_div(lanes_ * (c1 - c0), kScanRows))),
               dim(static_cast<unsigned>(kScanRows)), 0, s, out, state_->ptr(), starts_->ptr(), in,
               coef_->ptr(), static_cast<int>(sections_), u64(n_), u64(lanes_), u64(chunk_), u64(chunks_),
               complex_ ? 1 : 0, u64(c0), u64(c1));
    }

    std::unique_ptr<DeviceBuffer> upload_matrix(const OpParams& p, const char* key) const {
        const ParamArray& m = p.get_array(key);
        if (m.shape.size() != 2 || m.shape[0] != kScanState || m.shape[1] != kScanState)
            throw std::invalid_argument(label_ + ": " + key + " must have shape (16, 16)");
        const std::vector<double> v = m.real_f64();
        auto buf = std::make_unique<DeviceBuffer>(device_, v.size() * sizeof(double));
        buf->copy_from_host(v.data(), v.size() * sizeof(double), 0, nullptr);
        return buf;
    }

    // The scan's chunking and transition matrices from the lowering (sos_scan.py), its scratch.
    void make_scan(const OpParams& p) {
        if (sections_ > kScanMaxSections)
            throw std::invalid_argument(label_ + ": the scan form takes at most 8 sections");
        chunk_ = p.get_int("scan_chunk");
        per_group_ = p.get_int("scan_group");
        if (chunk_ < kScanTile || chunk_ % kScanTile != 0 || per_group_ < 1)
            throw std::invalid_argument(label_ + ": scan_chunk must be a positive multiple of 32 and "
                                                 "scan_group positive");
        chunks_ = ceil_div(n_, chunk_);
        cgroups_ = ceil_div(chunks_, per_group_);
        phi_ = upload_matrix(p, "scan_phi");
        phi_group_ = upload_matrix(p, "scan_phi_group");
        const size_t per_chunk = static_cast<size_t>(lanes_ * chunks_ * kScanState) * sizeof(double);
        const size_t per_cgroup = static_cast<size_t>(lanes_ * cgroups_ * kScanState) * sizeof(double);
        zf_ = std::make_unique<DeviceBuffer>(device_, per_chunk);
        starts_ = std::make_unique<DeviceBuffer>(device_, per_chunk);
        agg_ = std::make_unique<DeviceBuffer>(device_, per_cgroup);
        gstart_ = std::make_unique<DeviceBuffer>(device_, per_cgroup);
        local_kernel_ = module_->function("gk_sos_scan_local");
        groups_kernel_ = module_->function("gk_sos_scan_groups");
        top_kernel_ = module_->function("gk_sos_scan_top");
        starts_kernel_ = module_->function("gk_sos_scan_starts");
        apply_kernel_ = module_->function("gk_sos_scan_apply");
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
    // scan form
    bool scan_ = false;
    int64_t chunk_ = 0, chunks_ = 0, per_group_ = 1, cgroups_ = 1;
    std::unique_ptr<DeviceBuffer> phi_, phi_group_, zf_, starts_, agg_, gstart_;
    std::shared_ptr<Kernel> local_kernel_, groups_kernel_, top_kernel_, starts_kernel_, apply_kernel_;
    // units
    dsp::UnitSplit split_;   // one thread per lane: ranges of samples
    dsp::UnitSplit groups_;  // scan: unit groups of chunks
};

GK_REGISTER_OP("sos", [](const OpArgs& a) { return std::make_unique<SosOp>(a); });

}  // namespace
}  // namespace gk
