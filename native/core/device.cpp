#include "gk/device.h"

#include <map>
#include <vector>

#include "gk/errors.h"
#include "gk/loader.h"
#include "gk/memory.h"

namespace gk {
namespace {

std::mutex g_init_mutex;
bool g_init_done = false;
CUresult g_init_result = CUDA_SUCCESS;

int attribute(const DriverApi& api, CUdevice dev, int attr, const char* what) {
    int value = 0;
    cu_check(api.cuDeviceGetAttribute(&value, attr, dev), "cuDeviceGetAttribute", what);
    return value;
}

}  // namespace

std::string DeviceProperties::arch() const {
    return "sm_" + std::to_string(sm_major) + std::to_string(sm_minor);
}

void init_driver() {
    const DriverApi& api = driver();
    std::lock_guard<std::mutex> lock(g_init_mutex);
    if (!g_init_done) {
        g_init_result = api.cuInit(0);
        g_init_done = true;
    }
    if (g_init_result == CUDA_ERROR_NO_DEVICE)
        throw DeviceError("No GPU devices found (cuInit: CUDA_ERROR_NO_DEVICE, " +
                              cu_error_string(g_init_result) + ")",
                          "cuInit", g_init_result, "CUDA_ERROR_NO_DEVICE");
    cu_check(g_init_result, "cuInit", "initialising the CUDA driver");
}

int device_count() {
    init_driver();
    int count = 0;
    cu_check(driver().cuDeviceGetCount(&count), "cuDeviceGetCount");
    return count;
}

DeviceProperties query_properties(int index) {
    const int count = device_count();
    if (index < 0 || index >= count)
        throw DeviceError("GPU index " + std::to_string(index) + " does not exist: this machine has " +
                          std::to_string(count) + " GPU(s)" +
                          (count > 0 ? " (0.." + std::to_string(count - 1) + ")" : std::string()));
    const DriverApi& api = driver();
    CUdevice dev = 0;
    cu_check(api.cuDeviceGet(&dev, index), "cuDeviceGet");
    DeviceProperties p;
    p.index = index;
    char name[256] = {0};
    cu_check(api.cuDeviceGetName(name, static_cast<int>(sizeof(name) - 1), dev), "cuDeviceGetName");
    p.name = name;
    cu_check(api.cuDeviceTotalMem(&p.total_memory, dev), "cuDeviceTotalMem_v2");
    p.sm_major = attribute(api, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "reading the SM major");
    p.sm_minor = attribute(api, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "reading the SM minor");
    p.multiprocessors = attribute(api, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "reading the SM count");
    p.l2_cache_bytes = attribute(api, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "reading the L2 size");
    p.max_shared_per_block =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "reading shared memory");
    p.max_shared_per_block_optin =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "reading shared memory");
    p.max_shared_per_multiprocessor = attribute(
        api, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "reading shared memory");
    p.max_threads_per_block =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "reading thread limits");
    p.max_threads_per_multiprocessor =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, "reading thread limits");
    p.max_registers_per_block =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, "reading register limits");
    p.warp_size = attribute(api, dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE, "reading the warp size");
    p.clock_khz = attribute(api, dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "reading the clock");
    p.memory_clock_khz = attribute(api, dev, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, "reading the memory clock");
    p.memory_bus_width_bits =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, "reading the bus width");
    p.async_engines = attribute(api, dev, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, "reading copy engines");
    p.pci_domain_id = attribute(api, dev, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, "reading the PCI id");
    p.pci_bus_id = attribute(api, dev, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, "reading the PCI id");
    p.pci_device_id = attribute(api, dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, "reading the PCI id");
    p.stream_priorities_supported =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, "reading stream priorities") != 0;
    p.concurrent_kernels =
        attribute(api, dev, CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, "reading concurrency") != 0;
    p.integrated = attribute(api, dev, CU_DEVICE_ATTRIBUTE_INTEGRATED, "reading the integrated flag") != 0;
    return p;
}

std::string sm_refusal(int index, const std::string& name, int sm_major, int sm_minor) {
    if (sm_major >= kMinSmMajor) return {};
    return "GPU " + std::to_string(index) + " (" + name + ") is SM " + std::to_string(sm_major) + "." +
           std::to_string(sm_minor) + "; pygpukit-dsp needs SM " + std::to_string(kMinSmMajor) +
           ".0 or newer";
}

std::shared_ptr<Device> Device::open(int index) {
    static std::mutex registry_mutex;
    static std::map<int, std::weak_ptr<Device>> registry;
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (auto live = registry[index].lock()) return live;
    auto device = std::make_shared<Device>(index);
    registry[index] = device;
    return device;
}

Device::Device(int index) : props_(query_properties(index)) {
    std::string refusal = sm_refusal(props_.index, props_.name, props_.sm_major, props_.sm_minor);
    if (!refusal.empty()) throw DeviceError(refusal);
    const DriverApi& api = driver();
    cu_check(api.cuDeviceGet(&device_, index), "cuDeviceGet");
    cu_check(api.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain",
             "retaining the primary context of GPU " + std::to_string(index));
    try {
        make_current();
        cu_check(api.cuCtxGetStreamPriorityRange(&least_priority_, &greatest_priority_),
                 "cuCtxGetStreamPriorityRange");
    } catch (...) {
        api.cuDevicePrimaryCtxRelease(device_);
        throw;
    }
    pool_ = std::make_unique<DeviceMemoryPool>(*this);
    idle_ = std::make_unique<IdleLibraryObjects>(*this);
}

Device::~Device() {
    const DriverApi* api = driver_if_loaded();
    if (!api) return;
    try {
        make_current();
    } catch (...) {
        // The driver is shutting down; the pool frees what it can.
    }
    idle_.reset();
    pool_.reset();
    api->cuDevicePrimaryCtxRelease(device_);
}

void IdleLibraryObjects::put(const std::string& key, void* object, Destroy destroy) {
    std::vector<Entry> evicted;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        entries_.push_back({key, object, destroy});
        while (entries_.size() > kMaxEntries) {
            evicted.push_back(entries_.front());
            entries_.pop_front();
        }
        stats_.destroyed += evicted.size();
        stats_.idle = entries_.size();
    }
    for (const Entry& e : evicted) e.destroy(device_, e.object);
}

void* IdleLibraryObjects::take(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.end(); it != entries_.begin();) {
        --it;  // most recently put first
        if (it->key != key) continue;
        void* object = it->object;
        entries_.erase(it);
        ++stats_.reused;
        stats_.idle = entries_.size();
        return object;
    }
    return nullptr;
}

void IdleLibraryObjects::note_made() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.made;
}

void IdleLibraryObjects::clear() {
    std::list<Entry> all;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        all.swap(entries_);
        stats_.destroyed += all.size();
        stats_.idle = 0;
    }
    for (const Entry& e : all) e.destroy(device_, e.object);
}

IdleLibraryObjects::Stats IdleLibraryObjects::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
}

void Device::make_current() const {
    const DriverApi& api = driver();
    CUcontext current = nullptr;
    if (api.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == context_) return;
    cu_check(api.cuCtxSetCurrent(context_), "cuCtxSetCurrent",
             "binding GPU " + std::to_string(props_.index) + " to this thread");
}

void Device::synchronize() const {
    make_current();
    cu_check(driver().cuCtxSynchronize(), "cuCtxSynchronize",
             "waiting for GPU " + std::to_string(props_.index));
}

std::pair<size_t, size_t> Device::memory_info() const {
    make_current();
    size_t free_bytes = 0, total_bytes = 0;
    cu_check(driver().cuMemGetInfo(&free_bytes, &total_bytes), "cuMemGetInfo_v2");
    return {free_bytes, total_bytes};
}

}  // namespace gk
