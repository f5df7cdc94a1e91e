// The round trip's floor (benchmarks only: the paced bench, docs/benchmarks.md "Paced W1"): the
// least a block of a given size needs on this host and GPU, with no pipeline. One block: copy it
// into pinned memory, to the GPU, and out_bytes of the same device buffer back (the copy engines,
// on one stream: the block's first bytes, zeros beyond it), poll for the completion, copy the
// result out. Paced the way the project's blocks
// are (the same sleep, prewarm and spin up to the release), against itself back to back, it
// measures what a paced block pays on this machine whatever it runs: a paced target the floor
// itself misses is below what the machine allows in that run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "gk/cuda_api.h"
#include "gk/memory.h"
#include "gk/stream.h"

namespace gk {

class Device;

class RoundTripFloor {
public:
    RoundTripFloor(std::shared_ptr<Device> device, size_t in_bytes, size_t out_bytes);
    ~RoundTripFloor();
    RoundTripFloor(const RoundTripFloor&) = delete;
    RoundTripFloor& operator=(const RoundTripFloor&) = delete;

    size_t in_bytes() const noexcept { return in_bytes_; }
    size_t out_bytes() const noexcept { return out_bytes_; }

    // One block, src (in_bytes) -> dst (out_bytes). release_ns > 0: first wait for it the way a
    // paced engine block does (EngineInstrument::process): sleep until spin_us before it, prewarm
    // (every line of the pinned input read, a page of each buffer through a 4-byte copy each way
    // on the stream, polled), spin up to it. release_ns 0: at once (back to back).
    void run(const void* src, void* dst, uint64_t release_ns, int spin_us, bool prewarm);

    // The same block in steps, for a driver thread that keeps many floors in flight (run_paced:
    // the capacity floor): fill copies src into the pinned input, submit enqueues the round trip,
    // try_finish is true once it is back, with out_bytes copied to dst.
    void fill(const void* src);
    void submit();
    bool try_finish(void* dst);

private:
    void prewarm(uint64_t until_ns);

    std::shared_ptr<Device> device_;
    size_t in_bytes_, out_bytes_;
    std::unique_ptr<Stream> stream_;
    std::unique_ptr<PinnedBuffer> h_in_, h_out_;
    std::unique_ptr<DeviceBuffer> d_buf_;  // max(in_bytes, out_bytes)
    CUevent done_ = nullptr;
};

}  // namespace gk
