// One stage of a pipeline on the GPU: what the streaming engine calls for every block.
//
// The engine owns the buffers between ops (one device buffer per edge, full-block sized) and
// the streams; an op owns its streaming state (FIR history, IIR state, resampler phase...) in
// device memory, its kernels, cuFFT plans and cuBLAS handles, all made in its constructor, so
// that enqueue() allocates nothing and can be captured into a CUDA graph.
//
// Ops register themselves by kind (the stage's YAML type, or a fused kind such as
// "stft_power_average") from their own .cpp file:
//     GK_REGISTER_OP("fir", [](const gk::OpArgs& a) { return std::make_unique<FirOp>(a); });
#pragma once

#include <complex>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "gk/cuda_api.h"

namespace gk {

class Device;

enum class DType { F32, C64 };

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : 8; }
inline const char* dtype_name(DType t) { return t == DType::F32 ? "float32" : "complex64"; }

// The full-block layout of one edge, C-contiguous: (channels, items) in the time domain or
// (channels, items, bins) in the frames domain. `items` is the streaming axis (samples or frames).
struct TensorDesc {
    int64_t channels = 1;
    int64_t items = 0;
    int64_t bins = 0;  // 0 in the time domain
    DType dtype = DType::F32;

    bool frames() const { return bins > 0; }
    int64_t row() const { return frames() ? items * bins : items; }  // elements per channel
    int64_t elements() const { return channels * row(); }
    size_t nbytes() const { return static_cast<size_t>(elements()) * dtype_size(dtype); }
};

// A real or complex array parameter (taps, sos sections, matrices, windows), in float64/complex128
// as the Python side resolved it; ops convert to what their kernels need.
struct ParamArray {
    std::vector<int64_t> shape;
    std::vector<std::complex<double>> values;  // C order; imag == 0 for real arrays
    bool is_complex = false;

    int64_t size() const { return static_cast<int64_t>(values.size()); }
    std::vector<float> real_f32() const;          // throws UnsupportedError if complex
    std::vector<float> interleaved_c64() const;   // re, im, re, im...
    std::vector<double> real_f64() const;
};

using ParamValue = std::variant<bool, int64_t, double, std::string, ParamArray>;

// The op's parameters from its Python lowering. Getters throw std::invalid_argument naming the
// op kind and the key when it is missing or has another type.
class OpParams {
public:
    std::string kind;
    std::string stage;  // the stage's name, for messages ("op 'fir' (stage 'lowpass'): ...")
    std::map<std::string, ParamValue> values;

    bool has(const std::string& key) const { return values.count(key) != 0; }
    bool get_bool(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    double get_float(const std::string& key) const;  // ints are accepted
    const std::string& get_str(const std::string& key) const;
    const ParamArray& get_array(const std::string& key) const;
    // With a default when absent.
    int64_t get_int(const std::string& key, int64_t fallback) const;
    double get_float(const std::string& key, double fallback) const;
    bool get_bool(const std::string& key, bool fallback) const;
    std::string get_str(const std::string& key, const std::string& fallback) const;
};

// Everything an op's constructor gets.
struct OpArgs {
    std::shared_ptr<Device> device;
    std::string name;      // the stage's name in its pipeline (for error messages)
    TensorDesc in;         // full-block input layout
    TensorDesc out;        // full-block output layout (as the Python spec propagation computed it)
    OpParams params;
};

class Op {
public:
    virtual ~Op() = default;

    // Queue one block's work on `stream`: read `in` (layout args.in; `n_in` valid items along
    // the streaming axis, the rest of the block zero-filled) and write `out` (layout args.out).
    // For a full block (n_in == in.items, final == false) this must be capturable into a CUDA
    // graph: no allocation, no synchronisation, no host access to device data, and the same
    // work every time (state lives in device memory). `final` marks the last block of a
    // stream; an op whose final-block rule differs from "treat the zero padding as input"
    // (average: the mean of the frames that remain) uses n_in. State after a final block is
    // unspecified until reset().
    virtual void enqueue(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t n_in,
                         bool final) = 0;

    // Valid output items for `n_in` valid input items on a final block (full blocks give
    // out.items). Must agree with the stage's CPU implementation.
    virtual int64_t output_items(int64_t n_in) const = 0;

    // Chunking (the scheduler's kernel pacing). A full block of a chunkable op splits into
    // units() independently launchable parts along one axis (frames for the fft family, stft,
    // power and average; channels for fir; columns for mix). enqueue_units(begin, end) queues
    // units [begin, end) of a full block; running every unit once, in order, in any split into
    // consecutive ranges, on one stream, must give exactly what enqueue(stream, in, out,
    // in.items, false) gives, streaming state included. Not captured into graphs; allocates
    // nothing. An op that cannot split keeps the defaults: one unit, the whole block.
    virtual int64_t units() const { return 1; }
    virtual void enqueue_units(CUstream stream, CUdeviceptr in, CUdeviceptr out, int64_t begin,
                               int64_t end);

    // Queue a reset of all streaming state to zero on `stream`.
    virtual void reset(CUstream stream) = 0;

    // True when enqueue() writes every output element exactly once with plain stores and never
    // reads `out` back: then the engine may pass a device-mapped pinned host buffer as `out`
    // (mapped I/O writes the block's output straight into the slot's pinned output, with no push
    // kernel after the op). The op should store with write-through (__stwt) so that the writes
    // leave the GPU as they are made.
    virtual bool writes_output_once() const { return false; }

    // For the engine's counters and errors.
    virtual const char* kind() const = 0;

protected:
    // The full block's item count, for the default enqueue_units(); set by make_op().
    friend std::unique_ptr<Op> make_op(const std::string& kind, const OpArgs& args);
    int64_t block_items_ = 0;
};

using OpFactory = std::function<std::unique_ptr<Op>(const OpArgs&)>;

// Registration, from each op's .cpp. Throws std::logic_error on a duplicate kind.
bool register_op(const std::string& kind, OpFactory factory);
// The kinds this build implements (the Python side refuses others before the first block).
std::vector<std::string> registered_ops();
// Throws UnsupportedError(args.name, "cuda", "no CUDA op of kind ...") for an unknown kind.
std::unique_ptr<Op> make_op(const std::string& kind, const OpArgs& args);

}  // namespace gk

#define GK_OP_CONCAT_(a, b) a##b
#define GK_OP_CONCAT(a, b) GK_OP_CONCAT_(a, b)
#define GK_REGISTER_OP(kind, factory) \
    static const bool GK_OP_CONCAT(gk_op_registered_, __LINE__) = ::gk::register_op(kind, factory)
