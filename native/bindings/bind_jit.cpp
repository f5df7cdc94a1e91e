// NVRTC compile, caches, embedded sources, Module and Kernel.launch.
#include "bindings.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/memory.h"
#include "gk/shipped.h"
#include "gk/stream.h"

namespace gk_py {

namespace {

gk::CompileOptions make_options(const std::string& arch, bool fast_math, bool line_info,
                                std::vector<std::string> extra) {
    gk::CompileOptions o;
    o.arch = arch;
    o.fast_math = fast_math;
    o.line_info = line_info;
    o.extra = std::move(extra);
    return o;
}

gk::Dim3 to_dim3(py::handle obj, const char* what) {
    gk::Dim3 d;
    auto component = [what](py::handle v) -> unsigned int {
        if (!py::isinstance<py::int_>(v))
            throw py::type_error(std::string(what) + " must be an int or a tuple of up to 3 ints");
        long long x = v.cast<long long>();
        if (x < 1 || x > 0x7fffffffLL)
            throw py::value_error(std::string(what) + " dimensions must be between 1 and 2**31-1, got " +
                                  std::to_string(x));
        return static_cast<unsigned int>(x);
    };
    if (py::isinstance<py::int_>(obj)) {
        d.x = component(obj);
        return d;
    }
    if (!py::isinstance<py::tuple>(obj) && !py::isinstance<py::list>(obj))
        throw py::type_error(std::string(what) + " must be an int or a tuple of up to 3 ints");
    py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
    if (seq.size() < 1 || seq.size() > 3)
        throw py::value_error(std::string(what) + " must have 1 to 3 dimensions");
    d.x = component(seq[0]);
    if (seq.size() > 1) d.y = component(seq[1]);
    if (seq.size() > 2) d.z = component(seq[2]);
    return d;
}

// DeviceBuffer -> its device pointer; a NumPy scalar -> its bytes (np.float32, np.int32,
// np.uint64, np.complex64, ...); bytes -> raw (a struct parameter). Python int/float are refused:
// their C type is ambiguous.
gk::KernelArgs pack_args(const std::string& kernel, py::sequence args) {
    gk::KernelArgs packed;
    size_t index = 0;
    for (py::handle item : args) {
        const std::string where = "kernel '" + kernel + "' argument " + std::to_string(index);
        if (py::isinstance<gk::DeviceBuffer>(item)) {
            CUdeviceptr p = item.cast<const gk::DeviceBuffer&>().ptr();
            packed.add(p);
        } else if (py::isinstance<gk::PinnedBuffer>(item)) {
            throw py::type_error(where + " is a PinnedBuffer: kernels read device memory; copy it "
                                         "into a DeviceBuffer first");
        } else if (py::isinstance<py::bytes>(item)) {
            std::string raw = item.cast<std::string>();
            if (raw.empty()) throw py::value_error(where + " is empty bytes");
            packed.add_bytes(raw.data(), raw.size());
        } else if (PyObject_CheckBuffer(item.ptr())) {
            Py_buffer view;
            if (PyObject_GetBuffer(item.ptr(), &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) {
                PyErr_Clear();
                throw py::type_error(where + " exposes no contiguous buffer");
            }
            const bool scalar = view.ndim == 0 && view.len > 0;
            if (scalar) packed.add_bytes(view.buf, static_cast<size_t>(view.len));
            PyBuffer_Release(&view);
            if (!scalar)
                throw py::type_error(where + " is an array; pass a NumPy scalar such as "
                                             "numpy.float32(x) or a DeviceBuffer");
        } else {
            std::string type_name = py::str(py::type::handle_of(item).attr("__name__"));
            throw py::type_error(where + " is a Python " + type_name +
                                 ", whose C type is ambiguous; wrap it in a NumPy scalar of the "
                                 "parameter's type, e.g. numpy.float32(x), numpy.int32(n) or "
                                 "numpy.uint64(n)");
        }
        ++index;
    }
    return packed;
}

py::dict stats_dict(const gk::JitStats& s) {
    py::dict d;
    d["compiles"] = s.compiles;
    d["memory_hits"] = s.memory_hits;
    d["disk_hits"] = s.disk_hits;
    d["disk_writes"] = s.disk_writes;
    d["disk_rejected"] = s.disk_rejected;
    d["disk_write_errors"] = s.disk_write_errors;
    d["nvrtc_compiles"] = s.nvrtc_compiles;
    d["shipped_hits"] = s.shipped_hits;
    d["shipped_reads"] = s.shipped_reads;
    d["shipped_misses"] = s.shipped_misses;
    d["shipped_rejected"] = s.shipped_rejected;
    d["shipped_load_errors"] = s.shipped_load_errors;
    return d;
}

}  // namespace

void bind_jit(py::module_& m) {
    py::class_<gk::CompiledKernel>(m, "CompileResult", "A CUBIN from NVRTC or from a cache.")
        .def_readonly("name", &gk::CompiledKernel::name)
        .def_readonly("arch", &gk::CompiledKernel::arch)
        .def_readonly("key", &gk::CompiledKernel::key)
        .def_readonly("log", &gk::CompiledKernel::log)
        .def_readonly("cache", &gk::CompiledKernel::cache, "'compiled', 'memory' or 'disk'")
        .def_readonly("cache_path", &gk::CompiledKernel::cache_path)
        .def_property_readonly("cubin", [](const gk::CompiledKernel& c) { return py::bytes(*c.cubin); })
        .def("__repr__", [](const gk::CompiledKernel& c) {
            return "<CompileResult " + c.name + " " + c.arch + " " + std::to_string(c.cubin->size()) +
                   " bytes (" + c.cache + ")>";
        });

    m.def(
        "compile",
        [](const std::string& name, const std::string& source, const std::string& arch,
           bool fast_math, bool line_info, std::vector<std::string> options) {
            ensure_library_dirs();
            auto opts = make_options(arch, fast_math, line_info, std::move(options));
            py::gil_scoped_release release;
            return gk::compile(name, source, opts);
        },
        py::arg("name"), py::arg("source"), py::arg("arch"), py::kw_only(),
        py::arg("fast_math") = false, py::arg("line_info") = false,
        py::arg("options") = std::vector<std::string>{},
        "Compile CUDA C source to CUBIN for arch ('sm_80', 'sm_90'); raises CompileError.");

    m.def(
        "compile_embedded",
        [](const std::string& name, const std::string& arch, bool fast_math, bool line_info,
           std::vector<std::string> options) {
            ensure_library_dirs();
            auto opts = make_options(arch, fast_math, line_info, std::move(options));
            py::gil_scoped_release release;
            return gk::compile_embedded(name, opts);
        },
        py::arg("name"), py::arg("arch"), py::kw_only(), py::arg("fast_math") = false,
        py::arg("line_info") = false, py::arg("options") = std::vector<std::string>{});

    m.def("embedded_kernels", &gk::embedded_kernels,
          "{name: source} of the kernel files embedded at build time.");
    m.def("embedded_headers", &gk::embedded_headers,
          "{file name: source} of the headers every compile can #include.");
    m.def(
        "nvrtc_options",
        [](const std::string& arch, bool fast_math, bool line_info, std::vector<std::string> options) {
            return gk::nvrtc_options(make_options(arch, fast_math, line_info, std::move(options)));
        },
        py::arg("arch"), py::kw_only(), py::arg("fast_math") = false, py::arg("line_info") = false,
        py::arg("options") = std::vector<std::string>{}, "The NVRTC options a compile would use.");
    m.def("jit_cache_dir", &gk::jit_cache_dir, "On-disk kernel cache folder ('' when off).");
    m.def("jit_stats", []() { return stats_dict(gk::jit_stats()); });
    m.def("clear_jit_memory_cache", &gk::clear_jit_memory_cache);

    m.def(
        "shipped_kernels",
        []() {
            std::shared_ptr<const gk::ShippedManifest> m;
            {
                py::gil_scoped_release release;
                m = gk::shipped_manifest();
            }
            py::dict out = shipped_summary(*m);
            // which images match the sources embedded in this module (the ones it would load)
            const auto headers = gk::embedded_headers();
            const auto kernels = gk::embedded_kernels();
            py::list images;
            for (const auto& im : m->images) {
                py::dict d;
                d["kernel"] = im.kernel;
                d["arch"] = im.arch;
                d["kind"] = im.kind;
                d["file"] = im.file;
                d["bytes"] = im.bytes;
                d["sha256"] = im.sha256;
                d["source_sha256"] = im.source_sha256;
                d["key"] = im.key;
                d["options"] = im.options;
                auto it = kernels.find(im.kernel);
                gk::CompileOptions o;
                o.arch = im.arch;
                d["current"] = it != kernels.end() &&
                               gk::source_digest(im.kernel, it->second, gk::nvrtc_options(o), headers) ==
                                   im.source_sha256;
                images.append(d);
            }
            out["images"] = images;
            return out;
        },
        "The kernel images shipped in the wheel (pygpukit_dsp/_kernels/manifest.json): summary +\n"
        "one dict per image, 'current' when it was built from the sources this module embeds.");
    m.def("shipped_kernels_dir", &gk::shipped_dir, "Folder searched for shipped kernel images.");
    m.def(
        "kernel_sources",
        [](const std::string& arch) {
            ensure_library_dirs();
            std::vector<gk::KernelSource> sources;
            {
                py::gil_scoped_release release;
                sources = gk::kernel_sources(arch);
            }
            py::list out;
            for (const auto& s : sources) {
                py::dict d;
                d["kernel"] = s.kernel;
                d["source"] = s.source;
                d["image"] = s.image;
                d["note"] = s.note;
                out.append(d);
            }
            return out;
        },
        py::arg("arch"),
        "Where each embedded kernel would come from on a GPU of `arch` ('sm_90') in a fresh\n"
        "process: 'shipped', 'disk', 'nvrtc' or 'unavailable', with the image and a note.");
    m.def(
        "kernel_loads",
        []() {
            py::list out;
            for (const auto& l : gk::kernel_loads()) {
                py::dict d;
                d["kernel"] = l.kernel;
                d["device"] = l.device;
                d["device_arch"] = l.device_arch;
                d["source"] = l.source;
                d["image"] = l.image;
                d["note"] = l.note;
                d["fetch_ms"] = l.fetch_ms;
                d["load_ms"] = l.load_ms;
                out.append(d);
            }
            return out;
        },
        "Every embedded-kernel module loaded in this process, in order: where its image came from\n"
        "('shipped', 'memory', 'disk', 'nvrtc'), fetch_ms (read/check or compile) and load_ms.");
    m.def("clear_kernel_loads", &gk::clear_kernel_loads);

    py::class_<gk::Module, std::shared_ptr<gk::Module>>(m, "Module")
        .def_property_readonly("name", &gk::Module::name)
        .def_property_readonly("device", &gk::Module::device)
        .def("function", &gk::Module::function, py::arg("name"),
             "The extern \"C\" __global__ function of that name.");

    py::class_<gk::Kernel, std::shared_ptr<gk::Kernel>>(m, "Kernel")
        .def_property_readonly("name", &gk::Kernel::name)
        .def_property_readonly("max_threads_per_block", &gk::Kernel::max_threads_per_block)
        .def_property_readonly(
            "parameter_sizes",
            [](const gk::Kernel& k) -> py::object {
                if (!k.parameters_known()) return py::none();
                return py::cast(k.parameter_sizes());
            },
            "Byte size of each parameter, or None when the driver cannot tell (< 12.4).")
        .def("attributes",
             [](const gk::Kernel& k) {
                 py::dict d;
                 d["max_threads_per_block"] = k.attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
                 d["num_regs"] = k.attribute(CU_FUNC_ATTRIBUTE_NUM_REGS);
                 d["shared_size_bytes"] = k.attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES);
                 d["local_size_bytes"] = k.attribute(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES);
                 d["const_size_bytes"] = k.attribute(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES);
                 d["binary_version"] = k.attribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION);
                 return d;
             })
        .def("set_max_dynamic_shared_memory", &gk::Kernel::set_max_dynamic_shared_memory,
             py::arg("nbytes"))
        .def(
            "launch",
            [](const gk::Kernel& k, py::object grid, py::object block, py::sequence args,
               const gk::Stream* stream, unsigned int shared_mem) {
                gk::Dim3 g = to_dim3(grid, "grid");
                gk::Dim3 b = to_dim3(block, "block");
                gk::KernelArgs packed = pack_args(k.name(), args);
                CUstream s = stream ? stream->handle() : nullptr;
                py::gil_scoped_release release;
                k.launch(g, b, packed, shared_mem, s);
            },
            py::arg("grid"), py::arg("block"), py::arg("args"), py::arg("stream") = nullptr,
            py::arg("shared_mem") = 0,
            "Queue the kernel. args: DeviceBuffer (its pointer), NumPy scalars, or bytes.");
}

}  // namespace gk_py
