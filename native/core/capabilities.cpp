#include "gk/capabilities.h"

#include <cstdio>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"

namespace gk {
namespace {

std::string pci_bus_text(int domain, int bus, int device) {
    char text[32];
    std::snprintf(text, sizeof text, "%04x:%02x:%02x.0", domain, bus, device);
    return text;
}

}  // namespace

Capabilities probe_capabilities(bool math_libraries) {
    Capabilities caps;
    caps.driver = driver_status();
    caps.nvrtc = nvrtc_status();
    caps.math_probed = math_libraries;
    if (math_libraries) {
        caps.cufft = cufft_status();
        caps.cublas = cublas_status();
    } else {
        caps.cufft.reason = caps.cublas.reason = "not probed (math_libraries=False)";
    }
    if (caps.nvrtc.found) {
        try {
            caps.nvrtc_archs = nvrtc_supported_archs();
        } catch (const Error&) {
            caps.nvrtc_archs.clear();
        }
    }
    if (!caps.driver.found) {
        caps.gpus_reason = "CUDA driver not detected (" + caps.driver.reason + ")";
        return caps;
    }
    int count = 0;
    try {
        count = device_count();
    } catch (const Error& e) {
        caps.gpus_reason = e.what();
        return caps;
    }
    if (count == 0) {
        caps.gpus_reason = "No GPU devices found (cuDeviceGetCount == 0)";
        return caps;
    }
    for (int i = 0; i < count; ++i) {
        GpuInfo gpu;
        gpu.index = i;
        try {
            DeviceProperties p = query_properties(i);
            gpu.name = p.name;
            gpu.sm_major = p.sm_major;
            gpu.sm_minor = p.sm_minor;
            gpu.memory_bytes = p.total_memory;
            gpu.multiprocessors = p.multiprocessors;
            gpu.pci_bus_id = pci_bus_text(p.pci_domain_id, p.pci_bus_id, p.pci_device_id);
            gpu.clock_mhz = p.clock_khz / 1000;
            gpu.memory_clock_mhz = p.memory_clock_khz / 1000;
            gpu.memory_bus_width_bits = p.memory_bus_width_bits;
            gpu.memory_bandwidth_gbs =
                2.0 * static_cast<double>(p.memory_clock_khz) * 1e3 * (p.memory_bus_width_bits / 8.0) / 1e9;
            gpu.l2_cache_bytes = p.l2_cache_bytes;
            gpu.copy_engines = p.async_engines;
            gpu.reason = sm_refusal(i, p.name, p.sm_major, p.sm_minor);
            gpu.usable = gpu.reason.empty();
        } catch (const Error& e) {
            gpu.usable = false;
            gpu.reason = e.what();
        }
        caps.gpus.push_back(gpu);
    }
    return caps;
}

}  // namespace gk
