//! What the scheduler's calls hand back: [`Submitted`], [`Decision`] (with [`Launch`]) and
//! [`Completion`].

use super::{StreamId, TaskId, TaskState};

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
