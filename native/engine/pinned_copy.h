// Copies into pinned host memory: non-temporal stores, and a large copy split over helper
// threads (one core moves ~12 GB/s into pinned memory; the GPU machine's 16-core host moves a
// 512-KiB block 3-4x faster on four: docs/cuda.md "Filling a slot").
#pragma once

#include <cstddef>
#include <cstdint>

namespace gk {

// Below this a copy stays on the calling thread (waking helpers costs more than they save).
constexpr size_t kCopySplitBytes = 256 * 1024;

// dst <- src, with non-temporal stores where the CPU allows it (the GPU then reads the bytes
// from memory instead of snooping the lines the CPU has just dirtied in its caches). A copy of
// at least kCopySplitBytes is cut into chunks that the caller and the pool's helper threads take
// in turn; the caller takes chunks until none is left, so a helper that is asleep or busy only
// means the caller copies more. One split copy at a time in the process: a caller that finds the
// pool busy copies alone.
void copy_to_pinned(unsigned char* dst, const unsigned char* src, size_t bytes);

// Threads a split copy uses, the caller included (>= 1). The default is GK_COPY_THREADS when it
// is set, else a quarter of the cores the process may run on, at least 1 and at most 4.
int copy_threads();
// n >= 1 sets it (1: every copy on its caller's thread); 0 restores the default.
void set_copy_threads(int n);

struct CopyStats {
    uint64_t split_copies = 0;  // copies cut into chunks
    uint64_t chunks = 0;        // their chunks
    uint64_t helper_chunks = 0; // of those, the ones a helper thread copied
    int helper_spin_us = 0;     // the helpers' spin after the last split copy (0: they sleep at once)
};
CopyStats copy_stats();

}  // namespace gk
