// Waiting by spinning: a pause in a spin loop, and SpinWaiter (spin, then block on a condition
// variable), which the engine's hand-off between callers and its worker uses in both directions.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace gk {

// A pause in a spin loop: lets the sibling hyper-thread run and saves power while a waiting
// thread polls (the engine's completion waits, the dispatcher's worker).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#else
    std::this_thread::yield();
#endif
}

// Spin-then-block waiting on a predicate over atomics; any thread may notify.
class SpinWaiter {
public:
    // Returns when ready() is true. ready() must read the state with seq_cst loads.
    template <class Ready>
    void wait(Ready ready, int spin_us) {
        if (spin(ready, spin_us)) return;
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        cv_.wait(lock, ready);
        sleepers_.fetch_sub(1);
    }
    // As wait(), but gives up (returns false) after spin + timeout_us of blocking.
    template <class Ready>
    bool wait_for(Ready ready, int spin_us, int timeout_us) {
        if (spin(ready, spin_us)) return true;
        std::unique_lock<std::mutex> lock(mutex_);
        sleepers_.fetch_add(1);
        const bool ok = cv_.wait_for(lock, std::chrono::microseconds(timeout_us), ready);
        sleepers_.fetch_sub(1);
        return ok;
    }
    // Call after publishing the new state with a seq_cst store.
    void notify() {
        // Dekker-style: the state was published with a seq_cst store before this seq_cst load, and
        // a sleeper registers (seq_cst) before it re-checks the state under the mutex.
        if (sleepers_.load() > 0) {
            { std::lock_guard<std::mutex> lock(mutex_); }
            cv_.notify_all();
        }
    }

private:
    // ready() within spin_us of spinning (checked first, and after the spin)
    template <class Ready>
    static bool spin(Ready& ready, int spin_us) {
        if (ready()) return true;
        if (spin_us <= 0) return false;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
        unsigned i = 0;
        while (!ready()) {
            cpu_relax();
            if ((++i & 15u) == 0 && std::chrono::steady_clock::now() >= deadline) break;
        }
        return ready();
    }

    std::mutex mutex_;
    std::condition_variable cv_;
    std::atomic<int> sleepers_{0};
};

}  // namespace gk
