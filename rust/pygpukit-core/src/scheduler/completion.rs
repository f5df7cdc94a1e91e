//! Tasks out: completing chunks (cost learning, latency, missed deadlines), dropping and
//! cancelling, and the bounded log of finished tasks.

use super::{Completion, IllegalTransition, SchedError, Scheduler, TaskId, TaskState};

impl Scheduler {
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

    fn complete_chunk(
        &mut self,
        task: TaskId,
        measured: Option<u64>,
        finish_ns: u64,
    ) -> Result<Completion, SchedError> {
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

    /// Drop or cancel a live task from whatever state it is in.
    pub(super) fn finish_early(&mut self, id: TaskId, to: TaskState) -> Result<(), SchedError> {
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
