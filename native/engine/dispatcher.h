// The dispatcher: one native worker thread that launches the blocks of several engines on one
// GPU in the order the Rust scheduler decides (gk/sched_abi.h), chunk by chunk.
//
// An attached engine's submit() posts (engine, slot) with its hand-over time. The worker:
//   1. submits each posted block to the scheduler as a task of the engine's stream;
//   2. asks next(): LAUNCH -> the engine queues units [chunk_begin, chunk_end) of that block
//      between two timing events on its compute stream; WAIT/IDLE -> nothing may start now;
//   3. polls the chunks in flight: a finished chunk is reported with complete(task, measured GPU
//      time, finish time); a finished last chunk (its ev_done) hands the slot back to the engine.
// Timing: a chunk's two event records and its elapsed-time query are a third of the serial work
// per W1 block under the lock (docs/scheduler.md, "The dispatcher is the second serial
// resource"), so a stream's whole-block chunks are timed only for its first kTimedFirst blocks
// and then one in every time_every(); the others complete GK_COST_UNMEASURED (the scheduler
// counts their estimate as busy time). Partial chunks (paced throughput work) are always timed.
// So no Python runs per block or chunk, the scheduler sees every launch (EDF among realtime
// blocks, throughput chunks paced under the quantum) and accounts every block's latency.
//
// Helping: a realtime stream's caller may take a turn of that loop with help() when no other
// thread is in one (a try-lock): right after handing a block over (a turn that stops once it has
// launched a chunk of the caller's own engine) and while it waits (turns that only take posts and
// poll; the decisions they make necessary are left to the worker). Its launch and its hand-back
// then do not wait for the worker thread to be scheduled (on a busy or virtualised host a
// runnable thread can wait a millisecond for a CPU), and once its own chunk is queued it launches
// no other stream's work. The scheduler decides either way.
//
// Errors: a CUDA error while launching or polling fails that engine only (its waiters get the
// DeviceError, its tasks are cancelled); a scheduler error (a broken invariant) fails every
// attached engine. close() drains what was handed over, then stops the worker.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gk/cuda_api.h"
#include "gk/sched_abi.h"
#include "off_cpu.h"

namespace gk {

class Device;
class StreamEngine;

struct DispatcherStats {
    uint64_t posted = 0;     // blocks handed over by engines
    uint64_t launches = 0;   // chunks launched (a whole block is one chunk)
    uint64_t completed = 0;  // blocks handed back
    uint64_t waits = 0;      // turns where the scheduler held everything back (WAIT)
    uint64_t idles = 0;      // turns with nothing to launch (IDLE)
    uint64_t cancelled = 0;  // tasks cancelled (engine failed or detached mid-block)
    uint64_t helped = 0;     // turns that made progress on a waiting caller's thread (help())
    uint64_t timed = 0;      // chunks launched between timing events (the others: GK_COST_UNMEASURED)
    // Steps of a turn that took kSlowStepNs or more (the thread held the dispatcher's lock that
    // long: every caller's hand-over waited), by kind, and the longest of each kind (ns):
    // take_posts (the scheduler's submit of each handed-over block), poll (the completions' event
    // queries and elapsed times, the scheduler's complete, the hand-back), decide (the
    // scheduler's next), launch (a chunk's event records and graph launch or kernels).
    static constexpr int kStepKinds = 4;
    static constexpr uint64_t kSlowStepNs = 200'000;
    uint64_t slow_steps[kStepKinds] = {0, 0, 0, 0};
    uint64_t longest_step_ns[kStepKinds] = {0, 0, 0, 0};
    uint64_t step_ns[kStepKinds] = {0, 0, 0, 0};  // all the time in steps of each kind (ns)
    uint64_t steps[kStepKinds] = {0, 0, 0, 0};    // how many
    struct SlowStep {
        uint64_t at_ns;  // its start (CLOCK_MONOTONIC)
        uint64_t ns;
        int kind;
    };
    static constexpr size_t kSlowLog = 4096;
    std::vector<SlowStep> slow_log;  // the first kSlowLog slow steps: when each held the lock
    static const char* step_name(int kind) {
        static const char* names[kStepKinds] = {"take_posts", "poll", "decide", "launch"};
        return names[kind];
    }
};

class Dispatcher {
public:
    // `abi` is the table from the pygpukit_dsp_core capsule; the dispatcher takes its own
    // reference on `sched` (sched_retain) and drops it when destroyed.
    Dispatcher(std::shared_ptr<Device> device, const gk_sched_abi_v1* abi, gk_sched* sched, int spin_us);
    ~Dispatcher();
    Dispatcher(const Dispatcher&) = delete;
    Dispatcher& operator=(const Dispatcher&) = delete;

    // Called by StreamEngine::attach/detach/submit.
    // Returns whether the stream is realtime (its engine's callers help).
    bool attach(StreamEngine* engine, uint32_t sched_stream);
    void detach(StreamEngine* engine);  // cancels the engine's remaining tasks
    void post(StreamEngine* engine, uint32_t sched_stream, int slot, uint64_t arrival_ns);
    // A turn on the calling thread, unless another thread is in one; true if it launched or
    // finished anything. `own`: the caller's engine; `launching`: the caller has just handed a
    // block over (launch until a chunk of `own` is launched) rather than waiting (take posts and
    // poll only). The device's context is made current first.
    bool help(StreamEngine* own, bool launching);

    // Drains every handed-over block, then stops the worker. Idempotent.
    void close();
    bool closed() const noexcept { return stop_.load(); }
    DispatcherStats stats() const;
    // Time one in every `n` whole-block chunks of a stream after its first kTimedFirst (1: all).
    static constexpr uint64_t kTimedFirst = 16;
    static constexpr int kTimeEveryDefault = 8;
    void set_time_every(int n);
    int time_every() const noexcept { return time_every_.load(); }
    // The GPU's timeline: from start_timeline() each timed chunk's start and stop on the GPU, in
    // ns after a reference event recorded then (two more elapsed-time queries per timed chunk;
    // admission's rehearsal, with time_every 1, takes the union of the intervals: the GPU's
    // occupancy, where blocks of different streams overlap). Up to kTimelineMax intervals.
    static constexpr size_t kTimelineMax = 1 << 20;
    void start_timeline();
    std::vector<std::pair<int64_t, int64_t>> stop_timeline();
    // From now on the worker records where its time went when it made no progress for gap_ns
    // between its sleeps (off_cpu.h); off_cpu_gaps() returns them.
    void watch_off_cpu(uint64_t gap_ns) { worker_meter_.start(gap_ns); }
    std::vector<OffCpuGap> off_cpu_gaps() const { return worker_meter_.gaps(); }
    const std::shared_ptr<Device>& device() const noexcept { return device_; }
    // Monotonic nanoseconds, the scheduler's clock (CLOCK_MONOTONIC).
    static uint64_t now_ns();

private:
    struct Posted {
        StreamEngine* engine;
        uint32_t stream;
        int slot;
        uint64_t arrival_ns;
    };
    struct Live {
        StreamEngine* engine;
        int slot;
    };
    struct InFlight {
        uint64_t task;
        StreamEngine* engine;
        int slot;
        bool final;
        CUevent start, stop;
    };

    void worker_main();
    // under mutex_: one turn of the loop; true if progress. A full turn (own == nullptr,
    // poll_only false), a launching help (stops after a chunk of `own`), or a polling help.
    bool turn(StreamEngine* own = nullptr, bool poll_only = false);
    void take_posts();                       // under mutex_
    bool poll_in_flight();                   // under mutex_; true if anything finished
    // under mutex_; true if anything was launched; stops after a chunk of `own` (if not null)
    bool launch_ready(gk_decision* last, StreamEngine* own = nullptr);
    void fail_engine(StreamEngine* engine, const std::string& message, const std::string& call,
                     int code, const std::string& code_name);  // under mutex_
    void fail_all(const std::string& message);                 // under mutex_
    void cancel_tasks(StreamEngine* engine);  // under mutex_: its live tasks cancelled, chunks forgotten
    void check(int32_t rc, const char* what);                  // throws SchedulerFault
    // under mutex_: a step of kind `kind` (DispatcherStats::step_name) that began at `t0`
    void step_done(int kind, uint64_t t0);
    std::pair<CUevent, CUevent> take_events();
    void give_events(CUevent a, CUevent b);

    std::shared_ptr<Device> device_;
    const gk_sched_abi_v1* abi_;
    gk_sched* sched_;
    int spin_us_;

    std::mutex post_mutex_;
    std::vector<Posted> posted_;
    std::condition_variable wake_;  // with post_mutex_: a post or close()

    mutable std::mutex mutex_;  // the worker's state below; detach() takes it too
    std::map<uint64_t, Live> live_;
    std::deque<InFlight> in_flight_;
    std::vector<std::pair<CUevent, CUevent>> spare_events_;
    std::vector<StreamEngine*> engines_;
    std::map<StreamEngine*, uint32_t> sched_units_;  // the stream's units_per_block: 1 or the engine's
    std::map<StreamEngine*, uint64_t> whole_launched_;  // whole-block chunks launched, per engine
    std::atomic<int> time_every_{kTimeEveryDefault};
    CUevent timeline_ref_ = nullptr;  // start_timeline's reference (under mutex_); null: off
    std::vector<std::pair<int64_t, int64_t>> timeline_;
    DispatcherStats stats_;
    gk_decision last_{};  // the scheduler's last answer (under mutex_)
    bool redecide_ = false;  // a polling help finished work without asking next() (under mutex_)
    // read without a lock by the worker to skip quiet turns
    std::atomic<uint64_t> posts_{0};      // blocks posted so far
    std::atomic<uint64_t> taken_{0};      // ... and taken by a turn (take_posts)
    std::atomic<size_t> in_flight_n_{0};  // in_flight_.size()
    std::atomic<bool> decide_{false};     // last_ asks for another turn (WAIT or LAUNCH)

    OffCpuMeter worker_meter_;  // ticked by the worker only

    std::thread worker_;
    std::atomic<bool> stop_{false};
    std::atomic<bool> joined_{false};
};

}  // namespace gk
