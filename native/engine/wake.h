// Sleeping until shortly before a release on a host whose wake-ups come late.
//
// A thread that sleeps until `spin` before a release and then spins is on time only if its sleep
// ends within `spin`. On the GPU machine's VM a wake-up after a 5-ms sleep came 47 us late at
// p50, 120 us at p99 and 316 us at p99.9 (an H200 VM; docs/cuda.md "Paced blocks"),
// so the default 200-us window, whose first 100 us are the prewarm and the way back to Python,
// left ~1.6% of paced blocks starting late. So each thread learns its own lateness: its sleep
// ends `guard` earlier, the guard tracking the 99.8th percentile of its wake-ups' lateness (a
// stochastic quantile: up kWakeGuardUpNs when a wake-up came later than the guard, down
// kWakeGuardDownNs when not, so it settles where 0.2% of wake-ups exceed it; the rest of the
// spin window covers them). A lateness over kWakeGuardMaxNs (a stall no spin should chase) is
// not learned, and the guard never takes more than half of a sleep nor more than the spin the
// caller asked for (spin_us is the caller's spin budget: the guard at most doubles it; 0 stays a
// plain sleep). Chasing the largest lateness instead (halving every 10 s) kept ~380 us on a
// quiet H100 machine whose p99.9 was 55 us: 0.11 of a core per 5.33-ms stream against 0.04. On a
// host that wakes on time the guard stays at a few tens of microseconds; where it grows, the spin
// it adds shows in the CPU a stream uses.
#pragma once

#include <cstdint>

namespace gk {

constexpr uint64_t kWakeGuardMaxNs = 1'000'000;
constexpr uint64_t kWakeGuardUpNs = 50'000;
constexpr uint64_t kWakeGuardDownNs = 100;  // up / (up + down): 0.2% of wake-ups above the guard

// The guard after a sleep that ended `late_ns` after its target.
uint64_t wake_guard_next(uint64_t guard_ns, uint64_t late_ns);
// Sleeps until spin_ns + the calling thread's guard before t_ns (CLOCK_MONOTONIC), then learns
// from how late it woke. Returns at once, without sleeping, when less than spin_ns is left. It
// does not spin: the caller spins (or prewarms) up to t_ns.
void sleep_before(uint64_t t_ns, uint64_t spin_ns);
uint64_t wake_guard_ns();              // the calling thread's guard
void set_wake_guard_ns(uint64_t ns);   // tests: the calling thread's guard (0 forgets what it learned)

}  // namespace gk
