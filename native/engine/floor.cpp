#include "floor.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/loader.h"
#include "release_wait.h"
#include "spin.h"

namespace gk {

RoundTripFloor::RoundTripFloor(std::shared_ptr<Device> device, size_t in_bytes, size_t out_bytes)
    : device_(std::move(device)), in_bytes_(in_bytes), out_bytes_(out_bytes) {
    if (!device_) throw std::invalid_argument("RoundTripFloor needs a Device");
    if (in_bytes == 0 || out_bytes == 0) throw std::invalid_argument("RoundTripFloor needs in_bytes and out_bytes > 0");
    // the realtime streams' priority and the same kinds of memory as an engine's slots
    stream_ = std::make_unique<Stream>(device_, device_->greatest_stream_priority());
    h_in_ = std::make_unique<PinnedBuffer>(device_, in_bytes);
    h_out_ = std::make_unique<PinnedBuffer>(device_, out_bytes);
    d_buf_ = std::make_unique<DeviceBuffer>(device_, std::max(in_bytes, out_bytes));
    std::memset(h_in_->data(), 0, in_bytes);
    d_buf_->memset(0, d_buf_->nbytes(), 0, stream_->handle());
    const DriverApi& api = driver();
    device_->make_current();
    cu_check(api.cuEventCreate(&done_, CU_EVENT_DISABLE_TIMING), "cuEventCreate", "creating the floor's event");
    stream_->synchronize();
}

RoundTripFloor::~RoundTripFloor() {
    if (const DriverApi* api = driver_if_loaded(); api && done_) {
        device_->make_current();
        api->cuEventDestroy(done_);
    }
}

void RoundTripFloor::prewarm(uint64_t until_ns) {
    // the same as StreamEngine::prewarm_slot: the GPU touches the buffers first (here a 4-byte copy
    // each way), the host reads every line of the pinned input and a word of each output page
    const DriverApi& api = driver();
    device_->make_current();
    cu_check(api.cuMemcpyHtoDAsync(d_buf_->ptr(), h_in_->data(), 4, stream_->handle()), "cuMemcpyHtoDAsync_v2",
             "the floor's prewarm");
    cu_check(api.cuMemcpyDtoHAsync(h_out_->data(), d_buf_->ptr(), 4, stream_->handle()), "cuMemcpyDtoHAsync_v2",
             "the floor's prewarm");
    cu_check(api.cuEventRecord(done_, stream_->handle()), "cuEventRecord", "the floor's prewarm");
    touch_host(h_in_->data(), in_bytes_, 64, h_out_->data(), out_bytes_);  // fill() is a plain memcpy
    while (api.cuEventQuery(done_) == CUDA_ERROR_NOT_READY && monotonic_ns() < until_ns) cpu_relax();
}

void RoundTripFloor::run(const void* src, void* dst, uint64_t release_ns, int spin_us, bool prewarm_first) {
    if (spin_us < 0) throw std::invalid_argument("spin_us must be >= 0");
    if (release_ns > 0)
        wait_for_release(release_ns, release_ns, static_cast<uint64_t>(spin_us) * 1000ULL, [&](uint64_t until) {
            if (prewarm_first) prewarm(until);
        });
    fill(src);
    submit();
    while (!try_finish(dst)) cpu_relax();
}

void RoundTripFloor::fill(const void* src) { std::memcpy(h_in_->data(), src, in_bytes_); }

void RoundTripFloor::submit() {
    const DriverApi& api = driver();
    device_->make_current();
    cu_check(api.cuMemcpyHtoDAsync(d_buf_->ptr(), h_in_->data(), in_bytes_, stream_->handle()),
             "cuMemcpyHtoDAsync_v2", "the floor's block in");
    cu_check(api.cuMemcpyDtoHAsync(h_out_->data(), d_buf_->ptr(), out_bytes_, stream_->handle()),
             "cuMemcpyDtoHAsync_v2", "the floor's block out");
    cu_check(api.cuEventRecord(done_, stream_->handle()), "cuEventRecord", "the floor's block");
}

bool RoundTripFloor::try_finish(void* dst) {
    const DriverApi& api = driver();
    device_->make_current();
    const CUresult r = api.cuEventQuery(done_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    cu_check(r, "cuEventQuery", "waiting for the floor's block");
    std::memcpy(dst, h_out_->data(), out_bytes_);
    return true;
}

}  // namespace gk
