// gk_ship_kernels: compiles every embedded kernel file (native/ops/kernels/*.cu) with NVRTC when
// the wheel is built, for the architectures users have, and writes the images and
// manifest.json into a folder that is installed as pygpukit_dsp/_kernels/ (gk/shipped.h).
//
//   gk_ship_kernels --out DIR [--arch sm_80 ...] [--ptx compute_90 ...] [--lib-dir D ...]
//                   [--jobs N] [--disabled REASON]
//
// NVRTC is opened through the project's own loader (gk::nvrtc(), the folders given with
// --lib-dir first, e.g. the nvidia-cuda-nvrtc wheel of the build environment, then the system),
// with the same options and headers as the run-time JIT. Without NVRTC (or with --disabled) it
// writes a manifest with no images and the reason, says that kernels will compile at first
// use, and exits 0: the build goes on. A kernel that fails to compile fails the build (exit 1).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../jit/json.h"
#include "../jit/sha256.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/loader.h"
#include "gk/shipped.h"

namespace {

struct Job {
    std::string kernel;
    std::string arch;  // sm_XX or compute_XX
    bool ptx = false;
    std::string image;
    std::string log;
    std::string error;
};

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, sep))
        if (!item.empty()) out.push_back(item);
    return out;
}

bool write_file(const std::string& path, const std::string& data) {
    const std::string tmp = path + ".tmp." + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        if (!out) return false;
        out.write(data.data(), static_cast<std::streamsize>(data.size()));
        if (!out.flush()) return false;
    }
    return ::rename(tmp.c_str(), path.c_str()) == 0;
}

bool make_dir(const std::string& path) {
    std::string partial;
    for (const std::string& piece : split(path, '/')) {
        partial += (partial.empty() && path[0] != '/') ? piece : "/" + piece;
        if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
    return true;
}

// Images of an earlier build that this one does not write again.
void remove_old_images(const std::string& dir, const std::set<std::string>& keep) {
    DIR* d = ::opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        auto ends = [&](const char* suffix) {
            const std::string s = suffix;
            return name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
        };
        if ((ends(".cubin") || ends(".ptx")) && !keep.count(name)) ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
}

std::string json_list(const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + gk::json::quote(items[i]);
    return out + "]";
}

int write_manifest(const std::string& dir, const std::string& nvrtc, const std::vector<std::string>& archs,
                   const std::vector<std::string>& ptx, const std::string& reason, const std::string& images) {
    std::ostringstream m;
    m << "{\n  \"format\": \"pygpukit-dsp shipped kernels v1\",\n"
      << "  \"nvrtc\": " << gk::json::quote(nvrtc) << ",\n"
      << "  \"archs\": " << json_list(archs) << ",\n"
      << "  \"ptx\": " << json_list(ptx) << ",\n"
      << "  \"reason\": " << gk::json::quote(reason) << ",\n"
      << "  \"images\": [" << images << "\n  ]\n}\n";
    if (!write_file(dir + "/manifest.json", m.str())) {
        std::fprintf(stderr, "gk_ship_kernels: cannot write %s/manifest.json\n", dir.c_str());
        return 1;
    }
    return 0;
}

int without_images(const std::string& dir, const std::string& reason) {
    remove_old_images(dir, {});
    std::printf("pygpukit-dsp: no kernels compiled at build time (%s); kernels will compile at "
                "first use (NVRTC needed then)\n", reason.c_str());
    return write_manifest(dir, "", {}, {}, reason + "; kernels compile at first use", "");
}

}  // namespace

int main(int argc, char** argv) {
    std::string out, disabled;
    std::vector<std::string> archs, ptx, lib_dirs;
    unsigned jobs = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "gk_ship_kernels: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--out") out = value();
        else if (a == "--arch") for (auto& x : split(value(), ',')) archs.push_back(x);
        else if (a == "--ptx") for (auto& x : split(value(), ',')) ptx.push_back(x);
        else if (a == "--lib-dir") for (auto& x : split(value(), ':')) lib_dirs.push_back(x);
        else if (a == "--jobs") jobs = static_cast<unsigned>(std::atoi(value().c_str()));
        else if (a == "--disabled") disabled = value();
        else {
            std::fprintf(stderr, "gk_ship_kernels: unknown argument %s\n", a.c_str());
            return 2;
        }
    }
    if (out.empty()) {
        std::fprintf(stderr, "gk_ship_kernels: --out DIR is required\n");
        return 2;
    }
    if (archs.empty()) archs = {"sm_80", "sm_86", "sm_89", "sm_90"};
    if (ptx.empty()) ptx = {"compute_90"};
    if (!make_dir(out)) {
        std::fprintf(stderr, "gk_ship_kernels: cannot create %s\n", out.c_str());
        return 1;
    }
    if (!disabled.empty()) return without_images(out, disabled);

    gk::set_library_dirs(lib_dirs);
    const gk::LibraryStatus status = gk::nvrtc_status();
    if (!status.found) return without_images(out, "NVRTC not found at build time: " + status.reason);
    const gk::NvrtcApi& api = gk::nvrtc();
    const std::string version = gk::nvrtc_version_text(api);

    // Architectures this NVRTC cannot target are left out (and said so), not fatal.
    std::vector<int> supported = gk::nvrtc_supported_archs();
    std::string skipped;
    auto keep_supported = [&](std::vector<std::string>& list) {
        std::vector<std::string> kept;
        for (const auto& x : list) {
            const bool ok = supported.empty() ||
                            std::find(supported.begin(), supported.end(), gk::arch_number(x)) != supported.end();
            if (ok) kept.push_back(x);
            else skipped += (skipped.empty() ? "" : ", ") + x;
        }
        list = kept;
    };
    keep_supported(archs);
    keep_supported(ptx);

    const auto kernels = gk::embedded_kernels();
    const auto headers = gk::embedded_headers();
    std::vector<Job> work;
    for (const auto& k : kernels) {
        for (const auto& a : archs) work.push_back({k.first, a, false, {}, {}, {}});
        for (const auto& a : ptx) work.push_back({k.first, a, true, {}, {}, {}});
    }
    // Longest first (fir, stft, ...): the last compile started is a short one.
    std::stable_sort(work.begin(), work.end(), [&](const Job& x, const Job& y) {
        return kernels.at(x.kernel).size() > kernels.at(y.kernel).size();
    });
    if (jobs == 0) jobs = std::max(1u, std::thread::hardware_concurrency());
    jobs = std::min<unsigned>(jobs, static_cast<unsigned>(work.size()));

    const auto t0 = std::chrono::steady_clock::now();
    std::atomic<size_t> next{0};
    auto worker = [&] {
        for (size_t i = next++; i < work.size(); i = next++) {
            Job& job = work[i];
            gk::CompileOptions options;
            options.arch = job.arch;
            try {
                job.image = gk::nvrtc_compile_image(job.kernel, kernels.at(job.kernel),
                                                    gk::nvrtc_options(options), headers, job.ptx, &job.log);
            } catch (const std::exception& e) {
                job.error = e.what();
            }
        }
    };
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < jobs; ++t) threads.emplace_back(worker);
    for (auto& t : threads) t.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    int failures = 0;
    for (const Job& job : work)
        if (!job.error.empty()) {
            std::fprintf(stderr, "gk_ship_kernels: %s for %s: %s\n", job.kernel.c_str(), job.arch.c_str(),
                         job.error.c_str());
            ++failures;
        }
    if (failures) return 1;

    std::sort(work.begin(), work.end(), [](const Job& x, const Job& y) {
        return x.kernel != y.kernel ? x.kernel < y.kernel : (x.ptx != y.ptx ? !x.ptx : x.arch < y.arch);
    });
    std::set<std::string> files;
    std::string images;
    size_t total = 0;
    for (const Job& job : work) {
        gk::CompileOptions options;
        options.arch = job.arch;
        const auto args = gk::nvrtc_options(options);
        const std::string& source = kernels.at(job.kernel);
        const std::string file = job.kernel + "." + job.arch + (job.ptx ? ".ptx" : ".cubin");
        if (!write_file(out + "/" + file, job.image)) {
            std::fprintf(stderr, "gk_ship_kernels: cannot write %s/%s\n", out.c_str(), file.c_str());
            return 1;
        }
        files.insert(file);
        total += job.image.size();
        std::ostringstream e;
        e << (images.empty() ? "\n" : ",\n") << "    {\"kernel\": " << gk::json::quote(job.kernel)
          << ", \"arch\": " << gk::json::quote(job.arch) << ", \"kind\": \"" << (job.ptx ? "ptx" : "cubin")
          << "\", \"file\": " << gk::json::quote(file) << ", \"bytes\": " << job.image.size()
          << ",\n     \"sha256\": \"" << gk::sha256_hex(job.image.data(), job.image.size()) << "\""
          << ",\n     \"source_sha256\": \"" << gk::source_digest(job.kernel, source, args, headers) << "\""
          << ",\n     \"key\": \"" << gk::cache_key(job.kernel, job.arch, version, args, headers, source) << "\""
          << ",\n     \"options\": " << json_list(gk::options_without_arch(args)) << "}";
        images += e.str();
    }
    remove_old_images(out, files);
    const std::string reason = skipped.empty() ? "" : "NVRTC " + version + " cannot target " + skipped;
    if (write_manifest(out, version, archs, ptx, reason, images) != 0) return 1;
    std::string arch_text;
    for (const auto& a : archs) arch_text += " " + a;
    for (const auto& a : ptx) arch_text += " " + a + "(PTX)";
    std::printf("pygpukit-dsp: compiled %zu kernel images (%zu kernels x%s) with NVRTC %s (%s) in %.1f s "
                "on %u threads, %.1f MB%s%s\n",
                work.size(), kernels.size(), arch_text.c_str(), version.c_str(), status.path.c_str(), seconds,
                jobs, total / 1e6, skipped.empty() ? "" : "; skipped: ", skipped.c_str());
    return 0;
}
