// StreamEngine: device blocks, the caller's GPU arrays in and out with no host copy (docs/cuda.md,
// "GPU arrays"; Python: pygpukit_dsp/arrays_interop.py, CudaEngine.process on a device array). A
// graph engine's (process_device_graph) copies each source's array into its slice of the packed
// slot input and each sink's slice of the packed output into the sink's array, in the same order.
//
// A device block is ordered against the caller's CUDA stream with two events, never with a host
// wait:
//   caller:  record caller_ready
//   compute: wait caller_ready; D2D copy caller's input -> slot's device input (tail zeroed);
//            gk_check_finite; the slot's captured graph (eagerly for a final block); D2D copy
//            slot's device output -> caller's output; record done
//   caller:  wait done
// The slot's graph was captured with fixed pointers (the slot's device input and output), so
// the block is copied in and out of them on the device; the copies run on the compute stream
// in order with the ops, so back-to-back device blocks need no further ordering. Later host
// blocks of the same engine: their copy streams wait for `done` too (their H2D/D2H touch the
// slots' device buffers), and the compute stream is in order already.
#include "stream_engine.h"

#include <stdexcept>
#include <string>

#include "engine_parts.h"
#include "gk/device.h"
#include "gk/loader.h"
#include "gk/memory.h"

namespace gk {

using engine_detail::check_slot;

struct StreamEngine::DeviceIoEvents {
    CUevent caller_ready = nullptr;  // recorded on the caller's stream: what the block waits for
    CUevent done = nullptr;          // recorded on the compute stream after the output copy
    bool pending = false;            // a device block was queued since synchronize_device()
    DeviceIoEvents() = default;
    DeviceIoEvents(const DeviceIoEvents&) = delete;
    DeviceIoEvents& operator=(const DeviceIoEvents&) = delete;
    ~DeviceIoEvents() {
        const DriverApi* api = driver_if_loaded();
        if (!api) return;
        for (CUevent e : {caller_ready, done})
            if (e) api->cuEventDestroy(e);
    }
};

namespace {
// Bytes of one item along the streaming axis (a sample; a frame of `bins` values).
int64_t item_bytes(const TensorDesc& d) {
    return static_cast<int64_t>(dtype_size(d.dtype)) * (d.frames() ? d.bins : 1);
}
}  // namespace

int64_t StreamEngine::device_output_items(int64_t n, bool final) const {
    const TensorDesc& in = input_desc();
    if (n < 1 || n > in.items)
        throw std::invalid_argument("a device block holds 1.." + std::to_string(in.items) + " items, got " +
                                    std::to_string(n));
    if (n < in.items && !final)
        throw std::invalid_argument("a partial block (" + std::to_string(n) + " of " + std::to_string(in.items) +
                                    " items) must be the final block of the stream");
    if (!final) return output_desc().items;
    // as enqueue_ops propagates a final block's valid items
    int64_t items = n;
    for (size_t i = 0; i < ops_.size(); ++i) {
        const int64_t next = ops_[i]->output_items(items);
        if (next < 0 || next > specs_[i].out.items)
            throw DeviceError("stage '" + specs_[i].name + "' (" + specs_[i].kind + ") reports " +
                              std::to_string(next) + " output items for " + std::to_string(items) +
                              " input items; a block holds " + std::to_string(specs_[i].out.items));
        items = next;
    }
    return items;
}

void StreamEngine::copy_rows_d2d(CUdeviceptr dst, int64_t dst_row_bytes, CUdeviceptr src, int64_t src_row_bytes,
                                 int64_t rows, int64_t row_bytes, CUstream stream) {
    const DriverApi& api = driver();
    if (row_bytes <= 0 || rows <= 0) return;
    if (dst_row_bytes == row_bytes && src_row_bytes == row_bytes) {
        cu_check(api.cuMemcpyDtoDAsync(dst, src, static_cast<size_t>(rows * row_bytes), stream),
                 "cuMemcpyDtoDAsync_v2", "copying a device block");
        return;
    }
    for (int64_t r = 0; r < rows; ++r)
        cu_check(api.cuMemcpyDtoDAsync(dst + static_cast<CUdeviceptr>(r * dst_row_bytes),
                                       src + static_cast<CUdeviceptr>(r * src_row_bytes),
                                       static_cast<size_t>(row_bytes), stream),
                 "cuMemcpyDtoDAsync_v2", "copying a row of a device block");
}

void StreamEngine::wait_idle_for_device_block(const char* method) {
    check_usable(method);
    if (resident_.load())
        throw std::invalid_argument(std::string(method) + "() while the engine's instrument holds it in resident mode");
    for (size_t k = 0; k < slots_.size(); ++k)
        if (slots_[k]->state.load() != kFree)
            throw std::invalid_argument(std::string(method) +
                                        "() needs an idle engine: collect every submitted slot first");
    // Every block handed over is collected, so done: wait out the worker's (or the dispatcher's)
    // last count after it marked its slot done (nanoseconds; see process_inline). Attached to a
    // dispatcher, the engine then has no task there, and none can be posted while producer_mutex_
    // is held: the dispatcher's thread does not touch the engine's streams meanwhile. A device
    // block is queued here, on the calling thread, outside the scheduler's chunking.
    while (completed_.load() != submitted_.load() || sched_done_.load() != sched_posted_.load()) {
        if (failed_.load()) rethrow_failure();
        cpu_relax();
    }
}

// The events made on the first device block, and caller_ready recorded on the caller's stream.
CUstream StreamEngine::device_block_begin(uint64_t caller_stream) {
    const DriverApi& api = driver();
    device_->make_current();
    if (!device_io_) {
        auto events = std::make_shared<DeviceIoEvents>();
        for (CUevent* e : {&events->caller_ready, &events->done})
            cu_check(api.cuEventCreate(e, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                     "creating the events that order device blocks with the caller's stream");
        device_io_ = std::move(events);
    }
    // 0 (legacy default stream), 1 (CU_STREAM_LEGACY), 2 (CU_STREAM_PER_THREAD) or a stream handle.
    CUstream caller = reinterpret_cast<CUstream>(static_cast<uintptr_t>(caller_stream));
    // A bad caller stream fails here, before anything is queued on the engine's streams: the
    // engine stays usable.
    cu_check(api.cuEventRecord(device_io_->caller_ready, caller), "cuEventRecord",
             "ordering a device block after the caller's CUDA stream " + std::to_string(caller_stream) +
                 " (a stream of GPU " + std::to_string(device_->index()) + "'s primary context, or 0/1/2)");
    return caller;
}

void StreamEngine::check_device_input(int s) {
    // The input check of host blocks (enqueue_upload), on the slot's copy of the block.
    const DriverApi& api = driver();
    CUdeviceptr data = slots_[static_cast<size_t>(s)]->d_in->ptr();
    unsigned long long words = input_desc().nbytes() / 4;
    CUdeviceptr nf_record = nf_records_->ptr() + 16 * static_cast<CUdeviceptr>(s);
    CUdeviceptr nf_flag = nf_flags_->device_ptr() + 64 * static_cast<CUdeviceptr>(s);
    unsigned nf_zero = options_.zero_nonfinite ? 1u : 0u;
    void* check[] = {&data, &words, &nf_record, &nf_flag, &nf_zero};
    const CUresult r = api.cuLaunchKernel(check_finite_, check_grid_, 1, 1, 256, 1, 1, 0, compute_, check, nullptr);
    if (r != CUDA_SUCCESS)
        cu_check(r, "cuLaunchKernel", "launching gk_check_finite (a device block's input checked for NaN/Inf)");
}

void StreamEngine::device_block_end(CUstream caller) {
    const DriverApi& api = driver();
    const char* what = "queueing a device block";
    DeviceIoEvents& ev = *device_io_;
    cu_check(api.cuEventRecord(ev.done, compute_), "cuEventRecord", what);
    cu_check(api.cuStreamWaitEvent(caller, ev.done, 0), "cuStreamWaitEvent",
             "making the caller's CUDA stream wait for a device block");
    if (!options_.single_stream) {
        // a later host block's copies touch the slots' device buffers: after this block
        cu_check(api.cuStreamWaitEvent(h2d_, ev.done, 0), "cuStreamWaitEvent", what);
        cu_check(api.cuStreamWaitEvent(d2h_, ev.done, 0), "cuStreamWaitEvent", what);
    }
    ev.pending = true;
}

void StreamEngine::queue_device_block(const char* method, uint64_t caller_stream,
                                      const std::function<void()>& queue) {
    std::lock_guard<std::mutex> control(control_mutex_);  // reset/close/timing cannot start meanwhile
    // Held until the block is queued: no host block can be handed to the worker in between, so
    // the compute stream sees the blocks in call order.
    std::lock_guard<std::mutex> producer(producer_mutex_);
    wait_idle_for_device_block(method);
    const DriverApi& api = driver();
    CUstream caller = device_block_begin(caller_stream);  // a bad stream fails here: the engine stays usable
    try {
        cu_check(api.cuStreamWaitEvent(compute_, device_io_->caller_ready, 0), "cuStreamWaitEvent",
                 "queueing a device block");
        queue();
        device_block_end(caller);
    } catch (const DeviceError& e) {
        fail(e.what(), e.call(), e.code(), e.code_name());
        throw;
    } catch (const std::exception& e) {
        fail(std::string("queueing a device block failed: ") + e.what(), {}, 0, {});
        rethrow_failure();
    }
    counters_.device_blocks.fetch_add(1, std::memory_order_relaxed);
    counters_.blocks.fetch_add(1, std::memory_order_relaxed);
}

int64_t StreamEngine::process_device(int s, CUdeviceptr in, int64_t in_row_bytes, int64_t n, bool final,
                                     CUdeviceptr out, int64_t out_row_bytes, uint64_t caller_stream) {
    if (closed_.load()) throw Error("StreamEngine.process_device(): the engine is closed");
    check_slot(s, slots());
    if (plan_.enabled)
        throw std::invalid_argument("process_device() is a chain's: a graph engine takes process_device_graph()");
    const TensorDesc& din = input_desc();
    const TensorDesc& dout = output_desc();
    const int64_t n_out = device_output_items(n, final);  // checks n against the block
    const int64_t in_item = item_bytes(din), out_item = item_bytes(dout);
    if (!in || (!out && n_out > 0))
        throw std::invalid_argument("process_device() takes device pointers to the input and the output, got 0");
    if (in_row_bytes < n * in_item)
        throw std::invalid_argument("process_device(): input rows of " + std::to_string(in_row_bytes) +
                                    " bytes cannot hold " + std::to_string(n) + " items of " +
                                    std::to_string(in_item) + " bytes");
    if (n_out > 0 && out_row_bytes < n_out * out_item)
        throw std::invalid_argument("process_device(): output rows of " + std::to_string(out_row_bytes) +
                                    " bytes cannot hold " + std::to_string(n_out) + " items of " +
                                    std::to_string(out_item) + " bytes");
    queue_device_block("process_device", caller_stream, [&] {
        Slot& slot = *slots_[static_cast<size_t>(s)];
        const DriverApi& api = driver();
        copy_rows_d2d(slot.d_in->ptr(), din.row() * static_cast<int64_t>(dtype_size(din.dtype)), in, in_row_bytes,
                      din.channels, n * in_item, compute_);
        counters_.d2d_in.fetch_add(1, std::memory_order_relaxed);
        zero_tail(slot.d_in->ptr(), din, n);  // a short final block: zeros after its n items, as fill() does
        check_device_input(s);
        slot.n_in = n;
        slot.final = final;
        int64_t got = 0;
        if (!final && n == din.items && slot.graph) {
            cu_check(api.cuGraphLaunch(slot.graph, compute_), "cuGraphLaunch", "launching a device block's graph");
            counters_.graph_launches.fetch_add(1, std::memory_order_relaxed);
            got = dout.items;
        } else {
            got = enqueue_ops(s, n, final);
            counters_.eager_blocks.fetch_add(1, std::memory_order_relaxed);
        }
        if (got != n_out)
            throw DeviceError("a device block of " + std::to_string(n) + " items gave " + std::to_string(got) +
                              " output items, " + std::to_string(n_out) + " expected (stages " + stage_names() + ")");
        slot.n_out = got;
        if (n_out > 0) {
            copy_rows_d2d(out, out_row_bytes, slot.d_out->ptr(), dout.row() * static_cast<int64_t>(dtype_size(dout.dtype)),
                          dout.channels, n_out * out_item, compute_);
            counters_.d2d_out.fetch_add(1, std::memory_order_relaxed);
        }
    });
    return n_out;
}

std::vector<int64_t> StreamEngine::process_device_graph(int s, int64_t n, bool final,
                                                        const std::vector<DeviceRows>& ins,
                                                        const std::vector<DeviceRows>& outs, uint64_t caller_stream) {
    if (closed_.load()) throw Error("StreamEngine.process_device_graph(): the engine is closed");
    check_slot(s, slots());
    if (!plan_.enabled) throw std::invalid_argument("process_device_graph() is a graph engine's: a chain takes process_device()");
    const int64_t items = plan_.items;
    if (n < 1 || n > items)
        throw std::invalid_argument("a device block holds 1.." + std::to_string(items) + " items, got " + std::to_string(n));
    if (n < items && !final)
        throw std::invalid_argument("a partial block (" + std::to_string(n) + " of " + std::to_string(items) +
                                    " items) must be the final block of the stream");
    if (ins.size() != plan_.sources.size() || outs.size() != plan_.sinks.size())
        throw std::invalid_argument("process_device_graph() takes one array per source (" +
                                    std::to_string(plan_.sources.size()) + ") and one per sink (" +
                                    std::to_string(plan_.sinks.size()) + "), got " + std::to_string(ins.size()) +
                                    " and " + std::to_string(outs.size()));
    // each array's rows against its slice of the packed slots: rows x (full items) x item bytes
    auto check = [](const DeviceRows& a, uint64_t bytes, int64_t full, int64_t used, const std::string& what) {
        if (!a.ptr || a.rows < 1 || a.item_bytes < 4 || a.item_bytes % 4 ||
            static_cast<uint64_t>(a.rows * full * a.item_bytes) != bytes || a.row_bytes < used * a.item_bytes)
            throw std::invalid_argument("process_device_graph(): " + what + " does not fit its slice of the block (" +
                                        std::to_string(a.rows) + " rows of " + std::to_string(a.row_bytes) +
                                        " bytes, items of " + std::to_string(a.item_bytes) + " bytes; the slice holds " +
                                        std::to_string(bytes) + " bytes of " + std::to_string(full) + " items a row)");
    };
    for (size_t k = 0; k < ins.size(); ++k)
        check(ins[k], plan_.sources[k].bytes, items, n, "source " + std::to_string(k));
    for (size_t k = 0; k < outs.size(); ++k) {
        const int64_t full = specs_[static_cast<size_t>(plan_.sinks[k].op)].out.items;
        check(outs[k], plan_.sinks[k].bytes, full, full, "sink " + std::to_string(k));
    }
    std::vector<int64_t> items_out;
    queue_device_block("process_device_graph", caller_stream, [&] {
        Slot& slot = *slots_[static_cast<size_t>(s)];
        const DriverApi& api = driver();
        for (size_t k = 0; k < ins.size(); ++k) {
            const DeviceRows& a = ins[k];
            const CUdeviceptr dst = slot.d_in->ptr() + static_cast<CUdeviceptr>(plan_.sources[k].offset);
            const int64_t row = items * a.item_bytes;
            copy_rows_d2d(dst, row, a.ptr, a.row_bytes, a.rows, n * a.item_bytes, compute_);
            // a short final block: zeros after its n items, as the host path writes (rows as words)
            zero_tail(dst, TensorDesc{a.rows, row / 4, 0, DType::F32}, n * a.item_bytes / 4);
            counters_.d2d_in.fetch_add(1, std::memory_order_relaxed);
        }
        check_device_input(s);
        slot.n_in = n;
        slot.final = final;
        if (!final && n == items && slot.graph) {
            cu_check(api.cuGraphLaunch(slot.graph, compute_), "cuGraphLaunch", "launching a device block's graph");
            counters_.graph_launches.fetch_add(1, std::memory_order_relaxed);
            note_sink_items(slot, nullptr);
        } else {
            enqueue_ops(s, n, final);
            counters_.eager_blocks.fetch_add(1, std::memory_order_relaxed);
        }
        slot.n_out = slot.sink_n_out.front();
        for (size_t k = 0; k < outs.size(); ++k) {
            const DeviceRows& a = outs[k];
            const int64_t got = slot.sink_n_out[k];
            const int64_t full = specs_[static_cast<size_t>(plan_.sinks[k].op)].out.items;
            if (got <= 0) continue;
            copy_rows_d2d(a.ptr, a.row_bytes, slot.d_out->ptr() + static_cast<CUdeviceptr>(plan_.sinks[k].offset),
                          full * a.item_bytes, a.rows, got * a.item_bytes, compute_);
            counters_.d2d_out.fetch_add(1, std::memory_order_relaxed);
        }
        items_out = slot.sink_n_out;
    });
    return items_out;
}

void StreamEngine::synchronize_device() {
    std::lock_guard<std::mutex> control(control_mutex_);
    if (closed_.load() || !device_io_ || !device_io_->pending) return;
    check_usable("synchronize_device");
    device_->make_current();
    const CUresult r = driver().cuEventSynchronize(device_io_->done);
    if (r != CUDA_SUCCESS) {
        try {
            cu_check(r, "cuEventSynchronize", "waiting for the device blocks of stages " + stage_names());
        } catch (const DeviceError& e) {
            fail(e.what(), e.call(), e.code(), e.code_name());
            throw;
        }
    }
    device_io_->pending = false;
}

float StreamEngine::read_device_word(CUdeviceptr address) {
    if (closed_.load()) throw Error("StreamEngine.read_device_word(): the engine is closed");
    if (!address || (address & 3u)) throw std::invalid_argument("read_device_word() takes a 4-byte aligned device address");
    device_->make_current();
    float value = 0.0f;
    cu_check(driver().cuMemcpyDtoH(&value, address, sizeof(value)), "cuMemcpyDtoH_v2",
             "reading a non-finite input sample of a device block");
    return value;
}

}  // namespace gk
