//! [`SchedulerConfig`]: the scheduler's tunables and their documented defaults.

use super::SchedError;

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
    /// Admission's dispatcher model (device_model.rs): the most of its time the dispatcher's
    /// lock may be held by realtime streams' blocks, `0 < cap <= 1` (1: no cap).
    pub dispatcher_busy_cap: f64,
    /// Admission's dispatcher model: how long a block may find the dispatcher's lock held (a
    /// calibration of the machine; 0: no hold known).
    pub dispatcher_hold_ns: u64,
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
            dispatcher_busy_cap: 1.0,
            dispatcher_hold_ns: 0,
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
        if !(self.dispatcher_busy_cap > 0.0 && self.dispatcher_busy_cap <= 1.0) {
            return Err(SchedError::InvalidArgument(format!(
                "dispatcher_busy_cap must be in (0, 1], got {}",
                self.dispatcher_busy_cap
            )));
        }
        Ok(())
    }
}
