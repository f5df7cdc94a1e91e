#include "dispatcher.h"
#include "spin.h"
#include "stream_engine.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <tuple>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/loader.h"

namespace gk {
namespace {

using Clock = std::chrono::steady_clock;

// Blocked with chunks in flight, the worker looks at them again after this long.
constexpr int kPollUs = 50;

// A scheduler call failed: the scheduler's state and ours no longer agree.
struct SchedulerFault : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::string abi_error(const gk_sched_abi_v1* abi) {
    char buf[512] = {0};
    abi->last_error(buf, sizeof buf);
    return buf;
}

}  // namespace

uint64_t Dispatcher::now_ns() {
    // The scheduler's monotonic clock is CLOCK_MONOTONIC, which steady_clock reads on Linux.
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

Dispatcher::Dispatcher(std::shared_ptr<Device> device, const gk_sched_abi_v1* abi, gk_sched* sched,
                       int spin_us)
    : device_(std::move(device)), abi_(abi), sched_(sched), spin_us_(spin_us) {
    if (!device_) throw std::invalid_argument("Dispatcher needs a Device");
    if (!abi_ || !sched_) throw std::invalid_argument("Dispatcher needs the scheduler's C ABI table and a scheduler");
    if (abi_->abi_version != GK_SCHED_ABI_VERSION || abi_->struct_size < sizeof(gk_sched_abi_v1))
        throw std::invalid_argument("the scheduler's C ABI is version " + std::to_string(abi_->abi_version) +
                                    ", this build needs " + std::to_string(GK_SCHED_ABI_VERSION) +
                                    ": install matching pygpukit-dsp and pygpukit-dsp-core");
    if (spin_us_ < 0) throw std::invalid_argument("spin_us must be >= 0, got " + std::to_string(spin_us_));
    abi_->sched_retain(sched_);
    last_.kind = GK_DECISION_IDLE;
    worker_ = std::thread([this] { worker_main(); });
}

Dispatcher::~Dispatcher() {
    try {
        close();
    } catch (...) {
    }
    if (const DriverApi* api = driver_if_loaded()) {
        try {
            device_->make_current();
            for (auto& [a, b] : spare_events_) {
                api->cuEventDestroy(a);
                api->cuEventDestroy(b);
            }
            if (timeline_ref_) api->cuEventDestroy(timeline_ref_);
        } catch (...) {
        }
    }
    abi_->sched_release(sched_);
}

void Dispatcher::close() {
    {
        // Under the mutex the worker waits with: it cannot miss the flag between its check and
        // its wait.
        std::lock_guard<std::mutex> lock(post_mutex_);
        stop_.store(true);
    }
    wake_.notify_all();
    if (!joined_.exchange(true) && worker_.joinable()) worker_.join();
}

void Dispatcher::set_time_every(int n) {
    if (n < 1) throw std::invalid_argument("time_every must be >= 1 (1: time every block), got " + std::to_string(n));
    time_every_.store(n);
}

void Dispatcher::start_timeline() {
    device_->make_current();
    const DriverApi& api = driver();
    std::lock_guard<std::mutex> lock(mutex_);
    if (timeline_ref_) throw std::invalid_argument("the dispatcher's timeline is already on");
    CUevent ref = nullptr;
    cu_check(api.cuEventCreate(&ref, CU_EVENT_DEFAULT), "cuEventCreate", "the timeline's reference event");
    CUresult r = api.cuEventRecord(ref, nullptr);
    if (r == CUDA_SUCCESS) r = api.cuEventSynchronize(ref);
    if (r != CUDA_SUCCESS) {
        api.cuEventDestroy(ref);
        cu_check(r, "cuEventRecord", "the timeline's reference event");
    }
    timeline_.clear();
    timeline_ref_ = ref;
}

std::vector<std::pair<int64_t, int64_t>> Dispatcher::stop_timeline() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (timeline_ref_) {
        if (const DriverApi* api = driver_if_loaded()) api->cuEventDestroy(timeline_ref_);
        timeline_ref_ = nullptr;
    }
    return std::move(timeline_);
}

DispatcherStats Dispatcher::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

bool Dispatcher::attach(StreamEngine* engine, uint32_t sched_stream) {
    if (stop_.load()) throw std::invalid_argument("the dispatcher is closed");
    gk_stream_stats st{};
    if (abi_->stream_stats(sched_, sched_stream, &st) != GK_OK)
        throw std::invalid_argument("scheduler stream " + std::to_string(sched_stream) + ": " + abi_error(abi_));
    if (static_cast<int64_t>(st.units_per_block) != 1 &&
        static_cast<int64_t>(st.units_per_block) != engine->units_per_block())
        throw std::invalid_argument("scheduler stream " + std::to_string(sched_stream) + " was registered with " +
                                    std::to_string(st.units_per_block) + " units per block, but the engine's block has " +
                                    std::to_string(engine->units_per_block()) +
                                    " (register it with units_per_block=engine.units_per_block, or 1)");
    std::lock_guard<std::mutex> lock(mutex_);
    if (std::find(engines_.begin(), engines_.end(), engine) != engines_.end())
        throw std::invalid_argument("this engine is already attached");
    engines_.push_back(engine);
    sched_units_[engine] = st.units_per_block;
    return st.qos == GK_QOS_REALTIME;
}

void Dispatcher::detach(StreamEngine* engine) {
    std::lock_guard<std::mutex> lock(mutex_);
    {
        std::lock_guard<std::mutex> plock(post_mutex_);
        posted_.erase(std::remove_if(posted_.begin(), posted_.end(),
                                     [&](const Posted& p) { return p.engine == engine; }),
                      posted_.end());
    }
    cancel_tasks(engine);
    engines_.erase(std::remove(engines_.begin(), engines_.end(), engine), engines_.end());
    sched_units_.erase(engine);
    whole_launched_.erase(engine);
}

void Dispatcher::post(StreamEngine* engine, uint32_t sched_stream, int slot, uint64_t arrival_ns) {
    {
        std::lock_guard<std::mutex> lock(post_mutex_);
        if (stop_.load()) throw std::invalid_argument("the dispatcher is closed: no block can be handed over");
        posted_.push_back({engine, sched_stream, slot, arrival_ns});
        posts_.fetch_add(1);
    }
    wake_.notify_one();
}

bool Dispatcher::help(StreamEngine* own, bool launching) {
    if (joined_.load()) return false;
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return false;  // the worker (or another helper) is in a turn
    try {
        device_->make_current();  // a no-op when it is current
    } catch (const std::exception&) {
        return false;  // the worker reports it
    }
    const bool progressed = turn(launching ? own : nullptr, !launching);
    if (progressed) ++stats_.helped;
    const bool pending = !in_flight_.empty() || decide_.load();
    lock.unlock();
    if (pending) {
        // The worker may have judged the loop quiet before this turn launched anything and gone to
        // sleep: wake it, or chunks in flight would wait for a caller's next help(). (Through
        // post_mutex_, which it sleeps with: it sees the new state or gets the notification.)
        { std::lock_guard<std::mutex> plock(post_mutex_); }
        wake_.notify_one();
    }
    return progressed;
}

bool Dispatcher::turn(StreamEngine* own, bool poll_only) {
    bool progressed = false;
    try {
        const uint64_t posted_before = stats_.posted;
        uint64_t t0 = now_ns();
        take_posts();
        step_done(0, t0);
        t0 = now_ns();
        const bool finished = poll_in_flight();
        step_done(1, t0);
        // Ask the scheduler only when its answer can have changed: a new block, a finished
        // chunk, or the time it said to wait for has come.
        const bool due = last_.kind == GK_DECISION_WAIT &&
                         (last_.wait_until_ns == GK_NO_TIME || now_ns() >= last_.wait_until_ns);
        const bool ask = finished || stats_.posted != posted_before || due || last_.kind == GK_DECISION_LAUNCH ||
                         redecide_;
        if (ask && poll_only) {
            redecide_ = true;  // the worker's next turn asks
        } else if (ask) {
            redecide_ = false;
            progressed |= launch_ready(&last_, own);
        }
        progressed |= finished;
    } catch (const SchedulerFault& e) {
        fail_all(std::string("the dispatcher stopped: ") + e.what());
    } catch (const std::exception& e) {
        fail_all(std::string("the dispatcher failed: ") + e.what());
    }
    in_flight_n_.store(in_flight_.size());
    decide_.store(last_.kind == GK_DECISION_WAIT || last_.kind == GK_DECISION_LAUNCH || redecide_);
    return progressed;
}

void Dispatcher::step_done(int kind, uint64_t t0) {
    const uint64_t ns = now_ns() - t0;
    stats_.step_ns[kind] += ns;
    ++stats_.steps[kind];
    if (ns > stats_.longest_step_ns[kind]) stats_.longest_step_ns[kind] = ns;
    if (ns >= DispatcherStats::kSlowStepNs) {
        ++stats_.slow_steps[kind];
        if (stats_.slow_log.size() < DispatcherStats::kSlowLog) stats_.slow_log.push_back({t0, ns, kind});
    }
}

void Dispatcher::check(int32_t rc, const char* what) {
    if (rc != GK_OK) throw SchedulerFault(std::string("scheduler ") + what + " failed (" + std::to_string(rc) +
                                          "): " + abi_error(abi_));
}

std::pair<CUevent, CUevent> Dispatcher::take_events() {
    if (!spare_events_.empty()) {
        auto e = spare_events_.back();
        spare_events_.pop_back();
        return e;
    }
    const DriverApi& api = driver();
    CUevent a = nullptr, b = nullptr;
    cu_check(api.cuEventCreate(&a, CU_EVENT_DEFAULT), "cuEventCreate", "creating a chunk's timing events");
    const CUresult r = api.cuEventCreate(&b, CU_EVENT_DEFAULT);
    if (r != CUDA_SUCCESS) {
        api.cuEventDestroy(a);
        cu_check(r, "cuEventCreate", "creating a chunk's timing events");
    }
    return {a, b};
}

void Dispatcher::give_events(CUevent a, CUevent b) {
    if (a && b) spare_events_.emplace_back(a, b);  // an untimed chunk had none
}

void Dispatcher::take_posts() {
    std::vector<Posted> posts;
    {
        std::lock_guard<std::mutex> lock(post_mutex_);
        posts.swap(posted_);
    }
    taken_.fetch_add(posts.size());
    for (const Posted& p : posts) {
        uint64_t task = 0, deadline = 0;
        const int32_t rc = abi_->submit(sched_, p.stream, p.arrival_ns, &task, &deadline);
        if (rc != GK_OK) {
            fail_engine(p.engine, "the scheduler refused a block of scheduler stream " + std::to_string(p.stream) +
                                      ": " + abi_error(abi_), {}, 0, {});
            continue;
        }
        ++stats_.posted;
        live_[task] = {p.engine, p.slot};
    }
}

bool Dispatcher::poll_in_flight() {
    const DriverApi& api = driver();
    bool finished = false;
    // Chunks of one task run in order on one stream and the scheduler retires them oldest first:
    // once one is not done, its later chunks wait for the next pass (even if done by now).
    std::vector<uint64_t> pending;
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
        InFlight& f = *it;
        if (std::find(pending.begin(), pending.end(), f.task) != pending.end()) {
            ++it;
            continue;
        }
        const CUevent ev = f.final ? f.engine->done_event(f.slot) : f.stop;
        const CUresult r = api.cuEventQuery(ev);
        if (r == CUDA_ERROR_NOT_READY) {
            pending.push_back(f.task);
            ++it;
            continue;
        }
        StreamEngine* engine = f.engine;
        if (r != CUDA_SUCCESS) {
            const char* name = nullptr;
            if (api.cuGetErrorName) api.cuGetErrorName(r, &name);
            give_events(f.start, f.stop);
            in_flight_.erase(it);
            fail_engine(engine, "a chunk of stages " + engine->stage_names() + " failed on the GPU", "cuEventQuery",
                        static_cast<int>(r), name ? name : "");
            it = in_flight_.begin();  // fail_engine removed the engine's other entries
            continue;
        }
        const uint64_t finish = now_ns();
        float ms = 0.0f;
        uint64_t gpu_ns = 0;  // not timed: the engine's trace shows 0, the scheduler its estimate
        if (f.stop) {
            gpu_ns = 1;
            if (api.cuEventElapsedTime(&ms, f.start, f.stop) == CUDA_SUCCESS && ms > 0.0f)
                gpu_ns = std::max<uint64_t>(1, static_cast<uint64_t>(static_cast<double>(ms) * 1e6));
            float a = 0.0f, b = 0.0f;
            if (timeline_ref_ && timeline_.size() < kTimelineMax &&
                api.cuEventElapsedTime(&a, timeline_ref_, f.start) == CUDA_SUCCESS &&
                api.cuEventElapsedTime(&b, timeline_ref_, f.stop) == CUDA_SUCCESS)
                timeline_.emplace_back(static_cast<int64_t>(static_cast<double>(a) * 1e6),
                                       static_cast<int64_t>(static_cast<double>(b) * 1e6));
        }
        gk_completion c{};
        check(abi_->complete(sched_, f.task, gpu_ns ? gpu_ns : GK_COST_UNMEASURED, finish, &c), "complete()");
        const uint64_t task = f.task;
        const int slot = f.slot;
        const bool final = f.final;
        give_events(f.start, f.stop);
        it = in_flight_.erase(it);
        finished = true;
        if (final) {
            if (c.state == GK_TASK_READY)
                throw SchedulerFault("the scheduler still has units of task " + std::to_string(task) +
                                     " after its final chunk");
            live_.erase(task);
            ++stats_.completed;
            engine->finish_scheduled(slot, finish, gpu_ns);
        }
    }
    return finished;
}

bool Dispatcher::launch_ready(gk_decision* last, StreamEngine* own) {
    bool launched = false;
    for (;;) {
        gk_decision d{};
        uint64_t t0 = now_ns();
        check(abi_->next(sched_, GK_TIME_NOW, &d), "next()");
        step_done(2, t0);
        if (d.kind != GK_DECISION_LAUNCH) {
            *last = d;
            if (d.kind == GK_DECISION_WAIT) ++stats_.waits;
            else ++stats_.idles;
            return launched;
        }
        auto live = live_.find(d.task);
        if (live == live_.end())
            throw SchedulerFault("the scheduler launched task " + std::to_string(d.task) +
                                 ", which no engine handed over");
        StreamEngine* engine = live->second.engine;
        const int slot = live->second.slot;
        int64_t begin = d.chunk_begin, end = d.chunk_end;
        auto units = sched_units_.find(engine);
        if (units != sched_units_.end() && units->second == 1) {
            // Registered as one unit (realtime streams): the chunk is the whole block.
            begin = 0;
            end = engine->units_per_block();
        }
        CUevent start = nullptr, stop = nullptr;
        if (begin != 0 || end != engine->units_per_block()) {
            std::tie(start, stop) = take_events();  // a paced chunk: pacing learns unit costs from each
        } else {
            const uint64_t k = whole_launched_[engine]++;
            if (k < kTimedFirst || k % static_cast<uint64_t>(time_every_.load()) == 0)
                std::tie(start, stop) = take_events();
        }
        if (start) ++stats_.timed;
        t0 = now_ns();
        try {
            engine->enqueue_chunk(slot, begin, end, start, stop);
            step_done(3, t0);
        } catch (const DeviceError& e) {
            give_events(start, stop);
            fail_engine(engine, e.what(), e.call(), e.code(), e.code_name());
            continue;
        } catch (const std::exception& e) {
            give_events(start, stop);
            fail_engine(engine, std::string("launching a chunk failed: ") + e.what(), {}, 0, {});
            continue;
        }
        in_flight_.push_back({d.task, engine, slot, d.is_final != 0, start, stop});
        ++stats_.launches;
        launched = true;
        if (engine == own) {
            *last = d;  // a LAUNCH: the next turn asks again (the helper goes back to its block)
            return launched;
        }
    }
}

void Dispatcher::fail_engine(StreamEngine* engine, const std::string& message, const std::string& call,
                             int code, const std::string& code_name) {
    engine->fail(message, call, code, code_name);
    cancel_tasks(engine);
}

void Dispatcher::cancel_tasks(StreamEngine* engine) {
    for (auto it = live_.begin(); it != live_.end();) {
        if (it->second.engine == engine) {
            abi_->cancel_task(sched_, it->first);
            ++stats_.cancelled;
            it = live_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto it = in_flight_.begin(); it != in_flight_.end();) {
        if (it->engine == engine) {
            give_events(it->start, it->stop);
            it = in_flight_.erase(it);
        } else {
            ++it;
        }
    }
}

void Dispatcher::fail_all(const std::string& message) {
    std::vector<StreamEngine*> engines = engines_;
    for (const auto& [task, live] : live_)
        if (std::find(engines.begin(), engines.end(), live.engine) == engines.end()) engines.push_back(live.engine);
    for (StreamEngine* e : engines) fail_engine(e, message, {}, 0, {});
    live_.clear();
    in_flight_.clear();
}

void Dispatcher::worker_main() {
    try {
        device_->make_current();
    } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(mutex_);
        fail_all(std::string("the dispatcher could not make the GPU's context current: ") + e.what());
    }
    auto last_progress = Clock::now();
    for (;;) {
        worker_meter_.tick();
        bool progressed = false, busy = false;
        gk_decision last{};
        last.kind = GK_DECISION_IDLE;
        // Quiet (nothing posted, nothing in flight, no pending decision): no turn, and no lock,
        // so that a helper never finds the lock held by a worker that lost its CPU mid-spin.
        const bool quiet = posts_.load() == taken_.load() && in_flight_n_.load() == 0 && !decide_.load() &&
                           !stop_.load();
        if (!quiet) {
            std::lock_guard<std::mutex> lock(mutex_);
            progressed = turn();
            busy = !in_flight_.empty();
            last = last_;
            if (stop_.load() && live_.empty() && !busy) {
                std::lock_guard<std::mutex> plock(post_mutex_);
                if (posted_.empty()) break;
            }
        }
        if (quiet) busy = in_flight_n_.load() > 0;  // a helper may have launched since
        const auto now = Clock::now();
        if (progressed) {
            last_progress = now;
            continue;
        }
        // Spin for a while after the last activity: a completion or a new block is usually close.
        if (now - last_progress < std::chrono::microseconds(spin_us_)) {
            for (int i = 0; i < 32; ++i) cpu_relax();
            continue;
        }
        worker_meter_.rest();  // a sleep on purpose is not a gap
        std::unique_lock<std::mutex> plock(post_mutex_);
        auto more = [&] { return !posted_.empty() || stop_.load(); };
        if (busy) {
            wake_.wait_for(plock, std::chrono::microseconds(kPollUs), more);
        } else if (last.kind == GK_DECISION_WAIT && last.wait_until_ns != GK_NO_TIME) {
            const uint64_t t = now_ns();
            const uint64_t wait_ns = last.wait_until_ns > t ? last.wait_until_ns - t : 0;
            if (wait_ns > 0) wake_.wait_for(plock, std::chrono::nanoseconds(wait_ns), more);
        } else {
            // nothing pending as this thread saw it; also wake for work a helper left behind
            // (chunks in flight, a pending decision: help() notifies after such a turn)
            wake_.wait(plock, [&] { return more() || in_flight_n_.load() > 0 || decide_.load(); });
        }
    }
}

}  // namespace gk
