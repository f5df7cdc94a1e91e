#include "instrument.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "dispatcher.h"
#include "engine_parts.h"
#include "gk/device.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/memory.h"
#include "release_wait.h"
#include "stream_engine.h"

namespace gk {

using engine_detail::check_slot;
using engine_detail::Clock;
using engine_detail::ExclusiveGuard;
using engine_detail::kIoThreads;
using engine_detail::now_ns;
using engine_detail::TimingEvents;

EngineInstrument::EngineInstrument(std::shared_ptr<StreamEngine> engine) : engine_(std::move(engine)) {
    if (!engine_) throw std::invalid_argument("EngineInstrument needs a StreamEngine");
    StreamEngine& e = *engine_;
    std::lock_guard<std::mutex> control(e.control_mutex_);
    e.check_usable("instrument");
    if (!e.options_.mapped_io || e.prewarm_event_) return;  // host-only prewarm, or made already
    ExclusiveGuard guard(e.exclusive_);
    e.wait_idle();
    e.device_->make_current();
    const DriverApi& api = driver();
    e.io_touch_ = e.io_module_->function("gk_io_touch")->handle();  // the module keeps it loaded
    if (e.options_.use_graph) {
        for (size_t s = 0; s < e.slots_.size(); ++s)
            if (!e.slots_[s]->prewarm_graph) e.slots_[s]->prewarm_graph = capture_touch(static_cast<int>(s));
        cu_check(api.cuStreamSynchronize(e.compute_), "cuStreamSynchronize", "uploading the prewarm's graphs");
    }
    // last: an event says the prewarm is ready. Made here, under the control mutex, not by the
    // first prewarm, which could race close() and leave an event behind the engine.
    cu_check(api.cuEventCreate(&e.prewarm_event_, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
             "creating the prewarm event");
}

// ---------------------------------------------------------------------------------------------
// Resident mode
// ---------------------------------------------------------------------------------------------

void EngineInstrument::set_resident(bool on) { engine_->resident_.store(on); }

bool EngineInstrument::resident() const { return engine_->resident_.load(); }

std::vector<uint64_t> EngineInstrument::pump_resident(double seconds) {
    StreamEngine& e = *engine_;
    if (!e.resident_.load()) throw std::invalid_argument("pump_resident() needs resident mode (resident = True)");
    if (!(seconds > 0)) throw std::invalid_argument("seconds must be > 0");
    for (const auto& slot : e.slots_)
        if (slot->state.load() != StreamEngine::kFree)
            throw std::invalid_argument("pump_resident() needs an idle engine: collect every submitted slot first");
    pump_stop_.store(false);
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    std::vector<uint64_t> stamps;
    stamps.reserve(1 << 16);
    const int K = e.slots();
    const int64_t items = e.block_items();
    for (int s = 0; s < K; ++s) e.submit(s, items, false);
    for (uint64_t b = 0;; ++b) {
        const int s = static_cast<int>(b % static_cast<uint64_t>(K));
        e.wait(s);
        stamps.push_back(Dispatcher::now_ns());
        if (pump_stop_.load() || Clock::now() >= end) break;
        e.submit(s, items, false);
    }
    for (int s = 0; s < K; ++s)  // drain the ones still in flight
        if (e.slots_[static_cast<size_t>(s)]->state.load() != StreamEngine::kFree) {
            e.wait(s);
            stamps.push_back(Dispatcher::now_ns());
        }
    return stamps;
}

// ---------------------------------------------------------------------------------------------
// Timing loops
// ---------------------------------------------------------------------------------------------

std::vector<double> EngineInstrument::time_resident(int iterations) {
    if (iterations < 1) throw std::invalid_argument("iterations must be >= 1");
    StreamEngine& e = *engine_;
    std::lock_guard<std::mutex> control(e.control_mutex_);
    e.check_usable("time_resident");
    ExclusiveGuard guard(e.exclusive_);
    e.wait_idle();
    e.device_->make_current();
    const DriverApi& api = driver();
    CUstream compute = e.compute_;
    StreamEngine::Slot& slot = *e.slots_[0];
    e.init_input(slot);
    cu_check(api.cuMemcpyHtoDAsync(slot.d_in->ptr(), slot.h_in->data(), e.input_desc().nbytes(), compute),
             "cuMemcpyHtoDAsync_v2", "copying the resident input block");
    constexpr int kChunk = 128;
    TimingEvents ev(api, 2 * kChunk);
    std::vector<double> seconds;
    seconds.reserve(static_cast<size_t>(iterations));
    for (int i = 0; i < iterations; ++i) {
        const int k = i % kChunk;
        cu_check(api.cuEventRecord(ev.events[2 * k], compute), "cuEventRecord");
        if (slot.graph)
            cu_check(api.cuGraphLaunch(slot.graph, compute), "cuGraphLaunch", "timing a resident block");
        else
            e.enqueue_ops(0, e.block_items(), false);
        cu_check(api.cuEventRecord(ev.events[2 * k + 1], compute), "cuEventRecord");
        if (k == kChunk - 1 || i == iterations - 1) {
            cu_check(api.cuEventSynchronize(ev.events[2 * k + 1]), "cuEventSynchronize",
                     "timing resident blocks of stages " + e.stage_names());
            for (int j = 0; j <= k; ++j) {
                float ms = 0.0f;
                cu_check(api.cuEventElapsedTime(&ms, ev.events[2 * j], ev.events[2 * j + 1]),
                         "cuEventElapsedTime");
                seconds.push_back(static_cast<double>(ms) * 1e-3);
            }
        }
    }
    e.reset_ops_locked();
    return seconds;
}

std::pair<double, double> EngineInstrument::time_streamed(int64_t blocks, int nslots) {
    StreamEngine& e = *engine_;
    if (blocks < 1) throw std::invalid_argument("blocks must be >= 1");
    if (nslots < 1 || nslots > e.slots())
        throw std::invalid_argument("slots must be between 1 and the engine's " + std::to_string(e.slots()));
    std::lock_guard<std::mutex> control(e.control_mutex_);
    e.check_usable("time_streamed");
    ExclusiveGuard guard(e.exclusive_);
    e.wait_idle();
    e.device_->make_current();
    const DriverApi& api = driver();
    const size_t in_bytes = e.input_desc().nbytes(), out_bytes = e.output_desc().nbytes();
    const std::string what = "streaming timed blocks through stages " + e.stage_names();
    for (int k = 0; k < nslots; ++k) e.init_input(*e.slots_[static_cast<size_t>(k)]);
    const auto t0 = Clock::now();
    for (int64_t b = 0; b < blocks; ++b) {
        StreamEngine::Slot& slot = *e.slots_[static_cast<size_t>(b % nslots)];
        if (b >= nslots)
            cu_check(api.cuEventSynchronize(slot.ev_done), "cuEventSynchronize", what);
        cu_check(api.cuMemcpyHtoDAsync(slot.d_in->ptr(), slot.h_in->data(), in_bytes, e.h2d_),
                 "cuMemcpyHtoDAsync_v2", what);
        cu_check(api.cuEventRecord(slot.ev_h2d, e.h2d_), "cuEventRecord", what);
        cu_check(api.cuStreamWaitEvent(e.compute_, slot.ev_h2d, 0), "cuStreamWaitEvent", what);
        if (slot.graph)
            cu_check(api.cuGraphLaunch(slot.graph, e.compute_), "cuGraphLaunch", what);
        else
            e.enqueue_ops(static_cast<int>(b % nslots), e.block_items(), false);
        cu_check(api.cuEventRecord(slot.ev_comp, e.compute_), "cuEventRecord", what);
        cu_check(api.cuStreamWaitEvent(e.d2h_, slot.ev_comp, 0), "cuStreamWaitEvent", what);
        cu_check(api.cuMemcpyDtoHAsync(slot.h_out->data(), slot.d_out->ptr(), out_bytes, e.d2h_),
                 "cuMemcpyDtoHAsync_v2", what);
        cu_check(api.cuEventRecord(slot.ev_done, e.d2h_), "cuEventRecord", what);
    }
    cu_check(api.cuStreamSynchronize(e.d2h_), "cuStreamSynchronize", what);
    const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
    e.reset_ops_locked();
    return {wall, static_cast<double>(in_bytes) * static_cast<double>(blocks)};
}

double EngineInstrument::measure_h2d_bandwidth(size_t nbytes, int repeats) {
    if (nbytes == 0) throw std::invalid_argument("nbytes must be >= 1");
    if (repeats < 1) throw std::invalid_argument("repeats must be >= 1");
    StreamEngine& e = *engine_;
    std::lock_guard<std::mutex> control(e.control_mutex_);
    e.check_usable("measure_h2d_bandwidth");
    ExclusiveGuard guard(e.exclusive_);
    e.wait_idle();
    e.device_->make_current();
    const DriverApi& api = driver();
    PinnedBuffer host(e.device_, nbytes);
    std::memset(host.data(), 1, nbytes);
    DeviceBuffer dev(e.device_, nbytes);
    TimingEvents ev(api, 2);
    const char* what = "measuring host -> device bandwidth";
    cu_check(api.cuMemcpyHtoDAsync(dev.ptr(), host.data(), nbytes, e.h2d_), "cuMemcpyHtoDAsync_v2", what);
    cu_check(api.cuEventRecord(ev.events[0], e.h2d_), "cuEventRecord", what);
    for (int i = 0; i < repeats; ++i)
        cu_check(api.cuMemcpyHtoDAsync(dev.ptr(), host.data(), nbytes, e.h2d_), "cuMemcpyHtoDAsync_v2", what);
    cu_check(api.cuEventRecord(ev.events[1], e.h2d_), "cuEventRecord", what);
    cu_check(api.cuEventSynchronize(ev.events[1]), "cuEventSynchronize", what);
    float ms = 0.0f;
    cu_check(api.cuEventElapsedTime(&ms, ev.events[0], ev.events[1]), "cuEventElapsedTime", what);
    if (!(ms > 0.0f)) throw DeviceError("the timed copies took no measurable time (" + std::to_string(ms) + " ms)");
    return static_cast<double>(nbytes) * repeats / (static_cast<double>(ms) * 1e-3);
}

// ---------------------------------------------------------------------------------------------
// Paced blocks
// ---------------------------------------------------------------------------------------------

void EngineInstrument::wait_release(int s, const ReleaseWait& r, uint64_t return_at_ns) {
    check_slot(s, engine_->slots());
    if (r.spin_us < 0) throw std::invalid_argument("spin_us must be >= 0");
    const uint64_t spin_ns = static_cast<uint64_t>(r.spin_us) * 1000ULL;
    wait_for_release(r.release_ns, std::min(return_at_ns, r.release_ns), spin_ns, [&](uint64_t until) {
        if (r.prewarm) prewarm_slot(s, until);
    });
}

int64_t EngineInstrument::process(int s, const void* block, int64_t n, bool final, const ReleaseWait& r,
                                  void* out, int64_t out_row_items) {
    // checked before the wait: a paced call that cannot run fails at once, not at its release
    if (engine_->closed()) throw Error("StreamEngine.process(): the engine is closed");
    check_slot(s, engine_->slots());
    if (r.release_ns) wait_release(s, r, r.release_ns);
    return engine_->process(s, block, n, final, out, out_row_items);
}

void EngineInstrument::prewarm_slot(int s, uint64_t until_ns) {
    StreamEngine& e = *engine_;
    const StreamEngine::Slot& slot = *e.slots_[static_cast<size_t>(s)];
    // GPU first (it runs while the host touches below): the slot's pages once through their
    // mapping, on the compute stream (reads only: whatever runs on the stream before or after it is
    // unaffected), launched as a graph the way a block is
    bool gpu = false;
    if (e.io_touch_ && e.prewarm_event_ && !e.failed_.load() && !e.closed_.load()) {
        try {
            const DriverApi& api = driver();
            e.device_->make_current();
            if (slot.prewarm_graph)
                cu_check(api.cuGraphLaunch(slot.prewarm_graph, e.compute_), "cuGraphLaunch", "launching the prewarm");
            else
                cu_check(launch_touch(s), "cuLaunchKernel", "launching gk_io_touch (prewarm)");
            cu_check(api.cuEventRecord(e.prewarm_event_, e.compute_), "cuEventRecord", "prewarm");
            gpu = true;
        } catch (const std::exception&) {
            // a prewarm is an optimisation: a failure here shows up (and is reported) on the block itself
        }
    }
    touch_host(slot.h_in->data(), slot.h_in->nbytes(), 4096, slot.h_out->data(), slot.h_out->nbytes());
    if (!gpu) return;
    const DriverApi& api = driver();
    while (api.cuEventQuery(e.prewarm_event_) == CUDA_ERROR_NOT_READY && now_ns() < until_ns) cpu_relax();
}

CUresult EngineInstrument::launch_touch(int s) {
    // gk_io_touch: one thread per page of the slot's pinned input and output, read through the mapping
    const StreamEngine& e = *engine_;
    const StreamEngine::Slot& slot = *e.slots_[static_cast<size_t>(s)];
    CUdeviceptr a = slot.h_in->device_ptr(), b = slot.h_out->device_ptr();
    unsigned long long na = slot.h_in->nbytes(), nb = slot.h_out->nbytes();
    void* params[] = {&a, &na, &b, &nb};
    const unsigned pages = static_cast<unsigned>((na + 4095) / 4096 + (nb + 4095) / 4096);
    return driver().cuLaunchKernel(e.io_touch_, (pages + kIoThreads - 1) / kIoThreads, 1, 1, kIoThreads, 1, 1, 0,
                                   e.compute_, params, nullptr);
}

CUgraphExec EngineInstrument::capture_touch(int s) {
    // The prewarm's touch of the slot as a graph: launched the way a block is (cuGraphLaunch on
    // the compute stream, then an event), so the prewarm also runs the host side of a block's
    // launch, whose code and data a sleeping core loses (a paced block's launch took ~8 us after
    // a sleep against ~2.4 us when the thread never slept, H200)
    const DriverApi& api = driver();
    CUstream compute = engine_->compute_;
    const std::string what = "capturing slot " + std::to_string(s) + "'s prewarm into a CUDA graph";
    cu_check(api.cuStreamBeginCapture(compute, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture_v2", what);
    const CUresult launched = launch_touch(s);
    CUgraph graph = nullptr;
    const CUresult ended = api.cuStreamEndCapture(compute, &graph);
    if (launched != CUDA_SUCCESS || ended != CUDA_SUCCESS) {
        if (graph) api.cuGraphDestroy(graph);
        cu_check(launched != CUDA_SUCCESS ? launched : ended,
                 launched != CUDA_SUCCESS ? "cuLaunchKernel" : "cuStreamEndCapture", what);
    }
    CUgraphExec exec = nullptr;
    const CUresult r = api.cuGraphInstantiateWithFlags(&exec, graph, 0);
    api.cuGraphDestroy(graph);
    cu_check(r, "cuGraphInstantiateWithFlags", what);
    if (api.cuGraphUpload) cu_check(api.cuGraphUpload(exec, compute), "cuGraphUpload", what);
    return exec;
}

}  // namespace gk
