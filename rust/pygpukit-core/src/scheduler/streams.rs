//! Streams: registration, admission of a calibrated stream, and cost updates.

use super::admission::{AdmissionRefused, Candidate, RealtimeLoad, StreamAdmission};
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
        for (what, value) in [("dispatch_ns", spec.dispatch_ns), ("tail_reach_ns", spec.tail_reach_ns)] {
            match value {
                Some(0) => {
                    return Err(SchedError::InvalidArgument(format!(
                        "stream '{}': {what} must be > 0 when given",
                        spec.name
                    )))
                }
                Some(_) if spec.qos.kind() != QosKind::Realtime => {
                    return Err(SchedError::InvalidArgument(format!(
                        "stream '{}': {what} applies to realtime streams only (the device model)",
                        spec.name
                    )))
                }
                _ => {}
            }
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
            let candidate = candidate_of(&spec, cost);
            self.policy.check(&self.current_load(), &spec.name, &candidate)?;
            Admission::Admitted
        } else {
            Admission::Calibrating
        };
        let id = self.registry.insert(spec, admission, StreamAccounting::default());
        self.recount_dispatcher_work();
        Ok(id)
    }

    /// Remove a stream; its live tasks are cancelled. Returns its final figures.
    pub fn unregister_stream(&mut self, stream: StreamId) -> Result<StreamStats, SchedError> {
        let ids: Vec<TaskId> = self.stream(stream)?.queue.iter().copied().collect();
        for id in ids {
            self.finish_early(id, TaskState::Cancelled)?;
        }
        let removed = self.registry.remove(stream).ok_or(SchedError::UnknownStream(stream))?;
        self.recount_dispatcher_work();
        Ok(StreamStats::of(&removed))
    }

    /// Admit a stream that was registered without a cost, using its measured cost.
    /// On refusal the stream stays in calibration (best effort); unregister it or retry.
    pub fn admit(&mut self, stream: StreamId) -> Result<Admitted, SchedError> {
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
        let cost = s.device_cost_ns().ok_or_else(|| SchedError::NoCostSample { stream: s.spec.name.clone() })?;
        let candidate = candidate_of(&s.spec, cost);
        let admitted = self.policy.check(&current, &s.spec.name, &candidate)?;
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
        self.recount_dispatcher_work();
        Ok(admitted)
    }

    /// May the admitted realtime streams have their dispatcher work counted (device_model.rs)?
    /// `Ok`: the dispatcher share at their shortest deadline; `Err`: `dispatcher_hold`.
    pub fn check_dispatcher_hold(&self) -> Result<f64, AdmissionRefused> {
        self.policy.check_dispatcher_hold(&self.realtime_named())
    }

    /// Do the admitted realtime streams' measured latency tails fit their deadlines
    /// (device_model.rs)? `Err`: `latency_tail`, naming the last stream that does not.
    pub fn check_latency_tails(&self) -> Result<(), AdmissionRefused> {
        self.policy.check_latency_tails(&self.realtime_named())
    }

    /// The share of its time the dispatcher may be busy with realtime blocks, at the shortest
    /// deadline `deadline_ns` (None: the admitted realtime streams' shortest).
    pub fn dispatcher_share(&self, deadline_ns: Option<u64>) -> f64 {
        let shortest = deadline_ns.or_else(|| self.realtime_named().iter().map(|(_, l)| l.deadline_ns).min());
        self.policy.dispatcher_share(shortest)
    }

    /// The block cost the policy counts for a realtime stream of device time `cost_ns` and
    /// dispatcher work `dispatch_ns` at the dispatcher share of `deadline_ns` (None: the admitted
    /// realtime streams' shortest): the larger of the two, the work as counted. None where that
    /// share leaves nothing of the dispatcher (the deadline is within its hold).
    pub fn counted_cost_ns(&self, cost_ns: u64, dispatch_ns: Option<u64>, deadline_ns: Option<u64>) -> Option<u64> {
        let Some(work) = dispatch_ns else { return Some(cost_ns) };
        let share = self.dispatcher_share(deadline_ns);
        self.policy.counted_dispatch_ns(work, share).map(|counted| cost_ns.max(counted))
    }

    /// What admission counts for an admitted stream: its cost, its device time and its
    /// dispatcher work as measured and as counted, the device's dispatcher share, its tail.
    pub fn stream_admission(&self, stream: StreamId) -> Result<StreamAdmission, SchedError> {
        let share = self.dispatcher_share(None);
        let s = self.stream(stream)?;
        Ok(StreamAdmission {
            stream: s.spec.name.clone(),
            cost_ns: s.cost.block_cost_ns(),
            device_cost_ns: s.device_cost_ns(),
            dispatch_ns: s.spec.dispatch_ns,
            dispatch_counted_ns: s.spec.dispatch_ns.and_then(|w| self.policy.counted_dispatch_ns(w, share)),
            dispatcher_share: share,
            tail_reach_ns: s.spec.tail_reach_ns,
        })
    }

    /// Streams whose dispatcher work counts are admitted and paced by the larger of their cost
    /// and that work as counted at the device's dispatcher share, which moves with its shortest
    /// realtime deadline: count it again after every change of the admitted set.
    fn recount_dispatcher_work(&mut self) {
        let share = self.dispatcher_share(None);
        let counted: Vec<(StreamId, Option<u64>)> = self
            .registry
            .iter()
            .filter(|s| s.is_admitted_realtime())
            .filter_map(|s| s.spec.dispatch_ns.map(|w| (s.id, self.policy.counted_dispatch_ns(w, share))))
            .collect();
        for (id, work) in counted {
            if let Some(s) = self.registry.get_mut(id) {
                let declared = s.spec.cost_ns.unwrap_or(0).max(work.unwrap_or(0));
                s.cost.declared_ns = (declared > 0).then_some(declared);
            }
        }
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

/// The stream asking to be admitted at device time `cost_ns` per block.
fn candidate_of(spec: &StreamSpec, cost_ns: u64) -> Candidate {
    match spec.qos {
        Qos::Realtime { period_ns, deadline_ns } => Candidate::Realtime(RealtimeLoad {
            cost_ns,
            period_ns,
            deadline_ns,
            latency_excess_ns: registry::latency_excess(spec.latency_ns, cost_ns),
            phase_ns: spec.phase_ns,
            dispatch_ns: spec.dispatch_ns,
            tail_reach_ns: spec.tail_reach_ns,
        }),
        _ => Candidate::Throughput { cost_ns, utilisation: registry::utilisation_of(&spec.qos, Some(cost_ns)) },
    }
}
