// Device, DeviceBuffer, PinnedBuffer, Stream, Event.
#include <memory>

#include "bindings.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/jit.h"
#include "gk/memory.h"
#include "gk/stream.h"

namespace gk_py {

namespace {

// A C-contiguous view of a Python buffer, released on scope exit.
class HostView {
public:
    HostView(py::handle obj, bool writable, const char* what) {
        int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
        if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
            PyErr_Clear();
            throw py::type_error(std::string(what) + " needs a C-contiguous" +
                                 (writable ? " writable" : "") +
                                 " buffer such as a NumPy array or a PinnedBuffer (got " +
                                 std::string(py::str(py::type::handle_of(obj).attr("__name__"))) +
                                 "; numpy.ascontiguousarray() makes one)");
        }
    }
    ~HostView() { PyBuffer_Release(&view_); }
    HostView(const HostView&) = delete;
    HostView& operator=(const HostView&) = delete;
    void* data() const { return view_.buf; }
    size_t size() const { return static_cast<size_t>(view_.len); }

private:
    Py_buffer view_{};
};

CUstream stream_handle(const gk::Stream* stream) { return stream ? stream->handle() : nullptr; }

py::dict properties_dict(const gk::DeviceProperties& p) {
    py::dict d;
    d["index"] = p.index;
    d["name"] = p.name;
    d["sm"] = py::make_tuple(p.sm_major, p.sm_minor);
    d["arch"] = p.arch();
    d["total_memory"] = p.total_memory;
    d["multiprocessors"] = p.multiprocessors;
    d["l2_cache_bytes"] = p.l2_cache_bytes;
    d["max_shared_per_block"] = p.max_shared_per_block;
    d["max_shared_per_block_optin"] = p.max_shared_per_block_optin;
    d["max_shared_per_multiprocessor"] = p.max_shared_per_multiprocessor;
    d["max_threads_per_block"] = p.max_threads_per_block;
    d["max_threads_per_multiprocessor"] = p.max_threads_per_multiprocessor;
    d["max_registers_per_block"] = p.max_registers_per_block;
    d["warp_size"] = p.warp_size;
    d["clock_khz"] = p.clock_khz;
    d["memory_clock_khz"] = p.memory_clock_khz;
    d["memory_bus_width_bits"] = p.memory_bus_width_bits;
    d["async_engines"] = p.async_engines;
    d["pci_bus"] = py::make_tuple(p.pci_domain_id, p.pci_bus_id, p.pci_device_id);
    d["stream_priorities_supported"] = p.stream_priorities_supported;
    d["concurrent_kernels"] = p.concurrent_kernels;
    d["integrated"] = p.integrated;
    return d;
}

py::dict pool_stats_dict(const gk::DeviceMemoryPool& pool) {
    gk::PoolStats s = pool.stats();
    py::dict d;
    d["in_use_bytes"] = s.in_use_bytes;
    d["cached_bytes"] = s.cached_bytes;
    d["reserved_bytes"] = s.reserved_bytes;
    d["peak_reserved_bytes"] = s.peak_reserved_bytes;
    d["requests"] = s.requests;
    d["reuses"] = s.reuses;
    d["driver_allocations"] = s.driver_allocations;
    d["driver_frees"] = s.driver_frees;
    d["grants"] = s.grants;
    d["granted_bytes"] = s.granted_bytes;
    d["caching"] = pool.caching();
    return d;
}

gk::CompileOptions options_from(bool fast_math, bool line_info, std::vector<std::string> extra) {
    gk::CompileOptions o;
    o.fast_math = fast_math;
    o.line_info = line_info;
    o.extra = std::move(extra);
    return o;
}

}  // namespace

void bind_core(py::module_& m) {
    using DevicePtr = std::shared_ptr<gk::Device>;

    py::class_<gk::Device, DevicePtr>(m, "Device",
                                      "One GPU with its primary context (refused below SM 8.0).")
        .def(py::init([](int index) {
                 ensure_library_dirs();
                 py::gil_scoped_release release;
                 return gk::Device::open(index);
             }),
             py::arg("index") = 0)
        .def_property_readonly("index", &gk::Device::index)
        .def_property_readonly("name", [](const gk::Device& d) { return d.properties().name; })
        .def_property_readonly("arch", &gk::Device::arch)
        .def_property_readonly("sm", [](const gk::Device& d) {
            return py::make_tuple(d.properties().sm_major, d.properties().sm_minor);
        })
        .def_property_readonly("highest_stream_priority", &gk::Device::greatest_stream_priority)
        .def_property_readonly("lowest_stream_priority", &gk::Device::least_stream_priority)
        .def("properties", [](const gk::Device& d) { return properties_dict(d.properties()); })
        .def("memory_info", &gk::Device::memory_info, "(free, total) bytes.")
        .def("synchronize", &gk::Device::synchronize, py::call_guard<py::gil_scoped_release>())
        .def("memory_stats", [](gk::Device& d) { return pool_stats_dict(d.memory_pool()); })
        .def(
            "library_objects",
            [](gk::Device& d) {
                auto s = d.idle_library_objects().stats();
                py::dict out;
                out["made"] = s.made;
                out["reused"] = s.reused;
                out["destroyed"] = s.destroyed;
                out["idle"] = s.idle;
                return out;
            },
            "cuFFT plans and cuBLAS handles: made, reused (taken idle, same shape), destroyed, idle now.")
        .def("clear_library_objects", [](gk::Device& d) { d.idle_library_objects().clear(); },
             "Destroy the idle cuFFT plans and cuBLAS handles kept for reuse.")
        .def(
            "reserve_memory",
            [](gk::Device& d, std::vector<size_t> sizes) {
                py::gil_scoped_release release;
                return d.memory_pool().reserve(sizes);
            },
            py::arg("sizes"),
            "One up-front grant for these buffer sizes (the pool's cache then serves them); bytes granted.")
        .def("cached_blocks", [](gk::Device& d) { return d.memory_pool().cached_blocks(); },
             "[(size-class bytes, count)] of the cached device blocks.")
        .def("trim_memory_cache",
             [](gk::Device& d, size_t keep_bytes) { return d.memory_pool().trim(keep_bytes); },
             py::arg("keep_bytes") = 0, "Free cached device blocks (oldest first); returns bytes freed.")
        .def("set_memory_caching", [](gk::Device& d, bool on) { d.memory_pool().set_caching(on); },
             py::arg("enabled"))
        .def(
            "load_module",
            [](const DevicePtr& d, const std::string& name, bool fast_math, bool line_info,
               std::vector<std::string> options) {
                ensure_library_dirs();
                auto opts = options_from(fast_math, line_info, std::move(options));
                py::gil_scoped_release release;
                return gk::load_embedded_module(d, name, opts);
            },
            py::arg("name"), py::kw_only(), py::arg("fast_math") = false,
            py::arg("line_info") = false, py::arg("options") = std::vector<std::string>{},
            "Compile (or fetch from cache) an embedded kernel file for this GPU and load it.")
        .def(
            "load_cubin",
            [](const DevicePtr& d, py::bytes cubin, const std::string& name) {
                auto image = std::make_shared<const std::string>(cubin);
                py::gil_scoped_release release;
                return gk::load_cubin_module(d, image, name);
            },
            py::arg("cubin"), py::arg("name") = "module")
        .def("__eq__", [](const gk::Device& a, const gk::Device& b) { return &a == &b; }, py::is_operator())
        .def("__hash__", [](const gk::Device& d) { return std::hash<const void*>()(&d); })
        .def("__repr__", [](const gk::Device& d) {
            return "<Device " + std::to_string(d.index()) + ": " + d.properties().name + ", " +
                   d.arch() + ">";
        });

    py::class_<gk::DeviceBuffer, std::shared_ptr<gk::DeviceBuffer>>(
        m, "DeviceBuffer", "Device memory from the GPU's pool (freed back to it when dropped).")
        .def(py::init<DevicePtr, size_t>(), py::arg("device"), py::arg("nbytes"))
        .def_property_readonly("nbytes", &gk::DeviceBuffer::nbytes)
        .def_property_readonly("ptr", &gk::DeviceBuffer::ptr)
        .def_property_readonly("device", &gk::DeviceBuffer::device)
        .def(
            "copy_from_host",
            [](const gk::DeviceBuffer& b, py::object src, size_t offset, const gk::Stream* stream) {
                HostView view(src, false, "copy_from_host");
                py::gil_scoped_release release;
                b.copy_from_host(view.data(), view.size(), offset, stream_handle(stream));
            },
            py::arg("src"), py::kw_only(), py::arg("offset") = 0, py::arg("stream") = nullptr,
            "Copy all of src to this buffer at offset (queued on stream when given).")
        .def(
            "copy_to_host",
            [](const gk::DeviceBuffer& b, py::object dst, size_t offset, const gk::Stream* stream) {
                HostView view(dst, true, "copy_to_host");
                py::gil_scoped_release release;
                b.copy_to_host(view.data(), view.size(), offset, stream_handle(stream));
            },
            py::arg("dst"), py::kw_only(), py::arg("offset") = 0, py::arg("stream") = nullptr,
            "Fill all of dst from this buffer starting at offset.")
        .def(
            "copy_from",
            [](const gk::DeviceBuffer& b, const gk::DeviceBuffer& src, py::object nbytes,
               size_t dst_offset, size_t src_offset, const gk::Stream* stream) {
                size_t n = nbytes.is_none() ? src.nbytes() - std::min(src_offset, src.nbytes())
                                            : nbytes.cast<size_t>();
                py::gil_scoped_release release;
                b.copy_from_device(src, n, dst_offset, src_offset, stream_handle(stream));
            },
            py::arg("src"), py::kw_only(), py::arg("nbytes") = py::none(), py::arg("dst_offset") = 0,
            py::arg("src_offset") = 0, py::arg("stream") = nullptr)
        .def(
            "memset",
            [](const gk::DeviceBuffer& b, unsigned char value, py::object nbytes, size_t offset,
               const gk::Stream* stream) {
                size_t n = nbytes.is_none() ? b.nbytes() - std::min(offset, b.nbytes())
                                            : nbytes.cast<size_t>();
                py::gil_scoped_release release;
                b.memset(value, n, offset, stream_handle(stream));
            },
            py::arg("value") = 0, py::kw_only(), py::arg("nbytes") = py::none(),
            py::arg("offset") = 0, py::arg("stream") = nullptr)
        .def("__len__", &gk::DeviceBuffer::nbytes)
        .def("__repr__", [](const gk::DeviceBuffer& b) {
            return "<DeviceBuffer " + std::to_string(b.nbytes()) + " bytes on GPU " +
                   std::to_string(b.device()->index()) + ">";
        });

    py::class_<gk::PinnedBuffer, std::shared_ptr<gk::PinnedBuffer>>(
        m, "PinnedBuffer", py::buffer_protocol(),
        "Page-locked host memory; numpy.frombuffer(buf, dtype) views it without a copy.")
        .def(py::init<DevicePtr, size_t>(), py::arg("device"), py::arg("nbytes"))
        .def_buffer([](gk::PinnedBuffer& b) {
            return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                                   {static_cast<py::ssize_t>(b.nbytes())}, {py::ssize_t(1)});
        })
        .def_property_readonly("nbytes", &gk::PinnedBuffer::nbytes)
        .def_property_readonly("ptr", [](const gk::PinnedBuffer& b) {
            return reinterpret_cast<uintptr_t>(b.data());
        })
        .def_property_readonly("device", &gk::PinnedBuffer::device)
        .def("__len__", &gk::PinnedBuffer::nbytes)
        .def("__repr__", [](const gk::PinnedBuffer& b) {
            return "<PinnedBuffer " + std::to_string(b.nbytes()) + " bytes>";
        });

    py::class_<gk::Stream, std::shared_ptr<gk::Stream>>(
        m, "Stream", "Non-blocking CUDA stream; lower priority numbers run first.")
        .def(py::init<DevicePtr, int>(), py::arg("device"), py::arg("priority") = 0)
        .def_property_readonly("handle", [](const gk::Stream& s) {
            return reinterpret_cast<uintptr_t>(s.handle());
        })
        .def_property_readonly("priority", &gk::Stream::priority)
        .def_property_readonly("device", &gk::Stream::device)
        .def("synchronize", &gk::Stream::synchronize, py::call_guard<py::gil_scoped_release>())
        .def("query", &gk::Stream::query, "True when all queued work has finished.")
        .def("wait", &gk::Stream::wait, py::arg("event"),
             "Work queued on this stream after the call waits for the event.");

    py::class_<gk::Event, std::shared_ptr<gk::Event>>(m, "Event")
        .def(py::init<DevicePtr, bool, bool>(), py::arg("device"), py::arg("timing") = false,
             py::arg("blocking_sync") = false)
        .def_property_readonly("timing", &gk::Event::timing)
        .def(
            "record",
            [](const gk::Event& e, const gk::Stream* stream) { e.record(stream_handle(stream)); },
            py::arg("stream") = nullptr)
        .def("synchronize", &gk::Event::synchronize, py::call_guard<py::gil_scoped_release>())
        .def("query", &gk::Event::query)
        .def_static("elapsed_ms", &gk::Event::elapsed_ms, py::arg("start"), py::arg("end"),
                    "Milliseconds from start to end (both timing events, both completed).");
}

}  // namespace gk_py
