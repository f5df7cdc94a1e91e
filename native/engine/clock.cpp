#include "clock.h"

#include <chrono>

#include "release_wait.h"

namespace gk {

uint64_t monotonic_ns() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

void wait_until_ns(uint64_t t_ns, int spin_us) {
    // a release with nothing to prewarm (the sleep ends by this thread's learned lateness: wake.h)
    wait_for_release(t_ns, t_ns, spin_us > 0 ? static_cast<uint64_t>(spin_us) * 1000ULL : 0, [](uint64_t) {});
}

}  // namespace gk
