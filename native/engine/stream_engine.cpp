#include "stream_engine.h"
#include "dispatcher.h"
#include "spin.h"
#include "release_wait.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <deque>
#include <stdexcept>

#include "gk/device.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/memory.h"

namespace gk {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// Completion polls once the spin phase is over and a new submission may still arrive.
constexpr int kPollUs = 100;
constexpr int kMaxSlots = 16;


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

// Timing events, destroyed on scope exit.
struct TimingEvents {
    const DriverApi& api;
    std::vector<CUevent> events;
    TimingEvents(const DriverApi& a, size_t n) : api(a) {
        events.reserve(n);
        for (size_t i = 0; i < n; ++i) {
            CUevent e = nullptr;
            cu_check(api.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate", "creating timing events");
            events.push_back(e);
        }
    }
    ~TimingEvents() {
        for (CUevent e : events) api.cuEventDestroy(e);
    }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// SpinWaiter
// ---------------------------------------------------------------------------------------------

template <class Ready>
void SpinWaiter::wait(Ready ready, int spin_us) {
    if (ready()) return;
    if (spin_us > 0) {
        const auto deadline = Clock::now() + std::chrono::microseconds(spin_us);
        unsigned i = 0;
        while (!ready()) {
            cpu_relax();
            if ((++i & 15u) == 0 && Clock::now() >= deadline) break;
        }
        if (ready()) return;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1);
    cv_.wait(lock, ready);
    sleepers_.fetch_sub(1);
}

template <class Ready>
bool SpinWaiter::wait_for(Ready ready, int spin_us, int timeout_us) {
    if (ready()) return true;
    if (spin_us > 0) {
        const auto deadline = Clock::now() + std::chrono::microseconds(spin_us);
        unsigned i = 0;
        while (!ready()) {
            cpu_relax();
            if ((++i & 15u) == 0 && Clock::now() >= deadline) break;
        }
        if (ready()) return true;
    }
    std::unique_lock<std::mutex> lock(mutex_);
    sleepers_.fetch_add(1);
    bool ok = cv_.wait_for(lock, std::chrono::microseconds(timeout_us), ready);
    sleepers_.fetch_sub(1);
    return ok;
}

void SpinWaiter::notify() {
    // Dekker-style: the state was published with a seq_cst store before this seq_cst load, and
    // a sleeper registers (seq_cst) before it re-checks the state under the mutex.
    if (sleepers_.load() > 0) {
        { std::lock_guard<std::mutex> lock(mutex_); }
        cv_.notify_all();
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting for a release time (ReleaseWait, wait_until_ns)
// ---------------------------------------------------------------------------------------------

uint64_t monotonic_ns() { return now_ns(); }

void wait_until_ns(uint64_t t_ns, int spin_us) {
    // a release with nothing to prewarm (the sleep ends by this thread's learned lateness: wake.h)
    wait_for_release(t_ns, t_ns, spin_us > 0 ? static_cast<uint64_t>(spin_us) * 1000ULL : 0, [](uint64_t) {});
}

// ---------------------------------------------------------------------------------------------
// Construction and teardown
// ---------------------------------------------------------------------------------------------

StreamEngine::StreamEngine(std::shared_ptr<Device> device, std::vector<OpSpec> ops,
                           EngineOptions options)
    : device_(std::move(device)), specs_(std::move(ops)), options_(options) {
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
        if (i > 0 && !same_layout(specs_[i - 1].out, s.in))
            throw std::invalid_argument("stage '" + s.name + "' takes " + desc_text(s.in) +
                                        " but stage '" + specs_[i - 1].name + "' produces " +
                                        desc_text(specs_[i - 1].out));
        s.params.kind = s.kind;
        s.params.stage = s.name;
    }
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
    if (options_.mapped_io || options_.flag_wait) setup_mapped_io();
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
    direct_output_ = options_.mapped_io && options_.direct_output && options_.use_graph && !options_.flag_wait &&
                     !ops_.empty() && ops_.back()->writes_output_once();
    const size_t in_bytes = input_desc().nbytes(), out_bytes = output_desc().nbytes();
    {
        // The pool's first grant sized up front: every edge and slot buffer in one driver
        // allocation (DeviceMemoryPool::reserve), instead of one cuMemAlloc each.
        std::vector<size_t> sizes;
        for (size_t i = 0; i + 1 < specs_.size(); ++i) sizes.push_back(specs_[i].out.nbytes());
        for (int k = 0; k < options_.slots; ++k) {
            sizes.push_back(in_bytes);
            sizes.push_back(out_bytes);
        }
        device_->memory_pool().reserve(sizes);
    }
    for (size_t i = 0; i + 1 < specs_.size(); ++i) {
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
        if (options_.mapped_io && options_.inline_submit && options_.overlap_fill) {
            // one word per pull CTA, each in a 64-byte line of its own (kernels/io.cu)
            slot->ready = std::make_unique<PinnedBuffer>(device_, 64 * static_cast<size_t>(io_pull_grid_), true);
            std::memset(slot->ready->data(), 0, slot->ready->nbytes());
            set_ready(*slot, 1u);
        }
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
    try {
        ops_.clear();  // before the streams: an op's library handles may still refer to them
        edges_.clear();
        slots_.clear();  // pinned buffers stay alive while NumPy views hold them
        nf_records_.reset();
        nf_flags_.reset();  // NumPy views of the flags keep their memory
        check_finite_ = nullptr;
        // mapped I/O
        io_flag_.reset();
        io_state_.reset();
        io_pull_ = io_push_ = io_touch_ = nullptr;
        io_module_.reset();
    } catch (...) {
    }
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

int64_t StreamEngine::enqueue_ops(int slot, int64_t n, bool final, CUdeviceptr last_out) {
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
    enqueue_ops(0, input_desc().items, false);
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
        if (io_touch_ && options_.mapped_io) slot.prewarm_graph = capture_prewarm(static_cast<int>(s));
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
        enqueue_ops(s, input_desc().items, false, direct ? slots_[static_cast<size_t>(s)]->h_out->device_ptr() : 0);
        if (with_copies && !direct) enqueue_download(s, compute_, true);
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

CUresult StreamEngine::launch_io_touch(const Slot& slot) {
    // gk_io_touch: one thread per page of the slot's pinned input and output, read through the mapping
    CUdeviceptr a = slot.h_in->device_ptr(), b = slot.h_out->device_ptr();
    unsigned long long na = slot.h_in->nbytes(), nb = slot.h_out->nbytes();
    void* params[] = {&a, &na, &b, &nb};
    const unsigned pages = static_cast<unsigned>((na + 4095) / 4096 + (nb + 4095) / 4096);
    return driver().cuLaunchKernel(io_touch_, (pages + 127) / 128, 1, 1, 128, 1, 1, 0, compute_, params, nullptr);
}

CUgraphExec StreamEngine::capture_prewarm(int s) {
    // The prewarm's touch of the slot as a graph: launched the way a block is (cuGraphLaunch on
    // the compute stream, then an event), so the prewarm also runs the host side of a block's
    // launch, whose code and data a sleeping core loses (a paced block's launch took ~8 us after
    // a sleep against ~2.4 us when the thread never slept, H200)
    const DriverApi& api = driver();
    const std::string what = "capturing slot " + std::to_string(s) + "'s prewarm into a CUDA graph";
    cu_check(api.cuStreamBeginCapture(compute_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture_v2", what);
    const CUresult launched = launch_io_touch(*slots_[static_cast<size_t>(s)]);
    CUgraph graph = nullptr;
    const CUresult ended = api.cuStreamEndCapture(compute_, &graph);
    if (launched != CUDA_SUCCESS || ended != CUDA_SUCCESS) {
        if (graph) api.cuGraphDestroy(graph);
        cu_check(launched != CUDA_SUCCESS ? launched : ended,
                 launched != CUDA_SUCCESS ? "cuLaunchKernel" : "cuStreamEndCapture", what);
    }
    CUgraphExec exec = nullptr;
    const CUresult r = api.cuGraphInstantiateWithFlags(&exec, graph, 0);
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
// The per-block path (worker thread)
// ---------------------------------------------------------------------------------------------

void StreamEngine::enqueue_block(int s) {
    Slot& slot = *slots_[static_cast<size_t>(s)];
    slot.timed = gpu_timing_.load(std::memory_order_acquire) && slot.ev_t0 && slot.ev_t1;
    if (!slot.timed) {
        enqueue_chunk(s, 0, units_total_, nullptr, nullptr);
        return;
    }
    // the host's side too: queueing a block is serial work for whoever launches (a dispatcher)
    const uint64_t t0 = now_ns();
    enqueue_chunk(s, 0, units_total_, slot.ev_t0, slot.ev_t1);
    last_launch_ns_.store(std::max<uint64_t>(1, now_ns() - t0), std::memory_order_release);
}

void StreamEngine::note_gpu_time(Slot& slot) {
    slot.gpu_ns = 0;
    if (!slot.timed) return;
    slot.timed = false;
    float ms = 0.0f;
    // the block is done, so both events completed; a driver that cannot time them leaves 0
    if (driver().cuEventElapsedTime(&ms, slot.ev_t0, slot.ev_t1) == CUDA_SUCCESS && ms > 0.0f)
        slot.gpu_ns = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(ms) * 1e6));
    last_gpu_ns_.store(slot.gpu_ns, std::memory_order_release);
}


// ---------------------------------------------------------------------------------------------
// mapped I/O (EngineOptions::mapped_io, flag_wait; docs/cuda.md, "Mapped I/O")
// ---------------------------------------------------------------------------------------------

namespace {
constexpr unsigned kIoThreads = 128;

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
    if (options_.flag_wait && !options_.mapped_io)
        throw std::invalid_argument("flag_wait needs mapped_io=True: the push kernel of mapped I/O writes "
                                    "the flag");
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
    io_touch_ = io_module_->function("gk_io_touch")->handle();
    // the prewarm's event, made here rather than on the first prewarm: created lazily, it could
    // race close() (a prewarm past its closed_ check while teardown runs) and outlive the engine
    cu_check(api.cuEventCreate(&prewarm_event_, CU_EVENT_DISABLE_TIMING), "cuEventCreate", "creating the prewarm event");
    io_pull_grid_ = io_grid(input_desc().nbytes(), p.multiprocessors);
    io_push_grid_ = io_grid(output_desc().nbytes(), p.multiprocessors);
    if (options_.flag_wait) {
        io_flag_ = std::make_unique<PinnedBuffer>(device_, 64, true);  // a cache line of its own
        std::memset(io_flag_->data(), 0, io_flag_->nbytes());
        io_state_ = std::make_unique<DeviceBuffer>(device_, 2 * sizeof(unsigned long long));
        io_state_->memset(0, io_state_->nbytes(), 0, nullptr);
        io_pushes_.store(0);
    }
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
    if (!options_.mapped_io) {
        cu_check(api.cuMemcpyHtoDAsync(slot.d_in->ptr(), slot.h_in->data(), input_desc().nbytes(), stream),
                 "cuMemcpyHtoDAsync_v2", "copying a block to the GPU");
        CUdeviceptr data = slot.d_in->ptr();
        unsigned long long words = input_desc().nbytes() / 4;
        void* check[] = {&data, &words, &nf_record, &nf_flag, &nf_zero};
        const CUresult r =
            api.cuLaunchKernel(check_finite_, check_grid_, 1, 1, 256, 1, 1, 0, stream, check, nullptr);
        if (r != CUDA_SUCCESS)
            cu_check(r, "cuLaunchKernel", "launching gk_check_finite (a block's input checked for NaN/Inf)");
        return;
    }
    CUdeviceptr dst = slot.d_in->ptr(), src = slot.h_in->device_ptr();
    CUdeviceptr ready = slot.ready ? slot.ready->device_ptr() : 0;
    unsigned long long nbytes = input_desc().nbytes();
    void* params[] = {&dst, &src, &nbytes, &ready, &nf_record, &nf_flag, &nf_zero};
    const CUresult r =
        api.cuLaunchKernel(io_pull_, io_pull_grid_, 1, 1, kIoThreads, 1, 1, 0, stream, params, nullptr);
    if (r != CUDA_SUCCESS)
        cu_check(r, "cuLaunchKernel", "launching gk_io_pull (a block's input from mapped host memory)");
}

void StreamEngine::enqueue_download(int s, CUstream stream, bool capturing) {
    const DriverApi& api = driver();
    Slot& slot = *slots_[static_cast<size_t>(s)];
    if (!options_.mapped_io) {
        cu_check(api.cuMemcpyDtoHAsync(slot.h_out->data(), slot.d_out->ptr(), output_desc().nbytes(), stream),
                 "cuMemcpyDtoHAsync_v2", "copying a block from the GPU");
        return;
    }
    CUdeviceptr dst = slot.h_out->device_ptr(), src = slot.d_out->ptr();
    unsigned long long nbytes = output_desc().nbytes();
    CUdeviceptr flag = io_flag_ ? io_flag_->device_ptr() : 0;
    CUdeviceptr state = io_state_ ? io_state_->ptr() : 0;
    void* params[] = {&dst, &src, &nbytes, &flag, &state};
    const CUresult r =
        api.cuLaunchKernel(io_push_, io_push_grid_, 1, 1, kIoThreads, 1, 1, 0, stream, params, nullptr);
    if (r != CUDA_SUCCESS)
        cu_check(r, "cuLaunchKernel", "launching gk_io_push (a block's output to mapped host memory)");
    if (flag && !capturing) note_flagged_push(slot);
}

void StreamEngine::note_flagged_push(Slot& slot) {
    // Every flagged push runs on the compute stream in the order it was queued, and each adds one
    // to the flag: the flag reaches this count exactly when this push has written the output.
    slot.flag_seq = io_pushes_.fetch_add(1, std::memory_order_relaxed) + 1;
}

CUresult StreamEngine::query_block_done(const Slot& slot, bool spinning) const {
    if (slot.flag_seq != 0) {
        // Acquire: the output, which gk_io_push fenced before the flag, is read after this load.
        const auto* flag = static_cast<const unsigned long long*>(io_flag_->data());
        if (__atomic_load_n(flag, __ATOMIC_ACQUIRE) >= slot.flag_seq) return CUDA_SUCCESS;
        if (spinning) return CUDA_ERROR_NOT_READY;
    }
    return driver().cuEventQuery(slot.ev_done);
}

void StreamEngine::worker_main() {
    try {
        device_->make_current();
        const DriverApi& api = driver();
        const size_t K = slots_.size();
        const int spin = options_.spin_us;
        std::deque<int> inflight;
        uint64_t taken = 0;
        auto take_new = [&] {
            const uint64_t available = submitted_.load();
            while (taken < available) {
                const int s = ring_[taken % K];
                ++taken;
                enqueue_block(s);
                inflight.push_back(s);
            }
        };
        auto more_or_stop = [&] { return submitted_.load() > taken || stop_.load(); };
        auto more = [&] { return submitted_.load() > taken; };  // while draining, stop changes nothing
        for (;;) {
            take_new();
            if (inflight.empty()) {
                if (stop_.load() && submitted_.load() == taken) break;
                to_worker_.wait(more_or_stop, spin);
                continue;
            }
            const int s = inflight.front();
            Slot& slot = *slots_[static_cast<size_t>(s)];
            const auto deadline = Clock::now() + std::chrono::microseconds(spin);
            for (;;) {
                // flag_wait: the io flag while spinning, then the event (mapped I/O)
                const CUresult r = query_block_done(slot, slot.flag_seq != 0 && Clock::now() < deadline);
                if (r == CUDA_SUCCESS) break;
                if (r != CUDA_ERROR_NOT_READY)
                    cu_check(r, "cuEventQuery",
                             "waiting for a block of stages " + stage_names() + " (slot " + std::to_string(s) + ")");
                if (submitted_.load() > taken) {
                    // Queue the next block at once: its H2D overlaps this block's compute.
                    take_new();
                    continue;
                }
                if (inflight.size() == K) {
                    // Every slot is in flight: nothing can be handed over until this one is done.
                    const CUresult rs = api.cuEventSynchronize(slot.ev_done);
                    if (rs != CUDA_SUCCESS)
                        cu_check(rs, "cuEventSynchronize",
                                 "waiting for a block of stages " + stage_names() + " (slot " + std::to_string(s) + ")");
                    break;
                }
                if (Clock::now() < deadline) {
                    cpu_relax();
                    continue;
                }
                to_worker_.wait_for(more, 0, kPollUs);
            }
            slot.flag_seq = 0;
            slot.t_done_seen = now_ns();
            note_gpu_time(slot);
            counters_.completion_waits.fetch_add(1, std::memory_order_relaxed);
            inflight.pop_front();
            counters_.blocks.fetch_add(1, std::memory_order_relaxed);
            slot.state.store(kDone);
            completed_.fetch_add(1);
            to_caller_.notify();
        }
    } catch (const DeviceError& e) {
        fail(e.what(), e.call(), e.code(), e.code_name());
    } catch (const std::exception& e) {
        fail(std::string("the engine's worker failed: ") + e.what(), {}, 0, {});
    }
}

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

// ---------------------------------------------------------------------------------------------
// Caller side
// ---------------------------------------------------------------------------------------------

void StreamEngine::check_submission(int s, int64_t n_valid, bool final) const {
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    const int64_t items = input_desc().items;
    if (n_valid < 0 || n_valid > items)
        throw std::invalid_argument("a block holds 0.." + std::to_string(items) + " items, got " +
                                    std::to_string(n_valid));
    if (n_valid < items && !final)
        throw std::invalid_argument("a partial block (" + std::to_string(n_valid) + " of " +
                                    std::to_string(items) + " items) must be the final block of the stream");
}

void StreamEngine::submit(int s, int64_t n_valid, bool final) {
    check_usable("submit");
    if (exclusive_.load())
        throw std::invalid_argument("submit() while reset() or a timing method runs on this engine");
    check_submission(s, n_valid, final);
    Slot& slot = *slots_[static_cast<size_t>(s)];
    init_input(slot);  // never filled nor viewed: a block of zeros, as before
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kSubmitted))
        throw std::invalid_argument("slot " + std::to_string(s) +
                                    " is still in flight: wait() for it before submitting it again");
    slot.n_in = n_valid;
    slot.final = final;
    std::shared_ptr<Dispatcher> scheduled;
    bool helps = false;
    {
        // One producer at a time: the ring index and the published count move together.
        std::lock_guard<std::mutex> lock(producer_mutex_);
        if (dispatcher_) {
            // Scheduled mode: the block becomes a scheduler task; its hand-over time is its
            // arrival (read under the mutex, so one engine's arrivals never go backwards).
            sched_posted_.fetch_add(1);
            try {
                dispatcher_->post(this, sched_stream_, s, Dispatcher::now_ns());
            } catch (...) {
                sched_posted_.fetch_sub(1);
                slot.state.store(kFree);
                throw;
            }
            scheduled = dispatcher_;
            helps = help_dispatcher_;
        } else {
            const uint64_t k = submitted_.load();
            ring_[k % slots_.size()] = s;
            submitted_.store(k + 1);
        }
    }
    if (scheduled) {
        // a realtime stream launches it now if the scheduler says so, whether the worker runs or not
        if (helps) scheduled->help(this, true);
    } else {
        to_worker_.notify();
    }
}

int64_t StreamEngine::wait(int s) {
    if (closed_.load()) throw Error("StreamEngine.wait(): the engine is closed");
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    Slot& slot = *slots_[static_cast<size_t>(s)];
    if (slot.state.load() == kFree)
        throw std::invalid_argument("slot " + std::to_string(s) + " was not submitted");
    auto ready = [&] { return slot.state.load() == kDone || failed_.load(); };
    std::shared_ptr<Dispatcher> helped;
    {
        std::lock_guard<std::mutex> lock(producer_mutex_);
        if (help_dispatcher_) helped = dispatcher_;
    }
    if (helped && !ready()) {
        // A realtime stream helps the dispatcher while spinning (polling turns see this block
        // too), so that the hand-back does not wait for its worker thread to get a CPU.
        const auto deadline = Clock::now() + std::chrono::microseconds(options_.spin_us);
        for (unsigned i = 1; !ready(); ++i) {
            if (helped->help(this, false)) continue;
            cpu_relax();
            if ((i & 15u) == 0 && Clock::now() >= deadline) break;
        }
    }
    to_caller_.wait(ready, helped ? 0 : options_.spin_us);
    if (slot.state.load() == kDone) {
        const int64_t n = slot.n_out;
        slot.state.store(kFree);
        return n;
    }
    rethrow_failure();
}

namespace {
// Copies into pinned memory with non-temporal stores where the CPU allows it: the GPU's DMA then
// reads the block from memory instead of snooping the lines the CPU has just dirtied in its caches.
void copy_to_pinned(unsigned char* dst, const unsigned char* src, size_t bytes) {
#if defined(__SSE2__)
    if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
        const size_t vecs = bytes / 16;
        auto* d = reinterpret_cast<__m128i*>(dst);
        const auto* v = reinterpret_cast<const __m128i*>(src);
        for (size_t i = 0; i < vecs; ++i) _mm_stream_si128(d + i, _mm_loadu_si128(v + i));
        std::memcpy(dst + vecs * 16, src + vecs * 16, bytes - vecs * 16);
        _mm_sfence();
        return;
    }
#endif
    std::memcpy(dst, src, bytes);
}
}  // namespace

void StreamEngine::fill(int s, const void* block, int64_t n) {
    check_fill(s, n);
    copy_into_slot(*slots_[static_cast<size_t>(s)], block, n);
}

void StreamEngine::check_fill(int s, int64_t n) const {
    const TensorDesc& in = input_desc();
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    if (n < 1 || n > in.items)
        throw std::invalid_argument("a block holds 1.." + std::to_string(in.items) + " items, got " +
                                    std::to_string(n));
    if (slots_[static_cast<size_t>(s)]->state.load() != kFree)
        throw std::invalid_argument("slot " + std::to_string(s) + " still holds a submitted block");
}

void StreamEngine::set_ready(Slot& slot, unsigned value) {
    // Release: the block's bytes (fenced by copy_to_pinned) before the words the pull kernel polls.
    auto* words = static_cast<unsigned*>(slot.ready->data());
    for (size_t k = 0; k < slot.ready->nbytes() / 64; ++k) __atomic_store_n(words + 16 * k, value, __ATOMIC_RELEASE);
    // The store must be visible before the launch that follows it reaches the GPU.
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void StreamEngine::copy_into_slot(Slot& slot, const void* block, int64_t n) {
    const TensorDesc& in = input_desc();
    const size_t item_bytes = dtype_size(in.dtype) * static_cast<size_t>(in.frames() ? in.bins : 1);
    const size_t full_row = item_bytes * static_cast<size_t>(in.items);
    const size_t row = item_bytes * static_cast<size_t>(n);
    auto* dst = static_cast<unsigned char*>(slot.h_in->data());
    const auto* src = static_cast<const unsigned char*>(block);
    if (n == in.items) {
        copy_to_pinned(dst, src, in.nbytes());
    } else {
        for (int64_t c = 0; c < in.channels; ++c) {
            copy_to_pinned(dst + c * full_row, src + c * row, row);
            std::memset(dst + c * full_row + row, 0, full_row - row);
        }
    }
    slot.in_init.store(true, std::memory_order_release);  // every byte of it written
}

int64_t StreamEngine::process(int s, const void* block, int64_t n, bool final, void* out,
                              int64_t out_row_items, const ReleaseWait* release) {
    if (closed_.load()) throw Error("StreamEngine.process(): the engine is closed");
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    if (release && release->release_ns) wait_release(s, *release, release->release_ns);
    const bool tracing = tracing_.load(std::memory_order_relaxed);
    BlockTrace t;
    if (tracing) t.call = now_ns();
    const bool scheduled = attached();
    const bool inline_ok = options_.inline_submit && !scheduled;
    // overlap_fill: a full block goes to the GPU first and into the pinned slot after
    const bool late = inline_ok && options_.mapped_io && options_.overlap_fill && n == input_desc().items &&
                      !final && !gpu_timing_.load(std::memory_order_relaxed);
    if (late) {
        check_fill(s, n);  // the copy comes after the launch (process_inline)
    } else {
        fill(s, block, n);
        if (tracing) t.filled = now_ns();
    }
    int64_t n_out = 0;
    if (!(inline_ok && process_inline(s, n, final, &n_out, late ? block : nullptr, tracing ? &t.filled : nullptr))) {
        if (late) {
            fill(s, block, n);
            if (tracing) t.filled = now_ns();
        }
        submit(s, n, final);
        n_out = wait(s);
    }
    if (tracing) t.woke = now_ns();
    if (out) copy_output(s, n_out, out, out_row_items > 0 ? out_row_items : n_out);
    if (tracing) {
        t.copied = out ? now_ns() : t.woke;
        const Slot& slot = *slots_[static_cast<size_t>(s)];
        t.launch_begin = slot.t_launch_begin;
        t.launched = slot.t_launched;
        t.done_seen = slot.t_done_seen;
        t.gpu_ns = slot.gpu_ns;
        t.scheduled = scheduled ? 1 : 0;
        record_trace(t);
    }
    return n_out;
}

void StreamEngine::wait_release(int s, const ReleaseWait& r, uint64_t return_at_ns) {
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    const uint64_t spin_ns = r.spin_us > 0 ? static_cast<uint64_t>(r.spin_us) * 1000ULL : 0;
    wait_for_release(r.release_ns, std::min(return_at_ns, r.release_ns), spin_ns, [&](uint64_t until) {
        if (r.prewarm) prewarm_slot(s, until, r.prewarm_lines);
    });
}

void StreamEngine::prewarm_slot(int s, uint64_t until_ns, bool lines) {
    const Slot& slot = *slots_[static_cast<size_t>(s)];
    // GPU first (it runs while the host touches below): the slot's pages once through their
    // mapping, on the compute stream (reads only: whatever runs on the stream before or after it is
    // unaffected), launched as a graph the way a block is
    bool gpu = false;
    if (io_touch_ && prewarm_event_ && options_.mapped_io && !failed_.load() && !closed_.load()) {
        try {
            const DriverApi& api = driver();
            device_->make_current();
            if (slot.prewarm_graph)
                cu_check(api.cuGraphLaunch(slot.prewarm_graph, compute_), "cuGraphLaunch", "launching the prewarm");
            else
                cu_check(launch_io_touch(slot), "cuLaunchKernel", "launching gk_io_touch (prewarm)");
            cu_check(api.cuEventRecord(prewarm_event_, compute_), "cuEventRecord", "prewarm");
            gpu = true;
        } catch (const std::exception&) {
            // a prewarm is an optimisation: a failure here shows up (and is reported) on the block itself
        }
    }
    touch_host(slot.h_in->data(), slot.h_in->nbytes(), lines ? 64 : 4096, slot.h_out->data(), slot.h_out->nbytes());
    if (!gpu) return;
    const DriverApi& api = driver();
    while (api.cuEventQuery(prewarm_event_) == CUDA_ERROR_NOT_READY && now_ns() < until_ns) cpu_relax();
}

bool StreamEngine::try_wait(int s, int64_t* n_out) {
    if (closed_.load()) throw Error("StreamEngine.try_wait(): the engine is closed");
    if (s < 0 || s >= slots())
        throw std::invalid_argument("slot " + std::to_string(s) + " does not exist (slots 0.." +
                                    std::to_string(slots() - 1) + ")");
    Slot& slot = *slots_[static_cast<size_t>(s)];
    if (slot.state.load() == kFree) throw std::invalid_argument("slot " + std::to_string(s) + " was not submitted");
    if (slot.state.load() != kDone && !failed_.load()) {
        std::shared_ptr<Dispatcher> helped;
        {
            std::lock_guard<std::mutex> lock(producer_mutex_);
            if (help_dispatcher_) helped = dispatcher_;
        }
        if (helped) helped->help(this, false);
    }
    if (slot.state.load() == kDone) {
        *n_out = slot.n_out;
        slot.state.store(kFree);
        return true;
    }
    if (failed_.load()) rethrow_failure();
    return false;
}

void StreamEngine::copy_output(int s, int64_t n_out, void* dst, int64_t row_items) const {
    if (s < 0 || s >= slots()) throw std::invalid_argument("no slot " + std::to_string(s));
    const TensorDesc& d = output_desc();
    if (n_out < 0 || n_out > d.items || row_items < n_out)
        throw std::invalid_argument("copy_output: " + std::to_string(n_out) + " items into rows of " +
                                    std::to_string(row_items) + " (block of " + std::to_string(d.items) + ")");
    const size_t item = dtype_size(d.dtype) * static_cast<size_t>(d.frames() ? d.bins : 1);
    const auto* src = static_cast<const unsigned char*>(slots_[static_cast<size_t>(s)]->h_out->data());
    auto* to = static_cast<unsigned char*>(dst);
    if (row_items == d.items && n_out == d.items) {
        std::memcpy(to, src, item * static_cast<size_t>(d.channels * d.items));
        return;
    }
    for (int64_t c = 0; c < d.channels; ++c)
        std::memcpy(to + static_cast<size_t>(c * row_items) * item, src + static_cast<size_t>(c * d.items) * item,
                    item * static_cast<size_t>(n_out));
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

bool StreamEngine::process_inline(int s, int64_t n_valid, bool final, int64_t* n_out, const void* late_block,
                                  uint64_t* filled_at) {
    // control_mutex_: reset(), close() and the timing methods cannot start (or tear the streams
    // down) while this thread uses them; when one of them holds it, take the worker path, which
    // refuses or queues exactly as without inline_submit.
    std::unique_lock<std::mutex> control(control_mutex_, std::try_to_lock);
    if (!control.owns_lock()) return false;
    check_usable("process");
    check_submission(s, n_valid, final);
    Slot& slot = *slots_[static_cast<size_t>(s)];
    {
        // Producers hand slots to the worker under producer_mutex_; with it held and every
        // handed-over block completed (completed_ == submitted_), the worker has nothing to issue
        // and nothing to wait for, and nothing new can reach it until the mutex is released.
        // Keep it until this block is queued, so that a block submitted meanwhile by another
        // thread is queued after this one on the same streams (stream order = state order).
        std::unique_lock<std::mutex> producer(producer_mutex_);
        // Idle = every other slot is free: each block handed to the worker was collected with
        // wait(). A submitted, uncollected block (done or not) sends this one through the worker
        // too, so the path depends on the call sequence only, never on timing.
        for (size_t k = 0; k < slots_.size(); ++k)
            if (static_cast<int>(k) != s && slots_[k]->state.load() != kFree) return false;
        // All collected, so all marked done; the worker counts a block completed just after it
        // marks the slot done: wait out that gap (nanoseconds; nothing else can be pending).
        while (completed_.load() != submitted_.load()) {
            if (failed_.load()) rethrow_failure();
            cpu_relax();
        }
        int expected = kFree;
        if (!slot.state.compare_exchange_strong(expected, kSubmitted))
            throw std::invalid_argument("slot " + std::to_string(s) +
                                        " is still in flight: wait() for it before submitting it again");
        slot.n_in = n_valid;
        slot.final = final;
        // overlap_fill: the pull kernel of this block waits for the ready word, set after the copy
        if (late_block) set_ready(slot, 0u);
        try {
            device_->make_current();  // the context on the calling thread (a no-op when it is)
            enqueue_block(s);
        } catch (const DeviceError& e) {
            if (late_block) set_ready(slot, 1u);  // never leave a queued pull waiting
            slot.state.store(kFree);
            fail(e.what(), e.call(), e.code(), e.code_name());
            throw;
        } catch (const std::exception& e) {
            if (late_block) set_ready(slot, 1u);
            slot.state.store(kFree);
            fail(std::string("queueing a block failed: ") + e.what(), {}, 0, {});
            rethrow_failure();
        }
    }
    if (late_block) {
        copy_into_slot(slot, late_block, n_valid);  // ends with a store fence (non-temporal stores)
        set_ready(slot, 1u);
        if (filled_at) *filled_at = now_ns();
    }
    // The block's completion, as the worker waits for it: spin on the event (flag_wait: on the io
    // flag, no driver call) for spin_us, then a blocking synchronise. One completion wait.
    const DriverApi& api = driver();
    auto what = [&] {  // built on the error path only
        return "waiting for a block of stages " + stage_names() + " (slot " + std::to_string(s) + ")";
    };
    try {
        const auto deadline = Clock::now() + std::chrono::microseconds(options_.spin_us);
        for (unsigned i = 0;; ++i) {
            const CUresult r = query_block_done(slot, true);
            if (r == CUDA_SUCCESS) break;
            if (r != CUDA_ERROR_NOT_READY) cu_check(r, "cuEventQuery", what());
            if ((i & 15u) == 15u && Clock::now() >= deadline) {
                const CUresult rs = api.cuEventSynchronize(slot.ev_done);
                if (rs != CUDA_SUCCESS) cu_check(rs, "cuEventSynchronize", what());
                break;
            }
            cpu_relax();
        }
    } catch (const DeviceError& e) {
        slot.state.store(kFree);
        fail(e.what(), e.call(), e.code(), e.code_name());
        throw;
    }
    slot.flag_seq = 0;
    slot.t_done_seen = now_ns();
    note_gpu_time(slot);
    counters_.completion_waits.fetch_add(1, std::memory_order_relaxed);
    counters_.blocks.fetch_add(1, std::memory_order_relaxed);
    inline_blocks_.fetch_add(1, std::memory_order_relaxed);
    *n_out = slot.n_out;
    slot.state.store(kFree);  // the caller's again, as after wait()
    return true;
}

void StreamEngine::wait_idle() {
    to_caller_.wait([&] {
        return (completed_.load() == submitted_.load() && sched_done_.load() == sched_posted_.load()) ||
               failed_.load();
    }, options_.spin_us);
    if (failed_.load()) rethrow_failure();
}

namespace {
struct ExclusiveGuard {
    std::atomic<bool>& flag;
    explicit ExclusiveGuard(std::atomic<bool>& f) : flag(f) { flag.store(true); }
    ~ExclusiveGuard() { flag.store(false); }
};
}  // namespace

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
    return c;
}

// ---------------------------------------------------------------------------------------------
// Chunks and the scheduler
// ---------------------------------------------------------------------------------------------

void StreamEngine::enqueue_op_units(int s, int64_t begin, int64_t end) {
    for (size_t i = 0; i < ops_.size(); ++i) {
        const int64_t first = unit_begin_[i];
        const int64_t last = i + 1 < ops_.size() ? unit_begin_[i + 1] : units_total_;
        const int64_t b = std::max(begin, first), e = std::min(end, last);
        if (b >= e) continue;
        const OpSpec& spec = specs_[i];
        try {
            ops_[i]->enqueue_units(compute_, op_input(i, s), op_output(i, s), b - first, e - first);
        } catch (const DeviceError& err) {
            throw DeviceError(std::string(err.what()) + " [stage '" + spec.name + "' (" + spec.kind + "), units " +
                                  std::to_string(b - first) + ".." + std::to_string(e - first) + "]",
                              err.call(), err.code(), err.code_name());
        } catch (const CompileError&) {
            throw;
        } catch (const std::exception& err) {
            throw DeviceError("stage '" + spec.name + "' (" + spec.kind + ") failed to queue units " +
                              std::to_string(b - first) + ".." + std::to_string(e - first) + ": " + err.what());
        }
    }
}

void StreamEngine::enqueue_chunk(int s, int64_t begin, int64_t end, CUevent start, CUevent stop) {
    const DriverApi& api = driver();
    Slot& slot = *slots_[static_cast<size_t>(s)];
    const int64_t U = units_total_;
    if (begin < 0 || end > U || begin >= end)
        throw std::invalid_argument("chunk [" + std::to_string(begin) + ", " + std::to_string(end) +
                                    ") is not a unit range of a block of " + std::to_string(U) + " units");
    const bool full = !slot.final && slot.n_in == input_desc().items;
    const bool whole = begin == 0 && end == U;
    const bool single = options_.single_stream;
    const bool resident = resident_.load();
    const char* what = "queueing a block";
    auto mark = [&](CUevent e) {
        if (e) cu_check(api.cuEventRecord(e, compute_), "cuEventRecord", "timing a chunk");
    };
    // Trace stamps (set_trace) only while tracing: two clock reads per chunk otherwise wasted.
    const bool tracing = tracing_.load(std::memory_order_relaxed);
    if (tracing && begin == 0) slot.t_launch_begin = now_ns();
    // the block is queued once its last chunk's calls return (every exit below)
    struct Stamp {
        uint64_t* at;
        ~Stamp() { if (at) *at = now_ns(); }
    } launched{tracing && end == U ? &slot.t_launched : nullptr};
    if (!full && end != U) {
        // A final (partial) block runs whole in its last chunk: its ops need n_in, not units.
        mark(start);
        mark(stop);
        return;
    }
    if (begin == 0 || !full) slot.flag_seq = 0;  // set again when this block's push writes the io flag
    if (single && full && whole && !resident && slot.block_graph) {
        // Latency mode: H2D, the ops and D2H in one graph on the compute stream (mapped_io: the
        // pull and push kernels instead of the copies; direct_output: the last op's own stores
        // to the mapped output are the block's D2H).
        mark(start);
        cu_check(api.cuGraphLaunch(slot.block_graph, compute_), "cuGraphLaunch", "launching a block's graph");
        mark(stop);
        if (options_.flag_wait) note_flagged_push(slot);
        counters_.h2d_copies.fetch_add(1, std::memory_order_relaxed);
        counters_.graph_launches.fetch_add(1, std::memory_order_relaxed);
        counters_.d2h_copies.fetch_add(1, std::memory_order_relaxed);
        slot.n_out = output_desc().items;
        cu_check(api.cuEventRecord(slot.ev_done, compute_), "cuEventRecord", what);
        return;
    }
    // Latency mode puts the copies on the compute stream (no cross-stream waits); otherwise they
    // run on their own streams so that block n+1's upload overlaps block n's compute.
    CUstream up = single ? compute_ : h2d_;
    CUstream down = single ? compute_ : d2h_;
    if ((begin == 0 || !full) && !resident) {
        enqueue_upload(s, up);
        counters_.h2d_copies.fetch_add(1, std::memory_order_relaxed);
        if (!single) {
            cu_check(api.cuEventRecord(slot.ev_h2d, h2d_), "cuEventRecord", what);
            cu_check(api.cuStreamWaitEvent(compute_, slot.ev_h2d, 0), "cuStreamWaitEvent", what);
        }
    }
    mark(start);  // after the upload: the chunk's cost is its compute
    if (!full || (whole && !slot.graph)) {
        slot.n_out = enqueue_ops(s, slot.n_in, slot.final);
        counters_.eager_blocks.fetch_add(1, std::memory_order_relaxed);
    } else if (whole) {
        cu_check(api.cuGraphLaunch(slot.graph, compute_), "cuGraphLaunch", "launching a block's graph");
        counters_.graph_launches.fetch_add(1, std::memory_order_relaxed);
        slot.n_out = output_desc().items;
    } else {
        enqueue_op_units(s, begin, end);
        counters_.chunks.fetch_add(1, std::memory_order_relaxed);
        if (end == U) counters_.eager_blocks.fetch_add(1, std::memory_order_relaxed);
        slot.n_out = output_desc().items;
    }
    mark(stop);
    if (end != U) return;
    if (resident) {
        cu_check(api.cuEventRecord(slot.ev_done, compute_), "cuEventRecord", what);
        return;
    }
    if (!single) {
        cu_check(api.cuEventRecord(slot.ev_comp, compute_), "cuEventRecord", what);
        cu_check(api.cuStreamWaitEvent(d2h_, slot.ev_comp, 0), "cuStreamWaitEvent", what);
    }
    enqueue_download(s, down, false);
    counters_.d2h_copies.fetch_add(1, std::memory_order_relaxed);
    cu_check(api.cuEventRecord(slot.ev_done, down), "cuEventRecord", what);
}

void StreamEngine::finish_scheduled(int s, uint64_t seen_ns, uint64_t gpu_ns) {
    Slot& slot = *slots_[static_cast<size_t>(s)];
    slot.t_done_seen = seen_ns;
    slot.gpu_ns = gpu_ns;
    counters_.completion_waits.fetch_add(1, std::memory_order_relaxed);
    counters_.blocks.fetch_add(1, std::memory_order_relaxed);
    slot.state.store(kDone);
    sched_done_.fetch_add(1);
    to_caller_.notify();
}

int64_t StreamEngine::process_split(int s, const void* block, int64_t n, bool final,
                                    const std::vector<int64_t>& cuts) {
    if (closed_.load()) throw Error("StreamEngine.process_split(): the engine is closed");
    for (size_t i = 0; i < cuts.size(); ++i)
        if (cuts[i] <= (i ? cuts[i - 1] : 0) || cuts[i] >= units_total_)
            throw std::invalid_argument("cuts must increase strictly between 0 and units_per_block (" +
                                        std::to_string(units_total_) + ")");
    std::lock_guard<std::mutex> control(control_mutex_);
    check_usable("process_split");
    check_submission(s, n, final);
    if (attached()) throw std::invalid_argument("process_split() on an engine attached to a dispatcher");
    wait_idle();
    for (size_t k = 0; k < slots_.size(); ++k)
        if (slots_[k]->state.load() != kFree)
            throw std::invalid_argument("process_split() needs an idle engine: collect every submitted slot first");
    fill(s, block, n);
    Slot& slot = *slots_[static_cast<size_t>(s)];
    slot.n_in = n;
    slot.final = final;
    device_->make_current();
    const DriverApi& api = driver();
    std::vector<int64_t> bounds{0};
    bounds.insert(bounds.end(), cuts.begin(), cuts.end());
    bounds.push_back(units_total_);
    try {
        for (size_t i = 0; i + 1 < bounds.size(); ++i) enqueue_chunk(s, bounds[i], bounds[i + 1], nullptr, nullptr);
        cu_check(api.cuEventSynchronize(slot.ev_done), "cuEventSynchronize",
                 "waiting for a split block of stages " + stage_names());
    } catch (const DeviceError& e) {
        fail(e.what(), e.call(), e.code(), e.code_name());
        throw;
    }
    counters_.completion_waits.fetch_add(1, std::memory_order_relaxed);
    counters_.blocks.fetch_add(1, std::memory_order_relaxed);
    return slot.n_out;
}

std::vector<uint64_t> StreamEngine::pump_resident(double seconds) {
    if (!resident_.load()) throw std::invalid_argument("pump_resident() needs resident mode (set_resident(true))");
    if (!(seconds > 0)) throw std::invalid_argument("seconds must be > 0");
    for (size_t k = 0; k < slots_.size(); ++k)
        if (slots_[k]->state.load() != kFree)
            throw std::invalid_argument("pump_resident() needs an idle engine: collect every submitted slot first");
    pump_stop_.store(false);
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::vector<uint64_t> stamps;
    stamps.reserve(1 << 16);
    const int K = slots();
    const int64_t items = input_desc().items;
    for (int s = 0; s < K; ++s) submit(s, items, false);
    for (uint64_t b = 0;; ++b) {
        const int s = static_cast<int>(b % static_cast<uint64_t>(K));
        wait(s);
        stamps.push_back(Dispatcher::now_ns());
        if (pump_stop_.load() || Clock::now() >= end) break;
        submit(s, items, false);
    }
    for (int s = 0; s < K; ++s)  // drain the ones still in flight
        if (slots_[static_cast<size_t>(s)]->state.load() != kFree) {
            wait(s);
            stamps.push_back(Dispatcher::now_ns());
        }
    return stamps;
}

bool StreamEngine::attached() const {
    std::lock_guard<std::mutex> lock(producer_mutex_);
    return dispatcher_ != nullptr;
}

void StreamEngine::attach(std::shared_ptr<Dispatcher> dispatcher, uint32_t sched_stream) {
    if (!dispatcher) throw std::invalid_argument("attach() needs a dispatcher");
    std::lock_guard<std::mutex> control(control_mutex_);
    check_usable("attach");
    if (dispatcher->device()->index() != device_->index())
        throw std::invalid_argument("the dispatcher runs GPU " + std::to_string(dispatcher->device()->index()) +
                                    ", this engine GPU " + std::to_string(device_->index()));
    wait_idle();
    for (size_t k = 0; k < slots_.size(); ++k)
        if (slots_[k]->state.load() != kFree)
            throw std::invalid_argument("attach() needs an idle engine: collect every submitted slot first");
    if (attached()) throw std::invalid_argument("the engine is already attached to a dispatcher");
    const bool realtime = dispatcher->attach(this, sched_stream);
    std::lock_guard<std::mutex> lock(producer_mutex_);
    dispatcher_ = std::move(dispatcher);
    sched_stream_ = sched_stream;
    help_dispatcher_ = realtime;
}

void StreamEngine::detach() {
    std::shared_ptr<Dispatcher> d;
    {
        std::lock_guard<std::mutex> control(control_mutex_);
        if (!attached()) return;
        // In-flight blocks finish first (or the engine has failed: its tasks get cancelled).
        try {
            wait_idle();
        } catch (const DeviceError&) {
            // Failed: the dispatcher cancels the engine's remaining tasks below.
        }
        std::lock_guard<std::mutex> lock(producer_mutex_);
        d = std::move(dispatcher_);
        dispatcher_.reset();
        help_dispatcher_ = false;
    }
    d->detach(this);
}

// ---------------------------------------------------------------------------------------------
// Benchmark entry points
// ---------------------------------------------------------------------------------------------

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

std::vector<double> StreamEngine::time_resident(int iterations) {
    if (iterations < 1) throw std::invalid_argument("iterations must be >= 1");
    std::lock_guard<std::mutex> control(control_mutex_);
    check_usable("time_resident");
    ExclusiveGuard guard(exclusive_);
    wait_idle();
    device_->make_current();
    const DriverApi& api = driver();
    Slot& slot = *slots_[0];
    init_input(slot);
    cu_check(api.cuMemcpyHtoDAsync(slot.d_in->ptr(), slot.h_in->data(), input_desc().nbytes(), compute_),
             "cuMemcpyHtoDAsync_v2", "copying the resident input block");
    constexpr int kChunk = 128;
    TimingEvents ev(api, 2 * kChunk);
    std::vector<double> seconds;
    seconds.reserve(static_cast<size_t>(iterations));
    for (int i = 0; i < iterations; ++i) {
        const int k = i % kChunk;
        cu_check(api.cuEventRecord(ev.events[2 * k], compute_), "cuEventRecord");
        if (slot.graph)
            cu_check(api.cuGraphLaunch(slot.graph, compute_), "cuGraphLaunch", "timing a resident block");
        else
            enqueue_ops(0, input_desc().items, false);
        cu_check(api.cuEventRecord(ev.events[2 * k + 1], compute_), "cuEventRecord");
        if (k == kChunk - 1 || i == iterations - 1) {
            cu_check(api.cuEventSynchronize(ev.events[2 * k + 1]), "cuEventSynchronize",
                     "timing resident blocks of stages " + stage_names());
            for (int j = 0; j <= k; ++j) {
                float ms = 0.0f;
                cu_check(api.cuEventElapsedTime(&ms, ev.events[2 * j], ev.events[2 * j + 1]),
                         "cuEventElapsedTime");
                seconds.push_back(static_cast<double>(ms) * 1e-3);
            }
        }
    }
    reset_ops_locked();
    return seconds;
}

std::pair<double, double> StreamEngine::time_streamed(int64_t blocks, int nslots) {
    if (blocks < 1) throw std::invalid_argument("blocks must be >= 1");
    if (nslots < 1 || nslots > slots())
        throw std::invalid_argument("slots must be between 1 and the engine's " + std::to_string(slots()));
    std::lock_guard<std::mutex> control(control_mutex_);
    check_usable("time_streamed");
    ExclusiveGuard guard(exclusive_);
    wait_idle();
    device_->make_current();
    const DriverApi& api = driver();
    const size_t in_bytes = input_desc().nbytes(), out_bytes = output_desc().nbytes();
    const std::string what = "streaming timed blocks through stages " + stage_names();
    for (int k = 0; k < nslots; ++k) init_input(*slots_[static_cast<size_t>(k)]);
    const auto t0 = Clock::now();
    for (int64_t b = 0; b < blocks; ++b) {
        Slot& slot = *slots_[static_cast<size_t>(b % nslots)];
        if (b >= nslots)
            cu_check(api.cuEventSynchronize(slot.ev_done), "cuEventSynchronize", what);
        cu_check(api.cuMemcpyHtoDAsync(slot.d_in->ptr(), slot.h_in->data(), in_bytes, h2d_),
                 "cuMemcpyHtoDAsync_v2", what);
        cu_check(api.cuEventRecord(slot.ev_h2d, h2d_), "cuEventRecord", what);
        cu_check(api.cuStreamWaitEvent(compute_, slot.ev_h2d, 0), "cuStreamWaitEvent", what);
        if (slot.graph)
            cu_check(api.cuGraphLaunch(slot.graph, compute_), "cuGraphLaunch", what);
        else
            enqueue_ops(static_cast<int>(b % nslots), input_desc().items, false);
        cu_check(api.cuEventRecord(slot.ev_comp, compute_), "cuEventRecord", what);
        cu_check(api.cuStreamWaitEvent(d2h_, slot.ev_comp, 0), "cuStreamWaitEvent", what);
        cu_check(api.cuMemcpyDtoHAsync(slot.h_out->data(), slot.d_out->ptr(), out_bytes, d2h_),
                 "cuMemcpyDtoHAsync_v2", what);
        cu_check(api.cuEventRecord(slot.ev_done, d2h_), "cuEventRecord", what);
    }
    cu_check(api.cuStreamSynchronize(d2h_), "cuStreamSynchronize", what);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    reset_ops_locked();
    return {wall, static_cast<double>(in_bytes) * static_cast<double>(blocks)};
}

double StreamEngine::measure_h2d_bandwidth(size_t nbytes, int repeats) {
    if (nbytes == 0) throw std::invalid_argument("nbytes must be >= 1");
    if (repeats < 1) throw std::invalid_argument("repeats must be >= 1");
    std::lock_guard<std::mutex> control(control_mutex_);
    check_usable("measure_h2d_bandwidth");
    ExclusiveGuard guard(exclusive_);
    wait_idle();
    device_->make_current();
    const DriverApi& api = driver();
    PinnedBuffer host(device_, nbytes);
    std::memset(host.data(), 1, nbytes);
    DeviceBuffer dev(device_, nbytes);
    TimingEvents ev(api, 2);
    const char* what = "measuring host -> device bandwidth";
    cu_check(api.cuMemcpyHtoDAsync(dev.ptr(), host.data(), nbytes, h2d_), "cuMemcpyHtoDAsync_v2", what);
    cu_check(api.cuEventRecord(ev.events[0], h2d_), "cuEventRecord", what);
    for (int i = 0; i < repeats; ++i)
        cu_check(api.cuMemcpyHtoDAsync(dev.ptr(), host.data(), nbytes, h2d_), "cuMemcpyHtoDAsync_v2", what);
    cu_check(api.cuEventRecord(ev.events[1], h2d_), "cuEventRecord", what);
    cu_check(api.cuEventSynchronize(ev.events[1]), "cuEventSynchronize", what);
    float ms = 0.0f;
    cu_check(api.cuEventElapsedTime(&ms, ev.events[0], ev.events[1]), "cuEventElapsedTime", what);
    if (!(ms > 0.0f)) throw DeviceError("the timed copies took no measurable time (" + std::to_string(ms) + " ms)");
    return static_cast<double>(nbytes) * repeats / (static_cast<double>(ms) * 1e-3);
}

}  // namespace gk
