// Shared by the translation units of StreamEngine (stream_engine.cpp, worker.cpp, mapped_io.cpp,
// chunks.cpp) and of EngineInstrument (instrument.cpp); not part of the engine's interface.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gk/cuda_api.h"
#include "gk/errors.h"
#include "gk/loader.h"

namespace gk::engine_detail {

using Clock = std::chrono::steady_clock;

// The steady clock in ns (CLOCK_MONOTONIC, as monotonic_ns): trace stamps, gpu timing.
inline uint64_t now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// Completion polls once the spin phase is over and a new submission may still arrive.
constexpr int kPollUs = 100;
constexpr int kMaxSlots = 16;
// Threads per CTA of the io kernels (gk_io_pull / gk_io_push / gk_io_touch's launches).
constexpr unsigned kIoThreads = 128;

// Sets the flag for its lifetime: reset() or a timing method holds the engine, submit() refuses.
struct ExclusiveGuard {
    std::atomic<bool>& flag;
    explicit ExclusiveGuard(std::atomic<bool>& f) : flag(f) { flag.store(true); }
    ~ExclusiveGuard() { flag.store(false); }
    ExclusiveGuard(const ExclusiveGuard&) = delete;
    ExclusiveGuard& operator=(const ExclusiveGuard&) = delete;
};

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
    TimingEvents(const TimingEvents&) = delete;
    TimingEvents& operator=(const TimingEvents&) = delete;
};

// "slot N does not exist (slots 0..K-1)" unless 0 <= slot < slots.
inline void check_slot(int slot, int slots) {
    if (slot < 0 || slot >= slots)
        throw std::invalid_argument("slot " + std::to_string(slot) + " does not exist (slots 0.." +
                                    std::to_string(slots - 1) + ")");
}

}  // namespace gk::engine_detail
