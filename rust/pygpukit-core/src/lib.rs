//! pygpukit-core: the pure-Rust policy layer of pygpukit-dsp.
//!
//! * [`histogram`]: HDR latency histogram (clamping and counting out-of-range values).
//! * [`clock`]: the time source, real ([`clock::MonotonicClock`]) or simulated.
//! * [`scheduler`]: QoS classes, admission, EDF dispatch, kernel pacing, accounting.
//! * [`memory`]: the device memory-pool policy (size classes, reuse, LRU eviction).
//!
//! Nothing here touches CUDA or Python; the C++ engine reaches this code through the C ABI
//! exported by the `pygpukit-python` crate, and Python through its PyO3 module.

#![deny(unsafe_code)]
#![warn(missing_debug_implementations)]

pub mod clock;
pub mod histogram;
pub mod memory;
pub mod scheduler;

pub use clock::{Clock, MonotonicClock, SimulatedClock};
pub use histogram::{HistogramError, HistogramSummary, LatencyHistogram};
pub use memory::{MemoryPool, PoolConfig, PoolError, PoolStats, SizeClasses};
pub use scheduler::{Decision, Qos, SchedError, Scheduler, SchedulerConfig, StreamSpec};
