// Device and pinned host memory.
//
// DeviceMemoryPool is a mechanism, not a policy: it allocates, frees and reuses blocks by size
// class and keeps statistics. When to trim, how much to keep and whether to cache at all are
// decided by its caller (the Rust memory-pool policy, through the engine).
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gk/cuda_api.h"

namespace gk {

class Device;

struct PoolStats {
    size_t in_use_bytes = 0;        // handed out by acquire(), not yet released
    size_t cached_bytes = 0;        // released, kept for reuse
    size_t reserved_bytes = 0;      // in_use + cached (what cuMemAlloc holds)
    size_t peak_reserved_bytes = 0;
    uint64_t requests = 0;          // acquire() calls
    uint64_t reuses = 0;            // served from the cache
    uint64_t driver_allocations = 0;
    uint64_t driver_frees = 0;
    uint64_t grants = 0;             // up-front grants made by reserve() (each one driver allocation)
    size_t granted_bytes = 0;        // bytes held by live grants (part of reserved_bytes)
};

class DeviceMemoryPool {
public:
    explicit DeviceMemoryPool(Device& device) : device_(device) {}
    ~DeviceMemoryPool();  // frees everything cached (the owning Device makes its context current)
    DeviceMemoryPool(const DeviceMemoryPool&) = delete;
    DeviceMemoryPool& operator=(const DeviceMemoryPool&) = delete;

    // Size class a request is rounded to: multiples of 512 B up to 1 MiB, then four steps per
    // power of two (at most 25 % over the request).
    static size_t size_class(size_t bytes);

    // A block of size_class(bytes): the most recently released cached one of that class when
    // there is one, else a new cuMemAlloc. On out-of-memory the cache is freed and the allocation retried once.
    CUdeviceptr acquire(size_t bytes);
    // Returns a block from acquire(): kept for reuse while caching is on, else freed at once.
    void release(CUdeviceptr ptr);
    // The first grant sized up front: one cuMemAlloc covering the size classes of `requests`
    // that the cache cannot already serve, carved into cached blocks, so that the acquire()s
    // that follow (an engine's edges and slots) are served without a driver call each. Returns
    // the bytes granted (0 when fewer than two blocks were missing, or the allocation failed:
    // the acquires then allocate one by one, with their own out-of-memory handling).
    // A carved block goes back to the driver only with its whole grant: when every block of the
    // grant is cached, trim() (or release() with caching off) frees the grant at once.
    size_t reserve(const std::vector<size_t>& requests);
    // Frees cached blocks, least recently released first, until at most keep_bytes stay cached
    // (the blocks of a grant only all together, once none of them is in use). Returns the bytes
    // freed.
    size_t trim(size_t keep_bytes = 0);
    void set_caching(bool enabled);
    bool caching() const;
    PoolStats stats() const;
    // (class bytes, count) of the cached blocks.
    std::vector<std::pair<size_t, size_t>> cached_blocks() const;

private:
    struct CachedBlock {
        CUdeviceptr ptr;
        size_t bytes;
    };
    void free_block_locked(CUdeviceptr ptr, size_t bytes);
    size_t trim_locked(size_t keep_bytes);
    void uncache_locked(std::list<CachedBlock>::iterator it);
    size_t free_grant_locked(CUdeviceptr base);  // every block of it cached; returns its bytes

    struct Grant {
        size_t bytes = 0;
        size_t blocks = 0;  // carved
        size_t cached = 0;  // of those, in the cache now
    };
    std::map<CUdeviceptr, Grant> grants_;                   // base -> grant
    std::unordered_map<CUdeviceptr, CUdeviceptr> carved_;   // carved block -> its grant's base

    Device& device_;
    mutable std::mutex mutex_;
    bool caching_ = true;
    std::unordered_map<CUdeviceptr, size_t> in_use_;         // ptr -> class bytes
    std::list<CachedBlock> lru_;                              // front = least recently released
    std::multimap<size_t, std::list<CachedBlock>::iterator> by_class_;
    PoolStats stats_;
};

// RAII device memory from the device's pool.
class DeviceBuffer {
public:
    DeviceBuffer(std::shared_ptr<Device> device, size_t nbytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    CUdeviceptr ptr() const noexcept { return ptr_; }
    size_t nbytes() const noexcept { return nbytes_; }
    const std::shared_ptr<Device>& device() const noexcept { return device_; }

    // Host <-> device copies. With a stream they are queued on it (truly asynchronous only for
    // pinned host memory; the host buffer must stay alive until the stream reaches the copy);
    // without one (nullptr) they complete before returning.
    void copy_from_host(const void* src, size_t nbytes, size_t offset, CUstream stream) const;
    void copy_to_host(void* dst, size_t nbytes, size_t offset, CUstream stream) const;
    void copy_from_device(const DeviceBuffer& src, size_t nbytes, size_t dst_offset,
                          size_t src_offset, CUstream stream) const;
    void memset(unsigned char value, size_t nbytes, size_t offset, CUstream stream) const;

private:
    void check_range(size_t offset, size_t nbytes, const char* what) const;
    std::shared_ptr<Device> device_;
    CUdeviceptr ptr_ = 0;
    size_t nbytes_ = 0;
};

// RAII page-locked host memory (cuMemHostAlloc, portable across contexts).
class PinnedBuffer {
public:
    PinnedBuffer(std::shared_ptr<Device> device, size_t nbytes);
    // device_mapped: also mapped into the device's address space (CU_MEMHOSTALLOC_DEVICEMAP), so
    // that kernels can read and write it at device_ptr(). The caller checks that the GPU can map
    // host memory (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY); DeviceError if the driver cannot.
    PinnedBuffer(std::shared_ptr<Device> device, size_t nbytes, bool device_mapped);
    ~PinnedBuffer();
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    void* data() const noexcept { return data_; }
    size_t nbytes() const noexcept { return nbytes_; }
    const std::shared_ptr<Device>& device() const noexcept { return device_; }
    bool device_mapped() const noexcept { return device_ptr_ != 0; }
    // The device address of data() for a device-mapped buffer; 0 otherwise.
    CUdeviceptr device_ptr() const noexcept { return device_ptr_; }

private:
    std::shared_ptr<Device> device_;
    void* data_ = nullptr;
    size_t nbytes_ = 0;
    CUdeviceptr device_ptr_ = 0;
};

}  // namespace gk
