// Where a thread's time went while it made no progress (docs/benchmarks.md, "Capacity": why a run
// missed). A thread that should be running (a capacity driver thread, the dispatcher's worker
// between its sleeps) calls tick() often. An interval of gap_ns or more between two ticks is a
// gap, and its time is split by the thread's own accounting (its CPU clock: time run on a CPU;
// /proc/thread-self/schedstat: time runnable but queued, times switched in), read every
// sample_ns and at each gap, so a gap's window starts at most sample_ns before it:
//   ran:     on a CPU in the guest's accounting (its own code, a driver call, an interrupt)
//   queued:  runnable but waiting while another thread of the guest had its CPU
//   away:    window - ran - queued. Switched out (switches > 0): asleep, blocked on a lock or in a
//            system call. Never switched out (switches == 0): its vCPU stopped beneath the guest
//            (the hypervisor ran something else: the kernel counts that as steal, not run time,
//            with CONFIG_PARAVIRT_TIME_ACCOUNTING).
// Reading the accounting costs two system calls (~1.2 us in the GPU machine's VM), hence the
// sampling; off (start never called) a tick is one branch.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

namespace gk {

struct OffCpuGap {
    uint64_t at_ns;      // the tick before the gap (CLOCK_MONOTONIC)
    uint64_t gap_ns;     // to the next tick
    uint64_t window_ns;  // the accounting's window: from its last sample (<= sample_ns before at_ns)
    uint64_t ran_ns;     // of the window: on a CPU
    uint64_t queued_ns;  // runnable, waiting for a CPU of the guest
    uint64_t switches;   // times switched in
};

class OffCpuMeter {
public:
    static constexpr size_t kMaxGaps = 65536;

    OffCpuMeter() = default;
    ~OffCpuMeter();
    OffCpuMeter(const OffCpuMeter&) = delete;
    OffCpuMeter& operator=(const OffCpuMeter&) = delete;

    // Whether this system keeps the accounting (Linux with schedstat).
    static bool available();
    // From now on, gaps of gap_ns or more are recorded (the owning thread opens its accounting at
    // its next tick). Any thread may call it.
    void start(uint64_t gap_ns, uint64_t sample_ns = 100'000);
    bool on() const { return gap_ns_.load(std::memory_order_relaxed) != 0; }
    // The owning thread, often (off: one branch, not even a clock read).
    void tick() {
        if (on()) tick_on();
    }
    // The owning thread is about to sleep on purpose: the next tick starts a fresh interval.
    void rest() { last_tick_ = 0; }
    // The gaps so far (any thread).
    std::vector<OffCpuGap> gaps() const;

private:
    void tick_on();
    bool read(uint64_t* ran, uint64_t* queued, uint64_t* switches);

    std::atomic<uint64_t> gap_ns_{0};
    std::atomic<uint64_t> sample_ns_{100'000};
    int fd_ = -1;              // the owning thread's /proc/thread-self/schedstat
    bool failed_ = false;      // the accounting could not be read: the meter stays quiet
    uint64_t last_tick_ = 0, sample_at_ = 0;
    uint64_t ran_ = 0, queued_ = 0, switches_ = 0;  // at sample_at_
    mutable std::mutex mutex_;                      // gaps_ (recorded rarely, read by others)
    std::vector<OffCpuGap> gaps_;
};

}  // namespace gk
