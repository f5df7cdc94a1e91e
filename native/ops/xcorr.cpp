// xcorr: correlator X-engine (pygpukit_dsp/stages/xcorr.py; kernels/xcorr.cu + cuBLAS).
//
// Parameters from pygpukit_dsp/backends/cuda_ops/xcorr.py:
//   inputs      C (the input's channels, or channels / M for a channelizer's time-domain output)
//   bins        bins per frame (the input's bins, or M)
//   integrate   N, frames per output frame; the block's F frames are G = F / N runs
//   method      "tensor" | "kernel" | "cublas" (the lowering picks; "tensor" and "kernel" take at
//               most 64 inputs)
//
// tensor: gk_xcorr_tc_* (kernels/xcorr_tc.cu) on the FP16 tensor cores (every SM 8.0+ GPU, which
// pygpukit-dsp needs) at FP32 accuracy: each value scaled by its row's power of two and split in
// two FP16 parts, three products with FP32 accumulation: 4 bins a CTA, 1 to 3 warps a bin, each
// holding its 16 x 16 tiles of pairs; the frames stream through shared memory by cp.async; reads
// the input once, no scratch.
// kernel: gk_xcorr_tiles_* (8 bins a CTA) or gk_xcorr_tiles7_* (7 bins, above 56 inputs) reads the
// input once, each thread accumulating an 8 x 8 tile of pairs (upper-triangle tiles only) of one
// bin in registers over a run's N frames; no scratch.
// cublas, per block: gather the input into A (bins, F, C); one cublasCgemmStridedBatched over the
// bins * G runs computes R = A A^H (C x C, every entry: cuBLAS has no batched herk; the upper
// triangle costs the same flops as the useful one in a gemm of this shape); pack the pairs
// i <= j of R into the output (P, G, bins), dividing each run by its frame count. FP32
// throughout (no TF32). The op owns its cuBLAS handle (workspace set before any capture) and
// its scratch (A: the block's size; R: bins * G * C * C complex).
//
// Units: bins, grouped by dsp::split_units (<= 64 units, >= 4096 elements of work each): a
// unit gathers, multiplies and packs its bins (the gemm's batches of those bins). No state.
#include <string>

#include "dsp_util.h"
#include "gk/cublas_handle.h"

namespace gk {
namespace {

using dsp::ceil_div;
using dsp::dim;
using dsp::launch;

constexpr int64_t kIntMax = 2147483647;
constexpr int64_t kKernelMaxInputs = 64;
constexpr int64_t kTensorBins = 4;  // GK_XT_BINS of kernels/xcorr_tc.cu
// its dynamic shared memory, GK_XT_SMEM floats: the epilogue's tiles (bins x 10 tiles x 2 parts
// x GK_XT_RLD floats), larger than the two staging buffers (2 x bins x 64 rows x GK_XT_LD float2)
constexpr int64_t kTensorSmemBytes = kTensorBins * 10 * 2 * 264 * 4;

unsigned u32(int64_t v) { return static_cast<unsigned>(v); }
unsigned long long u64(int64_t v) { return static_cast<unsigned long long>(v); }
unsigned grid_z(int64_t n) { return static_cast<unsigned>(n < 65535 ? (n > 0 ? n : 1) : 65535); }

class XcorrOp final : public Op {
public:
    explicit XcorrOp(const OpArgs& a)
        : device_(a.device), label_(dsp::op_label(a, "xcorr")), in_(a.in), out_(a.out) {
        C_ = a.params.get_int("inputs");
        B_ = a.params.get_int("bins");
        N_ = a.params.get_int("integrate");
        F_ = in_.items;
        if (C_ < 1 || B_ < 1 || N_ < 1 || F_ % N_ != 0)
            throw std::invalid_argument(label_ + ": needs inputs, bins, integrate >= 1 and a block of "
                                                 "whole runs of integrate frames");
        G_ = F_ / N_;
        P_ = C_ * (C_ + 1) / 2;
        if (in_.frames()) {
            if (in_.channels != C_ || in_.bins != B_)
                throw std::invalid_argument(label_ + ": inputs and bins must be the input's channels and bins");
            sc_ = F_ * B_;
            sf_ = B_;
            sb_ = 1;
        } else {
            if (in_.channels != C_ * B_)
                throw std::invalid_argument(label_ + ": time-domain input must have inputs * bins channels");
            sc_ = B_ * F_;  // channel c*M + k, sample f: (c*M + k) * n + f
            sf_ = 1;
            sb_ = F_;
        }
        if (out_.channels != P_ || out_.items != G_ || out_.bins != B_ || out_.dtype != DType::C64)
            throw std::invalid_argument(label_ + ": the output layout must be (C(C+1)/2, F/N, bins) complex64");
        if (C_ > 65535 || B_ * G_ > kIntMax || F_ > kIntMax ||
            C_ * G_ > kIntMax)
            throw UnsupportedError(a.name, "cuda", "the CUDA xcorr takes at most 65535 inputs and "
                                                   "blocks within cuBLAS's int sizes");
        const std::string method = a.params.get_str("method", "cublas");
        if (method != "cublas" && method != "kernel" && method != "tensor")
            throw std::invalid_argument(label_ + ": method must be 'tensor', 'kernel' or 'cublas', got '" + method +
                                        "'");
        if (method == "tensor") {
            if (C_ > kKernelMaxInputs || G_ > 65535)
                throw UnsupportedError(a.name, "cuda", "xcorr's method 'tensor' takes at most 64 inputs and "
                                                       "65535 output frames per block; use method: cublas");
            module_ = load_embedded_module(device_, "xcorr_tc", CompileOptions{});
            const int64_t ct = ceil_div(C_, 16);
            const bool wide = ct >= 3, c64 = in_.dtype == DType::C64;
            tiles_ = module_->function(wide ? (c64 ? "gk_xcorr_tc_c64" : "gk_xcorr_tc_f32")
                                            : (c64 ? "gk_xcorr_tc_narrow_c64" : "gk_xcorr_tc_narrow_f32"));
            tile_bins_ = kTensorBins;
            tile_threads_ = 32 * kTensorBins * (ct == 2 ? 3 : wide ? 2 : 1);  // roles_of in kernels/xcorr_tc.cu
            tile_smem_ = kTensorSmemBytes;
            if (tiles_->attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) < tile_smem_)
                tiles_->set_max_dynamic_shared_memory(static_cast<int>(tile_smem_));
            split_ = dsp::split_units(B_, C_ * F_ + P_ * G_, kTensorBins);
            use_kernel_ = true;
            return;
        }
        use_kernel_ = method == "kernel";
        if (use_kernel_) {
            if (C_ > kKernelMaxInputs || G_ > 65535)
                throw UnsupportedError(a.name, "cuda", "xcorr's kernel takes at most 64 inputs and "
                                                       "65535 output frames per block; use method: cublas");
            module_ = load_embedded_module(device_, "xcorr", CompileOptions{});
            const int64_t ct = ceil_div(C_, 8), tiles = ct * (ct + 1) / 2;
            // 8 bins a CTA while that is at most 256 threads (up to 56 inputs), else 7 bins (252
            // threads at 64 inputs): a kernel at the tiles' 224 registers takes at most 256 threads a CTA
            tile_bins_ = 8 * tiles <= 256 ? 8 : 7;
            const bool c64 = in_.dtype == DType::C64;
            tiles_ = module_->function(tile_bins_ == 8 ? (c64 ? "gk_xcorr_tiles_c64" : "gk_xcorr_tiles_f32")
                                                       : (c64 ? "gk_xcorr_tiles7_c64" : "gk_xcorr_tiles7_f32"));
            tile_threads_ = tile_bins_ * tiles > 64 ? tile_bins_ * tiles : 64;
            split_ = dsp::split_units(B_, C_ * F_ + P_ * G_, 8);
            return;
        }
        module_ = load_embedded_module(device_, "xcorr", CompileOptions{});
        gather_ = module_->function(in_.dtype == DType::C64 ? "gk_xcorr_gather_c64" : "gk_xcorr_gather_f32");
        pack_ = module_->function("gk_xcorr_pack");
        handle_ = std::make_unique<CublasHandle>(device_);
        A_ = std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(B_ * F_ * C_) * 8);
        R_ = std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(B_ * G_ * C_ * C_) * 8);
        split_ = dsp::split_units(B_, C_ * F_ + C_ * C_ * G_);
    }

    void enqueue(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool) override {
        run(s, in, out, 0, B_, n_in < F_ ? (n_in > 0 ? n_in : 0) : F_);
    }

    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t begin, int64_t end) override {
        dsp::check_unit_range("xcorr", begin, end, split_.units);
        run(s, in, out, split_.begin(begin), split_.end_item(end), F_);
    }

    int64_t output_items(int64_t n_in) const override {
        return n_in >= F_ ? G_ : ceil_div(n_in > 0 ? n_in : 0, N_);
    }

    void reset(CUstream) override {}
    const char* kind() const override { return "xcorr"; }

private:
    // Bins [b0, b1) of the block; n_valid frames are valid (the rest of the block is zeros).
    void run(CUstream s, CUdeviceptr in, CUdeviceptr out, int64_t b0, int64_t b1, int64_t n_valid) {
        const int64_t nb = b1 - b0;
        if (nb <= 0) return;
        if (use_kernel_) {
            launch(*tiles_, dim(u32(ceil_div(nb, tile_bins_)), u32(G_)), dim(u32(tile_threads_)),
                   static_cast<unsigned>(tile_smem_), s, out, in,
                   u32(C_), u64(sc_), u64(sf_), u64(sb_), u32(B_), u32(N_), u32(G_), u32(n_valid),
                   u32(b0), u32(b1));
            return;
        }
        launch(*gather_, dim(u32(ceil_div(nb, 32)), u32(ceil_div(C_, 32)), grid_z(F_)), dim(32, 8), 0, s,
               A_->ptr(), in, u32(C_), u32(F_), u64(sc_), u64(sf_), u64(sb_), u32(b0), u32(b1));
        const CublasApi& api = cublas();
        cublasHandle_t h = handle_->on(s);
        const gkComplex one{1.0f, 0.0f}, zero{0.0f, 0.0f};
        const int C = static_cast<int>(C_), N = static_cast<int>(N_);
        const gkComplex* A = reinterpret_cast<const gkComplex*>(A_->ptr()) + b0 * F_ * C_;
        gkComplex* R = reinterpret_cast<gkComplex*>(R_->ptr()) + b0 * G_ * C_ * C_;
        // R_z = A_z A_z^H, z = b*G + g: A_z at A + z*N*C (C x N, lda C), R_z at R + z*C*C
        cublas_check(api.cublasCgemmStridedBatched(
                         h, CUBLAS_OP_N, CUBLAS_OP_C, C, C, N, &one, A, C,
                         static_cast<long long>(N_) * C_, A, C, static_cast<long long>(N_) * C_, &zero,
                         R, C, static_cast<long long>(C_) * C_, static_cast<int>(nb * G_)),
                     "cublasCgemmStridedBatched", "correlating inputs (xcorr)");
        launch(*pack_, dim(u32(ceil_div(nb, 32)), u32(ceil_div(C_, 32)), grid_z(C_ * G_)), dim(32, 8), 0,
               s, out, R_->ptr(), u32(C_), u32(G_), u32(B_), u32(N_), u32(n_valid), u32(b0), u32(b1));
    }

    std::shared_ptr<Device> device_;
    std::string label_;
    TensorDesc in_, out_;
    int64_t C_ = 1, B_ = 1, N_ = 1, F_ = 0, G_ = 0, P_ = 1, sc_ = 0, sf_ = 0, sb_ = 0;
    std::unique_ptr<CublasHandle> handle_;
    std::unique_ptr<DeviceBuffer> A_, R_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> gather_, pack_, tiles_;
    bool use_kernel_ = false;
    int64_t tile_threads_ = 64, tile_bins_ = 8, tile_smem_ = 0;
    dsp::UnitSplit split_;
};

GK_REGISTER_OP("xcorr", [](const OpArgs& a) { return std::make_unique<XcorrOp>(a); });

}  // namespace
}  // namespace gk
