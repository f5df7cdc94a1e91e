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
//!    the admitted realtime set including the new stream. With total utilisation <= 1
//!    the queue in front of a block released at `r` never holds more than one block
//!    per realtime stream, so every block's device work is done within `Σ C_i` of its
//!    release; `E_i` is stream i's own latency beyond its device cost (`L_i - C_i`: the
//!    host's copies, launch and completion wait, which overlap other streams' blocks
//!    and so are not device time, but do delay its own). This check makes the worst
//!    case fit inside every stream's deadline. `C_i` is device time (what the
//!    dispatcher measures with events), not a block's wall-clock latency alone: summing
//!    latencies would count the host's overlapped work once per stream.
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
}

impl fmt::Display for AdmissionRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
    };

    if let Candidate::Realtime(_) = candidate {
        if rt_total + share > policy.u_max + EPS {
            return Err(refuse(RefusalReason::UtilisationBound, share, rt_total, policy.u_max));
        }
    }
    if reserved_total + share > 1.0 + EPS {
        return Err(refuse(RefusalReason::DeviceCapacity, share, reserved_total, 1.0));
    }
    if let Candidate::Realtime(_) = candidate {
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

    const POLICY: AdmissionPolicy = AdmissionPolicy { u_max: 0.9, safety_margin_ns: 10 };

    fn rt(cost_ns: u64, period_ns: u64) -> RealtimeLoad {
        RealtimeLoad { cost_ns, period_ns, deadline_ns: period_ns, latency_excess_ns: 0 }
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
        let short = RealtimeLoad { cost_ns: 1, period_ns: 1_000, deadline_ns: 100, latency_excess_ns: 0 };
        let err = check(&POLICY, &current, "short", &Candidate::Realtime(short)).unwrap_err();
        assert_eq!(err.reason, RefusalReason::ResponseBound);
        assert_eq!((err.cost_sum_ns, err.stream_cost_ns, err.shortest_deadline_ns), (95, 1, 100));
        assert!(err.to_string().contains("106 ns"));
        let fits = RealtimeLoad { cost_ns: 1, period_ns: 1_000, deadline_ns: 106, latency_excess_ns: 0 };
        assert!(check(&POLICY, &current, "ok", &Candidate::Realtime(fits)).is_ok());
    }

    #[test]
    fn response_bound_adds_the_binding_streams_own_latency_beyond_its_cost() {
        // Device costs of 100 ns each fit a 1000-ns deadline many times over; a stream whose block
        // takes 700 ns alone (600 beyond its cost) has only 400 ns left to wait behind the others.
        let slow = RealtimeLoad { cost_ns: 100, period_ns: 100_000, deadline_ns: 1_000, latency_excess_ns: 600 };
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
}
