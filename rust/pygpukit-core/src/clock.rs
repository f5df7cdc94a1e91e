//! Time sources. Every scheduler time is `u64` nanoseconds on one clock.
//!
//! `MonotonicClock` reads `CLOCK_MONOTONIC` on Unix, the clock behind C++'s
//! `std::chrono::steady_clock` on Linux, so times taken by the C++ engine and
//! times taken here are directly comparable. `SimulatedClock` only moves when
//! told to, which makes scheduling decisions reproducible in tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A source of "now" in nanoseconds. Must never go backwards.
pub trait Clock: Send + Sync {
    fn now_ns(&self) -> u64;

    /// `Some(self)` for a simulated clock, so callers can advance it.
    fn as_simulated(&self) -> Option<&SimulatedClock> {
        None
    }
}

/// The host's monotonic clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        monotonic_now_ns()
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC` (Unix) or since first use (elsewhere).
#[cfg(unix)]
pub fn monotonic_now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Unix.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

#[cfg(not(unix))]
pub fn monotonic_now_ns() -> u64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A clock that only moves when told to. Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct SimulatedClock {
    now: Arc<AtomicU64>,
}

impl SimulatedClock {
    pub fn new(start_ns: u64) -> Self {
        SimulatedClock { now: Arc::new(AtomicU64::new(start_ns)) }
    }

    pub fn now(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }

    /// Move forward by `delta_ns`; returns the new time.
    pub fn advance(&self, delta_ns: u64) -> u64 {
        let mut current = self.now.load(Ordering::Acquire);
        loop {
            let next = current.saturating_add(delta_ns);
            match self.now.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return next,
                Err(seen) => current = seen,
            }
        }
    }

    /// Jump to `t_ns`. Going backwards is refused (returns the unchanged time as `Err`).
    pub fn set(&self, t_ns: u64) -> Result<u64, u64> {
        let mut current = self.now.load(Ordering::Acquire);
        loop {
            if t_ns < current {
                return Err(current);
            }
            match self.now.compare_exchange_weak(current, t_ns, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(t_ns),
                Err(seen) => current = seen,
            }
        }
    }
}

impl Clock for SimulatedClock {
    fn now_ns(&self) -> u64 {
        self.now.load(Ordering::Acquire)
    }

    fn as_simulated(&self) -> Option<&SimulatedClock> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_clock_does_not_go_backwards() {
        let c = MonotonicClock;
        let a = c.now_ns();
        let b = c.now_ns();
        assert!(b >= a);
        assert!(a > 0);
        assert!(c.as_simulated().is_none());
    }

    #[test]
    fn simulated_clock_is_shared_and_refuses_going_back() {
        let c = SimulatedClock::new(100);
        let d = c.clone();
        assert_eq!(c.advance(50), 150);
        assert_eq!(d.now_ns(), 150);
        assert_eq!(d.set(1_000), Ok(1_000));
        assert_eq!(c.set(999), Err(1_000));
        assert_eq!(c.now_ns(), 1_000);
        assert!(c.as_simulated().is_some());
    }
}
