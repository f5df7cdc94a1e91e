//! The response bound with release phases (admission.rs, *Release phases*): the device work
//! that can be in front of each stream's block when the streams of one period declare phases.

use super::RealtimeLoad;

/// Do two streams of one period both declare a release phase?
pub(super) fn has_phased_group(all: &[RealtimeLoad]) -> bool {
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
pub(super) fn phased_binding(all: &[RealtimeLoad], jitter_ns: u64) -> Option<(usize, u64)> {
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
    use super::super::{AdmissionPolicy, Candidate, CurrentLoad, RefusalReason};
    use super::*;
    use crate::scheduler::device_model::DeviceModel;

    fn phased(cost_ns: u64, period_ns: u64, deadline_ns: u64, phase_ns: u64) -> RealtimeLoad {
        RealtimeLoad { phase_ns: Some(phase_ns), ..RealtimeLoad::new(cost_ns, period_ns, deadline_ns) }
    }

    /// Admit `n` streams of one kind in order; how many fit.
    fn admitted(n: usize, make: impl Fn(usize) -> RealtimeLoad) -> usize {
        let mut current = CurrentLoad::default();
        for k in 0..n {
            let load = make(k);
            if POLICY_50.check(&current, "s", &Candidate::Realtime(load)).is_err() {
                return k;
            }
            current.realtime.push(load);
        }
        n
    }

    const POLICY_50: DeviceModel = DeviceModel::queue_only(0.9, 50);

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
        let err = POLICY_50.check(&current, "late", &Candidate::Realtime(phased(100, 10_000, d, 5))).unwrap_err();
        assert_eq!(err.reason, RefusalReason::ResponseBound);
        let b = err.phased.clone().expect("a phased refusal");
        assert_eq!((b.phase_ns, b.ahead_ns, b.cost_ns, b.period_ns), (0, 300, 100, 10_000));
        assert_eq!(err.shortest_deadline_ns, d);
        let text = err.to_string();
        assert!(text.contains("phase 0 ns can find 300 ns of other streams' device work in front of it"), "{text}");
        assert!(text.contains("= 450 ns exceed its deadline 449 ns"), "{text}");
        // out of the margin's reach (phase 5000) it fits: its block finds nothing in front
        assert!(POLICY_50.check(&current, "apart", &Candidate::Realtime(phased(100, 10_000, d, 5000))).is_ok());
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
