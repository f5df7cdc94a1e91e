// Host buffers for the arrays process() returns, recycled.
//
// process() hands the caller a new array per block (the safe API: it stays valid whatever the
// engine does next). A fresh malloc per block is a tail-latency hazard on the hot path: a 16 KiB
// block sits near the heap top, so free() can trim the heap and the next block's first touch
// page-faults (a few us each in a VM). A caller that drops each output before the next one gets
// the same warm, already-faulted buffer back from here instead.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace gk {

class OutputBufferPool {
public:
    // Buffers of `nbytes` (64-byte aligned); at most `keep` idle ones are kept, `prefill` made now.
    OutputBufferPool(size_t nbytes, size_t keep = 8, size_t prefill = 2)
        : nbytes_(nbytes == 0 ? 1 : nbytes), keep_(keep) {
        for (size_t i = 0; i < prefill && i < keep; ++i) free_.push_back(make());
    }
    ~OutputBufferPool() {
        for (void* p : free_) std::free(p);
    }
    OutputBufferPool(const OutputBufferPool&) = delete;
    OutputBufferPool& operator=(const OutputBufferPool&) = delete;

    size_t nbytes() const noexcept { return nbytes_; }

    // An idle buffer, or a new one with its pages already touched.
    void* take() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!free_.empty()) {
                void* p = free_.back();
                free_.pop_back();
                return p;
            }
        }
        return make();
    }

    // Back to the pool (freed when `keep` buffers are idle already).
    void give(void* p) noexcept {
        if (!p) return;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (free_.size() < keep_) {
                free_.push_back(p);
                return;
            }
        }
        std::free(p);
    }

    size_t idle() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return free_.size();
    }

private:
    void* make() const {
        const size_t rounded = (nbytes_ + 63) / 64 * 64;
        void* p = std::aligned_alloc(64, rounded);
        if (!p) throw std::bad_alloc();
        std::memset(p, 0, rounded);  // fault the pages in now, not on the hot path
        return p;
    }

    const size_t nbytes_;
    const size_t keep_;
    mutable std::mutex mutex_;
    std::vector<void*> free_;
};

}  // namespace gk
