// Shared by the pybind11 translation units of pygpukit_dsp._native.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace gk {
struct ShippedManifest;
struct OffCpuGap;
class StreamEngine;
}

namespace gk_py {

namespace py = pybind11;

// capabilities()["kernels"]: what the wheel ships (gk/shipped.h).
py::dict shipped_summary(const gk::ShippedManifest& manifest);

// Before the first library load: hand the NVIDIA wheel folders to the loader once, through
// pygpukit_dsp._libs (needs the GIL; a missing _libs just leaves the system search path).
void ensure_library_dirs();

// A thread's gaps (off_cpu.h) as an int64 array, one row each: at_ns, gap_ns, window_ns, ran_ns,
// queued_ns, switches.
py::array_t<int64_t> off_cpu_array(const std::vector<gk::OffCpuGap>& gaps);

// A block for the engine's process(): a C-contiguous array of the input dtype, (channels, n[, bins]);
// std::invalid_argument naming `method` otherwise.
void check_block(const gk::StreamEngine& e, const py::array& block, const char* method);
// process()'s Python side, shared by StreamEngine.process and EngineInstrument.process: checks the
// block (and `out`), makes the result array, calls run(src, n_valid, dst, row_items) without the
// GIL (it returns the valid output items) and returns the valid output (a new array, or `out` /
// a view of its first n_out items).
py::array process_block(const gk::StreamEngine& e, const py::array& block, std::optional<py::array> out,
                        const std::function<int64_t(const void*, int64_t, void*, int64_t)>& run);

void bind_errors(py::module_& m);
void bind_core(py::module_& m);
void bind_jit(py::module_& m);
void bind_engine(py::module_& m);
void bind_dispatch(py::module_& m);
void bind_audio(py::module_& m);
// The submodule pygpukit_dsp._native.instrument: EngineInstrument, RoundTripFloor, StallProbe, OffCpuMeter.
void bind_instrument(py::module_& m);

}  // namespace gk_py
