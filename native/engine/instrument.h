// The benchmarks' entry points into a StreamEngine: the apparatus that measures the engine, kept
// out of the engine's own interface (docs/cuda.md, "Benchmark entry points"). An engine pays
// nothing for it until an instrument is made for it; bound as
// pygpukit_dsp._native.instrument.EngineInstrument(engine).
//
//   resident mode   blocks skip their H2D and D2H copies and compute on what the slot's device
//                   input holds (W2 beside W1 in W3); pump_resident runs them back to back
//   timing loops    time_resident (the ops alone, event-timed), time_streamed (blocks pipelined
//                   through the three streams), measure_h2d_bandwidth
//   paced blocks    process() after a wait for the block's release (ReleaseWait: sleep, prewarm,
//                   spin), and wait_release, its first half, for a caller that goes back to Python
//                   before the release (docs/cuda.md, "Paced blocks")
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "gk/cuda_api.h"

namespace gk {

class StreamEngine;

// How a paced block waits for its release (release_wait.h): the block's latency is then measured
// from its release, and the thread is warm when the block is due.
struct ReleaseWait {
    uint64_t release_ns = 0;  // CLOCK_MONOTONIC ns (Python's perf_counter_ns); 0: no wait
    int spin_us = 0;          // sleep until this long before the release, then spin up to it
    // No earlier than kPrewarmLeadNs before the release: read one word of every page of the
    // slot's pinned input and output on the host and, with mapped I/O, once from the GPU (a
    // one-thread-per-page kernel on the compute stream, waited for until the release at most).
    bool prewarm = false;
};

class EngineInstrument {
public:
    // With mapped I/O, makes the prewarm's GPU side once per engine (gk_io_touch, an event and,
    // with use_graph, a graph per slot, launched the way a block is; destroyed with the engine).
    // Waits for in-flight work.
    explicit EngineInstrument(std::shared_ptr<StreamEngine> engine);
    EngineInstrument(const EngineInstrument&) = delete;
    EngineInstrument& operator=(const EngineInstrument&) = delete;

    const std::shared_ptr<StreamEngine>& engine() const noexcept { return engine_; }

    // Resident mode: blocks skip the H2D and D2H copies (the output slots are not updated); run
    // one normal block first so that the device input holds data.
    void set_resident(bool on);
    bool resident() const;
    // Resident blocks back to back with every slot in flight, through submit()/wait() (so an
    // attached engine goes through its dispatcher), until `seconds` pass or stop_pump() is
    // called; each block's completion time (steady clock ns, the scheduler's clock). Needs
    // resident mode and an idle engine. No Python per block.
    std::vector<uint64_t> pump_resident(double seconds);
    void stop_pump() { pump_stop_.store(true); }

    // The timing loops (idle engine; each resets the ops' state after).
    // Slot 0's pinned input copied to the device once, then its compute replayed `iterations`
    // times, each timed with events: seconds per replay.
    std::vector<double> time_resident(int iterations);
    // `blocks` blocks (the pinned inputs as they are) pipelined H2D -> compute -> D2H with `slots`
    // in flight: (wall seconds of the whole run, bytes copied host -> device).
    std::pair<double, double> time_streamed(int64_t blocks, int slots);
    // Pinned -> device copies of nbytes on the h2d stream, timed with events: bytes per second.
    double measure_h2d_bandwidth(size_t nbytes, int repeats);

    // Paced blocks. wait_release: sleep until spin_us before release_ns, prewarm the slot
    // (ReleaseWait::prewarm), spin until return_at_ns (<= release_ns), return. process: the wait
    // up to the release (none when release_ns is 0), then StreamEngine::process; the trace's
    // `call` stamp is taken after the wait.
    void wait_release(int slot, const ReleaseWait& release, uint64_t return_at_ns);
    int64_t process(int slot, const void* block, int64_t n_valid, bool final, const ReleaseWait& release,
                    void* out = nullptr, int64_t out_row_items = 0);

private:
    void prewarm_slot(int slot, uint64_t until_ns);
    CUresult launch_touch(int slot);       // gk_io_touch over the slot, on the engine's compute stream
    CUgraphExec capture_touch(int slot);   // ... as a graph

    std::shared_ptr<StreamEngine> engine_;
    std::atomic<bool> pump_stop_{false};
};

}  // namespace gk
