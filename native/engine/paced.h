// Many realtime streams released on their own clocks, driven natively (benchmarks/capacity.py,
// docs/benchmarks.md "Capacity"). Each stream is an engine (typically attached to a dispatcher, as
// a Session attaches them) with a period and a phase: block k is released at
// start + phase + k * period. A few driver threads (streams dealt round-robin) release each block
// at its time (fill the pinned slot from the stream's input pool, submit: a realtime stream's
// submit launches it through the dispatcher at once when the scheduler says so), poll the blocks
// in flight (try_wait, which runs polling turns of the dispatcher), copy each finished output out
// and record its latency from its release. Between events a thread sleeps until spin_us before
// the next release, then spins (wait_until_ns). No Python runs during the run.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "off_cpu.h"

namespace gk {

class RoundTripFloor;
class StreamEngine;

struct PacedStreamSpec {
    StreamEngine* engine = nullptr;
    RoundTripFloor* floor = nullptr;       // instead of an engine: the bare round trip, one block in flight
                                           // (the capacity floor: what N streams cost with no pipeline)
    uint64_t period_ns = 0;
    uint64_t phase_ns = 0;                 // first release: start + phase
    std::vector<const void*> inputs;       // full input blocks (the engine's input layout; a floor's
                                           // in_bytes), cycled
};

struct PacedStreamResult {
    std::vector<int64_t> latency_ns;       // release -> output copied out, blocks released after the warm-up
    std::vector<int64_t> fill_ns;          // the same blocks: the copy into the pinned slot (fixed CPU work:
                                           // a slow one says the CPU under the driver thread ran slow)
    std::vector<int64_t> submit_ns;        // the same blocks: the hand-over (an engine's submit: through the
                                           // dispatcher, which launches a realtime block at once; a floor's
                                           // two copies and event enqueued)
    uint64_t released = 0;                 // blocks released (warm-up included)
    uint64_t late = 0;                     // releases sent late because both slots were still in flight
};

struct PacedRun {
    std::vector<PacedStreamResult> streams;
    std::vector<std::vector<OffCpuGap>> thread_gaps;       // each driver thread's (run_paced's watch_gap_ns)
    uint64_t start_ns = 0, timed_from_ns = 0, end_ns = 0;  // CLOCK_MONOTONIC
};

// Runs every stream from now + a short start delay for warmup_s + seconds; blocks released in the
// first warmup_s are not timed. threads >= 1 driver threads; spin_us: how long before a release a
// driver thread stops sleeping; watch_gap_ns > 0: each driver thread records where its time went
// when it made no progress for that long (off_cpu.h). Throws the first error of any stream
// (DeviceError etc.).
PacedRun run_paced(const std::vector<PacedStreamSpec>& streams, double warmup_s, double seconds, int threads,
                   int spin_us, uint64_t watch_gap_ns = 0);

// A thread that does nothing but read the clock and records every gap between two reads longer
// than threshold_ns (time it did not run: the host took its CPU). Run beside a benchmark, it tells
// a host stall (the probe stalled at the same time as a late block) from a late block that the
// process itself made (benchmarks W3; benchmarks/host_jitter.py measures the same alone).
class StallProbe {
public:
    StallProbe(uint64_t threshold_ns, int cpu);  // cpu < 0: not pinned
    ~StallProbe();
    StallProbe(const StallProbe&) = delete;
    StallProbe& operator=(const StallProbe&) = delete;
    void start();
    // Stops the thread; returns (start of the gap, its length) in ns, CLOCK_MONOTONIC.
    std::vector<std::pair<uint64_t, uint64_t>> stop();

private:
    uint64_t threshold_ns_;
    int cpu_;
    std::vector<std::pair<uint64_t, uint64_t>> gaps_;
    std::atomic<bool> running_{false};
    std::thread thread_;
};

}  // namespace gk
