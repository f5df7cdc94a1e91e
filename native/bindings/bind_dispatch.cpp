// Dispatcher: the native worker that launches attached engines' blocks as the Rust scheduler
// decides. The scheduler's C ABI table and handle come from pygpukit_dsp_core's capsules.
#include <memory>

#include "../engine/dispatcher.h"
#include "bindings.h"
#include "gk/device.h"

namespace gk_py {

void bind_dispatch(py::module_& m) {
    py::class_<gk::Dispatcher, std::shared_ptr<gk::Dispatcher>>(
        m, "Dispatcher",
        "One native worker thread launching attached StreamEngines' blocks chunk by chunk, in the "
        "order a pygpukit_dsp_core.Scheduler decides (see docs/scheduler.md).")
        .def(py::init([](std::shared_ptr<gk::Device> device, py::capsule sched, int spin_us) {
                 // The table: imported once from pygpukit_dsp_core (it lives as long as that module).
                 auto* abi = static_cast<const gk_sched_abi_v1*>(PyCapsule_Import(GK_SCHED_ABI_CAPSULE_NAME, 0));
                 if (!abi) throw py::error_already_set();
                 if (std::string(sched.name() ? sched.name() : "") != GK_SCHED_HANDLE_CAPSULE_NAME)
                     throw py::value_error("Dispatcher takes Scheduler.capsule() (a '" +
                                           std::string(GK_SCHED_HANDLE_CAPSULE_NAME) + "' capsule)");
                 auto* handle = static_cast<gk_sched*>(sched.get_pointer());
                 return std::make_shared<gk::Dispatcher>(std::move(device), abi, handle, spin_us);
             }),
             py::arg("device"), py::arg("scheduler_capsule"), py::arg("spin_us") = 200)
        .def("close", &gk::Dispatcher::close, py::call_guard<py::gil_scoped_release>(),
             "Drain every handed-over block, then stop the worker.")
        .def_property_readonly("closed", &gk::Dispatcher::closed)
        .def_property_readonly(
            "device", [](const gk::Dispatcher& d) { return d.device(); },
            "The Device (GPU) whose engines this dispatcher launches: one dispatcher per GPU.")
        .def_property_readonly(
            "device_index", [](const gk::Dispatcher& d) { return d.device()->index(); },
            "Index of that GPU.")
        .def("stats", [](const gk::Dispatcher& d) {
            gk::DispatcherStats s = d.stats();
            py::dict out;
            out["posted"] = s.posted;
            out["launches"] = s.launches;
            out["completed"] = s.completed;
            out["waits"] = s.waits;
            out["idles"] = s.idles;
            out["cancelled"] = s.cancelled;
            out["helped"] = s.helped;
            out["timed"] = s.timed;
            py::dict slow, longest, total, count;
            for (int k = 0; k < gk::DispatcherStats::kStepKinds; ++k) {
                slow[gk::DispatcherStats::step_name(k)] = s.slow_steps[k];
                longest[gk::DispatcherStats::step_name(k)] = s.longest_step_ns[k];
                total[gk::DispatcherStats::step_name(k)] = s.step_ns[k];
                count[gk::DispatcherStats::step_name(k)] = s.steps[k];
            }
            out["slow_steps"] = slow;
            out["longest_step_ns"] = longest;
            out["step_ns"] = total;
            out["steps"] = count;
            out["slow_step_ns"] = gk::DispatcherStats::kSlowStepNs;
            py::list log;
            for (const auto& st : s.slow_log)
                log.append(py::make_tuple(st.at_ns, st.ns, gk::DispatcherStats::step_name(st.kind)));
            out["slow_log"] = log;
            return out;
        })
        .def_property(
            "time_every", &gk::Dispatcher::time_every, &gk::Dispatcher::set_time_every,
            "Time one in every time_every whole-block chunks of a stream (CUDA events) after its first "
            "16; 1 times every block. The others complete unmeasured: their event records and "
            "elapsed-time query are serial work under the dispatcher's lock.")
        .def("start_timeline", &gk::Dispatcher::start_timeline,
             "From now on record each timed chunk's start and stop on the GPU (ns after a reference "
             "event recorded now); with time_every 1, every block's.")
        .def(
            "stop_timeline",
            [](gk::Dispatcher& d) {
                const auto iv = d.stop_timeline();
                py::array_t<int64_t> out({static_cast<py::ssize_t>(iv.size()), static_cast<py::ssize_t>(2)});
                auto m = out.mutable_unchecked<2>();
                for (size_t i = 0; i < iv.size(); ++i) {
                    m(static_cast<py::ssize_t>(i), 0) = iv[i].first;
                    m(static_cast<py::ssize_t>(i), 1) = iv[i].second;
                }
                return out;
            },
            "Stop recording; the intervals since start_timeline: an int64 array (k, 2) of (start, stop) ns "
            "on the GPU.")
        .def(
            "watch_off_cpu",
            [](gk::Dispatcher& d, double gap_us) {
                if (!(gap_us > 0)) throw py::value_error("gap_us must be > 0");
                d.watch_off_cpu(static_cast<uint64_t>(gap_us * 1000.0));
            },
            py::arg("gap_us"),
            "From now on the worker records where its time went when it made no progress for gap_us "
            "between its sleeps (off_cpu.h); off_cpu_gaps() returns them.")
        .def(
            "off_cpu_gaps", [](const gk::Dispatcher& d) { return off_cpu_array(d.off_cpu_gaps()); },
            "The worker's gaps: an int64 array, one row each (at_ns, gap_ns, window_ns, ran_ns, queued_ns, "
            "switches).")
        .def_static("now_ns", &gk::Dispatcher::now_ns, "The scheduler's clock (CLOCK_MONOTONIC), ns.");
}

}  // namespace gk_py
