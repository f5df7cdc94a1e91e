//! Per-stream accounting: latency histogram, outcome counters, device busy time.

use crate::histogram::{HistogramSummary, LatencyHistogram};

use super::registry::{Admission, QosKind, Stream, StreamId};

/// Running figures of one stream.
#[derive(Clone, Debug, Default)]
pub struct StreamAccounting {
    /// Release-to-finish latency of every finished block (completed or missed).
    pub latency: LatencyHistogram,
    pub submitted: u64,
    /// Finished by their deadline (or without one).
    pub completed: u64,
    /// Finished after their deadline.
    pub missed: u64,
    pub dropped: u64,
    pub cancelled: u64,
    /// Launches (whole realtime blocks count as one chunk).
    pub chunks: u64,
    /// Sum of measured device time reported at completion.
    pub busy_ns: u64,
    pub first_release_ns: Option<u64>,
    pub last_finish_ns: Option<u64>,
}

impl StreamAccounting {
    pub fn finished(&self) -> u64 {
        self.completed + self.missed
    }

    /// Finished blocks per second between the first release and the last finish.
    pub fn achieved_rate_hz(&self) -> f64 {
        match (self.first_release_ns, self.last_finish_ns) {
            (Some(a), Some(b)) if b > a => self.finished() as f64 * 1e9 / (b - a) as f64,
            _ => 0.0,
        }
    }
}

/// A snapshot of one stream, for callers.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamStats {
    pub id: StreamId,
    pub name: String,
    pub class: QosKind,
    pub admitted: bool,
    pub period_ns: Option<u64>,
    pub deadline_ns: Option<u64>,
    pub min_rate_hz: Option<f64>,
    pub units_per_block: u32,
    /// Cost used for admission and pacing (larger of declared and measured).
    pub cost_ns: Option<u64>,
    pub declared_cost_ns: Option<u64>,
    pub measured_cost_ns: Option<u64>,
    /// Declared own latency of a block alone (realtime; the response bound's `L_i`).
    pub declared_latency_ns: Option<u64>,
    pub measured_cost_max_ns: u64,
    pub cost_samples: u64,
    /// Share of the device the stream reserves at its current cost (0 if not admitted).
    pub utilisation: f64,
    pub submitted: u64,
    pub completed: u64,
    pub missed: u64,
    pub dropped: u64,
    pub cancelled: u64,
    pub live: u64,
    pub chunks: u64,
    pub busy_ns: u64,
    pub achieved_rate_hz: f64,
    pub latency: HistogramSummary,
}

impl StreamStats {
    pub fn of(stream: &Stream) -> StreamStats {
        let acc = &stream.accounting;
        let qos = &stream.spec.qos;
        StreamStats {
            id: stream.id,
            name: stream.spec.name.clone(),
            class: qos.kind(),
            admitted: stream.admission == Admission::Admitted,
            period_ns: qos.period_ns(),
            deadline_ns: qos.deadline_ns(),
            min_rate_hz: qos.min_rate_hz(),
            units_per_block: stream.spec.units_per_block,
            cost_ns: stream.cost.block_cost_ns(),
            declared_cost_ns: stream.cost.declared_ns,
            measured_cost_ns: stream.cost.measured_ns(),
            declared_latency_ns: stream.spec.latency_ns,
            measured_cost_max_ns: stream.cost.measured_max_ns,
            cost_samples: stream.cost.samples,
            utilisation: stream.reserved_utilisation(),
            submitted: acc.submitted,
            completed: acc.completed,
            missed: acc.missed,
            dropped: acc.dropped,
            cancelled: acc.cancelled,
            live: stream.queue.len() as u64,
            chunks: acc.chunks,
            busy_ns: acc.busy_ns,
            achieved_rate_hz: acc.achieved_rate_hz(),
            latency: acc.latency.summary(),
        }
    }
}

/// A snapshot of the whole scheduler.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerStats {
    pub now_ns: u64,
    pub u_max: f64,
    /// Σ cost/period over admitted realtime streams, at current costs.
    pub realtime_utilisation: f64,
    /// Σ cost·min_rate over admitted throughput streams.
    pub throughput_reserved: f64,
    /// Realtime costs have grown past `u_max` since admission.
    pub over_bound: bool,
    pub launches: u64,
    pub waits: u64,
    pub idles: u64,
    /// Non-realtime chunks held back by the pacing rule (counted once per `next` call).
    pub paced: u64,
    pub live_tasks: u64,
    pub in_flight: u64,
    pub device_free_estimate_ns: u64,
    pub streams: Vec<StreamStats>,
}
