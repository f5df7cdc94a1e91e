"""Scheduler, Decision, Completion and the scheduler exceptions (src/scheduler.rs)."""

from __future__ import annotations

import re

import pytest

from pygpukit_dsp_core import (
    AdmissionRefused,
    Completion,
    Decision,
    IllegalTransition,
    Scheduler,
    SchedulerError,
)

US = 1_000
MS = 1_000_000
PERIOD = 256 * 1_000_000_000 // 48_000  # 256 samples at 48 kHz


def sim(**kwargs) -> Scheduler:
    return Scheduler(clock="simulated", **kwargs)


def test_defaults_are_the_documented_ones():
    s = Scheduler()
    assert s.config == {
        "u_max": 0.9, "quantum_ns": 250_000, "safety_margin_ns": 50_000, "ewma_alpha": 0.2,
        "max_chunks_in_flight": 2, "dispatcher_busy_cap": 1.0, "dispatcher_hold_ns": 0, "clock": "monotonic",
    }
    assert not s.simulated
    t0 = s.now_ns()
    assert s.now_ns() >= t0 > 0
    with pytest.raises(RuntimeError, match="simulated"):
        s.advance(10)


def test_block_lifecycle_with_a_simulated_clock():
    s = sim()
    audio = s.register_stream("audio", "realtime", period_ns=PERIOD, cost_ns=60 * US)
    task, deadline = s.submit(audio)
    assert deadline == PERIOD
    assert s.task_state(task) == "ready"
    d = s.next()
    assert isinstance(d, Decision)
    assert (d.kind, d.task, d.stream, d.chunk_begin, d.chunk_end, d.is_final) == ("launch", task, audio, 0, 1, True)
    assert (d.est_cost_ns, d.deadline_ns, d.wait_until_ns) == (60 * US, PERIOD, None)
    assert s.next().kind == "idle"
    assert s.advance(70 * US) == 70 * US
    done = s.complete(task, 55 * US)
    assert isinstance(done, Completion)
    assert (done.state, done.latency_ns, done.remaining_units) == ("completed", 70 * US, 0)
    st = s.stream_stats(audio)
    assert (st["submitted"], st["completed"], st["missed"], st["chunks"], st["busy_ns"]) == (1, 1, 0, 1, 55 * US)
    assert st["latency"]["max"] == 70 * US and st["latency"]["count"] == 1
    assert (st["qos"], st["admitted"], st["declared_cost_ns"], st["measured_cost_ns"]) == ("realtime", True, 60 * US, 55 * US)
    assert st["utilisation"] == pytest.approx(60 * US / PERIOD)


def test_a_block_completed_unmeasured_counts_its_estimate_and_not_a_sample():
    s = sim()
    audio = s.register_stream("audio", "realtime", period_ns=PERIOD, cost_ns=60 * US)
    task, _ = s.submit(audio)
    s.next()
    s.advance(70 * US)
    assert s.complete(task, None).state == "completed"  # a block the dispatcher did not time
    st = s.stream_stats(audio)
    assert (st["completed"], st["busy_ns"], st["cost_samples"], st["measured_cost_ns"]) == (1, 60 * US, 0, None)


def test_late_completion_counts_as_a_miss():
    s = sim()
    audio = s.register_stream("audio", "realtime", period_ns=PERIOD, cost_ns=60 * US)
    task, deadline = s.submit(audio, arrival_ns=0)
    s.next(now_ns=0)
    assert s.complete(task, 60 * US, finish_ns=deadline + 1).state == "missed"
    assert s.stream_stats(audio)["missed"] == 1


def test_admission_refusal_carries_the_figures():
    s = sim()
    s.register_stream("a", "realtime", period_ns=10 * MS, cost_ns=6 * MS)
    with pytest.raises(AdmissionRefused) as info:
        s.register_stream("b", "realtime", period_ns=10 * MS, cost_ns=4 * MS)
    err = info.value
    assert isinstance(err, SchedulerError) and isinstance(err, RuntimeError)
    assert (err.stream, err.reason, err.bound) == ("b", "utilisation_bound", 0.9)
    assert err.current_total == pytest.approx(0.6)
    assert err.stream_utilisation == pytest.approx(0.4)
    assert err.figures["current_total"] == err.current_total
    assert "exceeds the bound U_max = 0.9000" in str(err)
    assert s.stream_id("b") is None
    assert s.stats()["realtime_utilisation"] == pytest.approx(0.6)


def test_response_bound_refusal():
    s = sim(safety_margin_ns=0)
    s.register_stream("long", "realtime", period_ns=100 * MS, cost_ns=2 * MS)
    with pytest.raises(AdmissionRefused) as info:
        s.register_stream("short", "realtime", period_ns=10 * MS, deadline_ns=2 * MS, cost_ns=100 * US)
    err = info.value
    assert err.reason == "response_bound"
    assert (err.cost_sum_ns, err.stream_cost_ns, err.shortest_deadline_ns) == (2 * MS, 100 * US, 2 * MS)


def test_throughput_reservation_is_checked_against_the_device():
    s = sim()
    s.register_stream("rt", "realtime", period_ns=MS, cost_ns=800 * US)
    with pytest.raises(AdmissionRefused) as info:
        s.register_stream("tp", "throughput", min_rate_hz=500.0, cost_ns=500 * US)
    assert info.value.reason == "device_capacity"
    tp = s.register_stream("tp2", "throughput", min_rate_hz=100.0, cost_ns=500 * US)
    assert s.stats()["throughput_reserved"] == pytest.approx(0.05)
    assert s.stream_stats(tp)["min_rate_hz"] == 100.0


def test_bad_registrations_say_what_is_wrong():
    s = sim()
    expected = "unknown qos 'realtim'; use one of realtime, throughput, best_effort (did you mean 'realtime'?)"
    with pytest.raises(ValueError, match=re.escape(expected)):
        s.register_stream("x", "realtim", period_ns=MS)
    with pytest.raises(ValueError, match="need period_ns"):
        s.register_stream("x", "realtime")
    with pytest.raises(ValueError, match="period_ns applies to realtime"):
        s.register_stream("x", "best_effort", period_ns=MS)
    with pytest.raises(ValueError, match="min_rate_hz applies to throughput"):
        s.register_stream("x", "realtime", period_ns=MS, min_rate_hz=1.0)
    with pytest.raises(ValueError, match="units_per_block"):
        s.register_stream("x", "best_effort", units_per_block=0)
    with pytest.raises(ValueError, match="u_max"):
        Scheduler(u_max=1.5)
    with pytest.raises(ValueError, match="clock must be"):
        Scheduler(clock="wall")
    s.register_stream("dup", "best_effort")
    with pytest.raises(SchedulerError, match="already registered"):
        s.register_stream("dup", "best_effort")
    with pytest.raises(SchedulerError, match="unknown stream id 99"):
        s.submit(99)


def test_illegal_transitions_raise_with_both_states():
    s = sim()
    be = s.register_stream("be", "best_effort", cost_ns=10 * US)
    task, _ = s.submit(be)
    with pytest.raises(IllegalTransition) as info:
        s.complete(task, 1)
    assert (info.value.task, info.value.from_state, info.value.to_state) == (task, "ready", "completed")
    s.cancel(task)
    with pytest.raises(IllegalTransition, match="cancelled to dropped"):
        s.drop(task)
    assert s.task_state(task) == "cancelled"
    assert s.stream_stats(be)["cancelled"] == 1


def test_edf_order_among_ready_realtime_blocks():
    s = sim()
    slow = s.register_stream("slow", "realtime", period_ns=20 * MS, cost_ns=10 * US)
    fast = s.register_stream("fast", "realtime", period_ns=20 * MS, deadline_ns=2 * MS, cost_ns=10 * US)
    t_slow, _ = s.submit(slow, 0)
    t_fast, _ = s.submit(fast, 0)
    assert [s.next(0).task, s.next(0).task] == [t_fast, t_slow]


def test_pacing_holds_a_chunk_and_says_until_when():
    s = sim()
    audio = s.register_stream("audio", "realtime", period_ns=MS, cost_ns=300 * US)
    big = s.register_stream("big", "best_effort", cost_ns=900 * US)
    t_audio, _ = s.submit(audio, 0)
    s.next(0)
    s.complete(t_audio, 300 * US, 300 * US)
    s.submit(big, 900 * US)
    d = s.next(900 * US)
    assert (d.kind, d.wait_until_ns) == ("wait", MS)
    assert s.stats()["paced"] == 1
    s.submit(audio, MS)
    assert s.next(MS).stream == audio
    assert s.next(MS).stream == big


def test_throughput_blocks_come_in_chunks():
    s = sim(max_chunks_in_flight=1)
    s.register_stream("audio", "realtime", period_ns=100 * MS, cost_ns=10 * US)  # something to pace against
    tp = s.register_stream("spectrum", "throughput", cost_ns=MS, units_per_block=100)
    task, _ = s.submit(tp, 0)
    d = s.next(0)
    assert (d.chunk_begin, d.chunk_end, d.is_final, d.est_cost_ns) == (0, 25, False, 250 * US)
    assert s.next(0).kind == "idle"  # no lookahead: the next chunk waits for this one
    c = s.complete(task, 250 * US, 250 * US)
    assert (c.state, c.remaining_units, c.latency_ns) == ("ready", 75, None)


def test_without_a_realtime_stream_a_throughput_block_is_one_chunk():
    s = sim()
    tp = s.register_stream("spectrum", "throughput", cost_ns=MS, units_per_block=100)
    task, _ = s.submit(tp, 0)
    d = s.next(0)
    assert (d.task, d.chunk_begin, d.chunk_end, d.is_final, d.est_cost_ns) == (task, 0, 100, True, MS)
    assert s.complete(task, MS, MS).state == "completed"


def test_lookahead_queues_the_next_chunk_before_the_first_completes():
    s = sim(max_chunks_in_flight=3)
    assert s.config["max_chunks_in_flight"] == 3
    s.register_stream("audio", "realtime", period_ns=100 * MS, cost_ns=10 * US)
    tp = s.register_stream("spectrum", "throughput", cost_ns=MS, units_per_block=100)
    task, _ = s.submit(tp, 0)
    ranges = [(d.chunk_begin, d.chunk_end) for d in (s.next(0), s.next(0), s.next(0))]
    assert ranges == [(0, 25), (25, 50), (50, 75)]
    assert s.next(0).kind == "idle"
    assert s.stats()["in_flight"] == 3
    # complete() retires the oldest chunk; the task stays dispatched while later ones run.
    c = s.complete(task, 250 * US, 250 * US)
    assert (c.state, c.remaining_units) == ("dispatched", 75)
    assert s.task_state(task) == "dispatched"
    assert (s.next(250 * US).chunk_begin, s.stats()["in_flight"]) == (75, 3)
    s.drop(task)
    assert s.stats()["in_flight"] == 0


def test_max_chunks_in_flight_must_be_positive():
    with pytest.raises(ValueError, match="max_chunks_in_flight must be >= 1"):
        Scheduler(max_chunks_in_flight=0)
    with pytest.raises(OverflowError):
        Scheduler(max_chunks_in_flight=-1)


def test_calibration_then_admission():
    s = sim()
    audio = s.register_stream("audio", "realtime", period_ns=PERIOD)
    assert s.stream_stats(audio)["admitted"] is False
    with pytest.raises(SchedulerError, match="no cost yet"):
        s.admit(audio)
    assert s.calibrate(audio, [50 * US, 70 * US]) == 54 * US  # EWMA, alpha 0.2
    figures = s.admit(audio)
    assert figures["stream_utilisation"] == pytest.approx(54 * US / PERIOD)
    assert s.stream_stats(audio)["admitted"] is True
    assert s.update_cost(audio, 54 * US) == 54 * US


def test_drop_unregister_and_stats():
    s = sim()
    a = s.register_stream("audio", "realtime", period_ns=PERIOD, cost_ns=60 * US)
    t1, _ = s.submit(a, 0)
    t2, _ = s.submit(a, 10 * MS)
    assert s.task_state(t2) == "pending"
    assert s.next(0).task == t1
    assert s.next(0).kind == "wait"
    s.drop(t1)
    stats = s.stats()
    assert (stats["live_tasks"], stats["in_flight"], stats["launches"]) == (1, 0, 1)
    assert stats["streams"][0]["dropped"] == 1
    final = s.unregister_stream(a)
    assert (final["dropped"], final["cancelled"]) == (1, 1)
    assert s.task_state(t2) == "cancelled"
    assert s.stats()["streams"] == []


def test_simulated_clock_cannot_go_back():
    s = sim(start_ns=5 * MS)
    assert s.now_ns() == 5 * MS
    assert s.set_time(6 * MS) == 6 * MS
    with pytest.raises(ValueError, match="back"):
        s.set_time(MS)


def test_out_of_order_arrival_is_refused():
    s = sim()
    a = s.register_stream("audio", "realtime", period_ns=PERIOD, cost_ns=60 * US)
    s.submit(a, 2 * MS)
    with pytest.raises(SchedulerError, match="arrival order"):
        s.submit(a, MS)


def test_reprs_are_readable():
    s = sim()
    a = s.register_stream("audio", "realtime", period_ns=PERIOD, cost_ns=60 * US)
    s.submit(a)
    assert "is_final=True" in repr(s.next())
    assert repr(s.next()) == "Decision(idle)"
    assert "streams=1" in repr(s)


def test_release_phases_bound_the_work_in_front_of_each_block():
    # 100 streams of 10 us every ms, 200-us deadline: released at once (no phase) the response bound
    # admits 15 (15 x 10 + 50 margin); each at its own phase, 10 us apart, the utilisation bound binds
    def admitted(phases):
        s = Scheduler(safety_margin_ns=50 * US)
        for i, ph in enumerate(phases):
            try:
                s.register_stream(f"s{i}", "realtime", period_ns=MS, deadline_ns=200 * US, cost_ns=10 * US,
                                  phase_ns=ph)
            except AdmissionRefused as exc:
                return i, exc
        return len(phases), None

    n, exc = admitted([None] * 100)
    assert (n, exc.reason) == (15, "response_bound") and "phased_ahead_ns" not in exc.figures
    n, exc = admitted([i * 10 * US for i in range(100)])
    assert (n, exc.reason) == (90, "utilisation_bound")
    n, exc = admitted([0] * 100)  # one phase for all: the critical instant again
    assert (n, exc.reason) == (15, "response_bound")
    assert exc.figures["phased_ahead_ns"] == 150 * US and exc.figures["phased_period_ns"] == MS
    assert "can find 150000 ns of other streams' device work in front of it" in str(exc)


def test_a_phase_must_be_a_realtime_stream_s_and_below_its_period():
    s = sim()
    with pytest.raises(ValueError, match="phase_ns 1000000 must be below its period 1000000 ns"):
        s.register_stream("x", "realtime", period_ns=MS, cost_ns=US, phase_ns=MS)
    with pytest.raises(ValueError, match="phase_ns applies to realtime streams only"):
        s.register_stream("y", "best_effort", phase_ns=0)


# ----------------------------------------------------------------------------- the device model


def modelled(**kwargs) -> Scheduler:
    """The dispatcher's lock held at most 85% of the time, and up to 0.8 ms at a time."""
    return sim(dispatcher_busy_cap=0.85, dispatcher_hold_ns=800 * US, **kwargs)


def test_a_stream_is_admitted_by_the_larger_of_its_device_time_and_its_dispatcher_work_as_counted():
    s = modelled()
    assert s.config["dispatcher_busy_cap"] == 0.85 and s.config["dispatcher_hold_ns"] == 800 * US
    # five 10-ms streams, 1.2 ms of device time and 1.6 ms of dispatcher work a block: 1.6 x 0.9 / 0.85
    ids = [s.register_stream(f"s{i}", "realtime", period_ns=10 * MS, cost_ns=1_200 * US, dispatch_ns=1_600 * US)
           for i in range(5)]
    assert [s.stream_stats(i)["declared_cost_ns"] for i in ids] == [1_694_118] * 5
    adm = s.stream_admission(ids[0])
    assert (adm["stream"], adm["cost_ns"], adm["device_cost_ns"]) == ("s0", 1_694_118, 1_200 * US)
    assert (adm["dispatch_ns"], adm["dispatch_counted_ns"], adm["dispatcher_share"]) == (1_600 * US, 1_694_118, 0.85)
    # a sixth passes U_max by its counted work: the utilisation bound refuses it, with the count
    with pytest.raises(AdmissionRefused) as ei:
        s.register_stream("s5", "realtime", period_ns=10 * MS, cost_ns=1_200 * US, dispatch_ns=1_600 * US)
    f = ei.value.figures
    assert ei.value.reason == "utilisation_bound" and f["stream_cost_ns"] == 1_694_118
    assert (f["dispatch_ns"], f["dispatch_counted_ns"], f["dispatcher_hold_ns"]) == (1_600 * US, 1_694_118, 800 * US)
    # a stream without measured dispatcher work is its device time alone
    plain = s.register_stream("plain", "realtime", period_ns=10 * MS, cost_ns=100 * US)
    assert s.stream_admission(plain)["dispatch_counted_ns"] is None
    assert s.stream_stats(plain)["declared_cost_ns"] == 100 * US


def test_the_dispatcher_share_follows_the_shortest_deadline():
    s = modelled()
    assert s.dispatcher_share() == 0.85  # no realtime stream: the cap
    assert s.dispatcher_share(2 * MS) == pytest.approx(0.6) and s.dispatcher_share(800 * US) == 0.0
    assert s.counted_dispatch_ns(10_000, 2 * MS) == 15_000 and s.counted_dispatch_ns(10_000) == 10_588
    with pytest.raises(ValueError, match="no longer than the dispatcher's lock may be held"):
        s.counted_dispatch_ns(10_000, 500 * US)
    s.register_stream("short", "realtime", period_ns=10 * MS, deadline_ns=2 * MS, cost_ns=100 * US)
    assert s.dispatcher_share() == pytest.approx(0.6)
    assert s.check_dispatcher_hold() == pytest.approx(0.6)
    # a deadline within the hold: the device-level check refuses the stream that sets it
    s.register_stream("tight", "realtime", period_ns=10 * MS, deadline_ns=700 * US, cost_ns=100 * US)
    with pytest.raises(AdmissionRefused) as ei:
        s.check_dispatcher_hold()
    assert (ei.value.stream, ei.value.reason, ei.value.shortest_deadline_ns) == ("tight", "dispatcher_hold", 700 * US)
    assert ei.value.figures["dispatcher_hold_ns"] == 800 * US and ei.value.figures["dispatcher_share"] == 0.0
    # ... and so does registering dispatcher work beside it
    with pytest.raises(AdmissionRefused, match="no longer than the 800000 ns a block may find the dispatcher"):
        s.register_stream("w", "realtime", period_ns=10 * MS, cost_ns=100 * US, dispatch_ns=10 * US)


def test_latency_tails_past_their_deadlines_refuse_the_last_stream_they_reach_past():
    s = modelled()
    for name, reach in (("a", 12 * MS), ("b", 3 * MS), ("c", 11 * MS), ("d", None)):
        s.register_stream(name, "realtime", period_ns=10 * MS, cost_ns=100 * US, tail_reach_ns=reach)
    with pytest.raises(AdmissionRefused) as ei:
        s.check_latency_tails()
    assert (ei.value.stream, ei.value.reason) == ("c", "latency_tail")
    assert (ei.value.figures["tail_reach_ns"], ei.value.shortest_deadline_ns) == (11 * MS, 10 * MS)
    assert s.stream_admission(s.stream_id("a"))["tail_reach_ns"] == 12 * MS
    fits = modelled()
    fits.register_stream("a", "realtime", period_ns=10 * MS, cost_ns=100 * US, tail_reach_ns=9 * MS)
    assert fits.check_latency_tails() is None
    with pytest.raises(ValueError, match="dispatch_ns applies to realtime streams only"):
        fits.register_stream("tp", "throughput", dispatch_ns=10)
