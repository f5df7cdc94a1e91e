// pygpukit_dsp._native.instrument: the measuring apparatus (benchmarks only), a submodule of the
// one native module (a second module would load its own copy of the driver loader's state).
// EngineInstrument: an engine's benchmark entry points (native/engine/instrument.h);
// RoundTripFloor, StallProbe, OffCpuMeter: instruments of the host and GPU themselves.
#include <memory>
#include <optional>
#include <utility>

#include "../engine/floor.h"
#include "../engine/instrument.h"
#include "../engine/off_cpu.h"
#include "../engine/paced.h"
#include "../engine/stream_engine.h"
#include "bindings.h"
#include "gk/device.h"

namespace gk_py {

namespace {

using InstrumentPtr = std::shared_ptr<gk::EngineInstrument>;

gk::ReleaseWait release_wait(uint64_t release_ns, int spin_us, bool prewarm) {
    if (spin_us < 0) throw py::value_error("spin_us must be >= 0");
    gk::ReleaseWait rw;
    rw.release_ns = release_ns;
    rw.spin_us = spin_us;
    rw.prewarm = prewarm;
    return rw;
}

// The timing loops' optional block: copied into every slot's pinned input first (an idle engine).
void fill_all(gk::StreamEngine& e, const std::optional<py::array>& block, const char* method) {
    if (!block) return;
    check_block(e, *block, method);
    if (block->shape(1) != e.input_desc().items)
        throw py::value_error(std::string(method) + "(block=...) takes a full block (" +
                              std::to_string(e.input_desc().items) + " items)");
    const void* src = block->data();
    py::gil_scoped_release release;
    for (int s = 0; s < e.slots(); ++s) e.fill(s, src, e.input_desc().items);
}

void bind_engine_instrument(py::module_& m) {
    py::class_<gk::EngineInstrument, InstrumentPtr>(
        m, "EngineInstrument",
        "A StreamEngine's benchmark entry points (native/engine/instrument.h): resident mode, the timing "
        "loops and paced blocks. The engine pays nothing for them until one is made.")
        .def(py::init([](std::shared_ptr<gk::StreamEngine> engine) {
                 py::gil_scoped_release release;
                 return std::make_shared<gk::EngineInstrument>(std::move(engine));
             }),
             py::arg("engine"),
             "With mapped I/O, makes the prewarm's GPU side (a graph per slot with use_graph); waits for "
             "in-flight work.")
        .def_property_readonly("engine", &gk::EngineInstrument::engine)
        .def_property("resident", &gk::EngineInstrument::resident, &gk::EngineInstrument::set_resident,
                      "Blocks skip the H2D and D2H copies and compute on the slot's device input as it is "
                      "(the output slots are not updated; run one normal block first).")
        .def("pump_resident", &gk::EngineInstrument::pump_resident, py::arg("seconds"),
             py::call_guard<py::gil_scoped_release>(),
             "Resident blocks back to back, every slot in flight, until `seconds` pass or stop_pump(); "
             "each block's completion time (ns, time.monotonic_ns's clock). Needs resident mode and an idle "
             "engine.")
        .def("stop_pump", &gk::EngineInstrument::stop_pump, "Make a running pump_resident() return.")
        .def(
            "time_resident",
            [](gk::EngineInstrument& inst, int iterations, std::optional<py::array> block) {
                fill_all(*inst.engine(), block, "time_resident");
                py::gil_scoped_release release;
                return inst.time_resident(iterations);
            },
            py::arg("iterations"), py::arg("block") = py::none(),
            "Seconds per replay of slot 0's compute on its input, copied to the GPU once (transfers excluded); "
            "block: a full input block copied into every slot first. The ops' state is reset after.")
        .def(
            "time_streamed",
            [](gk::EngineInstrument& inst, int64_t blocks, py::object slots, std::optional<py::array> block) {
                gk::StreamEngine& e = *inst.engine();
                fill_all(e, block, "time_streamed");
                const int n = slots.is_none() ? e.slots() : slots.cast<int>();
                py::gil_scoped_release release;
                return inst.time_streamed(blocks, n);
            },
            py::arg("blocks"), py::arg("slots") = py::none(), py::arg("block") = py::none(),
            "(wall seconds, bytes host->device) for `blocks` blocks pipelined from the pinned slots with "
            "`slots` in flight (None: all); block: copied into every slot first. State reset after.")
        .def("measure_h2d_bandwidth", &gk::EngineInstrument::measure_h2d_bandwidth, py::arg("nbytes"),
             py::arg("repeats") = 20, py::call_guard<py::gil_scoped_release>(),
             "Pinned host -> device bytes per second on the engine's h2d stream.")
        .def(
            "process",
            [](gk::EngineInstrument& inst, int slot, const py::array& block, bool final, std::optional<py::array> out,
               uint64_t release_ns, int spin_us, bool prewarm) {
                const gk::ReleaseWait rw = release_wait(release_ns, spin_us, prewarm);
                return process_block(*inst.engine(), block, out,
                                     [&](const void* src, int64_t n, void* dst, int64_t row_items) {
                                         return inst.process(slot, src, n, final, rw, dst, row_items);
                                     });
            },
            py::arg("slot"), py::arg("block"), py::arg("final") = false, py::arg("out") = py::none(),
            py::arg("release_ns") = 0, py::arg("spin_us") = 0, py::arg("prewarm") = false,
            "StreamEngine.process after waiting for release_ns (CLOCK_MONOTONIC, perf_counter_ns) without the "
            "GIL: sleep until spin_us before it, then spin (prewarm: touch the slot's pages, on the host and "
            "from the GPU, first). The trace's `call` stamp is taken after the wait.")
        .def(
            "wait_release",
            [](gk::EngineInstrument& inst, int slot, uint64_t release_ns, int spin_us, bool prewarm,
               uint64_t return_at_ns) {
                const gk::ReleaseWait rw = release_wait(release_ns, spin_us, prewarm);
                py::gil_scoped_release release;
                inst.wait_release(slot, rw, return_at_ns);
            },
            py::arg("slot"), py::arg("release_ns"), py::arg("spin_us"), py::arg("prewarm"), py::arg("return_at_ns"),
            "The first half of a paced wait: sleep until spin_us before release_ns, prewarm the slot, spin "
            "until return_at_ns, return (no GIL held meanwhile).");
}

void bind_host_instruments(py::module_& m) {
    py::class_<gk::OffCpuMeter>(
        m, "OffCpuMeter",
        "Where the calling thread's time went while it made no progress (off_cpu.h): the thread that "
        "ticks it owns it.")
        .def(py::init<>())
        .def_static("available", &gk::OffCpuMeter::available,
                    "Whether this system keeps each thread's scheduler accounting (Linux schedstat).")
        .def(
            "start",
            [](gk::OffCpuMeter& meter, double gap_us, double sample_us) {
                if (!(gap_us > 0) || !(sample_us > 0)) throw py::value_error("gap_us and sample_us must be > 0");
                meter.start(static_cast<uint64_t>(gap_us * 1000.0), static_cast<uint64_t>(sample_us * 1000.0));
            },
            py::arg("gap_us"), py::arg("sample_us") = 100.0)
        .def("tick", &gk::OffCpuMeter::tick)
        .def("rest", &gk::OffCpuMeter::rest)
        .def("gaps", [](const gk::OffCpuMeter& meter) { return off_cpu_array(meter.gaps()); },
             "The gaps: an int64 array, one row each (off_cpu_array's columns).");

    py::class_<gk::StallProbe>(m, "StallProbe",
                               "A thread that only reads the clock and records the gaps (time it did not run) "
                               "longer than threshold_us: host stalls beside a benchmark.")
        .def(py::init([](double threshold_us, int cpu) {
                 if (!(threshold_us > 0)) throw py::value_error("threshold_us must be > 0");
                 return std::make_unique<gk::StallProbe>(static_cast<uint64_t>(threshold_us * 1000.0), cpu);
             }),
             py::arg("threshold_us") = 50.0, py::arg("cpu") = -1)
        .def("start", &gk::StallProbe::start)
        .def(
            "stop",
            [](gk::StallProbe& p) {
                std::vector<std::pair<uint64_t, uint64_t>> gaps;
                {
                    py::gil_scoped_release release;
                    gaps = p.stop();
                }
                py::array_t<uint64_t> starts(static_cast<py::ssize_t>(gaps.size())),
                    lengths(static_cast<py::ssize_t>(gaps.size()));
                for (size_t i = 0; i < gaps.size(); ++i) {
                    starts.mutable_data()[i] = gaps[i].first;
                    lengths.mutable_data()[i] = gaps[i].second;
                }
                return py::make_tuple(starts, lengths);
            },
            "Stop; (starts, lengths) of the gaps in ns (CLOCK_MONOTONIC).");

    py::class_<gk::RoundTripFloor>(
        m, "RoundTripFloor",
        "The least a block needs with no pipeline (the paced bench's floor): the block copied into pinned "
        "memory, to the GPU and out_bytes of the same device buffer back on one stream (the block's first "
        "bytes, zeros beyond it), the completion polled, the result copied out.")
        .def(py::init([](std::shared_ptr<gk::Device> device, size_t in_bytes, size_t out_bytes) {
                 return std::make_unique<gk::RoundTripFloor>(std::move(device), in_bytes, out_bytes);
             }),
             py::arg("device"), py::arg("in_bytes"), py::arg("out_bytes"))
        .def_property_readonly("in_bytes", &gk::RoundTripFloor::in_bytes)
        .def_property_readonly("out_bytes", &gk::RoundTripFloor::out_bytes)
        .def(
            "run",
            [](gk::RoundTripFloor& f, py::array src, py::array dst, uint64_t release_ns, int spin_us, bool prewarm) {
                if (!(src.flags() & py::array::c_style) || static_cast<size_t>(src.nbytes()) != f.in_bytes())
                    throw py::value_error("RoundTripFloor.run: src must be a C-contiguous array of in_bytes (" +
                                          std::to_string(f.in_bytes()) + ") bytes");
                if (!(dst.flags() & py::array::c_style) || !dst.writeable() ||
                    static_cast<size_t>(dst.nbytes()) != f.out_bytes())
                    throw py::value_error("RoundTripFloor.run: dst must be a writable C-contiguous array of out_bytes (" +
                                          std::to_string(f.out_bytes()) + ") bytes");
                const void* s = src.data();
                void* d = dst.mutable_data();
                py::gil_scoped_release release;
                f.run(s, d, release_ns, spin_us, prewarm);
            },
            py::arg("src"), py::arg("dst"), py::arg("release_ns") = 0, py::arg("spin_us") = 0,
            py::arg("prewarm") = false,
            "One block src -> dst; release_ns > 0: sleep until spin_us before it, prewarm, spin up to it first "
            "(a paced engine block's wait: EngineInstrument.process).");
}

}  // namespace

void bind_instrument(py::module_& m) {
    py::module_ inst = m.def_submodule(
        "instrument", "The measuring apparatus (benchmarks only): an engine's benchmark entry points "
                      "(EngineInstrument) and instruments of the host and GPU (RoundTripFloor, StallProbe, "
                      "OffCpuMeter).");
    bind_engine_instrument(inst);
    bind_host_instruments(inst);
}

}  // namespace gk_py
