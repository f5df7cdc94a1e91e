// Kernel images compiled when the wheel was built (native/tools/ship_kernels.cpp) and shipped in
// pygpukit_dsp/_kernels/: one CUBIN per embedded kernel file and architecture (sm_80, sm_86,
// sm_89, sm_90) plus PTX of the newest (compute_90) for the driver to JIT on later GPUs, listed
// in manifest.json with the same fields as the disk cache's key (source digest, options, arch,
// NVRTC version) and each file's SHA-256.
//
// load_embedded_module() (gk/jit.h) asks here first: the CUBIN of the device's exact
// architecture, else the newest PTX not newer than the device. An image is used only when its
// recorded source digest equals the running module's (so an image built from other sources is
// never loaded) and its file passes its SHA-256 check. If the driver refuses it (a driver older
// than the NVRTC that built it) the disk cache and NVRTC follow.
//
// Folder: $GK_SHIPPED_KERNELS_DIR when set, else `_kernels` next to the real path of the native
// module. GK_SHIPPED_KERNELS=0 ignores shipped images at run time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gk {

struct ShippedImage {
    std::string kernel;         // "fir" (file stem)
    std::string arch;           // "sm_90" (CUBIN) or "compute_90" (PTX)
    std::string kind;           // "cubin" or "ptx"
    std::string file;           // name inside the folder
    std::string sha256;         // of the file
    std::string source_sha256;  // gk::source_digest() of what it was compiled from
    std::string key;            // the disk-cache key the same compile would have
    std::vector<std::string> options;  // NVRTC options besides the architecture
    uint64_t bytes = 0;
};

struct ShippedManifest {
    std::string dir;     // folder looked in
    bool found = false;  // manifest.json read
    std::string reason;  // why there are no images ("" when there are)
    std::string nvrtc;   // version of the NVRTC that built them ("13.0")
    std::vector<std::string> archs;  // CUBIN architectures
    std::vector<std::string> ptx;    // PTX architectures
    std::vector<ShippedImage> images;
};

bool shipped_enabled();   // false when GK_SHIPPED_KERNELS=0
std::string shipped_dir();
// Read once per folder (re-read when $GK_SHIPPED_KERNELS_DIR changes); never throws.
std::shared_ptr<const ShippedManifest> shipped_manifest();

// "sm_90" -> 90, "sm_90a" -> 90, "compute_90" -> 90; -1 if not an architecture name.
int arch_number(const std::string& arch);

// The image for `kernel` (whose current source digest is `digest`) on a device of `device_arch`:
// the exact CUBIN, else the newest PTX not newer than the device; null with *why when none.
const ShippedImage* pick_shipped(const ShippedManifest& manifest, const std::string& kernel,
                                 const std::string& digest, const std::string& device_arch,
                                 std::string* why);
// The image's bytes (PTX NUL-terminated), from memory after the first read; null with *why when
// the file is missing or fails its size/SHA-256 check. Counts shipped_reads / shipped_rejected.
std::shared_ptr<const std::string> read_shipped(const ShippedManifest& manifest, const ShippedImage& image,
                                                std::string* why);

// Where each embedded kernel module loaded in this process came from.
struct KernelLoad {
    std::string kernel;
    int device = 0;
    std::string device_arch;  // "sm_90"
    std::string source;       // "shipped", "memory", "disk" or "nvrtc"
    std::string image;        // "sm_90" / "compute_90" for shipped; the compiled arch otherwise
    std::string note;         // e.g. why a shipped image was not used
    double fetch_ms = 0;      // finding the image: file read + check, cache lookup, or the compile
    double load_ms = 0;       // cuModuleLoadData
};
void record_kernel_load(KernelLoad load);
std::vector<KernelLoad> kernel_loads();
void clear_kernel_loads();

// Where each embedded kernel would come from on a device of `device_arch` in a fresh process
// (for `gk-stream devices`): "shipped" (image "sm_90" / "compute_90"), "disk" (an entry in the
// disk cache), "nvrtc" (compiled at first use) or "unavailable" (no image and no NVRTC).
struct KernelSource {
    std::string kernel;
    std::string source;
    std::string image;
    std::string note;
};
std::vector<KernelSource> kernel_sources(const std::string& device_arch);

}  // namespace gk
