// Module loading (cuModuleLoadData), function lookup and kernel launch.
#include <chrono>
#include <map>
#include <mutex>
#include <stdexcept>

#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/shipped.h"

namespace gk {

Module::Module(std::shared_ptr<Device> device, std::string name)
    : device_(std::move(device)), name_(std::move(name)) {}

std::shared_ptr<Module> Module::load(std::shared_ptr<Device> device,
                                     std::shared_ptr<const std::string> cubin, std::string name) {
    if (!cubin || cubin->empty()) throw std::invalid_argument("module '" + name + "' has an empty image");
    std::shared_ptr<Module> module(new Module(std::move(device), std::move(name)));
    module->device_->make_current();
    cu_check(driver().cuModuleLoadData(&module->module_, cubin->data()), "cuModuleLoadData",
             "loading module '" + module->name_ + "' on GPU " + std::to_string(module->device_->index()));
    return module;
}

Module::~Module() {
    const DriverApi* api = driver_if_loaded();
    if (!module_ || !api) return;
    try {
        device_->make_current();
    } catch (const Error&) {
        return;
    }
    api->cuModuleUnload(module_);
}

std::shared_ptr<Kernel> Module::function(const std::string& name) {
    CUfunction fn = nullptr;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = functions_.find(name);
        if (it != functions_.end()) fn = it->second;
    }
    if (!fn) {
        device_->make_current();
        CUresult r = driver().cuModuleGetFunction(&fn, module_, name.c_str());
        if (r == CUDA_ERROR_NOT_FOUND)
            throw DeviceError("module '" + name_ + "' has no kernel named '" + name +
                                  "' (is it declared extern \"C\" __global__?)",
                              "cuModuleGetFunction", r, cu_error_name(r));
        cu_check(r, "cuModuleGetFunction", "looking up '" + name + "' in module '" + name_ + "'");
        std::lock_guard<std::mutex> lock(mutex_);
        functions_.emplace(name, fn);
    }
    return std::make_shared<Kernel>(shared_from_this(), fn, name);
}

Kernel::Kernel(std::shared_ptr<Module> module, CUfunction function, std::string name)
    : module_(std::move(module)), function_(function), name_(std::move(name)) {
    max_threads_per_block_ = attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    const DriverApi& api = driver();
    if (api.cuFuncGetParamInfo) {
        for (size_t i = 0; i < 4096; ++i) {
            size_t offset = 0, size = 0;
            CUresult r = api.cuFuncGetParamInfo(function_, i, &offset, &size);
            if (r == CUDA_SUCCESS) {
                param_sizes_.push_back(size);
                continue;
            }
            // INVALID_VALUE marks the end of the list; anything else: the driver cannot tell.
            params_known_ = r == CUDA_ERROR_INVALID_VALUE;
            if (!params_known_) param_sizes_.clear();
            break;
        }
    }
}

int Kernel::attribute(CUfunction_attribute attribute) const {
    module_->device()->make_current();
    int value = 0;
    cu_check(driver().cuFuncGetAttribute(&value, attribute, function_), "cuFuncGetAttribute",
             "reading an attribute of kernel '" + name_ + "'");
    return value;
}

void Kernel::set_max_dynamic_shared_memory(int bytes) const {
    module_->device()->make_current();
    cu_check(driver().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes),
             "cuFuncSetAttribute", "allowing " + std::to_string(bytes) +
                                       " bytes of dynamic shared memory for kernel '" + name_ + "'");
}

bool Kernel::launch_ex_available() { return driver().cuLaunchKernelEx != nullptr; }

void Kernel::launch(Dim3 grid, Dim3 block, void** params, unsigned int shared_mem_bytes,
                    CUstream stream, bool after_kernel, const Dim3* cluster) const {
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0)
        throw std::invalid_argument("kernel '" + name_ + "': grid and block dimensions must be >= 1");
    const unsigned long long threads =
        static_cast<unsigned long long>(block.x) * block.y * block.z;
    if (threads > static_cast<unsigned long long>(max_threads_per_block_))
        throw std::invalid_argument("kernel '" + name_ + "': a block of " + std::to_string(threads) +
                                    " threads exceeds its limit of " +
                                    std::to_string(max_threads_per_block_));
    module_->device()->make_current();
    const DriverApi& api = driver();
    const bool programmatic = after_kernel && module_->device()->properties().sm_major >= 9;
    if ((programmatic && api.cuLaunchKernelEx) || cluster) {
        if (!api.cuLaunchKernelEx)
            throw DeviceError("launching kernel '" + name_ + "' in thread-block clusters needs "
                              "cuLaunchKernelEx, which this CUDA driver does not have");
        CUlaunchAttribute attrs[2]{};
        unsigned n = 0;
        if (programmatic) {
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n++].value.programmaticStreamSerializationAllowed = 1;
        }
        if (cluster) {
            attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            attrs[n].value.clusterDim.x = cluster->x;
            attrs[n].value.clusterDim.y = cluster->y;
            attrs[n++].value.clusterDim.z = cluster->z;
        }
        CUlaunchConfig config{};
        config.gridDimX = grid.x;
        config.gridDimY = grid.y;
        config.gridDimZ = grid.z;
        config.blockDimX = block.x;
        config.blockDimY = block.y;
        config.blockDimZ = block.z;
        config.sharedMemBytes = shared_mem_bytes;
        config.hStream = stream;
        config.attrs = attrs;
        config.numAttrs = n;
        cu_check(api.cuLaunchKernelEx(&config, function_, params, nullptr), "cuLaunchKernelEx",
                 "launching kernel '" + name_ + "'");
        return;
    }
    cu_check(api.cuLaunchKernel(function_, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                shared_mem_bytes, stream, params, nullptr),
             "cuLaunchKernel", "launching kernel '" + name_ + "'");
}

void Kernel::launch(Dim3 grid, Dim3 block, KernelArgs& args, unsigned int shared_mem_bytes,
                    CUstream stream) const {
    if (params_known_) {
        const auto& sizes = args.sizes();
        if (sizes.size() != param_sizes_.size())
            throw std::invalid_argument("kernel '" + name_ + "' takes " +
                                        std::to_string(param_sizes_.size()) + " arguments, got " +
                                        std::to_string(sizes.size()));
        for (size_t i = 0; i < sizes.size(); ++i)
            if (sizes[i] != param_sizes_[i])
                throw std::invalid_argument("kernel '" + name_ + "' argument " + std::to_string(i) +
                                            " must be " + std::to_string(param_sizes_[i]) +
                                            " bytes, got " + std::to_string(sizes[i]) +
                                            " (check the NumPy scalar type)");
    }
    launch(grid, block, args.pointers(), shared_mem_bytes, stream);
}

void KernelArgs::add_bytes(const void* data, size_t size) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    storage_.emplace_back(p, p + size);
    sizes_.push_back(size);
    // At least 8 zeroed bytes per parameter: the driver reads only the parameter's size, and a
    // test double may safely read a fixed 8.
    if (storage_.back().size() < 8) storage_.back().resize(8, 0);
}

void** KernelArgs::pointers() {
    pointers_.clear();
    for (auto& s : storage_) pointers_.push_back(s.data());
    return pointers_.data();
}

std::shared_ptr<Module> load_cubin_module(const std::shared_ptr<Device>& device,
                                          std::shared_ptr<const std::string> cubin,
                                          const std::string& name) {
    return Module::load(device, std::move(cubin), name);
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// source_digest() of an embedded kernel, computed once per (name, options).
std::string embedded_digest(const std::string& name, const std::string& source,
                            const std::vector<std::string>& args) {
    static std::mutex mutex;
    static std::map<std::string, std::string> memo;
    std::string memo_key = name;
    for (const auto& a : options_without_arch(args)) memo_key += '\n' + a;
    {
        std::lock_guard<std::mutex> lock(mutex);
        auto it = memo.find(memo_key);
        if (it != memo.end()) return it->second;
    }
    std::string digest = source_digest(name, source, args, embedded_headers());
    std::lock_guard<std::mutex> lock(mutex);
    memo[memo_key] = digest;
    return digest;
}

}  // namespace

std::shared_ptr<Module> load_embedded_module(const std::shared_ptr<Device>& device,
                                             const std::string& name, CompileOptions options) {
    options.arch = device->arch();
    std::string source;
    if (!embedded_source(name, &source)) return load_cubin_module(device, compile_embedded(name, options).cubin, name);

    KernelLoad record;
    record.kernel = name;
    record.device = device->index();
    record.device_arch = options.arch;
    if (shipped_enabled()) {
        const auto t0 = std::chrono::steady_clock::now();
        const std::string digest = embedded_digest(name, source, nvrtc_options(options));
        const auto manifest = shipped_manifest();
        std::string why;
        const ShippedImage* image = pick_shipped(*manifest, name, digest, options.arch, &why);
        std::shared_ptr<const std::string> bytes;
        if (image) bytes = read_shipped(*manifest, *image, &why);
        if (bytes) {
            const std::string key = "shipped:" + image->sha256;
            std::lock_guard<std::mutex> lock(device->module_mutex());
            auto& cache = device->module_cache();
            if (auto live = cache[key].lock()) {
                jit_count(&JitStats::shipped_hits);
                return live;
            }
            record.fetch_ms = ms_since(t0);
            const auto t1 = std::chrono::steady_clock::now();
            try {
                auto module = Module::load(device, bytes, name);
                record.load_ms = ms_since(t1);
                record.source = "shipped";
                record.image = image->arch;
                cache[key] = module;
                jit_count(&JitStats::shipped_hits);
                record_kernel_load(record);
                return module;
            } catch (const DeviceError& e) {
                // e.g. a driver older than the NVRTC that built the image: compile it here instead
                jit_count(&JitStats::shipped_load_errors);
                why = std::string("the driver refused the shipped ") + image->arch + " image: " + e.what();
            }
        } else {
            jit_count(&JitStats::shipped_misses);
        }
        record.note = why;
    } else {
        jit_count(&JitStats::shipped_misses);
        record.note = "shipped images are off (GK_SHIPPED_KERNELS=0)";
    }

    const auto t0 = std::chrono::steady_clock::now();
    CompiledKernel compiled = compile(name, source, options);
    record.fetch_ms = ms_since(t0);
    std::lock_guard<std::mutex> lock(device->module_mutex());
    auto& cache = device->module_cache();
    if (auto live = cache[compiled.key].lock()) return live;
    const auto t1 = std::chrono::steady_clock::now();
    auto module = Module::load(device, compiled.cubin, name);
    record.load_ms = ms_since(t1);
    record.source = compiled.cache == "compiled" ? "nvrtc" : compiled.cache;
    record.image = compiled.arch;
    cache[compiled.key] = module;
    record_kernel_load(record);
    return module;
}

}  // namespace gk
