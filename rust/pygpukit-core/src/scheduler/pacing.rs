//! Kernel pacing: split non-realtime blocks into chunks and release a chunk only
//! when no realtime block would miss its deadline because of it.
//!
//! Device model: one queue that runs launched work in launch order; realtime
//! blocks are launched as soon as they are released. A chunk of estimated cost `c`
//! considered at `now` leaves the device busy until `E = max(now, device_free) + c`.
//!
//! Realtime blocks that may arrive while it is busy: blocks already submitted with a
//! future release (their release is exact), and for every admitted realtime stream
//! its next blocks at the *earliest* time they may arrive (`max(now, last release +
//! period)`, then every period). A block that may arrive at `r` may also arrive later,
//! in any order with the others, and then waits behind everything released before it.
//! So, with `A(x)` the cost of every such block released at or before `x`, the rule is
//!
//! ```text
//! for every release point x (in time order) while the device is still busy (E + A(x-) > x):
//!     E + A(x) + margin <= x + D_min(x)      (D_min: shortest relative deadline among
//!                                              streams whose next block may be out by x)
//!     E + A(x) + margin <= d                 (d: absolute deadline of a submitted block released at x)
//! ```
//!
//! `E + A(x)` bounds when a block released at `x` finishes; once the device would be
//! idle before a release, the chunk no longer affects anything and the check stops.
//! With `E = now` this is admission's response bound, so a chunk small enough always
//! fits an idle device when the realtime set was admitted.
//!
//! Invariant (tested with a simulated device): if the realtime set passed admission
//! and real costs do not exceed the estimates, releasing chunks never makes a
//! realtime block miss its deadline.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::registry::StreamId;

/// Upper bound on examined release points; a longer busy period is treated as unsafe.
pub const MAX_REPLAY_STEPS: usize = 10_000;

/// A realtime stream as the pacing check sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct RealtimeSource {
    pub stream: StreamId,
    pub cost_ns: u64,
    /// Its blocks' own latency beyond their device cost: their device work must be done that
    /// much before the deadline (admission's response bound, `E_i`).
    pub latency_excess_ns: u64,
    pub period_ns: u64,
    pub relative_deadline_ns: u64,
    /// Submitted blocks not released yet: `(release, absolute deadline)`, ascending.
    pub pending: Vec<(u64, u64)>,
    /// Earliest release of the first block not submitted yet.
    pub next_release_ns: u64,
}

/// Result of the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Safe,
    /// A block of `stream` released at `release_ns` could finish at `finish_ns`, later than
    /// `deadline_ns - margin`.
    Endangers {
        stream: StreamId,
        release_ns: u64,
        deadline_ns: u64,
        finish_ns: u64,
    },
}

impl Verdict {
    pub fn is_safe(&self) -> bool {
        matches!(self, Verdict::Safe)
    }
}

/// Would a chunk of `chunk_cost_ns` launched at `now_ns` keep every realtime deadline?
pub fn replay(
    now_ns: u64,
    device_free_ns: u64,
    chunk_cost_ns: u64,
    safety_margin_ns: u64,
    sources: &[RealtimeSource],
) -> Verdict {
    // Heap entries: (release, source index, index into pending, or usize::MAX for projected).
    let mut heap: BinaryHeap<Reverse<(u64, usize, usize)>> = BinaryHeap::new();
    for (i, s) in sources.iter().enumerate() {
        heap.push(Reverse(if s.pending.is_empty() {
            (s.next_release_ns, i, usize::MAX)
        } else {
            (s.pending[0].0, i, 0)
        }));
    }
    // E + A(x): when all work released so far would be done.
    let mut work_end = now_ns.max(device_free_ns).saturating_add(chunk_cost_ns);
    // Shortest relative deadline among streams with a floating (projected) block out.
    let mut floating: Option<(u64, StreamId)> = None;
    let mut steps = 0usize;
    while let Some(&Reverse((x, _, _))) = heap.peek() {
        if work_end <= x {
            return Verdict::Safe;
        }
        // Absolute deadline that binds at x, and whose it is.
        let mut binding: Option<(u64, StreamId)> = None;
        while let Some(&Reverse((release, i, pending_index))) = heap.peek() {
            if release != x {
                break;
            }
            heap.pop();
            steps += 1;
            if steps > MAX_REPLAY_STEPS {
                let stream = sources[i].stream;
                return Verdict::Endangers { stream, release_ns: x, deadline_ns: x, finish_ns: work_end };
            }
            let s = &sources[i];
            work_end = work_end.saturating_add(s.cost_ns);
            let next = if pending_index == usize::MAX {
                let d = s.relative_deadline_ns.saturating_sub(s.latency_excess_ns);
                if floating.is_none_or(|(f, _)| d < f) {
                    floating = Some((d, s.stream));
                }
                (release.saturating_add(s.period_ns), i, usize::MAX)
            } else {
                let deadline = s.pending[pending_index].1.saturating_sub(s.latency_excess_ns);
                if binding.is_none_or(|(d, _)| deadline < d) {
                    binding = Some((deadline, s.stream));
                }
                match s.pending.get(pending_index + 1) {
                    Some(&(r, _)) => (r, i, pending_index + 1),
                    None => (s.next_release_ns, i, usize::MAX),
                }
            };
            heap.push(Reverse(next));
        }
        if let Some((d, stream)) = floating {
            let deadline = x.saturating_add(d);
            if binding.is_none_or(|(b, _)| deadline < b) {
                binding = Some((deadline, stream));
            }
        }
        if let Some((deadline, stream)) = binding {
            if work_end.saturating_add(safety_margin_ns) > deadline {
                return Verdict::Endangers { stream, release_ns: x, deadline_ns: deadline, finish_ns: work_end };
            }
        }
    }
    Verdict::Safe
}

/// Units of the next chunk: as many as fit in `quantum_ns` at the estimated per-unit cost,
/// at least one, at most `remaining`. Unknown cost: one unit at a time.
pub fn chunk_units(block_cost_ns: Option<u64>, units_per_block: u32, remaining: u32, quantum_ns: u64) -> u32 {
    let fit = match block_cost_ns {
        None => 1,
        Some(0) => u64::from(remaining),
        Some(cost) => {
            (u128::from(quantum_ns) * u128::from(units_per_block) / u128::from(cost)).min(u128::from(u32::MAX)) as u64
        }
    };
    fit.clamp(1, u64::from(remaining.max(1))) as u32
}

/// Estimated cost of `units` units. Unknown block cost: assume a whole quantum per unit
/// (paced chunks of unknown cost are one unit; a whole block goes out only when nothing
/// is paced against it).
pub fn chunk_cost(block_cost_ns: Option<u64>, units_per_block: u32, units: u32, quantum_ns: u64) -> u64 {
    match block_cost_ns {
        None => quantum_ns.saturating_mul(u64::from(units.max(1))),
        Some(cost) => {
            let num = u128::from(cost) * u128::from(units);
            let den = u128::from(units_per_block.max(1));
            num.div_ceil(den).min(u128::from(u64::MAX)) as u64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(cost: u64, period: u64, deadline: u64, next: u64) -> RealtimeSource {
        RealtimeSource {
            stream: 1,
            cost_ns: cost,
            latency_excess_ns: 0,
            period_ns: period,
            relative_deadline_ns: deadline,
            pending: vec![],
            next_release_ns: next,
        }
    }

    #[test]
    fn chunk_that_fits_before_the_next_deadline_is_safe() {
        // RT block of 100 may arrive now with deadline 1000: chunk 800 + 100 + margin 50 <= 1000.
        let s = [source(100, 1000, 1000, 0)];
        assert!(replay(0, 0, 800, 50, &s).is_safe());
        let v = replay(0, 0, 900, 50, &s);
        assert_eq!(v, Verdict::Endangers { stream: 1, release_ns: 0, deadline_ns: 1000, finish_ns: 1000 });
    }

    #[test]
    fn device_backlog_counts() {
        let s = [source(100, 1000, 1000, 0)];
        assert!(!replay(0, 300, 600, 50, &s).is_safe());
        assert!(replay(0, 300, 550, 50, &s).is_safe());
    }

    #[test]
    fn later_arrivals_after_idle_do_not_matter() {
        // Next RT block arrives at 5000; a 4000 chunk finishes before it.
        let s = [source(100, 10_000, 200, 5000)];
        assert!(replay(0, 0, 4000, 50, &s).is_safe());
        assert!(replay(0, 0, 5040, 50, &s).is_safe());
        assert!(!replay(0, 0, 5100, 50, &s).is_safe());
    }

    #[test]
    fn blocks_that_may_arrive_together_count_in_any_order() {
        // Two streams may both release now; whichever comes second waits for the other.
        let a = RealtimeSource { stream: 1, ..source(500, 10_000, 5_000, 0) };
        let b = RealtimeSource { stream: 2, ..source(500, 10_000, 1_200, 0) };
        // Chunk 150: 150 + 500 + 500 + 50 = 1200 <= 1200 (b's deadline) -> safe; 151 is not.
        assert!(replay(0, 0, 150, 50, &[a.clone(), b.clone()]).is_safe());
        let v = replay(0, 0, 151, 50, &[a, b]);
        assert_eq!(v, Verdict::Endangers { stream: 2, release_ns: 0, deadline_ns: 1_200, finish_ns: 1_151 });
    }

    #[test]
    fn replay_follows_pending_then_projected_blocks() {
        let mut s = source(100, 1000, 300, 2000);
        s.pending = vec![(1000, 1300)];
        // Chunk runs to 1250: pending block released at 1000 would finish at 1350 > 1300 - 0.
        assert!(!replay(0, 0, 1250, 0, &[s.clone()]).is_safe());
        assert!(replay(0, 0, 1200, 0, &[s]).is_safe());
    }

    #[test]
    fn a_streams_latency_beyond_its_cost_comes_off_its_deadline() {
        // As chunk_that_fits_before_the_next_deadline_is_safe, but the block needs 200 ns of its
        // own after its device work: the chunk must leave 200 ns more.
        let s = [RealtimeSource { latency_excess_ns: 200, ..source(100, 1000, 1000, 0) }];
        assert!(replay(0, 0, 600, 50, &s).is_safe());
        let v = replay(0, 0, 700, 50, &s);
        assert_eq!(v, Verdict::Endangers { stream: 1, release_ns: 0, deadline_ns: 800, finish_ns: 800 });
    }

    #[test]
    fn chunk_sizing() {
        assert_eq!(chunk_units(Some(1000), 100, 100, 250), 25);
        assert_eq!(chunk_units(Some(1000), 100, 10, 250), 10);
        assert_eq!(chunk_units(Some(1000), 1, 1, 250), 1);
        assert_eq!(chunk_units(None, 100, 100, 250), 1);
        assert_eq!(chunk_units(Some(0), 100, 40, 250), 40);
        assert_eq!(chunk_cost(Some(1000), 3, 1, 250), 334);
        assert_eq!(chunk_cost(None, 3, 1, 250), 250);
        assert_eq!(chunk_cost(None, 3, 3, 250), 750);
    }
}
