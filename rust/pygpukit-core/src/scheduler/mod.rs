//! The QoS scheduler: admission, EDF dispatch, kernel pacing and accounting.
//!
//! The scheduler never touches a device. The engine asks it what to launch
//! ([`Scheduler::next_decision`]), launches that, and reports the measured cost and
//! finish time ([`Scheduler::complete`]). All times are `u64` nanoseconds on the
//! scheduler's [`Clock`]; calls that take an explicit time make the scheduler a pure
//! function of its inputs, which is what the tests rely on.
//!
//! ```
//! use std::sync::Arc;
//! use pygpukit_core::clock::SimulatedClock;
//! use pygpukit_core::scheduler::{Decision, Qos, Scheduler, SchedulerConfig, StreamSpec};
//!
//! let clock = SimulatedClock::new(0);
//! let mut s = Scheduler::new(SchedulerConfig::default(), Arc::new(clock.clone())).unwrap();
//! let audio = s
//!     .register_stream(StreamSpec::new("audio", Qos::realtime(5_333_333, None)).with_cost(60_000))
//!     .unwrap();
//! let block = s.submit(audio).unwrap();
//! let Decision::Launch(launch) = s.next_decision() else { panic!("expected a launch") };
//! assert_eq!(launch.task, block.task);
//! clock.advance(60_000);
//! let done = s.complete(block.task, 60_000, clock.now()).unwrap();
//! assert_eq!(done.state.name(), "completed");
//! ```

pub mod accounting;
pub mod admission;
pub mod edf;
pub mod pacing;
pub mod registry;
pub mod task;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;

use crate::clock::{Clock, SimulatedClock};

pub use accounting::{SchedulerStats, StreamAccounting, StreamStats};
pub use admission::{AdmissionPolicy, AdmissionRefused, Admitted, RefusalReason};
pub use registry::{Admission, Qos, QosKind, StreamId, StreamSpec};
pub use task::{IllegalTransition, Task, TaskId, TaskState};

use admission::{Candidate, CurrentLoad, RealtimeLoad};
use edf::EdfQueue;
use pacing::RealtimeSource;
use registry::Registry;

/// Tunables. `Default` gives the documented defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Utilisation bound for realtime streams, `0 < u_max <= 1`.
    pub u_max: f64,
    /// Target device time of one non-realtime chunk.
    pub quantum_ns: u64,
    /// Slack kept before every realtime deadline by pacing and admission.
    pub safety_margin_ns: u64,
    /// Weight of a new measurement in the cost EWMA, `0 < alpha <= 1`.
    pub ewma_alpha: f64,
    /// How many finished tasks keep a queryable state.
    pub finished_log: usize,
    /// Lookahead: most chunks of one non-realtime task on the device at once, `>= 1`.
    /// With 2 the next chunk is queued behind the running one, so the device does not
    /// idle for the host round trip (poll, complete, next, launch) between chunks.
    /// 1 releases a chunk only after the previous one completed.
    pub max_chunks_in_flight: u32,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            u_max: 0.9,
            quantum_ns: 250_000,
            safety_margin_ns: 50_000,
            ewma_alpha: 0.2,
            finished_log: 4096,
            max_chunks_in_flight: 2,
        }
    }
}

impl SchedulerConfig {
    pub fn validate(&self) -> Result<(), SchedError> {
        if !(self.u_max > 0.0 && self.u_max <= 1.0) {
            return Err(SchedError::InvalidArgument(format!("u_max must be in (0, 1], got {}", self.u_max)));
        }
        if self.quantum_ns == 0 {
            return Err(SchedError::InvalidArgument("quantum_ns must be > 0".into()));
        }
        if !(self.ewma_alpha > 0.0 && self.ewma_alpha <= 1.0) {
            return Err(SchedError::InvalidArgument(format!("ewma_alpha must be in (0, 1], got {}", self.ewma_alpha)));
        }
        if self.max_chunks_in_flight == 0 {
            return Err(SchedError::InvalidArgument(
                "max_chunks_in_flight must be >= 1 (1 = no lookahead, 2 = the default)".into(),
            ));
        }
        Ok(())
    }
}

/// Every way a scheduler call can fail. Each maps to one C ABI status code ([`SchedError::code`]).
#[derive(Clone, Debug, PartialEq)]
pub enum SchedError {
    InvalidArgument(String),
    UnknownStream(StreamId),
    UnknownTask(TaskId),
    DuplicateStream(String),
    Admission(AdmissionRefused),
    IllegalTransition(IllegalTransition),
    /// `admit` on a stream with neither a declared nor a measured cost.
    NoCostSample {
        stream: String,
    },
    /// A block released before the stream's previous block.
    OutOfOrder {
        stream: String,
        arrival_ns: u64,
        last_release_ns: u64,
    },
}

impl SchedError {
    /// Status code used by the C ABI (`GK_ERR_*` in `sched_abi.h`).
    pub fn code(&self) -> i32 {
        match self {
            SchedError::InvalidArgument(_) => -1,
            SchedError::UnknownStream(_) => -2,
            SchedError::UnknownTask(_) => -3,
            SchedError::IllegalTransition(_) => -4,
            SchedError::Admission(_) => -5,
            SchedError::DuplicateStream(_) => -6,
            SchedError::NoCostSample { .. } => -7,
            SchedError::OutOfOrder { .. } => -8,
        }
    }
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::InvalidArgument(msg) => write!(f, "invalid argument: {msg}"),
            SchedError::UnknownStream(id) => write!(f, "unknown stream id {id} (never registered, or unregistered)"),
            SchedError::UnknownTask(id) => write!(f, "unknown task id {id} (never submitted, or finished long ago)"),
            SchedError::DuplicateStream(name) => {
                write!(f, "a stream named '{name}' is already registered; pick another name or unregister it first")
            }
            SchedError::Admission(refused) => refused.fmt(f),
            SchedError::IllegalTransition(t) => t.fmt(f),
            SchedError::NoCostSample { stream } => write!(
                f,
                "stream '{stream}' has no cost yet: declare cost_ns at registration, or complete at least one \
                 block (or call calibrate) before admit"
            ),
            SchedError::OutOfOrder { stream, arrival_ns, last_release_ns } => write!(
                f,
                "stream '{stream}': block arrival {arrival_ns} ns is earlier than the previous block's {last_release_ns} ns; \
                 submit blocks in arrival order"
            ),
        }
    }
}

impl std::error::Error for SchedError {}

impl From<AdmissionRefused> for SchedError {
    fn from(r: AdmissionRefused) -> Self {
        SchedError::Admission(r)
    }
}

impl From<IllegalTransition> for SchedError {
    fn from(t: IllegalTransition) -> Self {
        SchedError::IllegalTransition(t)
    }
}

/// What `submit` hands back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Submitted {
    pub task: TaskId,
    /// Absolute deadline, when the stream has one.
    pub deadline_ns: Option<u64>,
}

/// Launch units `chunk_begin..chunk_end` of `task`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    pub task: TaskId,
    pub stream: StreamId,
    pub chunk_begin: u32,
    pub chunk_end: u32,
    /// This chunk ends the block.
    pub is_final: bool,
    pub deadline_ns: Option<u64>,
    pub est_cost_ns: u64,
}

/// The scheduler's answer to "what now?".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Launch(Launch),
    /// Nothing may be launched before this time (pacing, or blocks not released yet).
    /// Call again then, or earlier when a block is submitted or completes.
    WaitUntil(u64),
    /// Nothing to launch until something is submitted or completes.
    Idle,
}

/// What `complete` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub task: TaskId,
    /// `Dispatched` when a later chunk of the task is still in flight (lookahead), `Ready`
    /// when none is and units remain, else `Completed` or `Missed`.
    pub state: TaskState,
    /// Release-to-finish latency, once the block is finished.
    pub latency_ns: Option<u64>,
    pub remaining_units: u32,
}

/// The scheduler. Not thread-safe by itself: wrap it in a `Mutex` to share it.
pub struct Scheduler {
    config: SchedulerConfig,
    clock: Arc<dyn Clock>,
    registry: Registry,
    tasks: HashMap<TaskId, Task>,
    pending: BTreeSet<(u64, TaskId)>,
    rt_ready: EdfQueue,
    finished: VecDeque<(TaskId, TaskState)>,
    finished_index: HashMap<TaskId, TaskState>,
    next_task: TaskId,
    device_free_ns: u64,
    in_flight: u64,
    launches: u64,
    waits: u64,
    idles: u64,
    paced: u64,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("config", &self.config)
            .field("streams", &self.registry.len())
            .field("live_tasks", &self.tasks.len())
            .finish()
    }
}

impl Scheduler {
    pub fn new(config: SchedulerConfig, clock: Arc<dyn Clock>) -> Result<Self, SchedError> {
        config.validate()?;
        Ok(Scheduler {
            config,
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

    // ----- streams -------------------------------------------------------------------------

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

    // ----- blocks ---------------------------------------------------------------------------

    /// Submit one block released now.
    pub fn submit(&mut self, stream: StreamId) -> Result<Submitted, SchedError> {
        let now = self.now();
        self.submit_at(stream, now)
    }

    /// Submit one block released at `arrival_ns` (may be in the future: it stays pending).
    pub fn submit_at(&mut self, stream: StreamId, arrival_ns: u64) -> Result<Submitted, SchedError> {
        let now = self.now();
        let id = self.next_task;
        let s = self.stream_mut(stream)?;
        if let Some(last) = s.last_release_ns {
            if arrival_ns < last {
                return Err(SchedError::OutOfOrder { stream: s.spec.name.clone(), arrival_ns, last_release_ns: last });
            }
        }
        let deadline = s.spec.qos.deadline_ns().map(|d| arrival_ns.saturating_add(d));
        let virtual_deadline = match s.spec.qos.min_rate_hz() {
            Some(rate) => {
                let spacing = (1e9 / rate).round() as u64;
                let vd = arrival_ns.max(s.last_virtual_deadline_ns).saturating_add(spacing);
                s.last_virtual_deadline_ns = vd;
                vd
            }
            None => u64::MAX,
        };
        let task = Task::new(id, stream, arrival_ns, deadline, virtual_deadline, s.spec.units_per_block);
        s.queue.push_back(id);
        s.last_release_ns = Some(arrival_ns);
        s.accounting.submitted += 1;
        s.accounting.first_release_ns.get_or_insert(arrival_ns);
        self.next_task += 1;
        self.tasks.insert(id, task);
        self.pending.insert((arrival_ns, id));
        self.promote(now);
        Ok(Submitted { task: id, deadline_ns: deadline })
    }

    /// What to launch now (on the scheduler's clock).
    pub fn next_decision(&mut self) -> Decision {
        let now = self.now();
        self.next_decision_at(now)
    }

    /// What to launch at `now_ns`. Realtime blocks first (EDF); then throughput chunks
    /// (lowest virtual deadline first), then best effort, each only if pacing allows it.
    pub fn next_decision_at(&mut self, now_ns: u64) -> Decision {
        self.promote(now_ns);
        if let Some((_, id)) = self.rt_ready.pop() {
            let task = &self.tasks[&id];
            let cost = self.registry.get(task.stream).and_then(|s| s.cost.block_cost_ns()).unwrap_or(0);
            let (begin, end) = (task.units_launched, task.units);
            return Decision::Launch(self.launch(id, begin, end, cost, now_ns));
        }

        let candidates = self.paced_candidates();
        if candidates.is_empty() {
            return match self.pending.first() {
                Some(&(release, _)) => {
                    self.waits += 1;
                    Decision::WaitUntil(release)
                }
                None => {
                    self.idles += 1;
                    Decision::Idle
                }
            };
        }

        let sources = self.realtime_sources(now_ns);
        let quantum = self.config.quantum_ns;
        let margin = self.config.safety_margin_ns;
        for id in candidates {
            let task = &self.tasks[&id];
            let Some(stream) = self.registry.get(task.stream) else { continue };
            let cost = stream.cost.block_cost_ns();
            let units = stream.spec.units_per_block;
            let remaining = task.unlaunched_units();
            let begin = task.units_launched;
            let safe = |k: u32| {
                let c = pacing::chunk_cost(cost, units, k, quantum);
                pacing::replay(now_ns, self.device_free_ns, c, margin, &sources).is_safe()
            };
            // Without an admitted realtime stream there is nothing to pace against: splitting
            // would only add a host round trip per chunk.
            let mut k =
                if sources.is_empty() { remaining } else { pacing::chunk_units(cost, units, remaining, quantum) };
            if !safe(k) {
                // Largest smaller chunk that still fits (the replay is monotone in the cost).
                let (mut lo, mut hi) = (0u32, k);
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if safe(mid) {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                k = lo;
            }
            if k > 0 {
                let est = pacing::chunk_cost(cost, units, k, quantum);
                return Decision::Launch(self.launch(id, begin, begin + k, est, now_ns));
            }
        }
        self.paced += 1;
        self.waits += 1;
        Decision::WaitUntil(self.wake_time(now_ns, &sources))
    }

    /// Report the oldest chunk in flight of `task` as finished: measured device time and
    /// finish time. Chunks of one task finish in launch order, so this is always the one
    /// that finished.
    pub fn complete(&mut self, task: TaskId, measured_cost_ns: u64, finish_ns: u64) -> Result<Completion, SchedError> {
        self.complete_chunk(task, Some(measured_cost_ns), finish_ns)
    }

    /// [`Self::complete`] for a chunk whose device time was not measured (a dispatcher times a
    /// sample of the blocks: two event records and an elapsed-time query are serial host work).
    /// Its estimate stands in for the device's busy time; the cost model learns nothing from it.
    pub fn complete_unmeasured(&mut self, task: TaskId, finish_ns: u64) -> Result<Completion, SchedError> {
        self.complete_chunk(task, None, finish_ns)
    }

    fn complete_chunk(&mut self, task: TaskId, measured: Option<u64>, finish_ns: u64) -> Result<Completion, SchedError> {
        let t = self.live_task(task, TaskState::Completed)?;
        let Some(&chunk) = t.in_flight.front().filter(|_| t.state() == TaskState::Dispatched) else {
            return Err(IllegalTransition { task, from: t.state(), to: TaskState::Completed }.into());
        };
        if finish_ns < t.release_ns {
            return Err(SchedError::InvalidArgument(format!(
                "task {task}: finish_ns {finish_ns} is before its release {} (same clock for both?)",
                t.release_ns
            )));
        }
        let (stream_id, release, deadline, units) = (t.stream, t.release_ns, t.deadline_ns, t.units);
        let measured_cost_ns = measured.unwrap_or(chunk.est_cost_ns);

        self.in_flight = self.in_flight.saturating_sub(1);
        if self.in_flight == 0 {
            self.device_free_ns = finish_ns;
        } else if measured_cost_ns < chunk.est_cost_ns {
            self.device_free_ns = self.device_free_ns.saturating_sub(chunk.est_cost_ns - measured_cost_ns);
        } else {
            self.device_free_ns = self.device_free_ns.saturating_add(measured_cost_ns - chunk.est_cost_ns);
        }

        let alpha = self.config.ewma_alpha;
        let chunk_units = u64::from((chunk.end - chunk.begin).max(1));
        if let Some(s) = self.registry.get_mut(stream_id) {
            s.accounting.busy_ns = s.accounting.busy_ns.saturating_add(measured_cost_ns);
            if measured.is_some() {
                let block_cost = (u128::from(measured_cost_ns) * u128::from(units) / u128::from(chunk_units)) as u64;
                s.cost.observe(block_cost, alpha);
            }
        }

        let t = self.tasks.get_mut(&task).expect("live task");
        t.in_flight.pop_front();
        t.units_done = chunk.end;
        if !t.in_flight.is_empty() {
            return Ok(Completion {
                task,
                state: TaskState::Dispatched,
                latency_ns: None,
                remaining_units: t.remaining_units(),
            });
        }
        if t.units_done < t.units {
            t.transition(TaskState::Ready)?;
            let (remaining, deadline_key) = (t.remaining_units(), t.deadline_ns.unwrap_or(u64::MAX));
            // A stream admitted while this block was being run as best effort: the rest
            // of the block goes through EDF.
            if self.registry.get(stream_id).is_some_and(|s| s.is_admitted_realtime()) {
                self.rt_ready.push(deadline_key, task);
            }
            return Ok(Completion { task, state: TaskState::Ready, latency_ns: None, remaining_units: remaining });
        }
        let state = if deadline.is_some_and(|d| finish_ns > d) { TaskState::Missed } else { TaskState::Completed };
        t.transition(state)?;
        let latency = finish_ns - release;
        if let Some(s) = self.registry.get_mut(stream_id) {
            let acc = &mut s.accounting;
            acc.latency.record(latency);
            if state == TaskState::Missed {
                acc.missed += 1;
            } else {
                acc.completed += 1;
            }
            acc.last_finish_ns = Some(acc.last_finish_ns.map_or(finish_ns, |f| f.max(finish_ns)));
        }
        self.retire(task, state);
        Ok(Completion { task, state, latency_ns: Some(latency), remaining_units: 0 })
    }

    /// Abandon a task (counted as a drop). Legal from any non-terminal state.
    pub fn drop_task(&mut self, task: TaskId) -> Result<(), SchedError> {
        self.live_task(task, TaskState::Dropped)?;
        self.finish_early(task, TaskState::Dropped)
    }

    /// Withdraw a task (not counted as a drop). Legal from any non-terminal state.
    pub fn cancel(&mut self, task: TaskId) -> Result<(), SchedError> {
        self.live_task(task, TaskState::Cancelled)?;
        self.finish_early(task, TaskState::Cancelled)
    }

    /// State of a live or recently finished task.
    pub fn task_state(&self, task: TaskId) -> Option<TaskState> {
        self.tasks.get(&task).map(Task::state).or_else(|| self.finished_index.get(&task).copied())
    }

    pub fn task(&self, task: TaskId) -> Option<&Task> {
        self.tasks.get(&task)
    }

    pub fn stats(&self) -> SchedulerStats {
        let current = self.current_load();
        let realtime_utilisation = current.realtime_utilisation();
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

    // ----- internals ------------------------------------------------------------------------

    fn admission_policy(&self) -> AdmissionPolicy {
        AdmissionPolicy { u_max: self.config.u_max, safety_margin_ns: self.config.safety_margin_ns }
    }

    fn current_load(&self) -> CurrentLoad {
        let mut load = CurrentLoad::default();
        for s in self.registry.iter().filter(|s| s.admission == Admission::Admitted) {
            match s.spec.qos {
                Qos::Realtime { period_ns, deadline_ns } => load.realtime.push(RealtimeLoad {
                    cost_ns: s.cost.block_cost_ns().unwrap_or(0),
                    period_ns,
                    deadline_ns,
                    latency_excess_ns: s.latency_excess_ns(),
                    phase_ns: s.spec.phase_ns,
                }),
                Qos::Throughput { min_rate_hz: Some(_), .. } => load.reserved_throughput += s.reserved_utilisation(),
                _ => {}
            }
        }
        load
    }

    fn stream(&self, id: StreamId) -> Result<&registry::Stream, SchedError> {
        self.registry.get(id).ok_or(SchedError::UnknownStream(id))
    }

    fn stream_mut(&mut self, id: StreamId) -> Result<&mut registry::Stream, SchedError> {
        self.registry.get_mut(id).ok_or(SchedError::UnknownStream(id))
    }

    /// The live task, or the error a transition to `to` would get if it has finished.
    fn live_task(&self, task: TaskId, to: TaskState) -> Result<&Task, SchedError> {
        if let Some(t) = self.tasks.get(&task) {
            return Ok(t);
        }
        match self.finished_index.get(&task) {
            Some(&from) => Err(IllegalTransition { task, from, to }.into()),
            None => Err(SchedError::UnknownTask(task)),
        }
    }

    /// Release pending tasks whose time has come.
    fn promote(&mut self, now_ns: u64) {
        while let Some(&(release, id)) = self.pending.first() {
            if release > now_ns {
                break;
            }
            self.pending.pop_first();
            let Some(task) = self.tasks.get_mut(&id) else { continue };
            if task.transition(TaskState::Ready).is_err() {
                continue;
            }
            let deadline = task.deadline_ns.unwrap_or(u64::MAX);
            if self.registry.get(task.stream).is_some_and(|s| s.is_admitted_realtime()) {
                self.rt_ready.push(deadline, id);
            }
        }
    }

    /// Head-of-stream tasks of non-realtime (or calibrating) streams that may launch a
    /// chunk, best first: ready ones, and dispatched ones with units left to launch and room
    /// under `max_chunks_in_flight` (lookahead).
    fn paced_candidates(&self) -> Vec<TaskId> {
        let lookahead = self.config.max_chunks_in_flight as usize;
        let mut keyed: Vec<((u8, u64, u64), TaskId)> = Vec::new();
        for s in self.registry.iter().filter(|s| !s.is_admitted_realtime()) {
            let Some(&head) = s.queue.front() else { continue };
            let Some(t) = self.tasks.get(&head) else { continue };
            let may_launch = match t.state() {
                TaskState::Ready => true,
                TaskState::Dispatched => t.units_launched < t.units && t.in_flight.len() < lookahead,
                _ => false,
            };
            if !may_launch {
                continue;
            }
            let key = if s.kind() == QosKind::Throughput && s.admission == Admission::Admitted {
                (0, t.virtual_deadline_ns, t.release_ns)
            } else {
                (1, t.release_ns, 0)
            };
            keyed.push((key, head));
        }
        keyed.sort_unstable();
        keyed.into_iter().map(|(_, id)| id).collect()
    }

    /// Admitted realtime streams as the pacing replay sees them at `now_ns`.
    fn realtime_sources(&self, now_ns: u64) -> Vec<RealtimeSource> {
        let mut sources = Vec::new();
        for s in self.registry.iter().filter(|s| s.is_admitted_realtime()) {
            let Qos::Realtime { period_ns, deadline_ns } = s.spec.qos else { continue };
            let pending: Vec<(u64, u64)> = s
                .queue
                .iter()
                .filter_map(|id| self.tasks.get(id))
                .filter(|t| t.state() == TaskState::Pending)
                .map(|t| (t.release_ns, t.deadline_ns.unwrap_or(u64::MAX)))
                .collect();
            let next_release_ns = s.last_release_ns.map_or(now_ns, |last| last.saturating_add(period_ns).max(now_ns));
            sources.push(RealtimeSource {
                stream: s.id,
                cost_ns: s.cost.block_cost_ns().unwrap_or(0),
                latency_excess_ns: s.latency_excess_ns(),
                period_ns,
                relative_deadline_ns: deadline_ns,
                pending,
                next_release_ns,
            });
        }
        sources
    }

    /// When a paced chunk might fit: the next event that changes the replay.
    fn wake_time(&self, now_ns: u64, sources: &[RealtimeSource]) -> u64 {
        let mut events = Vec::new();
        events.push(self.device_free_ns);
        if let Some(&(release, _)) = self.pending.first() {
            events.push(release);
        }
        for s in sources {
            events.push(s.next_release_ns);
            events.extend(s.pending.iter().map(|&(r, _)| r));
        }
        events.into_iter().filter(|&t| t > now_ns).min().unwrap_or_else(|| {
            // No future event: even one unit does not fit an idle device (costs grew past
            // what admission allowed). Look again after the shortest realtime period.
            let period = sources.iter().map(|s| s.period_ns).min().unwrap_or(self.config.quantum_ns);
            now_ns.saturating_add(period.max(1))
        })
    }

    fn launch(&mut self, id: TaskId, begin: u32, end: u32, est_cost_ns: u64, now_ns: u64) -> Launch {
        let task = self.tasks.get_mut(&id).expect("launch of a live task");
        if task.state() == TaskState::Dispatched {
            // Lookahead: another chunk behind those in flight; the state does not change.
            debug_assert!(!task.in_flight.is_empty() && begin == task.units_launched);
        } else {
            task.transition(TaskState::Dispatched).expect("launch from ready");
        }
        task.in_flight.push_back(task::ChunkInFlight { begin, end, est_cost_ns, launched_ns: now_ns });
        task.units_launched = end;
        let launch = Launch {
            task: id,
            stream: task.stream,
            chunk_begin: begin,
            chunk_end: end,
            is_final: end == task.units,
            deadline_ns: task.deadline_ns,
            est_cost_ns,
        };
        self.device_free_ns = self.device_free_ns.max(now_ns).saturating_add(est_cost_ns);
        self.in_flight += 1;
        self.launches += 1;
        if let Some(s) = self.registry.get_mut(launch.stream) {
            s.accounting.chunks += 1;
        }
        launch
    }

    /// Drop or cancel a live task from whatever state it is in.
    fn finish_early(&mut self, id: TaskId, to: TaskState) -> Result<(), SchedError> {
        let task = self.tasks.get_mut(&id).ok_or(SchedError::UnknownTask(id))?;
        let from = task.state();
        task.transition(to)?;
        match from {
            TaskState::Pending => {
                self.pending.remove(&(task.release_ns, id));
            }
            TaskState::Ready => {
                self.rt_ready.remove(task.deadline_ns.unwrap_or(u64::MAX), id);
            }
            TaskState::Dispatched => {
                self.in_flight = self.in_flight.saturating_sub(task.in_flight.len() as u64);
                task.in_flight.clear();
            }
            _ => {}
        }
        let stream = task.stream;
        if let Some(s) = self.registry.get_mut(stream) {
            if to == TaskState::Dropped {
                s.accounting.dropped += 1;
            } else {
                s.accounting.cancelled += 1;
            }
        }
        self.retire(id, to);
        Ok(())
    }

    /// Forget a finished task, keeping its final state in a bounded log.
    fn retire(&mut self, id: TaskId, state: TaskState) {
        if let Some(task) = self.tasks.remove(&id) {
            if let Some(s) = self.registry.get_mut(task.stream) {
                if let Some(pos) = s.queue.iter().position(|&t| t == id) {
                    s.queue.remove(pos);
                }
            }
        }
        if self.config.finished_log == 0 {
            return;
        }
        while self.finished.len() >= self.config.finished_log {
            if let Some((old, _)) = self.finished.pop_front() {
                self.finished_index.remove(&old);
            }
        }
        self.finished.push_back((id, state));
        self.finished_index.insert(id, state);
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

#[cfg(test)]
mod tests;
