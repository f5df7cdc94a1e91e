//! Streams known to the scheduler: their QoS class, cost model and admission status.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

use super::accounting::StreamAccounting;
use super::task::TaskId;

/// Stream identifier, unique per scheduler, starting at 1 (0 means "none" in the C ABI).
pub type StreamId = u32;

/// Latency class of a stream. Times are nanoseconds; deadlines are relative to a block's release.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Qos {
    /// One block every `period_ns`; each must finish within `deadline_ns` of its release.
    Realtime { period_ns: u64, deadline_ns: u64 },
    /// Keep at least `min_rate_hz` blocks per second when set (reserved at admission).
    /// `deadline_ns`, when set, is only used to count misses.
    Throughput { min_rate_hz: Option<f64>, deadline_ns: Option<u64> },
    /// Whatever the device has left. `deadline_ns`, when set, is only used to count misses.
    BestEffort { deadline_ns: Option<u64> },
}

/// The class without its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum QosKind {
    Realtime = 0,
    Throughput = 1,
    BestEffort = 2,
}

impl QosKind {
    pub fn name(self) -> &'static str {
        match self {
            QosKind::Realtime => "realtime",
            QosKind::Throughput => "throughput",
            QosKind::BestEffort => "best_effort",
        }
    }
}

impl fmt::Display for QosKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Qos {
    pub fn realtime(period_ns: u64, deadline_ns: Option<u64>) -> Qos {
        Qos::Realtime { period_ns, deadline_ns: deadline_ns.unwrap_or(period_ns) }
    }

    pub fn kind(&self) -> QosKind {
        match self {
            Qos::Realtime { .. } => QosKind::Realtime,
            Qos::Throughput { .. } => QosKind::Throughput,
            Qos::BestEffort { .. } => QosKind::BestEffort,
        }
    }

    /// Relative deadline used to judge misses, if any.
    pub fn deadline_ns(&self) -> Option<u64> {
        match *self {
            Qos::Realtime { deadline_ns, .. } => Some(deadline_ns),
            Qos::Throughput { deadline_ns, .. } | Qos::BestEffort { deadline_ns } => deadline_ns,
        }
    }

    pub fn period_ns(&self) -> Option<u64> {
        match *self {
            Qos::Realtime { period_ns, .. } => Some(period_ns),
            _ => None,
        }
    }

    pub fn min_rate_hz(&self) -> Option<f64> {
        match *self {
            Qos::Throughput { min_rate_hz, .. } => min_rate_hz,
            _ => None,
        }
    }

    /// Whether the stream needs admission (a share of the device reserved for it).
    pub fn needs_admission(&self) -> bool {
        match self {
            Qos::Realtime { .. } => true,
            Qos::Throughput { min_rate_hz, .. } => min_rate_hz.is_some(),
            Qos::BestEffort { .. } => false,
        }
    }

    /// Check the parameters; the message says which one is wrong and how to fix it.
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Qos::Realtime { period_ns, deadline_ns } => {
                if period_ns == 0 {
                    return Err("realtime period_ns must be > 0 (block_size / sample_rate)".into());
                }
                if deadline_ns == 0 {
                    return Err("realtime deadline_ns must be > 0 (default: the period)".into());
                }
            }
            Qos::Throughput { min_rate_hz, deadline_ns } => {
                if let Some(rate) = min_rate_hz {
                    if !(rate.is_finite() && rate > 0.0) {
                        return Err(format!(
                            "throughput min_rate_hz must be a finite number > 0 (blocks per second), got {rate}"
                        ));
                    }
                }
                if deadline_ns == Some(0) {
                    return Err("deadline_ns must be > 0 when given".into());
                }
            }
            Qos::BestEffort { deadline_ns } => {
                if deadline_ns == Some(0) {
                    return Err("deadline_ns must be > 0 when given".into());
                }
            }
        }
        Ok(())
    }
}

/// What a caller declares when registering a stream.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamSpec {
    pub name: String,
    pub qos: Qos,
    /// Declared device time of one whole block; `None` = measure it (the stream starts in
    /// calibration and needs [`Scheduler::admit`](super::Scheduler::admit) if its class reserves time).
    pub cost_ns: Option<u64>,
    /// Realtime: one block's own latency alone, release to done, where it is more than its device
    /// time (the host's copies, the launch, the completion wait: work that overlaps other
    /// streams' blocks, so it is not device time). The response bound adds the excess over the
    /// cost to this stream's own wait. `None` = the cost.
    pub latency_ns: Option<u64>,
    /// How many independently launchable units one block has (e.g. FFT frames); chunks are
    /// ranges of units. Realtime blocks are always launched whole.
    pub units_per_block: u32,
    /// Realtime: the offset within its period at which its blocks are released, when its
    /// releases keep one on a clock shared with the other streams (a Session's own pacing);
    /// the response bound then counts only the work that can be in front of it
    /// (admission.rs, *Release phases*). `None` = unknown: any instant.
    pub phase_ns: Option<u64>,
    /// Realtime: the dispatcher's serial work per block among the device's streams, where it was
    /// measured; admission counts it beside the cost (device_model.rs). `None` = not counted.
    pub dispatch_ns: Option<u64>,
    /// Realtime: how far its latency from release reaches, as measured among the device's
    /// streams (device_model.rs, `latency_tail`). `None` = not measured.
    pub tail_reach_ns: Option<u64>,
}

impl StreamSpec {
    pub fn new(name: impl Into<String>, qos: Qos) -> Self {
        StreamSpec {
            name: name.into(),
            qos,
            cost_ns: None,
            latency_ns: None,
            units_per_block: 1,
            phase_ns: None,
            dispatch_ns: None,
            tail_reach_ns: None,
        }
    }

    pub fn with_dispatch(mut self, dispatch_ns: u64) -> Self {
        self.dispatch_ns = Some(dispatch_ns);
        self
    }

    pub fn with_tail_reach(mut self, tail_reach_ns: u64) -> Self {
        self.tail_reach_ns = Some(tail_reach_ns);
        self
    }

    pub fn with_phase(mut self, phase_ns: u64) -> Self {
        self.phase_ns = Some(phase_ns);
        self
    }

    pub fn with_latency(mut self, latency_ns: u64) -> Self {
        self.latency_ns = Some(latency_ns);
        self
    }

    pub fn with_cost(mut self, cost_ns: u64) -> Self {
        self.cost_ns = Some(cost_ns);
        self
    }

    pub fn with_units(mut self, units_per_block: u32) -> Self {
        self.units_per_block = units_per_block;
        self
    }
}

/// Per-block device cost: the declared figure and an EWMA of measured ones.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    pub declared_ns: Option<u64>,
    pub measured_ewma_ns: Option<f64>,
    pub measured_max_ns: u64,
    pub samples: u64,
}

impl CostModel {
    pub fn new(declared_ns: Option<u64>) -> Self {
        CostModel { declared_ns, measured_ewma_ns: None, measured_max_ns: 0, samples: 0 }
    }

    /// Fold one measured whole-block cost into the EWMA (the first sample seeds it).
    pub fn observe(&mut self, block_cost_ns: u64, alpha: f64) {
        let x = block_cost_ns as f64;
        self.measured_ewma_ns = Some(match self.measured_ewma_ns {
            None => x,
            Some(prev) => prev + alpha * (x - prev),
        });
        self.measured_max_ns = self.measured_max_ns.max(block_cost_ns);
        self.samples += 1;
    }

    pub fn measured_ns(&self) -> Option<u64> {
        self.measured_ewma_ns.map(|v| v.round() as u64)
    }

    /// The figure used for admission and pacing: the larger of declared and measured, so a
    /// stream that turns out slower than declared is paced by what it really costs.
    pub fn block_cost_ns(&self) -> Option<u64> {
        match (self.declared_ns, self.measured_ns()) {
            (Some(d), Some(m)) => Some(d.max(m)),
            (d, m) => d.or(m),
        }
    }
}

/// Whether a stream's reservation is in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Counted in the bound; realtime blocks are dispatched EDF.
    Admitted,
    /// Cost not known yet: blocks run as best effort until `admit` succeeds.
    Calibrating,
}

/// A registered stream.
#[derive(Clone, Debug)]
pub struct Stream {
    pub id: StreamId,
    pub spec: StreamSpec,
    pub cost: CostModel,
    pub admission: Admission,
    /// Live tasks in submission order.
    pub queue: VecDeque<TaskId>,
    /// Release time of the latest submitted block.
    pub last_release_ns: Option<u64>,
    /// Virtual deadline of the latest throughput block (rate-based ordering).
    pub last_virtual_deadline_ns: u64,
    pub accounting: StreamAccounting,
}

impl Stream {
    pub fn kind(&self) -> QosKind {
        self.spec.qos.kind()
    }

    /// Dispatched EDF as realtime: a realtime stream whose reservation is in force.
    pub fn is_admitted_realtime(&self) -> bool {
        self.kind() == QosKind::Realtime && self.admission == Admission::Admitted
    }

    /// Share of the device this stream reserves (0 for best effort or while calibrating).
    pub fn reserved_utilisation(&self) -> f64 {
        if self.admission != Admission::Admitted {
            return 0.0;
        }
        utilisation_of(&self.spec.qos, self.cost.block_cost_ns())
    }

    /// Its declared latency beyond its block cost (0 when none is declared or the cost covers it).
    pub fn latency_excess_ns(&self) -> u64 {
        latency_excess(self.spec.latency_ns, self.cost.block_cost_ns().unwrap_or(0))
    }

    /// Its device time per block: the larger of the cost it registered with and the measured
    /// one, before admission counts the dispatcher's work (device_model.rs).
    pub fn device_cost_ns(&self) -> Option<u64> {
        match (self.spec.cost_ns, self.cost.measured_ns()) {
            (Some(d), Some(m)) => Some(d.max(m)),
            (d, m) => d.or(m),
        }
    }
}

/// A declared latency beyond a block cost (the response bound's `E`): 0 without one.
pub fn latency_excess(latency_ns: Option<u64>, cost_ns: u64) -> u64 {
    latency_ns.map_or(0, |l| l.saturating_sub(cost_ns))
}

/// Device share of a class given a block cost: cost/period (realtime), cost*rate (throughput).
pub fn utilisation_of(qos: &Qos, cost_ns: Option<u64>) -> f64 {
    let Some(cost) = cost_ns else { return 0.0 };
    match *qos {
        Qos::Realtime { period_ns, .. } => cost as f64 / period_ns as f64,
        Qos::Throughput { min_rate_hz: Some(rate), .. } => cost as f64 * rate / 1e9,
        _ => 0.0,
    }
}

/// All streams, by id, with a name index.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    streams: BTreeMap<StreamId, Stream>,
    by_name: HashMap<String, StreamId>,
    next_id: StreamId,
}

impl Registry {
    pub fn new() -> Self {
        Registry { streams: BTreeMap::new(), by_name: HashMap::new(), next_id: 1 }
    }

    pub fn contains_name(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    pub fn insert(&mut self, spec: StreamSpec, admission: Admission, accounting: StreamAccounting) -> StreamId {
        let id = self.next_id;
        self.next_id += 1;
        self.by_name.insert(spec.name.clone(), id);
        let cost = CostModel::new(spec.cost_ns);
        self.streams.insert(
            id,
            Stream {
                id,
                spec,
                cost,
                admission,
                queue: VecDeque::new(),
                last_release_ns: None,
                last_virtual_deadline_ns: 0,
                accounting,
            },
        );
        id
    }

    pub fn remove(&mut self, id: StreamId) -> Option<Stream> {
        let stream = self.streams.remove(&id)?;
        self.by_name.remove(&stream.spec.name);
        Some(stream)
    }

    pub fn get(&self, id: StreamId) -> Option<&Stream> {
        self.streams.get(&id)
    }

    pub fn get_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        self.streams.get_mut(&id)
    }

    pub fn id_of(&self, name: &str) -> Option<StreamId> {
        self.by_name.get(name).copied()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Stream> {
        self.streams.values()
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_parameter() {
        assert!(Qos::realtime(0, None).validate().unwrap_err().contains("period_ns"));
        assert!(Qos::Throughput { min_rate_hz: Some(f64::NAN), deadline_ns: None }
            .validate()
            .unwrap_err()
            .contains("min_rate_hz"));
        assert!(Qos::BestEffort { deadline_ns: Some(0) }.validate().is_err());
        assert!(Qos::realtime(5, None).validate().is_ok());
        assert_eq!(Qos::realtime(5, None).deadline_ns(), Some(5));
    }

    #[test]
    fn cost_model_takes_the_larger_of_declared_and_measured() {
        let mut c = CostModel::new(Some(100));
        assert_eq!(c.block_cost_ns(), Some(100));
        c.observe(80, 0.5);
        assert_eq!(c.block_cost_ns(), Some(100));
        c.observe(200, 0.5); // ewma 140
        assert_eq!(c.measured_ns(), Some(140));
        assert_eq!(c.block_cost_ns(), Some(140));
        assert_eq!(c.measured_max_ns, 200);
        assert_eq!(CostModel::new(None).block_cost_ns(), None);
    }

    #[test]
    fn utilisation_per_class() {
        assert_eq!(utilisation_of(&Qos::realtime(1000, None), Some(250)), 0.25);
        let tp = Qos::Throughput { min_rate_hz: Some(1000.0), deadline_ns: None };
        assert!((utilisation_of(&tp, Some(100_000)) - 0.1).abs() < 1e-12);
        assert_eq!(utilisation_of(&Qos::BestEffort { deadline_ns: None }, Some(5)), 0.0);
        assert_eq!(utilisation_of(&Qos::realtime(1000, None), None), 0.0);
    }
}
