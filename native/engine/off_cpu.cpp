#include "off_cpu.h"

#include "clock.h"

#include <cstdio>
#include <cstdlib>

#if defined(__linux__)
#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#endif

namespace gk {

OffCpuMeter::~OffCpuMeter() {
#if defined(__linux__)
    if (fd_ >= 0) ::close(fd_);
#endif
}

bool OffCpuMeter::available() {
#if defined(__linux__)
    const int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    ::close(fd);
    return true;
#else
    return false;
#endif
}

void OffCpuMeter::start(uint64_t gap_ns, uint64_t sample_ns) {
    sample_ns_.store(sample_ns, std::memory_order_relaxed);
    gap_ns_.store(gap_ns, std::memory_order_relaxed);
}

bool OffCpuMeter::read(uint64_t* ran, uint64_t* queued, uint64_t* switches) {
#if defined(__linux__)
    if (fd_ < 0) {
        // /proc/thread-self names the thread that opens it: the owning thread, here
        fd_ = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
        if (fd_ < 0) return false;
    }
    char buf[96];
    const ssize_t n = ::pread(fd_, buf, sizeof buf - 1, 0);
    if (n <= 0) return false;
    buf[n] = '\0';
    unsigned long long a = 0, b = 0, c = 0;
    if (std::sscanf(buf, "%llu %llu %llu", &a, &b, &c) != 3) return false;
    // schedstat's run time lags a running thread by up to a tick (it is brought up to date at
    // ticks and switches); the thread's CPU clock is brought up to date when read
    timespec ts{};
    if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return false;
    *ran = static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<uint64_t>(ts.tv_nsec);
    *queued = b;
    *switches = c;
    return true;
#else
    (void)ran;
    (void)queued;
    (void)switches;
    return false;
#endif
}

void OffCpuMeter::tick_on() {
    if (failed_) return;
    const uint64_t now = monotonic_ns();
    if (last_tick_ == 0) {  // the first tick, or the first after a rest: a fresh interval
        if (!read(&ran_, &queued_, &switches_)) {
            failed_ = true;
            return;
        }
        sample_at_ = last_tick_ = now;
        return;
    }
    const uint64_t since = now - last_tick_, gap_ns = gap_ns_.load(std::memory_order_relaxed);
    if (since >= gap_ns || now - sample_at_ >= sample_ns_.load(std::memory_order_relaxed)) {
        uint64_t ran = 0, queued = 0, switches = 0;
        if (!read(&ran, &queued, &switches)) {
            failed_ = true;
            return;
        }
        if (since >= gap_ns) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (gaps_.size() < kMaxGaps)
                gaps_.push_back({last_tick_, since, now - sample_at_, ran - ran_, queued - queued_, switches - switches_});
        }
        ran_ = ran;
        queued_ = queued;
        switches_ = switches;
        sample_at_ = now;
    }
    last_tick_ = now;
}

std::vector<OffCpuGap> OffCpuMeter::gaps() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return gaps_;
}

}  // namespace gk
