#include "gk/loader.h"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "gk/errors.h"

namespace gk {
namespace {

std::mutex g_mutex;  // guards everything below except the published fast-path pointers
std::vector<std::string> g_dirs;
bool g_dirs_set = false;
unsigned g_dirs_generation = 0;

template <class Api>
struct Slot {
    bool attempted = false;
    unsigned generation = 0;  // g_dirs_generation at the attempt
    Api api;
    LibraryStatus status;
    std::atomic<const Api*> published{nullptr};  // set once, when loading succeeded
};

Slot<DriverApi> g_driver;
Slot<NvrtcApi> g_nvrtc;
Slot<CufftApi> g_cufft;
Slot<CublasApi> g_cublas;

std::string last_dl_error() {
    const char* e = dlerror();
    return e ? std::string(e) : std::string("unknown dlopen error");
}

std::string loaded_path(void* handle, const std::string& fallback) {
    struct link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0])
        return map->l_name;
    return fallback;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
    std::string out;
    for (const auto& s : items) {
        if (!out.empty()) out += sep;
        out += s;
    }
    return out;
}

struct Opened {
    void* handle = nullptr;
    std::string path;
    std::string reason;
};

// Libraries that `soname` needs from its own folder: opened first, so that they resolve even if
// the library's RPATH does not name its folder. cuBLAS links libcublasLt; NVRTC dlopens
// libnvrtc-builtins.so.<major>.<minor> by name when it compiles (NVRTC 13.0's wheel has no
// RPATH, so without this a compile fails with "failed to open libnvrtc-builtins.so.13.0" unless
// the folder is on LD_LIBRARY_PATH; an already loaded library is found by its soname).
std::vector<std::string> companions_of(const std::string& dir, const std::string& soname) {
    std::vector<std::string> out;
    if (soname.rfind("libcublas.so.", 0) == 0)
        out.push_back(dir + "libcublasLt.so." + soname.substr(std::string("libcublas.so.").size()));
    if (soname.rfind("libnvrtc.so.", 0) == 0) {
        const std::string prefix = "libnvrtc-builtins.so." + soname.substr(std::string("libnvrtc.so.").size());
        if (DIR* d = ::opendir(dir.empty() ? "." : dir.c_str())) {
            while (dirent* e = ::readdir(d)) {
                const std::string name = e->d_name;
                if (name == prefix || name.rfind(prefix + ".", 0) == 0) out.push_back(dir + name);
            }
            ::closedir(d);
        }
        std::sort(out.begin(), out.end());
    }
    return out;
}

// Folders first (each soname, newest first), then the system search path.
Opened open_first(const std::vector<std::string>& sonames, const std::vector<std::string>& dirs) {
    std::vector<std::string> file_errors;
    for (const auto& dir : dirs) {
        for (const auto& soname : sonames) {
            std::string path = dir;
            if (!path.empty() && path.back() != '/') path += '/';
            path += soname;
            struct stat st;
            if (::stat(path.c_str(), &st) != 0) continue;
            for (const std::string& companion : companions_of(path.substr(0, path.size() - soname.size()), soname))
                if (::stat(companion.c_str(), &st) == 0)
                    dlopen(companion.c_str(), RTLD_NOW | RTLD_LOCAL);  // failure shows below
            dlerror();
            if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return {h, path, {}};
            file_errors.push_back(last_dl_error());
        }
    }
    std::string first_system_error;
    for (const auto& soname : sonames) {
        dlerror();
        if (void* h = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL))
            return {h, loaded_path(h, soname), {}};
        if (first_system_error.empty()) first_system_error = last_dl_error();
    }
    Opened failed;
    if (!file_errors.empty()) {
        // A file was there but could not be opened: that error is the useful one.
        failed.reason = join(file_errors, "; ");
    } else if (dirs.empty() && sonames.size() == 1) {
        failed.reason = first_system_error;  // "libcuda.so.1: cannot open shared object file: ..."
    } else if (dirs.empty()) {
        failed.reason = join(sonames, " / ") + " not found on the system library path (" +
                        first_system_error + ")";
    } else {
        failed.reason = join(sonames, " / ") + " not found in " + join(dirs, ", ") +
                        " nor on the system library path (" + first_system_error + ")";
    }
    return failed;
}

class Resolver {
public:
    explicit Resolver(void* handle) : handle_(handle) {}
    template <class F>
    void required(F& out, const char* name) {
        if (!lookup(out, name)) missing_.push_back(name);
    }
    template <class F>
    void optional(F& out, const char* name) {
        lookup(out, name);
    }
    bool ok() const { return missing_.empty(); }
    std::string missing() const { return join(missing_, ", "); }

private:
    template <class F>
    bool lookup(F& out, const char* name) {
        dlerror();
        void* p = dlsym(handle_, name);
        if (!p) return false;
        out = reinterpret_cast<F>(p);
        return true;
    }
    void* handle_;
    std::vector<std::string> missing_;
};

void resolve(Resolver& r, DriverApi& a) {
    r.required(a.cuGetErrorName, "cuGetErrorName");
    r.required(a.cuGetErrorString, "cuGetErrorString");
    r.required(a.cuInit, "cuInit");
    r.required(a.cuDriverGetVersion, "cuDriverGetVersion");
    r.required(a.cuDeviceGetCount, "cuDeviceGetCount");
    r.required(a.cuDeviceGet, "cuDeviceGet");
    r.required(a.cuDeviceGetName, "cuDeviceGetName");
    r.required(a.cuDeviceGetAttribute, "cuDeviceGetAttribute");
    r.required(a.cuDeviceTotalMem, "cuDeviceTotalMem_v2");
    r.required(a.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    r.required(a.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
    r.required(a.cuCtxSetCurrent, "cuCtxSetCurrent");
    r.required(a.cuCtxGetCurrent, "cuCtxGetCurrent");
    r.required(a.cuCtxSynchronize, "cuCtxSynchronize");
    r.required(a.cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange");
    r.required(a.cuMemGetInfo, "cuMemGetInfo_v2");
    r.required(a.cuMemAlloc, "cuMemAlloc_v2");
    r.required(a.cuMemFree, "cuMemFree_v2");
    r.required(a.cuMemHostAlloc, "cuMemHostAlloc");
    r.required(a.cuMemFreeHost, "cuMemFreeHost");
    r.required(a.cuMemcpyHtoD, "cuMemcpyHtoD_v2");
    r.required(a.cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    r.required(a.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
    r.required(a.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
    r.required(a.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2");
    r.required(a.cuMemsetD8Async, "cuMemsetD8Async");
    r.required(a.cuStreamCreateWithPriority, "cuStreamCreateWithPriority");
    r.required(a.cuStreamGetPriority, "cuStreamGetPriority");
    r.required(a.cuStreamDestroy, "cuStreamDestroy_v2");
    r.required(a.cuStreamSynchronize, "cuStreamSynchronize");
    r.required(a.cuStreamQuery, "cuStreamQuery");
    r.required(a.cuStreamWaitEvent, "cuStreamWaitEvent");
    r.required(a.cuEventCreate, "cuEventCreate");
    r.required(a.cuEventDestroy, "cuEventDestroy_v2");
    r.required(a.cuEventRecord, "cuEventRecord");
    r.required(a.cuEventSynchronize, "cuEventSynchronize");
    r.required(a.cuEventQuery, "cuEventQuery");
    r.optional(a.cuEventElapsedTime, "cuEventElapsedTime_v2");
    if (!a.cuEventElapsedTime) r.required(a.cuEventElapsedTime, "cuEventElapsedTime");
    r.required(a.cuModuleLoadData, "cuModuleLoadData");
    r.required(a.cuModuleUnload, "cuModuleUnload");
    r.required(a.cuModuleGetFunction, "cuModuleGetFunction");
    r.required(a.cuFuncGetAttribute, "cuFuncGetAttribute");
    r.required(a.cuFuncSetAttribute, "cuFuncSetAttribute");
    r.optional(a.cuFuncGetParamInfo, "cuFuncGetParamInfo");
    r.required(a.cuLaunchKernel, "cuLaunchKernel");
    r.optional(a.cuLaunchKernelEx, "cuLaunchKernelEx");
    r.optional(a.cuStreamBeginCapture, "cuStreamBeginCapture_v2");
    r.optional(a.cuStreamEndCapture, "cuStreamEndCapture");
    r.optional(a.cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
    r.optional(a.cuGraphLaunch, "cuGraphLaunch");
    r.optional(a.cuGraphExecDestroy, "cuGraphExecDestroy");
    r.optional(a.cuGraphDestroy, "cuGraphDestroy");
    r.optional(a.cuGraphUpload, "cuGraphUpload");
    r.optional(a.cuMemsetD2D8Async, "cuMemsetD2D8Async");
    r.optional(a.cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2");
}

void resolve(Resolver& r, NvrtcApi& a) {
    r.required(a.nvrtcGetErrorString, "nvrtcGetErrorString");
    r.required(a.nvrtcVersion, "nvrtcVersion");
    r.optional(a.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
    r.optional(a.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs");
    r.required(a.nvrtcCreateProgram, "nvrtcCreateProgram");
    r.required(a.nvrtcDestroyProgram, "nvrtcDestroyProgram");
    r.required(a.nvrtcCompileProgram, "nvrtcCompileProgram");
    r.required(a.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize");
    r.required(a.nvrtcGetProgramLog, "nvrtcGetProgramLog");
    r.required(a.nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
    r.required(a.nvrtcGetCUBIN, "nvrtcGetCUBIN");
    r.optional(a.nvrtcGetPTXSize, "nvrtcGetPTXSize");
    r.optional(a.nvrtcGetPTX, "nvrtcGetPTX");
}

void resolve(Resolver& r, CufftApi& a) {
    r.required(a.cufftGetProperty, "cufftGetProperty");
    r.required(a.cufftCreate, "cufftCreate");
    r.required(a.cufftDestroy, "cufftDestroy");
    r.required(a.cufftSetAutoAllocation, "cufftSetAutoAllocation");
    r.required(a.cufftSetWorkArea, "cufftSetWorkArea");
    r.required(a.cufftMakePlanMany64, "cufftMakePlanMany64");
    r.required(a.cufftSetStream, "cufftSetStream");
    r.required(a.cufftExecC2C, "cufftExecC2C");
    r.required(a.cufftExecR2C, "cufftExecR2C");
    r.required(a.cufftExecC2R, "cufftExecC2R");
}

void resolve(Resolver& r, CublasApi& a) {
    r.required(a.cublasGetProperty, "cublasGetProperty");
    r.optional(a.cublasGetStatusName, "cublasGetStatusName");
    r.optional(a.cublasGetStatusString, "cublasGetStatusString");
    r.required(a.cublasCreate, "cublasCreate_v2");
    r.required(a.cublasDestroy, "cublasDestroy_v2");
    r.required(a.cublasSetStream, "cublasSetStream_v2");
    r.optional(a.cublasSetWorkspace, "cublasSetWorkspace_v2");
    r.required(a.cublasSetMathMode, "cublasSetMathMode");
    r.required(a.cublasSgemm, "cublasSgemm_v2");
    r.required(a.cublasCgemm, "cublasCgemm_v2");
    r.required(a.cublasSgemmStridedBatched, "cublasSgemmStridedBatched");
    r.required(a.cublasCgemmStridedBatched, "cublasCgemmStridedBatched");
}

std::string version_of(const DriverApi& a) {
    int v = 0;
    if (a.cuDriverGetVersion(&v) != CUDA_SUCCESS) return {};
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string version_of(NvrtcApi& a) {
    if (a.nvrtcVersion(&a.version_major, &a.version_minor) != NVRTC_SUCCESS) return {};
    return std::to_string(a.version_major) + "." + std::to_string(a.version_minor);
}

template <class GetProperty>
std::string library_version(GetProperty get) {
    int major = 0, minor = 0, patch = 0;
    if (get(MAJOR_VERSION, &major) != 0 || get(MINOR_VERSION, &minor) != 0 ||
        get(PATCH_LEVEL, &patch) != 0)
        return {};
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string version_of(const CufftApi& a) { return library_version(a.cufftGetProperty); }
std::string version_of(const CublasApi& a) { return library_version(a.cublasGetProperty); }

std::vector<std::string> driver_names() {
    const char* override_name = std::getenv("GK_LIBCUDA");
    if (override_name && override_name[0]) return {override_name};
    return {"libcuda.so.1"};
}

// Caller holds g_mutex.
template <class Api>
void load_locked(Slot<Api>& slot, const std::vector<std::string>& sonames, bool uses_dirs,
                 const char* what) {
    if (slot.published.load(std::memory_order_acquire)) return;
    if (slot.attempted && (!uses_dirs || slot.generation == g_dirs_generation)) return;
    slot.attempted = true;
    slot.generation = g_dirs_generation;
    slot.status = LibraryStatus{};
    Opened opened = open_first(sonames, uses_dirs ? g_dirs : std::vector<std::string>{});
    if (!opened.handle) {
        slot.status.reason = opened.reason;
        return;
    }
    Api api;
    Resolver resolver(opened.handle);
    resolve(resolver, api);
    if (!resolver.ok()) {
        slot.status.path = opened.path;
        slot.status.reason = opened.path + " is not a usable " + what + " (missing " +
                             resolver.missing() + ")";
        dlclose(opened.handle);
        return;
    }
    slot.api = api;
    slot.status.found = true;
    slot.status.path = opened.path;
    slot.status.version = version_of(slot.api);
    slot.published.store(&slot.api, std::memory_order_release);
}

void load_driver_locked() { load_locked(g_driver, driver_names(), false, "CUDA driver"); }
void load_nvrtc_locked() {
    load_locked(g_nvrtc, {"libnvrtc.so.13", "libnvrtc.so.12"}, true, "NVRTC library");
}
void load_cufft_locked() {
    load_locked(g_cufft, {"libcufft.so.12", "libcufft.so.11"}, true, "cuFFT library");
}
void load_cublas_locked() {
    load_locked(g_cublas, {"libcublas.so.13", "libcublas.so.12"}, true, "cuBLAS library");
}

template <class Api>
const Api& get_or_throw(Slot<Api>& slot, void (*load)(), const char* missing_message) {
    if (const Api* api = slot.published.load(std::memory_order_acquire)) return *api;
    std::lock_guard<std::mutex> lock(g_mutex);
    load();
    if (const Api* api = slot.published.load(std::memory_order_acquire)) return *api;
    throw DeviceError(std::string(missing_message) + " (" + slot.status.reason + ")");
}

template <class Api>
LibraryStatus status_of(Slot<Api>& slot, void (*load)()) {
    std::lock_guard<std::mutex> lock(g_mutex);
    load();
    return slot.status;
}

}  // namespace

void set_library_dirs(const std::vector<std::string>& dirs) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_dirs_set || dirs != g_dirs) ++g_dirs_generation;
    g_dirs = dirs;
    g_dirs_set = true;
}

std::vector<std::string> library_dirs() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_dirs;
}

bool library_dirs_set() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_dirs_set;
}

const DriverApi& driver() {
    return get_or_throw(g_driver, load_driver_locked, "CUDA driver not detected");
}
const NvrtcApi& nvrtc() {
    return get_or_throw(g_nvrtc, load_nvrtc_locked, "NVRTC JIT compiler not available");
}
const CufftApi& cufft() { return get_or_throw(g_cufft, load_cufft_locked, "cuFFT not available"); }
const CublasApi& cublas() {
    return get_or_throw(g_cublas, load_cublas_locked, "cuBLAS not available");
}

LibraryStatus driver_status() { return status_of(g_driver, load_driver_locked); }
LibraryStatus nvrtc_status() { return status_of(g_nvrtc, load_nvrtc_locked); }
LibraryStatus cufft_status() { return status_of(g_cufft, load_cufft_locked); }
LibraryStatus cublas_status() { return status_of(g_cublas, load_cublas_locked); }

const DriverApi* driver_if_loaded() noexcept {
    return g_driver.published.load(std::memory_order_acquire);
}

}  // namespace gk
