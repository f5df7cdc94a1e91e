//! Admission control: does a new stream's reservation still fit?
//!
//! Admission is a policy the scheduler is handed ([`AdmissionPolicy`]: a trait, so that another
//! model of a device is one more file); its default is the
//! [`DeviceModel`](super::device_model::DeviceModel) of a device's serial resources, the GPU's
//! queue and the dispatcher that launches every block (device_model.rs). This file holds the
//! queue's checks, the records a check hands out, and the trait.
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
//! The device model adds the dispatcher: a realtime stream's cost in these checks is the larger
//! of its device time and its dispatcher work per block as counted against `U_max`, and two more
//! refusals (`dispatcher_hold`, `latency_tail`): see device_model.rs.
//!
//! A refusal is a value ([`AdmissionRefused`]) carrying the figures behind it.

use std::fmt;
use std::num::NonZeroU64;

mod phased;

use phased::{has_phased_group, phased_binding};

/// Tolerance for floating-point sums that land exactly on the bound.
const EPS: f64 = 1e-12;

/// Which check refused the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum RefusalReason {
    UtilisationBound = 1,
    DeviceCapacity = 2,
    ResponseBound = 3,
    /// The device's shortest realtime deadline is no longer than the dispatcher's lock may be
    /// held: no share of the lock keeps a block within it (device_model.rs).
    DispatcherHold = 4,
    /// A realtime stream's measured latency tail reaches past its deadline (device_model.rs).
    LatencyTail = 5,
}

impl RefusalReason {
    pub fn name(self) -> &'static str {
        match self {
            RefusalReason::UtilisationBound => "utilisation_bound",
            RefusalReason::DeviceCapacity => "device_capacity",
            RefusalReason::ResponseBound => "response_bound",
            RefusalReason::DispatcherHold => "dispatcher_hold",
            RefusalReason::LatencyTail => "latency_tail",
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
    /// Where the device counts its dispatcher's work (the stream's, or the device's hold for
    /// `dispatcher_hold`): the figures of that count.
    pub dispatcher: Option<Box<DispatcherCount>>,
    /// `latency_tail`: how far the stream's latency from release reaches (its deadline is
    /// `shortest_deadline_ns`).
    pub tail_reach_ns: Option<NonZeroU64>,
}

/// The dispatcher's part of a refusal (device_model.rs): the share of its time its lock may be
/// held, the hold behind that share, and the stream's dispatcher work per block as measured and
/// as counted against `U_max` (0 and 0 where the stream's is not counted).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DispatcherCount {
    pub share: f64,
    pub hold_ns: u64,
    pub dispatch_ns: u64,
    pub counted_ns: u64,
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
            RefusalReason::DispatcherHold => write!(
                f,
                "stream '{}' not admitted: the shortest realtime deadline of its device, {} ns, is no longer than \
                 the {} ns a block may find the dispatcher's lock held (lengthen the deadline, or run fewer realtime \
                 streams on this device)",
                self.stream,
                self.shortest_deadline_ns,
                self.dispatcher.as_ref().map_or(0, |d| d.hold_ns)
            ),
            RefusalReason::LatencyTail => write!(
                f,
                "stream '{}' not admitted: its latency from release reaches {} ns, past its deadline {} ns (the \
                 dispatcher's queue at this load: run fewer realtime streams on this device, or lengthen the deadline)",
                self.stream,
                self.tail_reach_ns.map_or(0, NonZeroU64::get),
                self.shortest_deadline_ns
            ),
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
    /// Its device time per block (declared, or measured when larger).
    pub cost_ns: u64,
    pub period_ns: u64,
    pub deadline_ns: u64,
    /// Its own latency beyond its device cost (`L - C`, 0 when the cost covers it).
    pub latency_excess_ns: u64,
    /// Its release phase within its period, when it keeps one (module docs); None: its block
    /// may be released at the same instant as any other's.
    pub phase_ns: Option<u64>,
    /// The dispatcher's serial work per block among the device's streams, where it was measured
    /// (device_model.rs); None: not counted.
    pub dispatch_ns: Option<u64>,
    /// How far its latency from release reaches (a measurement among the device's streams);
    /// None: not measured.
    pub tail_reach_ns: Option<u64>,
}

impl RealtimeLoad {
    /// A stream of this cost, period and deadline, with nothing else declared.
    pub const fn new(cost_ns: u64, period_ns: u64, deadline_ns: u64) -> Self {
        RealtimeLoad {
            cost_ns,
            period_ns,
            deadline_ns,
            latency_excess_ns: 0,
            phase_ns: None,
            dispatch_ns: None,
            tail_reach_ns: None,
        }
    }

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

impl Candidate {
    /// The realtime load it asks for (None for throughput).
    pub fn realtime(&self) -> Option<&RealtimeLoad> {
        match self {
            Candidate::Realtime(load) => Some(load),
            Candidate::Throughput { .. } => None,
        }
    }
}

/// What the scheduler asks of its admission: the one trait, with the
/// [`DeviceModel`](super::device_model::DeviceModel) as its default.
pub trait AdmissionPolicy: fmt::Debug + Send + Sync {
    /// Admit `candidate` beside `current`? `Ok` carries the totals with the stream included.
    fn check(&self, current: &CurrentLoad, stream: &str, candidate: &Candidate) -> Result<Admitted, AdmissionRefused>;

    /// The block cost each realtime stream of `realtime` (a device's admitted streams) is counted
    /// with among them: its device time, or more where the model counts other serial work.
    fn counted_costs(&self, realtime: &[RealtimeLoad]) -> Vec<u64>;

    /// The share of its time the dispatcher may be busy with blocks of realtime streams whose
    /// shortest deadline is `shortest_deadline_ns` (None: no deadline).
    fn dispatcher_share(&self, shortest_deadline_ns: Option<u64>) -> f64;

    /// A block's dispatcher work as counted against `U_max` at that share; None where no share
    /// of the dispatcher is left (`share <= 0`).
    fn counted_dispatch_ns(&self, dispatch_ns: u64, share: f64) -> Option<u64>;

    /// May these realtime streams (a device's, named) have their dispatcher work counted?
    /// `Ok`: the dispatcher share; `Err`: `dispatcher_hold`, naming the stream whose deadline binds.
    fn check_dispatcher_hold(&self, realtime: &[(&str, RealtimeLoad)]) -> Result<f64, AdmissionRefused>;

    /// Do the measured latency tails of these realtime streams (a device's, named, in
    /// registration order) fit their deadlines? `Err`: `latency_tail`, naming the last that does not.
    fn check_latency_tails(&self, realtime: &[(&str, RealtimeLoad)]) -> Result<(), AdmissionRefused>;
}

/// What admission found when it said yes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Admitted {
    pub stream_utilisation: f64,
    pub realtime_total: f64,
    pub reserved_total: f64,
}

/// What admission counts for one admitted stream (`Scheduler::stream_admission`).
#[derive(Clone, Debug, PartialEq)]
pub struct StreamAdmission {
    pub stream: String,
    /// The cost it is admitted and paced with (`StreamStats::cost_ns`).
    pub cost_ns: Option<u64>,
    /// Its device time per block, before the dispatcher's work is counted.
    pub device_cost_ns: Option<u64>,
    /// Its dispatcher work per block, as measured (None: not counted).
    pub dispatch_ns: Option<u64>,
    /// That work as counted against `U_max` at the device's dispatcher share.
    pub dispatch_counted_ns: Option<u64>,
    /// The share of its time the device's dispatcher may be busy, at its shortest realtime deadline.
    pub dispatcher_share: f64,
    /// How far its latency from release reaches, as measured (None: not measured).
    pub tail_reach_ns: Option<u64>,
}

/// The queue's three checks (module docs) under `u_max` and `safety_margin_ns`, for costs as the
/// device model counts them. `Ok` carries the totals with the stream included.
pub(super) fn check_queue(
    u_max: f64,
    safety_margin_ns: u64,
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
        safety_margin_ns,
        shortest_deadline_ns: shortest,
        latency_excess_ns: excess,
        phased: None,
        dispatcher: None,
        tail_reach_ns: None,
    };

    if let Candidate::Realtime(_) = candidate {
        if rt_total + share > u_max + EPS {
            return Err(refuse(RefusalReason::UtilisationBound, share, rt_total, u_max));
        }
    }
    if reserved_total + share > 1.0 + EPS {
        return Err(refuse(RefusalReason::DeviceCapacity, share, reserved_total, 1.0));
    }
    if let Candidate::Realtime(load) = candidate {
        let mut all = current.realtime.clone();
        all.push(*load);
        if has_phased_group(&all) {
            if let Some(b) = phased_binding(&all, safety_margin_ns) {
                let (l, ahead) = (all[b.0], b.1);
                let need = ahead as u128 + l.cost_ns as u128 + safety_margin_ns as u128 + l.latency_excess_ns as u128;
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
            let needed = cost_sum as u128 + cost as u128 + safety_margin_ns as u128 + excess as u128;
            if needed > shortest as u128 {
                let d = shortest.max(1) as f64;
                return Err(refuse(
                    RefusalReason::ResponseBound,
                    cost as f64 / d,
                    (cost_sum + safety_margin_ns + excess) as f64 / d,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::device_model::DeviceModel;

    const POLICY: DeviceModel = DeviceModel::queue_only(0.9, 10);

    fn rt(cost_ns: u64, period_ns: u64) -> RealtimeLoad {
        RealtimeLoad::new(cost_ns, period_ns, period_ns)
    }

    #[test]
    fn admits_within_the_bound() {
        let current = CurrentLoad { realtime: vec![rt(400, 1000)], reserved_throughput: 0.0 };
        let ok = POLICY.check(&current, "b", &Candidate::Realtime(rt(500, 1000))).unwrap();
        assert!((ok.realtime_total - 0.9).abs() < 1e-12);
    }

    #[test]
    fn utilisation_refusal_carries_the_numbers() {
        let current = CurrentLoad { realtime: vec![rt(400, 1000)], reserved_throughput: 0.0 };
        let err = POLICY.check(&current, "b", &Candidate::Realtime(rt(5100, 10_000))).unwrap_err();
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
        let err = POLICY.check(&current, "rt", &Candidate::Realtime(rt(600, 1000))).unwrap_err();
        assert_eq!(err.reason, RefusalReason::DeviceCapacity);
        assert_eq!(err.current_total, 0.5);
        let tp = Candidate::Throughput { cost_ns: 1, utilisation: 0.6 };
        assert_eq!(POLICY.check(&current, "tp", &tp).unwrap_err().reason, RefusalReason::DeviceCapacity);
        let tp = Candidate::Throughput { cost_ns: 1, utilisation: 0.5 };
        assert!(POLICY.check(&current, "tp", &tp).is_ok());
    }

    #[test]
    fn response_bound_uses_the_shortest_deadline() {
        // Utilisation is tiny but the long block could sit in front of the short-deadline one.
        let current = CurrentLoad { realtime: vec![rt(95, 100_000)], reserved_throughput: 0.0 };
        let short = RealtimeLoad::new(1, 1_000, 100);
        let err = POLICY.check(&current, "short", &Candidate::Realtime(short)).unwrap_err();
        assert_eq!(err.reason, RefusalReason::ResponseBound);
        assert_eq!((err.cost_sum_ns, err.stream_cost_ns, err.shortest_deadline_ns), (95, 1, 100));
        assert!(err.to_string().contains("106 ns"));
        let fits = RealtimeLoad::new(1, 1_000, 106);
        assert!(POLICY.check(&current, "ok", &Candidate::Realtime(fits)).is_ok());
    }

    #[test]
    fn response_bound_adds_the_binding_streams_own_latency_beyond_its_cost() {
        // Device costs of 100 ns each fit a 1000-ns deadline many times over; a stream whose block
        // takes 700 ns alone (600 beyond its cost) has only 400 ns left to wait behind the others.
        let slow = RealtimeLoad { latency_excess_ns: 600, ..RealtimeLoad::new(100, 100_000, 1_000) };
        let current = CurrentLoad { realtime: vec![slow, rt(100, 100_000)], reserved_throughput: 0.0 };
        // 200 + 100 + 10 + 600 = 910 <= 1000
        assert!(POLICY.check(&current, "c", &Candidate::Realtime(rt(100, 100_000))).is_ok());
        let err = POLICY.check(&current, "d", &Candidate::Realtime(rt(200, 100_000))).unwrap_err();
        assert_eq!(err.reason, RefusalReason::ResponseBound);
        assert_eq!((err.shortest_deadline_ns, err.latency_excess_ns), (1_000, 600));
        assert!(err.to_string().contains("own latency beyond its cost 600 ns = 1010 ns"), "{err}");
        // the candidate's own excess binds too
        let own = RealtimeLoad { deadline_ns: 1_000, latency_excess_ns: 800, ..rt(100, 100_000) };
        let current = CurrentLoad { realtime: vec![rt(100, 100_000)], reserved_throughput: 0.0 };
        let err = POLICY.check(&current, "e", &Candidate::Realtime(own)).unwrap_err();
        assert_eq!((err.shortest_deadline_ns, err.latency_excess_ns), (1_000, 800));
        // 100+100+10+800 > 1000
    }
}
