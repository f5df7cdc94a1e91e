use super::*;
use crate::clock::SimulatedClock;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn config() -> SchedulerConfig {
    SchedulerConfig {
        u_max: 0.9,
        quantum_ns: 250 * US,
        safety_margin_ns: 50 * US,
        ewma_alpha: 0.5,
        finished_log: 16,
        max_chunks_in_flight: 2,
        dispatcher_busy_cap: 1.0,
        dispatcher_hold_ns: 0,
    }
}

fn sched() -> (Scheduler, SimulatedClock) {
    Scheduler::simulated(config(), 0).unwrap()
}

fn rt(name: &str, period: u64, cost: u64) -> StreamSpec {
    StreamSpec::new(name, Qos::realtime(period, None)).with_cost(cost)
}

fn launch(d: Decision) -> Launch {
    match d {
        Decision::Launch(l) => l,
        other => panic!("expected a launch, got {other:?}"),
    }
}

#[test]
fn config_is_validated() {
    let bad = SchedulerConfig { u_max: 1.5, ..config() };
    assert!(matches!(Scheduler::simulated(bad, 0), Err(SchedError::InvalidArgument(m)) if m.contains("u_max")));
    let bad = SchedulerConfig { ewma_alpha: 0.0, ..config() };
    assert!(Scheduler::simulated(bad, 0).is_err());
    let bad = SchedulerConfig { quantum_ns: 0, ..config() };
    assert!(Scheduler::simulated(bad, 0).is_err());
    let bad = SchedulerConfig { max_chunks_in_flight: 0, ..config() };
    assert!(
        matches!(Scheduler::simulated(bad, 0), Err(SchedError::InvalidArgument(m)) if m.contains("max_chunks_in_flight"))
    );
    assert_eq!(SchedulerConfig::default().max_chunks_in_flight, 2);
}

#[test]
fn admission_refusal_leaves_the_registry_unchanged() {
    let (mut s, _) = sched();
    s.register_stream(rt("a", 10 * MS, 6 * MS)).unwrap();
    let err = s.register_stream(rt("b", 10 * MS, 4 * MS)).unwrap_err();
    let SchedError::Admission(refused) = err else { panic!("expected a refusal") };
    assert_eq!(refused.reason, RefusalReason::UtilisationBound);
    assert_eq!(refused.stream, "b");
    assert!((refused.current_total - 0.6).abs() < 1e-12);
    assert!((refused.stream_utilisation - 0.4).abs() < 1e-12);
    assert_eq!(refused.bound, 0.9);
    assert_eq!(s.stream_id("b"), None);
    assert_eq!(s.stats().streams.len(), 1);
    assert!((s.stats().realtime_utilisation - 0.6).abs() < 1e-12);
}

#[test]
fn registration_errors_say_what_is_wrong() {
    let (mut s, _) = sched();
    s.register_stream(rt("a", 10 * MS, MS)).unwrap();
    assert_eq!(s.register_stream(rt("a", 10 * MS, MS)), Err(SchedError::DuplicateStream("a".into())));
    assert!(matches!(s.register_stream(rt("", 10 * MS, MS)), Err(SchedError::InvalidArgument(_))));
    assert!(
        matches!(s.register_stream(rt("z", 0, MS)), Err(SchedError::InvalidArgument(m)) if m.contains("period_ns"))
    );
    assert!(
        matches!(s.register_stream(rt("c", 10 * MS, 0)), Err(SchedError::InvalidArgument(m)) if m.contains("cost_ns"))
    );
    let zero_units = StreamSpec::new("u", Qos::BestEffort { deadline_ns: None }).with_units(0);
    assert!(
        matches!(s.register_stream(zero_units), Err(SchedError::InvalidArgument(m)) if m.contains("units_per_block"))
    );
    assert_eq!(s.submit(99), Err(SchedError::UnknownStream(99)));
}

#[test]
fn a_declared_latency_is_realtime_only_and_binds_the_response_bound() {
    let (mut s, _) = sched();
    let zero = rt("z", 10 * MS, MS).with_latency(0);
    assert!(
        matches!(s.register_stream(zero), Err(SchedError::InvalidArgument(m)) if m.contains("latency_ns must be > 0"))
    );
    let bulk = StreamSpec::new("b", Qos::Throughput { min_rate_hz: None, deadline_ns: None }).with_latency(MS);
    assert!(
        matches!(s.register_stream(bulk), Err(SchedError::InvalidArgument(m)) if m.contains("realtime streams only"))
    );
    // 1 ms of device time, 9 ms alone in a 10-ms deadline: 8 ms beyond its cost, charged once
    s.register_stream(rt("slow", 10 * MS, MS).with_latency(9 * MS)).unwrap();
    assert_eq!(s.stream_stats(s.stream_id("slow").unwrap()).unwrap().declared_latency_ns, Some(9 * MS));
    // 1 + 0.95 + margin 0.05 + 8 = 10 ms: fits exactly; one more microsecond does not
    s.register_stream(rt("a", 10 * MS, 950 * US)).unwrap();
    match s.register_stream(rt("b", 10 * MS, 1)) {
        Err(SchedError::Admission(r)) => {
            assert_eq!((r.reason, r.latency_excess_ns), (RefusalReason::ResponseBound, 8 * MS))
        }
        other => panic!("expected a response-bound refusal, got {other:?}"),
    }
}

#[test]
fn block_lifecycle_and_accounting() {
    let (mut s, clock) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    let sub = s.submit(a).unwrap();
    assert_eq!(sub.deadline_ns, Some(5 * MS));
    assert_eq!(s.task_state(sub.task), Some(TaskState::Ready));
    let l = launch(s.next_decision());
    assert_eq!((l.task, l.stream, l.chunk_begin, l.chunk_end, l.is_final), (sub.task, a, 0, 1, true));
    assert_eq!(l.est_cost_ns, 100 * US);
    assert_eq!(s.task_state(sub.task), Some(TaskState::Dispatched));
    assert_eq!(s.next_decision(), Decision::Idle);
    clock.advance(120 * US);
    let done = s.complete(sub.task, 90 * US, clock.now()).unwrap();
    assert_eq!(
        done,
        Completion { task: sub.task, state: TaskState::Completed, latency_ns: Some(120 * US), remaining_units: 0 }
    );
    let st = s.stream_stats(a).unwrap();
    assert_eq!((st.submitted, st.completed, st.missed, st.chunks, st.busy_ns), (1, 1, 0, 1, 90 * US));
    assert_eq!(st.latency.count, 1);
    assert_eq!(st.latency.max, 120 * US);
    assert_eq!(st.measured_cost_ns, Some(90 * US));
    assert_eq!(st.cost_ns, Some(100 * US), "declared cost stays the floor");
    assert_eq!(s.task_state(sub.task), Some(TaskState::Completed));
}

#[test]
fn an_unmeasured_chunk_counts_its_estimate_and_teaches_the_cost_model_nothing() {
    let (mut s, clock) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    let first = s.submit(a).unwrap();
    launch(s.next_decision());
    clock.advance(120 * US);
    s.complete(first.task, 300 * US, clock.now()).unwrap();
    let st = s.stream_stats(a).unwrap();
    assert_eq!((st.measured_cost_ns, st.cost_samples), (Some(300 * US), 1));
    // the next block is not timed: busy time grows by its estimate (the cost now 300 us), the
    // EWMA and its sample count stay, and the block still completes (latency, deadline)
    let second = s.submit(a).unwrap();
    let l = launch(s.next_decision());
    assert_eq!(l.est_cost_ns, 300 * US);
    clock.advance(400 * US);
    let done = s.complete_unmeasured(second.task, clock.now()).unwrap();
    assert_eq!((done.state, done.latency_ns), (TaskState::Completed, Some(400 * US)));
    let st = s.stream_stats(a).unwrap();
    assert_eq!((st.completed, st.chunks, st.busy_ns), (2, 2, 600 * US));
    assert_eq!((st.measured_cost_ns, st.cost_samples, st.measured_cost_max_ns), (Some(300 * US), 1, 300 * US));
}

#[test]
fn late_finish_is_a_miss() {
    let (mut s, _) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    let sub = s.submit_at(a, 0).unwrap();
    launch(s.next_decision_at(0));
    let done = s.complete(sub.task, 100 * US, 6 * MS).unwrap();
    assert_eq!(done.state, TaskState::Missed);
    let st = s.stream_stats(a).unwrap();
    assert_eq!((st.completed, st.missed), (0, 1));
}

#[test]
fn illegal_transitions_are_errors() {
    let (mut s, _) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    let sub = s.submit_at(a, 0).unwrap();
    let err = s.complete(sub.task, 1, 1).unwrap_err();
    assert_eq!(
        err,
        SchedError::IllegalTransition(IllegalTransition {
            task: sub.task,
            from: TaskState::Ready,
            to: TaskState::Completed
        })
    );
    launch(s.next_decision_at(0));
    s.complete(sub.task, 1, 1).unwrap();
    let err = s.complete(sub.task, 1, 2).unwrap_err();
    assert!(matches!(err, SchedError::IllegalTransition(t) if t.from == TaskState::Completed));
    assert!(matches!(s.drop_task(sub.task), Err(SchedError::IllegalTransition(_))));
    assert_eq!(s.cancel(12345), Err(SchedError::UnknownTask(12345)));
}

#[test]
fn finish_before_release_is_rejected() {
    let (mut s, _) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    let sub = s.submit_at(a, 10 * MS).unwrap();
    launch(s.next_decision_at(10 * MS));
    assert!(
        matches!(s.complete(sub.task, 1, 5 * MS), Err(SchedError::InvalidArgument(m)) if m.contains("before its release"))
    );
    assert_eq!(s.task_state(sub.task), Some(TaskState::Dispatched));
}

#[test]
fn edf_among_simultaneous_releases() {
    let (mut s, _) = sched();
    let slow =
        s.register_stream(StreamSpec::new("slow", Qos::realtime(20 * MS, Some(20 * MS))).with_cost(100 * US)).unwrap();
    let fast =
        s.register_stream(StreamSpec::new("fast", Qos::realtime(20 * MS, Some(2 * MS))).with_cost(100 * US)).unwrap();
    let t_slow = s.submit_at(slow, 0).unwrap().task;
    let t_fast = s.submit_at(fast, 0).unwrap().task;
    assert_eq!(launch(s.next_decision_at(0)).task, t_fast);
    assert_eq!(launch(s.next_decision_at(0)).task, t_slow);
}

#[test]
fn future_release_waits() {
    let (mut s, _) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    let sub = s.submit_at(a, 3 * MS).unwrap();
    assert_eq!(s.task_state(sub.task), Some(TaskState::Pending));
    assert_eq!(s.next_decision_at(MS), Decision::WaitUntil(3 * MS));
    assert_eq!(launch(s.next_decision_at(3 * MS)).task, sub.task);
}

#[test]
fn arrivals_must_be_in_order() {
    let (mut s, _) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    s.submit_at(a, 3 * MS).unwrap();
    assert!(matches!(s.submit_at(a, 2 * MS), Err(SchedError::OutOfOrder { arrival_ns, last_release_ns, .. })
        if arrival_ns == 2 * MS && last_release_ns == 3 * MS));
}

fn spectrum(s: &mut Scheduler) -> StreamId {
    s.register_stream(
        StreamSpec::new("spectrum", Qos::Throughput { min_rate_hz: None, deadline_ns: None })
            .with_cost(MS)
            .with_units(100),
    )
    .unwrap()
}

#[test]
fn throughput_blocks_are_chunked_by_the_quantum() {
    // No lookahead, and a realtime stream to pace against (its blocks are far apart).
    let (mut s, _) = Scheduler::simulated(SchedulerConfig { max_chunks_in_flight: 1, ..config() }, 0).unwrap();
    s.register_stream(rt("audio", 100 * MS, 10 * US)).unwrap();
    let tp = s
        .register_stream(
            StreamSpec::new("spectrum", Qos::Throughput { min_rate_hz: None, deadline_ns: None })
                .with_cost(MS)
                .with_units(100),
        )
        .unwrap();
    let sub = s.submit_at(tp, 0).unwrap();
    let mut t = 0;
    let mut ranges = vec![];
    loop {
        let l = launch(s.next_decision_at(t));
        ranges.push((l.chunk_begin, l.chunk_end));
        assert_eq!(l.est_cost_ns, (l.chunk_end - l.chunk_begin) as u64 * 10 * US);
        // One chunk in flight per block: nothing else to do until it completes.
        assert_eq!(s.next_decision_at(t), Decision::Idle);
        t += l.est_cost_ns;
        let c = s.complete(sub.task, l.est_cost_ns, t).unwrap();
        if l.is_final {
            assert_eq!(c.state, TaskState::Completed);
            break;
        }
        assert_eq!(c.state, TaskState::Ready);
    }
    assert_eq!(ranges, vec![(0, 25), (25, 50), (50, 75), (75, 100)]);
}

#[test]
fn without_a_realtime_stream_a_throughput_block_is_one_chunk() {
    let (mut s, _) = sched();
    let tp = spectrum(&mut s);
    // A stream still calibrating is not an admitted realtime stream: nothing to pace against.
    s.register_stream(StreamSpec::new("calibrating", Qos::realtime(MS, None))).unwrap();
    let sub = s.submit_at(tp, 0).unwrap();
    let l = launch(s.next_decision_at(0));
    assert_eq!((l.task, l.chunk_begin, l.chunk_end, l.is_final, l.est_cost_ns), (sub.task, 0, 100, true, MS));
    assert_eq!(s.next_decision_at(0), Decision::Idle);
    let c = s.complete(sub.task, MS, MS).unwrap();
    assert_eq!((c.state, c.remaining_units), (TaskState::Completed, 0));
    assert_eq!(s.stream_stats(tp).unwrap().chunks, 1);

    // Once a realtime stream is admitted, the next block is split by the quantum again.
    s.register_stream(rt("audio", 100 * MS, 10 * US)).unwrap();
    let sub = s.submit_at(tp, MS).unwrap();
    let l = launch(s.next_decision_at(MS));
    assert_eq!((l.task, l.chunk_begin, l.chunk_end, l.is_final), (sub.task, 0, 25, false));
}

#[test]
fn lookahead_releases_the_next_chunk_before_the_first_completes() {
    let (mut s, _) = sched(); // max_chunks_in_flight 2
    s.register_stream(rt("audio", 100 * MS, 10 * US)).unwrap();
    let tp = spectrum(&mut s);
    let sub = s.submit_at(tp, 0).unwrap();
    let first = launch(s.next_decision_at(0));
    let second = launch(s.next_decision_at(0));
    assert_eq!((first.task, first.chunk_begin, first.chunk_end), (sub.task, 0, 25));
    assert_eq!((second.task, second.chunk_begin, second.chunk_end), (sub.task, 25, 50));
    // Two in flight: the third waits for a completion.
    assert_eq!(s.next_decision_at(0), Decision::Idle);
    let stats = s.stats();
    assert_eq!(stats.in_flight, 2);
    // The second chunk was checked with the first still on the device.
    assert_eq!(stats.device_free_estimate_ns, 500 * US);
    let t = s.task(sub.task).unwrap();
    assert_eq!((t.units_done, t.units_launched, t.in_flight.len()), (0, 50, 2));

    // complete() retires the oldest chunk; the task stays dispatched while the second runs.
    let c = s.complete(sub.task, 250 * US, 250 * US).unwrap();
    assert_eq!((c.state, c.remaining_units, c.latency_ns), (TaskState::Dispatched, 75, None));
    assert_eq!(s.task(sub.task).unwrap().units_done, 25);
    let third = launch(s.next_decision_at(250 * US));
    assert_eq!((third.chunk_begin, third.chunk_end), (50, 75));
    s.complete(sub.task, 250 * US, 500 * US).unwrap();
    s.complete(sub.task, 250 * US, 750 * US).unwrap();
    // Nothing in flight: the task is ready again and the last chunk goes out.
    assert_eq!(s.task_state(sub.task), Some(TaskState::Ready));
    let last = launch(s.next_decision_at(750 * US));
    assert_eq!((last.chunk_begin, last.chunk_end, last.is_final), (75, 100, true));
    let c = s.complete(sub.task, 250 * US, MS).unwrap();
    assert_eq!((c.state, c.latency_ns), (TaskState::Completed, Some(MS)));
    assert_eq!(s.stats().in_flight, 0);
    // Nothing left in flight: another complete() is illegal.
    assert!(matches!(s.complete(sub.task, 1, MS), Err(SchedError::IllegalTransition(_))));
}

#[test]
fn dropping_a_task_with_chunks_in_flight_clears_them_all() {
    let (mut s, _) = sched();
    s.register_stream(rt("audio", 100 * MS, 10 * US)).unwrap();
    let tp = spectrum(&mut s);
    let a = s.submit_at(tp, 0).unwrap().task;
    launch(s.next_decision_at(0));
    launch(s.next_decision_at(0));
    assert_eq!(s.stats().in_flight, 2);
    s.drop_task(a).unwrap();
    assert_eq!(s.stats().in_flight, 0);
    assert!(matches!(s.complete(a, 1, MS), Err(SchedError::IllegalTransition(t)) if t.from == TaskState::Dropped));
    let b = s.submit_at(tp, 0).unwrap().task;
    assert_eq!(launch(s.next_decision_at(0)).task, b);
    launch(s.next_decision_at(0));
    s.cancel(b).unwrap();
    assert_eq!(s.stats().in_flight, 0);
    assert_eq!(s.stream_stats(tp).unwrap().cancelled, 1);
}

#[test]
fn pacing_holds_a_chunk_that_would_endanger_a_realtime_block() {
    let (mut s, _) = sched();
    // Audio: 1 ms period and deadline, 300 us per block; margin 50 us.
    let a = s.register_stream(rt("audio", MS, 300 * US)).unwrap();
    let bulk = s
        .register_stream(
            StreamSpec::new("bulk", Qos::Throughput { min_rate_hz: None, deadline_ns: None }).with_cost(600 * US),
        )
        .unwrap();
    s.submit_at(a, 0).unwrap();
    let b1 = s.submit_at(bulk, 0).unwrap();
    let audio1 = launch(s.next_decision_at(0));
    assert_eq!(audio1.stream, a, "realtime goes first");
    // Device busy until 300 us; the chunk would end at 900 us, before the next audio block (1 ms).
    assert_eq!(launch(s.next_decision_at(0)).task, b1.task);
    s.complete(audio1.task, 300 * US, 300 * US).unwrap();
    s.complete(b1.task, 600 * US, 900 * US).unwrap();

    // At 900 us a 900 us block would run to 1.8 ms; audio released at 1 ms would then end at
    // 2.1 ms > 2 ms - 50 us. Held back until the audio block arrives.
    let big =
        s.register_stream(StreamSpec::new("big", Qos::BestEffort { deadline_ns: None }).with_cost(900 * US)).unwrap();
    let b2 = s.submit_at(big, 900 * US).unwrap();
    assert_eq!(s.next_decision_at(900 * US), Decision::WaitUntil(MS));
    assert_eq!(s.stats().paced, 1);
    assert_eq!(s.task_state(b2.task), Some(TaskState::Ready));

    // At 1 ms audio goes first (device busy to 1.3 ms); the big block then ends at 2.2 ms and the
    // audio block of 2 ms ends at 2.5 ms <= 3 ms - 50 us: it fits behind.
    s.submit_at(a, MS).unwrap();
    assert_eq!(launch(s.next_decision_at(MS)).stream, a);
    assert_eq!(launch(s.next_decision_at(MS)).task, b2.task);
}

#[test]
fn calibration_then_admission() {
    let (mut s, _) = sched();
    let a = s.register_stream(StreamSpec::new("audio", Qos::realtime(5 * MS, None))).unwrap();
    let st = s.stream_stats(a).unwrap();
    assert!(!st.admitted);
    assert_eq!(st.utilisation, 0.0);
    assert!(matches!(s.admit(a), Err(SchedError::NoCostSample { .. })));
    // While calibrating, blocks run as best effort (paced) and their costs are measured.
    let sub = s.submit_at(a, 0).unwrap();
    let l = launch(s.next_decision_at(0));
    assert_eq!(l.task, sub.task);
    s.complete(sub.task, 200 * US, 200 * US).unwrap();
    assert_eq!(s.calibrate(a, &[400 * US]).unwrap(), 300 * US);
    let ok = s.admit(a).unwrap();
    assert!((ok.stream_utilisation - 0.06).abs() < 1e-12);
    assert!(s.stream_stats(a).unwrap().admitted);
    // Admitted: later blocks go through EDF.
    let sub = s.submit_at(a, 5 * MS).unwrap();
    assert_eq!(launch(s.next_decision_at(5 * MS)).task, sub.task);
}

#[test]
fn calibrated_stream_can_be_refused() {
    let (mut s, _) = sched();
    s.register_stream(rt("big", 10 * MS, 8 * MS)).unwrap();
    let a = s.register_stream(StreamSpec::new("audio", Qos::realtime(10 * MS, None))).unwrap();
    s.calibrate(a, &[2 * MS]).unwrap();
    let err = s.admit(a).unwrap_err();
    assert!(matches!(err, SchedError::Admission(r) if r.reason == RefusalReason::UtilisationBound));
    assert!(!s.stream_stats(a).unwrap().admitted);
    assert!(matches!(s.calibrate(a, &[]), Err(SchedError::InvalidArgument(_))));
}

#[test]
fn drop_and_cancel_are_counted_separately() {
    let (mut s, _) = sched();
    let a = s.register_stream(rt("audio", 5 * MS, 100 * US)).unwrap();
    let t1 = s.submit_at(a, 0).unwrap().task;
    let t2 = s.submit_at(a, 5 * MS).unwrap().task;
    let t3 = s.submit_at(a, 10 * MS).unwrap().task;
    launch(s.next_decision_at(0));
    s.drop_task(t1).unwrap(); // from dispatched
    s.cancel(t2).unwrap(); // from pending
    assert_eq!(s.stats().in_flight, 0);
    let st = s.stream_stats(a).unwrap();
    assert_eq!((st.dropped, st.cancelled, st.live), (1, 1, 1));
    assert_eq!(s.task_state(t1), Some(TaskState::Dropped));
    assert_eq!(s.next_decision_at(MS), Decision::WaitUntil(10 * MS));
    let fin = s.unregister_stream(a).unwrap();
    assert_eq!(fin.cancelled, 2);
    assert_eq!(s.task_state(t3), Some(TaskState::Cancelled));
    assert_eq!(s.next_decision_at(20 * MS), Decision::Idle);
    assert!(matches!(s.stream_stats(a), Err(SchedError::UnknownStream(_))));
}

#[test]
fn throughput_with_rate_goes_before_plain_throughput_and_best_effort() {
    let (mut s, _) = sched();
    let be =
        s.register_stream(StreamSpec::new("be", Qos::BestEffort { deadline_ns: None }).with_cost(10 * US)).unwrap();
    let plain = s
        .register_stream(
            StreamSpec::new("plain", Qos::Throughput { min_rate_hz: None, deadline_ns: None }).with_cost(10 * US),
        )
        .unwrap();
    let rated = s
        .register_stream(
            StreamSpec::new("rated", Qos::Throughput { min_rate_hz: Some(100.0), deadline_ns: None })
                .with_cost(10 * US),
        )
        .unwrap();
    for id in [be, plain, rated] {
        s.submit_at(id, 0).unwrap();
    }
    let order: Vec<StreamId> = (0..3).map(|_| launch(s.next_decision_at(0)).stream).collect();
    assert_eq!(order, vec![rated, plain, be]);
    let stats = s.stats();
    assert!((stats.throughput_reserved - 0.001).abs() < 1e-12);
}

#[test]
fn finished_log_is_bounded() {
    let (mut s, _) = sched();
    let be =
        s.register_stream(StreamSpec::new("be", Qos::BestEffort { deadline_ns: None }).with_cost(10 * US)).unwrap();
    let mut ids = vec![];
    for i in 0..20 {
        let t = s.submit_at(be, i).unwrap().task;
        s.cancel(t).unwrap();
        ids.push(t);
    }
    assert_eq!(s.task_state(ids[0]), None);
    assert_eq!(s.task_state(ids[19]), Some(TaskState::Cancelled));
}

#[test]
fn over_bound_is_reported_when_costs_grow() {
    let (mut s, _) = sched();
    let a = s.register_stream(rt("audio", MS, 800 * US)).unwrap();
    assert!(!s.stats().over_bound);
    s.calibrate(a, &[1_200 * US, 1_200 * US, 1_200 * US]).unwrap();
    assert!(s.stats().over_bound);
}

/// A scheduler whose dispatcher may be held 85% of the time at most, and held 0.8 ms at a time.
fn modelled() -> Scheduler {
    let c = SchedulerConfig { dispatcher_busy_cap: 0.85, dispatcher_hold_ns: 800 * US, ..config() };
    Scheduler::simulated(c, 0).unwrap().0
}

#[test]
fn dispatcher_work_is_counted_into_the_admitted_cost_and_recounted_as_the_set_changes() {
    let mut s = modelled();
    let a = s.register_stream(rt("a", 10 * MS, 1_200 * US).with_dispatch(1_600 * US).with_phase(0)).unwrap();
    // 1.6 ms x 0.9 / 0.85: its lock held at most 85% where the streams fill U_max
    assert_eq!(s.stream_stats(a).unwrap().cost_ns, Some(1_694_118));
    let adm = s.stream_admission(a).unwrap();
    assert_eq!(
        (adm.device_cost_ns, adm.dispatch_ns, adm.dispatch_counted_ns),
        (Some(1_200 * US), Some(1_600 * US), Some(1_694_118))
    );
    assert!((adm.dispatcher_share - 0.85).abs() < 1e-12);
    // a stream with a 2-ms deadline (half a period after a) leaves the lock 60%: a's work counts 2.4 ms now
    let short = StreamSpec::new("short", Qos::realtime(10 * MS, Some(2 * MS))).with_cost(100 * US).with_phase(5 * MS);
    let b = s.register_stream(short).unwrap();
    assert_eq!(s.stream_stats(a).unwrap().cost_ns, Some(2_400_000));
    assert!((s.stats().realtime_utilisation - 0.25).abs() < 1e-9);
    // it leaves, and a's count falls back
    s.unregister_stream(b).unwrap();
    assert_eq!(s.stream_stats(a).unwrap().cost_ns, Some(1_694_118));
    // the model's count for any figures, at the admitted streams' shortest deadline or another
    assert_eq!(s.counted_cost_ns(1_200 * US, Some(1_600 * US), None), Some(1_694_118));
    assert_eq!(s.counted_cost_ns(2_000 * US, Some(1_600 * US), None), Some(2_000 * US));
    assert_eq!(s.counted_cost_ns(100, Some(10_000), Some(2 * MS)), Some(15_000));
    assert_eq!(s.counted_cost_ns(100, Some(10_000), Some(500 * US)), None);
    assert_eq!(s.counted_cost_ns(100, None, Some(500 * US)), Some(100));
    // a stream without measured dispatcher work keeps its cost
    let c = s.register_stream(rt("c", 10 * MS, 1_000 * US)).unwrap();
    assert_eq!(s.stream_stats(c).unwrap().cost_ns, Some(1_000 * US));
    assert_eq!(s.stream_admission(c).unwrap().dispatch_counted_ns, None);
}

#[test]
fn device_checks_name_the_stream_they_refuse() {
    let mut s = modelled();
    s.register_stream(rt("a", 10 * MS, 100 * US).with_tail_reach(3 * MS)).unwrap();
    let tight = StreamSpec::new("b", Qos::realtime(10 * MS, Some(700 * US))).with_cost(100 * US);
    s.register_stream(tight.with_tail_reach(900 * US)).unwrap(); // no dispatcher work counted yet
    let refused = s.check_dispatcher_hold().unwrap_err();
    assert_eq!((refused.reason, refused.stream.as_str()), (RefusalReason::DispatcherHold, "b"));
    let refused = s.check_latency_tails().unwrap_err();
    assert_eq!(
        (refused.reason, refused.stream.as_str(), refused.tail_reach_ns.map(|r| r.get())),
        (RefusalReason::LatencyTail, "b", Some(900 * US))
    );
    // registering dispatcher work at that deadline is refused too
    let err = s.register_stream(rt("c", 10 * MS, 100 * US).with_dispatch(10 * US)).unwrap_err();
    assert!(matches!(err, SchedError::Admission(r) if r.reason == RefusalReason::DispatcherHold));
    assert_eq!(s.stream_id("c"), None);
}

#[test]
fn dispatcher_figures_apply_to_realtime_streams_only() {
    let (mut s, _) = sched();
    let tp = StreamSpec::new("tp", Qos::Throughput { min_rate_hz: None, deadline_ns: None }).with_dispatch(10);
    assert!(matches!(s.register_stream(tp), Err(SchedError::InvalidArgument(m)) if m.contains("dispatch_ns")));
    assert!(
        matches!(s.register_stream(rt("z", MS, 10).with_tail_reach(0)), Err(SchedError::InvalidArgument(m)) if m.contains("tail_reach_ns"))
    );
    let bad = SchedulerConfig { dispatcher_busy_cap: 0.0, ..config() };
    assert!(
        matches!(Scheduler::simulated(bad, 0), Err(SchedError::InvalidArgument(m)) if m.contains("dispatcher_busy_cap"))
    );
}
