"""Admitting a session's streams before the first block: bounds, per-device schedulers, the measured
cost (pygpukit_dsp/admission/admitting.py)."""

import numpy as np
import pytest

from pygpukit_dsp import AdmissionError, Pipeline, Session, stages
from pygpukit_dsp.admission import DEFAULT_POLICY
from pygpukit_dsp.io import NullSink, NullSource

from .sessions import crowding, fake_runner, realtime_pipeline, reference_calibration, w1_realtime  # noqa: F401 (fixture)


def test_declared_cost_over_the_bound_is_refused_with_figures():
    with pytest.raises(AdmissionError) as ei:
        Session([realtime_pipeline("hog", cost_us=9500)]).run()  # 9.5 ms per 10 ms block > U_max 0.9
    e = ei.value
    assert e.stream == "hog"
    assert e.figures["bound"] == pytest.approx(0.9) and e.figures["stream_utilisation"] == pytest.approx(0.95)
    assert e.figures["cost_source"] == "declared (qos.cost_us)"
    assert "U_max" in str(e) and "stream_utilisation=0.95" in str(e)


def test_a_session_s_u_max_is_its_admission_bound():
    with pytest.raises(AdmissionError) as ei:
        Session([realtime_pipeline("a", cost_us=4000), realtime_pipeline("b", cost_us=2000)], u_max=0.5).run()  # 0.4 + 0.2 > 0.5
    assert ei.value.stream == "b" and ei.value.figures["bound"] == pytest.approx(0.5)
    assert [x.pipeline for x in Session([realtime_pipeline("a", cost_us=4000), realtime_pipeline("b", cost_us=2000)]).run()] == ["a", "b"]
    with pytest.raises(ValueError, match="u_max"):
        Session([realtime_pipeline("a")], u_max=1.5)


def test_second_stream_refused_when_the_sum_exceeds_the_bound():
    with pytest.raises(AdmissionError) as ei:
        Session([realtime_pipeline("a", cost_us=5000), realtime_pipeline("b", cost_us=5000)]).run()
    assert ei.value.stream == "b"
    assert ei.value.figures["current_total"] == pytest.approx(0.5)


def test_admitted_streams_run_and_measured_cost_is_used_when_none_is_declared():
    a, b = realtime_pipeline("a"), realtime_pipeline("b", cost_us=100)
    s = Session([a, b])
    summaries = s.run()
    assert [x.pipeline for x in summaries] == ["a", "b"] and all(x.blocks == 5 for x in summaries)
    # a finished CPU stream leaves the scheduler; the session keeps its final figures
    stats = {name: s.stream_stats(name) for name in ("a", "b")}
    assert stats["a"]["admitted"] and stats["a"]["declared_cost_ns"] > 0  # measured before the run
    assert stats["b"]["declared_cost_ns"] == 100_000
    # the run summary says what admission measured (the CPU's dispatcher: one block at a time)
    assert "admitted with a measured cost:" in summaries[0].format()
    # the scheduler's line sets the admitted device time beside what its dispatcher measured
    assert "device time per block admitted 100.0 us, measured" in summaries[1].format()
    assert "the host's dispatcher runs one block at a time" in summaries[0].admission
    assert summaries[1].admission is None  # declared


def test_best_effort_streams_need_no_cost():
    p = Pipeline([stages.Gain(db=0)], sample_rate=1000, channels=1, block_size=10, backend="cpu",
                 source=NullSource(duration_s=0.1), sink=NullSink())
    s = Session([p])
    s.run()
    assert s.stream_stats("pipeline")["qos"] == "best_effort"


def test_each_device_has_its_own_scheduler():
    from pygpukit_dsp.admission import admit

    # 0.5 + 0.5 of one device would break U_max 0.9; on two devices both fit
    cpu = fake_runner("cpu_rt", "cpu", {"class": "realtime", "cost_us": 5000})
    gpu = fake_runner("gpu_rt", "cuda", {"class": "realtime", "cost_us": 5000})
    scheds = admit([cpu, gpu])
    assert set(scheds) == {"cpu", "cuda"}
    assert [st["name"] for st in scheds["cpu"].stats()["streams"]] == ["cpu_rt"]
    assert [st["name"] for st in scheds["cuda"].stats()["streams"]] == ["gpu_rt"]
    with pytest.raises(AdmissionError) as ei:
        admit([cpu, gpu, fake_runner("gpu_2", "cuda", {"class": "realtime", "cost_us": 5000})])
    assert ei.value.stream == "gpu_2" and ei.value.figures["device"] == "cuda"


def test_units_per_block_chunked_only_for_cuda_throughput_and_best_effort():
    from pygpukit_dsp.admission import admit

    runners = [fake_runner("tp", "cuda", {"class": "throughput"}, units=4096),
               fake_runner("be", "cuda", {"class": "best_effort"}, units=16),
               fake_runner("rt", "cuda", {"class": "realtime", "cost_us": 100}, units=64),
               fake_runner("old", "cuda", {"class": "best_effort"}),          # engine without units
               fake_runner("cpu_tp", "cpu", {"class": "throughput"}, units=4096)]
    scheds = admit(runners)
    units = {st["name"]: st["units_per_block"] for s in scheds.values() for st in s.stats()["streams"]}
    assert units == {"tp": 4096, "be": 16, "rt": 1, "old": 1, "cpu_tp": 1}


def test_every_stream_gets_its_qos_deadline_for_the_miss_count():
    from pygpukit_dsp.admission import admit

    scheds = admit([fake_runner("be", "cpu", {"class": "best_effort"}),
                    fake_runner("tp", "cpu", {"class": "throughput", "deadline_ms": 2})])
    deadlines = {st["name"]: st["deadline_ns"] for st in scheds["cpu"].stats()["streams"]}
    assert deadlines == {"be": 10_000_000, "tp": 2_000_000}  # default: one block period (480 @ 48 kHz)


def test_two_pipelines_with_one_name_are_a_config_error():
    from pygpukit_dsp import ConfigError
    from pygpukit_dsp.admission import admit

    with pytest.raises(ConfigError, match="two pipelines of the session are named 'x'"):
        admit([fake_runner("x", "cpu", {}), fake_runner("x", "cpu", {})])


# ----------------------------------------------------------------------------- the measured cost


class _ScriptedEngine:
    """process() takes the next scripted time on a fake clock (ns); counts its calls."""

    def __init__(self, clock, times):
        self.clock, self.times, self.calls, self.resets = clock, list(times), 0, 0

    def process(self, x):
        self.calls += 1
        self.clock[0] += self.times.pop(0) if self.times else 1_000

    def reset(self):
        self.resets += 1


def _scripted(monkeypatch, times):
    from types import SimpleNamespace

    import pygpukit_dsp.admission.cost as adm

    clock = [0]
    monkeypatch.setattr(adm, "time", SimpleNamespace(perf_counter_ns=lambda: clock[0]))
    sleeps = []

    def sleep(seconds):
        sleeps.append(round(seconds * 1e9))
        clock[0] += round(seconds * 1e9)
    monkeypatch.setattr(adm, "_sleep_s", sleep)
    spins = []

    def spin_until(t_ns):
        spins.append(t_ns - clock[0])
        clock[0] = max(clock[0], t_ns)
    monkeypatch.setattr(adm, "_spin_until", spin_until)
    e = _ScriptedEngine(clock, times)
    e.spins = spins
    e.sleeps = sleeps
    return e


def _wall(e, spec):
    from pygpukit_dsp.admission import measure_engine_cost

    cost = measure_engine_cost(e, spec)
    # no GPU timing, back to back: the round's median wall clock is the device time, its slowest
    # block the latency
    assert cost.gpu_ns is None and cost.device_ns <= cost.latency_ns
    return cost.latency_ns


def test_a_round_that_met_a_host_hiccup_is_timed_again(monkeypatch):
    from pygpukit_dsp.signal import SignalSpec

    spec = SignalSpec(48000.0, 2, 64)
    # warm-up, then a round with one 50-us block among 10-us ones (5x its median): timed again
    e = _scripted(monkeypatch, [99_000] + [10_000] * 3 + [50_000] + [10_000] * 4 + [10_000] * 7 + [14_000])
    assert _wall(e, spec) == 14_000 and e.calls == 17 and e.resets == 1
    # a calm round is the answer at once: its slowest block, 2.5x its median
    e = _scripted(monkeypatch, [1] + [10_000] * 7 + [25_000])
    assert _wall(e, spec) == 25_000 and e.calls == 9
    # no round calm: the least slowest of the three
    e = _scripted(monkeypatch, [1] + ([10_000] * 7 + [90_000]) + ([10_000] * 7 + [60_000]) + ([10_000] * 7 + [80_000]))
    assert _wall(e, spec) == 60_000 and e.calls == 25


class _TimedEngine(_ScriptedEngine):
    """A scripted engine that also times its blocks "on the GPU" (as CudaEngine.set_gpu_timing)."""

    def __init__(self, clock, times, gpu, launch):
        super().__init__(clock, times)
        self.gpu, self.launch, self.timing = list(gpu), list(launch), []
        self.last_gpu_ns = self.last_launch_ns = 0

    def set_gpu_timing(self, on):
        self.timing.append(on)

    def process(self, x):
        super().process(x)
        self.last_gpu_ns = self.gpu.pop(0) if self.gpu else 0
        self.last_launch_ns = self.launch.pop(0) if self.launch else 0


def test_a_gpu_block_is_admitted_by_its_device_time_and_its_own_latency(monkeypatch):
    from pygpukit_dsp.admission import measure_engine_cost
    from pygpukit_dsp.signal import SignalSpec

    spec = SignalSpec(48000.0, 2, 64)
    base = _scripted(monkeypatch, [])
    # 30-us blocks alone (the slowest 36 us) that hold the GPU 12 us (median) and launch in 3 us
    e = _TimedEngine(base.clock, [30_000] * 8 + [36_000], [11_000] + [12_000] * 5 + [13_000, 20_000, 12_000],
                     [3_000] * 9)
    cost = measure_engine_cost(e, spec)
    assert (cost.device_ns, cost.latency_ns, cost.gpu_ns, cost.launch_ns) == (12_000, 36_000, 12_000, 3_000)
    assert cost.how == "GPU events" and e.timing == [True, False] and e.resets == 1
    assert "12.0 us of device time per block" in cost.describe() and "36.0 us alone, call to done" in cost.describe()
    # a launch slower than the GPU's work: the launching thread is what the blocks share
    e = _TimedEngine(base.clock, [30_000] * 9, [2_000] * 9, [5_000] * 9)
    cost = measure_engine_cost(e, spec)
    assert cost.device_ns == 5_000 and cost.how.startswith("the launch's host time")
    # a driver that gives no GPU time: the wall clock, and it says so
    e = _TimedEngine(base.clock, [30_000] * 9, [0] * 9, [1_000] * 9)
    cost = measure_engine_cost(e, spec)
    assert cost.device_ns == cost.latency_ns == 30_000 and "no GPU time" in cost.how


def test_registration_passes_the_device_time_as_cost_and_the_latency_beside_it(monkeypatch):
    from pygpukit_dsp.admission import admit

    base = _scripted(monkeypatch, [])
    r = fake_runner("rt", "cuda", {"class": "realtime"})
    # back to back: 12 us on the GPU; at its period: 30 us alone
    e = _TimedEngine(base.clock, [20_000] * 9 + [30_000] * 8, [12_000] * 17, [3_000] * 17)
    e.choice, e.units_per_block = r.engine.choice, 1
    r.engine = e
    adm = admit([r])
    st = adm["cuda"].stats()["streams"][0]
    assert (st["declared_cost_ns"], st["declared_latency_ns"]) == (12_000, 30_000)
    assert adm.results["rt"].cost_ns == 12_000 and adm.results["rt"].measured.latency_ns == 30_000
    # a realtime stream's calibration blocks start one period apart (480 samples at 48 kHz: 10 ms),
    # each timed from its call: the 30-us block leaves 9.97 ms, slept but for the stream's spin
    # window (qos.spin_us, 200 us by default for realtime), which is spun as its runner will
    assert base.sleeps == [10_000_000 - 200_000] + [10_000_000 - 30_000 - 200_000] * 7
    assert base.spins == [200_000] * 8


def test_calibration_paces_realtime_blocks_at_their_period_capped_and_others_back_to_back(monkeypatch):
    from pygpukit_dsp.admission import calibration_pace
    from pygpukit_dsp.qos import QoS
    from pygpukit_dsp.signal import SignalSpec

    def calibration_gap_s(r):
        return calibration_pace(r.pipeline.qos, r.chain.input)["gap_s"]

    assert calibration_gap_s(fake_runner("a", "cuda", {"class": "realtime"}, block=256)) == pytest.approx(256 / 48e3)
    gap_max_s = DEFAULT_POLICY.cost_gap_max_s
    assert calibration_gap_s(fake_runner("b", "cuda", {"class": "realtime"}, block=4800)) == gap_max_s
    assert calibration_gap_s(fake_runner("c", "cuda", {"class": "throughput", "min_rate": 48000})) is None
    # a realtime stream spins its qos.spin_us before each block; the others do not wait at all
    assert calibration_pace(QoS(**{"class": "realtime", "spin_us": 300}), SignalSpec(48000.0, 1, 256))["spin_s"] == 3e-4
    assert calibration_pace(QoS(**{"class": "throughput"}), SignalSpec(48000.0, 1, 256))["spin_s"] == 0.0


def test_streams_of_one_kind_share_one_measured_cost(monkeypatch):
    from types import SimpleNamespace

    from pygpukit_dsp.admission import admit

    e1 = _scripted(monkeypatch, [])
    clock = e1.clock
    engines = [e1, _ScriptedEngine(clock, []), _ScriptedEngine(clock, [])]
    runners = []
    for i, (e, block) in enumerate(zip(engines, (480, 480, 960))):
        r = fake_runner(f"s{i}", "cpu", {"class": "realtime"}, block=block)
        e.choice, e.units_per_block = r.engine.choice, 1
        r.engine = e
        r.pipeline.stages = [SimpleNamespace(to_config=lambda: {"type": "gain", "db": -3})]
        runners.append(r)
    adm = admit(runners)
    sched = adm["cpu"]
    # a warm-up, 8 back to back, 8 at the period; the second is the first's kind; the third's block differs
    assert [e.calls for e in engines] == [17, 0, 17]
    costs = {st["name"]: st["declared_cost_ns"] for st in sched.stats()["streams"]}
    assert costs == {"s0": 1_000, "s1": 1_000, "s2": 1_000}
    assert [adm.results[r.pipeline.name].measured_on for r in runners] == [None, "s0", None]


def test_a_refused_stream_says_whose_measurement_it_shares(monkeypatch):
    from pygpukit_dsp.admission import admit

    e = _scripted(monkeypatch, [6_000_000] * 17)  # 6 ms per 10-ms block: two of them exceed U_max
    runners = []
    for name in ("first", "second"):
        r = fake_runner(name, "cpu", {"class": "realtime"})
        if not runners:
            e.choice, e.units_per_block = r.engine.choice, 1
        r.engine = e
        runners.append(r)
    with pytest.raises(AdmissionError) as ei:
        admit(runners)
    assert ei.value.stream == "second" and e.calls == 17  # timed once
    assert ei.value.figures["cost_source"] == "measured on 'first' (the same kind of stream)"


# ----------------------------------------------------------------------------- on the GPU


@pytest.mark.gpu
def test_gpu_calibration_times_each_block_on_the_gpu_and_leaves_the_engine_as_it_was():

    from pygpukit_dsp.admission import measure_engine_cost
    from pygpukit_dsp.backends import open_backend

    p = w1_realtime("w1")
    chain = p.propagate(p.input_spec())
    e, ref = open_backend(p, chain, "cuda"), open_backend(p, chain, "cuda")
    try:
        cost = measure_engine_cost(e, chain.input)
        assert cost.how == "GPU events" and cost.device_ns == cost.gpu_ns
        # the block's GPU time is part of its latency alone, and holds at least its kernels
        resident_ns = min(e.instrument().time_resident(50)) * 1e9
        assert 0.5 * resident_ns < cost.gpu_ns < cost.latency_ns, (cost, resident_ns)
        assert 0 < cost.launch_ns < cost.latency_ns
        assert e.last_gpu_ns == 0  # timing off again
        x = np.random.default_rng(5).standard_normal((64, 256)).astype(np.float32)
        np.testing.assert_array_equal(e.process(x), ref.process(x))  # state reset after calibration
        e.set_gpu_timing(True)  # a timed block computes the same (filled before its launch)
        y = e.process(x)
        assert e.last_gpu_ns > 0
        np.testing.assert_array_equal(y, ref.process(x))
    finally:
        e.close()
        ref.close()


@pytest.mark.gpu
def test_gpu_session_admits_realtime_streams_by_device_time_with_their_latency_beside_it():
    s = Session([w1_realtime("a"), w1_realtime("b")])
    summaries = s.run()
    for x in summaries:
        assert x.blocks > 0 and "of device time per block (GPU events" in x.admission
        assert "device time per block admitted" in x.format()  # beside what the dispatcher measured
    st = s.stream_stats("a")
    assert 0 < st["declared_cost_ns"] < st["declared_latency_ns"]  # the device time, the latency beside it
    assert "measured on 'a'" in summaries[1].admission  # one measurement per kind of stream
