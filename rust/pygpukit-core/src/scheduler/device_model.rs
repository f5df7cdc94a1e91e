//! The default admission policy: a model of one device's serial resources.
//!
//! Every block of a device's realtime streams passes through two resources that serve one block
//! at a time:
//!
//! * **the GPU's queue**: launched work runs in launch order. Its checks are admission.rs's: the
//!   utilisation bound, the device's capacity and the response bound (with release phases).
//! * **the dispatcher**: one thread per GPU takes every block's hand-over, polls its completion,
//!   decides what runs next and launches it, all under one lock. The lock is a queue too, and
//!   its steps are uneven: a poll that finds a batch of completions, or a driver call that
//!   stalls, or the host pausing the thread that holds it, keeps it held far longer than a
//!   block's typical step.
//!
//! **The dispatcher bound.** A block may find the lock held for up to `H` (`hold_ns`: the
//! longest lock step under load, a calibration of the machine), and whatever is released
//! meanwhile queues with it; a server busy a share `U` of its time clears that backlog at
//! `1 - U` of its speed, so the block waits about `H / (1 - U)`. Keeping that within the
//! shortest deadline `D` of the device's realtime streams (they share the one lock) bounds the
//! share of its time the lock may be held:
//!
//! ```text
//! b(D) = min(busy_cap, 1 - H / D)            (0 when D <= H)
//! ```
//!
//! `busy_cap` is a policy's choice: past it the lock's own steps grow (each poll finds a bigger
//! batch). A realtime stream whose dispatcher work per block `W` was measured (among the
//! device's streams, by a rehearsal) is counted in the queue's checks with the cost
//! `max(C, W · max(1, U_max / b(D)))`: streams that fill `U_max` then hold the lock at most
//! `b(D)` of the time, `Σ W_i / P_i <= b(D)`, and the stream whose counted work is the larger
//! is admitted and paced by it (both resources serve every block, so a block costs the larger).
//! A stream whose dispatcher work was not measured (`dispatch_ns` None) is counted by its device
//! time alone.
//!
//! Two refusals come with the dispatcher:
//!
//! * `dispatcher_hold`: the device's shortest realtime deadline is no longer than `H`, so no
//!   share of the lock keeps a block within it (a single hold misses it). Checked when a stream
//!   whose dispatcher work is counted is admitted, and on its own
//!   ([`AdmissionPolicy::check_dispatcher_hold`]) before that work is measured.
//! * `latency_tail`: a stream's latency from release, measured among the device's streams, reaches
//!   past its deadline within the measurement's horizon (`tail_reach_ns`: the caller fits and
//!   extrapolates the tail; the model only compares). Checked over the device's streams
//!   ([`AdmissionPolicy::check_latency_tails`]) once they are all admitted: the last stream in
//!   registration order whose reach passes its deadline is refused (the one that crowded the
//!   device past it).
//!
//! With the default `busy_cap` 1 and `hold_ns` 0 and no dispatcher work given (the C ABI's
//! streams), the model is the queue's checks alone.

use super::admission::{
    check_queue, AdmissionPolicy, AdmissionRefused, Admitted, Candidate, CurrentLoad, DispatcherCount, RealtimeLoad,
    RefusalReason,
};
use super::SchedulerConfig;
use std::num::NonZeroU64;

/// The dispatcher's part of the model (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DispatcherModel {
    /// The most of its time the lock may be held by realtime streams' blocks, (0, 1].
    pub busy_cap: f64,
    /// How long a block may find the lock held (ns; 0: no hold known).
    pub hold_ns: u64,
}

impl DispatcherModel {
    /// No cap and no hold: the dispatcher's work, where given, counts as it is.
    pub const UNMODELLED: DispatcherModel = DispatcherModel { busy_cap: 1.0, hold_ns: 0 };

    /// `b(D)` (module docs); `busy_cap` without a deadline.
    pub fn share(&self, shortest_deadline_ns: Option<u64>) -> f64 {
        match shortest_deadline_ns {
            None => self.busy_cap,
            Some(d) => (1.0 - self.hold_ns as f64 / d.max(1) as f64).min(self.busy_cap).max(0.0),
        }
    }

    /// `W · max(1, U_max / share)`, rounded half to even; None when `share <= 0`.
    pub fn counted_ns(&self, dispatch_ns: u64, u_max: f64, share: f64) -> Option<u64> {
        if share <= 0.0 {
            return None;
        }
        Some((dispatch_ns as f64 * (u_max / share).max(1.0)).round_ties_even() as u64)
    }
}

/// A device's serial resources as admission models them (module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeviceModel {
    /// The GPU's utilisation bound for realtime streams, (0, 1].
    pub u_max: f64,
    /// Slack kept before every realtime deadline (the response bound's margin).
    pub safety_margin_ns: u64,
    pub dispatcher: DispatcherModel,
}

impl DeviceModel {
    /// The queue's checks alone (no dispatcher model).
    pub const fn queue_only(u_max: f64, safety_margin_ns: u64) -> Self {
        DeviceModel { u_max, safety_margin_ns, dispatcher: DispatcherModel::UNMODELLED }
    }

    pub fn from_config(c: &SchedulerConfig) -> Self {
        DeviceModel {
            u_max: c.u_max,
            safety_margin_ns: c.safety_margin_ns,
            dispatcher: DispatcherModel { busy_cap: c.dispatcher_busy_cap, hold_ns: c.dispatcher_hold_ns },
        }
    }

    /// `load` with its dispatcher work counted at `share`: its cost the larger of the two, its
    /// latency beyond its cost less what the cost grew by.
    fn counted(&self, load: &RealtimeLoad, share: f64) -> RealtimeLoad {
        let work = load.dispatch_ns.and_then(|w| self.dispatcher.counted_ns(w, self.u_max, share)).unwrap_or(0);
        let cost = load.cost_ns.max(work);
        RealtimeLoad {
            cost_ns: cost,
            latency_excess_ns: load.latency_excess_ns.saturating_sub(cost - load.cost_ns),
            dispatch_ns: None,
            ..*load
        }
    }

    fn refusal(&self, stream: &str, reason: RefusalReason) -> AdmissionRefused {
        AdmissionRefused {
            stream: stream.to_string(),
            reason,
            stream_utilisation: 0.0,
            current_total: 0.0,
            bound: 1.0,
            stream_cost_ns: 0,
            cost_sum_ns: 0,
            safety_margin_ns: self.safety_margin_ns,
            shortest_deadline_ns: 0,
            latency_excess_ns: 0,
            phased: None,
            dispatcher: None,
            tail_reach_ns: None,
        }
    }

    /// The `dispatcher_hold` refusal of `stream` at the shortest deadline `d`.
    fn hold_refusal(&self, stream: &str, d: u64, cost_ns: u64, cost_sum_ns: u64, dispatch_ns: u64) -> AdmissionRefused {
        let mut r = self.refusal(stream, RefusalReason::DispatcherHold);
        r.stream_utilisation = self.dispatcher.hold_ns as f64 / d.max(1) as f64;
        r.stream_cost_ns = cost_ns;
        r.cost_sum_ns = cost_sum_ns;
        r.shortest_deadline_ns = d;
        r.dispatcher = Some(Box::new(DispatcherCount {
            share: 0.0,
            hold_ns: self.dispatcher.hold_ns,
            dispatch_ns,
            counted_ns: 0,
        }));
        r
    }
}

fn shortest_deadline<'a>(loads: impl Iterator<Item = &'a RealtimeLoad>) -> Option<u64> {
    loads.map(|l| l.deadline_ns).min()
}

impl AdmissionPolicy for DeviceModel {
    fn check(&self, current: &CurrentLoad, stream: &str, candidate: &Candidate) -> Result<Admitted, AdmissionRefused> {
        let own = candidate.realtime();
        let shortest = shortest_deadline(current.realtime.iter().chain(own));
        let counts = current.realtime.iter().chain(own).any(|l| l.dispatch_ns.is_some());
        let share = self.dispatcher.share(shortest);
        if counts && share <= 0.0 {
            let cost = own.map_or(0, |l| l.cost_ns);
            let d = shortest.unwrap_or(0);
            let work = own.and_then(|l| l.dispatch_ns).unwrap_or(0);
            return Err(self.hold_refusal(stream, d, cost, current.realtime_cost_sum_ns(), work));
        }
        let counted = CurrentLoad {
            realtime: current.realtime.iter().map(|l| self.counted(l, share)).collect(),
            reserved_throughput: current.reserved_throughput,
        };
        let candidate_counted = match candidate {
            Candidate::Realtime(l) => Candidate::Realtime(self.counted(l, share)),
            other => *other,
        };
        check_queue(self.u_max, self.safety_margin_ns, &counted, stream, &candidate_counted).map_err(|mut r| {
            if let Some(work) = own.and_then(|l| l.dispatch_ns) {
                r.dispatcher = Some(Box::new(DispatcherCount {
                    share,
                    hold_ns: self.dispatcher.hold_ns,
                    dispatch_ns: work,
                    counted_ns: self.dispatcher.counted_ns(work, self.u_max, share).unwrap_or(0),
                }));
            }
            r
        })
    }

    fn counted_costs(&self, realtime: &[RealtimeLoad]) -> Vec<u64> {
        let share = self.dispatcher.share(shortest_deadline(realtime.iter()));
        realtime.iter().map(|l| self.counted(l, share).cost_ns).collect()
    }

    fn dispatcher_share(&self, shortest_deadline_ns: Option<u64>) -> f64 {
        self.dispatcher.share(shortest_deadline_ns)
    }

    fn counted_dispatch_ns(&self, dispatch_ns: u64, share: f64) -> Option<u64> {
        self.dispatcher.counted_ns(dispatch_ns, self.u_max, share)
    }

    fn check_dispatcher_hold(&self, realtime: &[(&str, RealtimeLoad)]) -> Result<f64, AdmissionRefused> {
        let Some(d) = shortest_deadline(realtime.iter().map(|(_, l)| l)) else {
            return Ok(self.dispatcher.busy_cap);
        };
        let share = self.dispatcher.share(Some(d));
        if share > 0.0 {
            return Ok(share);
        }
        let (name, load) = realtime.iter().find(|(_, l)| l.deadline_ns == d).expect("the shortest deadline's stream");
        let others: u64 = realtime.iter().map(|(_, l)| l.cost_ns).sum::<u64>() - load.cost_ns;
        Err(self.hold_refusal(name, d, load.cost_ns, others, load.dispatch_ns.unwrap_or(0)))
    }

    fn check_latency_tails(&self, realtime: &[(&str, RealtimeLoad)]) -> Result<(), AdmissionRefused> {
        let past = realtime.iter().rev().find(|(_, l)| l.tail_reach_ns.is_some_and(|reach| reach > l.deadline_ns));
        let Some((name, load)) = past else { return Ok(()) };
        let reach = load.tail_reach_ns.unwrap_or(0);
        let mut r = self.refusal(name, RefusalReason::LatencyTail);
        r.stream_utilisation = reach as f64 / load.deadline_ns.max(1) as f64;
        r.stream_cost_ns = load.cost_ns;
        r.shortest_deadline_ns = load.deadline_ns;
        r.tail_reach_ns = NonZeroU64::new(reach);
        Err(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// W1-like figures: a 10-ms period, the dispatcher capped at 85% and held at most 0.8 ms.
    const MODEL: DeviceModel = DeviceModel {
        u_max: 0.9,
        safety_margin_ns: 50_000,
        dispatcher: DispatcherModel { busy_cap: 0.85, hold_ns: 800_000 },
    };

    fn rehearsed(cost_ns: u64, dispatch_ns: u64, deadline_ns: u64) -> RealtimeLoad {
        RealtimeLoad { dispatch_ns: Some(dispatch_ns), ..RealtimeLoad::new(cost_ns, 10 * MS, deadline_ns) }
    }

    /// How many of these streams admission takes, registered in order.
    fn admitted(model: &DeviceModel, loads: &[RealtimeLoad]) -> Result<usize, AdmissionRefused> {
        let mut current = CurrentLoad::default();
        for (k, l) in loads.iter().enumerate() {
            match model.check(&current, &format!("s{k}"), &Candidate::Realtime(*l)) {
                Ok(_) => current.realtime.push(*l),
                Err(r) => return if k == 0 { Err(r) } else { Ok(k) },
            }
        }
        Ok(loads.len())
    }

    #[test]
    fn the_dispatcher_share_tightens_as_the_deadline_shortens() {
        let d = MODEL.dispatcher;
        assert_eq!(d.share(None), 0.85);
        assert_eq!(d.share(Some(21_333_333)), 0.85);
        assert!((d.share(Some(5_333_333)) - 0.85).abs() < 1e-6);
        assert!((d.share(Some(4 * MS)) - 0.8).abs() < 1e-12);
        assert!((d.share(Some(2 * MS)) - 0.6).abs() < 1e-12);
        assert!((d.share(Some(MS)) - 0.2).abs() < 1e-12);
        assert_eq!(d.share(Some(800_000)), 0.0);
        // counted against U_max 0.9: streams that fill it hold the lock at most that share
        assert_eq!(d.counted_ns(10_000, 0.9, d.share(Some(2 * MS))), Some(15_000));
        assert_eq!(d.counted_ns(10_000, 0.9, d.share(None)), Some(10_588));
        assert_eq!(d.counted_ns(10_000, 0.6, d.share(Some(2 * MS))), Some(10_000)); // U_max within the share
        assert_eq!(d.counted_ns(10_000, 0.9, 0.0), None);
        assert_eq!(DispatcherModel::UNMODELLED.counted_ns(10_000, 0.9, 1.0), Some(10_000));
    }

    #[test]
    fn a_stream_is_counted_by_the_larger_of_its_device_time_and_its_counted_dispatcher_work() {
        // five 10-ms streams, 1.2 ms of device time and 1.6 ms of the dispatcher's work a block:
        // 1.6 x 0.9 / 0.85 = 1.694 ms counted, 0.85 of the bound with five
        let five = vec![rehearsed(1_200_000, 1_600_000, 10 * MS); 5];
        assert_eq!(MODEL.counted_costs(&five), vec![1_694_118; 5]);
        assert_eq!(admitted(&MODEL, &five).unwrap(), 5);
        // the device time is the larger: it is what counts
        assert_eq!(MODEL.counted_costs(&[rehearsed(2_000_000, 1_000_000, 10 * MS)]), vec![2_000_000]);
        // 1.75 ms of the dispatcher's work a block holds its lock 87.5% of the time: under U_max
        // as it is, past its 85%, so the fifth is refused by the utilisation bound, with the count
        let five = vec![rehearsed(1_200_000, 1_750_000, 10 * MS); 5];
        let mut current = CurrentLoad { realtime: five[..4].to_vec(), reserved_throughput: 0.0 };
        let err = MODEL.check(&current, "s4", &Candidate::Realtime(five[4])).unwrap_err();
        assert_eq!(err.reason, RefusalReason::UtilisationBound);
        assert_eq!(err.stream_cost_ns, 1_852_941);
        let count = err.dispatcher.expect("the dispatcher's count");
        assert_eq!((count.dispatch_ns, count.counted_ns, count.hold_ns), (1_750_000, 1_852_941, 800_000));
        assert!((count.share - 0.85).abs() < 1e-12);
        // a stream without a measured dispatcher work beside them is counted by its device time
        current.realtime.pop();
        let plain = RealtimeLoad::new(1_200_000, 10 * MS, 10 * MS);
        assert!(MODEL.check(&current, "plain", &Candidate::Realtime(plain)).is_ok());
    }

    #[test]
    fn a_shorter_deadline_recounts_every_stream_s_dispatcher_work() {
        // eight 10-ms streams staggered 1.25 ms apart, 0.8 ms of dispatcher work a block: at a 10-ms
        // deadline 0.847 ms each (0.68 of U_max); a 2-ms deadline among them leaves the lock 60%:
        // 1.2 ms each, and the eighth (0.96 of the GPU) is refused
        let staggered = |dispatch_ns: u64, deadline_ns: u64| -> Vec<RealtimeLoad> {
            (0..8u64)
                .map(|k| RealtimeLoad {
                    phase_ns: Some(k * 10 * MS / 8),
                    ..rehearsed(100_000, dispatch_ns, deadline_ns)
                })
                .collect()
        };
        let long = staggered(800_000, 10 * MS);
        assert_eq!(admitted(&MODEL, &long).unwrap(), 8);
        assert_eq!(MODEL.counted_costs(&long)[0], 847_059);
        let short = staggered(800_000, 2 * MS);
        assert_eq!(admitted(&MODEL, &short).unwrap(), 7);
        assert_eq!(MODEL.counted_costs(&short)[0], 1_200_000);
        // one stream of the short deadline after seven long ones recounts them all
        let mut mixed = long[..7].to_vec();
        mixed.push(short[7]);
        assert_eq!(admitted(&MODEL, &mixed).unwrap(), 7);
        // 0.7 ms of dispatcher work a block: 1.05 ms at 2 ms, 0.84 of U_max, admitted
        assert_eq!(admitted(&MODEL, &staggered(700_000, 2 * MS)).unwrap(), 8);
    }

    #[test]
    fn a_deadline_within_the_hold_is_refused_where_the_dispatcher_s_work_counts() {
        let err = admitted(&MODEL, &[rehearsed(100_000, 20_000, 500_000)]).unwrap_err();
        assert_eq!(
            (err.reason, err.stream.as_str(), err.shortest_deadline_ns),
            (RefusalReason::DispatcherHold, "s0", 500_000)
        );
        assert_eq!(err.dispatcher.as_ref().map(|d| d.hold_ns), Some(800_000));
        assert!(
            err.to_string()
                .contains("its device, 500000 ns, is no longer than the 800000 ns a block may find the dispatcher"),
            "{err}"
        );
        // a stream of no counted work beside a rehearsed one lowers the device's deadline too
        let current = CurrentLoad { realtime: vec![rehearsed(100_000, 20_000, 10 * MS)], reserved_throughput: 0.0 };
        let short = RealtimeLoad::new(100_000, 10 * MS, 700_000);
        let err = MODEL.check(&current, "short", &Candidate::Realtime(short)).unwrap_err();
        assert_eq!(err.reason, RefusalReason::DispatcherHold);
        // where nobody's dispatcher work counts, a short deadline is the queue's business alone
        assert!(MODEL.check(&CurrentLoad::default(), "short", &Candidate::Realtime(short)).is_ok());
        // the device-level check, before the work is measured: the first stream of the shortest deadline
        let named = [("a", RealtimeLoad::new(1, 10 * MS, 10 * MS)), ("b", short), ("c", short)];
        let err = MODEL.check_dispatcher_hold(&named).unwrap_err();
        assert_eq!(
            (err.reason, err.stream.as_str(), err.shortest_deadline_ns),
            (RefusalReason::DispatcherHold, "b", 700_000)
        );
        let share = MODEL.check_dispatcher_hold(&named[..1]).unwrap();
        assert!((share - 0.85).abs() < 1e-12);
        assert_eq!(MODEL.check_dispatcher_hold(&[]).unwrap(), 0.85);
    }

    #[test]
    fn a_latency_tail_past_its_deadline_refuses_the_last_stream_it_reaches_past() {
        let reach = |r: u64, d: u64| RealtimeLoad { tail_reach_ns: Some(r), ..RealtimeLoad::new(1_000, 10 * MS, d) };
        let fits = [("a", reach(2 * MS, 10 * MS)), ("b", RealtimeLoad::new(1_000, 10 * MS, MS))];
        assert!(MODEL.check_latency_tails(&fits).is_ok());
        let past = [("a", reach(24 * MS, 10 * MS)), ("b", reach(24 * MS, 30 * MS)), ("c", reach(24 * MS, 10 * MS))];
        let err = MODEL.check_latency_tails(&past).unwrap_err();
        assert_eq!((err.reason, err.stream.as_str()), (RefusalReason::LatencyTail, "c"));
        assert_eq!((err.tail_reach_ns.map(NonZeroU64::get), err.shortest_deadline_ns), (Some(24 * MS), 10 * MS));
        let text = err.to_string();
        assert!(text.contains("latency from release reaches 24000000 ns, past its deadline 10000000 ns"), "{text}");
    }

    #[test]
    fn without_dispatcher_figures_the_model_is_the_queue_s_checks() {
        let loads = vec![RealtimeLoad::new(1_000_000, 10 * MS, 10 * MS); 10];
        let plain = DeviceModel::queue_only(0.9, 50_000);
        assert_eq!(admitted(&MODEL, &loads).unwrap(), admitted(&plain, &loads).unwrap());
        assert_eq!(admitted(&plain, &loads).unwrap(), 9);
        // dispatcher work given but no cap and no hold: counted as it is
        let unmodelled = DeviceModel { dispatcher: DispatcherModel::UNMODELLED, ..MODEL };
        assert_eq!(unmodelled.counted_costs(&[rehearsed(100, 1_600_000, 500_000)]), vec![1_600_000]);
    }
}
