// The pool behind copy_to_pinned (pinned_copy.h). A split copy is one job: its chunks are
// claimed through one atomic word holding the job's number, the next chunk and the chunk count,
// so a helper that wakes late can never take a chunk of another job; the caller returns when
// every claimed chunk is copied. Helpers spin kHelperSpinUs after a job when the job came within
// that of the one before (blocks that follow each other find them awake), else sleep at once (a
// paced stream of large blocks does not pay three spinning cores between its blocks).
#include "pinned_copy.h"

#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "spin.h"

namespace gk {
namespace {

constexpr size_t kMinChunkBytes = 64 * 1024;
constexpr size_t kChunkAlign = 4096;
constexpr int kMaxThreads = 16;
constexpr int kHelperSpinUs = 200;  // the engine's default spin window (EngineOptions::spin_us)

void copy_nt(unsigned char* dst, const unsigned char* src, size_t bytes) {
#if defined(__SSE2__)
    if ((reinterpret_cast<uintptr_t>(dst) & 15) == 0 && (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
        const size_t vecs = bytes / 16;
        auto* d = reinterpret_cast<__m128i*>(dst);
        const auto* v = reinterpret_cast<const __m128i*>(src);
        for (size_t i = 0; i < vecs; ++i) _mm_stream_si128(d + i, _mm_loadu_si128(v + i));
        std::memcpy(dst + vecs * 16, src + vecs * 16, bytes - vecs * 16);
        _mm_sfence();  // the stores are visible before the copy counts as done
        return;
    }
#endif
    std::memcpy(dst, src, bytes);
}

int default_threads() {
    if (const char* e = std::getenv("GK_COPY_THREADS")) {
        char* end = nullptr;
        const long v = std::strtol(e, &end, 10);
        if (end != e && *end == '\0' && v >= 1) return static_cast<int>(v < kMaxThreads ? v : kMaxThreads);
    }
    // the cores this process may run on (a taskset or cpuset narrows them), not the host's
    int cores = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) cores = CPU_COUNT(&set);
#endif
    const int quarter = cores / 4;
    return quarter < 1 ? 1 : quarter > 4 ? 4 : quarter;
}

std::atomic<int> g_threads{0};  // 0: not chosen yet
std::atomic<uint64_t> g_split{0}, g_chunks{0}, g_helper_chunks{0};
std::atomic<int> g_spin_us{0};  // the spin the last split copy left its helpers

// claim word: job number (32 bits) | next chunk (16) | chunk count (16)
constexpr uint64_t job_of(uint64_t w) { return w >> 32; }
constexpr uint64_t next_of(uint64_t w) { return (w >> 16) & 0xffffu; }
constexpr uint64_t count_of(uint64_t w) { return w & 0xffffu; }

class CopyPool {
public:
    // The copy on the caller and the pool's helpers; false (nothing copied) when another copy holds it.
    bool run(unsigned char* dst, const unsigned char* src, size_t bytes, int threads) {
        std::unique_lock<std::mutex> job(job_mutex_, std::try_to_lock);
        if (!job.owns_lock()) return false;
        const auto start = std::chrono::steady_clock::now();
        const bool close = start - last_end_ < std::chrono::microseconds(kHelperSpinUs);
        spin_us_.store(close ? kHelperSpinUs : 0);
        g_spin_us.store(close ? kHelperSpinUs : 0, std::memory_order_relaxed);
        start_helpers(threads - 1);
        active_.store(threads - 1);
        size_t chunk = bytes / (2 * static_cast<size_t>(threads));
        if (chunk < kMinChunkBytes) chunk = kMinChunkBytes;
        chunk = (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
        const uint64_t count = (bytes + chunk - 1) / chunk;  // at most 2 x threads + 1: fits the claim word's 16 bits
        dst_ = dst;
        src_ = src;
        bytes_ = bytes;
        chunk_ = chunk;
        done_.store(0);
        const uint64_t job_no = (job_of(claim_.load()) + 1) & 0xffffffffu;
        claim_.store(job_no << 32 | count);  // seq_cst: published before notify() looks for sleepers
        wake_.notify();
        while (take(job_no, false)) {
        }
        while (done_.load(std::memory_order_acquire) < count) cpu_relax();
        g_split.fetch_add(1, std::memory_order_relaxed);
        g_chunks.fetch_add(count, std::memory_order_relaxed);
        last_end_ = std::chrono::steady_clock::now();
        return true;
    }

private:
    // Claims and copies one chunk of job `job_no`; false when the job has none left (or is over).
    bool take(uint64_t job_no, bool helper) {
        uint64_t w = claim_.load(std::memory_order_acquire);
        for (;;) {
            if (job_of(w) != job_no || next_of(w) >= count_of(w)) return false;
            if (claim_.compare_exchange_weak(w, w + (1u << 16), std::memory_order_acq_rel)) break;
        }
        // the job's fields stay as they are until its caller has seen this chunk done
        const size_t begin = static_cast<size_t>(next_of(w)) * chunk_;
        const size_t end = begin + chunk_ < bytes_ ? begin + chunk_ : bytes_;
        copy_nt(dst_ + begin, src_ + begin, end - begin);
        if (helper) g_helper_chunks.fetch_add(1, std::memory_order_relaxed);
        done_.fetch_add(1, std::memory_order_release);
        return true;
    }

    void start_helpers(int n) {
        while (static_cast<int>(helpers_.size()) < n) {
            const int index = static_cast<int>(helpers_.size());
            helpers_.emplace_back([this, index] { helper_main(index); });
            helpers_.back().detach();  // the pool lives as long as the process (see pool())
        }
    }

    void helper_main(int index) {
        uint64_t seen = job_of(claim_.load());
        for (;;) {
            wake_.wait([&] { return job_of(claim_.load()) != seen; }, spin_us_.load());
            seen = job_of(claim_.load());
            if (index >= active_.load()) continue;  // fewer threads asked for than were started
            while (take(seen, true)) {
            }
        }
    }

    std::mutex job_mutex_;
    std::atomic<uint64_t> claim_{0};
    std::atomic<uint64_t> done_{0};
    std::atomic<int> active_{0};
    unsigned char* dst_ = nullptr;
    const unsigned char* src_ = nullptr;
    size_t bytes_ = 0, chunk_ = 0;
    std::atomic<int> spin_us_{0};  // the helpers' spin after the current job
    std::chrono::steady_clock::time_point last_end_{};  // the last job's end (under job_mutex_)
    SpinWaiter wake_;
    std::vector<std::thread> helpers_;
};

// One pool a process, never destroyed: its helpers may sleep in it while the interpreter exits.
// A forked child (whose copy of the pool has no threads, and maybe a mutex a thread held) makes
// its own.
CopyPool& pool() {
    static std::mutex m;
    static CopyPool* p = nullptr;
    static pid_t owner = 0;
    std::lock_guard<std::mutex> lock(m);
    const pid_t me = getpid();
    if (p == nullptr || owner != me) {
        p = new CopyPool();
        owner = me;
    }
    return *p;
}

}  // namespace

int copy_threads() {
    int n = g_threads.load();
    if (n == 0) {
        n = default_threads();
        int expected = 0;
        if (!g_threads.compare_exchange_strong(expected, n)) n = expected;
    }
    return n;
}

void set_copy_threads(int n) {
    if (n < 0) n = 0;
    g_threads.store(n == 0 ? default_threads() : (n < kMaxThreads ? n : kMaxThreads));
}

void copy_to_pinned(unsigned char* dst, const unsigned char* src, size_t bytes) {
    const int threads = bytes >= kCopySplitBytes ? copy_threads() : 1;
    if (threads > 1 && pool().run(dst, src, bytes, threads)) return;
    copy_nt(dst, src, bytes);
}

CopyStats copy_stats() {
    CopyStats s;
    s.split_copies = g_split.load();
    s.chunks = g_chunks.load();
    s.helper_chunks = g_helper_chunks.load();
    s.helper_spin_us = g_spin_us.load();
    return s;
}

}  // namespace gk
