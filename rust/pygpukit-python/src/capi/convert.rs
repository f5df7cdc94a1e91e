//! Core records to their C structs (one function per record), and C inputs to core types.

use std::ffi::CStr;
use std::mem::size_of;

use pygpukit_core::histogram::HistogramSummary;
use pygpukit_core::memory::PoolStats;
use pygpukit_core::scheduler::{
    AdmissionRefused, Decision, Qos, Scheduler, SchedulerConfig, SchedulerStats, StreamSpec, StreamStats,
};

use super::abi::*;

impl GkSchedConfig {
    /// The documented defaults, on the monotonic clock.
    pub fn defaults() -> Self {
        let d = SchedulerConfig::default();
        GkSchedConfig {
            struct_size: size_of::<GkSchedConfig>() as u32,
            clock: GK_CLOCK_MONOTONIC,
            u_max: d.u_max,
            quantum_ns: d.quantum_ns,
            safety_margin_ns: d.safety_margin_ns,
            ewma_alpha: d.ewma_alpha,
            simulated_start_ns: 0,
            max_chunks_in_flight: d.max_chunks_in_flight,
        }
    }
}

pub(super) fn resolve(t: u64, s: &Scheduler) -> u64 {
    if t == GK_TIME_NOW {
        s.now()
    } else {
        t
    }
}

pub(super) fn opt_time(t: Option<u64>) -> u64 {
    t.unwrap_or(GK_NO_TIME)
}

/// Fill `out` (if not null) from a refusal.
pub(super) unsafe fn write_refusal(out: *mut GkAdmissionRefusal, r: &AdmissionRefused) {
    if !out.is_null() {
        *out = refusal_to_c(r);
    }
}

pub fn refusal_to_c(r: &AdmissionRefused) -> GkAdmissionRefusal {
    GkAdmissionRefusal {
        reason: r.reason as i32,
        reserved0: 0,
        stream_utilisation: r.stream_utilisation,
        current_total: r.current_total,
        bound: r.bound,
        stream_cost_ns: r.stream_cost_ns,
        cost_sum_ns: r.cost_sum_ns,
        safety_margin_ns: r.safety_margin_ns,
        shortest_deadline_ns: r.shortest_deadline_ns,
    }
}

pub fn decision_to_c(d: &Decision) -> GkDecision {
    match *d {
        Decision::Launch(l) => GkDecision {
            kind: GK_DECISION_LAUNCH,
            stream: l.stream,
            task: l.task,
            chunk_begin: l.chunk_begin,
            chunk_end: l.chunk_end,
            deadline_ns: opt_time(l.deadline_ns),
            est_cost_ns: l.est_cost_ns,
            wait_until_ns: GK_NO_TIME,
            is_final: u32::from(l.is_final),
            reserved0: 0,
        },
        Decision::WaitUntil(t) => {
            GkDecision { kind: GK_DECISION_WAIT, deadline_ns: GK_NO_TIME, wait_until_ns: t, ..GkDecision::default() }
        }
        Decision::Idle => GkDecision {
            kind: GK_DECISION_IDLE,
            deadline_ns: GK_NO_TIME,
            wait_until_ns: GK_NO_TIME,
            ..GkDecision::default()
        },
    }
}

pub(super) fn summary_to_c(s: &HistogramSummary) -> GkLatencySummary {
    GkLatencySummary {
        count: s.count,
        min_ns: s.min,
        max_ns: s.max,
        p50_ns: s.p50,
        p90_ns: s.p90,
        p99_ns: s.p99,
        p999_ns: s.p999,
        clamped: s.clamped,
        mean_ns: s.mean,
    }
}

pub fn stream_stats_to_c(s: &StreamStats) -> GkStreamStats {
    GkStreamStats {
        stream: s.id,
        qos: s.class as i32,
        admitted: u32::from(s.admitted),
        units_per_block: s.units_per_block,
        period_ns: opt_time(s.period_ns),
        deadline_ns: opt_time(s.deadline_ns),
        min_rate_hz: s.min_rate_hz.unwrap_or(0.0),
        cost_ns: opt_time(s.cost_ns),
        declared_cost_ns: opt_time(s.declared_cost_ns),
        measured_cost_ns: opt_time(s.measured_cost_ns),
        measured_cost_max_ns: s.measured_cost_max_ns,
        cost_samples: s.cost_samples,
        utilisation: s.utilisation,
        submitted: s.submitted,
        completed: s.completed,
        missed: s.missed,
        dropped: s.dropped,
        cancelled: s.cancelled,
        live: s.live,
        chunks: s.chunks,
        busy_ns: s.busy_ns,
        achieved_rate_hz: s.achieved_rate_hz,
        latency: summary_to_c(&s.latency),
    }
}

pub fn sched_stats_to_c(s: &SchedulerStats) -> GkSchedStats {
    GkSchedStats {
        now_ns: s.now_ns,
        u_max: s.u_max,
        realtime_utilisation: s.realtime_utilisation,
        throughput_reserved: s.throughput_reserved,
        over_bound: u32::from(s.over_bound),
        streams: s.streams.len() as u32,
        launches: s.launches,
        waits: s.waits,
        idles: s.idles,
        paced: s.paced,
        live_tasks: s.live_tasks,
        in_flight: s.in_flight,
        device_free_estimate_ns: s.device_free_estimate_ns,
    }
}

pub fn pool_stats_to_c(s: &PoolStats, to_free: usize) -> GkPoolStats {
    GkPoolStats {
        hits: s.hits,
        misses: s.misses,
        evictions: s.evictions,
        bytes_in_use: s.bytes_in_use,
        bytes_cached: s.bytes_cached,
        blocks_in_use: s.blocks_in_use,
        blocks_cached: s.blocks_cached,
        bytes_requested_in_use: s.bytes_requested_in_use,
        peak_bytes_in_use: s.peak_bytes_in_use,
        peak_bytes_reserved: s.peak_bytes_reserved,
        cache_budget_bytes: s.cache_budget_bytes,
        device_budget_bytes: s.device_budget_bytes,
        to_free: to_free as u64,
    }
}

/// Turn a C stream spec into the core's, or say what is wrong with it.
pub(super) unsafe fn stream_spec_from_c(spec: &GkStreamSpec) -> Result<StreamSpec, String> {
    if spec.name.is_null() {
        return Err("spec->name must not be NULL".into());
    }
    let name = CStr::from_ptr(spec.name).to_str().map_err(|_| "spec->name is not valid UTF-8".to_string())?.to_string();
    let optional = |d: u64| if d == 0 { None } else { Some(d) };
    let qos = match spec.qos {
        0 => Qos::realtime(spec.period_ns, optional(spec.deadline_ns)),
        1 => {
            let rate = spec.min_rate_hz;
            if !(rate.is_finite() && rate >= 0.0) {
                return Err(format!("stream '{name}': min_rate_hz must be a finite number >= 0 (0 = none), got {rate}"));
            }
            Qos::Throughput { min_rate_hz: if rate > 0.0 { Some(rate) } else { None }, deadline_ns: optional(spec.deadline_ns) }
        }
        2 => Qos::BestEffort { deadline_ns: optional(spec.deadline_ns) },
        other => {
            return Err(format!(
                "stream '{name}': qos {other} is not one of GK_QOS_REALTIME (0), GK_QOS_THROUGHPUT (1), GK_QOS_BEST_EFFORT (2)"
            ))
        }
    };
    // the C ABI declares no latency nor phase (v1 spec): the response bound takes the cost for
    // the latency and the critical instant for the phase; nor the measurements the device model
    // counts beside the cost (the dispatcher's work, a latency tail): its streams have none
    Ok(StreamSpec {
        name,
        qos,
        cost_ns: optional(spec.cost_ns),
        latency_ns: None,
        units_per_block: spec.units_per_block,
        phase_ns: None,
        dispatch_ns: None,
        tail_reach_ns: None,
    })
}
