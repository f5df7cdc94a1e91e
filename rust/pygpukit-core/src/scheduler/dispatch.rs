//! Blocks in, chunks out: submitting blocks and deciding what launches next. Realtime
//! blocks go first (EDF); throughput and best-effort chunks launch only where the pacing
//! replay says every realtime deadline still holds.

use super::pacing::{self, RealtimeSource};
use super::task;
use super::{
    Admission, Decision, Launch, Qos, QosKind, SchedError, Scheduler, StreamId, Submitted, Task, TaskId, TaskState,
};

impl Scheduler {
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

    /// Release pending tasks whose time has come.
    pub(super) fn promote(&mut self, now_ns: u64) {
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
}
