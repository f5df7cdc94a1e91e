#include "gk/stream.h"

#include <stdexcept>
#include <string>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/loader.h"

namespace gk {

Stream::Stream(std::shared_ptr<Device> device, int priority)
    : device_(std::move(device)), priority_(priority) {
    const int least = device_->least_stream_priority();
    const int greatest = device_->greatest_stream_priority();
    if (priority > least || priority < greatest)
        throw std::invalid_argument("stream priority " + std::to_string(priority) +
                                    " is outside GPU " + std::to_string(device_->index()) +
                                    "'s range " + std::to_string(greatest) + " (highest) .. " +
                                    std::to_string(least) + " (lowest)");
    device_->make_current();
    cu_check(driver().cuStreamCreateWithPriority(&stream_, CU_STREAM_NON_BLOCKING, priority),
             "cuStreamCreateWithPriority", "creating a stream with priority " + std::to_string(priority));
}

Stream::~Stream() {
    const DriverApi* api = driver_if_loaded();
    if (!stream_ || !api) return;
    try {
        device_->make_current();
    } catch (const Error&) {
        return;
    }
    api->cuStreamDestroy(stream_);
}

void Stream::synchronize() const {
    device_->make_current();
    cu_check(driver().cuStreamSynchronize(stream_), "cuStreamSynchronize");
}

bool Stream::query() const {
    device_->make_current();
    CUresult r = driver().cuStreamQuery(stream_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    cu_check(r, "cuStreamQuery");
    return true;
}

void Stream::wait(const Event& event) const {
    device_->make_current();
    cu_check(driver().cuStreamWaitEvent(stream_, event.handle(), 0), "cuStreamWaitEvent");
}

Event::Event(std::shared_ptr<Device> device, bool timing, bool blocking_sync)
    : device_(std::move(device)), timing_(timing) {
    unsigned int flags = timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING;
    if (blocking_sync) flags |= CU_EVENT_BLOCKING_SYNC;
    device_->make_current();
    cu_check(driver().cuEventCreate(&event_, flags), "cuEventCreate");
}

Event::~Event() {
    const DriverApi* api = driver_if_loaded();
    if (!event_ || !api) return;
    try {
        device_->make_current();
    } catch (const Error&) {
        return;
    }
    api->cuEventDestroy(event_);
}

void Event::record(CUstream stream) const {
    device_->make_current();
    cu_check(driver().cuEventRecord(event_, stream), "cuEventRecord");
}

void Event::synchronize() const {
    device_->make_current();
    cu_check(driver().cuEventSynchronize(event_), "cuEventSynchronize");
}

bool Event::query() const {
    device_->make_current();
    CUresult r = driver().cuEventQuery(event_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    cu_check(r, "cuEventQuery");
    return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
    if (!start.timing_ || !end.timing_)
        throw std::invalid_argument(
            "elapsed time needs two events created with timing=True; this one was created without");
    start.device_->make_current();
    float ms = 0.0f;
    cu_check(driver().cuEventElapsedTime(&ms, start.event_, end.event_), "cuEventElapsedTime");
    return ms;
}

}  // namespace gk
