// StreamEngine, the op registry, the engine's clock and run_paced (admission's rehearsal).
#include <cstring>
#include <pybind11/numpy.h>

#include <complex>
#include <tuple>
#include <vector>
#include <memory>

#include "../engine/clock.h"
#include "../engine/dispatcher.h"
#include "../engine/floor.h"
#include "../engine/paced.h"
#include "../engine/pinned_copy.h"
#include "../engine/stream_engine.h"
#include "../engine/wake.h"
#include "bindings.h"
#include "gk/device.h"
#include "gk/errors.h"
#include "gk/memory.h"
#include "gk/op.h"

namespace gk_py {

namespace {

gk::DType parse_dtype(const std::string& s, const std::string& where) {
    if (s == "float32") return gk::DType::F32;
    if (s == "complex64") return gk::DType::C64;
    throw py::value_error(where + ": dtype must be 'float32' or 'complex64', got '" + s + "'");
}

gk::TensorDesc parse_desc(py::handle obj, const std::string& where) {
    py::tuple t;
    try {
        t = py::reinterpret_borrow<py::object>(obj).cast<py::tuple>();
    } catch (const py::cast_error&) {
        throw py::value_error(where + " must be a tuple (channels, items, bins, dtype)");
    }
    if (t.size() != 4) throw py::value_error(where + " must be a tuple (channels, items, bins, dtype)");
    gk::TensorDesc d;
    d.channels = t[0].cast<int64_t>();
    d.items = t[1].cast<int64_t>();
    d.bins = t[2].cast<int64_t>();
    d.dtype = parse_dtype(t[3].cast<std::string>(), where);
    return d;
}

gk::ParamArray parse_array(py::handle value, const std::string& where) {
    py::module_ np = py::module_::import("numpy");
    py::array a = np.attr("asarray")(value);
    const char kind = a.dtype().kind();
    gk::ParamArray out;
    if (kind == 'c') {
        a = np.attr("ascontiguousarray")(a, "complex128");
        out.is_complex = true;
    } else if (kind == 'f' || kind == 'i' || kind == 'u' || kind == 'b') {
        a = np.attr("ascontiguousarray")(a, "float64");
    } else {
        throw py::value_error(where + ": arrays must hold numbers, got dtype " +
                              std::string(py::str(a.dtype())));
    }
    for (py::ssize_t i = 0; i < a.ndim(); ++i) out.shape.push_back(static_cast<int64_t>(a.shape(i)));
    const py::ssize_t n = a.size();
    out.values.resize(static_cast<size_t>(n));
    if (out.is_complex) {
        const auto* p = static_cast<const std::complex<double>*>(a.data());
        for (py::ssize_t i = 0; i < n; ++i) out.values[static_cast<size_t>(i)] = p[i];
    } else {
        const auto* p = static_cast<const double*>(a.data());
        for (py::ssize_t i = 0; i < n; ++i) out.values[static_cast<size_t>(i)] = {p[i], 0.0};
    }
    return out;
}

gk::ParamValue parse_value(py::handle v, const std::string& where) {
    py::module_ np = py::module_::import("numpy");
    if (py::isinstance<py::bool_>(v) || py::isinstance(v, np.attr("bool_")))
        return static_cast<bool>(PyObject_IsTrue(v.ptr()));
    if (PyLong_Check(v.ptr())) return static_cast<int64_t>(v.cast<long long>());
    if (PyFloat_Check(v.ptr())) return v.cast<double>();
    if (py::isinstance<py::str>(v)) return v.cast<std::string>();
    if (py::isinstance(v, np.attr("integer"))) {
        py::object index = py::reinterpret_steal<py::object>(PyNumber_Index(v.ptr()));
        if (!index) throw py::error_already_set();
        return static_cast<int64_t>(index.cast<long long>());
    }
    if (py::isinstance(v, np.attr("floating"))) return PyFloat_AsDouble(v.ptr());
    if (py::isinstance<py::array>(v) || py::isinstance<py::list>(v) || py::isinstance<py::tuple>(v) ||
        py::isinstance(v, np.attr("complexfloating")) || PyComplex_Check(v.ptr()))
        return parse_array(v, where);
    throw py::value_error(where + ": unsupported parameter type " +
                          std::string(py::str(py::type::handle_of(v).attr("__name__"))) +
                          " (use bool, int, float, str or a NumPy array)");
}

// A flowgraph's memory plan from its Python lowering (cuda_graph_plan.GraphPlan.native()).
gk::BufferRef parse_ref(py::handle obj) {
    py::tuple t = py::reinterpret_borrow<py::object>(obj).cast<py::tuple>();
    if (t.size() != 2) throw py::value_error("graph plan: a buffer slice is (buffer, offset)");
    return gk::BufferRef{t[0].cast<int>(), t[1].cast<uint64_t>()};
}

gk::DeviceCopy parse_copy(py::handle obj) {
    py::tuple t = py::reinterpret_borrow<py::object>(obj).cast<py::tuple>();
    if (t.size() != 3) throw py::value_error("graph plan: a copy is (source slice, destination slice, bytes)");
    return gk::DeviceCopy{parse_ref(t[0]), parse_ref(t[1]), t[2].cast<uint64_t>()};
}

gk::GraphPlan parse_plan(py::handle obj) {
    gk::GraphPlan p;
    if (obj.is_none()) return p;
    py::dict d = py::reinterpret_borrow<py::object>(obj).cast<py::dict>();
    for (const char* key : {"items", "buffers", "nodes", "sources", "sinks", "final_copies", "lanes", "in_bytes",
                            "out_bytes"})
        if (!d.contains(key)) throw py::value_error(std::string("graph plan has no '") + key + "'");
    p.enabled = true;
    p.items = d["items"].cast<int64_t>();
    p.buffers = d["buffers"].cast<std::vector<uint64_t>>();
    for (auto n : d["nodes"].cast<py::list>()) {
        py::dict nd = n.cast<py::dict>();
        gk::GraphNode node;
        node.in = parse_ref(nd["in"]);
        node.out = parse_ref(nd["out"]);
        for (auto c : nd["copies"].cast<py::list>()) node.copies.push_back(parse_copy(c));
        node.valid_from = nd["valid_from"].cast<std::vector<int>>();
        node.lane = nd["lane"].cast<int>();
        node.waits = nd["waits"].cast<std::vector<int>>();
        node.signals = nd["signals"].cast<bool>();
        p.nodes.push_back(std::move(node));
    }
    for (auto t : d["sources"].cast<py::list>()) {
        py::tuple tt = t.cast<py::tuple>();
        p.sources.push_back(gk::Transfer{tt[0].cast<uint64_t>(), tt[1].cast<uint64_t>(), -1});
    }
    for (auto t : d["sinks"].cast<py::list>()) {
        py::tuple tt = t.cast<py::tuple>();
        p.sinks.push_back(gk::Transfer{tt[0].cast<uint64_t>(), tt[1].cast<uint64_t>(), tt[2].cast<int>()});
    }
    for (auto c : d["final_copies"].cast<py::list>()) p.final_copies.push_back(parse_copy(c));
    p.lanes = d["lanes"].cast<int>();
    p.in_bytes = d["in_bytes"].cast<uint64_t>();
    p.out_bytes = d["out_bytes"].cast<uint64_t>();
    return p;
}

gk::OpSpec parse_op(py::handle obj, size_t index) {
    const std::string where = "op " + std::to_string(index);
    if (!py::isinstance<py::dict>(obj))
        throw py::value_error(where + " must be a dict {kind, name, in, out, params}");
    py::dict d = py::reinterpret_borrow<py::dict>(obj);
    for (const char* key : {"kind", "in", "out"})
        if (!d.contains(key)) throw py::value_error(where + " has no '" + key + "'");
    gk::OpSpec spec;
    spec.kind = d["kind"].cast<std::string>();
    spec.name = d.contains("name") ? d["name"].cast<std::string>() : spec.kind;
    const std::string label = "op '" + spec.kind + "' (stage '" + spec.name + "')";
    spec.in = parse_desc(d["in"], label + " input layout");
    spec.out = parse_desc(d["out"], label + " output layout");
    if (d.contains("params") && !d["params"].is_none()) {
        py::dict params = d["params"].cast<py::dict>();
        for (auto item : params) {
            const std::string key = py::str(item.first);
            spec.params.values[key] = parse_value(item.second, label + " parameter '" + key + "'");
        }
    }
    return spec;
}

py::tuple desc_tuple(const gk::TensorDesc& d) {
    return py::make_tuple(d.channels, d.items, d.bins, gk::dtype_name(d.dtype));
}

// (channels, items[, bins]) of a layout.
std::vector<py::ssize_t> output_shape(const gk::TensorDesc& d, int64_t items) {
    std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(d.channels), static_cast<py::ssize_t>(items)};
    if (d.frames()) shape.push_back(static_cast<py::ssize_t>(d.bins));
    return shape;
}

// A NumPy array viewing a slot's pinned memory; the capsule keeps the memory alive.
py::array slot_view(std::shared_ptr<gk::PinnedBuffer> buffer, const gk::TensorDesc& d) {
    const std::vector<py::ssize_t> shape = output_shape(d, d.items);
    void* data = buffer->data();
    auto* holder = new std::shared_ptr<gk::PinnedBuffer>(std::move(buffer));
    py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<gk::PinnedBuffer>*>(p); });
    return py::array(py::dtype(gk::dtype_name(d.dtype)), shape, data, base);
}

}  // namespace

void check_block(const gk::StreamEngine& e, const py::array& block, const char* method) {
    const gk::TensorDesc& in = e.input_desc();
    const int ndim = in.frames() ? 3 : 2;
    if (!py::dtype(gk::dtype_name(in.dtype)).is(block.dtype()) || !(block.flags() & py::array::c_style) ||
        block.ndim() != ndim || block.shape(0) != in.channels || (ndim == 3 && block.shape(2) != in.bins))
        throw std::invalid_argument(std::string(method) + "() takes a C-contiguous " +
                                    std::string(gk::dtype_name(in.dtype)) + " block of shape (" +
                                    std::to_string(in.channels) + ", n" +
                                    (ndim == 3 ? ", " + std::to_string(in.bins) : std::string()) + ")");
}

namespace {
// A new array with the slot's n_out valid output items (process_split: a plain allocation).
py::array copy_output(const gk::StreamEngine& e, int slot, int64_t n_out) {
    py::array result(py::dtype(gk::dtype_name(e.output_desc().dtype)), output_shape(e.output_desc(), n_out));
    e.copy_output(slot, n_out, result.mutable_data(), n_out);
    return result;
}

// The caller's `out` for process(..., out=): a writable C-contiguous array of the full output block.
void check_out(const gk::StreamEngine& e, const py::array& out) {
    const gk::TensorDesc& d = e.output_desc();
    const std::vector<py::ssize_t> want = output_shape(d, d.items);
    bool ok = py::dtype(gk::dtype_name(d.dtype)).is(out.dtype()) && (out.flags() & py::array::c_style) &&
              out.writeable() && out.ndim() == static_cast<py::ssize_t>(want.size());
    for (size_t k = 0; ok && k < want.size(); ++k) ok = out.shape(static_cast<py::ssize_t>(k)) == want[k];
    if (!ok) {
        std::string shape;
        for (size_t k = 0; k < want.size(); ++k) shape += (k ? ", " : "") + std::to_string(want[k]);
        throw std::invalid_argument("process(out=...) takes a writable C-contiguous " +
                                    std::string(gk::dtype_name(d.dtype)) + " array of the full output block's " +
                                    "shape (" + shape + ")");
    }
}
}  // namespace

py::array process_block(const gk::StreamEngine& e, const py::array& block, std::optional<py::array> out,
                        const std::function<int64_t(const void*, int64_t, void*, int64_t)>& run) {
    check_block(e, block, "process");
    if (out) check_out(e, *out);
    const int64_t n = block.shape(1);
    const void* src = block.data();
    const gk::TensorDesc& d = e.output_desc();
    // A new array of the full block, made while the GIL is held; the engine copies the valid
    // output into it without the GIL (compact rows: a short block's output is its first
    // channels * n_out items).
    py::array result = out ? *out : py::array(py::dtype(gk::dtype_name(d.dtype)), output_shape(d, d.items));
    void* dst = result.mutable_data();
    int64_t n_out = 0;
    {
        py::gil_scoped_release release;
        n_out = run(src, n, dst, out ? d.items : 0);
    }
    if (n_out == d.items) return result;
    if (out) {
        const py::slice all{py::none(), py::none(), py::none()}, valid{0, static_cast<py::ssize_t>(n_out), 1};
        return py::array(out->attr("__getitem__")(py::make_tuple(all, valid)));
    }
    return py::array(result.dtype(), output_shape(d, n_out), dst, result);
}

py::array_t<int64_t> off_cpu_array(const std::vector<gk::OffCpuGap>& gaps) {
    py::array_t<int64_t> a({static_cast<py::ssize_t>(gaps.size()), static_cast<py::ssize_t>(6)});
    auto r = a.mutable_unchecked<2>();
    for (size_t i = 0; i < gaps.size(); ++i) {
        const gk::OffCpuGap& g = gaps[i];
        const int64_t row[6] = {static_cast<int64_t>(g.at_ns), static_cast<int64_t>(g.gap_ns),
                                static_cast<int64_t>(g.window_ns), static_cast<int64_t>(g.ran_ns),
                                static_cast<int64_t>(g.queued_ns), static_cast<int64_t>(g.switches)};
        for (int c = 0; c < 6; ++c) r(static_cast<py::ssize_t>(i), c) = row[c];
    }
    return a;
}

void bind_engine(py::module_& m) {
    using EnginePtr = std::shared_ptr<gk::StreamEngine>;

    m.def("registered_ops", &gk::registered_ops, "Op kinds this build implements on CUDA (sorted).");
    m.def("monotonic_ns", &gk::monotonic_ns, "CLOCK_MONOTONIC ns (the clock of time.perf_counter_ns).");
    m.def(
        "wait_until",
        [](uint64_t t_ns, int spin_us) {
            if (spin_us < 0) throw py::value_error("spin_us must be >= 0");
            py::gil_scoped_release release;
            gk::wait_until_ns(t_ns, spin_us);
        },
        py::arg("t_ns"), py::arg("spin_us") = 0,
        "Sleep (without the GIL) until spin_us before t_ns (CLOCK_MONOTONIC ns), less the thread's wake guard "
        "(wake_guard_us), then spin up to it; the thread's timer slack is set to 1 ns the first time.");
    m.def("wake_guard_us", [] { return static_cast<double>(gk::wake_guard_ns()) / 1e3; },
          "The calling thread's wake guard (us): how much earlier its sleeps before a release end, learned "
          "from how late its wake-ups came (native/engine/wake.h).");
    m.def("set_wake_guard_us", [](double us) {
              if (!(us >= 0)) throw py::value_error("the wake guard must be >= 0 us");
              gk::set_wake_guard_ns(static_cast<uint64_t>(us * 1e3));
          },
          py::arg("us"), "Tests: set the calling thread's wake guard (0 forgets what it learned).");
    m.def("wake_guard_next", &gk::wake_guard_next, py::arg("guard_ns"), py::arg("late_ns"),
          "Tests: the guard after a sleep that woke late_ns late.");
    m.def("copy_threads", &gk::copy_threads,
          "Threads a large copy into a slot's pinned input uses, the caller included (native/engine/pinned_copy.h).");
    m.def("set_copy_threads", [](int n) {
              if (n < 0) throw py::value_error("copy threads must be >= 1 (or 0: the default)");
              gk::set_copy_threads(n);
          },
          py::arg("n"), "Threads a large copy into pinned memory uses (1: the caller alone; 0: the default, "
          "GK_COPY_THREADS or a quarter of the cores, 1 to 4).");
    m.def("copy_stats", [] {
              const gk::CopyStats s = gk::copy_stats();
              py::dict d;
              d["split_copies"] = s.split_copies;
              d["chunks"] = s.chunks;
              d["helper_chunks"] = s.helper_chunks;
              d["helper_spin_us"] = s.helper_spin_us;
              return d;
          },
          "Copies into pinned memory split over threads since the process started: split_copies, chunks, "
          "helper_chunks (the chunks a helper thread took), helper_spin_us (the helpers' spin after the last "
          "one: 200 when it came within 200 us of the one before, else 0).");
    m.def("copy_bytes", [](py::array dst, py::array src) {
              if (!(dst.flags() & py::array::c_style) || !(src.flags() & py::array::c_style))
                  throw py::value_error("copy_bytes() takes C-contiguous arrays");
              if (!dst.writeable()) throw py::value_error("copy_bytes(): dst is read-only");
              if (dst.nbytes() != src.nbytes())
                  throw py::value_error("copy_bytes(): dst holds " + std::to_string(dst.nbytes()) + " bytes, src " +
                                        std::to_string(src.nbytes()));
              auto* d = static_cast<unsigned char*>(dst.mutable_data());
              const auto* s = static_cast<const unsigned char*>(src.data());
              const size_t n = static_cast<size_t>(src.nbytes());
              py::gil_scoped_release release;
              gk::copy_to_pinned(d, s, n);
          },
          py::arg("dst"), py::arg("src"),
          "dst <- src as a slot's fill copies (non-temporal stores, large copies split over the copy threads).");
    m.def(
        "run_paced",
        [](py::list engines, std::vector<uint64_t> periods_ns, std::vector<uint64_t> phases_ns, py::list inputs,
           double warmup_s, double seconds, int threads, int spin_us, double watch_gap_us) {
            const size_t n = engines.size();
            if (periods_ns.size() != n || phases_ns.size() != n || inputs.size() != n)
                throw py::value_error("run_paced: engines, periods_ns, phases_ns and inputs need one entry per stream");
            std::vector<gk::PacedStreamSpec> specs(n);
            std::vector<std::shared_ptr<gk::StreamEngine>> keep;
            std::vector<py::array> arrays;  // alive for the run
            for (size_t i = 0; i < n; ++i) {
                // a StreamEngine, or a RoundTripFloor (the bare round trip: the capacity floor)
                gk::RoundTripFloor* floor = py::isinstance<gk::RoundTripFloor>(engines[i])
                                                ? engines[i].cast<gk::RoundTripFloor*>() : nullptr;
                std::shared_ptr<gk::StreamEngine> e;
                if (!floor) {
                    e = engines[i].cast<std::shared_ptr<gk::StreamEngine>>();
                    keep.push_back(e);
                }
                specs[i].engine = e.get();
                specs[i].floor = floor;
                specs[i].period_ns = periods_ns[i];
                specs[i].phase_ns = phases_ns[i];
                for (auto item : inputs[i].cast<py::list>()) {
                    py::array a = py::reinterpret_borrow<py::array>(item);
                    if (floor) {
                        if (!(a.flags() & py::array::c_style) || static_cast<size_t>(a.nbytes()) != floor->in_bytes())
                            throw py::value_error("run_paced: a floor's inputs must be C-contiguous arrays of its "
                                                  "in_bytes (" + std::to_string(floor->in_bytes()) + ") bytes");
                    } else {
                        check_block(*e, a, "run_paced");
                        if (a.shape(1) != e->input_desc().items)
                            throw py::value_error("run_paced: every input must be a full block");
                    }
                    arrays.push_back(a);
                    specs[i].inputs.push_back(a.data());
                }
            }
            if (watch_gap_us < 0) throw py::value_error("run_paced: watch_gap_us must be >= 0");
            gk::PacedRun run;
            {
                py::gil_scoped_release release;
                run = gk::run_paced(specs, warmup_s, seconds, threads, spin_us,
                                    static_cast<uint64_t>(watch_gap_us * 1000.0));
            }
            py::list lat, fills, submits, released, late;
            auto array_of = [](const std::vector<int64_t>& v) {
                py::array_t<int64_t> a(static_cast<py::ssize_t>(v.size()));
                if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(int64_t));
                return a;
            };
            for (const auto& r : run.streams) {
                lat.append(array_of(r.latency_ns));
                fills.append(array_of(r.fill_ns));
                submits.append(array_of(r.submit_ns));
                released.append(r.released);
                late.append(r.late);
            }
            py::dict d;
            d["latency_ns"] = lat;
            d["fill_ns"] = fills;
            d["submit_ns"] = submits;
            d["released"] = released;
            d["late"] = late;
            py::list gaps;
            for (const auto& g : run.thread_gaps) gaps.append(off_cpu_array(g));
            d["thread_gaps"] = gaps;
            d["start_ns"] = run.start_ns;
            d["timed_from_ns"] = run.timed_from_ns;
            d["end_ns"] = run.end_ns;
            return d;
        },
        py::arg("engines"), py::arg("periods_ns"), py::arg("phases_ns"), py::arg("inputs"), py::arg("warmup_s"),
        py::arg("seconds"), py::arg("threads") = 2, py::arg("spin_us") = 100, py::arg("watch_gap_us") = 0.0,
        "Release each engine's blocks on its own clock (block k at start + phase + k * period) from driver "
        "threads, natively, for warmup_s + seconds (an engine: a StreamEngine, or an instrument.RoundTripFloor: the bare "
        "round trip, one block in flight); returns each stream's latencies (release -> output copied "
        "out, ns) of the blocks released after the warm-up, their fill and submit times (ns), and its released / "
        "late counts; watch_gap_us > 0: thread_gaps, each driver thread's gaps of that length or more "
        "(off_cpu_array's columns).");

    py::class_<gk::StreamEngine, EnginePtr>(
        m, "StreamEngine",
        "One pipeline's ops on one GPU, fed through pinned slots by a native worker thread.")
        .def(py::init([](std::shared_ptr<gk::Device> device, py::list ops, int slots, int priority,
                         bool use_graph, int spin_us, bool single_stream, bool inline_submit,
                         bool mapped_io, bool direct_output, bool zero_nonfinite, py::object graph) {
                 ensure_library_dirs();
                 std::vector<gk::OpSpec> specs;
                 size_t i = 0;
                 for (auto op : ops) specs.push_back(parse_op(op, i++));
                 gk::GraphPlan plan = parse_plan(graph);
                 gk::EngineOptions options;
                 options.slots = slots;
                 options.priority = priority;
                 options.use_graph = use_graph;
                 options.spin_us = spin_us;
                 options.single_stream = single_stream;
                 options.inline_submit = inline_submit;
                 options.mapped_io = mapped_io;
                 options.direct_output = direct_output;
                 options.zero_nonfinite = zero_nonfinite;
                 py::gil_scoped_release release;
                 return std::make_shared<gk::StreamEngine>(std::move(device), std::move(specs), options,
                                                           std::move(plan));
             }),
             py::arg("device"), py::arg("ops"), py::arg("slots") = 2, py::arg("priority") = 0,
             py::arg("use_graph") = true, py::arg("spin_us") = 200, py::arg("single_stream") = false,
             py::arg("inline_submit") = false, py::arg("mapped_io") = false, py::arg("direct_output") = true,
             py::arg("zero_nonfinite") = false, py::arg("graph") = py::none(),
             "graph: a flowgraph's memory plan (which slice each op reads and writes; docs/cuda.md); "
             "ops: [{'kind', 'name', 'in': (channels, items, bins, dtype), 'out': (...), 'params': {...}}]; "
             "inline_submit: process() runs an idle engine's block on the calling thread; "
             "mapped_io (single_stream only): kernels move blocks through device-mapped pinned slots; "
             "direct_output (mapped_io with use_graph): the last op writes the mapped output itself; "
             "zero_nonfinite: NaN/Inf input samples are replaced by 0 on the GPU before the first op "
             "(they are counted either way: nonfinite_flags, take_nonfinite)")
        .def_property_readonly("slots", &gk::StreamEngine::slots)
        .def_property_readonly("input_layout",
                               [](const gk::StreamEngine& e) { return desc_tuple(e.input_desc()); },
                               "(channels, items, bins, dtype) of a full input block")
        .def_property_readonly("output_layout",
                               [](const gk::StreamEngine& e) { return desc_tuple(e.output_desc()); },
                               "(channels, items, bins, dtype) of a full output block")
        .def_property_readonly("use_graph", [](const gk::StreamEngine& e) { return e.options().use_graph; })
        .def_property_readonly("priority", [](const gk::StreamEngine& e) { return e.options().priority; })
        .def_property_readonly("spin_us", [](const gk::StreamEngine& e) { return e.options().spin_us; })
        .def_property_readonly("mapped_io", [](const gk::StreamEngine& e) { return e.options().mapped_io; })
        .def_property_readonly("direct_output", &gk::StreamEngine::direct_output,
                               "the block graphs' last op writes the mapped output itself (no push kernel)")
        .def_property_readonly("single_stream",
                               [](const gk::StreamEngine& e) { return e.options().single_stream; })
        .def_property_readonly("inline_submit",
                               [](const gk::StreamEngine& e) { return e.options().inline_submit; })
        .def_property_readonly("inline_blocks", &gk::StreamEngine::inline_blocks,
                               "Blocks process() ran on the calling thread (inline_submit).")
        .def_property_readonly("closed", &gk::StreamEngine::closed)
        .def_property_readonly("stages",
                               [](const gk::StreamEngine& e) {
                                   py::list out;
                                   for (const auto& s : e.op_specs()) out.append(py::make_tuple(s.kind, s.name));
                                   return out;
                               },
                               "[(op kind, stage name)] in order")
        .def(
            "input_slot",
            [](const gk::StreamEngine& e, int slot) { return slot_view(e.input_buffer(slot), e.input_desc()); },
            py::arg("slot"), "Writable NumPy view of the slot's pinned input (a full block).")
        .def(
            "output_slot",
            [](const gk::StreamEngine& e, int slot) { return slot_view(e.output_buffer(slot), e.output_desc()); },
            py::arg("slot"), "NumPy view of the slot's pinned output (a full block).")
        .def_property_readonly(
            "nonfinite_flags",
            [](const gk::StreamEngine& e) {
                std::shared_ptr<gk::PinnedBuffer> flags = e.nonfinite_flags();
                if (!flags) throw std::invalid_argument("the engine is closed");
                void* data = flags->data();
                auto* holder = new std::shared_ptr<gk::PinnedBuffer>(std::move(flags));
                py::capsule base(holder, [](void* p) { delete static_cast<std::shared_ptr<gk::PinnedBuffer>*>(p); });
                const std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(e.slots())}, strides{64};
                return py::array(py::dtype("uint32"), shape, strides, data, base);
            },
            "uint32 view, one word per slot: non-zero once a block in that slot held a NaN or Inf "
            "input sample (read it after the slot's block is done, then take_nonfinite(slot)).")
        .def("take_nonfinite", &gk::StreamEngine::take_nonfinite, py::arg("slot"),
             py::call_guard<py::gil_scoped_release>(),
             "(count, first) of the NaN/Inf input samples of the slot's last block (first: the index of "
             "the first one in float32 words of the block's C-order input; complex64 samples are two "
             "words); (0, 0) when none. Clears the slot's record.")
        .def("submit", &gk::StreamEngine::submit, py::arg("slot"), py::arg("n_valid"),
             py::arg("final") = false,
             "Hand a filled slot to the worker (non-blocking); n_valid items, the tail zeroed.")
        .def(
            "process",
            [](gk::StreamEngine& e, int slot, const py::array& block, bool final, std::optional<py::array> out) {
                return process_block(e, block, out, [&](const void* src, int64_t n, void* dst, int64_t row_items) {
                    return e.process(slot, src, n, final, dst, row_items);
                });
            },
            py::arg("slot"), py::arg("block"), py::arg("final") = false, py::arg("out") = py::none(),
            "Copy a block into the (free) slot, run it, and return its valid output: a new array, or "
            "`out` (the full output block's shape; a view of its first n_out items for a short block).")
        .def(
            "try_wait",
            [](gk::StreamEngine& e, int slot) -> py::object {
                int64_t n = 0;
                bool done = false;
                {
                    py::gil_scoped_release release;
                    done = e.try_wait(slot, &n);
                }
                if (!done) return py::none();
                return py::int_(n);
            },
            py::arg("slot"), "Non-blocking wait(): the valid output items once the slot's block is done, else None.")
        .def(
            "fill",
            [](gk::StreamEngine& e, int slot, const py::array& block) {
                check_block(e, block, "fill");
                const void* src = block.data();
                const int64_t n = block.shape(1);
                py::gil_scoped_release release;
                e.fill(slot, src, n);
            },
            py::arg("slot"), py::arg("block"),
            "Copy a block into the (free) slot's pinned input and zero the tail.")
        .def(
            "fill_bytes",
            [](gk::StreamEngine& e, int slot, int64_t offset, const py::array& block) {
                if (!(block.flags() & py::array::c_style))
                    throw std::invalid_argument("fill_bytes() takes a C-contiguous array");
                if (offset < 0) throw std::invalid_argument("fill_bytes(): the offset is negative");
                const void* src = block.data();
                const size_t bytes = static_cast<size_t>(block.nbytes());
                py::gil_scoped_release release;
                e.fill_bytes(slot, static_cast<size_t>(offset), src, bytes);
            },
            py::arg("slot"), py::arg("offset"), py::arg("block"),
            "Copy a C-contiguous array's bytes into the (free) slot's pinned input at a byte offset\n"
            "(a graph's source into its slice), the rest of the input as it was.")
        .def("wait", &gk::StreamEngine::wait, py::arg("slot"), py::call_guard<py::gil_scoped_release>(),
             "Block until the slot's block is done; returns its valid output items.")
        .def("reset", &gk::StreamEngine::reset, py::call_guard<py::gil_scoped_release>())
        .def("close", &gk::StreamEngine::close, py::call_guard<py::gil_scoped_release>())
        .def("set_gpu_timing", &gk::StreamEngine::set_gpu_timing, py::arg("on"),
             py::call_guard<py::gil_scoped_release>(),
             "Time each block process() runs itself on the GPU (events around its work on the compute\n"
             "stream) and its launch's host time. Waits for in-flight work.")
        .def_property_readonly("last_gpu_ns", &gk::StreamEngine::last_gpu_ns,
                               "GPU time (ns) of the last block completed with gpu timing on; 0: none or not timed.")
        .def_property_readonly("last_launch_ns", &gk::StreamEngine::last_launch_ns,
                               "Host time (ns) queueing the last block took with gpu timing on; 0: none.")
        .def("set_trace", &gk::StreamEngine::set_trace, py::arg("capacity"),
             "Record the timing of the last `capacity` process() calls (0: off); clears the ring.")
        .def(
            "trace",
            [](const gk::StreamEngine& e) {
                static_assert(sizeof(gk::BlockTrace) == 9 * sizeof(uint64_t), "BlockTrace is 9 words");
                const std::vector<gk::BlockTrace> v = e.trace();
                py::array_t<uint64_t> a({static_cast<py::ssize_t>(v.size()), static_cast<py::ssize_t>(9)});
                if (!v.empty()) std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(gk::BlockTrace));
                return a;
            },
            "The trace ring, oldest first: (n, 9) uint64, columns call, filled, launch_begin, launched, "
            "done_seen, woke (steady clock ns), gpu_ns, scheduled, copied (ns).")
        .def_property_readonly("build_timings", &gk::StreamEngine::build_timings,
                               "[(step, ms)] of the constructor: io kernels, streams, each op, device buffers,\n"
                               "slots (pinned allocation, zero fill), buffer zeroing, warm-up, capture.")
        .def("counters",
             [](const gk::StreamEngine& e) {
                 gk::EngineCounters c = e.counters();
                 py::dict d;
                 d["blocks"] = c.blocks;
                 d["h2d_copies"] = c.h2d_copies;
                 d["d2h_copies"] = c.d2h_copies;
                 d["completion_waits"] = c.completion_waits;
                 d["graph_launches"] = c.graph_launches;
                 d["eager_blocks"] = c.eager_blocks;
                 d["chunks"] = c.chunks;
                 d["device_blocks"] = c.device_blocks;
                 d["d2d_in"] = c.d2d_in;
                 d["d2d_out"] = c.d2d_out;
                 return d;
             })
        .def_property_readonly("is_graph", &gk::StreamEngine::is_graph,
                               "built from a flowgraph's plan (several sources or sinks, branches)")
        .def_property_readonly("block_items", &gk::StreamEngine::block_items, "items of a full source block")
        .def("sink_items", &gk::StreamEngine::sink_items, py::arg("slot"),
             "A graph engine's valid output items of each sink of the slot's last completed block.")
        .def(
            "process_filled",
            [](gk::StreamEngine& e, int slot, int64_t n_valid, bool final) {
                py::gil_scoped_release release;
                return e.process_filled(slot, n_valid, final);
            },
            py::arg("slot"), py::arg("n_valid"), py::arg("final") = false,
            "A graph engine's process(): the slot's pinned input is filled already (source by source); "
            "runs it (on the calling thread when the engine is idle and inline_submit is on) and returns "
            "the first sink's valid items (sink_items(slot) has every sink's).")
        .def(
            "process_graph",
            [](gk::StreamEngine& e, int slot, const std::vector<py::array>& ins, std::vector<py::array> outs) {
                std::vector<gk::HostBytes> in(ins.size()), out(outs.size());
                for (size_t k = 0; k < ins.size(); ++k) {
                    if (!(ins[k].flags() & py::array::c_style))
                        throw std::invalid_argument("process_graph() takes C-contiguous source blocks");
                    in[k] = gk::HostBytes{const_cast<void*>(ins[k].data()), static_cast<size_t>(ins[k].nbytes())};
                }
                for (size_t k = 0; k < outs.size(); ++k) {
                    if (!(outs[k].flags() & py::array::c_style) || !outs[k].writeable())
                        throw std::invalid_argument("process_graph() writes C-contiguous, writeable sink arrays");
                    out[k] = gk::HostBytes{outs[k].mutable_data(), static_cast<size_t>(outs[k].nbytes())};
                }
                py::gil_scoped_release release;
                return e.process_graph(slot, in, out);
            },
            py::arg("slot"), py::arg("ins"), py::arg("outs"),
            "A graph engine's full, non-final block in one call: each source's array (the plan's order, its\n"
            "full block) into its slice of the free slot, run, and each sink's full block into `outs`\n"
            "(arrays of its slice's size). Returns the first sink's valid items.")
        .def(
            "process_split_filled",
            [](gk::StreamEngine& e, int slot, int64_t n_valid, bool final, std::vector<int64_t> cuts) {
                py::gil_scoped_release release;
                return e.process_split(slot, nullptr, n_valid, final, cuts);
            },
            py::arg("slot"), py::arg("n_valid"), py::arg("final"), py::arg("cuts"),
            "A graph engine's process_split: the slot's pinned input is filled already (source by source); "
            "returns the first sink's valid items (sink_items(slot) has every sink's).")
        .def("device_output_items", &gk::StreamEngine::device_output_items, py::arg("n_valid"),
             py::arg("final") = false, "Valid output items of a block of n_valid items (final: the last).")
        .def(
            "process_device",
            [](gk::StreamEngine& e, int slot, uint64_t in, int64_t in_row_bytes, int64_t n_valid, bool final,
               uint64_t out, int64_t out_row_bytes, uint64_t stream) {
                py::gil_scoped_release release;
                return e.process_device(slot, static_cast<CUdeviceptr>(in), in_row_bytes, n_valid, final,
                                        static_cast<CUdeviceptr>(out), out_row_bytes, stream);
            },
            py::arg("slot"), py::arg("in_ptr"), py::arg("in_row_bytes"), py::arg("n_valid"), py::arg("final"),
            py::arg("out_ptr"), py::arg("out_row_bytes"), py::arg("stream") = 0,
            "One block from device memory to device memory (rows at in_ptr + r * in_row_bytes; the output's\n"
            "device_output_items per row at out_ptr + r * out_row_bytes), ordered after the work queued on\n"
            "`stream` (a CUstream handle; 0/1 legacy default, 2 per-thread default) and before what is queued\n"
            "there next; returns once queued (no host copy, no host wait) with the valid output items.")
        .def(
            "process_device_graph",
            [](gk::StreamEngine& e, int slot, int64_t n_valid, bool final,
               const std::vector<std::tuple<uint64_t, int64_t, int64_t, int64_t>>& ins,
               const std::vector<std::tuple<uint64_t, int64_t, int64_t, int64_t>>& outs, uint64_t stream) {
                auto rows = [](const std::vector<std::tuple<uint64_t, int64_t, int64_t, int64_t>>& v) {
                    std::vector<gk::DeviceRows> r;
                    for (const auto& [ptr, row_bytes, n_rows, item_bytes] : v)
                        r.push_back(gk::DeviceRows{static_cast<CUdeviceptr>(ptr), row_bytes, n_rows, item_bytes});
                    return r;
                };
                const auto in_rows = rows(ins), out_rows = rows(outs);
                py::gil_scoped_release release;
                return e.process_device_graph(slot, n_valid, final, in_rows, out_rows, stream);
            },
            py::arg("slot"), py::arg("n_valid"), py::arg("final"), py::arg("ins"), py::arg("outs"),
            py::arg("stream") = 0,
            "A graph engine's device block: ins and outs are (ptr, row_bytes, rows, item_bytes) per source and\n"
            "per sink (room for the sink's full block), in the plan's order; ordered as process_device;\n"
            "returns each sink's valid items once queued.")
        .def("synchronize_device", &gk::StreamEngine::synchronize_device, py::call_guard<py::gil_scoped_release>(),
             "Wait until every device block queued so far is done (then take_nonfinite reads their records).")
        .def("read_device_word", [](gk::StreamEngine& e, uint64_t address) {
                 py::gil_scoped_release release;
                 return e.read_device_word(static_cast<CUdeviceptr>(address));
             }, py::arg("address"), "One float32 of device memory (a synchronous read; the error path's value).")
        .def_property_readonly("units_per_block", &gk::StreamEngine::units_per_block,
                               "Units of one full block (the scheduler's units_per_block).")
        .def(
            "process_split",
            [](gk::StreamEngine& e, int slot, const py::array& block, bool final, std::vector<int64_t> cuts) {
                check_block(e, block, "process_split");
                const int64_t n = block.shape(1);
                const void* src = block.data();
                int64_t n_out = 0;
                {
                    py::gil_scoped_release release;
                    n_out = e.process_split(slot, src, n, final, cuts);
                }
                return copy_output(e, slot, n_out);
            },
            py::arg("slot"), py::arg("block"), py::arg("final"), py::arg("cuts"),
            "Process a block as the chunks between `cuts` (unit indices) on the calling thread; a new output array.")
        .def("attach", &gk::StreamEngine::attach, py::arg("dispatcher"), py::arg("sched_stream"),
             py::call_guard<py::gil_scoped_release>(),
             "Hand every block to the dispatcher as a task of scheduler stream `sched_stream`.")
        .def("detach", &gk::StreamEngine::detach, py::call_guard<py::gil_scoped_release>(),
             "Back to the engine's own worker (waits for in-flight blocks).")
        .def_property_readonly("attached", &gk::StreamEngine::attached)
        .def("__enter__", [](EnginePtr e) { return e; })
        .def("__exit__", [](gk::StreamEngine& e, py::args) {
            py::gil_scoped_release release;
            e.close();
        })
        .def("__repr__", [](const gk::StreamEngine& e) {
            std::string s;
            for (const auto& o : e.op_specs()) s += (s.empty() ? "" : ", ") + o.name;
            return "<StreamEngine [" + s + "], " + std::to_string(e.slots()) + " slots" +
                   (e.closed() ? ", closed" : "") + ">";
        });
}

}  // namespace gk_py
