// CUDA streams (non-blocking, with a priority) and events (timing or not).
#pragma once

#include <memory>

#include "gk/cuda_api.h"

namespace gk {

class Device;
class Event;

class Stream {
public:
    // priority follows CUDA: numerically lower runs first; it must lie within
    // [device.greatest_stream_priority(), device.least_stream_priority()]
    // (std::invalid_argument otherwise). Streams never synchronise with the legacy stream 0.
    Stream(std::shared_ptr<Device> device, int priority = 0);
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    CUstream handle() const noexcept { return stream_; }
    int priority() const noexcept { return priority_; }
    const std::shared_ptr<Device>& device() const noexcept { return device_; }

    void synchronize() const;  // blocks the calling thread
    bool query() const;        // true when all queued work has finished
    void wait(const Event& event) const;  // later work on this stream waits for the event

private:
    std::shared_ptr<Device> device_;
    CUstream stream_ = nullptr;
    int priority_ = 0;
};

class Event {
public:
    // timing=false creates the cheaper CU_EVENT_DISABLE_TIMING kind (for ordering only);
    // blocking_sync makes synchronize() sleep instead of spin.
    Event(std::shared_ptr<Device> device, bool timing = false, bool blocking_sync = false);
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    CUevent handle() const noexcept { return event_; }
    bool timing() const noexcept { return timing_; }

    void record(CUstream stream) const;  // nullptr records on the legacy stream 0
    void synchronize() const;
    bool query() const;
    // Milliseconds between two recorded timing events (both must have completed).
    static float elapsed_ms(const Event& start, const Event& end);

private:
    std::shared_ptr<Device> device_;
    CUevent event_ = nullptr;
    bool timing_ = false;
};

}  // namespace gk
