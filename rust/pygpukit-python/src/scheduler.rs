//! `Scheduler`, `Decision`, `Completion`: thin wrappers over `pygpukit_core::scheduler`.
//!
//! The Python object and the C ABI share one `SchedHandle` (a mutex around the core
//! scheduler), so statistics read from Python see what the C++ engine's thread did.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::{Arc, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyDict};

use pygpukit_core::scheduler::{
    AdmissionRefused as CoreRefusal, Decision, Qos, SchedError, Scheduler, SchedulerConfig, StreamSpec,
};

use crate::capi::{self, ClockChoice, SchedHandle};
use crate::module::{AdmissionRefused, IllegalTransition, SchedulerError};
use crate::records::{
    admission_figures_dict, admitted_dict, scheduler_config_dict, scheduler_stats_dict, stream_admission_dict,
    stream_stats_dict,
};

/// Python exception for a core error.
pub(crate) fn sched_error(py: Python<'_>, e: SchedError) -> PyErr {
    match e {
        SchedError::InvalidArgument(m) => PyValueError::new_err(m),
        SchedError::Admission(r) => admission_error(py, &r),
        SchedError::IllegalTransition(t) => {
            let err = IllegalTransition::new_err(t.to_string());
            let value = err.value(py);
            let _ = value.setattr("task", t.task);
            let _ = value.setattr("from_state", t.from.name());
            let _ = value.setattr("to_state", t.to.name());
            err
        }
        other => SchedulerError::new_err(other.to_string()),
    }
}

fn admission_error(py: Python<'_>, r: &CoreRefusal) -> PyErr {
    let err = AdmissionRefused::new_err(r.to_string());
    let set = || -> PyResult<()> {
        let value = err.value(py);
        let figures = admission_figures_dict(py, r)?;
        for (k, v) in figures.iter() {
            value.setattr(k.extract::<String>()?, v)?;
        }
        value.setattr("stream", r.stream.as_str())?;
        value.setattr("reason", r.reason.name())?;
        value.setattr("figures", figures)?;
        Ok(())
    };
    match set() {
        Ok(()) => err,
        Err(e) => e,
    }
}

fn poisoned() -> PyErr {
    PyRuntimeError::new_err(capi::Poisoned.to_string())
}

/// One answer of `Scheduler.next()`.
#[pyclass(frozen, eq, name = "Decision", module = "pygpukit_dsp_core")]
#[derive(Clone, Debug, PartialEq)]
pub struct PyDecision {
    /// "launch", "wait" or "idle".
    #[pyo3(get)]
    kind: &'static str,
    #[pyo3(get)]
    task: Option<u64>,
    #[pyo3(get)]
    stream: Option<u32>,
    #[pyo3(get)]
    chunk_begin: Option<u32>,
    #[pyo3(get)]
    chunk_end: Option<u32>,
    #[pyo3(get)]
    is_final: Option<bool>,
    #[pyo3(get)]
    deadline_ns: Option<u64>,
    #[pyo3(get)]
    est_cost_ns: Option<u64>,
    #[pyo3(get)]
    wait_until_ns: Option<u64>,
}

impl From<Decision> for PyDecision {
    fn from(d: Decision) -> Self {
        let none = PyDecision {
            kind: "idle",
            task: None,
            stream: None,
            chunk_begin: None,
            chunk_end: None,
            is_final: None,
            deadline_ns: None,
            est_cost_ns: None,
            wait_until_ns: None,
        };
        match d {
            Decision::Launch(l) => PyDecision {
                kind: "launch",
                task: Some(l.task),
                stream: Some(l.stream),
                chunk_begin: Some(l.chunk_begin),
                chunk_end: Some(l.chunk_end),
                is_final: Some(l.is_final),
                deadline_ns: l.deadline_ns,
                est_cost_ns: Some(l.est_cost_ns),
                ..none
            },
            Decision::WaitUntil(t) => PyDecision { kind: "wait", wait_until_ns: Some(t), ..none },
            Decision::Idle => none,
        }
    }
}

#[pymethods]
impl PyDecision {
    fn __repr__(&self) -> String {
        match self.kind {
            "launch" => format!(
                "Decision(launch task={} stream={} units={}..{} is_final={} est_cost_ns={} deadline_ns={})",
                self.task.unwrap_or(0),
                self.stream.unwrap_or(0),
                self.chunk_begin.unwrap_or(0),
                self.chunk_end.unwrap_or(0),
                if self.is_final == Some(true) { "True" } else { "False" },
                self.est_cost_ns.unwrap_or(0),
                self.deadline_ns.map_or("None".to_string(), |d| d.to_string()),
            ),
            "wait" => format!("Decision(wait until={})", self.wait_until_ns.unwrap_or(0)),
            _ => "Decision(idle)".to_string(),
        }
    }
}

/// What `Scheduler.complete()` did.
#[pyclass(frozen, eq, name = "Completion", module = "pygpukit_dsp_core")]
#[derive(Clone, Debug, PartialEq)]
pub struct PyCompletion {
    #[pyo3(get)]
    task: u64,
    /// "ready" (units remain), "completed" or "missed".
    #[pyo3(get)]
    state: &'static str,
    #[pyo3(get)]
    latency_ns: Option<u64>,
    #[pyo3(get)]
    remaining_units: u32,
}

#[pymethods]
impl PyCompletion {
    fn __repr__(&self) -> String {
        format!(
            "Completion(task={}, state='{}', latency_ns={}, remaining_units={})",
            self.task,
            self.state,
            self.latency_ns.map_or("None".to_string(), |l| l.to_string()),
            self.remaining_units
        )
    }
}

#[pyclass(frozen, name = "Scheduler", module = "pygpukit_dsp_core")]
pub struct PyScheduler {
    handle: Arc<SchedHandle>,
    config: SchedulerConfig,
}

impl PyScheduler {
    fn lock(&self) -> PyResult<MutexGuard<'_, Scheduler>> {
        self.handle.lock().map_err(|_| poisoned())
    }
}

const QOS_NAMES: [&str; 3] = ["realtime", "throughput", "best_effort"];

/// The closest known name within two edits, for "did you mean" hints.
fn did_you_mean<'a>(given: &str, known: &[&'a str]) -> Option<&'a str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, &cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    }
    known.iter().map(|k| (distance(&given.to_lowercase(), k), *k)).filter(|&(d, _)| d <= 2).min().map(|(_, k)| k)
}

unsafe extern "C" fn drop_sched_handle(capsule: *mut ffi::PyObject) {
    // SAFETY: called by Python once, when the capsule dies; the pointer was made by
    // `Arc::into_raw` in `capsule()` and owns one reference.
    unsafe {
        let p = ffi::PyCapsule_GetPointer(capsule, capi::GK_SCHED_HANDLE_CAPSULE_NAME.as_ptr());
        if !p.is_null() {
            drop(Arc::from_raw(p.cast_const().cast::<SchedHandle>()));
        }
    }
}

#[pymethods]
impl PyScheduler {
    #[new]
    #[pyo3(signature = (*, u_max = 0.9, quantum_ns = 250_000, safety_margin_ns = 50_000, ewma_alpha = 0.2, clock = "monotonic", start_ns = 0, max_chunks_in_flight = 2, dispatcher_busy_cap = 1.0, dispatcher_hold_ns = 0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        u_max: f64,
        quantum_ns: u64,
        safety_margin_ns: u64,
        ewma_alpha: f64,
        clock: &str,
        start_ns: u64,
        max_chunks_in_flight: u32,
        dispatcher_busy_cap: f64,
        dispatcher_hold_ns: u64,
    ) -> PyResult<Self> {
        let clock = match clock {
            "monotonic" => ClockChoice::Monotonic,
            "simulated" => ClockChoice::Simulated { start_ns },
            other => {
                return Err(PyValueError::new_err(format!("clock must be 'monotonic' or 'simulated', got '{other}'")))
            }
        };
        let config = SchedulerConfig {
            u_max,
            quantum_ns,
            safety_margin_ns,
            ewma_alpha,
            max_chunks_in_flight,
            dispatcher_busy_cap,
            dispatcher_hold_ns,
            ..SchedulerConfig::default()
        };
        let handle = SchedHandle::new(config, clock).map_err(|e| sched_error(py, e))?;
        Ok(PyScheduler { handle, config })
    }

    /// The configuration as a dict.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        scheduler_config_dict(py, &self.config, self.handle.simulated_clock().is_some())
    }

    #[getter]
    fn simulated(&self) -> bool {
        self.handle.simulated_clock().is_some()
    }

    fn now_ns(&self) -> PyResult<u64> {
        Ok(self.lock()?.now())
    }

    /// Simulated clock only: move forward; returns the new time.
    fn advance(&self, delta_ns: u64) -> PyResult<u64> {
        let clock = self.simulated_clock()?;
        Ok(clock.advance(delta_ns))
    }

    /// Simulated clock only: jump to `t_ns` (never backwards).
    fn set_time(&self, t_ns: u64) -> PyResult<u64> {
        self.simulated_clock()?
            .set(t_ns)
            .map_err(|now| PyValueError::new_err(format!("cannot move the clock back from {now} ns to {t_ns} ns")))
    }

    #[pyo3(signature = (name, qos, *, period_ns = None, deadline_ns = None, min_rate_hz = None, cost_ns = None, latency_ns = None, units_per_block = 1, phase_ns = None, dispatch_ns = None, tail_reach_ns = None))]
    #[allow(clippy::too_many_arguments)]
    fn register_stream(
        &self,
        py: Python<'_>,
        name: String,
        qos: &str,
        period_ns: Option<u64>,
        deadline_ns: Option<u64>,
        min_rate_hz: Option<f64>,
        cost_ns: Option<u64>,
        latency_ns: Option<u64>,
        units_per_block: u32,
        phase_ns: Option<u64>,
        dispatch_ns: Option<u64>,
        tail_reach_ns: Option<u64>,
    ) -> PyResult<u32> {
        let where_ = format!("stream '{name}'");
        if !QOS_NAMES.contains(&qos) {
            let hint = did_you_mean(qos, &QOS_NAMES).map_or(String::new(), |m| format!(" (did you mean '{m}'?)"));
            return Err(PyValueError::new_err(format!(
                "{where_}: unknown qos '{qos}'; use one of {}{hint}",
                QOS_NAMES.join(", ")
            )));
        }
        if qos != "realtime" && period_ns.is_some() {
            return Err(PyValueError::new_err(format!("{where_}: period_ns applies to realtime streams only")));
        }
        if qos != "throughput" && min_rate_hz.is_some() {
            return Err(PyValueError::new_err(format!("{where_}: min_rate_hz applies to throughput streams only")));
        }
        let qos = match qos {
            "realtime" => {
                let period = period_ns.ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "{where_}: realtime streams need period_ns (block_size / sample_rate, in ns)"
                    ))
                })?;
                Qos::realtime(period, deadline_ns)
            }
            "throughput" => Qos::Throughput { min_rate_hz, deadline_ns },
            _ => Qos::BestEffort { deadline_ns },
        };
        let spec = StreamSpec { name, qos, cost_ns, latency_ns, units_per_block, phase_ns, dispatch_ns, tail_reach_ns };
        self.lock()?.register_stream(spec).map_err(|e| sched_error(py, e))
    }

    /// Remove a stream (its live tasks are cancelled); returns its final statistics.
    fn unregister_stream<'py>(&self, py: Python<'py>, stream: u32) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.lock()?.unregister_stream(stream).map_err(|e| sched_error(py, e))?;
        stream_stats_dict(py, &stats)
    }

    fn stream_id(&self, name: &str) -> PyResult<Option<u32>> {
        Ok(self.lock()?.stream_id(name))
    }

    /// Admit a stream registered without a cost, using its measured cost.
    fn admit<'py>(&self, py: Python<'py>, stream: u32) -> PyResult<Bound<'py, PyDict>> {
        let admitted = self.lock()?.admit(stream).map_err(|e| sched_error(py, e))?;
        admitted_dict(py, &admitted)
    }

    /// The device model's dispatcher check over the admitted realtime streams: the share of its
    /// time the dispatcher may be busy with their blocks, or AdmissionRefused (dispatcher_hold).
    fn check_dispatcher_hold(&self, py: Python<'_>) -> PyResult<f64> {
        self.lock()?.check_dispatcher_hold().map_err(|r| admission_error(py, &r))
    }

    /// The device model's latency-tail check over the admitted realtime streams (their
    /// tail_reach_ns against their deadlines): AdmissionRefused (latency_tail) naming the last
    /// stream whose tail reaches past its deadline.
    fn check_latency_tails(&self, py: Python<'_>) -> PyResult<()> {
        self.lock()?.check_latency_tails().map_err(|r| admission_error(py, &r))
    }

    /// The share of its time the dispatcher may be busy with realtime blocks at the shortest
    /// deadline `deadline_ns` (None: the admitted realtime streams' shortest).
    #[pyo3(signature = (deadline_ns = None))]
    fn dispatcher_share(&self, deadline_ns: Option<u64>) -> PyResult<f64> {
        Ok(self.lock()?.dispatcher_share(deadline_ns))
    }

    /// A block's dispatcher work as the device model counts it against u_max at the dispatcher
    /// share of `deadline_ns` (None: the admitted streams' shortest); ValueError where no share
    /// is left (the deadline is within the hold).
    #[pyo3(signature = (dispatch_ns, deadline_ns = None))]
    fn counted_dispatch_ns(&self, dispatch_ns: u64, deadline_ns: Option<u64>) -> PyResult<u64> {
        let s = self.lock()?;
        let share = s.dispatcher_share(deadline_ns);
        s.policy().counted_dispatch_ns(dispatch_ns, share).ok_or_else(|| {
            PyValueError::new_err(format!(
                "a {} ns deadline is no longer than the dispatcher's lock may be held ({} ns)",
                deadline_ns.map_or("unknown".to_string(), |d| d.to_string()),
                self.config.dispatcher_hold_ns
            ))
        })
    }

    /// The block cost the device model counts for a realtime stream of device time `cost_ns` and
    /// dispatcher work `dispatch_ns` (None: none counted) at the dispatcher share of `deadline_ns`
    /// (None: the admitted streams' shortest); ValueError where no share is left.
    #[pyo3(signature = (cost_ns, dispatch_ns = None, deadline_ns = None))]
    fn counted_cost_ns(&self, cost_ns: u64, dispatch_ns: Option<u64>, deadline_ns: Option<u64>) -> PyResult<u64> {
        self.lock()?.counted_cost_ns(cost_ns, dispatch_ns, deadline_ns).ok_or_else(|| {
            PyValueError::new_err(format!(
                "a {} ns deadline is no longer than the dispatcher's lock may be held ({} ns)",
                deadline_ns.map_or("unknown".to_string(), |d| d.to_string()),
                self.config.dispatcher_hold_ns
            ))
        })
    }

    /// What admission counts for a stream: its cost, device time, dispatcher work (measured and
    /// counted), the device's dispatcher share and its latency tail's reach.
    fn stream_admission<'py>(&self, py: Python<'py>, stream: u32) -> PyResult<Bound<'py, PyDict>> {
        let a = self.lock()?.stream_admission(stream).map_err(|e| sched_error(py, e))?;
        stream_admission_dict(py, &a)
    }

    fn update_cost(&self, py: Python<'_>, stream: u32, measured_ns: u64) -> PyResult<u64> {
        self.lock()?.update_cost(stream, measured_ns).map_err(|e| sched_error(py, e))
    }

    fn calibrate(&self, py: Python<'_>, stream: u32, samples_ns: Vec<u64>) -> PyResult<u64> {
        self.lock()?.calibrate(stream, &samples_ns).map_err(|e| sched_error(py, e))
    }

    /// Submit one block; returns `(task, absolute deadline or None)`.
    #[pyo3(signature = (stream, arrival_ns = None))]
    fn submit(&self, py: Python<'_>, stream: u32, arrival_ns: Option<u64>) -> PyResult<(u64, Option<u64>)> {
        let mut s = self.lock()?;
        let arrival = arrival_ns.unwrap_or_else(|| s.now());
        let sub = s.submit_at(stream, arrival).map_err(|e| sched_error(py, e))?;
        Ok((sub.task, sub.deadline_ns))
    }

    #[pyo3(signature = (now_ns = None))]
    fn next(&self, now_ns: Option<u64>) -> PyResult<PyDecision> {
        let mut s = self.lock()?;
        let now = now_ns.unwrap_or_else(|| s.now());
        Ok(s.next_decision_at(now).into())
    }

    #[pyo3(signature = (task, measured_cost_ns, finish_ns = None))]
    fn complete(
        &self,
        py: Python<'_>,
        task: u64,
        measured_cost_ns: Option<u64>,
        finish_ns: Option<u64>,
    ) -> PyResult<PyCompletion> {
        let mut s = self.lock()?;
        let finish = finish_ns.unwrap_or_else(|| s.now());
        let done = match measured_cost_ns {
            Some(ns) => s.complete(task, ns, finish),
            None => s.complete_unmeasured(task, finish),
        };
        let c = done.map_err(|e| sched_error(py, e))?;
        Ok(PyCompletion {
            task: c.task,
            state: c.state.name(),
            latency_ns: c.latency_ns,
            remaining_units: c.remaining_units,
        })
    }

    fn drop(&self, py: Python<'_>, task: u64) -> PyResult<()> {
        self.lock()?.drop_task(task).map_err(|e| sched_error(py, e))
    }

    fn cancel(&self, py: Python<'_>, task: u64) -> PyResult<()> {
        self.lock()?.cancel(task).map_err(|e| sched_error(py, e))
    }

    fn task_state(&self, task: u64) -> PyResult<Option<&'static str>> {
        Ok(self.lock()?.task_state(task).map(|s| s.name()))
    }

    fn stream_stats<'py>(&self, py: Python<'py>, stream: u32) -> PyResult<Bound<'py, PyDict>> {
        let stats = self.lock()?.stream_stats(stream).map_err(|e| sched_error(py, e))?;
        stream_stats_dict(py, &stats)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.lock()?.stats();
        scheduler_stats_dict(py, &s)
    }

    /// This scheduler as a `gk_sched*` capsule (`pygpukit_dsp_core._sched_handle_v1`) for the C
    /// ABI. The capsule owns one reference; C code that keeps the pointer calls `sched_retain`.
    fn capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        let raw = Arc::into_raw(Arc::clone(&self.handle)).cast_mut().cast::<c_void>();
        let pointer = NonNull::new(raw).expect("Arc pointers are not null");
        // SAFETY: `raw` owns one reference, released by `drop_sched_handle` when the capsule dies.
        let capsule = unsafe {
            PyCapsule::new_with_pointer_and_destructor(
                py,
                pointer,
                capi::GK_SCHED_HANDLE_CAPSULE_NAME,
                Some(drop_sched_handle),
            )
        };
        if capsule.is_err() {
            // SAFETY: the capsule was not created, so the reference is still ours.
            unsafe { drop(Arc::from_raw(raw.cast_const().cast::<SchedHandle>())) };
        }
        capsule
    }

    fn __repr__(&self) -> PyResult<String> {
        let s = self.lock()?;
        let stats = s.stats();
        Ok(format!(
            "Scheduler(streams={}, realtime_utilisation={:.4}, u_max={}, live_tasks={})",
            stats.streams.len(),
            stats.realtime_utilisation,
            stats.u_max,
            stats.live_tasks
        ))
    }
}

impl PyScheduler {
    fn simulated_clock(&self) -> PyResult<&pygpukit_core::clock::SimulatedClock> {
        self.handle.simulated_clock().ok_or_else(|| {
            PyRuntimeError::new_err(
                "this scheduler runs on the monotonic clock; create it with clock='simulated' to set time",
            )
        })
    }
}
