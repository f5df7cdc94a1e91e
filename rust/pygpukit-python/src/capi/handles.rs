//! The objects behind the header's opaque handles: `gk_sched*` points at a [`SchedHandle`],
//! `gk_pool*` at a [`PoolHandle`]. Python's `Scheduler` and `MemoryPoolPolicy` hold the same
//! `Arc`s, so both sides see one object.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use pygpukit_core::clock::{Clock, MonotonicClock, SimulatedClock};
use pygpukit_core::memory::{BlockId, MemoryPool, PoolConfig, PoolError};
use pygpukit_core::scheduler::{SchedError, Scheduler, SchedulerConfig};

/// A scheduler shared by Python and C; opaque (only pointers to it cross the ABI).
#[derive(Debug)]
pub struct SchedHandle {
    inner: Mutex<Scheduler>,
    simulated: Option<SimulatedClock>,
}

/// Which clock a new scheduler runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockChoice {
    Monotonic,
    Simulated { start_ns: u64 },
}

/// A handle whose mutex an earlier panic poisoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Poisoned;

impl std::fmt::Display for Poisoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("internal error: an earlier panic left this object unusable; create a new one")
    }
}

impl SchedHandle {
    pub fn new(config: SchedulerConfig, clock: ClockChoice) -> Result<Arc<SchedHandle>, SchedError> {
        let (scheduler, simulated) = match clock {
            ClockChoice::Monotonic => {
                let clock: Arc<dyn Clock> = Arc::new(MonotonicClock);
                (Scheduler::new(config, clock)?, None)
            }
            ClockChoice::Simulated { start_ns } => {
                let (s, c) = Scheduler::simulated(config, start_ns)?;
                (s, Some(c))
            }
        };
        Ok(Arc::new(SchedHandle { inner: Mutex::new(scheduler), simulated }))
    }

    pub fn lock(&self) -> Result<MutexGuard<'_, Scheduler>, Poisoned> {
        self.inner.lock().map_err(|_| Poisoned)
    }

    /// The simulated clock, if this scheduler runs on one.
    pub fn simulated_clock(&self) -> Option<&SimulatedClock> {
        self.simulated.as_ref()
    }
}

/// A memory-pool policy shared by Python and C, with the queue of evicted ids not taken yet;
/// opaque (only pointers to it cross the ABI).
#[derive(Debug)]
pub struct PoolHandle {
    inner: Mutex<PoolState>,
}

#[derive(Debug)]
pub struct PoolState {
    pub pool: MemoryPool,
    pub to_free: VecDeque<BlockId>,
}

impl PoolHandle {
    pub fn new(config: PoolConfig) -> Result<Arc<PoolHandle>, PoolError> {
        Ok(Arc::new(PoolHandle {
            inner: Mutex::new(PoolState { pool: MemoryPool::new(config)?, to_free: VecDeque::new() }),
        }))
    }

    pub fn lock(&self) -> Result<MutexGuard<'_, PoolState>, Poisoned> {
        self.inner.lock().map_err(|_| Poisoned)
    }
}
