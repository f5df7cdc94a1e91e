// StreamEngine: a block's transfers (copies, or with mapped I/O the io kernels: docs/cuda.md,
// "Mapped I/O") and the check of its input for non-finite samples ("Non-finite input").
#include "stream_engine.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "engine_parts.h"
#include "gk/device.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/memory.h"

namespace gk {

using engine_detail::kIoThreads;

namespace {
// CTAs of gk_io_pull / gk_io_push for nbytes: one 16-byte vector per thread, so that every load
// of host memory is in flight at once, up to 4 CTAs per SM (beyond, each thread loops).
unsigned io_grid(size_t nbytes, int multiprocessors) {
    const size_t vectors = std::max<size_t>(nbytes / 16, 1);
    const size_t want = (vectors + kIoThreads - 1) / kIoThreads;
    const size_t cap = static_cast<size_t>(std::max(multiprocessors, 1)) * 4;
    return static_cast<unsigned>(std::min(want, cap));
}
}  // namespace

void StreamEngine::setup_mapped_io() {
    if (!options_.single_stream)
        throw std::invalid_argument("mapped_io needs single_stream=True (latency mode): the pull and push "
                                    "kernels run on the compute stream with the ops");
    const DriverApi& api = driver();
    const DeviceProperties& p = device_->properties();
    const std::string gpu = "GPU " + std::to_string(p.index) + " (" + p.name + ")";
    int can_map = 0, unified = 0;
    cu_check(api.cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, device_->handle()),
             "cuDeviceGetAttribute", "reading whether " + gpu + " can map host memory");
    cu_check(api.cuDeviceGetAttribute(&unified, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, device_->handle()),
             "cuDeviceGetAttribute", "reading whether " + gpu + " has unified addressing");
    if (!can_map)
        throw DeviceError(gpu + " cannot map host memory (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY = 0), "
                          "which mapped_io needs; build the engine with mapped_io=False");
    if (!unified)
        throw DeviceError(gpu + " has no unified addressing (CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 0), "
                          "which mapped_io needs; build the engine with mapped_io=False");
    if (!api.cuMemHostGetDevicePointer)
        throw DeviceError("this CUDA driver has no cuMemHostGetDevicePointer_v2, which mapped_io needs; "
                          "update the driver or build the engine with mapped_io=False");
    load_io_module();
    io_pull_ = io_module_->function("gk_io_pull")->handle();  // the module keeps them loaded
    io_push_ = io_module_->function("gk_io_push")->handle();
    io_pull_grid_ = io_grid(input_desc().nbytes(), p.multiprocessors);
    io_push_grid_ = io_grid(output_desc().nbytes(), p.multiprocessors);
}

void StreamEngine::load_io_module() {
    if (!io_module_) io_module_ = load_embedded_module(device_, "io", CompileOptions{});
}

void StreamEngine::setup_input_check() {
    load_io_module();
    check_finite_ = io_module_->function("gk_check_finite")->handle();
    const DeviceProperties& p = device_->properties();
    const size_t vectors = std::max<size_t>(input_desc().nbytes() / 16, 1);
    check_grid_ = static_cast<unsigned>(std::min<size_t>((vectors + 255) / 256,
                                                         static_cast<size_t>(std::max(p.multiprocessors, 1)) * 8));
    const size_t n = static_cast<size_t>(options_.slots);
    nf_records_ = std::make_unique<DeviceBuffer>(device_, 16 * n);
    nf_flags_ = std::make_shared<PinnedBuffer>(device_, 64 * n, true);
    std::memset(nf_flags_->data(), 0, nf_flags_->nbytes());
    for (int s = 0; s < options_.slots; ++s) reset_nonfinite(s);
}

void StreamEngine::reset_nonfinite(int s) {
    // {count 0, first ~0}: the kernels add to the count and take the minimum of the first
    nf_records_->memset(0x00, 8, 16 * static_cast<size_t>(s), nullptr);
    nf_records_->memset(0xff, 8, 16 * static_cast<size_t>(s) + 8, nullptr);
    static_cast<volatile unsigned*>(nf_flags_->data())[16 * s] = 0u;
}

std::pair<uint64_t, uint64_t> StreamEngine::take_nonfinite(int s) {
    if (s < 0 || s >= options_.slots)
        throw std::invalid_argument("slot " + std::to_string(s) + " out of range");
    if (closed_.load() || !nf_flags_) throw std::invalid_argument("take_nonfinite() on a closed engine");
    if (static_cast<volatile unsigned*>(nf_flags_->data())[16 * s] == 0u) return {0, 0};
    device_->make_current();
    uint64_t record[2] = {0, 0};
    nf_records_->copy_to_host(record, sizeof(record), 16 * static_cast<size_t>(s), nullptr);
    reset_nonfinite(s);
    return {record[0], record[0] ? record[1] : 0};
}

void StreamEngine::enqueue_upload(int s, CUstream stream) {
    const DriverApi& api = driver();
    Slot& slot = *slots_[static_cast<size_t>(s)];
    CUdeviceptr nf_record = nf_records_->ptr() + 16 * static_cast<CUdeviceptr>(s);
    CUdeviceptr nf_flag = nf_flags_->device_ptr() + 64 * static_cast<CUdeviceptr>(s);
    unsigned nf_zero = options_.zero_nonfinite ? 1u : 0u;
    // a chain's input is one slice; a graph's one slice per source (one copy or pull each)
    const size_t slices = plan_.enabled ? plan_.sources.size() : 1;
    if (!options_.mapped_io) {
        for (size_t k = 0; k < slices; ++k) {
            const uint64_t off = plan_.enabled ? plan_.sources[k].offset : 0;
            const size_t bytes = plan_.enabled ? static_cast<size_t>(plan_.sources[k].bytes) : input_desc().nbytes();
            cu_check(api.cuMemcpyHtoDAsync(slot.d_in->ptr() + static_cast<CUdeviceptr>(off),
                                           static_cast<const unsigned char*>(slot.h_in->data()) + off, bytes, stream),
                     "cuMemcpyHtoDAsync_v2", "copying a block to the GPU");
        }
        CUdeviceptr data = slot.d_in->ptr();
        unsigned long long words = input_desc().nbytes() / 4;
        void* check[] = {&data, &words, &nf_record, &nf_flag, &nf_zero};
        const CUresult r =
            api.cuLaunchKernel(check_finite_, check_grid_, 1, 1, 256, 1, 1, 0, stream, check, nullptr);
        if (r != CUDA_SUCCESS)
            cu_check(r, "cuLaunchKernel", "launching gk_check_finite (a block's input checked for NaN/Inf)");
        return;
    }
    for (size_t k = 0; k < slices; ++k) {
        const uint64_t off = plan_.enabled ? plan_.sources[k].offset : 0;
        CUdeviceptr dst = slot.d_in->ptr() + static_cast<CUdeviceptr>(off);
        CUdeviceptr src = slot.h_in->device_ptr() + static_cast<CUdeviceptr>(off);
        unsigned long long nbytes = plan_.enabled ? plan_.sources[k].bytes : input_desc().nbytes();
        const unsigned grid = plan_.enabled ? io_grid(static_cast<size_t>(nbytes), device_->properties().multiprocessors)
                                            : io_pull_grid_;
        void* params[] = {&dst, &src, &nbytes, &nf_record, &nf_flag, &nf_zero};
        const CUresult r = api.cuLaunchKernel(io_pull_, grid, 1, 1, kIoThreads, 1, 1, 0, stream, params, nullptr);
        if (r != CUDA_SUCCESS)
            cu_check(r, "cuLaunchKernel", "launching gk_io_pull (a block's input from mapped host memory)");
    }
}

void StreamEngine::enqueue_download(int s, CUstream stream) {
    const size_t slices = plan_.enabled ? plan_.sinks.size() : 1;  // a graph: one per sink
    for (size_t k = 0; k < slices; ++k) enqueue_sink_download(s, k, stream);
}

void StreamEngine::enqueue_sink_download(int s, size_t k, CUstream stream) {
    const DriverApi& api = driver();
    Slot& slot = *slots_[static_cast<size_t>(s)];
    const uint64_t off = plan_.enabled ? plan_.sinks[k].offset : 0;
    unsigned long long nbytes = plan_.enabled ? plan_.sinks[k].bytes : output_desc().nbytes();
    if (!options_.mapped_io) {
        cu_check(api.cuMemcpyDtoHAsync(static_cast<unsigned char*>(slot.h_out->data()) + off,
                                       slot.d_out->ptr() + static_cast<CUdeviceptr>(off), static_cast<size_t>(nbytes),
                                       stream),
                 "cuMemcpyDtoHAsync_v2", "copying a block from the GPU");
        return;
    }
    CUdeviceptr dst = slot.h_out->device_ptr() + static_cast<CUdeviceptr>(off);
    CUdeviceptr src = slot.d_out->ptr() + static_cast<CUdeviceptr>(off);
    const unsigned grid = plan_.enabled ? io_grid(static_cast<size_t>(nbytes), device_->properties().multiprocessors)
                                        : io_push_grid_;
    void* params[] = {&dst, &src, &nbytes};
    const CUresult r = api.cuLaunchKernel(io_push_, grid, 1, 1, kIoThreads, 1, 1, 0, stream, params, nullptr);
    if (r != CUDA_SUCCESS)
        cu_check(r, "cuLaunchKernel", "launching gk_io_push (a block's output to mapped host memory)");
}

}  // namespace gk
