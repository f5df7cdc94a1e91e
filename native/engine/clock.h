// The engine's clock (CLOCK_MONOTONIC: Python's time.perf_counter_ns) and the wait for a time on
// it, shared by the engine, the dispatcher's helpers, the paced drivers and the clock-paced sources
// (_native.wait_until).
#pragma once

#include <cstdint>

namespace gk {

uint64_t monotonic_ns();

// Sleeps until `t_ns` (CLOCK_MONOTONIC) less `spin_us`, then spins up to it. The calling thread's
// timer slack is set to 1 ns the first time (prctl PR_SET_TIMERSLACK: the default 50 us slack
// would make every sleep up to 50 us late). Returns at once when t_ns has passed.
void wait_until_ns(uint64_t t_ns, int spin_us);

}  // namespace gk
