#include "gk/memory.h"

#include <algorithm>
#include <stdexcept>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/loader.h"

namespace gk {
namespace {

std::string bytes_text(size_t n) { return std::to_string(n) + " bytes"; }

std::string on_gpu(const Device& d) { return " on GPU " + std::to_string(d.index()); }

}  // namespace

// ------------------------------------------------------------------------------------------
// DeviceMemoryPool
// ------------------------------------------------------------------------------------------

size_t DeviceMemoryPool::size_class(size_t bytes) {
    constexpr size_t kSmallStep = 512;
    constexpr size_t kSmallLimit = size_t(1) << 20;
    if (bytes == 0) bytes = 1;
    if (bytes <= kSmallLimit) return (bytes + kSmallStep - 1) / kSmallStep * kSmallStep;
    size_t top = size_t(1) << (63 - __builtin_clzll(static_cast<unsigned long long>(bytes)));
    size_t step = top / 4;
    return (bytes + step - 1) / step * step;
}

DeviceMemoryPool::~DeviceMemoryPool() {
    std::lock_guard<std::mutex> lock(mutex_);
    trim_locked(0);
}

CUdeviceptr DeviceMemoryPool::acquire(size_t bytes) {
    const size_t cls = size_class(bytes);
    std::unique_lock<std::mutex> lock(mutex_);
    ++stats_.requests;
    // Most recently released block of the class first (still warm in L2 and the TLB); equal keys
    // are kept in insertion order, so it is the last of the range.
    auto range = by_class_.equal_range(cls);
    if (range.first != range.second) {
        auto hit = std::prev(range.second);
        CUdeviceptr ptr = hit->second->ptr;
        auto carved = carved_.find(ptr);
        if (carved != carved_.end()) --grants_[carved->second].cached;
        lru_.erase(hit->second);
        by_class_.erase(hit);
        stats_.cached_bytes -= cls;
        stats_.in_use_bytes += cls;
        ++stats_.reuses;
        in_use_.emplace(ptr, cls);
        return ptr;
    }
    device_.make_current();
    const DriverApi& api = driver();
    CUdeviceptr ptr = 0;
    CUresult r = api.cuMemAlloc(&ptr, cls);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        // Idle cuFFT plans and cuBLAS handles kept for reuse hold work areas from this pool:
        // destroy them (they release into the cache, hence without the lock), then free the cache.
        lock.unlock();
        device_.release_idle_library_objects();
        lock.lock();
        if (stats_.cached_bytes > 0) trim_locked(0);
        r = api.cuMemAlloc(&ptr, cls);
    }
    cu_check(r, "cuMemAlloc_v2", "allocating " + bytes_text(cls) + on_gpu(device_));
    ++stats_.driver_allocations;
    stats_.in_use_bytes += cls;
    stats_.reserved_bytes += cls;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    in_use_.emplace(ptr, cls);
    return ptr;
}

void DeviceMemoryPool::release(CUdeviceptr ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = in_use_.find(ptr);
    if (it == in_use_.end())
        throw std::invalid_argument("release() of a pointer this pool did not hand out");
    const size_t cls = it->second;
    in_use_.erase(it);
    stats_.in_use_bytes -= cls;
    auto carved = carved_.find(ptr);
    if (!caching_ && carved == carved_.end()) {
        free_block_locked(ptr, cls);
        return;
    }
    lru_.push_back({ptr, cls});
    by_class_.emplace(cls, std::prev(lru_.end()));
    stats_.cached_bytes += cls;
    if (carved != carved_.end()) {
        const CUdeviceptr base = carved->second;
        Grant& grant = grants_[base];
        ++grant.cached;
        // a carved block cannot go back alone: without caching, its grant goes once all are back
        if (!caching_ && grant.cached == grant.blocks) free_grant_locked(base);
    }
}

size_t DeviceMemoryPool::reserve(const std::vector<size_t>& requests) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::map<size_t, size_t> have;
    for (const auto& entry : by_class_) ++have[entry.first];
    std::vector<size_t> need;
    for (size_t r : requests) {
        const size_t cls = size_class(r);
        auto it = have.find(cls);
        if (it != have.end() && it->second > 0)
            --it->second;
        else
            need.push_back(cls);
    }
    if (need.size() < 2) return 0;
    std::sort(need.rbegin(), need.rend());  // largest first: the big blocks get the grant's alignment
    size_t total = 0;
    for (size_t cls : need) total += cls;
    device_.make_current();
    const DriverApi& api = driver();
    CUdeviceptr base = 0;
    CUresult r = api.cuMemAlloc(&base, total);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && stats_.cached_bytes > 0) {
        trim_locked(0);
        r = api.cuMemAlloc(&base, total);
    }
    if (r != CUDA_SUCCESS) return 0;  // the acquires allocate (and report) one by one
    ++stats_.driver_allocations;
    ++stats_.grants;
    stats_.granted_bytes += total;
    stats_.reserved_bytes += total;
    stats_.cached_bytes += total;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    size_t offset = 0;
    for (size_t cls : need) {
        const CUdeviceptr ptr = base + offset;
        offset += cls;
        lru_.push_back({ptr, cls});
        by_class_.emplace(cls, std::prev(lru_.end()));
        carved_[ptr] = base;
    }
    grants_[base] = Grant{total, need.size(), need.size()};
    return total;
}

void DeviceMemoryPool::uncache_locked(std::list<CachedBlock>::iterator it) {
    auto range = by_class_.equal_range(it->bytes);
    for (auto c = range.first; c != range.second; ++c) {
        if (c->second == it) {
            by_class_.erase(c);
            break;
        }
    }
    stats_.cached_bytes -= it->bytes;
    lru_.erase(it);
}

size_t DeviceMemoryPool::free_grant_locked(CUdeviceptr base) {
    auto g = grants_.find(base);
    if (g == grants_.end()) return 0;
    const size_t bytes = g->second.bytes;
    for (auto it = lru_.begin(); it != lru_.end();) {
        auto next = std::next(it);
        auto carved = carved_.find(it->ptr);
        if (carved != carved_.end() && carved->second == base) {
            carved_.erase(carved);
            uncache_locked(it);
        }
        it = next;
    }
    grants_.erase(g);
    stats_.granted_bytes -= bytes;
    free_block_locked(base, bytes);
    return bytes;
}

size_t DeviceMemoryPool::trim(size_t keep_bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    return trim_locked(keep_bytes);
}

size_t DeviceMemoryPool::trim_locked(size_t keep_bytes) {
    size_t freed = 0;
    auto it = lru_.begin();
    while (stats_.cached_bytes > keep_bytes && it != lru_.end()) {
        auto carved = carved_.find(it->ptr);
        if (carved != carved_.end()) {
            const CUdeviceptr base = carved->second;
            const Grant& grant = grants_[base];
            if (grant.cached < grant.blocks) {
                ++it;  // part of it is in use: the grant stays whole
                continue;
            }
            freed += free_grant_locked(base);  // removes its blocks from the list
            it = lru_.begin();
            continue;
        }
        CachedBlock block = *it;
        auto next = std::next(it);
        uncache_locked(it);
        it = next;
        free_block_locked(block.ptr, block.bytes);
        freed += block.bytes;
    }
    return freed;
}

void DeviceMemoryPool::free_block_locked(CUdeviceptr ptr, size_t bytes) {
    stats_.reserved_bytes -= bytes;
    ++stats_.driver_frees;
    const DriverApi* api = driver_if_loaded();
    if (!api) return;
    try {
        device_.make_current();
    } catch (const Error&) {
        return;  // context gone (process teardown): nothing left to free
    }
    api->cuMemFree(ptr);
}

void DeviceMemoryPool::set_caching(bool enabled) {
    std::lock_guard<std::mutex> lock(mutex_);
    caching_ = enabled;
    if (!enabled) trim_locked(0);
}

bool DeviceMemoryPool::caching() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return caching_;
}

PoolStats DeviceMemoryPool::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

std::vector<std::pair<size_t, size_t>> DeviceMemoryPool::cached_blocks() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::pair<size_t, size_t>> out;
    for (const auto& entry : by_class_) {
        if (!out.empty() && out.back().first == entry.first)
            ++out.back().second;
        else
            out.emplace_back(entry.first, 1);
    }
    return out;
}

// ------------------------------------------------------------------------------------------
// DeviceBuffer
// ------------------------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(std::shared_ptr<Device> device, size_t nbytes)
    : device_(std::move(device)), nbytes_(nbytes) {
    if (nbytes == 0) throw std::invalid_argument("DeviceBuffer size must be at least 1 byte");
    ptr_ = device_->memory_pool().acquire(nbytes);
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) device_->memory_pool().release(ptr_);
}

void DeviceBuffer::check_range(size_t offset, size_t nbytes, const char* what) const {
    if (offset > nbytes_ || nbytes > nbytes_ - offset)
        throw std::invalid_argument(std::string(what) + ": " + bytes_text(nbytes) + " at offset " +
                                    std::to_string(offset) + " does not fit in a DeviceBuffer of " +
                                    bytes_text(nbytes_));
}

void DeviceBuffer::copy_from_host(const void* src, size_t nbytes, size_t offset,
                                  CUstream stream) const {
    check_range(offset, nbytes, "copy_from_host");
    if (nbytes == 0) return;
    device_->make_current();
    const DriverApi& api = driver();
    if (stream)
        cu_check(api.cuMemcpyHtoDAsync(ptr_ + offset, src, nbytes, stream), "cuMemcpyHtoDAsync_v2",
                 "copying " + bytes_text(nbytes) + " to" + on_gpu(*device_));
    else
        cu_check(api.cuMemcpyHtoD(ptr_ + offset, src, nbytes), "cuMemcpyHtoD_v2",
                 "copying " + bytes_text(nbytes) + " to" + on_gpu(*device_));
}

void DeviceBuffer::copy_to_host(void* dst, size_t nbytes, size_t offset, CUstream stream) const {
    check_range(offset, nbytes, "copy_to_host");
    if (nbytes == 0) return;
    device_->make_current();
    const DriverApi& api = driver();
    if (stream)
        cu_check(api.cuMemcpyDtoHAsync(dst, ptr_ + offset, nbytes, stream), "cuMemcpyDtoHAsync_v2",
                 "copying " + bytes_text(nbytes) + " from" + on_gpu(*device_));
    else
        cu_check(api.cuMemcpyDtoH(dst, ptr_ + offset, nbytes), "cuMemcpyDtoH_v2",
                 "copying " + bytes_text(nbytes) + " from" + on_gpu(*device_));
}

void DeviceBuffer::copy_from_device(const DeviceBuffer& src, size_t nbytes, size_t dst_offset,
                                    size_t src_offset, CUstream stream) const {
    check_range(dst_offset, nbytes, "copy_from_device (destination)");
    src.check_range(src_offset, nbytes, "copy_from_device (source)");
    if (nbytes == 0) return;
    device_->make_current();
    const DriverApi& api = driver();
    cu_check(api.cuMemcpyDtoDAsync(ptr_ + dst_offset, src.ptr_ + src_offset, nbytes, stream),
             "cuMemcpyDtoDAsync_v2", "copying " + bytes_text(nbytes) + on_gpu(*device_));
    if (!stream) cu_check(api.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
}

void DeviceBuffer::memset(unsigned char value, size_t nbytes, size_t offset, CUstream stream) const {
    check_range(offset, nbytes, "memset");
    if (nbytes == 0) return;
    device_->make_current();
    const DriverApi& api = driver();
    cu_check(api.cuMemsetD8Async(ptr_ + offset, value, nbytes, stream), "cuMemsetD8Async",
             "filling " + bytes_text(nbytes) + on_gpu(*device_));
    if (!stream) cu_check(api.cuStreamSynchronize(nullptr), "cuStreamSynchronize");
}

// ------------------------------------------------------------------------------------------
// PinnedBuffer
// ------------------------------------------------------------------------------------------

PinnedBuffer::PinnedBuffer(std::shared_ptr<Device> device, size_t nbytes)
    : PinnedBuffer(std::move(device), nbytes, false) {}

PinnedBuffer::PinnedBuffer(std::shared_ptr<Device> device, size_t nbytes, bool device_mapped)
    : device_(std::move(device)), nbytes_(nbytes) {
    if (nbytes == 0) throw std::invalid_argument("PinnedBuffer size must be at least 1 byte");
    device_->make_current();
    const DriverApi& api = driver();
    if (device_mapped && !api.cuMemHostGetDevicePointer)
        throw DeviceError("this CUDA driver has no cuMemHostGetDevicePointer_v2: host memory cannot be "
                          "mapped into GPU " + std::to_string(device_->index()) + "'s address space");
    const unsigned flags = CU_MEMHOSTALLOC_PORTABLE | (device_mapped ? CU_MEMHOSTALLOC_DEVICEMAP : 0u);
    cu_check(api.cuMemHostAlloc(&data_, nbytes, flags), "cuMemHostAlloc",
             "allocating " + bytes_text(nbytes) + " of " + (device_mapped ? "device-mapped " : "") +
                 "pinned host memory");
    if (!device_mapped) return;
    const CUresult r = api.cuMemHostGetDevicePointer(&device_ptr_, data_, 0);
    if (r != CUDA_SUCCESS || device_ptr_ == 0) {
        api.cuMemFreeHost(data_);
        data_ = nullptr;
        device_ptr_ = 0;
        cu_check(r == CUDA_SUCCESS ? CUDA_ERROR_INVALID_VALUE : r, "cuMemHostGetDevicePointer_v2",
                 "mapping " + bytes_text(nbytes) + " of pinned host memory into GPU " +
                     std::to_string(device_->index()) + "'s address space");
    }
}

PinnedBuffer::~PinnedBuffer() {
    const DriverApi* api = driver_if_loaded();
    if (!data_ || !api) return;
    try {
        device_->make_current();
    } catch (const Error&) {
        return;
    }
    api->cuMemFreeHost(data_);
}

}  // namespace gk
