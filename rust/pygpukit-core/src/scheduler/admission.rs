//! Admission control: does a new stream's reservation still fit?
//!
//! The device is modelled as one queue that runs launched work in launch order
//! (realtime blocks are launched as soon as they are released, earliest deadline
//! first among those released together). Three checks, in this order:
//!
//! 1. **Utilisation bound** (realtime): `Σ C_i/P_i + C/P <= U_max`. The headroom
//!    `1 - U_max` is what throughput chunks and best-effort work can count on.
//! 2. **Device capacity** (realtime and rate-reserving throughput):
//!    `Σ realtime + Σ reserved throughput (C·rate) + new share <= 1`.
//! 3. **Response bound** (realtime): `Σ C_i + C + margin <= min_i (D_i - E_i)` over
//!    the admitted realtime set including the new stream (every block may be released at the
//!    same instant: the critical instant; see *Release phases* below for streams that are not). With total utilisation <= 1
//!    the queue in front of a block released at `r` never holds more than one block
//!    per realtime stream, so every block's device work is done within `Σ C_i` of its
//!    release; `E_i` is stream i's own latency beyond its device cost (`L_i - C_i`: the
//!    host's copies, launch and completion wait, which overlap other streams' blocks
//!    and so are not device time, but do delay its own). This check makes the worst
//!    case fit inside every stream's deadline. `C_i` is device time (what the
//!    dispatcher measures with events), not a block's wall-clock latency alone: summing
//!    latencies would count the host's overlapped work once per stream.
//!
//! **Release phases.** A realtime stream may declare its phase: the offset within its period
//! at which its blocks are released, on a clock shared with the others (a Session staggers
//! the clocks it paces itself). Streams of one period that declare phases cannot all be
//! released at once, so for them the response bound counts, in front of a block of stream i
//! released at `φ_i`, only the work that can still be there (`J` = the safety margin, the
//! allowance for a release that comes late):
//!
//! - every block of the same period released in `[φ_i, φ_i + J]` (it may come first);
//! - the backlog of those released before: `max_w (Σ C_j released in [φ_i - w, φ_i) - w)`
//!   over `0 <= w < P` (the device serves one unit of work per unit of time; past one period
//!   the utilisation bound makes it shrink);
//! - one block of every stream of another period or of no declared phase (as before).
//!
//! Every stream's `ahead_i + C_i + margin + E_i` must fit its `D_i`. When no two streams of
//! one period declare phases this is the rule above, figure for figure.
//!
//! A refusal is a value ([`AdmissionRefused`]) carrying the figures behind it.

use std::fmt;

/// Tolerance for floating-point sums that land exactly on the bound.
const EPS: f64 = 1e-12;

/// Which check refused the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum RefusalReason {
    UtilisationBound = 1,
    DeviceCapacity = 2,
    ResponseBound = 3,
}

impl RefusalReason {
    pub fn name(self) -> &'static str {
        match self {
            RefusalReason::UtilisationBound => "utilisation_bound",
            RefusalReason::DeviceCapacity => "device_capacity",
            RefusalReason::ResponseBound => "response_bound",
        }
    }
}

/// A structured refusal.
///
/// `stream_utilisation`, `current_total` and `bound` are always set; what they are
/// ratios of depends on `reason` (see the module docs): for the response bound they
/// are `C/D_min`, `(Σ C_i + margin)/D_min` and 1. The nanosecond figures are the
/// inputs of the response bound (they are filled in for every reason): for it,
/// `shortest_deadline_ns` and `latency_excess_ns` are those of the stream whose
/// deadline binds (the least `D_i - E_i`).
#[derive(Clone, Debug, PartialEq)]
pub struct AdmissionRefused {
    pub stream: String,
    pub reason: RefusalReason,
    pub stream_utilisation: f64,
    pub current_total: f64,
    pub bound: f64,
    pub stream_cost_ns: u64,
    pub cost_sum_ns: u64,
    pub safety_margin_ns: u64,
    pub shortest_deadline_ns: u64,
    pub latency_excess_ns: u64,
    /// The response bound with release phases: the stream whose response binds.
    pub phased: Option<Box<PhasedBinding>>,
}

/// The binding stream of a response bound with release phases (see the module docs):
/// its deadline and latency excess are the refusal's `shortest_deadline_ns` and
/// `latency_excess_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhasedBinding {
    pub phase_ns: u64,
    pub period_ns: u64,
    pub cost_ns: u64,
    /// Other streams' device work that can be in front of its block.
    pub ahead_ns: u64,
}

impl fmt::Display for AdmissionRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let (RefusalReason::ResponseBound, Some(b)) = (self.reason, &self.phased) {
            return write!(
                f,
                "stream '{}' not admitted: with the release phases of the streams of period {} ns, a block \
                 released at phase {} ns can find {} ns of other streams' device work in front of it; + its \
                 cost {} ns + safety margin {} ns + its own latency beyond its cost {} ns = {} ns exceed its \
                 deadline {} ns (lengthen the deadline, lower the costs, or spread the phases)",
                self.stream,
                b.period_ns,
                b.phase_ns,
                b.ahead_ns,
                b.cost_ns,
                self.safety_margin_ns,
                self.latency_excess_ns,
                b.ahead_ns + b.cost_ns + self.safety_margin_ns + self.latency_excess_ns,
                self.shortest_deadline_ns
            );
        }
        match self.reason {
            RefusalReason::UtilisationBound => write!(
                f,
                "stream '{}' not admitted: realtime utilisation {:.4} + its {:.4} = {:.4} exceeds the bound U_max = {:.4} \
                 (lower its per-block cost, lengthen its period, or raise u_max)",
                self.stream,
                self.current_total,
                self.stream_utilisation,
                self.current_total + self.stream_utilisation,
                self.bound
            ),
            RefusalReason::DeviceCapacity => write!(
                f,
                "stream '{}' not admitted: reserved device share {:.4} + its {:.4} = {:.4} exceeds the device ({:.1}) \
                 (lower a throughput min_rate or a realtime cost)",
                self.stream,
                self.current_total,
                self.stream_utilisation,
                self.current_total + self.stream_utilisation,
                self.bound
            ),
            RefusalReason::ResponseBound if self.latency_excess_ns == 0 => write!(
                f,
                "stream '{}' not admitted: realtime block costs {} ns + its {} ns + safety margin {} ns = {} ns \
                 exceed the shortest realtime deadline {} ns (a block could wait behind one block of every \
                 realtime stream; lengthen the deadline or lower the costs)",
                self.stream,
                self.cost_sum_ns,
                self.stream_cost_ns,
                self.safety_margin_ns,
                self.cost_sum_ns + self.stream_cost_ns + self.safety_margin_ns,
                self.shortest_deadline_ns
            ),
            RefusalReason::ResponseBound => write!(
                f,
                "stream '{}' not admitted: realtime block costs {} ns + its {} ns + safety margin {} ns + the \
                 binding stream's own latency beyond its cost {} ns = {} ns exceed that stream's deadline {} ns \
                 (a block could wait behind one block of every realtime stream; lengthen the deadline or lower \
                 the costs)",
                self.stream,
                self.cost_sum_ns,
                self.stream_cost_ns,
                self.safety_margin_ns,
                self.latency_excess_ns,
                self.cost_sum_ns + self.stream_cost_ns + self.safety_margin_ns + self.latency_excess_ns,
                self.shortest_deadline_ns
            ),
        }
    }
}

impl std::error::Error for AdmissionRefused {}

/// One admitted realtime stream, as admission sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RealtimeLoad {
    pub cost_ns: u64,
    pub period_ns: u64,
    pub deadline_ns: u64,
    /// Its own latency beyond its device cost (`L - C`, 0 when the cost covers it).
    pub latency_excess_ns: u64,
    /// Its release phase within its period, when it keeps one (module docs); None: its block
    /// may be released at the same instant as any other's.
    pub phase_ns: Option<u64>,
}

impl RealtimeLoad {
    pub fn utilisation(&self) -> f64 {
        self.cost_ns as f64 / self.period_ns as f64
    }

    /// `(D - E, D, E)`: what is left of its deadline for waiting behind others' device work.
    pub fn binding(&self) -> (u64, u64, u64) {
        (self.deadline_ns.saturating_sub(self.latency_excess_ns), self.deadline_ns, self.latency_excess_ns)
    }
}

/// What is already admitted.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CurrentLoad {
    pub realtime: Vec<RealtimeLoad>,
    pub reserved_throughput: f64,
}

impl CurrentLoad {
    pub fn realtime_utilisation(&self) -> f64 {
        self.realtime.iter().map(RealtimeLoad::utilisation).sum()
    }

    pub fn realtime_cost_sum_ns(&self) -> u64 {
        self.realtime.iter().map(|l| l.cost_ns).sum()
    }

    /// The deadline that binds the response bound, `(D_i - E_i, D_i, E_i)` of the least `D_i - E_i`.
    pub fn binding_deadline(&self) -> Option<(u64, u64, u64)> {
        self.realtime.iter().map(RealtimeLoad::binding).min()
    }
}

/// The stream asking to be admitted.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Candidate {
    Realtime(RealtimeLoad),
    /// A throughput stream reserving `utilisation = C · min_rate` of the device.
    Throughput {
        cost_ns: u64,
        utilisation: f64,
    },
}

/// Admission parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdmissionPolicy {
    pub u_max: f64,
    pub safety_margin_ns: u64,
}

/// What admission found when it said yes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admitted {
    pub stream_utilisation: f64,
    pub realtime_total: f64,
    pub reserved_total: f64,
}

/// Run the checks. `Ok` carries the totals with the stream included.
pub fn check(
    policy: &AdmissionPolicy,
    current: &CurrentLoad,
    stream: &str,
    candidate: &Candidate,
) -> Result<Admitted, AdmissionRefused> {
    let rt_total = current.realtime_utilisation();
    let reserved_total = rt_total + current.reserved_throughput;
    let cost_sum = current.realtime_cost_sum_ns();
    let (share, cost, own) = match *candidate {
        Candidate::Realtime(load) => (load.utilisation(), load.cost_ns, Some(load.binding())),
        Candidate::Throughput { cost_ns, utilisation } => (utilisation, cost_ns, None),
    };
    let (_, shortest, excess) = match (current.binding_deadline(), own) {
        (Some(a), Some(b)) => a.min(b),
        (a, b) => a.or(b).unwrap_or((0, 0, 0)),
    };
    let refuse = |reason, stream_utilisation, current_total, bound| AdmissionRefused {
        stream: stream.to_string(),
        reason,
        stream_utilisation,
        current_total,
        bound,
        stream_cost_ns: cost,
        cost_sum_ns: cost_sum,
        safety_margin_ns: policy.safety_margin_ns,
        shortest_deadline_ns: shortest,
        latency_excess_ns: excess,
        phased: None,
    };

    if let Candidate::Realtime(_) = candidate {
        if rt_total + share > policy.u_max + EPS {
            return Err(refuse(RefusalReason::UtilisationBound, share, rt_total, policy.u_max));
        }
    }
    if reserved_total + share > 1.0 + EPS {
        return Err(refuse(RefusalReason::DeviceCapacity, share, reserved_total, 1.0));
    }
    if let Candidate::Realtime(load) = candidate {
        let mut all = current.realtime.clone();
        all.push(*load);
        if has_phased_group(&all) {
            if let Some(b) = phased_binding(&all, policy.safety_margin_ns) {
                let (l, ahead) = (all[b.0], b.1);
                let need =
                    ahead as u128 + l.cost_ns as u128 + policy.safety_margin_ns as u128 + l.latency_excess_ns as u128;
                let d = l.deadline_ns.max(1) as f64;
                let mut r = refuse(RefusalReason::ResponseBound, cost as f64 / d, need as f64 / d, 1.0);
                r.shortest_deadline_ns = l.deadline_ns;
                r.latency_excess_ns = l.latency_excess_ns;
                r.phased = Some(Box::new(PhasedBinding {
                    phase_ns: l.phase_ns.unwrap_or(0) % l.period_ns.max(1),
                    period_ns: l.period_ns,
                    cost_ns: l.cost_ns,
                    ahead_ns: ahead,
                }));
                return Err(r);
            }
        } else {
            let needed = cost_sum as u128 + cost as u128 + policy.safety_margin_ns as u128 + excess as u128;
            if needed > shortest as u128 {
                let d = shortest.max(1) as f64;
                return Err(refuse(
                    RefusalReason::ResponseBound,
                    cost as f64 / d,
                    (cost_sum + policy.safety_margin_ns + excess) as f64 / d,
                    1.0,
                ));
            }
        }
        return Ok(Admitted {
            stream_utilisation: share,
            realtime_total: rt_total + share,
            reserved_total: reserved_total + share,
        });
    }
    Ok(Admitted { stream_utilisation: share, realtime_total: rt_total, reserved_total: reserved_total + share })
}

/// Do two streams of one period both declare a release phase?
fn has_phased_group(all: &[RealtimeLoad]) -> bool {
    let mut seen: Vec<u64> = Vec::new();
    for l in all.iter().filter(|l| l.phase_ns.is_some()) {
        if seen.contains(&l.period_ns) {
            return true;
        }
        seen.push(l.period_ns);
    }
    false
}

/// The device work that can be in front of each stream's block (module docs, *Release
/// phases*); returns the stream that overruns its deadline the most, with its figure, or None
/// when every stream fits. `jitter_ns`: how late a release may come.
fn phased_binding(all: &[RealtimeLoad], jitter_ns: u64) -> Option<(usize, u64)> {
    let total: u64 = all.iter().map(|l| l.cost_ns).sum();
    // phased members of each period, sorted by phase
    let mut groups: Vec<(u64, Vec<(u64, usize)>)> = Vec::new();
    for (i, l) in all.iter().enumerate() {
        let Some(phase) = l.phase_ns else { continue };
        let p = l.period_ns.max(1);
        match groups.iter_mut().find(|g| g.0 == p) {
            Some(g) => g.1.push((phase % p, i)),
            None => groups.push((p, vec![(phase % p, i)])),
        }
    }
    let mut ahead = vec![0u64; all.len()];
    let mut in_group = vec![false; all.len()];
    for (p, members) in groups.iter_mut().filter(|g| g.1.len() >= 2) {
        members.sort_unstable();
        let (p, g) = (*p as i128, members.len());
        let group_cost: u64 = members.iter().map(|&(_, i)| all[i].cost_ns).sum();
        // three laps of the group's releases: position t is member t % g, one period later per lap
        let psi = |t: usize| members[t % g].0 as i128 + p * (t / g) as i128;
        let mut sums = vec![0i128; 3 * g + 1];
        for t in 0..3 * g {
            sums[t + 1] = sums[t] + all[members[t % g].1].cost_ns as i128;
        }
        let b = |t: usize| sums[t] - psi(t); // work released from t on, less the time from t
        let mut window: std::collections::VecDeque<usize> = std::collections::VecDeque::new(); // least b first
        let mut next_in = 1; // the next position to enter the back window
        let mut right = g; // the last position within the jitter after the block (front)
        for (k, &(_, i)) in members.iter().enumerate() {
            let at = k + g; // this member's block, in the middle lap
            in_group[i] = true;
            // back: the blocks released before it, [at - g + 1, at - 1]: the most work still queued
            while next_in < at {
                while window.back().is_some_and(|&u| b(u) >= b(next_in)) {
                    window.pop_back();
                }
                window.push_back(next_in);
                next_in += 1;
            }
            while window.front().is_some_and(|&u| u < k + 1) {
                window.pop_front();
            }
            let back = window.front().map_or(0, |&u| (sums[at] - psi(at)) - b(u)).max(0);
            // front: released in [φ_i, φ_i + J] after it in order (equal phases later in the sort too)
            right = right.max(at);
            while right + 1 < at + g && psi(right + 1) - psi(at) <= jitter_ns as i128 {
                right += 1;
            }
            let front = sums[right + 1] - sums[at + 1];
            ahead[i] = (front + back) as u64 + (total - group_cost);
        }
    }
    let mut worst: Option<(usize, u64, u128)> = None;
    for (i, l) in all.iter().enumerate() {
        if !in_group[i] {
            ahead[i] = total - l.cost_ns; // one block of every other stream
        }
        let need = ahead[i] as u128 + l.cost_ns as u128 + jitter_ns as u128 + l.latency_excess_ns as u128;
        if need > l.deadline_ns as u128 {
            let over = need - l.deadline_ns as u128;
            if worst.is_none_or(|w| over > w.2) {
                worst = Some((i, ahead[i], over));
            }
        }
    }
    worst.map(|(i, a, _)| (i, a))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: AdmissionPolicy = AdmissionPolicy { u_max: 0.9, safety_margin_ns: 10 };

    fn rt(cost_ns: u64, period_ns: u64) -> RealtimeLoad {
        RealtimeLoad { cost_ns, period_ns, deadline_ns: period_ns, latency_excess_ns: 0, phase_ns: None }
    }

    #[test]
    fn admits_within_the_bound() {
        let current = CurrentLoad { realtime: vec![rt(400, 1000)], reserved_throughput: 0.0 };
        let ok = check(&POLICY, &current, "b", &Candidate::Realtime(rt(500, 1000))).unwrap();
        assert!((ok.realtime_total - 0.9).abs() < 1e-12);
    }

    #[test]
    fn utilisation_refusal_carries_the_numbers() {
        let current = CurrentLoad { realtime: vec![rt(400, 1000)], reserved_throughput: 0.0 };
        let err = check(&POLICY, &current, "b", &Candidate::Realtime(rt(5100, 10_000))).unwrap_err();
        assert_eq!(err.reason, RefusalReason::UtilisationBound);
        assert_eq!(err.stream, "b");
        assert!((err.stream_utilisation - 0.51).abs() < 1e-12);
        assert!((err.current_total - 0.4).abs() < 1e-12);
        assert_eq!(err.bound, 0.9);
        assert!(err.to_string().contains("exceeds the bound U_max = 0.9000"));
    }

    #[test]
    fn throughput_reservations_limit_realtime() {
        let current = CurrentLoad { realtime: vec![], reserved_throughput: 0.5 };
        let err = check(&POLICY, &current, "rt", &Candidate::Realtime(rt(600, 1000))).unwrap_err();
        assert_eq!(err.reason, RefusalReason::DeviceCapacity);
        assert_eq!(err.current_total, 0.5);
        let tp = Candidate::Throughput { cost_ns: 1, utilisation: 0.6 };
        assert_eq!(check(&POLICY, &current, "tp", &tp).unwrap_err().reason, RefusalReason::DeviceCapacity);
        let tp = Candidate::Throughput { cost_ns: 1, utilisation: 0.5 };
        assert!(check(&POLICY, &current, "tp", &tp).is_ok());
    }

    #[test]
    fn response_bound_uses_the_shortest_deadline() {
        // Utilisation is tiny but the long block could sit in front of the short-deadline one.
        let current = CurrentLoad { realtime: vec![rt(95, 100_000)], reserved_throughput: 0.0 };
        let short =
            RealtimeLoad { cost_ns: 1, period_ns: 1_000, deadline_ns: 100, latency_excess_ns: 0, phase_ns: None };
        let err = check(&POLICY, &current, "short", &Candidate::Realtime(short)).unwrap_err();
        assert_eq!(err.reason, RefusalReason::ResponseBound);
        assert_eq!((err.cost_sum_ns, err.stream_cost_ns, err.shortest_deadline_ns), (95, 1, 100));
        assert!(err.to_string().contains("106 ns"));
        let fits =
            RealtimeLoad { cost_ns: 1, period_ns: 1_000, deadline_ns: 106, latency_excess_ns: 0, phase_ns: None };
        assert!(check(&POLICY, &current, "ok", &Candidate::Realtime(fits)).is_ok());
    }

    #[test]
    fn response_bound_adds_the_binding_streams_own_latency_beyond_its_cost() {
        // Device costs of 100 ns each fit a 1000-ns deadline many times over; a stream whose block
        // takes 700 ns alone (600 beyond its cost) has only 400 ns left to wait behind the others.
        let slow = RealtimeLoad {
            cost_ns: 100,
            period_ns: 100_000,
            deadline_ns: 1_000,
            latency_excess_ns: 600,
            phase_ns: None,
        };
        let current = CurrentLoad { realtime: vec![slow, rt(100, 100_000)], reserved_throughput: 0.0 };
        // 200 + 100 + 10 + 600 = 910 <= 1000
        assert!(check(&POLICY, &current, "c", &Candidate::Realtime(rt(100, 100_000))).is_ok());
        let err = check(&POLICY, &current, "d", &Candidate::Realtime(rt(200, 100_000))).unwrap_err();
        assert_eq!(err.reason, RefusalReason::ResponseBound);
        assert_eq!((err.shortest_deadline_ns, err.latency_excess_ns), (1_000, 600));
        assert!(err.to_string().contains("own latency beyond its cost 600 ns = 1010 ns"), "{err}");
        // the candidate's own excess binds too
        let own = RealtimeLoad { deadline_ns: 1_000, latency_excess_ns: 800, ..rt(100, 100_000) };
        let current = CurrentLoad { realtime: vec![rt(100, 100_000)], reserved_throughput: 0.0 };
        let err = check(&POLICY, &current, "e", &Candidate::Realtime(own)).unwrap_err();
        assert_eq!((err.shortest_deadline_ns, err.latency_excess_ns), (1_000, 800));
        // 100+100+10+800 > 1000
    }
    fn phased(cost_ns: u64, period_ns: u64, deadline_ns: u64, phase_ns: u64) -> RealtimeLoad {
        RealtimeLoad { cost_ns, period_ns, deadline_ns, latency_excess_ns: 0, phase_ns: Some(phase_ns) }
    }

    /// Admit `n` streams of one kind in order; how many fit.
    fn admitted(n: usize, make: impl Fn(usize) -> RealtimeLoad) -> usize {
        let mut current = CurrentLoad::default();
        for k in 0..n {
            let load = make(k);
            if check(&POLICY_50, &current, "s", &Candidate::Realtime(load)).is_err() {
                return k;
            }
            current.realtime.push(load);
        }
        n
    }

    const POLICY_50: AdmissionPolicy = AdmissionPolicy { u_max: 0.9, safety_margin_ns: 50 };

    #[test]
    fn staggered_phases_are_bounded_by_utilisation_not_the_sum_of_costs() {
        // 100 streams of 10 ns every 1000 ns, deadline 200: every block at once would need
        // 100 x 10 + 50 = 1050 > 200 (the critical instant admits 15); spread evenly (one
        // every 10 ns), a block finds at most the 5 released within the margin after it
        // plus whatever backlog is left: 10 + 50 + 50 <= 200 for all of the 90 the
        // utilisation bound allows.
        assert_eq!(admitted(100, |_| RealtimeLoad { phase_ns: None, ..phased(10, 1000, 200, 0) }), 15);
        let n = admitted(100, |k| phased(10, 1000, 200, (k as u64 * 10) % 1000));
        assert_eq!(n, 90, "the utilisation bound binds, not the response bound");
    }

    #[test]
    fn equal_phases_are_the_critical_instant() {
        // every stream declares phase 0: the same answer as no phase at all
        let none = admitted(100, |_| RealtimeLoad { phase_ns: None, ..phased(10, 1000, 200, 0) });
        let zero = admitted(100, |_| phased(10, 1000, 200, 0));
        assert_eq!((none, zero), (15, 15));
    }

    #[test]
    fn a_refusal_with_phases_names_the_binding_stream_and_its_work_in_front() {
        // three streams at phase 0 and a fourth at 5 (within the 50-ns margin after them):
        // a block at 0 can find the other three in front (300); the one at 5 finds what is
        // left of the three at 0 (295).
        let d = 449;
        let current = CurrentLoad { realtime: vec![phased(100, 10_000, d, 0); 3], reserved_throughput: 0.0 };
        let err = check(&POLICY_50, &current, "late", &Candidate::Realtime(phased(100, 10_000, d, 5))).unwrap_err();
        assert_eq!(err.reason, RefusalReason::ResponseBound);
        let b = err.phased.clone().expect("a phased refusal");
        assert_eq!((b.phase_ns, b.ahead_ns, b.cost_ns, b.period_ns), (0, 300, 100, 10_000));
        assert_eq!(err.shortest_deadline_ns, d);
        let text = err.to_string();
        assert!(text.contains("phase 0 ns can find 300 ns of other streams' device work in front of it"), "{text}");
        assert!(text.contains("= 450 ns exceed its deadline 449 ns"), "{text}");
        // out of the margin's reach (phase 5000) it fits: its block finds nothing in front
        assert!(check(&POLICY_50, &current, "apart", &Candidate::Realtime(phased(100, 10_000, d, 5000))).is_ok());
    }

    #[test]
    fn backlog_of_a_burst_before_counts() {
        // four blocks of 100 at phase 0, a fifth at phase 150: the device has served 150 of the
        // 400 when it arrives, so 250 are still in front of it.
        let mut all = vec![phased(100, 10_000, 10_000, 0); 4];
        all.push(phased(100, 10_000, 395, 150));
        // 250 + 100 + 50 = 400 > 395
        let (i, ahead) = phased_binding(&all, 50).expect("the late one overruns");
        assert_eq!((i, ahead), (4, 250));
        all[4].deadline_ns = 400;
        assert_eq!(phased_binding(&all, 50), None);
    }

    #[test]
    fn unphased_streams_count_whole_in_front_of_phased_ones() {
        // two phased streams far apart, and one without a phase: each phased block finds the
        // unphased block (200) in front; the unphased one finds both phased blocks.
        let all = vec![
            phased(100, 10_000, 1_000, 0),
            phased(100, 10_000, 1_000, 5_000),
            RealtimeLoad { phase_ns: None, ..phased(200, 10_000, 1_000, 0) },
        ];
        assert_eq!(phased_binding(&all, 50), None);
        let mut tight = all.clone();
        tight[0].deadline_ns = 349; // 200 + 100 + 50 = 350
        assert_eq!(phased_binding(&tight, 50), Some((0, 200)));
        tight[0].deadline_ns = 1_000;
        tight[2].deadline_ns = 449; // 200 + 200 + 50 = 450
        assert_eq!(phased_binding(&tight, 50), Some((2, 200)));
    }
    /// The work in front of each block, straight from the definition (module docs): every
    /// other member released in [φ_i, φ_i + J], and the most of what was released before that
    /// can still be queued, max over w of (Σ C released in [φ_i - w, φ_i) - w).
    fn ahead_by_definition(all: &[RealtimeLoad], jitter: u64) -> Vec<u64> {
        let p = all[0].period_ns;
        (0..all.len())
            .map(|i| {
                let phi = all[i].phase_ns.unwrap();
                let d = |j: usize| (all[j].phase_ns.unwrap() + p - phi) % p;
                let front: u64 = (0..all.len()).filter(|&j| j != i && d(j) <= jitter).map(|j| all[j].cost_ns).sum();
                let mut before: Vec<(u64, u64)> =
                    (0..all.len()).filter(|&j| j != i && d(j) != 0).map(|j| (p - d(j), all[j].cost_ns)).collect();
                before.sort_unstable();
                let (mut cum, mut best) = (0i128, 0i128);
                for (back, c) in before {
                    cum += c as i128;
                    best = best.max(cum - back as i128);
                }
                front + best as u64
            })
            .collect()
    }

    #[test]
    fn the_work_in_front_matches_its_definition_on_random_phases() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for round in 0..200 {
            let n = 2 + next(40) as usize;
            let p = 1_000 + next(10_000);
            let coarse = round % 3 == 0; // few distinct phases: many equal ones
            let all: Vec<RealtimeLoad> = (0..n)
                .map(|_| {
                    let phase = if coarse { next(4) * (p / 4) } else { next(p) };
                    phased(1 + next(p / (2 * n as u64) + 1), p, u64::MAX / 4, phase)
                })
                .collect();
            let jitter = next(p / 5);
            let want = ahead_by_definition(&all, jitter);
            let mut tight = all.clone();
            for (i, l) in tight.iter_mut().enumerate() {
                // a deadline one short of the response: each stream in turn must be found
                l.deadline_ns = want[i] + l.cost_ns + jitter - 1;
            }
            for i in 0..n {
                let mut one = all.clone();
                one[i].deadline_ns = tight[i].deadline_ns;
                assert_eq!(phased_binding(&one, jitter), Some((i, want[i])), "round {round}, stream {i}");
                one[i].deadline_ns += 1;
                assert_eq!(phased_binding(&one, jitter), None, "round {round}, stream {i}");
            }
        }
    }
}
