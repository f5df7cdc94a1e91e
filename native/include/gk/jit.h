// NVRTC JIT: CUDA C source -> CUBIN for one real architecture, with an in-memory and an on-disk
// cache, then module loading and kernel launch through the driver API.
//
// Cache key: SHA-256 over (kernel name, arch, NVRTC version, NVRTC options, every embedded
// header, source).
//
// Embedded kernels (native/ops/kernels/*.cu) are also compiled when the wheel is built
// (native/tools/ship_kernels.cpp) and shipped in pygpukit_dsp/_kernels/ (gk/shipped.h):
// load_embedded_module() takes a shipped image for the device's architecture first, then the
// disk cache, then NVRTC. Disk cache: $GK_CACHE_DIR, else ~/.cache/pygpukit-dsp/kernels; files are
// written to a temporary name and renamed into place; an entry that fails its integrity check is
// ignored and rewritten. GK_JIT_DISK_CACHE=0 turns the disk cache off.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gk/cuda_api.h"

namespace gk {

class Device;
struct NvrtcApi;

struct CompileOptions {
    std::string arch;                 // "sm_80", "sm_90", "sm_90a": a real architecture
    bool fast_math = false;           // --use_fast_math (only when asked)
    bool line_info = false;           // -lineinfo
    std::vector<std::string> extra;   // passed through to NVRTC after ours
};

struct CompiledKernel {
    std::string name;
    std::string arch;
    std::string key;         // hex SHA-256 cache key
    std::string log;         // NVRTC log (warnings); empty on a cache hit
    std::string cache;       // "compiled", "memory" or "disk"
    std::string cache_path;  // on-disk entry ("" when the disk cache is off)
    std::shared_ptr<const std::string> cubin;
};

struct JitStats {
    uint64_t compiles = 0;
    uint64_t memory_hits = 0;
    uint64_t disk_hits = 0;
    uint64_t disk_writes = 0;
    uint64_t disk_rejected = 0;      // corrupt or truncated entries ignored (then rewritten)
    uint64_t disk_write_errors = 0;  // cache folder not writable etc.; compilation still succeeds
    uint64_t nvrtc_compiles = 0;     // nvrtcCompileProgram calls (failed ones included)
    uint64_t shipped_hits = 0;       // embedded-kernel module loads served by a shipped image
    uint64_t shipped_reads = 0;      // shipped image files read (each at most once per process)
    uint64_t shipped_misses = 0;     // no current shipped image for the device (or shipped images off)
    uint64_t shipped_rejected = 0;   // a shipped image file missing, short or failing its SHA-256
    uint64_t shipped_load_errors = 0;  // the driver refused a shipped image (disk cache / NVRTC next)
};

// Kernel sources embedded at build time from native/ops/kernels/ (name = file stem).
std::map<std::string, std::string> embedded_kernels();   // *.cu
std::map<std::string, std::string> embedded_headers();   // *.cuh, by file name, for #include

std::vector<std::string> nvrtc_options(const CompileOptions& options);
// The disk-cache key of a compile (see above).
std::string cache_key(const std::string& name, const std::string& arch, const std::string& nvrtc_version,
                      const std::vector<std::string>& args,
                      const std::map<std::string, std::string>& headers, const std::string& source);
std::string nvrtc_version_text(const NvrtcApi& api);  // "13.0"
// NVRTC options without --gpu-architecture=...
std::vector<std::string> options_without_arch(const std::vector<std::string>& args);
// SHA-256 over what an image depends on besides the architecture and the NVRTC version: the
// name, the options other than the architecture, every embedded header and the source. A
// shipped image is used only when its recorded digest equals the running module's.
std::string source_digest(const std::string& name, const std::string& source,
                          const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& headers);
// One NVRTC run, no caches: CUBIN for args' sm_XX, or PTX (NUL-terminated) when ptx is set and
// args name a compute_XX. Throws CompileError / DeviceError (no NVRTC).
std::string nvrtc_compile_image(const std::string& name, const std::string& source,
                                const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& headers, bool ptx,
                                std::string* log);
bool embedded_source(const std::string& name, std::string* source);  // false: no such *.cu
void jit_count(uint64_t JitStats::*field, uint64_t n = 1);
std::shared_ptr<const std::string> jit_memory_get(const std::string& key);
void jit_memory_put(const std::string& key, std::shared_ptr<const std::string> image);
CompiledKernel compile(const std::string& name, const std::string& source,
                       const CompileOptions& options);
// Throws std::invalid_argument (listing the available names) for an unknown name.
CompiledKernel compile_embedded(const std::string& name, const CompileOptions& options);

std::string jit_cache_dir();  // "" when the disk cache is off
JitStats jit_stats();
void clear_jit_memory_cache();
std::vector<int> nvrtc_supported_archs();  // e.g. {75, 80, 86, 89, 90, ...}; empty if unknown

struct Dim3 {
    unsigned int x = 1, y = 1, z = 1;
};

class Kernel;
class KernelArgs;

class Module : public std::enable_shared_from_this<Module> {
public:
    static std::shared_ptr<Module> load(std::shared_ptr<Device> device,
                                        std::shared_ptr<const std::string> cubin, std::string name);
    ~Module();
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    const std::string& name() const noexcept { return name_; }
    const std::shared_ptr<Device>& device() const noexcept { return device_; }
    CUmodule handle() const noexcept { return module_; }
    // Throws DeviceError naming the function and the module when it is not there.
    std::shared_ptr<Kernel> function(const std::string& name);

private:
    Module(std::shared_ptr<Device> device, std::string name);
    std::shared_ptr<Device> device_;
    std::string name_;
    CUmodule module_ = nullptr;
    std::mutex mutex_;
    std::unordered_map<std::string, CUfunction> functions_;
};

class Kernel {
public:
    Kernel(std::shared_ptr<Module> module, CUfunction function, std::string name);

    const std::string& name() const noexcept { return name_; }
    CUfunction handle() const noexcept { return function_; }
    int max_threads_per_block() const noexcept { return max_threads_per_block_; }
    int attribute(CUfunction_attribute attribute) const;
    void set_max_dynamic_shared_memory(int bytes) const;

    // Parameter sizes in bytes, when the driver can tell (cuFuncGetParamInfo, driver >= 12.4).
    bool parameters_known() const noexcept { return params_known_; }
    const std::vector<size_t>& parameter_sizes() const noexcept { return param_sizes_; }

    // params: one pointer per kernel parameter (CUDA convention). Validates the launch shape.
    // after_kernel: the kernel waits for the one before it in the stream with
    // griddepcontrol.wait (programmatic dependent launch) before it reads that one's output, so
    // on SM 9.0+ it may be launched while that one runs (cuLaunchKernelEx with programmatic
    // stream serialization; a plain launch where the driver or GPU has no such thing).
    // cluster: thread-block cluster dimensions (SM 9.0+, cuLaunchKernelEx; a DeviceError where
    // the driver has no cuLaunchKernelEx: check launch_ex_available() first).
    void launch(Dim3 grid, Dim3 block, void** params, unsigned int shared_mem_bytes,
                CUstream stream, bool after_kernel = false, const Dim3* cluster = nullptr) const;
    static bool launch_ex_available();
    // Also checks the count and size of each argument against the kernel's parameters (when
    // known): a mismatch is std::invalid_argument instead of a kernel reading garbage.
    void launch(Dim3 grid, Dim3 block, KernelArgs& args, unsigned int shared_mem_bytes,
                CUstream stream) const;

private:
    std::shared_ptr<Module> module_;  // keeps the CUmodule loaded
    CUfunction function_;
    std::string name_;
    int max_threads_per_block_ = 0;
    bool params_known_ = false;
    std::vector<size_t> param_sizes_;
};

// Packs kernel parameters for Kernel::launch.
class KernelArgs {
public:
    void add_bytes(const void* data, size_t size);
    template <class T>
    void add(const T& value) {
        add_bytes(&value, sizeof(T));
    }
    void** pointers();
    size_t size() const noexcept { return storage_.size(); }
    const std::vector<size_t>& sizes() const noexcept { return sizes_; }

private:
    std::vector<std::vector<unsigned char>> storage_;
    std::vector<size_t> sizes_;
    std::vector<void*> pointers_;
};

// Compiles (or fetches from the caches) an embedded kernel file for this device's architecture
// and loads it once per device; options.arch is ignored.
std::shared_ptr<Module> load_embedded_module(const std::shared_ptr<Device>& device,
                                             const std::string& name, CompileOptions options);
std::shared_ptr<Module> load_cubin_module(const std::shared_ptr<Device>& device,
                                          std::shared_ptr<const std::string> cubin,
                                          const std::string& name);

}  // namespace gk
