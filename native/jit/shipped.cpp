// Kernel images shipped in the wheel: manifest, lookup for a device, reading and checking.
#include "gk/shipped.h"

#include <dlfcn.h>
#include <limits.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>

#include "gk/embedded.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "json.h"
#include "sha256.h"

namespace gk {
namespace {

constexpr const char* kFormat = "pygpukit-dsp shipped kernels v1";

std::mutex g_mutex;
std::shared_ptr<const ShippedManifest> g_manifest;
std::vector<KernelLoad> g_loads;

std::string module_folder() {
    Dl_info info{};
    if (!dladdr(reinterpret_cast<void*>(&module_folder), &info) || !info.dli_fname) return {};
    std::string path = info.dli_fname;
    if (char* real = ::realpath(info.dli_fname, nullptr)) {
        path = real;
        std::free(real);
    }
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

bool read_file(const std::string& path, std::string* out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream data;
    data << in.rdbuf();
    *out = data.str();
    return static_cast<bool>(in) || in.eof();
}

std::shared_ptr<const ShippedManifest> load_manifest(const std::string& dir) {
    auto m = std::make_shared<ShippedManifest>();
    m->dir = dir;
    if (dir.empty()) {
        m->reason = "the folder of the native module is unknown";
        return m;
    }
    std::string text;
    if (!read_file(dir + "/manifest.json", &text)) {
        m->reason = "no " + dir + "/manifest.json: this build ships no compiled kernels";
        return m;
    }
    try {
        json::Value root = json::parse(text);
        if (root.str("format") != kFormat) {
            m->reason = dir + "/manifest.json is not a '" + kFormat + "' manifest";
            return m;
        }
        m->found = true;
        m->nvrtc = root.str("nvrtc");
        m->archs = root.strings("archs");
        m->ptx = root.strings("ptx");
        m->reason = root.str("reason");
        if (const json::Value* images = root.get("images")) {
            for (const json::Value& v : images->array) {
                ShippedImage im;
                im.kernel = v.str("kernel");
                im.arch = v.str("arch");
                im.kind = v.str("kind");
                im.file = v.str("file");
                im.sha256 = v.str("sha256");
                im.source_sha256 = v.str("source_sha256");
                im.key = v.str("key");
                im.options = v.strings("options");
                im.bytes = static_cast<uint64_t>(v.num("bytes"));
                if (im.kernel.empty() || im.file.empty() || im.file.find('/') != std::string::npos ||
                    (im.kind != "cubin" && im.kind != "ptx") || arch_number(im.arch) < 0)
                    continue;
                m->images.push_back(std::move(im));
            }
        }
        if (m->images.empty() && m->reason.empty()) m->reason = dir + "/manifest.json lists no images";
    } catch (const std::exception& e) {
        m->found = false;
        m->images.clear();
        m->reason = dir + "/manifest.json cannot be read (" + e.what() + ")";
    }
    return m;
}

}  // namespace

bool shipped_enabled() {
    const char* v = std::getenv("GK_SHIPPED_KERNELS");
    return !(v && std::string(v) == "0");
}

std::string shipped_dir() {
    const char* v = std::getenv("GK_SHIPPED_KERNELS_DIR");
    if (v && v[0]) return v;
    static const std::string dir = [] {
        const std::string folder = module_folder();
        return folder.empty() ? folder : folder + "/_kernels";
    }();
    return dir;
}

std::shared_ptr<const ShippedManifest> shipped_manifest() {
    const std::string dir = shipped_dir();
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_manifest || g_manifest->dir != dir) g_manifest = load_manifest(dir);
    return g_manifest;
}

int arch_number(const std::string& arch) {
    size_t i;
    if (arch.rfind("sm_", 0) == 0) i = 3;
    else if (arch.rfind("compute_", 0) == 0) i = 8;
    else return -1;
    const size_t start = i;
    int n = 0;
    while (i < arch.size() && arch[i] >= '0' && arch[i] <= '9' && i - start < 4) n = n * 10 + (arch[i++] - '0');
    if (i == start) return -1;
    if (i + 1 == arch.size() && arch[i] >= 'a' && arch[i] <= 'z') return n;  // sm_90a
    return i == arch.size() ? n : -1;
}

const ShippedImage* pick_shipped(const ShippedManifest& manifest, const std::string& kernel,
                                 const std::string& digest, const std::string& device_arch,
                                 std::string* why) {
    const int device = arch_number(device_arch);
    const ShippedImage* ptx = nullptr;
    bool stale = false, any = false;
    for (const ShippedImage& im : manifest.images) {
        if (im.kernel != kernel) continue;
        any = true;
        if (im.source_sha256 != digest) {
            stale = true;
            continue;
        }
        if (im.kind == "cubin" && im.arch == device_arch) return &im;
        const int n = arch_number(im.arch);
        if (im.kind == "ptx" && n >= 0 && n <= device && (!ptx || n > arch_number(ptx->arch))) ptx = &im;
    }
    if (ptx) return ptx;
    if (why) {
        if (!manifest.found || manifest.images.empty())
            *why = manifest.reason.empty() ? "no shipped images" : manifest.reason;
        else if (!any)
            *why = "no shipped image of '" + kernel + "'";
        else if (stale)
            *why = "the shipped images of '" + kernel + "' were built from other sources or options";
        else
            *why = "no shipped image of '" + kernel + "' for " + device_arch;
    }
    return nullptr;
}

std::shared_ptr<const std::string> read_shipped(const ShippedManifest& manifest, const ShippedImage& image,
                                                std::string* why) {
    const std::string key = "shipped:" + image.sha256;
    if (auto hit = jit_memory_get(key)) return hit;
    const std::string path = manifest.dir + "/" + image.file;
    std::string data;
    if (!read_file(path, &data)) {
        jit_count(&JitStats::shipped_rejected);
        if (why) *why = "cannot read " + path;
        return nullptr;
    }
    jit_count(&JitStats::shipped_reads);
    if (data.size() != image.bytes || data.empty() || sha256_hex(data.data(), data.size()) != image.sha256) {
        jit_count(&JitStats::shipped_rejected);
        if (why) *why = path + " does not match its SHA-256 in manifest.json";
        return nullptr;
    }
    if (image.kind == "ptx" && data.back() != '\0') data.push_back('\0');
    auto out = std::make_shared<const std::string>(std::move(data));
    jit_memory_put(key, out);
    return out;
}

void record_kernel_load(KernelLoad load) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_loads.size() < 4096) g_loads.push_back(std::move(load));
}

std::vector<KernelLoad> kernel_loads() {
    std::lock_guard<std::mutex> lock(g_mutex);
    return g_loads;
}

void clear_kernel_loads() {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_loads.clear();
}

std::vector<KernelSource> kernel_sources(const std::string& device_arch) {
    std::vector<KernelSource> out;
    const auto manifest = shipped_manifest();
    const bool enabled = shipped_enabled();
    const std::map<std::string, std::string> headers = embedded_headers();
    CompileOptions options;
    options.arch = device_arch;
    const std::vector<std::string> args = nvrtc_options(options);
    const LibraryStatus nv = nvrtc_status();
    const std::string cache = jit_cache_dir();
    for (const auto& kv : embedded_kernels()) {
        KernelSource ks;
        ks.kernel = kv.first;
        std::string why = "shipped images are off (GK_SHIPPED_KERNELS=0)";
        if (enabled) {
            const ShippedImage* im =
                pick_shipped(*manifest, kv.first, source_digest(kv.first, kv.second, args, headers), device_arch, &why);
            if (im) {
                ks.source = "shipped";
                ks.image = im->arch;
                ks.note = im->kind == "ptx" ? "PTX, compiled by the driver at first use" : "";
                out.push_back(std::move(ks));
                continue;
            }
        }
        if (!nv.found) {
            ks.source = "unavailable";
            ks.note = why + "; NVRTC not available (" + nv.reason + ")";
            out.push_back(std::move(ks));
            continue;
        }
        ks.image = device_arch;
        ks.note = why;
        ks.source = "nvrtc";
        if (!cache.empty()) {
            const NvrtcApi& api = nvrtc();
            const std::string path =
                cache + "/" + cache_key(kv.first, device_arch, nvrtc_version_text(api), args, headers, kv.second) + ".cubin";
            struct stat st;
            if (::stat(path.c_str(), &st) == 0) ks.source = "disk";
        }
        out.push_back(std::move(ks));
    }
    return out;
}

}  // namespace gk
