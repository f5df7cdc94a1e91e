//! [`SchedError`]: every way a scheduler call can fail.

use std::fmt;

use super::{AdmissionRefused, IllegalTransition, StreamId, TaskId};

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
