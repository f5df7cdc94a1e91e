// fir_mix: a streaming FIR filter followed by a channel mix, fused into one kernel launch per
// block (kernels/fir_mix.cu; the fusion is pygpukit_dsp/backends/cuda_ops/fir_mix.py).
//
// Parameters:
//   taps    (L,) or (C_in, L), real; L <= 4096 (the fir op's direct-form limit)
//   matrix  (C_out, C_in), real; C_out * C_in <= 4096
// Input (C_in, n) float32, output (C_out, n) float32, time domain.
//
//   kernel  "auto" (default), "split" or "cluster": which kernel (kernels/fir_mix.cu,
//           kernels/fir_mix_cluster.cu; each its own module, compiled when used). auto takes
//           the cluster kernel on SM 9.0+ when C_in <= 64 and its shared memory fits, else the
//           split kernel (any C_in, SM 8.0+); "cluster" where it cannot run is an error.
//   pdl     true (default): on SM 9.0+ a programmatic dependent launch, so the kernel's work
//           that does not need the block (history windows, taps, M) overlaps the kernel before
//           it (the engine's pull); false: a plain launch (for comparisons).
//
// State: the input history (the last taps-padded samples of every channel) in two device copies
// with a phase flag, as the fir op's direct kernel keeps it (read one, write the other, the
// launch's last CTA to count flips the phase), plus, for the split kernel, one arrival counter
// per time tile for the hand-over of the FIR output to the CTA that mixes the tile. Everything
// is allocated here, so enqueue() is one capturable launch.
//
// Units (the scheduler's pacing, Op::units): time tiles (16 output samples of every output
// channel), grouped by dsp::split_units (<= 64 units, >= 4096 input samples each). The mix needs
// every input channel of a sample, so a unit is a range of tiles over all channels, not a range of
// channels: one launch of the same kernel over the tiles [tile0, tile0 + count) of the block's
// `tiles`; the kernels count CTAs against the whole block's, so the history phase flips once,
// after the last unit. Each output element is computed by the same CTA code as in one launch:
// bit-identical in any split. Units are plain launches (no programmatic dependent launch).
#include <vector>

#include "dsp_util.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

constexpr int64_t kTile = 16;            // output samples per CTA (TILE in fir_mix.cu)
constexpr int64_t kGroup = 4;            // input channels per CTA (CG in fir_mix.cu)
constexpr int64_t kMaxTaps = 4096;       // the fir op's direct-form limit
constexpr int64_t kMaxEntries = 4096;    // C_out * C_in: the matrix lives in shared memory
constexpr int64_t kClusterGroup = 8;     // input channels per CTA of the cluster kernel (CG)
constexpr int64_t kMaxCluster = 8;       // CTAs per cluster (the portable maximum)

class FirMixOp : public Op {
public:
    explicit FirMixOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "fir_mix")), in_(a.in), out_(a.out) {
        if (in_.frames() || out_.frames())
            throw UnsupportedError(a.name, "cuda", "fir_mix needs time-domain input");
        if (in_.dtype != DType::F32 || out_.dtype != DType::F32)
            throw UnsupportedError(a.name, "cuda", "fir_mix takes float32 input and output only");
        const ParamArray& taps = a.params.get_array("taps");
        const ParamArray& m = a.params.get_array("matrix");
        if (taps.shape.empty() || taps.shape.size() > 2 || taps.size() == 0)
            throw std::invalid_argument(label_ + ": taps must have shape (L,) or (channels, L)");
        if (taps.is_complex || m.is_complex)
            throw UnsupportedError(a.name, "cuda", "fir_mix takes real taps and a real matrix only");
        c_in_ = in_.channels;
        n_ = in_.items;
        L_ = taps.shape.back();
        tap_rows_ = taps.shape.size() == 2 ? taps.shape[0] : 1;
        if (tap_rows_ != 1 && tap_rows_ != c_in_)
            throw std::invalid_argument(label_ + ": per-channel taps need one row per channel");
        if (L_ > kMaxTaps)
            throw UnsupportedError(a.name, "cuda", "fir_mix runs at most " + std::to_string(kMaxTaps) +
                                                       " taps, got " + std::to_string(L_));
        if (m.shape.size() != 2 || m.shape[1] != c_in_ || m.shape[0] != out_.channels ||
            out_.items != n_)
            throw std::invalid_argument(label_ + ": the matrix must be (" +
                                        std::to_string(out_.channels) + ", " +
                                        std::to_string(c_in_) + ") and keep the block length");
        c_out_ = m.shape[0];
        if (c_out_ * c_in_ > kMaxEntries)
            throw UnsupportedError(a.name, "cuda", "fir_mix takes matrices of at most " +
                                                       std::to_string(kMaxEntries) + " entries");
        tiles_ = ceil_div(n_, kTile);
        groups_ = ceil_div(c_in_, kGroup);
        split_ = dsp::split_units(tiles_, c_in_ * kTile);
        if (tiles_ > 2147483647LL)
            throw UnsupportedError(a.name, "cuda", "blocks longer than 2^31 - 1 tiles for fir_mix");

        kt_ = L_ <= 32 ? 32 : 128;  // the fir op's stage sizes: same padding, same sums
        padded_ = ceil_div(L_, kt_) * kt_;
        std::vector<float> host(static_cast<size_t>(tap_rows_ * padded_), 0.0f);
        for (int64_t r = 0; r < tap_rows_; ++r)
            for (int64_t k = 0; k < L_; ++k)
                host[static_cast<size_t>(r * padded_ + k)] =
                    static_cast<float>(taps.values[static_cast<size_t>(r * L_ + k)].real());
        taps_ = upload(host);
        matrix_ = upload(m.real_f32());

        const size_t hist_bytes = 2 * static_cast<size_t>(c_in_ * padded_) * sizeof(float);
        hist2_ = std::make_unique<DeviceBuffer>(device_, hist_bytes);
        hist2_->memset(0, hist_bytes, 0, nullptr);
        const size_t sync_bytes = static_cast<size_t>(2 + tiles_) * sizeof(unsigned);
        sync_ = std::make_unique<DeviceBuffer>(device_, sync_bytes);
        sync_->memset(0, sync_bytes, 0, nullptr);

        pdl_ = a.params.get_bool("pdl", true);
        const std::string which = a.params.get_str("kernel", "auto");
        if (which != "auto" && which != "split" && which != "cluster")
            throw std::invalid_argument(label_ + ": kernel must be auto, split or cluster, got '" + which + "'");
        std::string why_not;
        if (which != "split" && use_cluster_kernel(&why_not)) return;
        if (which == "cluster")
            throw UnsupportedError(a.name, "cuda", "fir_mix's cluster kernel " + why_not);
        y_ = std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(c_in_ * n_) * sizeof(float));
        module_ = load_embedded_module(device_, "fir_mix", CompileOptions{});
        kernel_ = module_->function(kt_ == 32 ? "gk_fir_mix_k32" : "gk_fir_mix_k128");
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("fir_mix", begin, end, split_.units);
        const int64_t t0 = split_.begin(begin), count = split_.end_item(end) - t0;
        launch_tiles(s, in, out, n_, t0, count, false);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool final) override {
        // A final block mixes only its n_in valid columns; the kernel writes zeros after them.
        const int64_t valid = final ? output_items(n_in < 0 ? 0 : n_in) : n_;
        launch_tiles(s, in, out, valid, 0, tiles_, pdl_);
    }

    int64_t output_items(int64_t n_in) const override { return n_in < n_ ? n_in : n_; }

    void reset(CUstream s) override {
        cu_check(driver().cuMemsetD8Async(hist2_->ptr(), 0, hist2_->nbytes(), s), "cuMemsetD8Async",
                 "resetting " + label_);
        cu_check(driver().cuMemsetD8Async(sync_->ptr(), 0, sync_->nbytes(), s), "cuMemsetD8Async",
                 "resetting " + label_);
    }

    const char* kind() const override { return "fir_mix"; }

    // One CTA writes each output element once (the tile's last, or the cluster's CTA 0).
    bool writes_output_once() const override { return true; }

private:
    static unsigned long long u64(int64_t v) { return static_cast<unsigned long long>(v); }

    // Time tiles [t0, t0 + count) of the block (valid: its valid columns); pdl: a programmatic
    // dependent launch (the whole block only).
    void launch_tiles(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t valid, int64_t t0, int64_t count,
                      bool pdl) const {
        const unsigned tile0 = static_cast<unsigned>(t0), total = static_cast<unsigned>(tiles_);
        if (cluster_ > 0) {
            run(dim(static_cast<unsigned>(count), static_cast<unsigned>(cluster_)), dim(256),
                static_cast<unsigned>(shares_bytes_), s, pdl, out, in, hist2_->ptr(), sync_->ptr(), taps_->ptr(),
                matrix_->ptr(), u64(n_), u64(valid), u64(padded_), u64(tap_rows_ == 1 ? 0 : padded_),
                static_cast<int>(padded_ / kt_), static_cast<int>(c_in_), static_cast<int>(c_out_), tile0, total);
            return;
        }
        run(dim(static_cast<unsigned>(count), static_cast<unsigned>(groups_)), dim(128), 0, s, pdl, out, in,
            y_->ptr(), hist2_->ptr(), sync_->ptr(), taps_->ptr(), matrix_->ptr(), u64(n_), u64(valid),
            u64(padded_), u64(tap_rows_ == 1 ? 0 : padded_), static_cast<int>(padded_ / kt_),
            static_cast<int>(c_in_), static_cast<int>(c_out_), tile0, total);
    }

    template <class... Args>
    void run(Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream s, bool pdl, Args... args) const {
        const Dim3 cluster = dim(1, static_cast<unsigned>(cluster_), 1);
        dsp::launch_ex(*kernel_, grid, block, shared_bytes, s, pdl, cluster_ > 0 ? &cluster : nullptr, args...);
    }

    // The cluster kernel (kernels/fir_mix_cluster.cu): SM 9.0+, C_in <= 64 (at most 8 groups of 8
    // channels, one cluster per time tile), the tile's shares of the mix in CTA 0's shared memory.
    bool use_cluster_kernel(std::string* why_not) {
        const DeviceProperties& p = device_->properties();
        if (p.sm_major < 9) {
            *why_not = "needs SM 9.0 or newer (thread-block clusters), this GPU is " + p.arch();
            return false;
        }
        if (!Kernel::launch_ex_available()) {
            *why_not = "needs cuLaunchKernelEx (CUDA driver 12.0 or newer)";
            return false;
        }
        if (c_in_ > kClusterGroup * kMaxCluster) {
            *why_not = "takes at most " + std::to_string(kClusterGroup * kMaxCluster) + " input channels";
            return false;
        }
        int64_t cl = 1;
        while (cl < ceil_div(c_in_, kClusterGroup)) cl *= 2;
        std::shared_ptr<Module> module = load_embedded_module(device_, "fir_mix_cluster", CompileOptions{});
        std::shared_ptr<Kernel> k = module->function("gk_fir_mix_cluster_k" + std::to_string(kt_));
        const int64_t shares = cl * c_out_ * kTile * static_cast<int64_t>(sizeof(float));
        const int64_t fixed = k->attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
        if (fixed + shares > p.max_shared_per_block_optin) {
            *why_not = "needs " + std::to_string(fixed + shares) + " bytes of shared memory, more than the " +
                       std::to_string(p.max_shared_per_block_optin) + " a block may have";
            return false;
        }
        // The kernel is shared by every op of its module: raise its limit, never lower it.
        if (fixed + shares > 48 * 1024 && k->attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) < shares)
            k->set_max_dynamic_shared_memory(static_cast<int>(shares));
        module_ = std::move(module);
        kernel_ = std::move(k);
        cluster_ = cl;
        shares_bytes_ = shares;
        return true;
    }

    std::unique_ptr<DeviceBuffer> upload(const std::vector<float>& host) const {
        auto buf = std::make_unique<DeviceBuffer>(device_, host.size() * sizeof(float));
        buf->copy_from_host(host.data(), host.size() * sizeof(float), 0, nullptr);
        return buf;
    }

    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    int64_t c_in_ = 1, c_out_ = 1, n_ = 0, L_ = 1, tap_rows_ = 1, tiles_ = 1, groups_ = 1;
    int64_t kt_ = 32, padded_ = 32;
    int64_t cluster_ = 0, shares_bytes_ = 0;
    bool pdl_ = true;
    std::unique_ptr<DeviceBuffer> taps_, matrix_, hist2_, sync_, y_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_;
    dsp::UnitSplit split_;  // time tiles
};

GK_REGISTER_OP("fir_mix", [](const OpArgs& a) { return std::make_unique<FirMixOp>(a); });

}  // namespace
}  // namespace gk
