//! The records the Python API returns as dicts: one function per record, and next to it the
//! keys it writes (`*_FIELDS`), listed in [`RECORDS`].
//!
//! The `.pyi` declares each record as a `TypedDict`; `_record_fields()` reports [`RECORDS`]
//! and `tests/core/test_records.py` checks the stub field by field against it and against the
//! dicts these functions return. Each function takes its core struct apart without `..`, so a
//! field added in `pygpukit-core` does not compile here until it is exposed or left out by name.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use pygpukit_core::histogram::HistogramSummary;
use pygpukit_core::memory::{BlockInfo, BlockState, PoolStats};
use pygpukit_core::scheduler::{
    AdmissionRefused, Admitted, SchedulerConfig, SchedulerStats, StreamAdmission, StreamStats,
};

/// A record's name in the `.pyi`, its keys in order, and which of them may be absent.
pub(crate) struct Record {
    pub name: &'static str,
    pub fields: &'static [&'static str],
    pub optional: &'static [&'static str],
}

/// Every record the module returns.
pub(crate) const RECORDS: &[Record] = &[
    Record { name: "LatencySummary", fields: LATENCY_SUMMARY_FIELDS, optional: &[] },
    Record { name: "StreamStats", fields: STREAM_STATS_FIELDS, optional: &[] },
    Record { name: "SchedulerStats", fields: SCHEDULER_STATS_FIELDS, optional: &[] },
    Record { name: "SchedulerConfig", fields: SCHEDULER_CONFIG_FIELDS, optional: &[] },
    Record { name: "AdmissionFigures", fields: ADMISSION_FIGURES_FIELDS, optional: ADMISSION_FIGURES_OPTIONAL },
    Record { name: "Admitted", fields: ADMITTED_FIELDS, optional: &[] },
    Record { name: "StreamAdmission", fields: STREAM_ADMISSION_FIELDS, optional: &[] },
    Record { name: "BlockInfo", fields: BLOCK_INFO_FIELDS, optional: &[] },
    Record { name: "PoolStats", fields: POOL_STATS_FIELDS, optional: &[] },
];

/// `{record name: {key: required}}`, keys in order: what the drift test compares the stub with.
#[pyfunction]
pub fn _record_fields(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    for record in RECORDS {
        let keys = PyDict::new(py);
        for &field in record.fields {
            keys.set_item(field, !record.optional.contains(&field))?;
        }
        out.set_item(record.name, keys)?;
    }
    Ok(out)
}

const LATENCY_SUMMARY_FIELDS: &[&str] = &["count", "min", "max", "mean", "p50", "p90", "p99", "p999", "clamped"];

pub(crate) fn latency_summary_dict<'py>(py: Python<'py>, s: &HistogramSummary) -> PyResult<Bound<'py, PyDict>> {
    let HistogramSummary { count, min, max, mean, p50, p90, p99, p999, clamped } = *s;
    let d = PyDict::new(py);
    d.set_item("count", count)?;
    d.set_item("min", min)?;
    d.set_item("max", max)?;
    d.set_item("mean", mean)?;
    d.set_item("p50", p50)?;
    d.set_item("p90", p90)?;
    d.set_item("p99", p99)?;
    d.set_item("p999", p999)?;
    d.set_item("clamped", clamped)?;
    Ok(d)
}

const STREAM_STATS_FIELDS: &[&str] = &[
    "id",
    "name",
    "qos",
    "admitted",
    "period_ns",
    "deadline_ns",
    "min_rate_hz",
    "units_per_block",
    "cost_ns",
    "declared_cost_ns",
    "measured_cost_ns",
    "declared_latency_ns",
    "measured_cost_max_ns",
    "cost_samples",
    "utilisation",
    "submitted",
    "completed",
    "missed",
    "dropped",
    "cancelled",
    "live",
    "chunks",
    "busy_ns",
    "achieved_rate_hz",
    "latency",
];

pub(crate) fn stream_stats_dict<'py>(py: Python<'py>, s: &StreamStats) -> PyResult<Bound<'py, PyDict>> {
    let StreamStats {
        id,
        name,
        class,
        admitted,
        period_ns,
        deadline_ns,
        min_rate_hz,
        units_per_block,
        cost_ns,
        declared_cost_ns,
        measured_cost_ns,
        declared_latency_ns,
        measured_cost_max_ns,
        cost_samples,
        utilisation,
        submitted,
        completed,
        missed,
        dropped,
        cancelled,
        live,
        chunks,
        busy_ns,
        achieved_rate_hz,
        latency,
    } = s;
    let d = PyDict::new(py);
    d.set_item("id", id)?;
    d.set_item("name", name.as_str())?;
    d.set_item("qos", class.name())?;
    d.set_item("admitted", admitted)?;
    d.set_item("period_ns", period_ns)?;
    d.set_item("deadline_ns", deadline_ns)?;
    d.set_item("min_rate_hz", min_rate_hz)?;
    d.set_item("units_per_block", units_per_block)?;
    d.set_item("cost_ns", cost_ns)?;
    d.set_item("declared_cost_ns", declared_cost_ns)?;
    d.set_item("measured_cost_ns", measured_cost_ns)?;
    d.set_item("declared_latency_ns", declared_latency_ns)?;
    d.set_item("measured_cost_max_ns", measured_cost_max_ns)?;
    d.set_item("cost_samples", cost_samples)?;
    d.set_item("utilisation", utilisation)?;
    d.set_item("submitted", submitted)?;
    d.set_item("completed", completed)?;
    d.set_item("missed", missed)?;
    d.set_item("dropped", dropped)?;
    d.set_item("cancelled", cancelled)?;
    d.set_item("live", live)?;
    d.set_item("chunks", chunks)?;
    d.set_item("busy_ns", busy_ns)?;
    d.set_item("achieved_rate_hz", achieved_rate_hz)?;
    d.set_item("latency", latency_summary_dict(py, latency)?)?;
    Ok(d)
}

const SCHEDULER_STATS_FIELDS: &[&str] = &[
    "now_ns",
    "u_max",
    "realtime_utilisation",
    "throughput_reserved",
    "over_bound",
    "launches",
    "waits",
    "idles",
    "paced",
    "live_tasks",
    "in_flight",
    "device_free_estimate_ns",
    "streams",
];

pub(crate) fn scheduler_stats_dict<'py>(py: Python<'py>, s: &SchedulerStats) -> PyResult<Bound<'py, PyDict>> {
    let SchedulerStats {
        now_ns,
        u_max,
        realtime_utilisation,
        throughput_reserved,
        over_bound,
        launches,
        waits,
        idles,
        paced,
        live_tasks,
        in_flight,
        device_free_estimate_ns,
        streams,
    } = s;
    let d = PyDict::new(py);
    d.set_item("now_ns", now_ns)?;
    d.set_item("u_max", u_max)?;
    d.set_item("realtime_utilisation", realtime_utilisation)?;
    d.set_item("throughput_reserved", throughput_reserved)?;
    d.set_item("over_bound", over_bound)?;
    d.set_item("launches", launches)?;
    d.set_item("waits", waits)?;
    d.set_item("idles", idles)?;
    d.set_item("paced", paced)?;
    d.set_item("live_tasks", live_tasks)?;
    d.set_item("in_flight", in_flight)?;
    d.set_item("device_free_estimate_ns", device_free_estimate_ns)?;
    let list = PyList::empty(py);
    for st in streams {
        list.append(stream_stats_dict(py, st)?)?;
    }
    d.set_item("streams", list)?;
    Ok(d)
}

const SCHEDULER_CONFIG_FIELDS: &[&str] = &[
    "u_max",
    "quantum_ns",
    "safety_margin_ns",
    "ewma_alpha",
    "max_chunks_in_flight",
    "dispatcher_busy_cap",
    "dispatcher_hold_ns",
    "clock",
];

/// The configuration a scheduler was created with; `simulated` says which clock it runs on.
pub(crate) fn scheduler_config_dict<'py>(
    py: Python<'py>,
    c: &SchedulerConfig,
    simulated: bool,
) -> PyResult<Bound<'py, PyDict>> {
    // finished_log is not a constructor argument in Python (the default always applies).
    let SchedulerConfig {
        u_max,
        quantum_ns,
        safety_margin_ns,
        ewma_alpha,
        finished_log: _,
        max_chunks_in_flight,
        dispatcher_busy_cap,
        dispatcher_hold_ns,
    } = *c;
    let d = PyDict::new(py);
    d.set_item("u_max", u_max)?;
    d.set_item("quantum_ns", quantum_ns)?;
    d.set_item("safety_margin_ns", safety_margin_ns)?;
    d.set_item("ewma_alpha", ewma_alpha)?;
    d.set_item("max_chunks_in_flight", max_chunks_in_flight)?;
    d.set_item("dispatcher_busy_cap", dispatcher_busy_cap)?;
    d.set_item("dispatcher_hold_ns", dispatcher_hold_ns)?;
    d.set_item("clock", if simulated { "simulated" } else { "monotonic" })?;
    Ok(d)
}

const ADMISSION_FIGURES_FIELDS: &[&str] = &[
    "stream_utilisation",
    "current_total",
    "bound",
    "stream_cost_ns",
    "cost_sum_ns",
    "safety_margin_ns",
    "shortest_deadline_ns",
    "latency_excess_ns",
    "phased_phase_ns",
    "phased_period_ns",
    "phased_cost_ns",
    "phased_ahead_ns",
    "dispatcher_share",
    "dispatcher_hold_ns",
    "dispatch_ns",
    "dispatch_counted_ns",
    "tail_reach_ns",
];
/// Present only when the response bound with release phases refused the stream (`phased_*`),
/// where the device model counted the dispatcher (`dispatcher_*`, `dispatch_*`), or for a
/// latency tail (`tail_reach_ns`).
const ADMISSION_FIGURES_OPTIONAL: &[&str] = &[
    "phased_phase_ns",
    "phased_period_ns",
    "phased_cost_ns",
    "phased_ahead_ns",
    "dispatcher_share",
    "dispatcher_hold_ns",
    "dispatch_ns",
    "dispatch_counted_ns",
    "tail_reach_ns",
];

/// The figures behind a refusal (`AdmissionRefused.figures`; each is also an attribute).
pub(crate) fn admission_figures_dict<'py>(py: Python<'py>, r: &AdmissionRefused) -> PyResult<Bound<'py, PyDict>> {
    // stream and reason are attributes of the exception, not figures.
    let AdmissionRefused {
        stream: _,
        reason: _,
        stream_utilisation,
        current_total,
        bound,
        stream_cost_ns,
        cost_sum_ns,
        safety_margin_ns,
        shortest_deadline_ns,
        latency_excess_ns,
        phased,
        dispatcher,
        tail_reach_ns,
    } = r;
    let d = PyDict::new(py);
    d.set_item("stream_utilisation", stream_utilisation)?;
    d.set_item("current_total", current_total)?;
    d.set_item("bound", bound)?;
    d.set_item("stream_cost_ns", stream_cost_ns)?;
    d.set_item("cost_sum_ns", cost_sum_ns)?;
    d.set_item("safety_margin_ns", safety_margin_ns)?;
    d.set_item("shortest_deadline_ns", shortest_deadline_ns)?;
    d.set_item("latency_excess_ns", latency_excess_ns)?;
    if let Some(b) = phased {
        d.set_item("phased_phase_ns", b.phase_ns)?;
        d.set_item("phased_period_ns", b.period_ns)?;
        d.set_item("phased_cost_ns", b.cost_ns)?;
        d.set_item("phased_ahead_ns", b.ahead_ns)?;
    }
    if let Some(c) = dispatcher {
        d.set_item("dispatcher_share", c.share)?;
        d.set_item("dispatcher_hold_ns", c.hold_ns)?;
        d.set_item("dispatch_ns", c.dispatch_ns)?;
        d.set_item("dispatch_counted_ns", c.counted_ns)?;
    }
    if let Some(reach) = tail_reach_ns {
        d.set_item("tail_reach_ns", reach.get())?;
    }
    Ok(d)
}

const ADMITTED_FIELDS: &[&str] = &["stream_utilisation", "realtime_total", "reserved_total"];

pub(crate) fn admitted_dict<'py>(py: Python<'py>, a: &Admitted) -> PyResult<Bound<'py, PyDict>> {
    let Admitted { stream_utilisation, realtime_total, reserved_total } = *a;
    let d = PyDict::new(py);
    d.set_item("stream_utilisation", stream_utilisation)?;
    d.set_item("realtime_total", realtime_total)?;
    d.set_item("reserved_total", reserved_total)?;
    Ok(d)
}

const STREAM_ADMISSION_FIELDS: &[&str] =
    &["stream", "cost_ns", "device_cost_ns", "dispatch_ns", "dispatch_counted_ns", "dispatcher_share", "tail_reach_ns"];

/// What admission counts for one admitted stream (`Scheduler.stream_admission`).
pub(crate) fn stream_admission_dict<'py>(py: Python<'py>, a: &StreamAdmission) -> PyResult<Bound<'py, PyDict>> {
    let StreamAdmission {
        stream,
        cost_ns,
        device_cost_ns,
        dispatch_ns,
        dispatch_counted_ns,
        dispatcher_share,
        tail_reach_ns,
    } = a;
    let d = PyDict::new(py);
    d.set_item("stream", stream.as_str())?;
    d.set_item("cost_ns", cost_ns)?;
    d.set_item("device_cost_ns", device_cost_ns)?;
    d.set_item("dispatch_ns", dispatch_ns)?;
    d.set_item("dispatch_counted_ns", dispatch_counted_ns)?;
    d.set_item("dispatcher_share", dispatcher_share)?;
    d.set_item("tail_reach_ns", tail_reach_ns)?;
    Ok(d)
}

const BLOCK_INFO_FIELDS: &[&str] = &["block", "bytes", "requested", "state"];

pub(crate) fn block_info_dict<'py>(py: Python<'py>, info: &BlockInfo) -> PyResult<Bound<'py, PyDict>> {
    let BlockInfo { id, bytes, requested, state } = *info;
    let d = PyDict::new(py);
    d.set_item("block", id)?;
    d.set_item("bytes", bytes)?;
    d.set_item("requested", requested)?;
    d.set_item("state", if state == BlockState::InUse { "in_use" } else { "cached" })?;
    Ok(d)
}

const POOL_STATS_FIELDS: &[&str] = &[
    "hits",
    "misses",
    "evictions",
    "bytes_in_use",
    "bytes_cached",
    "blocks_in_use",
    "blocks_cached",
    "bytes_requested_in_use",
    "peak_bytes_in_use",
    "peak_bytes_reserved",
    "cache_budget_bytes",
    "device_budget_bytes",
    "to_free",
];

/// A pool's figures; `to_free` is the length of the handle's queue of evicted ids.
pub(crate) fn pool_stats_dict<'py>(py: Python<'py>, s: &PoolStats, to_free: usize) -> PyResult<Bound<'py, PyDict>> {
    let PoolStats {
        hits,
        misses,
        evictions,
        bytes_in_use,
        bytes_cached,
        blocks_in_use,
        blocks_cached,
        bytes_requested_in_use,
        peak_bytes_in_use,
        peak_bytes_reserved,
        cache_budget_bytes,
        device_budget_bytes,
    } = *s;
    let d = PyDict::new(py);
    d.set_item("hits", hits)?;
    d.set_item("misses", misses)?;
    d.set_item("evictions", evictions)?;
    d.set_item("bytes_in_use", bytes_in_use)?;
    d.set_item("bytes_cached", bytes_cached)?;
    d.set_item("blocks_in_use", blocks_in_use)?;
    d.set_item("blocks_cached", blocks_cached)?;
    d.set_item("bytes_requested_in_use", bytes_requested_in_use)?;
    d.set_item("peak_bytes_in_use", peak_bytes_in_use)?;
    d.set_item("peak_bytes_reserved", peak_bytes_reserved)?;
    d.set_item("cache_budget_bytes", cache_budget_bytes)?;
    d.set_item("device_budget_bytes", if device_budget_bytes == 0 { None } else { Some(device_budget_bytes) })?;
    d.set_item("to_free", to_free)?;
    Ok(d)
}
