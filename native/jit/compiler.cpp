// NVRTC compilation and the two compile caches.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "gk/embedded.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "sha256.h"

namespace gk {
namespace {

constexpr char kMagic[8] = {'G', 'K', 'C', 'U', 'B', 'I', 'N', '1'};
constexpr size_t kHeaderSize = sizeof(kMagic) + sizeof(uint64_t) + 32;

std::mutex g_cache_mutex;
std::unordered_map<std::string, std::shared_ptr<const std::string>> g_memory_cache;
JitStats g_stats;

bool valid_arch(const std::string& arch) {
    if (arch.size() < 5 || arch.compare(0, 3, "sm_") != 0) return false;
    size_t i = 3;
    while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9') ++i;
    if (i == 3) return false;
    // Optional feature suffix: sm_90a, sm_100f.
    return i == arch.size() || (i + 1 == arch.size() && arch[i] >= 'a' && arch[i] <= 'z');
}

bool make_dirs(const std::string& path) {
    std::string partial;
    std::stringstream parts(path);
    std::string piece;
    if (!path.empty() && path[0] == '/') partial = "/";
    while (std::getline(parts, piece, '/')) {
        if (piece.empty()) continue;
        partial += piece;
        if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return false;
        partial += "/";
    }
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Returns the payload when the file is an intact cache entry.
bool read_entry(const std::string& path, std::string* payload, bool* existed) {
    std::ifstream in(path, std::ios::binary);
    *existed = static_cast<bool>(in);
    if (!in) return false;
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (data.size() < kHeaderSize || std::memcmp(data.data(), kMagic, sizeof(kMagic)) != 0)
        return false;
    uint64_t size = 0;
    std::memcpy(&size, data.data() + sizeof(kMagic), sizeof(size));
    if (size != data.size() - kHeaderSize || size == 0) return false;
    Sha256 h;
    h.update(data.data() + kHeaderSize, size);
    auto digest = h.digest();
    if (std::memcmp(digest.data(), data.data() + sizeof(kMagic) + sizeof(uint64_t), 32) != 0)
        return false;
    payload->assign(data, kHeaderSize, size);
    return true;
}

// Atomic: readers see either the old entry, no entry, or the complete new one.
bool write_entry(const std::string& dir, const std::string& path, const std::string& payload) {
    if (!make_dirs(dir)) return false;
    static std::atomic<unsigned> counter{0};
    std::ostringstream tmp_name;
    tmp_name << path << ".tmp." << ::getpid() << "." << std::hash<std::thread::id>()(std::this_thread::get_id())
             << "." << counter++;
    const std::string tmp = tmp_name.str();
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return false;
        Sha256 h;
        h.update(payload);
        auto digest = h.digest();
        uint64_t size = payload.size();
        out.write(kMagic, sizeof(kMagic));
        out.write(reinterpret_cast<const char*>(&size), sizeof(size));
        out.write(reinterpret_cast<const char*>(digest.data()), digest.size());
        out.write(payload.data(), static_cast<std::streamsize>(payload.size()));
        out.flush();
        if (!out) {
            ::unlink(tmp.c_str());
            return false;
        }
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        return false;
    }
    return true;
}

std::string nvrtc_error(const NvrtcApi& api, nvrtcResult r) {
    const char* text = api.nvrtcGetErrorString(r);
    return text ? text : ("nvrtcResult " + std::to_string(r));
}

std::string program_log(const NvrtcApi& api, nvrtcProgram program) {
    size_t size = 0;
    if (api.nvrtcGetProgramLogSize(program, &size) != NVRTC_SUCCESS || size <= 1) return {};
    std::string log(size, '\0');
    if (api.nvrtcGetProgramLog(program, &log[0]) != NVRTC_SUCCESS) return {};
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
    return log;
}

struct ProgramGuard {
    const NvrtcApi& api;
    nvrtcProgram program = nullptr;
    ~ProgramGuard() {
        if (program) api.nvrtcDestroyProgram(&program);
    }
};

std::string run_nvrtc(const NvrtcApi& api, const std::string& name, const std::string& source,
                      const std::vector<std::string>& options,
                      const std::map<std::string, std::string>& headers, std::string* log,
                      bool ptx = false) {
    std::vector<const char*> header_sources, header_names;
    for (const auto& h : headers) {
        header_names.push_back(h.first.c_str());
        header_sources.push_back(h.second.c_str());
    }
    ProgramGuard guard{api};
    const std::string file_name = name + ".cu";
    nvrtcResult r = api.nvrtcCreateProgram(&guard.program, source.c_str(), file_name.c_str(),
                                           static_cast<int>(header_sources.size()),
                                           header_sources.data(), header_names.data());
    if (r != NVRTC_SUCCESS) {
        guard.program = nullptr;
        throw CompileError(name, "nvrtcCreateProgram failed: " + nvrtc_error(api, r));
    }
    std::vector<const char*> argv;
    for (const auto& o : options) argv.push_back(o.c_str());
    {
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        ++g_stats.nvrtc_compiles;
    }
    r = api.nvrtcCompileProgram(guard.program, static_cast<int>(argv.size()), argv.data());
    *log = program_log(api, guard.program);
    if (r != NVRTC_SUCCESS) {
        std::string text = *log;
        if (r != NVRTC_ERROR_COMPILATION || text.empty()) {
            std::string options_text;
            for (const auto& o : options) options_text += " " + o;
            text = "nvrtcCompileProgram: " + nvrtc_error(api, r) + " (options:" + options_text + ")" +
                   (text.empty() ? std::string() : "\n" + text);
        }
        throw CompileError(name, text);
    }
    size_t size = 0;
    if (ptx) {
        if (!api.nvrtcGetPTXSize || !api.nvrtcGetPTX)
            throw CompileError(name, "this NVRTC has no nvrtcGetPTX");
        r = api.nvrtcGetPTXSize(guard.program, &size);
        if (r != NVRTC_SUCCESS || size == 0)
            throw CompileError(name, "NVRTC produced no PTX (" + nvrtc_error(api, r) + ")");
        std::string text(size, '\0');
        r = api.nvrtcGetPTX(guard.program, &text[0]);
        if (r != NVRTC_SUCCESS) throw CompileError(name, "nvrtcGetPTX failed: " + nvrtc_error(api, r));
        return text;  // NUL-terminated, as cuModuleLoadData wants PTX
    }
    r = api.nvrtcGetCUBINSize(guard.program, &size);
    if (r != NVRTC_SUCCESS || size == 0)
        throw CompileError(name, "NVRTC produced no CUBIN (" + nvrtc_error(api, r) +
                                     "); the architecture must be a real one such as sm_80");
    std::string cubin(size, '\0');
    r = api.nvrtcGetCUBIN(guard.program, &cubin[0]);
    if (r != NVRTC_SUCCESS) throw CompileError(name, "nvrtcGetCUBIN failed: " + nvrtc_error(api, r));
    return cubin;
}

}  // namespace

std::map<std::string, std::string> embedded_kernels() {
    size_t count = 0;
    const EmbeddedFile* files = embedded_files(&count);
    std::map<std::string, std::string> out;
    for (size_t i = 0; i < count; ++i)
        if (!files[i].header)
            out[files[i].name] = std::string(reinterpret_cast<const char*>(files[i].data), files[i].size);
    return out;
}

std::map<std::string, std::string> embedded_headers() {
    size_t count = 0;
    const EmbeddedFile* files = embedded_files(&count);
    std::map<std::string, std::string> out;
    for (size_t i = 0; i < count; ++i)
        if (files[i].header)
            out[files[i].file] = std::string(reinterpret_cast<const char*>(files[i].data), files[i].size);
    return out;
}

std::vector<std::string> nvrtc_options(const CompileOptions& options) {
    std::vector<std::string> out = {"--gpu-architecture=" + options.arch, "-std=c++17",
                                    "-default-device"};
    if (options.fast_math) out.push_back("--use_fast_math");
    if (options.line_info) out.push_back("-lineinfo");
    out.insert(out.end(), options.extra.begin(), options.extra.end());
    return out;
}

std::string jit_cache_dir() {
    const char* disk = std::getenv("GK_JIT_DISK_CACHE");
    if (disk && std::string(disk) == "0") return {};
    const char* dir = std::getenv("GK_CACHE_DIR");
    if (dir && dir[0]) return dir;
    const char* home = std::getenv("HOME");
    if (!home || !home[0]) return {};
    return std::string(home) + "/.cache/pygpukit-dsp/kernels";
}

JitStats jit_stats() {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    return g_stats;
}

void clear_jit_memory_cache() {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    g_memory_cache.clear();
}

std::vector<int> nvrtc_supported_archs() {
    const NvrtcApi& api = nvrtc();
    if (!api.nvrtcGetNumSupportedArchs || !api.nvrtcGetSupportedArchs) return {};
    int count = 0;
    if (api.nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return {};
    std::vector<int> archs(static_cast<size_t>(count));
    if (api.nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
    return archs;
}

std::string nvrtc_version_text(const NvrtcApi& api) {
    return std::to_string(api.version_major) + "." + std::to_string(api.version_minor);
}

std::string cache_key(const std::string& name, const std::string& arch, const std::string& nvrtc_version,
                      const std::vector<std::string>& args,
                      const std::map<std::string, std::string>& headers, const std::string& source) {
    Sha256 h;
    h.field("pygpukit-dsp jit v1");
    h.field(name);
    h.field(arch);
    h.field(nvrtc_version);
    for (const auto& a : args) h.field(a);
    for (const auto& header : headers) {
        h.field(header.first);
        h.field(header.second);
    }
    h.field(source);
    return h.hex_digest();
}

std::vector<std::string> options_without_arch(const std::vector<std::string>& args) {
    std::vector<std::string> out;
    for (const auto& a : args)
        if (a.rfind("--gpu-architecture=", 0) != 0) out.push_back(a);
    return out;
}

std::string source_digest(const std::string& name, const std::string& source,
                          const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& headers) {
    Sha256 h;
    h.field("pygpukit-dsp kernel source v1");
    h.field(name);
    for (const auto& a : options_without_arch(args)) h.field(a);
    for (const auto& header : headers) {
        h.field(header.first);
        h.field(header.second);
    }
    h.field(source);
    return h.hex_digest();
}

std::string nvrtc_compile_image(const std::string& name, const std::string& source,
                                const std::vector<std::string>& args,
                                const std::map<std::string, std::string>& headers, bool ptx,
                                std::string* log) {
    std::string ignored;
    return run_nvrtc(nvrtc(), name, source, args, headers, log ? log : &ignored, ptx);
}

bool embedded_source(const std::string& name, std::string* source) {
    size_t count = 0;
    const EmbeddedFile* files = embedded_files(&count);
    for (size_t i = 0; i < count; ++i)
        if (!files[i].header && name == files[i].name) {
            source->assign(reinterpret_cast<const char*>(files[i].data), files[i].size);
            return true;
        }
    return false;
}

void jit_count(uint64_t JitStats::*field, uint64_t n) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    g_stats.*field += n;
}

std::shared_ptr<const std::string> jit_memory_get(const std::string& key) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    auto hit = g_memory_cache.find(key);
    return hit == g_memory_cache.end() ? nullptr : hit->second;
}

void jit_memory_put(const std::string& key, std::shared_ptr<const std::string> image) {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    g_memory_cache[key] = std::move(image);
}

CompiledKernel compile(const std::string& name, const std::string& source,
                       const CompileOptions& options) {
    if (name.empty()) throw std::invalid_argument("kernel name must not be empty");
    if (!valid_arch(options.arch))
        throw std::invalid_argument("architecture '" + options.arch +
                                    "' is not a real GPU architecture such as 'sm_80' or 'sm_90'");
    const NvrtcApi& api = nvrtc();
    const std::vector<std::string> args = nvrtc_options(options);
    const std::map<std::string, std::string> headers = embedded_headers();

    CompiledKernel result;
    result.name = name;
    result.arch = options.arch;
    result.key = cache_key(name, options.arch, nvrtc_version_text(api), args, headers, source);
    const std::string dir = jit_cache_dir();
    if (!dir.empty()) result.cache_path = dir + "/" + result.key + ".cubin";

    {
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        auto hit = g_memory_cache.find(result.key);
        if (hit != g_memory_cache.end()) {
            ++g_stats.memory_hits;
            result.cubin = hit->second;
            result.cache = "memory";
            return result;
        }
    }

    if (!result.cache_path.empty()) {
        std::string payload;
        bool existed = false;
        if (read_entry(result.cache_path, &payload, &existed)) {
            auto cubin = std::make_shared<const std::string>(std::move(payload));
            std::lock_guard<std::mutex> lock(g_cache_mutex);
            ++g_stats.disk_hits;
            g_memory_cache[result.key] = cubin;
            result.cubin = cubin;
            result.cache = "disk";
            return result;
        }
        if (existed) {
            std::lock_guard<std::mutex> lock(g_cache_mutex);
            ++g_stats.disk_rejected;
        }
    }

    auto cubin = std::make_shared<const std::string>(
        run_nvrtc(api, name, source, args, headers, &result.log));
    bool written = !result.cache_path.empty() && write_entry(dir, result.cache_path, *cubin);
    {
        std::lock_guard<std::mutex> lock(g_cache_mutex);
        ++g_stats.compiles;
        if (written)
            ++g_stats.disk_writes;
        else if (!result.cache_path.empty())
            ++g_stats.disk_write_errors;
        g_memory_cache[result.key] = cubin;
    }
    if (!written) result.cache_path.clear();
    result.cubin = cubin;
    result.cache = "compiled";
    return result;
}

CompiledKernel compile_embedded(const std::string& name, const CompileOptions& options) {
    const auto kernels = embedded_kernels();
    auto it = kernels.find(name);
    if (it == kernels.end()) {
        std::string names;
        for (const auto& k : kernels) names += (names.empty() ? "" : ", ") + k.first;
        throw std::invalid_argument("no embedded kernel file named '" + name + "' (available: " +
                                    names + ")");
    }
    return compile(name, it->second, options);
}

}  // namespace gk
