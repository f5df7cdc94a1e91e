// StreamEngine: a block queued chunk by chunk (the scheduler's units; the dispatcher's side,
// docs/scheduler.md), the whole-block chunk the worker and the inline path queue, and attaching
// to a dispatcher.
#include "stream_engine.h"

#include <algorithm>
#include <stdexcept>

#include "dispatcher.h"
#include "engine_parts.h"
#include "gk/device.h"
#include "gk/loader.h"

namespace gk {

using engine_detail::now_ns;

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

void StreamEngine::enqueue_op_units(int s, int64_t begin, int64_t end) {
    if (plan_.enabled) return enqueue_graph_units(s, begin, end);
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
    const bool full = !slot.final && slot.n_in == block_items();
    // copies per block: one per source (H2D) and one per sink (D2H); a chain has one of each
    const uint64_t uploads = plan_.enabled ? plan_.sources.size() : 1;
    const uint64_t downloads = plan_.enabled ? plan_.sinks.size() : 1;
    auto full_output = [&] {
        if (plan_.enabled) {
            note_sink_items(slot, nullptr);
            slot.n_out = slot.sink_n_out.front();
        } else {
            slot.n_out = output_desc().items;
        }
    };
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
    if (single && full && whole && !resident && slot.block_graph) {
        // Latency mode: H2D, the ops and D2H in one graph on the compute stream (mapped_io: the
        // pull and push kernels instead of the copies; direct_output: the last op's own stores
        // to the mapped output are the block's D2H).
        mark(start);
        cu_check(api.cuGraphLaunch(slot.block_graph, compute_), "cuGraphLaunch", "launching a block's graph");
        mark(stop);
        counters_.h2d_copies.fetch_add(uploads, std::memory_order_relaxed);
        counters_.graph_launches.fetch_add(1, std::memory_order_relaxed);
        counters_.d2h_copies.fetch_add(downloads, std::memory_order_relaxed);
        full_output();
        cu_check(api.cuEventRecord(slot.ev_done, compute_), "cuEventRecord", what);
        return;
    }
    // Latency mode puts the copies on the compute stream (no cross-stream waits); otherwise they
    // run on their own streams so that block n+1's upload overlaps block n's compute.
    CUstream up = single ? compute_ : h2d_;
    CUstream down = single ? compute_ : d2h_;
    if ((begin == 0 || !full) && !resident) {
        enqueue_upload(s, up);
        counters_.h2d_copies.fetch_add(uploads, std::memory_order_relaxed);
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
        full_output();
    } else {
        enqueue_op_units(s, begin, end);
        counters_.chunks.fetch_add(1, std::memory_order_relaxed);
        if (end == U) counters_.eager_blocks.fetch_add(1, std::memory_order_relaxed);
        full_output();
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
    enqueue_download(s, down);
    counters_.d2h_copies.fetch_add(downloads, std::memory_order_relaxed);
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
    if (block) {
        fill(s, block, n);
    } else if (!plan_.enabled) {
        throw std::invalid_argument("process_split() needs a block");
    }  // else a graph engine: its sources are in the slot already
    Slot& slot = *slots_[static_cast<size_t>(s)];
    init_input(slot);
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

}  // namespace gk
