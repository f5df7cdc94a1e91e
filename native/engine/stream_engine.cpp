// StreamEngine: construction and teardown, the ops and their graphs, state, trace and timing.
#include "stream_engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "engine_parts.h"
#include "gk/device.h"
#include "gk/loader.h"
#include "gk/memory.h"

namespace gk {

using engine_detail::ExclusiveGuard;
using engine_detail::kMaxSlots;

namespace {

std::string desc_text(const TensorDesc& d) {
    std::string s = "(" + std::to_string(d.channels) + ", " + std::to_string(d.items);
    if (d.frames()) s += ", " + std::to_string(d.bins);
    return s + ") " + dtype_name(d.dtype);
}

bool same_layout(const TensorDesc& a, const TensorDesc& b) {
    return a.channels == b.channels && a.items == b.items && a.bins == b.bins && a.dtype == b.dtype;
}

void check_desc(const TensorDesc& d, const std::string& what) {
    if (d.channels < 1 || d.items < 1 || d.bins < 0)
        throw std::invalid_argument(what + " has an invalid layout " + desc_text(d) +
                                    ": channels and items must be >= 1, bins >= 0");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Construction and teardown
// ---------------------------------------------------------------------------------------------

StreamEngine::StreamEngine(std::shared_ptr<Device> device, std::vector<OpSpec> ops,
                           EngineOptions options, GraphPlan plan)
    : device_(std::move(device)), specs_(std::move(ops)), options_(options) {
    plan_ = std::move(plan);
    if (!device_) throw std::invalid_argument("StreamEngine needs a Device");
    if (specs_.empty()) throw std::invalid_argument("StreamEngine needs at least one op");
    if (options_.slots < 1 || options_.slots > kMaxSlots)
        throw std::invalid_argument("slots must be between 1 and " + std::to_string(kMaxSlots) +
                                    ", got " + std::to_string(options_.slots));
    if (options_.spin_us < 0)
        throw std::invalid_argument("spin_us must be >= 0, got " + std::to_string(options_.spin_us));
    for (size_t i = 0; i < specs_.size(); ++i) {
        OpSpec& s = specs_[i];
        if (s.kind.empty()) throw std::invalid_argument("op " + std::to_string(i) + " has no kind");
        if (s.name.empty()) s.name = s.kind;
        check_desc(s.in, "the input of stage '" + s.name + "'");
        check_desc(s.out, "the output of stage '" + s.name + "'");
        if (i > 0 && !plan_.enabled && !same_layout(specs_[i - 1].out, s.in))
            throw std::invalid_argument("stage '" + s.name + "' takes " + desc_text(s.in) +
                                        " but stage '" + specs_[i - 1].name + "' produces " +
                                        desc_text(specs_[i - 1].out));
        s.params.kind = s.kind;
        s.params.stage = s.name;
    }
    if (plan_.enabled) check_plan();  // the packed layouts, every slice inside its buffer
    try {
        build();
    } catch (...) {
        teardown();
        throw;
    }
    worker_ = std::thread([this] { worker_main(); });
}

StreamEngine::~StreamEngine() {
    try {
        close();
    } catch (...) {
        // Destructors never throw; close() already freed what it could.
    }
}

void StreamEngine::build() {
    // Each step's wall time goes into build_timings_ (the first-block benchmark's phases).
    auto t = std::chrono::steady_clock::now();
    auto mark = [&](const std::string& what) {
        const auto now = std::chrono::steady_clock::now();
        build_timings_.emplace_back(what, std::chrono::duration<double, std::milli>(now - t).count());
        t = now;
    };
    device_->make_current();
    const DriverApi& api = driver();
    if (options_.mapped_io) setup_mapped_io();
    setup_input_check();
    mark("io kernels");
    auto make_stream = [&](CUstream* s, const char* what) {
        const int least = device_->least_stream_priority(), greatest = device_->greatest_stream_priority();
        if (options_.priority > least || options_.priority < greatest)
            throw std::invalid_argument("stream priority " + std::to_string(options_.priority) +
                                        " is outside GPU " + std::to_string(device_->index()) +
                                        "'s range " + std::to_string(greatest) + " (highest) .. " +
                                        std::to_string(least) + " (lowest)");
        cu_check(api.cuStreamCreateWithPriority(s, CU_STREAM_NON_BLOCKING, options_.priority),
                 "cuStreamCreateWithPriority", what);
    };
    make_stream(&h2d_, "creating the engine's h2d stream");
    make_stream(&compute_, "creating the engine's compute stream");
    make_stream(&d2h_, "creating the engine's d2h stream");
    mark("streams");

    units_total_ = 0;
    for (const OpSpec& s : specs_) {
        OpArgs args{device_, s.name, s.in, s.out, s.params};
        ops_.push_back(make_op(s.kind, args));
        mark("op " + s.name + " (" + s.kind + ")");  // its modules, plans, handles and buffers
        const int64_t u = ops_.back()->units();
        if (u < 1) throw std::logic_error("op '" + s.name + "' reports " + std::to_string(u) + " units per block");
        unit_begin_.push_back(units_total_);
        units_total_ += u;
    }
    // a graph's sinks are slices of the device output, pushed one by one: never direct
    direct_output_ = options_.mapped_io && options_.direct_output && options_.use_graph && !ops_.empty() &&
                     !plan_.enabled && ops_.back()->writes_output_once();
    const size_t in_bytes = input_desc().nbytes(), out_bytes = output_desc().nbytes();
    {
        // The pool's first grant sized up front: every edge and slot buffer in one driver
        // allocation (DeviceMemoryPool::reserve), instead of one cuMemAlloc each.
        std::vector<size_t> sizes;
        if (plan_.enabled) {
            for (uint64_t b : plan_.buffers) sizes.push_back(static_cast<size_t>(b));
        } else {
            for (size_t i = 0; i + 1 < specs_.size(); ++i) sizes.push_back(specs_[i].out.nbytes());
        }
        for (int k = 0; k < options_.slots; ++k) {
            sizes.push_back(in_bytes);
            sizes.push_back(out_bytes);
        }
        device_->memory_pool().reserve(sizes);
    }
    if (plan_.enabled) build_graph_resources();  // its buffers (zeroed), lanes and events
    for (size_t i = 0; !plan_.enabled && i + 1 < specs_.size(); ++i) {
        edges_.push_back(std::make_unique<DeviceBuffer>(device_, specs_[i].out.nbytes()));
        edges_.back()->memset(0, edges_.back()->nbytes(), 0, compute_);
    }
    mark("device buffers");
    double pinned_ms = 0, zero_ms = 0;
    for (int k = 0; k < options_.slots; ++k) {
        auto slot = std::make_unique<Slot>();
        auto p0 = std::chrono::steady_clock::now();
        slot->h_in = std::make_shared<PinnedBuffer>(device_, in_bytes, options_.mapped_io);
        slot->h_out = std::make_shared<PinnedBuffer>(device_, out_bytes, options_.mapped_io);
        auto p1 = std::chrono::steady_clock::now();
        // The pinned input is zeroed when it is first used (init_input), not here: without
        // mapped I/O nothing reads it before a block is written into it (fill) or handed over,
        // and for a big block (W2: 128 MiB per slot) the zero fill is a visible part of the
        // first block. Mapped I/O's warm-up and graphs read it through the pull kernel: zeroed now.
        if (options_.mapped_io) {
            std::memset(slot->h_in->data(), 0, in_bytes);
            slot->in_init.store(true);
        }
        std::memset(slot->h_out->data(), 0, out_bytes);
        auto p2 = std::chrono::steady_clock::now();
        pinned_ms += std::chrono::duration<double, std::milli>(p1 - p0).count();
        zero_ms += std::chrono::duration<double, std::milli>(p2 - p1).count();
        slot->d_in = std::make_unique<DeviceBuffer>(device_, in_bytes);
        slot->d_out = std::make_unique<DeviceBuffer>(device_, out_bytes);
        slot->d_in->memset(0, in_bytes, 0, compute_);
        slot->d_out->memset(0, out_bytes, 0, compute_);
        for (CUevent* e : {&slot->ev_h2d, &slot->ev_comp, &slot->ev_done})
            cu_check(api.cuEventCreate(e, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                     "creating the engine's ordering events");
        slots_.push_back(std::move(slot));
    }
    mark("slots");
    // within "slots": the page-locked host memory (cuMemHostAlloc) and its zero fill
    build_timings_.emplace_back("slots: pinned allocation", pinned_ms);
    build_timings_.emplace_back("slots: pinned zero fill", zero_ms);
    ring_.assign(slots_.size(), 0);
    cu_check(api.cuStreamSynchronize(compute_), "cuStreamSynchronize", "initialising engine buffers");
    mark("buffer zeroing (GPU)");
    if (options_.use_graph) {
        warm_up();
        mark("warm-up block");
        capture_graphs();
        mark("graph capture");
    }
}

void StreamEngine::teardown() noexcept {
    const DriverApi* api = driver_if_loaded();
    if (!api) return;
    try {
        device_->make_current();
    } catch (...) {
        return;
    }
    if (!failed_.load()) {
        for (CUstream s : {h2d_, compute_, d2h_})
            if (s) api->cuStreamSynchronize(s);
    }
    for (auto& slot : slots_) {
        if (slot->graph) api->cuGraphExecDestroy(slot->graph);
        if (slot->block_graph) api->cuGraphExecDestroy(slot->block_graph);
        if (slot->prewarm_graph) api->cuGraphExecDestroy(slot->prewarm_graph);
        slot->block_graph = slot->prewarm_graph = nullptr;
        for (CUevent e : {slot->ev_h2d, slot->ev_comp, slot->ev_done, slot->ev_t0, slot->ev_t1})
            if (e) api->cuEventDestroy(e);
        slot->graph = nullptr;
        slot->ev_h2d = slot->ev_comp = slot->ev_done = slot->ev_t0 = slot->ev_t1 = nullptr;
    }
    if (prewarm_event_) api->cuEventDestroy(prewarm_event_);
    prewarm_event_ = nullptr;
    device_io_.reset();  // process_device's events
    try {
        ops_.clear();  // before the streams: an op's library handles may still refer to them
        edges_.clear();
        plan_buffers_.clear();
        slots_.clear();  // pinned buffers stay alive while NumPy views hold them
        nf_records_.reset();
        nf_flags_.reset();  // NumPy views of the flags keep their memory
        check_finite_ = nullptr;
        // mapped I/O
        io_pull_ = io_push_ = io_touch_ = nullptr;
        io_module_.reset();
    } catch (...) {
    }
    destroy_graph_resources(*api);  // a graph's events and lane streams (after the ops' handles)
    for (CUstream* s : {&h2d_, &compute_, &d2h_}) {
        if (*s) api->cuStreamDestroy(*s);
        *s = nullptr;
    }
}

void StreamEngine::close() {
    if (!closed_.load() && attached()) {
        try {
            detach();
        } catch (...) {
            // A failed engine still detaches (its tasks are cancelled); the failure was reported.
        }
    }
    std::lock_guard<std::mutex> control(control_mutex_);
    if (closed_.exchange(true)) return;
    stop_.store(true);
    to_worker_.notify();
    if (worker_.joinable()) worker_.join();  // the worker drains what was handed over first
    teardown();
}

std::shared_ptr<PinnedBuffer> StreamEngine::input_buffer(int slot) const {
    if (slot < 0 || slot >= slots()) throw std::invalid_argument("no slot " + std::to_string(slot));
    if (closed_.load()) throw Error("the stream engine is closed");
    Slot& s = *slots_[static_cast<size_t>(slot)];
    init_input(s);  // a view of it starts zeroed
    return s.h_in;
}

void StreamEngine::init_input(Slot& slot) const {
    if (slot.in_init.load(std::memory_order_acquire)) return;
    std::memset(slot.h_in->data(), 0, slot.h_in->nbytes());
    slot.in_init.store(true, std::memory_order_release);
}

std::shared_ptr<PinnedBuffer> StreamEngine::output_buffer(int slot) const {
    if (slot < 0 || slot >= slots()) throw std::invalid_argument("no slot " + std::to_string(slot));
    if (closed_.load()) throw Error("the stream engine is closed");
    return slots_[static_cast<size_t>(slot)]->h_out;
}

// ---------------------------------------------------------------------------------------------
// Ops on the compute stream
// ---------------------------------------------------------------------------------------------

CUdeviceptr StreamEngine::op_input(size_t op, int slot) const {
    return op == 0 ? slots_[static_cast<size_t>(slot)]->d_in->ptr() : edges_[op - 1]->ptr();
}

CUdeviceptr StreamEngine::op_output(size_t op, int slot) const {
    return op + 1 == ops_.size() ? slots_[static_cast<size_t>(slot)]->d_out->ptr() : edges_[op]->ptr();
}

std::string StreamEngine::stage_names() const {
    std::string s;
    for (const OpSpec& o : specs_) s += (s.empty() ? "'" : ", '") + o.name + "'";
    return s;
}

void StreamEngine::zero_tail(CUdeviceptr buffer, const TensorDesc& desc, int64_t n_valid) {
    if (n_valid >= desc.items) return;
    const DriverApi& api = driver();
    const size_t esz = dtype_size(desc.dtype);
    const size_t row_bytes = static_cast<size_t>(desc.row()) * esz;
    const size_t offset = static_cast<size_t>(n_valid) * static_cast<size_t>(desc.frames() ? desc.bins : 1) * esz;
    const size_t width = row_bytes - offset;
    if (api.cuMemsetD2D8Async) {
        cu_check(api.cuMemsetD2D8Async(buffer + offset, row_bytes, 0, width,
                                       static_cast<size_t>(desc.channels), compute_),
                 "cuMemsetD2D8Async", "zeroing the tail of a final block");
        return;
    }
    for (int64_t c = 0; c < desc.channels; ++c)
        cu_check(api.cuMemsetD8Async(buffer + static_cast<size_t>(c) * row_bytes + offset, 0, width, compute_),
                 "cuMemsetD8Async", "zeroing the tail of a final block");
}

int64_t StreamEngine::enqueue_ops(int slot, int64_t n, bool final, CUdeviceptr last_out, bool capture,
                                  bool downloads) {
    if (plan_.enabled) return enqueue_graph_ops(slot, n, final, capture, downloads);
    int64_t items = n;
    for (size_t i = 0; i < ops_.size(); ++i) {
        const OpSpec& spec = specs_[i];
        const CUdeviceptr out = last_out && i + 1 == ops_.size() ? last_out : op_output(i, slot);
        try {
            ops_[i]->enqueue(compute_, op_input(i, slot), out, items, final);
        } catch (const DeviceError& e) {
            throw DeviceError(std::string(e.what()) + " [stage '" + spec.name + "' (" + spec.kind + ")]",
                              e.call(), e.code(), e.code_name());
        } catch (const CompileError&) {
            throw;
        } catch (const UnsupportedError&) {
            throw;
        } catch (const std::exception& e) {
            throw DeviceError("stage '" + spec.name + "' (" + spec.kind + ") failed to queue its work: " +
                              e.what());
        }
        int64_t next = spec.out.items;
        if (final) {
            next = ops_[i]->output_items(items);
            if (next < 0 || next > spec.out.items)
                throw DeviceError("stage '" + spec.name + "' (" + spec.kind + ") reports " +
                                  std::to_string(next) + " output items for " + std::to_string(items) +
                                  " input items; a block holds " + std::to_string(spec.out.items));
            // The next op reads a zero-filled tail, as the first one does.
            if (i + 1 < ops_.size()) zero_tail(op_output(i, slot), spec.out, next);
        }
        items = next;
    }
    return items;
}

void StreamEngine::warm_up() {
    // One eager pass before capture: every op's kernels and library handles (cuBLAS, cuFFT) get
    // loaded and bound to the compute stream outside of capture; then the state is reset.
    const DriverApi& api = driver();
    enqueue_ops(0, block_items(), false);
    cu_check(api.cuStreamSynchronize(compute_), "cuStreamSynchronize",
             "running the warm-up block (stages " + stage_names() + ")");
    reset_ops_locked();
}

void StreamEngine::capture_graphs() {
    const DriverApi& api = driver();
    if (!api.cuStreamBeginCapture || !api.cuStreamEndCapture || !api.cuGraphInstantiateWithFlags ||
        !api.cuGraphLaunch || !api.cuGraphExecDestroy || !api.cuGraphDestroy)
        throw DeviceError("this CUDA driver has no graph capture API (cuStreamBeginCapture_v2, "
                          "cuGraphInstantiateWithFlags...); update the driver or use use_graph=False");
    for (size_t s = 0; s < slots_.size(); ++s) {
        Slot& slot = *slots_[s];
        slot.graph = capture_slot(static_cast<int>(s), false);
        if (options_.single_stream) slot.block_graph = capture_slot(static_cast<int>(s), true);
    }
    cu_check(api.cuStreamSynchronize(compute_), "cuStreamSynchronize", "uploading the engine's graphs");
}

CUgraphExec StreamEngine::capture_slot(int s, bool with_copies) {
    const DriverApi& api = driver();
    const std::string what = "capturing the " + std::string(with_copies ? "copies and ops" : "ops") +
                             " of slot " + std::to_string(s) + " into a CUDA graph (stages " +
                             stage_names() + ")";
    cu_check(api.cuStreamBeginCapture(compute_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
             "cuStreamBeginCapture_v2", what);
    try {
        // The copies (mapped_io: the pull and push kernels) as the eager path queues them; with
        // direct_output the last op writes the mapped output and there is no push.
        const bool direct = with_copies && direct_output_;
        if (with_copies) enqueue_upload(s, compute_);
        // a graph's sinks: each downloaded where its branch ends (enqueue_graph_ops)
        enqueue_ops(s, block_items(), false, direct ? slots_[static_cast<size_t>(s)]->h_out->device_ptr() : 0,
                    true, with_copies && plan_.enabled);
        if (with_copies && !direct && !plan_.enabled) enqueue_download(s, compute_);
    } catch (...) {
        CUgraph broken = nullptr;
        api.cuStreamEndCapture(compute_, &broken);
        if (broken) api.cuGraphDestroy(broken);
        throw;
    }
    CUgraph graph = nullptr;
    cu_check(api.cuStreamEndCapture(compute_, &graph), "cuStreamEndCapture",
             what + "; an op synchronised, allocated or touched another stream inside enqueue()");
    CUgraphExec exec = nullptr;
    CUresult r = api.cuGraphInstantiateWithFlags(&exec, graph, 0);
    api.cuGraphDestroy(graph);
    cu_check(r, "cuGraphInstantiateWithFlags", what);
    if (api.cuGraphUpload) cu_check(api.cuGraphUpload(exec, compute_), "cuGraphUpload", what);
    return exec;
}

void StreamEngine::reset_ops_locked() {
    const DriverApi& api = driver();
    for (size_t i = 0; i < ops_.size(); ++i) {
        try {
            ops_[i]->reset(compute_);
        } catch (const DeviceError& e) {
            throw DeviceError(std::string(e.what()) + " [resetting stage '" + specs_[i].name + "']",
                              e.call(), e.code(), e.code_name());
        }
    }
    cu_check(api.cuStreamSynchronize(compute_), "cuStreamSynchronize", "resetting the ops' state");
}

// ---------------------------------------------------------------------------------------------
// State: failures, idle, reset, counters, trace, gpu timing
// ---------------------------------------------------------------------------------------------

void StreamEngine::fail(const std::string& message, const std::string& call, int code,
                        const std::string& code_name) {
    {
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!failed_.load()) {
            error_message_ = message;
            error_call_ = call;
            error_code_ = code;
            error_code_name_ = code_name;
        }
        failed_.store(true);
    }
    to_caller_.notify();
}

void StreamEngine::rethrow_failure() const {
    std::lock_guard<std::mutex> lock(error_mutex_);
    throw DeviceError(error_message_, error_call_, error_code_, error_code_name_);
}

void StreamEngine::check_usable(const char* what) const {
    if (closed_.load()) throw Error(std::string("StreamEngine.") + what + "(): the engine is closed");
    if (failed_.load()) rethrow_failure();
}

void StreamEngine::wait_idle() {
    to_caller_.wait([&] {
        return (completed_.load() == submitted_.load() && sched_done_.load() == sched_posted_.load()) ||
               failed_.load();
    }, options_.spin_us);
    if (failed_.load()) rethrow_failure();
}

void StreamEngine::reset() {
    std::lock_guard<std::mutex> control(control_mutex_);
    check_usable("reset");
    ExclusiveGuard guard(exclusive_);
    wait_idle();
    device_->make_current();
    reset_ops_locked();
    for (int k = 0; k < options_.slots; ++k) reset_nonfinite(k);
}

EngineCounters StreamEngine::counters() const {
    EngineCounters c;
    c.blocks = counters_.blocks.load();
    c.h2d_copies = counters_.h2d_copies.load();
    c.d2h_copies = counters_.d2h_copies.load();
    c.completion_waits = counters_.completion_waits.load();
    c.graph_launches = counters_.graph_launches.load();
    c.eager_blocks = counters_.eager_blocks.load();
    c.chunks = counters_.chunks.load();
    c.device_blocks = counters_.device_blocks.load();
    c.d2d_in = counters_.d2d_in.load();
    c.d2d_out = counters_.d2d_out.load();
    return c;
}

void StreamEngine::set_trace(size_t capacity) {
    std::lock_guard<std::mutex> lock(trace_mutex_);
    trace_.assign(capacity, BlockTrace{});
    trace_count_ = 0;
    tracing_.store(capacity > 0);
}

void StreamEngine::record_trace(const BlockTrace& t) {
    std::lock_guard<std::mutex> lock(trace_mutex_);
    if (trace_.empty()) return;
    trace_[trace_count_ % trace_.size()] = t;
    ++trace_count_;
}

std::vector<BlockTrace> StreamEngine::trace() const {
    std::lock_guard<std::mutex> lock(trace_mutex_);
    const size_t cap = trace_.size();
    const size_t n = static_cast<size_t>(std::min<uint64_t>(trace_count_, cap));
    std::vector<BlockTrace> out;
    out.reserve(n);
    for (uint64_t k = trace_count_ - n; k < trace_count_; ++k) out.push_back(trace_[k % cap]);
    return out;
}

void StreamEngine::set_gpu_timing(bool on) {
    std::lock_guard<std::mutex> control(control_mutex_);
    check_usable("set_gpu_timing");
    ExclusiveGuard guard(exclusive_);
    wait_idle();
    if (on) {
        device_->make_current();
        const DriverApi& api = driver();
        for (auto& slot : slots_)
            for (CUevent* e : {&slot->ev_t0, &slot->ev_t1})
                if (!*e)
                    cu_check(api.cuEventCreate(e, CU_EVENT_DEFAULT), "cuEventCreate",
                             "creating the block timing events (set_gpu_timing)");
    }
    last_gpu_ns_.store(0);
    last_launch_ns_.store(0);
    gpu_timing_.store(on, std::memory_order_release);
}

}  // namespace gk
