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
//!
//! One file per part, each an `impl Scheduler` block or the types it hands out; this file
//! only lists them:
//!
//! * `config.rs`: [`SchedulerConfig`], the tunables.
//! * `error.rs`: [`SchedError`], every way a call fails (one C ABI status code each).
//! * `outcome.rs`: what calls hand back ([`Submitted`], [`Decision`], [`Launch`], [`Completion`]).
//! * `state.rs`: the [`Scheduler`] itself, its statistics and the lookups the parts share.
//! * `streams.rs`: registration, admission and cost updates.
//! * `dispatch.rs`: submitting blocks and deciding what launches next (EDF, then paced chunks).
//! * `completion.rs`: completing, dropping and cancelling tasks.
//! * [`admission`] (the queue's checks and the [`AdmissionPolicy`] trait) and [`device_model`]
//!   (the default policy: the GPU's queue and the dispatcher, the serial resources of a device),
//!   [`edf`], [`pacing`], [`registry`], [`task`], [`accounting`]: the policies and records those
//!   parts use.

pub mod accounting;
pub mod admission;
mod completion;
mod config;
pub mod device_model;
mod dispatch;
pub mod edf;
mod error;
mod outcome;
pub mod pacing;
pub mod registry;
mod state;
mod streams;
pub mod task;

pub use accounting::{SchedulerStats, StreamAccounting, StreamStats};
pub use admission::{AdmissionPolicy, AdmissionRefused, Admitted, DispatcherCount, RefusalReason, StreamAdmission};
pub use config::SchedulerConfig;
pub use device_model::{DeviceModel, DispatcherModel};
pub use error::SchedError;
pub use outcome::{Completion, Decision, Launch, Submitted};
pub use registry::{Admission, Qos, QosKind, StreamId, StreamSpec};
pub use state::Scheduler;
pub use task::{IllegalTransition, Task, TaskId, TaskState};

#[cfg(test)]
mod tests;
