// Shared by the pybind11 translation units of pygpukit_dsp._native.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <vector>

namespace gk {
struct ShippedManifest;
struct OffCpuGap;
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

void bind_errors(py::module_& m);
void bind_core(py::module_& m);
void bind_jit(py::module_& m);
void bind_engine(py::module_& m);
void bind_dispatch(py::module_& m);
void bind_audio(py::module_& m);

}  // namespace gk_py
