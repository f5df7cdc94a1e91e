//! Properties of the scheduler: state machine, admission bound, EDF order, pacing.

mod common;

use std::collections::{HashMap, VecDeque};

use proptest::collection::vec;
use proptest::prelude::*;

use pygpukit_core::scheduler::task::ALL_STATES;
use pygpukit_core::scheduler::{
    Decision, Qos, RefusalReason, SchedError, Scheduler, SchedulerConfig, StreamId, StreamSpec, Task, TaskId, TaskState,
};

use TaskState::*;

/// The legal transitions, written out independently of the implementation.
const LEGAL: &[(TaskState, TaskState)] = &[
    (Pending, Ready),
    (Pending, Dropped),
    (Pending, Cancelled),
    (Ready, Dispatched),
    (Ready, Dropped),
    (Ready, Cancelled),
    (Dispatched, Ready),
    (Dispatched, Completed),
    (Dispatched, Missed),
    (Dispatched, Dropped),
    (Dispatched, Cancelled),
];

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

proptest! {
    #![proptest_config(common::seeded(512, 0x5eed_0001))]

    /// Only legal transitions succeed; a refused one leaves the state alone; terminal stays terminal.
    #[test]
    fn state_machine_accepts_exactly_the_legal_transitions(targets in vec(0..7usize, 1..40)) {
        let mut task = Task::new(1, 1, 0, None, 0, 1);
        let mut was_terminal = false;
        for i in targets {
            let to = ALL_STATES[i];
            let from = task.state();
            let result = task.transition(to);
            prop_assert_eq!(result.is_ok(), LEGAL.contains(&(from, to)), "{} -> {}", from, to);
            prop_assert_eq!(task.state(), if result.is_ok() { to } else { from });
            if was_terminal {
                prop_assert!(result.is_err());
                prop_assert_eq!(task.state(), from);
            }
            was_terminal |= task.state().is_terminal();
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Submit { stream: usize, dt: u64 },
    Next { dt: u64 },
    Complete { pick: usize, cost: u64 },
    Drop { pick: usize },
    Cancel { pick: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..3usize, 0..2_000u64).prop_map(|(stream, dt)| Op::Submit { stream, dt: dt * US }),
        (0..2_000u64).prop_map(|dt| Op::Next { dt: dt * US }),
        (any::<usize>(), 1..500u64).prop_map(|(pick, cost)| Op::Complete { pick, cost: cost * US }),
        any::<usize>().prop_map(|pick| Op::Drop { pick }),
        any::<usize>().prop_map(|pick| Op::Cancel { pick }),
    ]
}

proptest! {
    #![proptest_config(common::seeded(256, 0x5eed_0002))]

    /// Driving a real scheduler with random calls: every state change a task shows is legal
    /// (a `next` may release and launch in one call), failed calls change nothing, and calls on
    /// finished tasks fail.
    #[test]
    fn scheduler_only_makes_legal_transitions(ops in vec(op(), 1..80)) {
        let (mut s, _) = Scheduler::simulated(SchedulerConfig::default(), 0).unwrap();
        let streams = [
            s.register_stream(StreamSpec::new("rt", Qos::realtime(2 * MS, None)).with_cost(100 * US)).unwrap(),
            s.register_stream(StreamSpec::new("tp", Qos::Throughput { min_rate_hz: None, deadline_ns: None })
                .with_cost(MS).with_units(4)).unwrap(),
            s.register_stream(StreamSpec::new("be", Qos::BestEffort { deadline_ns: Some(MS) })).unwrap(),
        ];
        let mut now = 0u64;
        let mut ids: Vec<TaskId> = Vec::new();
        for op in ops {
            let before: HashMap<TaskId, TaskState> = ids.iter().map(|&id| (id, s.task_state(id).unwrap())).collect();
            let pick = |p: usize| ids.get(p % ids.len().max(1)).copied();
            let (target, result): (Option<TaskId>, Result<(), SchedError>) = match op {
                Op::Submit { stream, dt } => {
                    now += dt;
                    let sub = s.submit_at(streams[stream], now).unwrap();
                    ids.push(sub.task);
                    (None, Ok(()))
                }
                Op::Next { dt } => {
                    now += dt;
                    s.next_decision_at(now);
                    (None, Ok(()))
                }
                Op::Complete { pick: p, cost } => match pick(p) {
                    Some(id) => (Some(id), s.complete(id, cost, now).map(|_| ())),
                    None => continue,
                },
                Op::Drop { pick: p } => match pick(p) {
                    Some(id) => (Some(id), s.drop_task(id)),
                    None => continue,
                },
                Op::Cancel { pick: p } => match pick(p) {
                    Some(id) => (Some(id), s.cancel(id)),
                    None => continue,
                },
            };
            let is_next = matches!(op, Op::Next { .. } | Op::Submit { .. });
            for (&id, &from) in &before {
                let to = s.task_state(id).unwrap();
                if from == to {
                    continue;
                }
                prop_assert!(!from.is_terminal(), "task {} left terminal {} for {}", id, from, to);
                let two_step = is_next && from == Pending && to == Dispatched;
                prop_assert!(LEGAL.contains(&(from, to)) || two_step, "task {}: {} -> {}", id, from, to);
            }
            if let (Some(id), Err(_)) = (target, &result) {
                prop_assert_eq!(s.task_state(id), before.get(&id).copied());
            }
            if let (Some(id), Some(from)) = (target, target.and_then(|id| before.get(&id))) {
                if from.is_terminal() {
                    prop_assert!(result.is_err(), "call on finished task {} succeeded", id);
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Want {
    realtime: bool,
    cost: u64,
    period: u64,
    deadline: u64,
    rate: f64,
}

fn want() -> impl Strategy<Value = Want> {
    (any::<bool>(), 1..3_000u64, 500..20_000u64, 20..150u64, 1..2_000u32).prop_map(
        |(realtime, cost, period, dpct, rate)| Want {
            realtime,
            cost: cost * US,
            period: period * US,
            deadline: (period * US * dpct / 100).max(1),
            rate: f64::from(rate),
        },
    )
}

proptest! {
    #![proptest_config(common::seeded(512, 0x5eed_0003))]

    /// Streams are admitted exactly when the three checks hold; the admitted set never breaks
    /// the bounds; a refusal's figures are the ones computed independently here.
    #[test]
    fn admission_keeps_the_bound_and_explains_refusals(
        wants in vec(want(), 1..14),
        u_max_pct in 30..=100u32,
        margin_us in 0..200u64,
    ) {
        let u_max = f64::from(u_max_pct) / 100.0;
        let margin = margin_us * US;
        let config = SchedulerConfig { u_max, safety_margin_ns: margin, ..SchedulerConfig::default() };
        let (mut s, _) = Scheduler::simulated(config, 0).unwrap();
        // Independent model of what is admitted.
        let mut rt: Vec<(u64, u64, u64)> = Vec::new(); // (cost, period, deadline)
        let mut tp_reserved = 0.0f64;
        for (i, w) in wants.iter().enumerate() {
            let name = format!("s{i}");
            let qos = if w.realtime {
                Qos::Realtime { period_ns: w.period, deadline_ns: w.deadline }
            } else {
                Qos::Throughput { min_rate_hz: Some(w.rate), deadline_ns: None }
            };
            let rt_total: f64 = rt.iter().map(|&(c, p, _)| c as f64 / p as f64).sum();
            let cost_sum: u64 = rt.iter().map(|&(c, _, _)| c).sum();
            let share = if w.realtime { w.cost as f64 / w.period as f64 } else { w.cost as f64 * w.rate / 1e9 };
            let shortest = rt.iter().map(|&(_, _, d)| d).chain(w.realtime.then_some(w.deadline)).min().unwrap_or(0);
            let expect = if w.realtime && rt_total + share > u_max + 1e-12 {
                Some((RefusalReason::UtilisationBound, rt_total, u_max))
            } else if rt_total + tp_reserved + share > 1.0 + 1e-12 {
                Some((RefusalReason::DeviceCapacity, rt_total + tp_reserved, 1.0))
            } else if w.realtime && cost_sum + w.cost + margin > shortest {
                Some((RefusalReason::ResponseBound, (cost_sum + margin) as f64 / shortest as f64, 1.0))
            } else {
                None
            };
            match (s.register_stream(StreamSpec::new(name.clone(), qos).with_cost(w.cost)), expect) {
                (Ok(_), None) => {
                    if w.realtime { rt.push((w.cost, w.period, w.deadline)); } else { tp_reserved += share; }
                }
                (Err(SchedError::Admission(r)), Some((reason, total, bound))) => {
                    prop_assert_eq!(r.reason, reason);
                    prop_assert_eq!(&r.stream, &name);
                    prop_assert!((r.current_total - total).abs() < 1e-9, "{} vs {}", r.current_total, total);
                    prop_assert_eq!(r.bound, bound);
                    if reason == RefusalReason::ResponseBound {
                        prop_assert_eq!((r.cost_sum_ns, r.stream_cost_ns, r.shortest_deadline_ns), (cost_sum, w.cost, shortest));
                    } else {
                        prop_assert!((r.stream_utilisation - share).abs() < 1e-9);
                    }
                }
                (got, expected) => prop_assert!(false, "stream {}: got {:?}, expected {:?}", name, got, expected),
            }
            let stats = s.stats();
            prop_assert!(stats.realtime_utilisation <= u_max + 1e-9);
            prop_assert!(stats.realtime_utilisation + stats.throughput_reserved <= 1.0 + 1e-9);
            prop_assert!(!stats.over_bound);
            let sum: u64 = rt.iter().map(|&(c, _, _)| c).sum();
            if let Some(dmin) = rt.iter().map(|&(_, _, d)| d).min() {
                prop_assert!(sum + margin <= dmin);
            }
        }
    }
}

proptest! {
    #![proptest_config(common::seeded(256, 0x5eed_0004))]

    /// Ready realtime blocks leave in (deadline, submission) order, whatever order they came in.
    #[test]
    fn edf_dispatch_order_is_sorted_by_deadline(
        deadlines_ms in vec(1..50u64, 1..6),
        blocks in vec((0..6usize, 0..4_000u64), 1..40),
    ) {
        let config = SchedulerConfig { u_max: 1.0, safety_margin_ns: 0, ..SchedulerConfig::default() };
        let (mut s, _) = Scheduler::simulated(config, 0).unwrap();
        let streams: Vec<(StreamId, u64)> = deadlines_ms.iter().enumerate().map(|(i, &d)| {
            let qos = Qos::Realtime { period_ns: 100 * MS, deadline_ns: d * MS };
            (s.register_stream(StreamSpec::new(format!("s{i}"), qos).with_cost(1)).unwrap(), d * MS)
        }).collect();
        // Per-stream arrivals must be in order: sort by arrival time, keep the stream mix.
        let mut blocks: Vec<(usize, u64)> = blocks.into_iter().map(|(k, t)| (k % streams.len(), t * US)).collect();
        blocks.sort_by_key(|&(_, t)| t);
        let mut expected: Vec<(u64, TaskId)> = Vec::new();
        for &(k, t) in &blocks {
            let sub = s.submit_at(streams[k].0, t).unwrap();
            prop_assert_eq!(sub.deadline_ns, Some(t + streams[k].1));
            expected.push((t + streams[k].1, sub.task));
        }
        expected.sort();
        let mut order = Vec::new();
        while let Decision::Launch(l) = s.next_decision_at(5 * MS) {
            order.push((l.deadline_ns.unwrap(), l.task));
        }
        prop_assert_eq!(order, expected);
    }
}

// ----- pacing: a discrete-event simulation of the engine and a FIFO device -----------------

#[derive(Clone, Debug)]
struct RtSpec {
    period: u64,
    deadline: u64,
    cost: u64,
    phase: u64,
    /// Each block may come up to this much later than one period after the previous one
    /// (sporadic arrivals; 0 = strictly periodic).
    jitter: u64,
}

/// Deterministic arrival jitter: a small LCG per stream.
fn next_jitter(state: &mut u64, max: u64) -> u64 {
    *state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    if max == 0 {
        0
    } else {
        (*state >> 33) % (max + 1)
    }
}

#[derive(Clone, Debug)]
struct BulkSpec {
    /// Per-unit device time.
    unit_cost: u64,
    units: u32,
    /// Declared to the scheduler, or left to be measured.
    declared: bool,
    best_effort: bool,
}

struct Outcome {
    rt_finished: u64,
    rt_late: Vec<(TaskId, u64, u64)>,
    bulk_units: u64,
    scheduler_missed: u64,
    waits: u64,
}

/// Runs the engine loop against a device that executes launches one after another, each
/// taking exactly its true cost. Realtime blocks arrive periodically; bulk streams always have
/// two blocks queued.
fn simulate(config: SchedulerConfig, rts: &[RtSpec], bulks: &[BulkSpec], horizon: u64) -> Option<Outcome> {
    let (mut s, _) = Scheduler::simulated(config, 0).unwrap();
    let mut rt_streams = Vec::new();
    for (i, r) in rts.iter().enumerate() {
        let spec = StreamSpec::new(format!("rt{i}"), Qos::Realtime { period_ns: r.period, deadline_ns: r.deadline })
            .with_cost(r.cost);
        if let Ok(id) = s.register_stream(spec) {
            rt_streams.push((id, r.clone(), r.phase, i as u64 + 1));
        }
    }
    if rt_streams.is_empty() {
        return None;
    }
    let mut bulk_streams = Vec::new();
    for (i, b) in bulks.iter().enumerate() {
        let qos = if b.best_effort {
            Qos::BestEffort { deadline_ns: None }
        } else {
            Qos::Throughput { min_rate_hz: None, deadline_ns: None }
        };
        let mut spec = StreamSpec::new(format!("bulk{i}"), qos).with_units(b.units);
        if b.declared {
            spec = spec.with_cost(b.unit_cost * u64::from(b.units));
        }
        bulk_streams.push((s.register_stream(spec).unwrap(), b.clone()));
    }
    let true_cost: HashMap<StreamId, (bool, u64)> = rt_streams
        .iter()
        .map(|(id, r, _, _)| (*id, (true, r.cost)))
        .chain(bulk_streams.iter().map(|(id, b)| (*id, (false, b.unit_cost))))
        .collect();

    let mut device: VecDeque<(TaskId, StreamId, u64, u64, u32)> = VecDeque::new(); // task, stream, end, cost, units
    let mut device_free = 0u64;
    let mut deadlines: HashMap<TaskId, u64> = HashMap::new();
    let mut live_bulk: HashMap<StreamId, u32> = HashMap::new();
    let mut wake: Option<u64>;
    let mut out = Outcome { rt_finished: 0, rt_late: vec![], bulk_units: 0, scheduler_missed: 0, waits: 0 };
    let mut t = 0u64;
    while t < horizon {
        while device.front().is_some_and(|d| d.2 <= t) {
            let (task, stream, end, cost, units) = device.pop_front().unwrap();
            let done = s.complete(task, cost, end).unwrap();
            if true_cost[&stream].0 {
                out.rt_finished += 1;
                let deadline = deadlines[&task];
                if end > deadline {
                    out.rt_late.push((task, end, deadline));
                }
            } else {
                out.bulk_units += u64::from(units);
                if done.state.is_terminal() {
                    *live_bulk.get_mut(&stream).unwrap() -= 1;
                }
            }
        }
        for (id, r, next, lcg) in rt_streams.iter_mut() {
            while *next <= t {
                let sub = s.submit_at(*id, *next).unwrap();
                deadlines.insert(sub.task, sub.deadline_ns.unwrap());
                *next += r.period + next_jitter(lcg, r.jitter);
            }
        }
        for (id, _) in &bulk_streams {
            let live = live_bulk.entry(*id).or_insert(0);
            while *live < 2 {
                s.submit_at(*id, t).unwrap();
                *live += 1;
            }
        }
        loop {
            match s.next_decision_at(t) {
                Decision::Launch(l) => {
                    let units = l.chunk_end - l.chunk_begin;
                    let (is_rt, c) = true_cost[&l.stream];
                    let cost = if is_rt { c } else { c * u64::from(units) };
                    let start = device_free.max(t);
                    device_free = start + cost;
                    device.push_back((l.task, l.stream, device_free, cost, units));
                }
                Decision::WaitUntil(w) => {
                    wake = Some(w);
                    break;
                }
                Decision::Idle => {
                    wake = None;
                    break;
                }
            }
        }
        let mut next_t = u64::MAX;
        if let Some(d) = device.front() {
            next_t = next_t.min(d.2);
        }
        for (_, _, next, _) in &rt_streams {
            next_t = next_t.min(*next);
        }
        if let Some(w) = wake.filter(|&w| w > t) {
            next_t = next_t.min(w);
        }
        assert!(next_t > t, "simulation must advance (t = {t})");
        t = next_t;
    }
    let stats = s.stats();
    out.scheduler_missed = stats.streams.iter().map(|st| st.missed).sum();
    out.waits = stats.waits;
    Some(out)
}

fn rt_spec() -> impl Strategy<Value = RtSpec> {
    (500..10_000u64, 40..=100u64, 10..800u64, 0..5_000u64, prop_oneof![Just(0u64), 1..3_000u64]).prop_map(
        |(period_us, dpct, cost_us, phase_us, jitter_us)| RtSpec {
            period: period_us * US,
            deadline: period_us * US * dpct / 100,
            cost: cost_us * US,
            phase: phase_us * US,
            jitter: jitter_us * US,
        },
    )
}

fn bulk_spec() -> impl Strategy<Value = BulkSpec> {
    (1..400u64, 1..64u32, any::<bool>(), any::<bool>()).prop_map(|(unit_cost_us, units, declared, best_effort)| {
        BulkSpec { unit_cost: unit_cost_us * US, units, declared, best_effort }
    })
}

proptest! {
    #![proptest_config(common::seeded(512, 0x5eed_0005))]

    /// With an admitted realtime set and true costs equal to the estimates, interleaving
    /// throughput and best-effort chunks never makes a realtime block late, with or without
    /// lookahead (a second chunk of a task queued behind the first).
    #[test]
    fn pacing_never_makes_an_admitted_realtime_block_late(
        rts in vec(rt_spec(), 1..4),
        bulks in vec(bulk_spec(), 1..4),
        quantum_us in 50..1_000u64,
        margin_us in 0..100u64,
        u_max_pct in 50..=100u32,
        lookahead in 1..=2u32,
    ) {
        // Unknown costs are assumed to be one quantum per unit until measured: keep units below it.
        let bulks: Vec<BulkSpec> = bulks
            .into_iter()
            .map(|b| if b.declared { b } else { BulkSpec { unit_cost: b.unit_cost.min(quantum_us * US), ..b } })
            .collect();
        let config = SchedulerConfig {
            u_max: f64::from(u_max_pct) / 100.0,
            quantum_ns: quantum_us * US,
            safety_margin_ns: margin_us * US,
            max_chunks_in_flight: lookahead,
            ..SchedulerConfig::default()
        };
        let outcome = simulate(config, &rts, &bulks, 60 * MS);
        prop_assume!(outcome.is_some());
        let outcome = outcome.unwrap();
        prop_assert!(outcome.rt_finished > 0);
        prop_assert!(outcome.rt_late.is_empty(), "late realtime blocks: {:?}", outcome.rt_late);
        prop_assert_eq!(outcome.scheduler_missed, 0);
    }
}

// ----- lookahead: several chunks of one task in flight ---------------------------------------

#[derive(Clone, Debug)]
enum LookOp {
    Submit {
        stream: usize,
        dt: u64,
    },
    Next {
        dt: u64,
    },
    /// Complete the oldest chunk of a task picked among those with chunks in flight.
    Complete {
        pick: usize,
        cost: u64,
    },
    /// complete() on any known task, possibly one with nothing in flight.
    CompleteAny {
        pick: usize,
    },
    Drop {
        pick: usize,
    },
    Cancel {
        pick: usize,
    },
}

fn look_op() -> impl Strategy<Value = LookOp> {
    prop_oneof![
        2 => (0..3usize, 0..500u64).prop_map(|(stream, dt)| LookOp::Submit { stream, dt: dt * US }),
        4 => (0..300u64).prop_map(|dt| LookOp::Next { dt: dt * US }),
        4 => (any::<usize>(), 1..300u64).prop_map(|(pick, cost)| LookOp::Complete { pick, cost: cost * US }),
        1 => any::<usize>().prop_map(|pick| LookOp::CompleteAny { pick }),
        1 => any::<usize>().prop_map(|pick| LookOp::Drop { pick }),
        1 => any::<usize>().prop_map(|pick| LookOp::Cancel { pick }),
    ]
}

proptest! {
    #![proptest_config(common::seeded(512, 0x5eed_0006))]

    /// Random launches, completions, drops and cancels with lookahead: for every live task
    /// `units_done <= units_launched <= units`, its chunks in flight are contiguous from
    /// `units_done` to `units_launched` and at most `max_chunks_in_flight` (realtime: one), it is
    /// dispatched exactly while one is in flight, the global in-flight count is the sum over
    /// tasks, and complete() always retires the oldest chunk of the task (launch order).
    #[test]
    fn lookahead_keeps_chunk_bookkeeping_consistent(
        ops in vec(look_op(), 1..120),
        lookahead in 1..=3u32,
        with_realtime in any::<bool>(),
    ) {
        let config = SchedulerConfig { max_chunks_in_flight: lookahead, ..SchedulerConfig::default() };
        let (mut s, _) = Scheduler::simulated(config, 0).unwrap();
        let rt_spec = if with_realtime {
            StreamSpec::new("rt", Qos::realtime(2 * MS, None)).with_cost(100 * US)
        } else {
            StreamSpec::new("rt", Qos::realtime(2 * MS, None)) // calibrating: runs paced
        };
        let streams = [
            s.register_stream(rt_spec).unwrap(),
            s.register_stream(StreamSpec::new("tp", Qos::Throughput { min_rate_hz: None, deadline_ns: None })
                .with_cost(MS).with_units(16)).unwrap(),
            s.register_stream(StreamSpec::new("be", Qos::BestEffort { deadline_ns: Some(MS) }).with_units(3)).unwrap(),
        ];
        let mut now = 0u64;
        let mut ids: Vec<TaskId> = Vec::new();
        // Model: chunks launched and not completed, per task, in launch order.
        let mut model: HashMap<TaskId, VecDeque<(u32, u32)>> = HashMap::new();
        for op in ops {
            match op {
                LookOp::Submit { stream, dt } => {
                    now += dt;
                    ids.push(s.submit_at(streams[stream], now).unwrap().task);
                }
                LookOp::Next { dt } => {
                    now += dt;
                    while let Decision::Launch(l) = s.next_decision_at(now) {
                        let chunks = model.entry(l.task).or_default();
                        if let Some(&(_, end)) = chunks.back() {
                            prop_assert_eq!(l.chunk_begin, end, "chunks of task {} launched out of order", l.task);
                        }
                        prop_assert!(l.chunk_begin < l.chunk_end);
                        prop_assert_eq!(l.is_final, l.chunk_end == s.task(l.task).unwrap().units);
                        chunks.push_back((l.chunk_begin, l.chunk_end));
                    }
                }
                LookOp::Complete { pick, cost } => {
                    let mut busy: Vec<TaskId> =
                        model.iter().filter(|(_, c)| !c.is_empty()).map(|(&id, _)| id).collect();
                    if busy.is_empty() {
                        continue;
                    }
                    busy.sort_unstable();
                    let id = busy[pick % busy.len()];
                    let (_, oldest_end) = model.get_mut(&id).unwrap().pop_front().unwrap();
                    let c = s.complete(id, cost, now).unwrap();
                    let left = model[&id].len();
                    match s.task(id) {
                        Some(t) => {
                            prop_assert_eq!(t.units_done, oldest_end, "complete() retired a chunk out of order");
                            prop_assert_eq!(c.state, if left > 0 { Dispatched } else { Ready });
                        }
                        None => {
                            prop_assert_eq!(left, 0);
                            prop_assert!(matches!(c.state, Completed | Missed));
                        }
                    }
                }
                LookOp::CompleteAny { pick } => {
                    let Some(&id) = ids.get(pick % ids.len().max(1)) else { continue };
                    let before = s.task_state(id);
                    let nothing_in_flight = model.get(&id).is_none_or(|c| c.is_empty());
                    let r = s.complete(id, 10 * US, now);
                    if nothing_in_flight {
                        prop_assert!(matches!(r, Err(SchedError::IllegalTransition(_))), "task {}: {:?}", id, r);
                        prop_assert_eq!(s.task_state(id), before);
                    } else {
                        model.get_mut(&id).unwrap().pop_front();
                    }
                }
                LookOp::Drop { pick } | LookOp::Cancel { pick } => {
                    let Some(&id) = ids.get(pick % ids.len().max(1)) else { continue };
                    let r = if matches!(op, LookOp::Drop { .. }) { s.drop_task(id) } else { s.cancel(id) };
                    if r.is_ok() {
                        model.remove(&id);
                    }
                }
            }
            // Finished tasks keep no chunks.
            model.retain(|id, _| s.task(*id).is_some());
            let mut total = 0u64;
            for &id in &ids {
                let Some(t) = s.task(id) else { continue };
                prop_assert!(t.units_done <= t.units_launched && t.units_launched <= t.units,
                    "task {}: done {} launched {} units {}", id, t.units_done, t.units_launched, t.units);
                let chunks: Vec<(u32, u32)> = t.in_flight.iter().map(|c| (c.begin, c.end)).collect();
                let expected: Vec<(u32, u32)> = model.get(&id).map(|c| c.iter().copied().collect()).unwrap_or_default();
                prop_assert_eq!(&chunks, &expected);
                let mut at = t.units_done;
                for &(b, e) in &chunks {
                    prop_assert_eq!(b, at);
                    at = e;
                }
                prop_assert_eq!(at, t.units_launched);
                let limit = if with_realtime && t.stream == streams[0] { 1 } else { lookahead as usize };
                prop_assert!(chunks.len() <= limit, "task {}: {} chunks in flight", id, chunks.len());
                prop_assert_eq!(t.state() == Dispatched, !chunks.is_empty(), "task {} is {}", id, t.state());
                total += chunks.len() as u64;
            }
            prop_assert_eq!(s.stats().in_flight, total);
        }
    }
}

/// W3 in miniature: a 48 kHz / 256-sample realtime stream next to a heavy spectrum stream.
/// No realtime block is late and the spectrum stream keeps most of the remaining device time.
#[test]
fn contention_keeps_realtime_and_most_of_the_throughput() {
    let config = SchedulerConfig::default(); // quantum 250 us, margin 50 us
    let period = 256 * 1_000_000_000 / 48_000; // 5.333 ms
    let rts = [RtSpec { period, deadline: period, cost: 60 * US, phase: 0, jitter: 0 }];
    // 4096 frames of ~5 us each: a 20 ms block.
    let bulks = [BulkSpec { unit_cost: 5 * US, units: 4096, declared: true, best_effort: false }];
    let outcome = simulate(config, &rts, &bulks, 500 * MS).unwrap();
    assert!(outcome.rt_late.is_empty(), "{:?}", outcome.rt_late);
    assert!(outcome.rt_finished >= 90);
    let bulk_time = outcome.bulk_units * 5 * US;
    let rt_time = outcome.rt_finished * 60 * US;
    let used = (bulk_time + rt_time) as f64 / (500 * MS) as f64;
    assert!(used > 0.95, "device use {used:.3} (bulk {bulk_time} ns, realtime {rt_time} ns)");
}

/// A chunk that can never fit in front of a realtime block is never released.
#[test]
fn a_chunk_that_cannot_fit_is_never_released() {
    // A 20 ms block launched whole in front of a 5.33 ms-deadline block.
    let period = 256 * 1_000_000_000 / 48_000;
    let config = SchedulerConfig { quantum_ns: 100 * MS, safety_margin_ns: 0, ..SchedulerConfig::default() };
    let rts = [RtSpec { period, deadline: period, cost: 60 * US, phase: 0, jitter: 0 }];
    let bulks = [BulkSpec { unit_cost: 20 * MS, units: 1, declared: true, best_effort: false }];
    let outcome = simulate(config, &rts, &bulks, 100 * MS).unwrap();
    // Pacing refuses the 20 ms chunk outright: realtime stays on time, bulk starves.
    assert!(outcome.rt_late.is_empty());
    assert_eq!(outcome.bulk_units, 0);
    assert!(outcome.waits > 0);
}
