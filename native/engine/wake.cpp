#include "wake.h"

#include <algorithm>
#include <cerrno>
#include <ctime>

#if defined(__linux__)
#include <sys/prctl.h>
#else
#include <chrono>
#include <thread>
#endif

#include "clock.h"

namespace gk {
namespace {

struct WakeState {
    uint64_t guard_ns = 0;
};
thread_local WakeState wake_state;

void sleep_until_monotonic(uint64_t t_ns) {
#if defined(__linux__)
    static thread_local bool slack_set = false;
    if (!slack_set) {
        prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);  // 1 ns: no 50 us rounding of the sleep
        slack_set = true;
    }
    timespec ts;
    ts.tv_sec = static_cast<time_t>(t_ns / 1000000000ULL);
    ts.tv_nsec = static_cast<long>(t_ns % 1000000000ULL);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
#else
    const uint64_t now = monotonic_ns();
    if (t_ns > now) std::this_thread::sleep_for(std::chrono::nanoseconds(t_ns - now));
#endif
}

}  // namespace

uint64_t wake_guard_next(uint64_t guard_ns, uint64_t late_ns) {
    if (late_ns > kWakeGuardMaxNs) return guard_ns;
    if (late_ns > guard_ns) return std::min(guard_ns + kWakeGuardUpNs, kWakeGuardMaxNs);
    return guard_ns > kWakeGuardDownNs ? guard_ns - kWakeGuardDownNs : 0;
}

void sleep_before(uint64_t t_ns, uint64_t spin_ns) {
    WakeState& w = wake_state;
    const uint64_t now = monotonic_ns();
    if (now >= t_ns || t_ns - now <= spin_ns) return;
    // the guard at most doubles the spin the caller asked for (spin 0: a plain sleep, as asked)
    const uint64_t guard = std::min({w.guard_ns, spin_ns, (t_ns - now - spin_ns) / 2});
    const uint64_t target = t_ns - spin_ns - guard;
    sleep_until_monotonic(target);
    const uint64_t after = monotonic_ns();
    const uint64_t late = after > target ? after - target : 0;
    w.guard_ns = wake_guard_next(w.guard_ns, late);
}

uint64_t wake_guard_ns() { return wake_state.guard_ns; }

void set_wake_guard_ns(uint64_t ns) { wake_state.guard_ns = ns; }

}  // namespace gk
