"""The capacity sweep's logic (benchmarks/studies/capacity) without a GPU: admission's
prediction, the ladder (coarse runs, when to stop, the confirmations and their step down, the time
budget) and the report. The sweep itself runs on the fake driver in
tests/benchmarks/test_cadence_script.py."""
from __future__ import annotations

import json

import pytest

from studies.capacity import PREDICT_REGISTER_MAX, CapacityPoint, CapacityReport, predict, session_prediction
from studies.capacity.sweep import held_at, ladder_runs

P = 5_333_333
D = (P / 1e6, 2.0)


@pytest.mark.parametrize("cost_ns", [25_000, 40_000, 60_000])
def test_prediction_is_the_scheduler_s_own_answer(cost_ns):
    pytest.importorskip("pygpukit_dsp_core")
    pred = predict(cost_ns, P, D, "session")
    rule = {f"{d:.2f}": min(int(0.9 * P // cost_ns), int((d * 1e6 - 50_000) // cost_ns)) for d in D}
    assert pred.streams == rule  # the scheduler refused exactly where the documented rule says
    assert set(pred.reason.values()) <= {"utilisation_bound", "response_bound"}


def test_a_prediction_with_a_latency_beyond_the_cost_charges_the_excess_once():
    pytest.importorskip("pygpukit_dsp_core")
    # 12 us of device time, 35 us alone: the utilisation bound counts 12 us a stream; the response
    # bound waits behind 12 us a stream plus the block's own 23 us beyond it, once
    pred = predict(12_000, P, D, "session", latency_ns=35_000)
    assert pred.streams == {"5.33": int(0.9 * P // 12_000), "2.00": int((2_000_000 - 50_000 - 23_000) // 12_000)}
    assert pred.latency_us == 35.0 and pred.reason == {"5.33": "utilisation_bound", "2.00": "response_bound"}
    assert predict(12_000, P, D, "gpu", latency_ns=5_000).latency_us is None  # no excess: the cost alone


def test_the_session_s_prediction_rehearses_past_half_a_bound_and_finds_the_largest_n_it_admits():
    pytest.importorskip("pygpukit_dsp_core")
    from pygpukit_dsp.admission import BlockCost, crowded

    calls = []

    def loaded(n, deadline_ns):  # the block cost among n streams grows with n (the same at every deadline)
        calls.append((n, deadline_ns))
        return 11_500 + 10 * n

    pred = session_prediction(BlockCost(11_500, 11_500, "scripted"), P, D, loaded, n_max=512)

    def admitted(n, d):
        c = max(11_500, loaded(n, int(d * 1e6))) if crowded([11_500] * n, [P] * n, [int(d * 1e6)] * n, 0.9) else 11_500
        return predict(c, P, [d], "x").streams[f"{d:.2f}"] >= n

    rehearsed = sorted({n for n, _ in calls})
    assert {d for _, d in calls} == {int(d * 1e6) for d in D}  # each deadline's cost asked for at its deadline
    calls.clear()
    want = {f"{d:.2f}": next(n for n in range(400, 0, -1) if admitted(n, d)) for d in D}  # none past 400
    assert pred.streams == want and want["5.33"] == 325  # n (11.5 + 0.01 n) us <= 0.9 x 5333 us
    # nothing rehearsed below half of every bound: 189 streams at 5.33 ms (the lock at 12 us a block),
    # 87 at 2 ms (the deadline)
    assert min(rehearsed) >= 87 and len(rehearsed) <= 2 * 10
    assert set(pred.rehearsed_us["5.33"]) | set(pred.rehearsed_us["2.00"]) == {str(n) for n in rehearsed}
    assert pred.reason["5.33"].endswith("(rehearsed)")
    # what the report shows beside the N admitted: the rehearsals at that N and the least N refused above it
    assert pred.deciding("5.33") == [325, 326] and pred.cost_us == 11.5
    assert pred.rehearsed_us["5.33"]["325"] == pytest.approx(14.75) and pred.rehearsed_us["5.33"]["326"] == \
        pytest.approx(14.76)
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0}, predictions=[pred])
    assert rep.to_dict()["predictions"][0]["streams"] == {"5.33": 325, "2.00": want["2.00"]}
    assert "| deadline | pygpukit-dsp |" in rep.markdown()  # the report renders


def test_the_session_s_prediction_refuses_n_whose_rehearsed_latency_tail_passes_the_deadline():
    pytest.importorskip("pygpukit_dsp_core")
    import numpy as np

    from pygpukit_dsp.admission import DEFAULT_POLICY, BlockCost, LatencyTail, horizon_blocks

    # 12 us a block among any N (the utilisation bound: 399 at 5.33 and 2 ms), but the queue's
    # exponential tail deepens with N: 40 us more on average beyond its p90 per 100 streams
    tails = {}

    def tail(n):
        if n not in tails:
            rng = np.random.default_rng(n)
            tails[n] = LatencyTail.of(rng.exponential(n * 400, 20_000).astype(np.int64) + 200_000)
        return tails[n]

    pred = session_prediction(BlockCost(11_500, 11_500, "scripted"), P, D, lambda n, d: 12_000, n_max=512, tail=tail,
                               phased=True)
    assert pred.streams["5.33"] == int(0.9 * P // 12_000) and pred.reason["5.33"] == "utilisation_bound (rehearsed)"
    n = pred.streams["2.00"]
    assert pred.reason["2.00"] == "latency_tail (rehearsed)" and 100 < n < int(0.9 * P // 12_000)

    def reach(m):
        return tail(m).reach_ns(horizon_blocks([P] * m, DEFAULT_POLICY.tail_horizon_s))

    assert reach(n) <= 2_000_000 < reach(n + 1)  # where the tail crosses the deadline
    assert pred.reach_us[str(n)] == reach(n) / 1e3
    # the refused N beside it, and how far its tail reached: the report's cell
    assert pred.deciding("2.00") == [n, n + 1] and pred.reach_us[str(n + 1)] == reach(n + 1) / 1e3


def test_admission_verdict_places_the_prediction_between_what_held_and_what_missed():
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    for n, phase, m5 in [(320, "coarse", 0), (384, "coarse", 0), (512, "coarse", 40), (384, "confirm", 0)]:
        pt = CapacityPoint("pygpukit-dsp", n, 2.0, phase, blocks=1000)
        pt.misses = {"5.33": m5, "2.00": m5}
        rep.points.append(pt)
    for cost, verdict in [(12_400, "where misses begin"), (35_000, "earlier"), (9_000, "later"),
                          (13_500, "a little earlier")]:
        rep.predictions = [predict(cost, P, D, "session")]
        v = rep.admission_verdict(D[0])
        assert (v["held"], v["missed"], v["verdict"]) == (384, 512, verdict), cost
    rep.predictions = [predict(13_500, P, D, "session")]
    v = rep.admission_verdict(D[0])
    assert 0.9 * 384 <= v["predicted"] < 384 and v["fraction"] == v["predicted"] / 384 >= 0.9
    rep.predictions = [predict(9_000, P, D, "session")]
    assert rep.admission_verdict(D[0])["predicted"] == 533
    rep.predictions = [predict(35_000, P, D, "session")]
    v = rep.to_dict()["admission"]["5.33"]
    assert (v["predicted"], v["held"], v["missed"], v["verdict"]) == (137, 384, 512, "earlier")
    assert v["fraction"] == pytest.approx(137 / 384)


def test_admission_verdict_beside_it_counts_only_the_misses_the_process_is_blamed_for():
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    # 256 held over 30 s; 320 missed there, every episode a host slowdown; 384 missed by the process
    for n, phase, m5, causes in [(256, "confirm", 0, {}), (320, "confirm", 184, {"host_slow": 184, "process": 0}),
                                 (384, "coarse", 900, {"host_slow": 0, "process": 900})]:
        pt = CapacityPoint("pygpukit-dsp", n, 30.0, phase, blocks=1000)
        pt.misses = {"5.33": m5, "2.00": m5}
        pt.extra["misses_when"] = {"by_cause": {"host_stall": 0, **causes}} if causes else \
            {"by_cause": {"host_slow": 0, "host_stall": 0, "process": 0}}
        rep.points.append(pt)
    rep.predictions = [predict(14_800, P, D, "session")]  # 324 streams
    v = rep.admission_verdict(D[0])
    assert (v["held"], v["missed"], v["verdict"]) == (256, 320, "later")
    assert v["process"] == {"held": 320, "missed": 384, "verdict": "where misses begin",
                            "fraction": 324 / 320}
    assert rep.to_dict()["admission"]["5.33"]["process"] == v["process"]


def test_admission_at_the_shortest_deadline_is_also_judged_against_the_aligned_streams():
    from studies.capacity import ALIGNED

    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    for impl, n, phase, m2 in [("pygpukit-dsp", 320, "confirm", 0), (ALIGNED, 128, "confirm", 0),
                               (ALIGNED, 160, "coarse", 12)]:
        pt = CapacityPoint(impl, n, 30.0, phase, blocks=1000)
        pt.misses = {"5.33": 0, "2.00": m2}
        rep.points.append(pt)
    rep.predictions = [predict(12_400, P, D, "session")]  # 157 at 2 ms (the response bound)
    assert rep.admission_verdict(2.0)["verdict"] == "earlier"  # staggered phases held 320
    va = rep.admission_verdict(2.0, impl=ALIGNED)
    assert (va["predicted"], va["held"], va["missed"], va["verdict"]) == (157, 128, 160, "where misses begin")
    # the report's verdict on the aligned runs: against the session's prediction (no aligned one here)
    av = rep.aligned_verdict()
    assert (av["how"], av["deadline_ms"], av["predicted"], av["held"], av["missed"], av["verdict"]) == \
        ("session", 2.0, 157, 128, 160, "where misses begin")
    # no aligned N held over its confirmation: the least N that missed says it
    rep.points = [p for p in rep.points if not (p.impl == ALIGNED and p.n == 128)]
    pt = CapacityPoint(ALIGNED, 64, 30.0, "confirm", blocks=1000)
    pt.misses = {"5.33": 0, "2.00": 108}
    rep.points.append(pt)
    av = rep.aligned_verdict()
    assert (av["predicted"], av["held"], av["missed"], av["verdict"]) == (157, None, 64, "later")
    assert rep.aligned_blamed() == []  # no aligned run's misses sorted into episodes yet
    # episodes sorted at 2 ms: those misses were a host slowdown's, none the process's
    pt.extra["misses_when_at"] = {"2.00": {"by_cause": {"host_slow": 108, "host_stall": 0, "process": 0}}}
    assert rep.aligned_blamed() == [{"n": 64, "phase": "confirm", "process": 0},
                                    {"n": 160, "phase": "coarse", "process": None}]
    assert rep.capacity_not_blamed(ALIGNED, 2.0) == 64
    av = rep.to_dict()["aligned_verdict"]
    assert (av["held"], av["missed"], av["process"]["held"]) == (None, 64, 64)


def test_a_tiny_cost_is_predicted_by_the_rule_without_registering_every_stream():
    pytest.importorskip("pygpukit_dsp_core")
    pred = predict(100, P, D, "gpu")
    assert pred.streams["5.33"] == int(0.9 * P // 100) > PREDICT_REGISTER_MAX
    assert "documented rule" in pred.reason["5.33"]


def _fake(misses_from: dict[str, int], fail: set[tuple[int, str]] = frozenset()):
    """run_one for N: misses at a deadline once N reaches misses_from[deadline]; `fail`: (N, phase)
    runs that miss anyway (a confirmation that fails)."""
    calls: list[tuple[int, float, str]] = []

    def run_one(n: int, seconds: float, phase: str) -> CapacityPoint:
        calls.append((n, seconds, phase))
        pt = CapacityPoint("x", n, seconds, phase, blocks=100)
        pt.misses = {k: (1 if n >= v or (n, phase) in fail else 0) for k, v in misses_from.items()}
        return pt
    return run_one, calls


def test_the_ladder_stops_after_two_missing_n_and_confirms_each_deadline_s_knee():
    run_one, calls = _fake({"5.33": 64, "2.00": 32})
    points: list[CapacityPoint] = []
    ladder_runs(run_one, [8, 16, 32, 64, 96, 128, 256], 2.0, 30.0, D, points, lambda s: None, "x")
    assert [c[0] for c in calls if c[2] == "coarse"] == [8, 16, 32, 64, 96]  # 64 and 96 miss: stop
    assert [(c[0], c[1]) for c in calls if c[2] == "confirm"] == [(32, 30.0), (16, 30.0)]


def test_a_confirmation_that_misses_steps_down_the_ladder():
    run_one, calls = _fake({"5.33": 64, "2.00": 64}, fail={(32, "confirm")})
    ladder_runs(run_one, [8, 16, 32, 64, 96], 2.0, 30.0, D, [], lambda s: None, "x")
    assert [c[0] for c in calls if c[2] == "confirm"] == [32, 16]  # shared by both deadlines
    # two that miss: a third try, no more (CONFIRM_TRIES)
    run_one, calls = _fake({"5.33": 128, "2.00": 128}, fail={(96, "confirm"), (64, "confirm"), (32, "confirm")})
    ladder_runs(run_one, [16, 32, 64, 96, 128, 160], 2.0, 30.0, D, [], lambda s: None, "x")
    assert [c[0] for c in calls if c[2] == "confirm"] == [96, 64, 32]


def test_a_shorter_deadline_s_confirmation_holds_when_the_host_made_all_its_misses():
    """At 2 ms a host stall of a few ms misses at any N: a confirmation whose misses there all came
    in the host's episodes ends the step down (the period's still counts every miss)."""
    def run_one(n: int, seconds: float, phase: str) -> CapacityPoint:
        calls.append((n, phase))
        pt = CapacityPoint("x", n, seconds, phase, blocks=100)
        host = 3 if phase == "confirm" else 0          # every confirmation: a host stall at 2 ms
        # the process's own: from 96 up in every run, from 64 up over a confirmation
        own = (1 if n >= 96 else 0) + (2 if n >= 64 and phase == "confirm" else 0)
        pt.misses = {"5.33": 1 if n >= 96 else 0, "2.00": host + own}
        pt.extra["misses_when_at"] = {"2.00": {"episodes": 2, "list": [],
                                               "by_cause": {"host_slow": 0, "host_stall": host, "process": own}}}
        return pt

    calls: list[tuple[int, str]] = []
    ladder_runs(run_one, [16, 32, 64, 96, 128], 2.0, 30.0, D, [], lambda s: None, "x")
    # 5.33: 64 held (every miss counted); 2 ms: 64 (confirmed already) has the process's misses,
    # 32's are all the host's: there it stops
    assert [c[0] for c in calls if c[1] == "confirm"] == [64, 32]
    # without episodes to blame, a miss is a miss: the step down goes on
    bare = CapacityPoint("x", 32, 30.0, "confirm", blocks=100)
    bare.misses = {"5.33": 0, "2.00": 3}
    assert not held_at(bare, 2.0, False) and held_at(bare, D[0], True)
    # the aligned sweep (2 ms only, the period named): its coarse runs go on past the host's misses
    # and stop at the first N where the process is blamed for some
    calls.clear()
    ladder_runs(run_one, [16, 32, 64, 96, 128], 2.0, 30.0, [2.0], [], lambda s: None, "x", stop_after=1,
                 confirm_tries=1, period_ms=D[0])
    assert [c for c in calls if c[1] == "coarse"] == [(16, "coarse"), (32, "coarse"), (64, "coarse"), (96, "coarse")]
    assert [c[0] for c in calls if c[1] == "confirm"] == [64]


class _FrozenClock:
    """The sweep's clock in the budget test (sweep.time): the fake runs take no time on it."""

    @staticmethod
    def perf_counter():
        return 1000.0


def test_runs_past_the_budget_are_left_out(monkeypatch):
    from studies.capacity import sweep

    monkeypatch.setattr(sweep, "time", _FrozenClock)
    now = _FrozenClock.perf_counter()
    run_one, calls = _fake({"5.33": 10_000, "2.00": 10_000})
    points: list[CapacityPoint] = []
    # 2 s coarse runs fit (the fake ones take no time), a 30 s confirmation does not
    ladder_runs(run_one, [8, 16, 32], 2.0, 30.0, D, points, lambda s: None, "x", until=now + 5.5, overhead_s=0.5)
    assert [c[0] for c in calls] == [8, 16, 32]
    assert [(p.n, p.phase, p.status) for p in points if p.status == "skipped"] == [(32, "confirm", "skipped")]
    run_one, calls = _fake({"5.33": 10_000, "2.00": 10_000})
    points = []
    ladder_runs(run_one, [8, 16], 2.0, 30.0, D, points, lambda s: None, "x", until=now - 1)
    assert calls == [] and [(p.n, p.reason) for p in points] == [(8, "time budget")]


def test_report_headline_targets_and_markdown():
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0, "coarse_s": 2.0})
    for impl, n, phase, m5, m2 in [("pygpukit-dsp", 128, "coarse", 0, 0), ("pygpukit-dsp", 256, "coarse", 0, 3),
                                   ("pygpukit-dsp", 256, "confirm", 0, 5), ("pygpukit-dsp", 128, "confirm", 0, 0),
                                   ("torch-graph", 32, "confirm", 0, 0), ("torch-graph", 48, "coarse", 2, 9)]:
        pt = CapacityPoint(impl, n, 30.0 if phase == "confirm" else 2.0, phase, blocks=1000, p99_us=100.0)
        pt.misses = {"5.33": m5, "2.00": m2}
        rep.points.append(pt)
    rep.predictions.append(predict(25_000, P, D, "session"))
    h = rep.headline()
    assert h["5.33"]["pygpukit-dsp"] == 256 and h["5.33"]["torch-graph"] == 32 and h["5.33"]["ratio"] == 8.0
    assert h["2.00"]["pygpukit-dsp"] == 128 and h["2.00"]["pygpukit-dsp_coarse"] == 128
    (n100, ok100, _), (n3, ok3, _) = rep.targets()
    assert ok100 and ok3
    d = json.loads(json.dumps(rep.to_dict()))
    assert [(t["key"], t["met"], t["value"], t["limit"]) for t in d["targets"]] == [("streams", True, 256, 100),
                                                                                   ("torch_ratio", True, 8.0, 3)]
    assert d["targets"][0]["floor"] is None and d["targets"][1]["torch_bound"] is None
    assert d["headline"]["5.33"]["torch-graph_coarse"] is None
    assert (rep.predictions[0].streams["5.33"], rep.predictions[0].reason["5.33"]) == (191, "utilisation_bound")
    assert "| implementation | N |" in rep.markdown()  # the report renders


def test_miss_episodes_group_misses_by_release_time_and_name_the_stalls_inside():
    import numpy as np

    from studies.capacity.episodes import miss_episodes

    P, n, start, timed_from = 1_000_000, 2, 0, 10_000_000  # stream 1's phase is P/2
    lat = [np.full(100, 100_000), np.full(100, 100_000)]
    lat[0][[5, 6]] = 3_000_000      # stream 0, blocks released at 15 and 16 ms
    lat[1][6] = 3_000_000           # stream 1, released at 16.5 ms: the same episode
    lat[1][80] = 3_000_000          # released at 90.5 ms: a second episode, alone
    fill = [np.full(100, 5_000), np.full(100, 5_000)]
    fill[0][6] = 40_000             # one of the first episode's copies ran 8x slower than usual
    submit = [np.full(100, 2_000), np.full(100, 2_000)]
    submit[1][80] = 60_000          # the lone miss's hand-over took 30x its median
    res = {"latency_ns": lat, "fill_ns": fill, "submit_ns": submit, "start_ns": start, "timed_from_ns": timed_from}
    stalls = (np.array([14_000_000, 50_000_000]), np.array([2_500_000, 100_000]))
    w = miss_episodes(res, P, n, 2.0, stalls, threads=2)
    assert w["episodes"] == 2
    big, alone = w["list"]
    assert (big["misses"], big["streams"], big["driver_threads"], big["at_s"]) == (3, 2, 2, 0.005)
    assert (big["fill_x_median"], alone["fill_x_median"]) == (8.0, 1.0)
    assert (big["submit_x_median"], alone["submit_x_median"]) == (1.0, 30.0)
    assert big["longest_stall_us"] == 2500.0
    assert (alone["misses"], alone["streams"], alone["at_s"], alone["longest_stall_us"]) == (1, 1, 0.0805, 0.0)
    # whose: the first had an 8x fill inside it (a host slowdown), the second nothing (the process's)
    assert (big["cause"], alone["cause"]) == ("host_slow", "process")
    assert w["by_cause"] == {"host_slow": 3, "host_stall": 0, "process": 1}
    assert miss_episodes({"latency_ns": [np.zeros(3)], "start_ns": 0, "timed_from_ns": 0}, P, 1, 2.0, None) == \
        {"episodes": 0, "list": [], "by_cause": {"host_slow": 0, "host_stall": 0, "process": 0}}
    from studies.capacity.episodes import host_steps_us

    steps = host_steps_us(res)
    assert steps["fill"]["p50"] == 5.0 and steps["fill"]["max"] == 40.0 and steps["submit"]["max"] == 60.0
    assert host_steps_us({"latency_ns": []}) == {}


def test_an_episode_gets_the_watched_threads_gaps_and_the_slow_steps_around_it():
    import numpy as np

    from studies.capacity.episodes import episode_cause, miss_episodes

    P, timed_from = 1_000_000, 10_000_000
    lat = [np.full(100, 100_000)]
    lat[0][[5, 6]] = 3_000_000           # released at 15 and 16 ms: one episode
    lat[0][80] = 3_000_000               # released at 90 ms: another
    res = {"latency_ns": lat, "start_ns": 0, "timed_from_ns": timed_from}
    ms = 1_000_000
    gaps = [("driver thread 0", np.array([[14 * ms, 2 * ms, 2.1 * ms, 0.1 * ms, 0, 0]], dtype=np.int64)),
            ("dispatcher's worker", np.array([[89 * ms, ms // 2, ms // 2, ms // 2, 0, 0]], dtype=np.int64))]
    slow_log = [(15 * ms, 300_000, "launch"), (40 * ms, 250_000, "poll")]
    w = miss_episodes(res, P, 1, 2.0, None, gaps=gaps, slow_log=slow_log)
    first, second = sorted(w["list"], key=lambda e: e["at_s"])
    # the first: a driver thread whose vCPU stopped beneath the guest for 2 ms: the host's
    assert first["off_cpu"]["stolen_us"] == 2000.0 and first["cause"] == "host_stall"
    assert first["slow_steps"] == {"steps": 1, "longest_us": 300.0, "kinds": ["launch"]}
    # the second: the worker ran 0.5 ms without progress: the process's
    assert second["off_cpu"]["ran_us"] == 500.0 and second["off_cpu"]["stolen_us"] == 0.0
    assert second["cause"] == "process" and second["slow_steps"]["steps"] == 0
    assert w["by_cause"] == {"host_slow": 0, "host_stall": 2, "process": 1}
    # below the probe's threshold a stolen gap does not make the episode the host's
    assert episode_cause({"off_cpu": {"stolen_us": 50.0}}) == "process"
    assert episode_cause({"off_cpu": None}) == "process"
    # the report lists the episodes at every deadline, with the watched threads' longest gap
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0, "coarse_s": 2.0})
    pt = CapacityPoint("pygpukit-dsp", 8, 30.0, "confirm", blocks=1000, p99_us=100.0)
    pt.misses = {"5.33": 0, "2.00": 3}
    pt.extra["misses_when_at"] = {"5.33": {"episodes": 0, "list": [], "by_cause": {}}, "2.00": w}
    pt.extra["off_cpu"] = {"gap_us": 200.0, "by_kind": {"stolen": 1, "queued": 0, "asleep": 0, "ran": 1},
                           "longest_us": {"stolen": 2000.0, "queued": 0.0, "asleep": 0.0, "ran": 500.0},
                           "per_thread": {"driver thread 0": 1, "dispatcher's worker": 1}}
    rep.points.append(pt)
    assert list(rep.episode_runs()) == ["2.00"] and rep.episode_runs()["2.00"] == [pt]  # no episode at 5.33
    assert "| implementation | N |" in rep.markdown()  # the episodes and the watched threads' gaps render


def test_episode_causes_and_the_capacity_no_miss_of_the_process_marks():
    from studies.capacity.episodes import episode_cause

    assert episode_cause({"fill_x_median": 3.0, "longest_stall_us": 0.0}) == "host_slow"
    assert episode_cause({"fill_x_median": 1.2, "longest_stall_us": 150.0}) == "host_stall"
    assert episode_cause({"fill_x_median": 1.2, "longest_stall_us": 10.0, "steal_ms": 10.0}) == "host_stall"
    assert episode_cause({"fill_x_median": 1.2, "longest_stall_us": 10.0, "steal_ms": 0.0}) == "process"
    # a run whose GPU was full missed under its own load, whatever its fills did
    from studies.capacity.episodes import own_load

    when = {"episodes": 14, "list": [{"misses": 7, "cause": "host_slow"}],  # the list keeps the largest only
            "by_cause": {"host_slow": 9, "host_stall": 1, "process": 2}}
    own_load(when, 0.5)
    assert when["by_cause"]["host_slow"] == 9
    own_load(when, 0.97)
    assert when["by_cause"] == {"host_slow": 0, "host_stall": 0, "process": 12}
    assert when["list"][0]["cause"] == "process" and when["list"][0]["own_load"] == {"by": "gpu_busy", "value": 0.97}
    # ... and so was a run whose process kept 90% of its CPUs or more busy (its spinning included)
    busy = {"episodes": 1, "list": [{"misses": 5, "cause": "host_slow"}],
            "by_cause": {"host_slow": 5, "host_stall": 0, "process": 0}}
    own_load(busy, 0.2, 3.0, 16)
    assert busy["by_cause"]["host_slow"] == 5
    own_load(busy, 0.2, 14.5, 16)
    assert busy["by_cause"] == {"host_slow": 0, "host_stall": 0, "process": 5}
    assert busy["list"][0]["own_load"] == {"by": "cpu_cores", "value": 14.5, "of": 16}
    # ... and so was a run whose dispatcher's lock was held 85% of the time or more, the bound
    # admission keeps it to (every block passes through it: at 384 W1 streams it was held 111% with
    # the GPU 87% busy)
    locked = {"episodes": 1, "list": [{"misses": 144000, "cause": "host_slow"}],
              "by_cause": {"host_slow": 144000, "host_stall": 0, "process": 0}}
    own_load(locked, 0.87, 5.3, 16, 0.5)
    own_load(locked, 0.87, 5.3, 16, 0.84)
    assert locked["by_cause"]["host_slow"] == 144000
    own_load(locked, 0.87, 5.3, 16, 0.85)
    assert locked["by_cause"] == {"host_slow": 0, "host_stall": 0, "process": 144000}
    locked = {"episodes": 1, "list": [{"misses": 144000, "cause": "host_slow"}],
              "by_cause": {"host_slow": 144000, "host_stall": 0, "process": 0}}
    own_load(locked, 0.87, 5.3, 16, 1.11)
    assert locked["by_cause"] == {"host_slow": 0, "host_stall": 0, "process": 144000}
    assert locked["list"][0]["own_load"] == {"by": "dispatcher_busy", "value": 1.11}
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0, "coarse_s": 2.0})
    for n, process, host in [(32, 0, 0), (64, 0, 12), (96, 3, 40)]:
        pt = CapacityPoint("pygpukit-dsp", n, 30.0, "confirm", blocks=1000, p99_us=100.0)
        pt.misses = {"5.33": process + host, "2.00": process + host}
        pt.extra["misses_when"] = {"episodes": 1, "list": [], "by_cause": {"host_slow": host, "host_stall": 0,
                                                                           "process": process}}
        rep.points.append(pt)
    assert rep.capacity("pygpukit-dsp", D[0]) == 32 and rep.capacity_not_blamed() == 64
    assert rep.to_dict()["capacity_not_blamed"] == 64


def _report(points, **settings):
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine",
                         {"confirm_s": 30.0, "coarse_s": 2.0, "torch_ladder": [4, 8], **settings})
    for impl, n, phase, m5 in points:
        pt = CapacityPoint(impl, n, 30.0 if phase == "confirm" else 2.0, phase, blocks=1000, p99_us=100.0)
        pt.misses = {"5.33": m5, "2.00": m5}
        rep.points.append(pt)
    return rep


def test_the_floor_runs_where_the_misses_began_and_at_the_target_when_it_was_not_confirmed():
    from studies.capacity import TARGET_STREAMS
    from studies.capacity.streams import floor_plan

    rep = _report([("pygpukit-dsp", 32, "coarse", 0), ("pygpukit-dsp", 64, "coarse", 0),
                   ("pygpukit-dsp", 96, "coarse", 5), ("pygpukit-dsp", 128, "coarse", 9),
                   ("pygpukit-dsp", 64, "confirm", 3), ("pygpukit-dsp", 32, "confirm", 0)])
    assert floor_plan(rep.points, D[0]) == [(96, "coarse"), (128, "coarse"), (TARGET_STREAMS, "confirm")]
    held = _report([("pygpukit-dsp", 128, "coarse", 0), ("pygpukit-dsp", 160, "coarse", 1),
                    ("pygpukit-dsp", 128, "confirm", 0)])
    assert floor_plan(held.points, D[0]) == [(160, "coarse")]  # the target confirmed: no floor confirmation


def test_the_capacity_target_s_verdict_comes_from_the_floor_at_the_target():
    base = [("pygpukit-dsp", 32, "confirm", 0), ("pygpukit-dsp", 64, "confirm", 4)]
    rep = _report(base + [("floor", 100, "confirm", 7)])
    streams, _ = rep.target_records()
    # the floor missed at the target: the target was below what this machine allowed in this run
    assert streams["met"] is False and streams["value"] == 32
    assert streams["floor"] == {"n": 100, "seconds": 30.0, "misses": 7, "reading": "below_machine"}
    assert rep.floor_verdict()["below_machine"] and rep.to_dict()["floor_verdict"]["misses"] == 7
    assert rep.to_dict()["targets"][0]["floor"]["reading"] == "below_machine"
    # the floor held it: the miss is the project's
    held = _report(base + [("floor", 100, "confirm", 0)])
    streams, _ = held.target_records()
    assert streams["met"] is False and streams["floor"]["reading"] == "project_missed"
    assert _report(base).floor_verdict() is None and _report(base).target_records()[0]["floor"] is None
    # the project never missed (its ladder ended first): the floor says nothing of the project
    short = _report([("pygpukit-dsp", 4, "coarse", 0), ("pygpukit-dsp", 4, "confirm", 0), ("floor", 100, "confirm", 0)])
    streams, _ = short.target_records()
    assert streams["met"] is False and (streams["floor"]["reading"], streams["floor"]["top"]) == ("sweep_stopped", 4)


def test_pytorch_holding_none_of_its_ladder_bounds_the_ratio_from_below():
    rep = _report([("pygpukit-dsp", 32, "confirm", 0), ("torch-graph", 4, "coarse", 0),
                   ("torch-graph", 8, "coarse", 3), ("torch-graph", 4, "confirm", 2)])
    _, ratio = rep.target_records()
    assert ratio["met"] is True and ratio["value"] is None
    assert ratio["torch_bound"] == {"n": 4, "where": "smallest_of_ladder", "bound": 8.0, "project": 32}
    small = _report([("pygpukit-dsp", 8, "confirm", 0), ("torch-graph", 4, "coarse", 1)])
    assert small.targets()[1][1] is None  # more than 2x says nothing about 3x
    assert small.target_records()[1]["torch_bound"]["bound"] == 2.0
    # every confirmation PyTorch ran missed (24, 16, 8 over 30 s; 4 held in the coarse sweep, never
    # confirmed): it holds fewer than 8
    stepped = _report([("pygpukit-dsp", 224, "confirm", 0)] + [("torch-graph", n, "coarse", 0) for n in (4, 8, 16, 24)]
                      + [("torch-graph", 32, "coarse", 900)] + [("torch-graph", n, "confirm", 1) for n in (24, 16, 8)])
    _, ratio = stepped.target_records()
    assert ratio["met"] is True and ratio["torch_bound"] == {"n": 8, "where": "confirm", "bound": 28.0, "project": 224}
    untried = _report([("pygpukit-dsp", 32, "confirm", 0)])
    _, ratio = untried.target_records()
    assert (ratio["met"], ratio["value"], ratio["torch_bound"]) == (None, None, None)


@pytest.mark.gpu
def test_a_short_sweep_on_the_gpu_runs_the_project_the_floor_and_pytorch():
    """The whole sweep on the GPU, tiny: the project's streams through one dispatcher, the floor's
    bare round trips at the target's N (nothing was confirmed there) and PyTorch + graph."""
    from pathlib import Path

    from pygpukit_dsp import Pipeline
    from studies.capacity import TARGET_STREAMS, run_capacity

    w1 = Pipeline.from_yaml(Path(__file__).resolve().parents[2] / "benchmarks" / "w1.yaml")
    rep = run_capacity(w1, ladder=(2, 4), torch_ladder=(2,), coarse_s=0.3, confirm_s=0.4, warmup_s=0.1)
    by = {(p.impl, p.n, p.phase): p for p in rep.points}
    for key in [("pygpukit-dsp", 2, "coarse"), ("pygpukit-dsp", 4, "coarse"), ("floor", TARGET_STREAMS, "confirm"),
                ("torch-graph", 2, "coarse")]:
        p = by[key]
        # every stream's blocks over the run: never more than its clock released
        expect = p.n * p.seconds / (256 / 48000)
        assert p.status == "ok" and 0 < p.blocks <= expect + p.n + 1, key
        assert 0 < p.p50_us <= p.p99_us <= p.max_us and "5.33" in p.misses, key
    assert by[("pygpukit-dsp", 4, "coarse")].extra["dispatch"]["posted"] >= by[("pygpukit-dsp", 4, "coarse")].blocks
    assert by[("pygpukit-dsp", 4, "coarse")].gpu_busy > 0
    assert rep.floor_verdict()["n"] == TARGET_STREAMS
    d = json.loads(json.dumps(rep.to_dict()))
    assert [t["key"] for t in d["targets"]] == ["streams", "torch_ratio"] and set(d["admission"]) == {"5.33", "2.00"}


def test_with_the_phases_declared_a_short_deadline_admits_what_the_utilisation_bound_allows():
    pytest.importorskip("pygpukit_dsp_core")
    from studies.capacity import admits_all, staggered_phases

    assert staggered_phases(4, 1000) == [0, 250, 500, 750]
    # 13 us a block, 105 us alone: released at once 2 ms holds 142; staggered the utilisation bound binds
    at_once = predict(13_000, P, D, "gpu", latency_ns=105_000)
    staggered = predict(13_000, P, D, "gpu", latency_ns=105_000, phased=True)
    assert at_once.streams == {"5.33": 369, "2.00": 142}
    assert staggered.streams == {"5.33": 369, "2.00": 369} and staggered.reason["2.00"] == "utilisation_bound"
    assert admits_all(369, 13_000, P, 2_000_000, latency_ns=105_000, phased=True) == (True, "")
    assert admits_all(143, 13_000, P, 2_000_000, latency_ns=105_000) == (False, "response_bound")


def test_the_session_s_prediction_rehearses_at_the_phases_the_streams_will_have():
    pytest.importorskip("pygpukit_dsp_core")
    from pygpukit_dsp.admission import BlockCost
    from studies.capacity import SESSION_ALIGNED

    def loaded(n, _deadline_ns):
        return 11_500 + 10 * n

    phased = session_prediction(BlockCost(11_500, 11_500, "scripted"), P, D, loaded, n_max=512, phased=True)
    at_once = session_prediction(BlockCost(11_500, 11_500, "scripted"), P, D, loaded, n_max=512,
                                 how=SESSION_ALIGNED)
    assert phased.streams == {"5.33": 325, "2.00": 325}  # n (11.5 + 0.01 n) us <= 0.9 x 5333 us at both
    assert at_once.how == SESSION_ALIGNED and at_once.streams["2.00"] < 160
    assert at_once.reason["2.00"] == "response_bound (rehearsed)"


def test_the_aligned_runs_are_judged_against_the_prediction_with_no_phase():
    from studies.capacity import ALIGNED, SESSION_ALIGNED

    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    rep.predictions = [predict(13_000, P, D, "session", phased=True), predict(20_000, P, D, SESSION_ALIGNED)]
    for n, phase, m2 in [(64, "coarse", 0), (96, "coarse", 5), (64, "confirm", 0)]:
        pt = CapacityPoint(ALIGNED, n, 2.0, phase, blocks=1000)
        pt.misses = {"5.33": 0, "2.00": m2}
        rep.points.append(pt)
    v = rep.admission_verdict(2.0, how=SESSION_ALIGNED, impl=ALIGNED)
    assert (v["predicted"], v["held"], v["missed"], v["verdict"]) == (97, 64, 96, "later")
    # the report judges the aligned runs against the prediction for streams that declare no phase
    av = rep.aligned_verdict()
    assert (av["how"], av["predicted"], av["held"], av["missed"], av["verdict"]) == (SESSION_ALIGNED, 97, 64, 96, "later")


def test_a_deadline_where_every_confirmation_missed_is_judged_on_the_process_s_misses():
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    rep.predictions = [predict(13_000, P, D, "session", phased=True)]  # 369 at both deadlines
    for n, phase, m2, own in [(256, "confirm", 6, 0), (320, "confirm", 1679, 28), (384, "coarse", 31, 31)]:
        pt = CapacityPoint("pygpukit-dsp", n, 30.0, phase, blocks=1000)
        pt.misses = {"5.33": 0, "2.00": m2}
        pt.extra["misses_when_at"] = {"2.00": {"by_cause": {"host_slow": m2 - own, "host_stall": 0, "process": own}}}
        rep.points.append(pt)
    v = rep.admission_verdict(2.0)
    assert (v["predicted"], v["held"], v["verdict"]) == (369, None, None)  # every confirmation run missed
    assert v["process"] == {"held": 256, "missed": 320, "verdict": "later", "fraction": 369 / 256}
    assert rep.to_dict()["admission"]["2.00"] == v and "2.00" not in rep.to_dict()["no_verdict"]


def test_the_aligned_runs_are_set_beside_the_floor_released_at_once():
    from studies.capacity import ALIGNED, FLOOR_ALIGNED

    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    for impl, p50, p999, m2 in [(ALIGNED, 984.4, 1721.9, 0), (FLOOR_ALIGNED, 491.0, 1653.5, 0)]:
        pt = CapacityPoint(impl, 64, 2.0, "coarse", blocks=24000, p50_us=p50, p999_us=p999)
        pt.misses = {"5.33": 0, "2.00": m2}
        rep.points.append(pt)
    assert rep.aligned_beside_floor() == [{"n": 64, "project": {"p50_us": 984.4, "p999_us": 1721.9, "misses": 0},
                                           "floor": {"p50_us": 491.0, "p999_us": 1653.5, "misses": 0}}]


def test_a_deadline_where_no_confirmation_held_lists_each_run_s_misses():
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    rep.predictions = [predict(13_000, P, D, "session", phased=True)]
    for n, m2, own, eps in [(224, 44, 44, 1), (320, 24, 8, 3)]:
        pt = CapacityPoint("pygpukit-dsp", n, 30.0, "confirm", blocks=1000)
        pt.misses = {"5.33": 0, "2.00": m2}
        pt.extra["misses_when_at"] = {"2.00": {"episodes": eps, "by_cause": {"host_slow": m2 - own, "host_stall": 0,
                                                                             "process": own}}}
        rep.points.append(pt)
    assert rep.admission_verdict(2.0) is None
    nv = rep.no_verdict(2.0)
    assert nv == {"predicted": 369, "runs": [{"n": 224, "misses": 44, "episodes": 1, "process": 44},
                                             {"n": 320, "misses": 24, "episodes": 3, "process": 8}]}
    assert rep.to_dict()["no_verdict"]["2.00"] == nv


def test_the_dispatcher_s_slow_steps_are_reported_by_run_and_kind():
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    quiet = CapacityPoint("pygpukit-dsp", 32, 2.0, "coarse", blocks=100)
    quiet.extra["dispatch"] = {"slow_steps": {"take_posts": 0, "poll": 0, "decide": 0, "launch": 0},
                               "longest_step_ns": {"take_posts": 1, "poll": 1, "decide": 1, "launch": 1}}
    slow = CapacityPoint("pygpukit-dsp, aligned", 64, 30.0, "confirm", blocks=100)
    slow.extra["dispatch"] = {"slow_steps": {"take_posts": 0, "poll": 2, "decide": 0, "launch": 1},
                              "longest_step_ns": {"take_posts": 1, "poll": 2_400_000, "decide": 1, "launch": 310_000}}
    rep.points += [quiet, slow]
    # the quiet run had none: only the slow one is reported
    assert rep.dispatcher_slow_steps() == [{"impl": "pygpukit-dsp, aligned", "n": 64, "phase": "confirm",
                                            "steps": {"poll": {"count": 2, "longest_us": 2400.0},
                                                      "launch": {"count": 1, "longest_us": 310.0}}}]


def test_the_dispatcher_s_time_per_block_is_reported_by_step():
    rep = CapacityReport("w1", "spec", P / 1e3, list(D), "machine", {"confirm_s": 30.0})
    pt = CapacityPoint("pygpukit-dsp, aligned", 64, 2.0, "coarse", blocks=100)
    pt.extra["dispatch"] = {"launches": 1000, "step_ns": {"take_posts": 1_500_000, "poll": 4_200_000,
                                                          "decide": 1_000_000, "launch": 8_000_000}}
    rep.points.append(pt)
    (t,) = rep.dispatcher_per_block()
    assert (t["impl"], t["n"], t["phase"]) == ("pygpukit-dsp, aligned", 64, "coarse") and t["us"] == pytest.approx(14.7)
    assert t["steps_us"] == pytest.approx({"take_posts": 1.5, "poll": 4.2, "decide": 1.0, "launch": 8.0})


# ----------------------------------------------------------------------------- steal on the episodes


def _stat(path, steals: list[int]) -> None:
    """A /proc/stat of our own making (as tests/bench/test_steal.py writes it)."""
    lines = [f"cpu  10 0 10 1000 0 0 0 {sum(steals)} 0 0"]
    lines += [f"cpu{i} 5 0 5 500 0 0 0 {s} 0 0" for i, s in enumerate(steals)]
    tmp = path.with_suffix(".new")
    tmp.write_text("\n".join(lines + ["intr 1 2 3", "ctxt 99"]) + "\n")
    tmp.replace(path)  # whole, as the kernel serves it: the sampler never reads half a file


def test_a_miss_episode_carries_the_steal_inside_it(tmp_path):
    import numpy as np

    from pygpukit_dsp.bench import steal
    from studies.capacity.episodes import miss_episodes

    f = tmp_path / "stat"
    _stat(f, [0, 0])
    P, n, start = 1_000_000, 1, 1_000_000_000
    s = steal.StealSampler(path=str(f))  # samples as the thread records them, every 10 ms
    s.times = [start + k * 10_000_000 for k in range(7)]
    s.rows = [np.array([0, 0])] * 3 + [np.array([2, 0])] * 4   # CPU 0 lost 2 ticks between 20 and 30 ms
    lat = np.full(60, 100_000)
    lat[[25, 55]] = 3_000_000  # released 25 ms and 55 ms after the start
    res = {"latency_ns": [lat], "start_ns": start, "timed_from_ns": start}
    eps = sorted(miss_episodes(res, P, n, 2.0, None, steal=s)["list"], key=lambda e: e["at_s"])
    assert eps[0]["steal_ms"] == pytest.approx(2 * steal.TICK_MS) and eps[0]["steal_max_cpu_ms"] == eps[0]["steal_ms"]
    assert eps[1]["steal_ms"] == 0.0
