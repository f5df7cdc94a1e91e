//! The [`Scheduler`] itself: its state, constructors, statistics, and the lookups the other
//! parts (`streams.rs`, `dispatch.rs`, `completion.rs`) share.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use crate::clock::{Clock, SimulatedClock};

use super::admission::{AdmissionPolicy, CurrentLoad, RealtimeLoad};
use super::device_model::DeviceModel;
use super::edf::EdfQueue;
use super::registry::{self, Registry};
use super::{
    Admission, IllegalTransition, Qos, SchedError, SchedulerConfig, SchedulerStats, StreamId, StreamStats, Task,
    TaskId, TaskState,
};

/// The scheduler. Not thread-safe by itself: wrap it in a `Mutex` to share it.
pub struct Scheduler {
    pub(super) config: SchedulerConfig,
    /// Admission's policy: the device model of `config` unless another was handed in.
    pub(super) policy: Box<dyn AdmissionPolicy>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) registry: Registry,
    pub(super) tasks: HashMap<TaskId, Task>,
    pub(super) pending: BTreeSet<(u64, TaskId)>,
    pub(super) rt_ready: EdfQueue,
    pub(super) finished: VecDeque<(TaskId, TaskState)>,
    pub(super) finished_index: HashMap<TaskId, TaskState>,
    pub(super) next_task: TaskId,
    pub(super) device_free_ns: u64,
    pub(super) in_flight: u64,
    pub(super) launches: u64,
    pub(super) waits: u64,
    pub(super) idles: u64,
    pub(super) paced: u64,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .field("policy", &self.policy)
            .field("streams", &self.registry.len())
            .field("live_tasks", &self.tasks.len())
            .finish()
    }
}

impl Scheduler {
    /// A scheduler whose admission is the [`DeviceModel`] of `config`.
    pub fn new(config: SchedulerConfig, clock: Arc<dyn Clock>) -> Result<Self, SchedError> {
        Self::with_policy(config, clock, Box::new(DeviceModel::from_config(&config)))
    }

    /// A scheduler handed its admission policy.
    pub fn with_policy(
        config: SchedulerConfig,
        clock: Arc<dyn Clock>,
        policy: Box<dyn AdmissionPolicy>,
    ) -> Result<Self, SchedError> {
        config.validate()?;
        Ok(Scheduler {
            config,
            policy,
            clock,
            registry: Registry::new(),
            tasks: HashMap::new(),
            pending: BTreeSet::new(),
            rt_ready: EdfQueue::new(),
            finished: VecDeque::new(),
            finished_index: HashMap::new(),
            next_task: 1,
            device_free_ns: 0,
            in_flight: 0,
            launches: 0,
            waits: 0,
            idles: 0,
            paced: 0,
        })
    }

    /// A scheduler on a fresh simulated clock starting at `start_ns`.
    pub fn simulated(config: SchedulerConfig, start_ns: u64) -> Result<(Self, SimulatedClock), SchedError> {
        let clock = SimulatedClock::new(start_ns);
        Ok((Scheduler::new(config, Arc::new(clock.clone()))?, clock))
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn now(&self) -> u64 {
        self.clock.now_ns()
    }

    /// State of a live or recently finished task.
    pub fn task_state(&self, task: TaskId) -> Option<TaskState> {
        self.tasks.get(&task).map(Task::state).or_else(|| self.finished_index.get(&task).copied())
    }

    pub fn task(&self, task: TaskId) -> Option<&Task> {
        self.tasks.get(&task)
    }

    /// The admission policy it was handed.
    pub fn policy(&self) -> &dyn AdmissionPolicy {
        self.policy.as_ref()
    }

    pub fn stats(&self) -> SchedulerStats {
        let current = self.current_load();
        // at the costs streams are admitted and paced with (their dispatcher work counted)
        let realtime_utilisation: f64 =
            self.registry.iter().filter(|s| s.is_admitted_realtime()).map(|s| s.reserved_utilisation()).sum();
        SchedulerStats {
            now_ns: self.now(),
            u_max: self.config.u_max,
            realtime_utilisation,
            throughput_reserved: current.reserved_throughput,
            over_bound: realtime_utilisation > self.config.u_max + 1e-12,
            launches: self.launches,
            waits: self.waits,
            idles: self.idles,
            paced: self.paced,
            live_tasks: self.tasks.len() as u64,
            in_flight: self.in_flight,
            device_free_estimate_ns: self.device_free_ns,
            streams: self.registry.iter().map(StreamStats::of).collect(),
        }
    }

    // ----- lookups shared by the parts ------------------------------------------------------

    /// What is admitted, as admission sees it: each realtime stream by its device time and, apart,
    /// its dispatcher work (the policy counts the two).
    pub(super) fn current_load(&self) -> CurrentLoad {
        let mut load = CurrentLoad::default();
        for s in self.registry.iter().filter(|s| s.admission == Admission::Admitted) {
            match s.spec.qos {
                Qos::Realtime { .. } => load.realtime.push(realtime_load(s)),
                Qos::Throughput { min_rate_hz: Some(_), .. } => load.reserved_throughput += s.reserved_utilisation(),
                _ => {}
            }
        }
        load
    }

    /// The admitted realtime streams, named, in registration order.
    pub(super) fn realtime_named(&self) -> Vec<(&str, RealtimeLoad)> {
        self.registry
            .iter()
            .filter(|s| s.is_admitted_realtime())
            .map(|s| (s.spec.name.as_str(), realtime_load(s)))
            .collect()
    }

    pub(super) fn stream(&self, id: StreamId) -> Result<&registry::Stream, SchedError> {
        self.registry.get(id).ok_or(SchedError::UnknownStream(id))
    }

    pub(super) fn stream_mut(&mut self, id: StreamId) -> Result<&mut registry::Stream, SchedError> {
        self.registry.get_mut(id).ok_or(SchedError::UnknownStream(id))
    }

    /// The live task, or the error a transition to `to` would get if it has finished.
    pub(super) fn live_task(&self, task: TaskId, to: TaskState) -> Result<&Task, SchedError> {
        if let Some(t) = self.tasks.get(&task) {
            return Ok(t);
        }
        match self.finished_index.get(&task) {
            Some(&from) => Err(IllegalTransition { task, from, to }.into()),
            None => Err(SchedError::UnknownTask(task)),
        }
    }
}

/// A realtime stream as admission sees it (`Scheduler::current_load`).
pub(super) fn realtime_load(s: &registry::Stream) -> RealtimeLoad {
    let (period_ns, deadline_ns) = match s.spec.qos {
        Qos::Realtime { period_ns, deadline_ns } => (period_ns, deadline_ns),
        _ => (1, 1),
    };
    let cost_ns = s.device_cost_ns().unwrap_or(0);
    RealtimeLoad {
        cost_ns,
        period_ns,
        deadline_ns,
        latency_excess_ns: registry::latency_excess(s.spec.latency_ns, cost_ns),
        phase_ns: s.spec.phase_ns,
        dispatch_ns: s.spec.dispatch_ns,
        tail_reach_ns: s.spec.tail_reach_ns,
    }
}
