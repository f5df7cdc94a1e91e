// Helpers shared by the filtering and spectral ops (fir, sos, fft, stft, resample, channelizer):
// kernel lookup and launch, the streaming history kept on the device, and zeroing the part of a
// final block's output past its valid items (so the next op reads zero padding, as op.h promises).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/memory.h"
#include "gk/op.h"

namespace gk {
namespace dsp {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// "stage 'lp' (fir)": how an op names itself in errors.
inline std::string op_label(const OpArgs& a, const char* kind) {
    return "stage '" + a.name + "' (" + kind + ")";
}

// Blocks for a grid-stride kernel over `n` items: enough to fill the GPU, no more.
inline unsigned grid_for(const Device& device, int64_t n, int threads = 256) {
    const int64_t want = ceil_div(n > 0 ? n : 1, threads);
    const int64_t cap = static_cast<int64_t>(device.properties().multiprocessors > 0
                                                 ? device.properties().multiprocessors
                                                 : 80) * 8;
    return static_cast<unsigned>(want < cap ? want : cap);
}

// Launches `kernel` with the arguments given by value (their C++ types must match the kernel's
// parameters: CUdeviceptr for pointers, unsigned long long for gk_size_t, float, int...).
template <class... Args>
void launch(const Kernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
            Args... args) {
    void* params[] = {static_cast<void*>(&args)..., nullptr};
    kernel.launch(grid, block, params, shared_bytes, stream);
}

// The same with Kernel::launch's options: after_kernel (the kernel waits for the previous
// kernel's output with griddepcontrol.wait: programmatic dependent launch on SM 9.0+) and
// thread-block cluster dimensions (nullptr: none).
template <class... Args>
void launch_ex(const Kernel& kernel, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream,
               bool after_kernel, const Dim3* cluster, Args... args) {
    void* params[] = {static_cast<void*>(&args)..., nullptr};
    kernel.launch(grid, block, params, shared_bytes, stream, after_kernel, cluster);
}

inline Dim3 dim(unsigned x, unsigned y = 1, unsigned z = 1) {
    Dim3 d;
    d.x = x;
    d.y = y;
    d.z = z;
    return d;
}

// The kernels of fft_util.cu.
class UtilKernels {
public:
    explicit UtilKernels(const std::shared_ptr<Device>& device)
        : device_(device),
          module_(load_embedded_module(device, "fft_util", CompileOptions{})),
          history_f32_(module_->function("gk_history_f32")),
          history_c64_(module_->function("gk_history_c64")),
          zero_tail_(module_->function("gk_zero_tail_u32")),
          scale_c64_(module_->function("gk_scale_c64")),
          irfft_prepare_(module_->function("gk_irfft_prepare")),
          hermitian_fill_(module_->function("gk_hermitian_fill")) {}

    const Device& device() const { return *device_; }

    // dst[c][i] = i + n < hist ? old[c][i + n] : in[c][i + n - hist]
    void history(CUstream s, DType t, CUdeviceptr dst, CUdeviceptr old, CUdeviceptr in,
                 int64_t hist, int64_t n, int64_t channels) const {
        const unsigned grid = grid_for(*device_, hist * channels);
        launch(t == DType::F32 ? *history_f32_ : *history_c64_, dim(grid), dim(256), 0, s, dst, old,
               in, u64(hist), u64(n), u64(channels));
    }

    // Zero bytes [from_bytes, row_bytes) of `rows` rows of row_bytes (both multiples of 4).
    void zero_tail(CUstream s, CUdeviceptr base, int64_t rows, int64_t row_bytes,
                   int64_t from_bytes) const {
        if (from_bytes >= row_bytes || rows <= 0) return;
        const unsigned grid = grid_for(*device_, rows * (row_bytes - from_bytes) / 4);
        launch(*zero_tail_, dim(grid), dim(256), 0, s, base, u64(rows), u64(row_bytes / 4),
               u64(from_bytes / 4));
    }

    void scale_c64(CUstream s, CUdeviceptr y, CUdeviceptr x, float scale, int64_t n) const {
        launch(*scale_c64_, dim(grid_for(*device_, n)), dim(256), 0, s, y, x, scale, u64(n));
    }

    void irfft_prepare(CUstream s, CUdeviceptr dst, CUdeviceptr src, float scale, int64_t bins,
                       int64_t n, int64_t total) const {
        launch(*irfft_prepare_, dim(grid_for(*device_, total)), dim(256), 0, s, dst, src, scale,
               u64(bins), u64(n), u64(total));
    }

    void hermitian_fill(CUstream s, CUdeviceptr frames, int64_t n, int64_t count) const {
        const int64_t upper = n - (n / 2 + 1);
        if (upper <= 0) return;
        launch(*hermitian_fill_, dim(grid_for(*device_, upper * count)), dim(256), 0, s, frames,
               u64(n), u64(count));
    }

    static unsigned long long u64(int64_t v) { return static_cast<unsigned long long>(v); }

private:
    std::shared_ptr<Device> device_;
    std::shared_ptr<Module> module_;
    std::shared_ptr<Kernel> history_f32_, history_c64_, zero_tail_, scale_c64_, irfft_prepare_,
        hermitian_fill_;
};

// The last `hist` items of every channel's input so far, on the device (zeros at the start).
// update() replaces it by the last `hist` items of [history | block] without a race: straight
// from the block when the block is at least as long as the history, else through a scratch
// buffer and a device-to-device copy (both captured into the graph like any kernel).
class DeviceHistory {
public:
    DeviceHistory(const std::shared_ptr<Device>& device, DType dtype, int64_t channels,
                  int64_t hist, int64_t block_items)
        : dtype_(dtype), channels_(channels), hist_(hist), block_(block_items) {
        if (hist_ <= 0) return;
        const size_t bytes = static_cast<size_t>(channels_ * hist_) * dtype_size(dtype_);
        buffer_ = std::make_unique<DeviceBuffer>(device, bytes);
        buffer_->memset(0, bytes, 0, nullptr);
        if (block_ < hist_) scratch_ = std::make_unique<DeviceBuffer>(device, bytes);
    }

    int64_t length() const { return hist_; }
    // 0 when there is no history (hist == 0); kernels then never read it.
    CUdeviceptr ptr() const { return buffer_ ? buffer_->ptr() : 0; }

    void update(CUstream s, const UtilKernels& util, CUdeviceptr in) const {
        if (!buffer_) return;
        if (!scratch_) {
            util.history(s, dtype_, buffer_->ptr(), buffer_->ptr(), in, hist_, block_, channels_);
            return;
        }
        util.history(s, dtype_, scratch_->ptr(), buffer_->ptr(), in, hist_, block_, channels_);
        cu_check(driver().cuMemcpyDtoDAsync(buffer_->ptr(), scratch_->ptr(), buffer_->nbytes(), s),
                 "cuMemcpyDtoDAsync_v2", "updating a streaming history");
    }

    void reset(CUstream s) const {
        if (!buffer_) return;
        cu_check(driver().cuMemsetD8Async(buffer_->ptr(), 0, buffer_->nbytes(), s),
                 "cuMemsetD8Async", "resetting a streaming history");
    }

private:
    DType dtype_;
    int64_t channels_, hist_, block_;
    std::unique_ptr<DeviceBuffer> buffer_, scratch_;
};

// Zero the items of `out` past `valid` (of `items` per channel, `item_bytes` each): a final
// block's padding, so that the next op reads zeros there (op.h's contract for its input).
inline void zero_after(CUstream s, const UtilKernels& util, CUdeviceptr out, int64_t channels,
                       int64_t items, int64_t item_bytes, int64_t valid) {
    if (valid >= items) return;
    if (valid < 0) valid = 0;
    util.zero_tail(s, out, channels, items * item_bytes, valid * item_bytes);
}

// Bytes of one item along the streaming axis of a layout (a sample, or a whole frame of bins).
inline int64_t item_bytes(const TensorDesc& d) {
    return (d.frames() ? d.bins : 1) * static_cast<int64_t>(dtype_size(d.dtype));
}

// ---------------------------------------------------------------------------------------------
// Chunking (Op::units / Op::enqueue_units, the scheduler's kernel pacing).
//
// The rule every chunkable op uses: a block's `count` items along the op's unit axis (transforms,
// frames, channels, columns, elements), `item_elements` elements of work each, are grouped into
// units of `per` consecutive items, the last unit possibly shorter, with
//   * at most kMaxUnits units per block (the scheduler paces in these steps), and
//   * at least kMinUnitElements elements per unit (a unit must be worth a launch): a block
//     smaller than that is one unit;
//   * `per` a multiple of `align` (see align_items: unit offsets on 16-byte boundaries, for
//     cuFFT and vector loads), except that it never exceeds `count`.
// It depends only on the layout, so units() is the same for every block.
constexpr int64_t kMaxUnits = 64;
constexpr int64_t kMinUnitElements = 4096;

struct UnitSplit {
    int64_t count = 0;  // items along the unit axis
    int64_t per = 1;    // items per unit (the last unit may hold fewer)
    int64_t units = 1;

    int64_t begin(int64_t u) const { return u * per; }
    int64_t size(int64_t u) const {
        const int64_t left = count - u * per;
        return left < per ? left : per;
    }
    int64_t last() const { return size(units - 1); }  // items of the last unit
    // Items [begin(b), end_item(e)) of units [b, e).
    int64_t end_item(int64_t e) const { return e >= units ? count : e * per; }
};

inline int64_t gcd64(int64_t a, int64_t b) {
    while (b != 0) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a < 0 ? -a : a;
}

// Items such that `items * item_bytes` is a multiple of 16.
inline int64_t align_items(int64_t item_bytes) {
    if (item_bytes <= 0) return 1;
    return 16 / gcd64(item_bytes, 16);
}

inline int64_t lcm64(int64_t a, int64_t b) { return a / gcd64(a, b) * b; }

inline UnitSplit split_units(int64_t count, int64_t item_elements, int64_t align = 1,
                             int64_t min_elements = kMinUnitElements,
                             int64_t max_units = kMaxUnits) {
    UnitSplit s;
    s.count = count;
    if (count <= 1) {
        s.per = count > 0 ? count : 1;
        return s;
    }
    const int64_t elems = item_elements > 0 ? item_elements : 1;
    int64_t per = ceil_div(count, max_units);
    const int64_t floor_items = ceil_div(min_elements, elems);
    if (per < floor_items) per = floor_items;
    if (align > 1) per = ceil_div(per, align) * align;
    if (per > count) per = count;
    s.per = per;
    s.units = ceil_div(count, per);
    return s;
}

// enqueue_units()'s argument check: [begin, end) must be a non-empty range of [0, units).
inline void check_unit_range(const char* kind, int64_t begin, int64_t end, int64_t units) {
    if (begin < 0 || end > units || begin >= end)
        throw std::logic_error(std::string("op '") + kind + "': units [" + std::to_string(begin) +
                               ", " + std::to_string(end) + ") out of its " +
                               std::to_string(units) + " unit(s)");
}

}  // namespace dsp
}  // namespace gk
