//! The life of one block of work (a *task*) and the transitions it may take.
//!
//! ```text
//! pending ──> ready ──> dispatched ──> completed | missed
//!    │          │  ^        │
//!    │          │  └────────┘  (its last chunk in flight finished, units remain)
//!    └──────────┴───────────┴──> dropped | cancelled
//! ```
//! A task stays `dispatched` while any chunk of it is in flight: with lookahead a second
//! chunk may be launched while the first runs, and finishing the first then leaves it
//! `dispatched`. Chunks of one task finish in launch order (they run on one device queue).
//! `completed`, `missed`, `dropped` and `cancelled` are terminal: nothing leaves them.

use std::collections::VecDeque;
use std::fmt;

use super::registry::StreamId;

/// Task identifier, unique per scheduler, starting at 1 (0 means "none" in the C ABI).
pub type TaskId = u64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum TaskState {
    /// Submitted; its release time has not come yet.
    Pending = 0,
    /// Released; waiting to be dispatched (or for its next chunk to be).
    Ready = 1,
    /// At least one chunk of it is on the device.
    Dispatched = 2,
    /// Finished by its deadline (or it had none).
    Completed = 3,
    /// Finished after its deadline.
    Missed = 4,
    /// Abandoned by the engine (an xrun, a failed launch); counted as a drop.
    Dropped = 5,
    /// Withdrawn on purpose (stream shut down); not counted as a drop.
    Cancelled = 6,
}

pub const ALL_STATES: [TaskState; 7] = [
    TaskState::Pending,
    TaskState::Ready,
    TaskState::Dispatched,
    TaskState::Completed,
    TaskState::Missed,
    TaskState::Dropped,
    TaskState::Cancelled,
];

impl TaskState {
    pub fn is_terminal(self) -> bool {
        matches!(self, TaskState::Completed | TaskState::Missed | TaskState::Dropped | TaskState::Cancelled)
    }

    /// Whether `self -> to` is a legal transition.
    pub fn can_transition_to(self, to: TaskState) -> bool {
        use TaskState::*;
        match self {
            Pending => matches!(to, Ready | Dropped | Cancelled),
            Ready => matches!(to, Dispatched | Dropped | Cancelled),
            Dispatched => matches!(to, Ready | Completed | Missed | Dropped | Cancelled),
            Completed | Missed | Dropped | Cancelled => false,
        }
    }

    /// The new state, or an error naming both ends of the refused transition.
    pub fn transition(self, to: TaskState) -> Result<TaskState, IllegalTransition> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(IllegalTransition { task: 0, from: self, to })
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Ready => "ready",
            TaskState::Dispatched => "dispatched",
            TaskState::Completed => "completed",
            TaskState::Missed => "missed",
            TaskState::Dropped => "dropped",
            TaskState::Cancelled => "cancelled",
        }
    }

    pub fn from_code(code: i32) -> Option<TaskState> {
        ALL_STATES.iter().copied().find(|s| *s as i32 == code)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A refused state change. `task` is 0 when the check was made on a bare state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IllegalTransition {
    pub task: TaskId,
    pub from: TaskState,
    pub to: TaskState,
}

impl fmt::Display for IllegalTransition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "task {} cannot go from {} to {}", self.task, self.from, self.to)
    }
}

/// The units of a block that one launch covers: `begin..end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkInFlight {
    pub begin: u32,
    pub end: u32,
    pub est_cost_ns: u64,
    pub launched_ns: u64,
}

/// One block of one stream.
#[derive(Clone, Debug)]
pub struct Task {
    pub id: TaskId,
    pub stream: StreamId,
    pub release_ns: u64,
    /// Absolute deadline; `None` for streams without one.
    pub deadline_ns: Option<u64>,
    /// Throughput ordering key: when the stream's minimum rate wants this block done.
    pub virtual_deadline_ns: u64,
    pub units: u32,
    /// Units whose chunks have finished: `units_done <= units_launched <= units`.
    pub units_done: u32,
    /// Next unit to launch.
    pub units_launched: u32,
    /// Chunks on the device, oldest first (they finish in this order).
    pub in_flight: VecDeque<ChunkInFlight>,
    state: TaskState,
}

impl Task {
    pub fn new(
        id: TaskId,
        stream: StreamId,
        release_ns: u64,
        deadline_ns: Option<u64>,
        virtual_deadline_ns: u64,
        units: u32,
    ) -> Self {
        Task {
            id,
            stream,
            release_ns,
            deadline_ns,
            virtual_deadline_ns,
            units,
            units_done: 0,
            units_launched: 0,
            in_flight: VecDeque::new(),
            state: TaskState::Pending,
        }
    }

    pub fn state(&self) -> TaskState {
        self.state
    }

    /// Move to `to` if legal; otherwise leave the task as it is.
    pub fn transition(&mut self, to: TaskState) -> Result<(), IllegalTransition> {
        if self.state.can_transition_to(to) {
            self.state = to;
            Ok(())
        } else {
            Err(IllegalTransition { task: self.id, from: self.state, to })
        }
    }

    /// Units not finished yet (launched or not).
    pub fn remaining_units(&self) -> u32 {
        self.units - self.units_done
    }

    /// Units not launched yet.
    pub fn unlaunched_units(&self) -> u32 {
        self.units - self.units_launched
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_path_through_chunks() {
        let mut t = Task::new(7, 1, 0, Some(10), 10, 3);
        t.transition(TaskState::Ready).unwrap();
        t.transition(TaskState::Dispatched).unwrap();
        t.transition(TaskState::Ready).unwrap();
        t.transition(TaskState::Dispatched).unwrap();
        t.transition(TaskState::Completed).unwrap();
        assert!(t.state().is_terminal());
        let err = t.transition(TaskState::Ready).unwrap_err();
        assert_eq!(err, IllegalTransition { task: 7, from: TaskState::Completed, to: TaskState::Ready });
        assert_eq!(err.to_string(), "task 7 cannot go from completed to ready");
    }

    #[test]
    fn pending_cannot_skip_to_dispatched() {
        assert!(TaskState::Pending.transition(TaskState::Dispatched).is_err());
        assert!(TaskState::Ready.transition(TaskState::Completed).is_err());
        assert_eq!(TaskState::Ready.transition(TaskState::Cancelled), Ok(TaskState::Cancelled));
    }

    #[test]
    fn codes_round_trip() {
        for s in ALL_STATES {
            assert_eq!(TaskState::from_code(s as i32), Some(s));
        }
        assert_eq!(TaskState::from_code(42), None);
    }
}
