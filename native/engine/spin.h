// A pause in a spin loop: lets the sibling hyper-thread run and saves power while a waiting
// thread polls (the engine's completion waits, the dispatcher's worker).
#pragma once

#include <thread>

namespace gk {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#else
    std::this_thread::yield();
#endif
}

}  // namespace gk
