//! Streams: registration, admission of a calibrated stream, and cost updates.

use super::admission::{self, Candidate, RealtimeLoad};
use super::registry;
use super::{
    Admission, Admitted, Qos, QosKind, SchedError, Scheduler, StreamAccounting, StreamId, StreamSpec, StreamStats,
    TaskId, TaskState,
};

impl Scheduler {
    /// Register a stream. Streams that reserve device time (realtime; throughput with a
    /// minimum rate) and declare a cost are admitted now or refused; without a cost they
    /// start in calibration (run as best effort) until [`admit`](Self::admit).
    pub fn register_stream(&mut self, spec: StreamSpec) -> Result<StreamId, SchedError> {
        if spec.name.trim().is_empty() {
            return Err(SchedError::InvalidArgument("stream name must not be empty".into()));
        }
        spec.qos.validate().map_err(|m| SchedError::InvalidArgument(format!("stream '{}': {m}", spec.name)))?;
        if spec.units_per_block == 0 {
            return Err(SchedError::InvalidArgument(format!("stream '{}': units_per_block must be >= 1", spec.name)));
        }
        if spec.cost_ns == Some(0) {
            return Err(SchedError::InvalidArgument(format!(
                "stream '{}': cost_ns must be > 0 (leave it unset to measure it)",
                spec.name
            )));
        }
        if spec.latency_ns == Some(0) {
            return Err(SchedError::InvalidArgument(format!(
                "stream '{}': latency_ns must be > 0 (leave it unset when it is the cost)",
                spec.name
            )));
        }
        if spec.latency_ns.is_some() && spec.qos.kind() != QosKind::Realtime {
            return Err(SchedError::InvalidArgument(format!(
                "stream '{}': latency_ns applies to realtime streams only (the response bound)",
                spec.name
            )));
        }
        if let Some(phase) = spec.phase_ns {
            match spec.qos {
                Qos::Realtime { period_ns, .. } if phase < period_ns => {}
                Qos::Realtime { period_ns, .. } => {
                    return Err(SchedError::InvalidArgument(format!(
                        "stream '{}': phase_ns {phase} must be below its period {period_ns} ns",
                        spec.name
                    )))
                }
                _ => {
                    return Err(SchedError::InvalidArgument(format!(
                        "stream '{}': phase_ns applies to realtime streams only (their release phase)",
                        spec.name
                    )))
                }
            }
        }
        if self.registry.contains_name(&spec.name) {
            return Err(SchedError::DuplicateStream(spec.name));
        }
        let admission = if !spec.qos.needs_admission() {
            Admission::Admitted
        } else if let Some(cost) = spec.cost_ns {
            let candidate = candidate_of(&spec.qos, cost, spec.latency_ns, spec.phase_ns);
            admission::check(&self.admission_policy(), &self.current_load(), &spec.name, &candidate)?;
            Admission::Admitted
        } else {
            Admission::Calibrating
        };
        Ok(self.registry.insert(spec, admission, StreamAccounting::default()))
    }

    /// Remove a stream; its live tasks are cancelled. Returns its final figures.
    pub fn unregister_stream(&mut self, stream: StreamId) -> Result<StreamStats, SchedError> {
        let ids: Vec<TaskId> = self.stream(stream)?.queue.iter().copied().collect();
        for id in ids {
            self.finish_early(id, TaskState::Cancelled)?;
        }
        let removed = self.registry.remove(stream).ok_or(SchedError::UnknownStream(stream))?;
        Ok(StreamStats::of(&removed))
    }

    /// Admit a stream that was registered without a cost, using its measured cost.
    /// On refusal the stream stays in calibration (best effort); unregister it or retry.
    pub fn admit(&mut self, stream: StreamId) -> Result<Admitted, SchedError> {
        let policy = self.admission_policy();
        let current = self.current_load();
        let s = self.stream(stream)?;
        if s.admission == Admission::Admitted {
            let share = s.reserved_utilisation();
            return Ok(Admitted {
                stream_utilisation: share,
                realtime_total: current.realtime_utilisation(),
                reserved_total: current.realtime_utilisation() + current.reserved_throughput,
            });
        }
        let cost = s.cost.block_cost_ns().ok_or_else(|| SchedError::NoCostSample { stream: s.spec.name.clone() })?;
        let candidate = candidate_of(&s.spec.qos, cost, s.spec.latency_ns, s.spec.phase_ns);
        let admitted = admission::check(&policy, &current, &s.spec.name, &candidate)?;
        let is_rt = s.kind() == QosKind::Realtime;
        let ready: Vec<(u64, TaskId)> = if is_rt {
            s.queue
                .iter()
                .filter_map(|id| self.tasks.get(id))
                .filter(|t| t.state() == TaskState::Ready)
                .map(|t| (t.deadline_ns.unwrap_or(u64::MAX), t.id))
                .collect()
        } else {
            Vec::new()
        };
        for (deadline, id) in ready {
            self.rt_ready.push(deadline, id);
        }
        self.stream_mut(stream)?.admission = Admission::Admitted;
        Ok(admitted)
    }

    /// Fold one measured whole-block cost into the stream's EWMA; returns the cost now used.
    pub fn update_cost(&mut self, stream: StreamId, measured_ns: u64) -> Result<u64, SchedError> {
        let alpha = self.config.ewma_alpha;
        let s = self.stream_mut(stream)?;
        s.cost.observe(measured_ns, alpha);
        Ok(s.cost.block_cost_ns().unwrap_or(measured_ns))
    }

    /// Feed calibration measurements (whole-block costs) in order; returns the cost now used.
    pub fn calibrate(&mut self, stream: StreamId, samples_ns: &[u64]) -> Result<u64, SchedError> {
        if samples_ns.is_empty() {
            return Err(SchedError::InvalidArgument("calibrate needs at least one measured cost".into()));
        }
        let mut cost = 0;
        for &sample in samples_ns {
            cost = self.update_cost(stream, sample)?;
        }
        Ok(cost)
    }

    pub fn stream_id(&self, name: &str) -> Option<StreamId> {
        self.registry.id_of(name)
    }

    pub fn stream_stats(&self, stream: StreamId) -> Result<StreamStats, SchedError> {
        Ok(StreamStats::of(self.stream(stream)?))
    }
}

fn candidate_of(qos: &Qos, cost_ns: u64, latency_ns: Option<u64>, phase_ns: Option<u64>) -> Candidate {
    match *qos {
        Qos::Realtime { period_ns, deadline_ns } => Candidate::Realtime(RealtimeLoad {
            cost_ns,
            period_ns,
            deadline_ns,
            latency_excess_ns: registry::latency_excess(latency_ns, cost_ns),
            phase_ns,
        }),
        _ => Candidate::Throughput { cost_ns, utilisation: registry::utilisation_of(qos, Some(cost_ns)) },
    }
}
