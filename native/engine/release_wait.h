// What a paced block does before its release (EngineInstrument::wait_release, RoundTripFloor::run,
// and without a prewarm wait_until_ns): sleep until shortly before it (wake.h), prewarm, spin up to it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "clock.h"
#include "spin.h"
#include "wake.h"

namespace gk {

// The prewarm comes no earlier than this before the release: a thread that spins longer (a
// spin window past the default 200 us, or through the whole period) prewarms where a default
// one would, not milliseconds ahead, when the GPU's clocks and the pages it warmed go cold again.
constexpr uint64_t kPrewarmLeadNs = 200'000;

// Returns at until_ns (<= release_ns) at the earliest: sleeps until spin_ns (+ the thread's wake
// guard) before release_ns, spins to kPrewarmLeadNs before it, calls prewarm(until_ns), spins to
// until_ns. Already past until_ns: returns at once, without the prewarm (the block goes at once).
template <class Prewarm>
void wait_for_release(uint64_t release_ns, uint64_t until_ns, uint64_t spin_ns, Prewarm&& prewarm) {
    if (monotonic_ns() >= until_ns) return;
    sleep_before(release_ns, spin_ns);
    const uint64_t prewarm_at = std::min(until_ns, release_ns > kPrewarmLeadNs ? release_ns - kPrewarmLeadNs : 0);
    while (monotonic_ns() < prewarm_at) cpu_relax();
    prewarm(until_ns);
    while (monotonic_ns() < until_ns) cpu_relax();
}

// The host half of a prewarm: one word of every page of the pinned output (its TLB entries: the
// GPU's writes invalidate its lines anyway) and of the pinned input every `in_step` bytes. An
// engine fills its input with non-temporal stores, which must first evict a line the core holds:
// after reading every line (in_step 64) the fill ran slower than after reading one word per page
// (4096: the TLB entries only; on the H100 the paced fill's p50 was 8.6 against 5.6 us, a host
// probe of 64 KiB copies 3.1-3.3 us against 2.4, 2.0 back to back; docs/benchmarks.md). The
// round-trip floor fills with plain stores, which a read line speeds up.
inline void touch_host(const void* in, size_t in_bytes, size_t in_step, const void* out, size_t out_bytes) {
    unsigned sum = 0;
    const auto* p = static_cast<const volatile unsigned char*>(in);
    for (size_t off = 0; off < in_bytes; off += in_step) sum += p[off];
    const auto* q = static_cast<const volatile unsigned char*>(out);
    for (size_t off = 0; off < out_bytes; off += 4096) sum += q[off];
    static thread_local volatile unsigned sink = 0;
    sink = sink + sum;
}

}  // namespace gk
