#include "paced.h"
#include "clock.h"
#include "spin.h"

#include <algorithm>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "floor.h"
#include "off_cpu.h"
#include "stream_engine.h"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace gk {
namespace {

constexpr uint64_t kStartDelayNs = 20'000'000;  // the driver threads start before the first release

struct InFlight {
    int slot;
    uint64_t release_ns;
    int64_t fill_ns;
    int64_t submit_ns;
};

struct Driven {
    const PacedStreamSpec* spec;
    PacedStreamResult* result;
    uint64_t k = 0;                // next block to release
    bool late_counted = false;     // block k's lateness counted
    std::deque<InFlight> in_flight;
    std::vector<unsigned char> sink;  // where outputs are copied out
    int64_t items = 0, out_items = 0;
    int slots = 1;

    // an engine's slot, or the floor's one block
    void fill(int slot, const void* src) {
        if (spec->floor) spec->floor->fill(src);
        else spec->engine->fill(slot, src, items);
    }
    void submit(int slot) {
        if (spec->floor) spec->floor->submit();
        else spec->engine->submit(slot, spec->engine->block_items(), false);  // a graph: its sources' items
    }
    bool try_finish(int slot) {
        if (spec->floor) return spec->floor->try_finish(sink.data());
        int64_t n_out = 0;
        if (!spec->engine->try_wait(slot, &n_out)) return false;
        // a graph's packed output is copied whole (its sinks' slices side by side)
        spec->engine->copy_output(slot, spec->engine->is_graph() ? out_items : n_out, sink.data(), out_items);
        return true;
    }
};

void drive(std::vector<Driven>& mine, uint64_t start, uint64_t timed_from, uint64_t end, int spin_us,
           OffCpuMeter& meter) {
    for (;;) {
        bool progressed = false, busy = false, pending = false;
        uint64_t next_release = UINT64_MAX;
        for (Driven& d : mine) {
            meter.tick();
            while (!d.in_flight.empty()) {
                const InFlight f = d.in_flight.front();
                if (!d.try_finish(f.slot)) break;
                const uint64_t t = monotonic_ns();
                if (f.release_ns >= timed_from) {
                    d.result->latency_ns.push_back(static_cast<int64_t>(t - f.release_ns));
                    d.result->fill_ns.push_back(f.fill_ns);
                    d.result->submit_ns.push_back(f.submit_ns);
                }
                d.in_flight.pop_front();
                progressed = true;
            }
            const uint64_t release = start + d.spec->phase_ns + d.k * d.spec->period_ns;
            if (release < end) {
                pending = true;
                const uint64_t now = monotonic_ns();
                if (release <= now) {
                    if (static_cast<int>(d.in_flight.size()) < d.slots) {
                        const int slot = static_cast<int>(d.k % static_cast<uint64_t>(d.slots));
                        const auto& in = d.spec->inputs;
                        const uint64_t f0 = monotonic_ns();
                        d.fill(slot, in[d.k % in.size()]);
                        const uint64_t f1 = monotonic_ns();
                        d.submit(slot);
                        const int64_t fill = static_cast<int64_t>(f1 - f0);
                        const int64_t submit = static_cast<int64_t>(monotonic_ns() - f1);
                        d.in_flight.push_back({slot, release, fill, submit});
                        ++d.k;
                        ++d.result->released;
                        d.late_counted = false;
                        progressed = true;
                    } else if (!d.late_counted) {
                        ++d.result->late;  // sent when a slot frees; its latency still counts from `release`
                        d.late_counted = true;
                    }
                } else {
                    next_release = std::min(next_release, release);
                }
            }
            busy |= !d.in_flight.empty();
        }
        if (!pending && !busy) return;
        if (progressed) continue;
        if (busy) {
            cpu_relax();
            continue;
        }
        if (next_release != UINT64_MAX) {
            meter.rest();  // a sleep on purpose is not a gap
            wait_until_ns(next_release, spin_us);
        }
    }
}

}  // namespace

PacedRun run_paced(const std::vector<PacedStreamSpec>& streams, double warmup_s, double seconds, int threads,
                   int spin_us, uint64_t watch_gap_ns) {
    if (streams.empty()) throw std::invalid_argument("run_paced needs at least one stream");
    if (!(seconds > 0) || warmup_s < 0) throw std::invalid_argument("run_paced needs seconds > 0 and warmup_s >= 0");
    if (threads < 1) throw std::invalid_argument("run_paced needs threads >= 1");
    if (spin_us < 0) throw std::invalid_argument("spin_us must be >= 0");
    PacedRun run;
    run.streams.resize(streams.size());
    std::vector<std::vector<Driven>> groups(static_cast<size_t>(std::min<size_t>(threads, streams.size())));
    for (size_t i = 0; i < streams.size(); ++i) {
        const PacedStreamSpec& s = streams[i];
        if (!s.engine == !s.floor)
            throw std::invalid_argument("stream " + std::to_string(i) + " needs an engine or a floor (one of them)");
        if (s.period_ns == 0) throw std::invalid_argument("stream " + std::to_string(i) + " has period 0");
        if (s.inputs.empty()) throw std::invalid_argument("stream " + std::to_string(i) + " has no input blocks");
        Driven d;
        d.spec = &s;
        d.result = &run.streams[i];
        if (s.engine) {
            d.items = s.engine->input_desc().items;
            d.out_items = s.engine->output_desc().items;
            d.slots = s.engine->slots();
            d.sink.resize(s.engine->output_desc().nbytes());
        } else {
            d.sink.resize(s.floor->out_bytes());
        }
        const double blocks = (warmup_s + seconds) * 1e9 / static_cast<double>(s.period_ns);
        d.result->latency_ns.reserve(static_cast<size_t>(blocks) + 2);
        d.result->fill_ns.reserve(static_cast<size_t>(blocks) + 2);
        d.result->submit_ns.reserve(static_cast<size_t>(blocks) + 2);
        groups[i % groups.size()].push_back(std::move(d));
    }
    run.start_ns = monotonic_ns() + kStartDelayNs;
    run.timed_from_ns = run.start_ns + static_cast<uint64_t>(warmup_s * 1e9);
    run.end_ns = run.timed_from_ns + static_cast<uint64_t>(seconds * 1e9);
    std::vector<std::exception_ptr> errors(groups.size());
    std::vector<std::unique_ptr<OffCpuMeter>> meters;
    for (size_t t = 0; t < groups.size(); ++t) {
        meters.push_back(std::make_unique<OffCpuMeter>());
        if (watch_gap_ns > 0) meters.back()->start(watch_gap_ns);
    }
    std::vector<std::thread> pool;
    for (size_t t = 0; t < groups.size(); ++t)
        pool.emplace_back([&, t] {
            try {
                drive(groups[t], run.start_ns, run.timed_from_ns, run.end_ns, spin_us, *meters[t]);
            } catch (...) {
                errors[t] = std::current_exception();
            }
        });
    for (std::thread& th : pool) th.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
    for (const auto& m : meters) run.thread_gaps.push_back(m->gaps());
    return run;
}

StallProbe::StallProbe(uint64_t threshold_ns, int cpu) : threshold_ns_(threshold_ns), cpu_(cpu) {}

StallProbe::~StallProbe() {
    if (running_.load()) stop();
}

void StallProbe::start() {
    if (running_.exchange(true)) throw std::invalid_argument("the stall probe is already running");
    gaps_.clear();
    gaps_.reserve(1 << 16);
    thread_ = std::thread([this] {
#if defined(__linux__)
        if (cpu_ >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu_, &set);
            pthread_setaffinity_np(pthread_self(), sizeof set, &set);
        }
#endif
        uint64_t last = monotonic_ns();
        while (running_.load(std::memory_order_relaxed)) {
            const uint64_t now = monotonic_ns();
            if (now - last > threshold_ns_ && gaps_.size() < (1u << 20)) gaps_.emplace_back(last, now - last);
            last = now;
        }
    });
}

std::vector<std::pair<uint64_t, uint64_t>> StallProbe::stop() {
    running_.store(false);
    if (thread_.joinable()) thread_.join();
    return gaps_;
}

}  // namespace gk
