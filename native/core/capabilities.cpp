#include "gk/capabilities.h"

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"

namespace gk {

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
