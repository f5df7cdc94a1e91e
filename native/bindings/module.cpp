// pygpukit_dsp._native: module entry point, error translation, loader and capabilities.
// Importing this module opens no CUDA library; the first call that needs one does.
#include <exception>
#include <set>

#include "bindings.h"
#include "gk/capabilities.h"
#include "gk/shipped.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/loader.h"

namespace gk_py {

namespace {

// Raises pygpukit_dsp.errors.<cls_name>(*args) (imported lazily); RuntimeError if that module
// cannot be imported (the native module used on its own).
template <class Decorate>
void raise_gk(const char* cls_name, const py::tuple& args, const char* message, Decorate decorate) {
    try {
        py::object cls = py::module_::import("pygpukit_dsp.errors").attr(cls_name);
        py::object exc = cls(*args);
        decorate(exc);
        PyErr_SetObject(cls.ptr(), exc.ptr());
    } catch (py::error_already_set&) {
        PyErr_SetString(PyExc_RuntimeError, message);
    }
}

void no_decoration(py::object&) {}

py::dict status_dict(const gk::LibraryStatus& s) {
    py::dict d;
    d["found"] = s.found;
    d["path"] = s.path;
    d["version"] = s.version;
    d["reason"] = s.reason;
    return d;
}

}  // namespace

py::dict shipped_summary(const gk::ShippedManifest& m) {
    py::dict d;
    d["found"] = m.found && !m.images.empty();
    d["enabled"] = gk::shipped_enabled();
    d["dir"] = m.dir;
    d["nvrtc"] = m.nvrtc;
    d["archs"] = m.archs;
    d["ptx"] = m.ptx;
    d["images"] = m.images.size();
    std::set<std::string> kernels;
    for (const auto& im : m.images) kernels.insert(im.kernel);
    d["kernels"] = kernels.size();
    d["reason"] = m.reason;
    return d;
}

void ensure_library_dirs() {
    if (gk::library_dirs_set()) return;
    try {
        py::module_::import("pygpukit_dsp._libs").attr("configure_native")();
    } catch (py::error_already_set&) {
        // _libs unavailable: the system search path alone is used.
    }
}

void bind_errors(py::module_&) {
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const gk::CompileError& e) {
            raise_gk("CompileError", py::make_tuple(e.kernel(), e.log()), e.what(), no_decoration);
        } catch (const gk::UnsupportedError& e) {
            raise_gk("UnsupportedError", py::make_tuple(e.stage(), e.backend(), e.reason()), e.what(),
                     no_decoration);
        } catch (const gk::DeviceError& e) {
            raise_gk("DeviceError", py::make_tuple(e.what()), e.what(), [&e](py::object& exc) {
                exc.attr("call") = e.call();
                exc.attr("code") = e.code();
                exc.attr("code_name") = e.code_name();
            });
        } catch (const gk::Error& e) {
            raise_gk("GkError", py::make_tuple(e.what()), e.what(), no_decoration);
        }
    });
}

}  // namespace gk_py

PYBIND11_MODULE(_native, m) {
    namespace py = pybind11;
    using namespace gk_py;
    m.doc() = "pygpukit-dsp native layer: CUDA driver, NVRTC, cuFFT and cuBLAS loaded at run time.";
    m.attr("MIN_SM") = py::make_tuple(gk::kMinSmMajor, 0);

    bind_errors(m);

    m.def("set_library_dirs", &gk::set_library_dirs, py::arg("dirs"),
          "Folders searched first for NVRTC, cuFFT and cuBLAS (libraries already open stay).");
    m.def("library_dirs", &gk::library_dirs);

    m.def(
        "capabilities",
        [](bool math_libraries) {
            ensure_library_dirs();
            gk::Capabilities caps;
            std::shared_ptr<const gk::ShippedManifest> shipped;
            {
                py::gil_scoped_release release;
                caps = gk::probe_capabilities(math_libraries);
                shipped = gk::shipped_manifest();
            }
            py::dict out;
            out["driver"] = status_dict(caps.driver);
            py::dict nvrtc = status_dict(caps.nvrtc);
            nvrtc["archs"] = caps.nvrtc_archs;
            out["nvrtc"] = nvrtc;
            if (caps.math_probed) {
                out["cufft"] = status_dict(caps.cufft);
                out["cublas"] = status_dict(caps.cublas);
            }
            out["kernels"] = shipped_summary(*shipped);
            py::list gpus;
            for (const auto& g : caps.gpus) {
                py::dict d;
                d["index"] = g.index;
                d["name"] = g.name;
                d["sm"] = py::make_tuple(g.sm_major, g.sm_minor);
                d["arch"] = "sm_" + std::to_string(g.sm_major) + std::to_string(g.sm_minor);
                d["memory_bytes"] = g.memory_bytes;
                d["multiprocessors"] = g.multiprocessors;
                d["pci_bus_id"] = g.pci_bus_id;
                d["clock_mhz"] = g.clock_mhz;
                d["memory_clock_mhz"] = g.memory_clock_mhz;
                d["memory_bus_width_bits"] = g.memory_bus_width_bits;
                d["memory_bandwidth_gbs"] = g.memory_bandwidth_gbs;
                d["l2_cache_bytes"] = g.l2_cache_bytes;
                d["copy_engines"] = g.copy_engines;
                d["usable"] = g.usable;
                d["reason"] = g.reason;
                gpus.append(d);
            }
            out["gpus"] = gpus;
            out["gpus_reason"] = caps.gpus_reason;
            return out;
        },
        py::arg("math_libraries") = true,
        "Driver, NVRTC, cuFFT, cuBLAS, shipped kernels and GPUs, each with the reason when missing;\n"
        "never raises. math_libraries=False leaves cuFFT and cuBLAS unopened (no 'cufft'/'cublas' keys).");

    m.def(
        "device_count",
        []() {
            ensure_library_dirs();
            py::gil_scoped_release release;
            return gk::device_count();
        },
        "Number of CUDA GPUs; raises DeviceError without a driver.");

    m.def(
        "sm_refusal",
        [](int index, const std::string& name, int sm_major, int sm_minor) -> py::object {
            std::string reason = gk::sm_refusal(index, name, sm_major, sm_minor);
            if (reason.empty()) return py::none();
            return py::str(reason);
        },
        py::arg("index"), py::arg("name"), py::arg("sm_major"), py::arg("sm_minor"),
        "Why a GPU of this SM is refused, or None when it is supported (SM 8.0 and newer).");

    bind_core(m);
    bind_jit(m);
    bind_engine(m);
    bind_dispatch(m);
    bind_audio(m);
    bind_instrument(m);
}
