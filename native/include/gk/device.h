// One GPU: its properties, its retained primary context and its memory pool.
//
// Every object that owns a CUDA resource (buffers, streams, events, modules) holds a
// shared_ptr<Device>, so the context outlives them, and makes the context current on the
// calling thread before it touches CUDA. Nothing here needs the Python GIL: an engine thread
// can use these classes directly.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "gk/cuda_api.h"

namespace gk {

class DeviceMemoryPool;
class Module;

constexpr int kMinSmMajor = 8;  // Ampere and newer

struct DeviceProperties {
    int index = 0;
    std::string name;
    int sm_major = 0;
    int sm_minor = 0;
    size_t total_memory = 0;
    int multiprocessors = 0;
    int l2_cache_bytes = 0;
    int max_shared_per_block = 0;
    int max_shared_per_block_optin = 0;
    int max_shared_per_multiprocessor = 0;
    int max_threads_per_block = 0;
    int max_threads_per_multiprocessor = 0;
    int max_registers_per_block = 0;
    int warp_size = 0;
    int clock_khz = 0;
    int memory_clock_khz = 0;
    int memory_bus_width_bits = 0;
    int async_engines = 0;
    int pci_domain_id = 0;
    int pci_bus_id = 0;
    int pci_device_id = 0;
    bool stream_priorities_supported = false;
    bool concurrent_kernels = false;
    bool integrated = false;

    std::string arch() const;  // "sm_90"
};

// cuInit(0) once per process; throws DeviceError with the reason when it fails.
void init_driver();
int device_count();
DeviceProperties query_properties(int index);

// "" when the GPU is usable, else the refusal, e.g.
// "GPU 0 (NVIDIA T4) is SM 7.5; pygpukit-dsp needs SM 8.0 or newer".
std::string sm_refusal(int index, const std::string& name, int sm_major, int sm_minor);

class Device;

// Library objects an op has finished with that the next op of the same shape can take as they
// are (a cuFFT plan of the same layout, a cuBLAS handle with the same workspace size), so that
// they are made once per shape and reused: an engine opened again in the same process (the
// admission's calibration engine, a benchmark's second open, a restarted session) makes no plan.
// Entries are taken whole (one user at a time); the least recently put beyond kMaxEntries are
// destroyed; the rest when the Device goes, before its memory pool.
class IdleLibraryObjects {
public:
    static constexpr size_t kMaxEntries = 32;
    using Destroy = void (*)(Device& device, void* object);
    struct Stats {
        uint64_t made = 0;     // note_made() calls (plans / handles created)
        uint64_t reused = 0;   // take() hits
        uint64_t destroyed = 0;
        size_t idle = 0;       // entries kept now
    };
    explicit IdleLibraryObjects(Device& device) : device_(device) {}
    ~IdleLibraryObjects() { clear(); }
    // Keeps `object` under `key`; destroy(device, object) frees it when it is not taken again.
    void put(const std::string& key, void* object, Destroy destroy);
    void* take(const std::string& key);  // nullptr when none is idle
    void note_made();
    void clear();
    Stats stats() const;

private:
    struct Entry {
        std::string key;
        void* object;
        Destroy destroy;
    };
    Device& device_;
    mutable std::mutex mutex_;
    std::list<Entry> entries_;  // front = least recently put
    Stats stats_;
};

class Device : public std::enable_shared_from_this<Device> {
public:
    // The one live Device for this index (created on demand; refused below SM 8.0).
    static std::shared_ptr<Device> open(int index);

    explicit Device(int index);
    ~Device();
    Device(const Device&) = delete;
    Device& operator=(const Device&) = delete;

    int index() const noexcept { return props_.index; }
    const DeviceProperties& properties() const noexcept { return props_; }
    std::string arch() const { return props_.arch(); }
    CUdevice handle() const noexcept { return device_; }
    CUcontext context() const noexcept { return context_; }

    // Binds the primary context to the calling thread (a no-op when it already is).
    void make_current() const;
    void synchronize() const;
    std::pair<size_t, size_t> memory_info() const;  // (free, total) bytes
    // CUDA convention: numerically lower is higher priority, e.g. (0, -5).
    int least_stream_priority() const noexcept { return least_priority_; }
    int greatest_stream_priority() const noexcept { return greatest_priority_; }

    DeviceMemoryPool& memory_pool() noexcept { return *pool_; }
    IdleLibraryObjects& idle_library_objects() noexcept { return *idle_; }
    // Destroys the idle plans and handles (the pool calls it when an allocation runs out of memory).
    void release_idle_library_objects() {
        if (idle_) idle_->clear();
    }

    // Loaded modules by cache key; used by gk::load_module so each cubin is loaded once.
    std::mutex& module_mutex() noexcept { return module_mutex_; }
    std::unordered_map<std::string, std::weak_ptr<Module>>& module_cache() noexcept {
        return modules_;
    }

private:
    DeviceProperties props_;
    CUdevice device_ = 0;
    CUcontext context_ = nullptr;
    int least_priority_ = 0;
    int greatest_priority_ = 0;
    std::unique_ptr<DeviceMemoryPool> pool_;
    std::unique_ptr<IdleLibraryObjects> idle_;  // cleared before pool_ (its objects hold pool memory)
    std::mutex module_mutex_;
    std::unordered_map<std::string, std::weak_ptr<Module>> modules_;
};

}  // namespace gk
