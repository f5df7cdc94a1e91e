"""Several GPUs of one host, without a GPU: the ``device`` key (YAML and Python), placement of
``device: auto`` streams by admission headroom (admission/placement.py), one scheduler and one dispatcher
per GPU (dispatch.py). The same on the fake driver with 2 and 4 GPUs: tests/backends/
test_cuda_multi_gpu.py; on real GPUs: the ``multi_gpu`` tests there."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
from pygpukit_dsp_core import Scheduler

from pygpukit_dsp import AdmissionError, ConfigError, Pipeline, Session, stages
from pygpukit_dsp.admission import REFERENCE_CALIBRATION, Placement, headroom
from pygpukit_dsp.admission import admit as _admit
from pygpukit_dsp.backends import BackendChoice, requested_gpu
from pygpukit_dsp.devices import device_key, gpu_of
from pygpukit_dsp.dispatch import start_dispatch
from pygpukit_dsp.io import NullSink, NullSource
from pygpukit_dsp.spec import load_text



def admit(runners, **kw):
    """admit() on the fake runners, each keeping its result as a Session's runner does (its
    ``admission``); fake GPUs read the reference calibration."""
    adm = _admit(runners, calibration=lambda gpu: REFERENCE_CALIBRATION, **kw)
    for r in runners:
        r.admission = adm.results[r.pipeline.name]
    return adm


# ----------------------------------------------------------------------------- the device key

ONE = """\
version: 1
name: w
sample_rate: 48000
channels: 2
block_size: 256
device: {device}
source: {{type: synth}}
stages: [{{type: gain, db: -3}}]
sink: {{type: "null"}}
"""


@pytest.mark.parametrize("text,value", [("0", 0), ("1", 1), ("7", 7), ("auto", "auto")])
def test_yaml_device_key(text, value):
    (cfg,) = load_text(ONE.format(device=text), "w.yaml")
    assert cfg.device == value
    p = Pipeline.from_config(cfg)
    assert p.device == value
    assert p.to_config()["device"] == value
    # written back and read again: the same
    (again,) = load_text(p.to_yaml(), "again.yaml")
    assert again.device == value


def test_no_device_key_is_gpu_0_and_is_not_written():
    text = ONE.format(device="X").replace("device: X\n", "")
    (cfg,) = load_text(text, "w.yaml")
    p = Pipeline.from_config(cfg)
    assert cfg.device is None and p.device is None
    assert "device" not in p.to_config() and "device" not in p.to_yaml()
    assert requested_gpu(p) == 0


@pytest.mark.parametrize("text,hint", [
    ("-1", "a GPU index"), ("1.5", "a GPU index"), ("true", "a GPU index"), ("gpu1", "a GPU index"),
    ("'cuda:1'", "write the index alone: 'device: 1'"), ("null", "remove the key for GPU 0"),
    ("[0, 1]", "a GPU index"),
])
def test_bad_device_is_a_config_error_at_its_value(text, hint):
    with pytest.raises(ConfigError) as ei:
        load_text(ONE.format(device=text), "w.yaml")
    e = ei.value
    assert e.where == "w.yaml:6:9", e.where  # line 6, the value after 'device: '
    assert "device must be a GPU index >= 0 or 'auto'" in e.message
    assert hint in (e.hint or "")


def test_multi_form_device_is_a_default_each_pipeline_may_override():
    text = """\
version: 1
sample_rate: 48000
channels: 1
block_size: 64
device: auto
pipelines:
  - name: a
    source: {type: synth}
    sink: {type: "null"}
  - name: b
    device: 1
    source: {type: synth}
    sink: {type: "null"}
"""
    a, b = load_text(text, "m.yaml")
    assert (a.device, b.device) == ("auto", 1)


def test_python_device_is_checked():
    assert Pipeline([], sample_rate=1000, channels=1, device=3).device == 3
    with pytest.raises(ConfigError, match="device must be a GPU index"):
        Pipeline([], sample_rate=1000, channels=1, device=-2)
    with pytest.raises(ConfigError, match="device must be a GPU index"):
        Session([Pipeline([], sample_rate=1000, channels=1)], device="cuda1")


def test_requested_gpu_override_and_auto_outside_a_session():
    p = Pipeline([], sample_rate=1000, channels=1, device=2)
    assert requested_gpu(p) == 2 and requested_gpu(p, 1) == 1 and requested_gpu(p, "auto") == 0


def test_cpu_backend_ignores_the_device():
    p = Pipeline([stages.Gain(db=0)], name="c", sample_rate=1000, channels=1, block_size=10, backend="cpu",
                 device=5, source=NullSource(duration_s=0.05), sink=NullSink())
    s = p.run()
    assert s.backend == "cpu" and s.gpu is None and s.placement is None
    assert "device GPU" not in s.format()


def test_device_keys():
    assert [device_key(g) for g in (None, 0, 1, 3)] == ["cuda", "cuda", "cuda:1", "cuda:3"]
    assert [gpu_of(k) for k in ("cpu", "cuda", "cuda:1", "cuda:12")] == [None, 0, 1, 12]


# ----------------------------------------------------------------------------- placement (admission)


class _Engine:
    def __init__(self, gpu: int | None, device_name: str = "cuda", units: int = 1):
        self.choice = BackendChoice(device_name, "test", gpu if device_name == "cuda" else None)
        self.units_per_block = units
        self.closed = False

    def close(self):
        self.closed = True


class _Runner:
    """What admit() needs of a StreamRunner: pipeline, chain, engine, device_request, move_to_gpu."""

    def __init__(self, name, qos, *, device="auto", gpu=0, block=480, backend="cuda", units=1):
        from pygpukit_dsp.qos import QoS
        from pygpukit_dsp.signal import SignalSpec

        self.pipeline = SimpleNamespace(name=name, qos=QoS(**qos), where=None, device=device)
        self.chain = SimpleNamespace(input=SignalSpec(48000.0, 1, block))
        self.device_request = device
        self.engine = _Engine(gpu, backend, units)
        self.moves: list[int] = []
        self.admission = None

    def move_to_gpu(self, gpu):
        self.moves.append(gpu)
        self.engine.close()
        self.engine = _Engine(gpu)


def _rt(name, cost_us, *, block=480, deadline_ms=None, **kw):
    qos = {"class": "realtime", "cost_us": cost_us}
    if deadline_ms is not None:
        qos["deadline_ms"] = deadline_ms
    return _Runner(name, qos, block=block, **kw)


def _names(sched):
    return [st["name"] for st in sched.stats()["streams"]]


@pytest.mark.parametrize("n_gpus", [2, 4])
def test_auto_streams_spread_over_the_gpus_by_headroom(n_gpus):
    gpus = list(range(n_gpus))
    # costs descending, 10 ms period: each next stream goes where the most is left
    runners = [_rt(f"s{i}", 2000 - 100 * i) for i in range(2 * n_gpus)]
    scheds = admit(runners, gpus=gpus)
    assert set(scheds) == {device_key(g) for g in gpus}
    # round 1: one per GPU in index order (all empty: ties broken by index); round 2: the GPU
    # with the most headroom (the one holding the cheapest first-round stream) first
    first = [r.admission.placement.gpu for r in runners[:n_gpus]]
    assert first == gpus
    second = [r.admission.placement.gpu for r in runners[n_gpus:]]
    assert second == list(reversed(gpus))
    for g in gpus:
        assert len(_names(scheds[device_key(g)])) == 2
    for r in runners:
        assert isinstance(r.admission.placement, Placement) and r.admission.placement.requested == "auto"
        assert r.admission.placement.device == device_key(r.admission.placement.gpu)
        assert r.engine.choice.device == r.admission.placement.gpu  # moved where it was admitted
        assert r.admission.placement.reason.startswith(f"GPU {r.admission.placement.gpu}: auto: ")
    assert "the lower index" in runners[0].admission.placement.reason
    assert "the most admission headroom" in runners[-1].admission.placement.reason


def test_identical_auto_streams_measured_once_spread_evenly(monkeypatch):
    import pygpukit_dsp.admission.cost as adm

    clock = [0]
    monkeypatch.setattr(adm, "time", SimpleNamespace(perf_counter_ns=lambda: clock[0]))
    monkeypatch.setattr(adm, "_sleep_s", lambda s: clock.__setitem__(0, clock[0] + round(s * 1e9)))
    monkeypatch.setattr(adm, "_spin_until", lambda t: clock.__setitem__(0, max(clock[0], t)))

    class Timed(_Engine):  # each block takes `ns` on the fake clock
        def __init__(self, ns, gpu, model="GPU model A"):
            super().__init__(gpu)
            self.ns, self.calls, self.device = ns, 0, SimpleNamespace(name=model)

        def process(self, x):
            self.calls += 1
            clock[0] += self.ns

        def reset(self):
            pass

    # no cost declared: measured. Timed one by one, a stream that met a host hiccup looks 10x
    # costlier and auto crowds the others onto the other GPU; one measurement per kind of stream
    # (the engines opened on GPUs 0 and 1 in turn, as a Session opens them: one model, one kind)
    runners = [_Runner(f"s{i}", {"class": "realtime"}, gpu=i % 2) for i in range(8)]
    for i, r in enumerate(runners):
        r.engine = Timed(100_000 if i == 0 else 1_000_000, i % 2)
    engines = [r.engine for r in runners]
    scheds = admit(runners, gpus=[0, 1])
    assert [len(_names(scheds[device_key(g)])) for g in (0, 1)] == [4, 4]
    assert [e.calls > 0 for e in engines] == [True] + [False] * 7  # only s0 was timed
    assert {st["declared_cost_ns"] for g in (0, 1) for st in scheds[device_key(g)].stats()["streams"]} == {100_000}
    # another model is another kind: timed for itself
    other = [_Runner("a", {"class": "realtime"}), _Runner("b", {"class": "realtime"}, gpu=1)]
    other[0].engine, other[1].engine = Timed(100_000, 0), Timed(200_000, 1, model="GPU model B")
    admit(other, gpus=[0, 1])
    costs = sorted(r.admission.cost_ns for r in other)
    assert costs == [100_000, 200_000]


def test_headroom_is_what_admission_can_still_take():
    s = Scheduler(u_max=0.9)
    assert headroom(None, "realtime", 0.9) == pytest.approx(0.9)
    assert headroom(None, "throughput", 0.9) == pytest.approx(1.0)
    s.register_stream("rt", "realtime", period_ns=10_000_000, cost_ns=3_000_000)          # 0.3
    s.register_stream("tp", "throughput", min_rate_hz=100, cost_ns=5_000_000)              # 0.5 reserved
    assert headroom(s, "realtime", 0.9) == pytest.approx(0.2)   # min(0.9 - 0.3, 1 - 0.8)
    assert headroom(s, "throughput", 0.9) == pytest.approx(0.2)
    assert headroom(s, "best_effort", 0.9) == pytest.approx(0.2)


def test_streams_that_reserve_nothing_spread_by_count():
    runners = [_Runner(f"w2_{i}", {"class": "throughput"}, units=64) for i in range(4)]
    scheds = admit(runners, gpus=[0, 1])
    assert [r.admission.placement.gpu for r in runners] == [0, 1, 0, 1]
    assert "fewer streams here (1 vs 0)" not in runners[1].admission.placement.reason
    assert "fewer streams here (0 vs 1)" in runners[1].admission.placement.reason
    assert all(len(_names(s)) == 2 for s in scheds.values())


def test_a_stream_refused_on_a_full_gpu_is_placed_on_another():
    # GPU 0 holds a stream with a 2 ms deadline (response bound): C (2 ms per 100 ms block) does
    # not fit before it, although GPU 0 has the most utilisation headroom; GPU 1 takes it.
    a = _rt("a", 1000, block=4800, deadline_ms=2, device=0, gpu=0)
    b = _rt("b", 5000, device=1, gpu=1)
    c = _rt("c", 2000, block=4800, gpu=0)  # opened on GPU 0 first
    scheds = admit([a, b, c], gpus=[0, 1])
    assert c.admission.placement.gpu == 1 and c.moves == [1] and c.engine.choice.device == 1
    assert _names(scheds["cuda"]) == ["a"] and _names(scheds["cuda:1"]) == ["b", "c"]
    refused = c.admission.placement.refused
    assert set(refused) == {0} and "shortest realtime deadline" in refused[0]
    assert "GPU 0 refused it" in c.admission.placement.reason and "GPU 1 admitted it" in c.admission.placement.reason
    assert a.admission.placement.reason == "GPU 0: requested (device: 0)"
    assert c.admission.placement.headroom[0] > c.admission.placement.headroom[1]


def test_four_gpus_three_full_the_fourth_takes_it():
    runners = [_rt(f"hog{g}", 8000, device=g, gpu=g) for g in range(3)]  # 0.8 of GPUs 0-2
    late = _rt("late", 3000, gpu=0)                                        # 0.3: fits only on GPU 3
    scheds = admit(runners + [late], gpus=[0, 1, 2, 3])
    assert late.admission.placement.gpu == 3 and late.moves == [3]
    assert "the most admission headroom" in late.admission.placement.reason and not late.admission.placement.refused
    assert _names(scheds["cuda:3"]) == ["late"]


def test_refused_by_every_gpu_is_an_admission_error_naming_each():
    runners = [_rt(f"hog{g}", 8000, device=g, gpu=g) for g in range(2)]
    with pytest.raises(AdmissionError) as ei:
        admit(runners + [_rt("late", 3000, gpu=0)], gpus=[0, 1])
    e = ei.value
    assert e.stream == "late" and "no GPU admits it (device: auto over 2 GPU(s))" in str(e)
    assert "GPU 0: " in str(e) and "GPU 1: " in str(e)
    assert e.figures["device"] == "auto" and e.figures["gpus_tried"] == "GPU 0, GPU 1"


def test_admission_is_per_gpu_for_explicit_devices():
    # 0.6 + 0.6 breaks U_max on one GPU; on two it fits; a third on GPU 0 is refused there
    a, b = _rt("a", 6000, device=0, gpu=0), _rt("b", 6000, device=1, gpu=1)
    scheds = admit([a, b], gpus=[0, 1])
    assert _names(scheds["cuda"]) == ["a"] and _names(scheds["cuda:1"]) == ["b"]
    with pytest.raises(AdmissionError) as ei:
        admit([a, b, _rt("c", 6000, device=0, gpu=0)], gpus=[0, 1])
    assert ei.value.stream == "c" and ei.value.figures["device"] == "cuda"
    with pytest.raises(AdmissionError) as ei:
        admit([a, b, _rt("d", 6000, device=1, gpu=1)], gpus=[0, 1])
    assert ei.value.figures["device"] == "cuda:1"


def test_cpu_streams_keep_their_scheduler_and_auto_ignores_them():
    cpu = _Runner("host", {"class": "realtime", "cost_us": 8000}, backend="cpu")
    gpu = _rt("g", 8000)
    scheds = admit([cpu, gpu], gpus=[0, 1])
    assert set(scheds) == {"cpu", "cuda"}
    assert cpu.admission.placement.device == "cpu" and cpu.admission.placement.gpu is None
    assert gpu.admission.placement.gpu == 0


# ----------------------------------------------------------------------------- dispatch per GPU


@pytest.fixture
def recorded_cuda_dispatch(monkeypatch):
    made: list = []

    class CudaDispatch:
        def __init__(self, scheduler, device_index=0):
            self.scheduler, self.device_index = scheduler, device_index
            self.attached: list = []
            self.closed = 0
            made.append(self)

        def attach(self, engine, stream):
            assert engine.choice.device == self.device_index  # an engine goes to its own GPU's dispatcher
            self.attached.append((engine, stream))

        def stats(self):
            return {"device_index": self.device_index}

        def stream_stats(self, stream):
            return dict(self.scheduler.stream_stats(stream))

        def close(self):
            self.closed += 1

    mod = types.ModuleType("pygpukit_dsp.backends.cuda_dispatch")
    mod.CudaDispatch = CudaDispatch
    monkeypatch.setitem(sys.modules, "pygpukit_dsp.backends.cuda_dispatch", mod)
    return made


@pytest.mark.parametrize("n_gpus", [2, 4])
def test_one_dispatcher_and_one_scheduler_per_gpu(recorded_cuda_dispatch, n_gpus):
    runners = [_rt(f"s{i}", 500) for i in range(3 * n_gpus)]
    scheds = admit(runners, gpus=list(range(n_gpus)))
    d = start_dispatch(runners, scheds)
    made = recorded_cuda_dispatch
    assert sorted(x.device_index for x in made) == list(range(n_gpus))
    assert sorted(d.gpus) == list(range(n_gpus)) and d.cuda is d.gpus[0]
    for x in made:
        assert x.scheduler is scheds[device_key(x.device_index)]
        assert len(x.attached) == 3
    assert set(d.stats()) == {device_key(g) for g in range(n_gpus)}
    for r in runners:
        assert d.device_of(r.pipeline.name) == r.admission.placement.device
        assert d.dispatcher(r.admission.placement.device).device_index == r.admission.placement.gpu
        assert d.stream_stats(r.pipeline.name)["name"] == r.pipeline.name
    d.close()
    assert all(x.closed == 1 for x in made)


def test_two_gpus_sharing_one_scheduler_is_refused(recorded_cuda_dispatch):
    s = Scheduler()
    a, b = _rt("a", 100, device=0, gpu=0), _rt("b", 100, device=1, gpu=1)
    s.register_stream("a", "best_effort")
    s.register_stream("b", "best_effort")
    with pytest.raises(ValueError, match="several devices"):
        start_dispatch([a, b], s)
    with pytest.raises(ValueError, match="share one scheduler"):
        start_dispatch([a, b], {"cuda": s, "cuda:1": s})
    assert recorded_cuda_dispatch == []
