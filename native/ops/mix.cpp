// mix: y[o] = sum_i M[o, i] x[i] over the channel axis (pygpukit_dsp/stages/mix.py), in the time
// or frames domain; with a (bins, C_out, C_in) stack, one matrix per bin (frames domain).
//
// Two implementations, chosen by a cost rule (param "method": auto | kernel | cublas):
//   kernel  small matrices, C_out * C_in <= 4096 (e.g. the W1 mix 16 x 64): one launch of
//           kernels/mix.cu (gk_mix_* / gk_mixbin_*), latency-bound sizes where a library call
//           costs more than the arithmetic;
//   cublas  larger matrices: cublasSgemm / cublasCgemm on the row-major block (computed as
//           Y^T = X^T M^T in cuBLAS's column-major terms); per-bin stacks through
//           cublas{S,C}gemmStridedBatched between two tiled transposes (C, F, bins) <-> (bins, C, F).
//           A real matrix on complex input uses Sgemm over the interleaved floats (2 columns per
//           complex value); a complex matrix on real input promotes the input first.
// auto picks cublas above the threshold when cuBLAS can be loaded, else the kernel (still on
// the GPU; "cublas" insists and raises DeviceError when cuBLAS is missing).
// The op owns its cuBLAS handle and workspace (set before any capture) and its scratch buffers.
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "dsp_util.h"
#include "gk/cublas_handle.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/memory.h"
#include "gk/op.h"

namespace gk {
namespace {

constexpr int64_t kKernelMaxEntries = 4096;  // C_out * C_in up to 64 x 64 runs the kernel
constexpr int64_t kIntMax = 2147483647;

class MixOp final : public Op {
public:
    explicit MixOp(const OpArgs& a) : device_(a.device), name_(a.name), in_(a.in), out_(a.out) {
        const std::string label = "stage '" + a.name + "' (mix)";
        const ParamArray& m = a.params.get_array("matrix");
        const size_t nd = m.shape.size();
        if (nd != 2 && nd != 3)
            throw std::invalid_argument(label + ": matrix must be (C_out, C_in) or (bins, C_out, C_in)");
        per_bin_ = nd == 3;
        c_out_ = m.shape[nd - 2];
        c_in_ = m.shape[nd - 1];
        if (c_in_ != a.in.channels || c_out_ != a.out.channels || a.out.items != a.in.items ||
            a.out.bins != a.in.bins)
            throw std::invalid_argument(label + ": a (" + std::to_string(c_out_) + ", " +
                                        std::to_string(c_in_) + ") matrix does not map the input's " +
                                        std::to_string(a.in.channels) + " channels to the output's " +
                                        std::to_string(a.out.channels));
        if (per_bin_ && (!a.in.frames() || m.shape[0] != a.in.bins))
            throw std::invalid_argument(label + ": a per-bin matrix needs frames-domain input with " +
                                        std::to_string(m.shape[0]) + " bins");
        m_complex_ = m.is_complex;
        x_complex_ = a.in.dtype == DType::C64;
        if ((a.out.dtype == DType::C64) != (m_complex_ || x_complex_))
            throw std::invalid_argument(label + ": the output must be complex64 exactly when the matrix "
                                        "or the input is complex");
        if (c_out_ > kIntMax || c_in_ > kIntMax)
            throw UnsupportedError(a.name, "cuda", "channel counts above 2^31 - 1");

        const std::string method = a.params.get_str("method", "auto");
        if (method != "auto" && method != "kernel" && method != "cublas")
            throw std::invalid_argument(label + ": method must be 'auto', 'kernel' or 'cublas', got '" +
                                        method + "'");
        if (method == "cublas") {
            use_cublas_ = true;
        } else if (method == "auto") {
            use_cublas_ = c_out_ * c_in_ > kKernelMaxEntries && cublas_status().found;
        }
        module_ = load_embedded_module(device_, "mix", CompileOptions{});
        if (use_cublas_)
            build_cublas(a, m);
        else
            build_kernel(m);
        make_units();
    }

    void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t n_in, bool) override {
        if (n_in <= 0) return;
        if (use_cublas_)
            enqueue_cublas(stream, in, out);
        else
            enqueue_kernel(stream, in, out, 0, n_in);
    }

    // Units: columns (the streaming axis: samples, or whole frames of bins), grouped by
    // dsp::split_units (<= 64 units, >= 4096 input + output elements each), unit offsets on
    // 16-byte boundaries (and whole 32-column tiles in the time domain). Every column is mixed
    // on its own, so consecutive units run as one column range: the kernel on offset pointers,
    // cuBLAS gemms on the range's columns (leading dimensions of the whole block); the per-bin
    // cuBLAS path transposes just the range's frames (strided batched transposes). A complex
    // matrix on real input promotes the whole block in the chunk holding unit 0.
    int64_t units() const override { return split_.units; }

    void enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                       int64_t end) override {
        dsp::check_unit_range("mix", begin, end, split_.units);
        if (begin == 0 && end == split_.units) {
            enqueue(stream, in, out, in_.items, false);
            return;
        }
        const int64_t col0 = split_.begin(begin), count = split_.end_item(end) - col0;
        if (!use_cublas_)
            enqueue_kernel(stream, in, out, col0, count);
        else if (per_bin_)
            cublas_per_bin_columns(stream, in, out, col0, count);
        else
            cublas_columns(stream, in, out, col0, count, begin == 0);
    }

    int64_t output_items(int64_t n_in) const override { return n_in; }
    void reset(CUstream) override {}
    const char* kind() const override { return "mix"; }

private:
    int64_t per_item() const { return in_.frames() ? in_.bins : 1; }

    // Matrix to the device as float32 or interleaved complex64.
    void upload_matrix(const std::vector<std::complex<double>>& values, bool as_complex) {
        const size_t n = values.size();
        if (as_complex) {
            std::vector<float> host(2 * n);
            for (size_t i = 0; i < n; ++i) {
                host[2 * i] = static_cast<float>(values[i].real());
                host[2 * i + 1] = static_cast<float>(values[i].imag());
            }
            matrix_ = std::make_unique<DeviceBuffer>(device_, host.size() * sizeof(float));
            matrix_->copy_from_host(host.data(), host.size() * sizeof(float), 0, nullptr);
        } else {
            std::vector<float> host(n);
            for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(values[i].real());
            matrix_ = std::make_unique<DeviceBuffer>(device_, host.size() * sizeof(float));
            matrix_->copy_from_host(host.data(), host.size() * sizeof(float), 0, nullptr);
        }
    }

    void build_kernel(const ParamArray& m) {
        if (!per_bin_ && (c_out_ + 7) / 8 > 65535)
            throw UnsupportedError(name_, "cuda", "more than 524280 output channels for the mix kernel "
                                                  "(cuBLAS is not available)");
        const std::string letters = std::string(m_complex_ ? "c" : "r") + (x_complex_ ? "c" : "r");
        if (per_bin_) {
            // (bins, C_out, C_in) -> (C_out, C_in, bins): consecutive bins adjacent for the kernel.
            const int64_t bins = in_.bins;
            std::vector<std::complex<double>> t(m.values.size());
            for (int64_t b = 0; b < bins; ++b)
                for (int64_t o = 0; o < c_out_; ++o)
                    for (int64_t i = 0; i < c_in_; ++i)
                        t[static_cast<size_t>((o * c_in_ + i) * bins + b)] =
                            m.values[static_cast<size_t>((b * c_out_ + o) * c_in_ + i)];
            upload_matrix(t, m_complex_);
            kernel_ = module_->function("gk_mixbin_" + letters);
        } else {
            upload_matrix(m.values, m_complex_);
            kernel_ = module_->function("gk_mix_" + letters);
        }
    }

    // Items [col0, col0 + n) of every row (the whole block: col0 = 0, n = valid items): the
    // kernels see rows starting at the range (offset pointers) with the block's row stride.
    void enqueue_kernel(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t col0, int64_t n) {
        const int64_t first = col0 * per_item();
        CUdeviceptr y = out + static_cast<CUdeviceptr>(first * static_cast<int64_t>(dtype_size(out_.dtype)));
        CUdeviceptr mat = matrix_->ptr();
        CUdeviceptr x = in + static_cast<CUdeviceptr>(first * static_cast<int64_t>(dtype_size(in_.dtype)));
        int c_out = static_cast<int>(c_out_), c_in = static_cast<int>(c_in_);
        unsigned long long row = static_cast<unsigned long long>(in_.row());
        unsigned long long len = static_cast<unsigned long long>(n * per_item());
        const unsigned long long cap = static_cast<unsigned long long>(device_->properties().multiprocessors) * 16;
        Dim3 grid, block;
        if (per_bin_) {
            unsigned long long bins = static_cast<unsigned long long>(in_.bins);
            void* params[] = {&y, &mat, &x, &c_out, &c_in, &len, &bins, &row};
            unsigned long long gx = (len + 255) / 256;
            grid.x = static_cast<unsigned>(gx < cap ? gx : cap);
            block.x = 256;
            kernel_->launch(grid, block, params, 0, stream);
        } else {
            void* params[] = {&y, &mat, &x, &c_out, &c_in, &len, &row};
            unsigned long long gx = (len + 31) / 32;
            grid.x = static_cast<unsigned>(gx < cap ? gx : cap);
            grid.y = static_cast<unsigned>((c_out_ + 7) / 8);
            block.x = 32;
            block.y = 8;
            kernel_->launch(grid, block, params, 0, stream);
        }
    }

    void build_cublas(const OpArgs& a, const ParamArray& m) {
        handle_ = std::make_unique<CublasHandle>(device_);
        upload_matrix(m.values, m_complex_);  // (C_out, C_in) or (bins, C_out, C_in): as gemm wants
        const int64_t row = in_.row();
        const bool real_gemm = !m_complex_;  // real matrix: Sgemm (complex input as 2 floats)
        const int64_t float_cols = x_complex_ && real_gemm ? 2 : 1;
        auto fits = [&](int64_t v) { return v <= kIntMax; };
        if (!per_bin_) {
            if (!fits(row * float_cols))
                throw UnsupportedError(a.name, "cuda", "blocks longer than 2^31 - 1 columns for cuBLAS");
            if (m_complex_ && !x_complex_) {
                scratch_x_ = std::make_unique<DeviceBuffer>(device_, static_cast<size_t>(c_in_ * row) * 8);
                promote_ = module_->function("gk_promote_f32_c64");
            }
            return;
        }
        const int64_t frames = in_.items, bins = in_.bins;
        if (!fits(frames * float_cols) || !fits(bins))
            throw UnsupportedError(a.name, "cuda", "per-bin blocks too large for cuBLAS's int sizes");
        const bool xt_complex = x_complex_ || m_complex_;
        scratch_x_ = std::make_unique<DeviceBuffer>(
            device_, static_cast<size_t>(bins * c_in_ * frames) * (xt_complex ? 8 : 4));
        scratch_y_ = std::make_unique<DeviceBuffer>(
            device_, static_cast<size_t>(bins * c_out_ * frames) * (out_.dtype == DType::C64 ? 8 : 4));
        transpose_in_ = module_->function(!xt_complex ? "gk_transpose_f32"
                                          : x_complex_ ? "gk_transpose_c64"
                                                       : "gk_transpose_f32_c64");
        transpose_out_ = module_->function(out_.dtype == DType::C64 ? "gk_transpose_c64" : "gk_transpose_f32");
        transpose_in_strided_ = module_->function(!xt_complex ? "gk_transpose_strided_f32"
                                                  : x_complex_ ? "gk_transpose_strided_c64"
                                                               : "gk_transpose_strided_f32_c64");
        transpose_out_strided_ = module_->function(
            out_.dtype == DType::C64 ? "gk_transpose_strided_c64" : "gk_transpose_strided_f32");
    }

    void make_units() {
        const int64_t x_item = per_item() * static_cast<int64_t>(dtype_size(in_.dtype));
        const int64_t y_item = per_item() * static_cast<int64_t>(dtype_size(out_.dtype));
        int64_t align = dsp::lcm64(dsp::align_items(x_item), dsp::align_items(y_item));
        if (!in_.frames()) align = dsp::lcm64(align, 32);  // whole 32-column tiles of gk_mix_*
        split_ = dsp::split_units(in_.items, (c_in_ + c_out_) * per_item(), align);
    }

    // out[z * out_batch + c * ldo + r] = in[z * in_batch + r * ldi + c]: r < rows, c < cols.
    void transpose_strided(const Kernel& k, CUstream stream, CUdeviceptr out, CUdeviceptr in,
                           unsigned long long rows, unsigned long long cols, unsigned long long ldi,
                           unsigned long long ldo, unsigned long long batches,
                           unsigned long long in_batch, unsigned long long out_batch) {
        void* params[] = {&out, &in, &rows, &cols, &ldi, &ldo, &batches, &in_batch, &out_batch};
        Dim3 grid, block;
        const unsigned long long gx = (cols + 31) / 32, gy = (rows + 31) / 32;
        grid.x = static_cast<unsigned>(gx < 65535 ? gx : 65535);
        grid.y = static_cast<unsigned>(gy < 65535 ? gy : 65535);
        grid.z = static_cast<unsigned>(batches < 65535 ? batches : 65535);
        block.x = 32;
        block.y = 8;
        k.launch(grid, block, params, 0, stream);
    }

    // One matrix, cuBLAS: the gemm of enqueue_cublas() on columns [col0, col0 + n) of every row.
    void cublas_columns(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t col0, int64_t n,
                        bool first_chunk) {
        const CublasApi& api = cublas();
        cublasHandle_t h = handle_->on(stream);
        const int c_out = static_cast<int>(c_out_), c_in = static_cast<int>(c_in_);
        const int64_t row = in_.row(), first = col0 * per_item(), len = n * per_item();
        if (!m_complex_) {
            const int64_t w = x_complex_ ? 2 : 1;  // floats per element (complex x as 2 floats)
            const float one = 1.0f, zero = 0.0f;
            cublas_check(api.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(len * w),
                                         c_out, c_in, &one,
                                         reinterpret_cast<const float*>(in) + first * w,
                                         static_cast<int>(row * w),
                                         reinterpret_cast<const float*>(matrix_->ptr()), c_in, &zero,
                                         reinterpret_cast<float*>(out) + first * w,
                                         static_cast<int>(row * w)),
                         "cublasSgemm_v2", "mixing channels (a unit's columns)");
            return;
        }
        CUdeviceptr x = in;
        if (!x_complex_) {
            if (first_chunk) promote_all(stream, in);
            x = scratch_x_->ptr();
        }
        const gkComplex cone{1.0f, 0.0f}, czero{0.0f, 0.0f};
        cublas_check(api.cublasCgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(len), c_out,
                                     c_in, &cone, reinterpret_cast<const gkComplex*>(x) + first,
                                     static_cast<int>(row),
                                     reinterpret_cast<const gkComplex*>(matrix_->ptr()), c_in,
                                     &czero, reinterpret_cast<gkComplex*>(out) + first,
                                     static_cast<int>(row)),
                     "cublasCgemm_v2", "mixing channels (a unit's columns)");
    }

    // Per-bin stack, cuBLAS: frames [f0, f0 + n) through the (bins, C, F) scratch layout.
    void cublas_per_bin_columns(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t f0,
                                int64_t n) {
        const CublasApi& api = cublas();
        cublasHandle_t h = handle_->on(stream);
        const int64_t F = in_.items, bins = in_.bins;
        const bool xt_complex = x_complex_ || m_complex_;
        const int64_t xt_bytes = xt_complex ? 8 : 4, x_bytes = x_complex_ ? 8 : 4;
        const int64_t y_bytes = out_.dtype == DType::C64 ? 8 : 4;
        using ull = unsigned long long;
        // in (C_in, F, bins) frames [f0, f0+n) -> scratch_x (bins, C_in, F) columns [f0, f0+n)
        transpose_strided(*transpose_in_strided_, stream,
                          scratch_x_->ptr() + static_cast<CUdeviceptr>(f0 * xt_bytes),
                          in + static_cast<CUdeviceptr>(f0 * bins * x_bytes), ull(n), ull(bins),
                          ull(bins), ull(c_in_ * F), ull(c_in_), ull(F * bins), ull(F));
        const int c_out = static_cast<int>(c_out_), c_in = static_cast<int>(c_in_);
        const int B = static_cast<int>(bins);
        if (!m_complex_) {
            const int64_t w = x_complex_ ? 2 : 1;  // floats per element
            const float one = 1.0f, zero = 0.0f;
            cublas_check(api.cublasSgemmStridedBatched(
                             h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n * w), c_out, c_in, &one,
                             reinterpret_cast<const float*>(scratch_x_->ptr()) + f0 * w,
                             static_cast<int>(F * w), static_cast<long long>(c_in) * F * w,
                             reinterpret_cast<const float*>(matrix_->ptr()), c_in,
                             static_cast<long long>(c_out) * c_in, &zero,
                             reinterpret_cast<float*>(scratch_y_->ptr()) + f0 * w,
                             static_cast<int>(F * w), static_cast<long long>(c_out) * F * w, B),
                         "cublasSgemmStridedBatched", "mixing channels per bin (a unit's frames)");
        } else {
            const gkComplex cone{1.0f, 0.0f}, czero{0.0f, 0.0f};
            cublas_check(api.cublasCgemmStridedBatched(
                             h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), c_out, c_in, &cone,
                             reinterpret_cast<const gkComplex*>(scratch_x_->ptr()) + f0,
                             static_cast<int>(F), static_cast<long long>(c_in) * F,
                             reinterpret_cast<const gkComplex*>(matrix_->ptr()), c_in,
                             static_cast<long long>(c_out) * c_in, &czero,
                             reinterpret_cast<gkComplex*>(scratch_y_->ptr()) + f0,
                             static_cast<int>(F), static_cast<long long>(c_out) * F, B),
                         "cublasCgemmStridedBatched", "mixing channels per bin (a unit's frames)");
        }
        // scratch_y (bins, C_out, F) columns [f0, f0+n) -> out (C_out, F, bins) frames [f0, f0+n)
        transpose_strided(*transpose_out_strided_, stream,
                          out + static_cast<CUdeviceptr>(f0 * bins * y_bytes),
                          scratch_y_->ptr() + static_cast<CUdeviceptr>(f0 * y_bytes), ull(bins),
                          ull(n), ull(c_out_ * F), ull(bins), ull(c_out_), ull(F), ull(F * bins));
    }

    // out = complex(in, 0) over the whole block, into scratch_x_ (complex matrix, real input).
    void promote_all(CUstream stream, CUdeviceptr in) {
        CUdeviceptr dst = scratch_x_->ptr(), src = in;
        unsigned long long n = static_cast<unsigned long long>(c_in_ * in_.row());
        void* params[] = {&dst, &src, &n};
        Dim3 grid, block;
        const unsigned long long cap = static_cast<unsigned long long>(device_->properties().multiprocessors) * 8;
        const unsigned long long gx = (n + 255) / 256;
        grid.x = static_cast<unsigned>(gx < cap ? gx : cap);
        block.x = 256;
        promote_->launch(grid, block, params, 0, stream);
    }

    void transpose(const Kernel& k, CUstream stream, CUdeviceptr out, CUdeviceptr in,
                   unsigned long long rows, unsigned long long cols) {
        void* params[] = {&out, &in, &rows, &cols};
        Dim3 grid, block;
        const unsigned long long gx = (cols + 31) / 32, gy = (rows + 31) / 32;
        grid.x = static_cast<unsigned>(gx < 65535 ? gx : 65535);
        grid.y = static_cast<unsigned>(gy < 65535 ? gy : 65535);
        block.x = 32;
        block.y = 8;
        k.launch(grid, block, params, 0, stream);
    }

    void enqueue_cublas(CUstream stream, CUdeviceptr in, CUdeviceptr out) {
        const CublasApi& api = cublas();
        cublasHandle_t h = handle_->on(stream);
        const float one = 1.0f, zero = 0.0f;
        const gkComplex cone{1.0f, 0.0f}, czero{0.0f, 0.0f};
        const int c_out = static_cast<int>(c_out_), c_in = static_cast<int>(c_in_);
        const float* M = reinterpret_cast<const float*>(matrix_->ptr());
        const gkComplex* Mc = reinterpret_cast<const gkComplex*>(matrix_->ptr());
        if (!per_bin_) {
            const int64_t row = in_.row();
            if (!m_complex_) {
                // Y^T (L x C_out) = X^T (L x C_in) * M^T (C_in x C_out), column-major; complex x as 2L floats.
                const int L = static_cast<int>(row * (x_complex_ ? 2 : 1));
                cublas_check(api.cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, L, c_out, c_in, &one,
                                             reinterpret_cast<const float*>(in), L, M, c_in, &zero,
                                             reinterpret_cast<float*>(out), L),
                             "cublasSgemm_v2", "mixing channels");
                return;
            }
            CUdeviceptr x = in;
            if (!x_complex_) {
                CUdeviceptr dst = scratch_x_->ptr(), src = in;
                unsigned long long n = static_cast<unsigned long long>(c_in_ * row);
                void* params[] = {&dst, &src, &n};
                Dim3 grid, block;
                const unsigned long long cap = static_cast<unsigned long long>(device_->properties().multiprocessors) * 8;
                const unsigned long long gx = (n + 255) / 256;
                grid.x = static_cast<unsigned>(gx < cap ? gx : cap);
                block.x = 256;
                promote_->launch(grid, block, params, 0, stream);
                x = dst;
            }
            const int L = static_cast<int>(row);
            cublas_check(api.cublasCgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, L, c_out, c_in, &cone,
                                         reinterpret_cast<const gkComplex*>(x), L, Mc, c_in, &czero,
                                         reinterpret_cast<gkComplex*>(out), L),
                         "cublasCgemm_v2", "mixing channels");
            return;
        }
        // Per bin: (C_in, F, bins) -> (bins, C_in, F); batched gemm; (bins, C_out, F) -> (C_out, F, bins).
        const unsigned long long frames = static_cast<unsigned long long>(in_.items);
        const unsigned long long bins = static_cast<unsigned long long>(in_.bins);
        transpose(*transpose_in_, stream, scratch_x_->ptr(), in, static_cast<unsigned long long>(c_in_) * frames, bins);
        const int F = static_cast<int>(frames), B = static_cast<int>(bins);
        if (!m_complex_) {
            const int cols = F * (x_complex_ ? 2 : 1);  // floats per row of X'_b and Y'_b
            cublas_check(api.cublasSgemmStridedBatched(
                             h, CUBLAS_OP_N, CUBLAS_OP_N, cols, c_out, c_in, &one,
                             reinterpret_cast<const float*>(scratch_x_->ptr()), cols,
                             static_cast<long long>(c_in) * cols, M, c_in,
                             static_cast<long long>(c_out) * c_in, &zero,
                             reinterpret_cast<float*>(scratch_y_->ptr()), cols,
                             static_cast<long long>(c_out) * cols, B),
                         "cublasSgemmStridedBatched", "mixing channels per bin");
        } else {
            cublas_check(api.cublasCgemmStridedBatched(
                             h, CUBLAS_OP_N, CUBLAS_OP_N, F, c_out, c_in, &cone,
                             reinterpret_cast<const gkComplex*>(scratch_x_->ptr()), F,
                             static_cast<long long>(c_in) * F, Mc, c_in,
                             static_cast<long long>(c_out) * c_in, &czero,
                             reinterpret_cast<gkComplex*>(scratch_y_->ptr()), F,
                             static_cast<long long>(c_out) * F, B),
                         "cublasCgemmStridedBatched", "mixing channels per bin");
        }
        transpose(*transpose_out_, stream, out, scratch_y_->ptr(), bins, static_cast<unsigned long long>(c_out_) * frames);
    }

    std::shared_ptr<Device> device_;
    std::string name_;
    TensorDesc in_, out_;
    bool per_bin_ = false, m_complex_ = false, x_complex_ = false, use_cublas_ = false;
    int64_t c_out_ = 0, c_in_ = 0;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> kernel_, promote_, transpose_in_, transpose_out_;
    std::unique_ptr<DeviceBuffer> matrix_, scratch_x_, scratch_y_;
    std::unique_ptr<CublasHandle> handle_;
    // chunking
    dsp::UnitSplit split_;
    std::shared_ptr<Kernel> transpose_in_strided_, transpose_out_strided_;
};

}  // namespace

GK_REGISTER_OP("mix", [](const OpArgs& a) { return std::make_unique<MixOp>(a); });

}  // namespace gk
