//! The C ABI exercised the way C++ uses it: only through the function pointers of the table.

use super::*;
use std::ffi::{c_char, CStr};
use std::ptr::{null, null_mut};
use std::sync::Arc;

use super::ffi::set_last_error;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn abi() -> &'static GkSchedAbiV1 {
    &SCHED_ABI_V1
}

fn simulated_scheduler() -> *mut SchedHandle {
    let config = GkSchedConfig { clock: GK_CLOCK_SIMULATED, ..GkSchedConfig::defaults() };
    let mut s = null_mut();
    assert_eq!(unsafe { (abi().sched_create)(&config, &mut s) }, GK_OK);
    assert!(!s.is_null());
    s
}

fn spec(name: &CStr, qos: i32, period_ns: u64, cost_ns: u64) -> GkStreamSpec {
    GkStreamSpec {
        struct_size: size_of::<GkStreamSpec>() as u32,
        qos,
        name: name.as_ptr(),
        period_ns,
        deadline_ns: 0,
        min_rate_hz: 0.0,
        cost_ns,
        units_per_block: 1,
        reserved0: 0,
    }
}

fn error_text() -> String {
    let mut buf = [0 as c_char; 512];
    let n = unsafe { (abi().last_error)(buf.as_mut_ptr(), buf.len()) };
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap().to_string();
    assert_eq!(n, last_error_message().len());
    text
}

#[test]
fn layout_matches_the_header() {
    // Sizes the C test (tests/core/c/abi_smoke.c) asserts with _Static_assert as well.
    assert_eq!(size_of::<GkSchedConfig>(), 56);
    assert_eq!(std::mem::offset_of!(GkSchedConfig, max_chunks_in_flight), GK_SCHED_CONFIG_V1_SIZE as usize);
    assert_eq!(size_of::<GkStreamSpec>(), 56);
    assert_eq!(size_of::<GkAdmissionRefusal>(), 64);
    assert_eq!(size_of::<GkDecision>(), 56);
    assert_eq!(size_of::<GkCompletion>(), 16);
    assert_eq!(size_of::<GkLatencySummary>(), 72);
    assert_eq!(size_of::<GkStreamStats>(), 232);
    assert_eq!(size_of::<GkSchedStats>(), 96);
    assert_eq!(size_of::<GkPoolConfig>(), 32);
    assert_eq!(size_of::<GkPoolGrant>(), 24);
    assert_eq!(size_of::<GkPoolStats>(), 104);
    assert_eq!(size_of::<GkSchedAbiV1>(), 8 + 27 * 8);
    assert_eq!(abi().struct_size as usize, size_of::<GkSchedAbiV1>());
    assert_eq!(abi().abi_version, 1);
}

#[test]
fn block_round_trip_through_the_table() {
    let s = simulated_scheduler();
    unsafe {
        let mut stream = 0;
        let rt = spec(c"audio", 0, 5 * MS, 100 * US);
        assert_eq!((abi().register_stream)(s, &rt, &mut stream, null_mut()), GK_OK);
        assert_eq!(stream, 1);
        let (mut task, mut deadline) = (0, 0);
        assert_eq!((abi().submit)(s, stream, GK_TIME_NOW, &mut task, &mut deadline), GK_OK);
        assert_eq!(deadline, 5 * MS);
        let mut d = GkDecision::default();
        assert_eq!((abi().next)(s, GK_TIME_NOW, &mut d), GK_OK);
        assert_eq!(
            (d.kind, d.task, d.stream, d.chunk_begin, d.chunk_end, d.is_final),
            (GK_DECISION_LAUNCH, task, stream, 0, 1, 1)
        );
        assert_eq!((d.deadline_ns, d.est_cost_ns, d.wait_until_ns), (5 * MS, 100 * US, GK_NO_TIME));
        assert_eq!((abi().next)(s, GK_TIME_NOW, &mut d), GK_OK);
        assert_eq!(d.kind, GK_DECISION_IDLE);
        assert_eq!((abi().sched_set_time)(s, 150 * US), GK_OK);
        assert_eq!((abi().sched_now_ns)(s), 150 * US);
        let mut c = GkCompletion::default();
        assert_eq!((abi().complete)(s, task, 90 * US, GK_TIME_NOW, &mut c), GK_OK);
        assert_eq!(c, GkCompletion { state: 3, remaining_units: 0, latency_ns: 150 * US });
        let mut state = -1;
        assert_eq!((abi().task_state)(s, task, &mut state), GK_OK);
        assert_eq!(state, 3);

        let mut st = GkStreamStats::default();
        assert_eq!((abi().stream_stats)(s, stream, &mut st), GK_OK);
        assert_eq!((st.submitted, st.completed, st.chunks, st.busy_ns), (1, 1, 1, 90 * US));
        assert_eq!((st.latency.count, st.latency.max_ns), (1, 150 * US));
        assert_eq!(
            (st.period_ns, st.deadline_ns, st.declared_cost_ns, st.measured_cost_ns),
            (5 * MS, 5 * MS, 100 * US, 90 * US)
        );
        // a second block, not timed: its estimate (the 100 us declared) is the busy time
        assert_eq!((abi().submit)(s, stream, GK_TIME_NOW, &mut task, &mut deadline), GK_OK);
        assert_eq!((abi().next)(s, GK_TIME_NOW, &mut d), GK_OK);
        assert_eq!((abi().complete)(s, task, GK_COST_UNMEASURED, GK_TIME_NOW, &mut c), GK_OK);
        assert_eq!((abi().stream_stats)(s, stream, &mut st), GK_OK);
        assert_eq!((st.completed, st.busy_ns, st.measured_cost_ns, st.cost_samples), (2, 190 * US, 90 * US, 1));
        let mut all = GkSchedStats::default();
        assert_eq!((abi().stats)(s, &mut all), GK_OK);
        assert_eq!((all.streams, all.launches, all.in_flight), (1, 2, 0));
        assert!((all.realtime_utilisation - 0.02).abs() < 1e-12);
        assert_eq!((abi().unregister_stream)(s, stream), GK_OK);
        (abi().sched_release)(s);
    }
}

/// Chunk ranges the table hands out for one block of a chunked throughput stream (100 us per
/// unit, 2 units per quantum) next to a realtime stream, before any completion.
unsafe fn chunks_before_a_completion(config: *const GkSchedConfig) -> Vec<(u32, u32)> {
    let mut s = null_mut();
    assert_eq!((abi().sched_create)(config, &mut s), GK_OK, "{}", error_text());
    let (mut audio, mut bulk) = (0, 0);
    assert_eq!((abi().register_stream)(s, &spec(c"audio", 0, 100 * MS, 10 * US), &mut audio, null_mut()), GK_OK);
    let tp = GkStreamSpec { units_per_block: 8, ..spec(c"bulk", 1, 0, 800 * US) };
    assert_eq!((abi().register_stream)(s, &tp, &mut bulk, null_mut()), GK_OK);
    let mut task = 0;
    assert_eq!((abi().submit)(s, bulk, 0, &mut task, null_mut()), GK_OK);
    let mut ranges = vec![];
    let mut d = GkDecision::default();
    while (abi().next)(s, 0, &mut d) == GK_OK && d.kind == GK_DECISION_LAUNCH {
        ranges.push((d.chunk_begin, d.chunk_end));
    }
    (abi().sched_release)(s);
    ranges
}

#[test]
fn max_chunks_in_flight_is_read_and_defaults_for_an_older_struct() {
    let config = GkSchedConfig { clock: GK_CLOCK_SIMULATED, ..GkSchedConfig::defaults() };
    unsafe {
        let one = GkSchedConfig { max_chunks_in_flight: 1, ..config };
        assert_eq!(chunks_before_a_completion(&one), vec![(0, 2)]);
        let three = GkSchedConfig { max_chunks_in_flight: 3, ..config };
        assert_eq!(chunks_before_a_completion(&three), vec![(0, 2), (2, 4), (4, 6)]);
        // Zero-initialised: the default, 2.
        let zero = GkSchedConfig { max_chunks_in_flight: 0, ..config };
        assert_eq!(chunks_before_a_completion(&zero), vec![(0, 2), (2, 4)]);
        // A v1 struct (no field): the bytes past struct_size are never read, the default applies.
        let v1 = GkSchedConfig { struct_size: GK_SCHED_CONFIG_V1_SIZE, max_chunks_in_flight: 1, ..config };
        assert_eq!(chunks_before_a_completion(&v1), vec![(0, 2), (2, 4)]);
        // Smaller than v1: refused.
        let short = GkSchedConfig { struct_size: GK_SCHED_CONFIG_V1_SIZE - 8, ..config };
        let mut s = null_mut();
        assert_eq!((abi().sched_create)(&short, &mut s), GK_ERR_STRUCT_SIZE);
        assert!(error_text().contains("struct_size 40 is smaller than 48"));
        assert!(s.is_null());
    }
}

#[test]
fn refusal_fills_the_figures() {
    let s = simulated_scheduler();
    unsafe {
        let mut id = 0;
        assert_eq!((abi().register_stream)(s, &spec(c"a", 0, 10 * MS, 6 * MS), &mut id, null_mut()), GK_OK);
        let mut refusal = GkAdmissionRefusal::default();
        let code = (abi().register_stream)(s, &spec(c"b", 0, 10 * MS, 4 * MS), &mut id, &mut refusal);
        assert_eq!(code, GK_ERR_ADMISSION_REFUSED);
        assert_eq!(refusal.reason, 1);
        assert!((refusal.current_total - 0.6).abs() < 1e-12);
        assert!((refusal.stream_utilisation - 0.4).abs() < 1e-12);
        assert_eq!(refusal.bound, 0.9);
        assert!(error_text().contains("stream 'b' not admitted"));
        // Refused without an out-struct is still a clean error.
        assert_eq!(
            (abi().register_stream)(s, &spec(c"b", 0, 10 * MS, 4 * MS), &mut id, null_mut()),
            GK_ERR_ADMISSION_REFUSED
        );
        (abi().sched_release)(s);
    }
}

#[test]
fn calibrating_stream_is_admitted_after_measurement() {
    let s = simulated_scheduler();
    unsafe {
        let mut id = 0;
        assert_eq!((abi().register_stream)(s, &spec(c"a", 0, 10 * MS, 0), &mut id, null_mut()), GK_OK);
        assert_eq!((abi().admit_stream)(s, id, null_mut()), -7);
        assert!(error_text().contains("has no cost yet"));
        let mut cost = 0;
        assert_eq!((abi().update_cost)(s, id, MS, &mut cost), GK_OK);
        assert_eq!(cost, MS);
        assert_eq!((abi().admit_stream)(s, id, null_mut()), GK_OK);
        let mut st = GkStreamStats::default();
        (abi().stream_stats)(s, id, &mut st);
        assert_eq!(st.admitted, 1);
        (abi().sched_release)(s);
    }
}

#[test]
fn core_codes_and_enumerations_are_the_headers_constants() {
    use pygpukit_core::memory::PoolError;
    use pygpukit_core::scheduler::{IllegalTransition, QosKind, RefusalReason, SchedError, TaskState};
    // The core crate knows nothing of the ABI; these pin its codes to the constants of abi.rs.
    let transition = IllegalTransition { task: 1, from: TaskState::Ready, to: TaskState::Completed };
    let sched_codes = [
        (SchedError::InvalidArgument(String::new()), GK_ERR_INVALID_ARGUMENT),
        (SchedError::UnknownStream(1), GK_ERR_UNKNOWN_STREAM),
        (SchedError::UnknownTask(1), GK_ERR_UNKNOWN_TASK),
        (SchedError::IllegalTransition(transition), GK_ERR_ILLEGAL_TRANSITION),
        (SchedError::DuplicateStream(String::new()), GK_ERR_DUPLICATE_STREAM),
        (SchedError::NoCostSample { stream: String::new() }, GK_ERR_NO_COST_SAMPLE),
        (SchedError::OutOfOrder { stream: String::new(), arrival_ns: 0, last_release_ns: 1 }, GK_ERR_OUT_OF_ORDER),
    ];
    for (error, code) in sched_codes {
        assert_eq!(error.code(), code, "{error:?}");
    }
    let pool_codes = [
        (PoolError::InvalidConfig(String::new()), GK_ERR_INVALID_ARGUMENT),
        (PoolError::UnknownBlock(1), GK_ERR_UNKNOWN_BLOCK),
        (PoolError::NotInUse(1), GK_ERR_BLOCK_NOT_IN_USE),
        (PoolError::OverBudget { requested: 1, in_use: 1, budget: 1 }, GK_ERR_OVER_BUDGET),
    ];
    for (error, code) in pool_codes {
        assert_eq!(error.code(), code, "{error:?}");
    }
    let states = [
        (TaskState::Pending, GK_TASK_PENDING),
        (TaskState::Ready, GK_TASK_READY),
        (TaskState::Dispatched, GK_TASK_DISPATCHED),
        (TaskState::Completed, GK_TASK_COMPLETED),
        (TaskState::Missed, GK_TASK_MISSED),
        (TaskState::Dropped, GK_TASK_DROPPED),
        (TaskState::Cancelled, GK_TASK_CANCELLED),
    ];
    for (state, value) in states {
        assert_eq!(state as i32, value, "{state:?}");
    }
    let classes = [
        (QosKind::Realtime, GK_QOS_REALTIME),
        (QosKind::Throughput, GK_QOS_THROUGHPUT),
        (QosKind::BestEffort, GK_QOS_BEST_EFFORT),
    ];
    for (class, value) in classes {
        assert_eq!(class as i32, value, "{class:?}");
    }
    let reasons = [
        (RefusalReason::UtilisationBound, GK_REFUSED_UTILISATION_BOUND),
        (RefusalReason::DeviceCapacity, GK_REFUSED_DEVICE_CAPACITY),
        (RefusalReason::ResponseBound, GK_REFUSED_RESPONSE_BOUND),
        (RefusalReason::DispatcherHold, GK_REFUSED_DISPATCHER_HOLD),
        (RefusalReason::LatencyTail, GK_REFUSED_LATENCY_TAIL),
    ];
    for (reason, value) in reasons {
        assert_eq!(reason as i32, value, "{reason:?}");
    }
}

#[test]
fn errors_are_codes_with_messages() {
    let s = simulated_scheduler();
    unsafe {
        let mut id = 0;
        let mut bad = spec(c"x", 7, 10 * MS, 0);
        assert_eq!((abi().register_stream)(s, &bad, &mut id, null_mut()), GK_ERR_INVALID_ARGUMENT);
        assert!(error_text().contains("qos 7"));
        bad.qos = 0;
        bad.struct_size = 8;
        assert_eq!((abi().register_stream)(s, &bad, &mut id, null_mut()), GK_ERR_STRUCT_SIZE);
        assert!(error_text().contains("struct_size 8"));
        bad.struct_size = size_of::<GkStreamSpec>() as u32;
        bad.name = null();
        assert_eq!((abi().register_stream)(s, &bad, &mut id, null_mut()), GK_ERR_INVALID_ARGUMENT);
        assert_eq!((abi().register_stream)(s, null(), &mut id, null_mut()), GK_ERR_NULL_POINTER);
        assert!(error_text().contains("`spec` must not be NULL"));
        let mut task = 0;
        assert_eq!((abi().submit)(s, 42, 0, &mut task, null_mut()), -2);
        assert_eq!((abi().complete)(s, 42, 1, 1, null_mut()), -3);
        let mut d = GkDecision::default();
        assert_eq!((abi().next)(null_mut(), 0, &mut d), GK_ERR_NULL_POINTER);

        let be = spec(c"be", 2, 0, 10 * US);
        assert_eq!((abi().register_stream)(s, &be, &mut id, null_mut()), GK_OK);
        assert_eq!((abi().register_stream)(s, &be, &mut id, null_mut()), -6);
        assert_eq!((abi().submit)(s, id, 0, &mut task, null_mut()), GK_OK);
        assert_eq!((abi().complete)(s, task, 1, 1, null_mut()), -4, "ready, not dispatched");
        assert!(error_text().contains("cannot go from ready to completed"));
        assert_eq!((abi().cancel_task)(s, task), GK_OK);
        assert_eq!((abi().drop_task)(s, task), -4);
        (abi().sched_release)(s);

        let monotonic = GkSchedConfig::defaults();
        let mut m = null_mut();
        assert_eq!((abi().sched_create)(&monotonic, &mut m), GK_OK);
        assert_eq!((abi().sched_set_time)(m, 5), GK_ERR_WRONG_CLOCK);
        assert!((abi().sched_now_ns)(m) > 0);
        (abi().sched_release)(m);

        let bad_config = GkSchedConfig { u_max: 2.0, ..GkSchedConfig::defaults() };
        assert_eq!((abi().sched_create)(&bad_config, &mut m), GK_ERR_INVALID_ARGUMENT);
        assert!(error_text().contains("u_max"));
    }
}

#[test]
fn last_error_truncates_and_reports_the_full_length() {
    set_last_error("0123456789");
    let mut buf = [1 as c_char; 4];
    let n = unsafe { (abi().last_error)(buf.as_mut_ptr(), buf.len()) };
    assert_eq!(n, 10);
    assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_bytes(), b"012");
    assert_eq!(unsafe { (abi().last_error)(null_mut(), 0) }, 10);
}

#[test]
fn panics_become_error_codes() {
    let code = ffi_guard(|| panic!("boom"));
    assert_eq!(code, GK_ERR_PANIC);
    assert!(last_error_message().contains("boom"));
    // A panic while the mutex is held poisons the handle: later calls say so.
    let s = simulated_scheduler();
    let handle = unsafe { &*s };
    let code = ffi_guard(|| {
        let _guard = handle.lock().unwrap();
        panic!("inside the lock")
    });
    assert_eq!(code, GK_ERR_PANIC);
    let mut d = GkDecision::default();
    assert_eq!(unsafe { (abi().next)(s, 0, &mut d) }, GK_ERR_POISONED);
    unsafe { (abi().sched_release)(s) };
}

#[test]
fn reference_counting_keeps_the_scheduler_alive() {
    let s = simulated_scheduler();
    unsafe {
        (abi().sched_retain)(s);
        (abi().sched_release)(s);
        // Still alive: one reference left.
        let mut st = GkSchedStats::default();
        assert_eq!((abi().stats)(s, &mut st), GK_OK);
        let arc = Arc::from_raw(s.cast_const());
        assert_eq!(Arc::strong_count(&arc), 1);
        drop(arc);
    }
}

#[test]
fn concurrent_engine_and_reader_threads() {
    let s = simulated_scheduler();
    let addr = s as usize;
    unsafe {
        let mut id = 0;
        assert_eq!((abi().register_stream)(s, &spec(c"bulk", 1, 0, 10 * US), &mut id, null_mut()), GK_OK);
        (abi().sched_retain)(s);
        (abi().sched_retain)(s);
    }
    let engine = std::thread::spawn(move || unsafe {
        let s = addr as *mut SchedHandle;
        let mut t = 0;
        for _ in 0..2_000 {
            let mut task = 0;
            assert_eq!((abi().submit)(s, 1, t, &mut task, null_mut()), GK_OK);
            let mut d = GkDecision::default();
            assert_eq!((abi().next)(s, t, &mut d), GK_OK);
            assert_eq!(d.kind, GK_DECISION_LAUNCH);
            t += 10 * US;
            assert_eq!((abi().complete)(s, d.task, 10 * US, t, null_mut()), GK_OK);
        }
        (abi().sched_release)(s);
    });
    let reader = std::thread::spawn(move || unsafe {
        let s = addr as *mut SchedHandle;
        let mut seen = 0;
        for _ in 0..2_000 {
            let mut st = GkStreamStats::default();
            assert_eq!((abi().stream_stats)(s, 1, &mut st), GK_OK);
            assert!(st.completed >= seen);
            seen = st.completed;
        }
        (abi().sched_release)(s);
    });
    engine.join().unwrap();
    reader.join().unwrap();
    unsafe {
        let mut st = GkStreamStats::default();
        assert_eq!((abi().stream_stats)(s, 1, &mut st), GK_OK);
        assert_eq!(st.completed, 2_000);
        (abi().sched_release)(s);
    }
}

#[test]
fn pool_through_the_table() {
    unsafe {
        let config = GkPoolConfig {
            struct_size: size_of::<GkPoolConfig>() as u32,
            steps_per_doubling: 4,
            min_block_bytes: 256,
            cache_budget_bytes: 2048,
            device_budget_bytes: 0,
        };
        let mut p = null_mut();
        assert_eq!((abi().pool_create)(&config, &mut p), GK_OK);
        let mut ids = vec![];
        for _ in 0..3 {
            let mut g = GkPoolGrant::default();
            assert_eq!((abi().pool_acquire_block)(p, 1000, &mut g), GK_OK);
            assert_eq!((g.bytes, g.reused, g.to_free), (1024, 0, 0));
            ids.push(g.block);
        }
        let mut to_free = 0;
        for &id in &ids {
            assert_eq!((abi().pool_release_block)(p, id, &mut to_free), GK_OK);
        }
        assert_eq!(to_free, 1);
        assert_eq!((abi().pool_release_block)(p, ids[1], null_mut()), -10);
        assert_eq!((abi().pool_release_block)(p, 999, null_mut()), -9);
        let mut out = [0u64; 4];
        let mut n = 0;
        assert_eq!((abi().pool_take_to_free)(p, out.as_mut_ptr(), 4, &mut n), GK_OK);
        assert_eq!((n, out[0]), (1, ids[0]));
        let mut g = GkPoolGrant::default();
        assert_eq!((abi().pool_acquire_block)(p, 900, &mut g), GK_OK);
        assert_eq!((g.block, g.reused), (ids[2], 1));
        assert_eq!((abi().pool_trim)(p, 0, &mut to_free), GK_OK);
        assert_eq!(to_free, 1);
        assert_eq!((abi().pool_discard_block)(p, ids[2]), GK_OK);
        let mut st = GkPoolStats::default();
        assert_eq!((abi().pool_stats)(p, &mut st), GK_OK);
        assert_eq!((st.hits, st.misses, st.evictions, st.to_free, st.bytes_in_use), (1, 3, 2, 1, 0));
        assert_eq!((abi().pool_take_to_free)(p, null_mut(), 1, &mut n), GK_ERR_NULL_POINTER);
        assert_eq!((abi().pool_take_to_free)(p, null_mut(), 0, &mut n), GK_OK);
        assert_eq!(n, 0);
        (abi().pool_release)(p);

        let bad = GkPoolConfig { min_block_bytes: 300, ..config };
        assert_eq!((abi().pool_create)(&bad, &mut p), GK_ERR_INVALID_ARGUMENT);
        assert!(error_text().contains("power of two"));
        let budget = GkPoolConfig { device_budget_bytes: 1024, ..config };
        assert_eq!((abi().pool_create)(&budget, &mut p), GK_OK);
        let mut g = GkPoolGrant::default();
        assert_eq!((abi().pool_acquire_block)(p, 4096, &mut g), -11);
        (abi().pool_release)(p);
    }
}
