// AudioBridge: the rings and PortAudio callback behind the live audio sources and sinks.
#include <pybind11/numpy.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.h"
#include "gk/audio_bridge.h"

namespace gk_py {

namespace {

using gk::audio::AudioBridge;

// A (channels, frames) float32 C-contiguous array: its data, the stride between channels, frames.
struct Planar {
    float* data;
    size_t stride;
    size_t frames;
};

Planar planar(py::array& a, size_t channels, bool writable, const char* what) {
    const bool ok = a.dtype().is(py::dtype::of<float>()) && a.ndim() == 2 &&
                    (a.flags() & py::array::c_style) && (!writable || a.writeable()) &&
                    size_t(a.shape(0)) == channels;
    if (!ok)
        throw py::value_error(std::string(what) + " needs a C-contiguous" + (writable ? " writable" : "") +
                              " float32 array of shape (" + std::to_string(channels) + ", frames)");
    return {static_cast<float*>(a.mutable_data()), size_t(a.shape(1)), size_t(a.shape(1))};
}

py::dict stats_dict(const gk::audio::BridgeStats& s) {
    py::dict d;
    d["callbacks"] = s.callbacks;
    d["device_frames"] = s.device_frames;
    d["in_frames"] = s.in_frames;
    d["in_overrun_frames"] = s.in_overrun_frames;
    d["in_overrun_events"] = s.in_overrun_events;
    d["out_frames"] = s.out_frames;
    d["out_underrun_frames"] = s.out_underrun_frames;
    d["out_underrun_events"] = s.out_underrun_events;
    d["input_overflow"] = s.input_overflow;
    d["input_underflow"] = s.input_underflow;
    d["output_underflow"] = s.output_underflow;
    d["output_overflow"] = s.output_overflow;
    d["priming_output"] = s.priming_output;
    d["latency_samples"] = s.latency_samples;
    d["latency_lost"] = s.latency_lost;
    d["last_callback_ns"] = s.last_callback_ns;
    return d;
}

}  // namespace

void bind_audio(py::module_& m) {
    py::class_<AudioBridge>(m, "AudioBridge",
                            "Lock-free rings between a PortAudio stream (its callback is native) and a "
                            "pipeline thread; see native/include/gk/audio_bridge.h.")
        .def(py::init([](double sample_rate, int device_in_channels, std::vector<int> in_map,
                         int device_out_channels, std::vector<int> out_map, size_t in_capacity,
                         size_t out_capacity) {
                 gk::audio::BridgeConfig c;
                 c.sample_rate = sample_rate;
                 c.device_in_channels = device_in_channels;
                 c.in_map = std::move(in_map);
                 c.device_out_channels = device_out_channels;
                 c.out_map = std::move(out_map);
                 c.in_capacity = in_capacity;
                 c.out_capacity = out_capacity;
                 try {
                     return new AudioBridge(c);
                 } catch (const std::invalid_argument& e) {
                     throw py::value_error(e.what());
                 }
             }),
             py::arg("sample_rate"), py::arg("device_in_channels"), py::arg("in_map"),
             py::arg("device_out_channels"), py::arg("out_map"), py::arg("in_capacity"),
             py::arg("out_capacity"))
        .def_property_readonly_static(
            "callback_address",
            [](py::object) { return reinterpret_cast<uintptr_t>(&AudioBridge::callback); },
            "Address of the PortAudio stream callback (a PaStreamCallback).")
        .def_property_readonly(
            "address", [](AudioBridge& b) { return reinterpret_cast<uintptr_t>(&b); },
            "The callback's userData: this bridge (keep it alive while the stream exists).")
        .def_property_readonly("in_capacity",
                               [](AudioBridge& b) { return b.input() ? b.input()->capacity() : 0; })
        .def_property_readonly("out_capacity",
                               [](AudioBridge& b) { return b.output() ? b.output()->capacity() : 0; })
        .def_property_readonly("in_available",
                               [](AudioBridge& b) { return b.input() ? b.input()->readable() : 0; })
        .def_property_readonly("out_queued",
                               [](AudioBridge& b) { return b.output() ? b.output()->readable() : 0; })
        .def(
            "read",
            [](AudioBridge& b, py::array out, double timeout_s) {
                if (!b.input()) throw py::value_error("this audio stream has no input side");
                Planar p = planar(out, size_t(b.input()->channels()), true, "AudioBridge.read");
                py::gil_scoped_release release;
                return b.read(p.data, p.stride, p.frames, timeout_s);
            },
            py::arg("out"), py::arg("timeout_s"),
            "Fill out (channels, frames) from the input ring, waiting at most timeout_s for all of it. "
            "Returns frames (all, or 0 on time-out).")
        .def(
            "write",
            [](AudioBridge& b, py::array block, double timeout_s) {
                if (!b.output()) throw py::value_error("this audio stream has no output side");
                Planar p = planar(block, size_t(b.output()->channels()), false, "AudioBridge.write");
                py::gil_scoped_release release;
                return b.write(p.data, p.stride, p.frames, timeout_s);
            },
            py::arg("block"), py::arg("timeout_s"),
            "Queue block (channels, frames) for the device, waiting at most timeout_s for room. "
            "Returns frames (all, or 0 on time-out).")
        .def("prime", &AudioBridge::prime, py::arg("frames"),
             "Silence into the output ring (the pre-roll); only before the stream starts.")
        .def("wait_drained", &AudioBridge::wait_drained, py::arg("timeout_s"),
             py::call_guard<py::gil_scoped_release>(), "Wait until every queued output frame was played.")
        .def("set_output_ending", &AudioBridge::set_output_ending, py::arg("ending"),
             "From now on an empty output ring is the end of the stream, not an underrun.")
        .def("stats", [](const AudioBridge& b) { return stats_dict(b.stats()); })
        .def(
            "take_latencies",
            [](AudioBridge& b) {
                std::vector<double> buf(8192);
                const size_t n = b.take_latencies(buf.data(), buf.size());
                py::array_t<double> out(static_cast<py::ssize_t>(n));
                std::copy(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n), out.mutable_data());
                return out;
            },
            "ADC-to-DAC latencies (s) measured since the last call (duplex streams).");

    m.def(
        "invoke_audio_callback",
        [](uintptr_t callback, uintptr_t user, py::object indata, py::object outdata, unsigned long frames,
           double adc, double current, double dac, unsigned long flags) {
            using Fn = int (*)(const void*, void*, unsigned long, const gk::audio::PaTimeInfo*,
                               gk::audio::PaFlags, void*);
            auto buffer = [](py::object o, bool writable) -> void* {
                if (o.is_none()) return nullptr;
                if (!py::isinstance<py::array>(o))
                    throw py::value_error("device buffers must be NumPy arrays");
                py::array a = py::reinterpret_borrow<py::array>(o);
                if (!a.dtype().is(py::dtype::of<float>()) || !(a.flags() & py::array::c_style) ||
                    (writable && !a.writeable()))
                    throw py::value_error("device buffers must be C-contiguous float32 arrays (frames, channels)");
                return a.mutable_data();
            };
            const void* in = buffer(indata, false);
            void* out = buffer(outdata, true);
            gk::audio::PaTimeInfo t{adc, current, dac};
            py::gil_scoped_release release;
            return reinterpret_cast<Fn>(callback)(in, out, frames, &t, flags, reinterpret_cast<void*>(user));
        },
        py::arg("callback"), py::arg("user"), py::arg("indata"), py::arg("outdata"), py::arg("frames"),
        py::arg("adc"), py::arg("current"), py::arg("dac"), py::arg("flags") = 0,
        "Call a PortAudio stream callback by address as PortAudio would (fault-injection tests drive "
        "the native callback through a fake sounddevice with it).");
}

}  // namespace gk_py
