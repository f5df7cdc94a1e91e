// What this machine offers: driver, NVRTC, cuFFT, cuBLAS and GPUs, each with the reason when it
// is missing or unusable. Works (and only reports) on a machine without any CUDA.
#pragma once

#include <string>
#include <vector>

#include "gk/loader.h"

namespace gk {

struct GpuInfo {
    int index = 0;
    std::string name;
    int sm_major = 0;
    int sm_minor = 0;
    size_t memory_bytes = 0;
    int multiprocessors = 0;
    // Figures read without a context (cuDeviceGetAttribute): a multi-GPU host's GPUs side by side.
    std::string pci_bus_id;        // "0000:1b:00.0" (domain:bus:device.function)
    int clock_mhz = 0;             // SM clock
    int memory_clock_mhz = 0;
    int memory_bus_width_bits = 0;
    double memory_bandwidth_gbs = 0.0;  // peak: 2 * memory clock * bus width / 8 (DDR/HBM)
    int l2_cache_bytes = 0;
    int copy_engines = 0;          // CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT
    bool usable = false;
    std::string reason;  // why it is not usable; "" when usable
};

struct Capabilities {
    LibraryStatus driver;
    LibraryStatus nvrtc;
    LibraryStatus cufft;
    LibraryStatus cublas;
    bool math_probed = true;       // false: cufft/cublas were not looked at
    std::vector<int> nvrtc_archs;  // architectures this NVRTC can target (e.g. 80, 90)
    std::vector<GpuInfo> gpus;
    std::string gpus_reason;  // why `gpus` is empty; "" otherwise
};

// math_libraries=false leaves cuFFT and cuBLAS unopened (their status stays "not probed"): they
// are large, and only the ops that use them need them (backend: auto asks without them).
Capabilities probe_capabilities(bool math_libraries = true);

}  // namespace gk
