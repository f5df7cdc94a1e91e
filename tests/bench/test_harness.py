"""The bench harness: report contents, interleaving, first-block timing on the GPU."""

import itertools
import json

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.bench import run_bench


def _small():
    return Pipeline([stages.Fir(taps=np.hanning(32)), stages.Mix(matrix=np.ones((2, 4)) / 4)],
                    sample_rate=1000, channels=4, block_size=64, backend="cpu")


def test_latency_report_has_percentiles_ratios_and_a_checked_baseline():
    rep = run_bench(_small(), backend="cpu", blocks=300, warmup=10, compare=["numpy"])
    proj, base = rep.results
    assert proj.kind == "project" and base.status == "ok" and base.max_rel_err < 1e-4
    for r in rep.results:
        lat = r.latency_us
        assert 0 < lat["p50"] <= lat["p99"] <= lat["p999"] <= lat["max"]
        assert len(r.raw_us) == 300
    assert set(rep.ratios()["numpy"]) == {"p50", "p99"}
    assert "| implementation | p50 us |" in rep.markdown()  # the table renders
    d = rep.to_dict()
    assert [r["name"] for r in d["results"]] == ["pygpukit-dsp (cpu)", "numpy"]
    assert d["results"][1]["status"] == "ok" and "raw_us" not in d["results"][0]
    assert set(d["ratios"]["numpy"]) == {"p50", "p99"} and d["results"][1]["max_rel_err"] < 1e-4


class _Clock:
    """The harness's clock in these tests: it moves only when a fake implementation runs a block
    (STEP_S each, a power of two: exact sums), so that the schedule's arithmetic is tested, not
    this host's speed."""

    STEP_S = 1 / 1024

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        return self.now

    def perf_counter_ns(self):
        return int(self.now * 1e9)


@pytest.fixture
def clock(monkeypatch):
    from pygpukit_dsp.bench import harness

    c = _Clock()
    monkeypatch.setattr(harness, "time", c)
    return c


class _Recorder:
    """A fake implementation: records on the clock when each block ran and whether it was traced."""

    def __init__(self, log, name, clock, traceable=False):
        self.log, self.name, self.clock, self.tracing = log, name, clock, 0
        if traceable:
            self.set_trace = self._set_trace
            self.block_trace = self._block_trace
        self.traced = []

    def process(self, x):
        self.log.append((self.name, self.clock.perf_counter(), id(x)))
        self.clock.now += _Clock.STEP_S
        if self.tracing:
            self.traced.append(len(self.log) - 1)

    def _set_trace(self, n):
        self.tracing = n
        self.traced = []

    def _block_trace(self):
        return {"n": np.asarray(self.traced)}


def test_each_round_starts_after_untimed_blocks_that_run_for_the_warm_time(clock):
    from pygpukit_dsp.bench.harness import _timed_rounds
    from pygpukit_dsp.bench.report import ROUND_BLOCKS

    log = []
    a, b = _Recorder(log, "a", clock, traceable=True), _Recorder(log, "b", clock)
    samples = {"a": [], "b": []}
    calls, traces = [], []
    blocks = ROUND_BLOCKS + 10
    _timed_rounds([("a", a), ("b", b)], [np.zeros(4)], blocks, samples, traced=a, calls=calls,
                  traces=traces, warm_s=0.02)
    assert len(samples["a"]) == len(samples["b"]) == blocks
    # a's calls, split into runs by b's: each run = untimed blocks for >= 0.02 s, then a round
    runs, cur = [], []
    for name, t, _ in log:
        if name == "a":
            cur.append(t)
        elif cur:
            runs.append(cur)
            cur = []
    assert not cur and len(runs) == 2  # b ran last
    for run, n in zip(runs, (ROUND_BLOCKS, 10)):
        untimed = run[:-n]
        # untimed blocks until the warm time had passed on the harness's clock, then the round:
        # 0.02 s is 20.5 blocks of the fake clock
        assert len(untimed) == 21 and run[-n - 1] - untimed[0] < 0.02 <= run[-n] - untimed[0]
    # only the timed blocks were traced, one stamp each
    assert len(calls) == blocks and sum(len(t["n"]) for t in traces) == blocks
    assert a.tracing == 0  # tracing is off again at the end


def test_a_single_implementation_runs_its_rounds_back_to_back(clock):
    from pygpukit_dsp.bench.harness import _timed_rounds

    log = []
    a = _Recorder(log, "a", clock)
    samples = {"a": []}
    _timed_rounds([("a", a)], [np.zeros(4)], 600, samples, warm_s=10.0)  # no warm-up: 3 x 10 000 blocks
    assert len(log) == len(samples["a"]) == 600


def test_paired_schedule_takes_turns_of_the_project_and_one_baseline_at_a_time(clock):
    from pygpukit_dsp.bench.harness import _timed_pairs

    log = []
    p, b, c = _Recorder(log, "p", clock, traceable=True), _Recorder(log, "b", clock), _Recorder(log, "c", clock)
    samples, paired = {"p": [], "b": [], "c": []}, {}
    calls, traces = [], []
    inputs = [np.zeros(4), np.ones(4), np.full(4, 2.0)]
    _timed_pairs(("p", p), [("b", b), ("c", c)], inputs, 100, samples, paired, traced=p, calls=calls,
                 traces=traces, warm_s=0.02, turn=10, skip=2)
    assert len(samples["b"]) == len(samples["c"]) == 100 and len(samples["p"]) == 200
    assert [len(paired[k]) for k in ("b", "c")] == [100, 100] and samples["p"] == paired["b"] + paired["c"]
    names = [n for n, _, _ in log]
    cut = names.index("c") - 1  # c's warm-up starts with a project block
    assert "c" not in names[:cut] and "b" not in names[cut:]
    for part, other in ((log[:cut], "b"), (log[cut:], "c")):
        # 100 timed blocks each in turns of 8 timed + 2 untimed: 12 full turns and one of 2 + 4
        turns = part[-(12 * 20 + 2 * 6):]
        warm = part[:-(12 * 20 + 2 * 6)]
        # the two alternated untimed until warm_s had passed on the harness's clock (20.5 blocks)
        assert len(warm) == 22 and warm[-2][1] - warm[0][1] < 0.02 <= turns[0][1] - warm[0][1]
        assert [n for n, _, _ in warm[:4]] == ["p", other, "p", other]
        runs = [list(g) for _, g in itertools.groupby(turns, key=lambda e: e[0])]
        assert [r[0][0] for r in runs] == ["p", other] * 13                      # the project first
        assert [len(r) for r in runs] == [10] * 24 + [6, 6]
        assert all(len({e[2] for e in r}) > 1 for r in runs)                       # blocks cycled
    assert len(calls) == 200 and sum(len(t["n"]) for t in traces) == 200 and p.tracing == 0
    with pytest.raises(ValueError, match="cannot leave 5 untimed"):
        _timed_pairs(("p", p), [("b", b)], inputs, 10, samples, paired, turn=5, skip=5)


def test_paired_report_takes_each_ratio_from_its_pairing():
    rep = run_bench(_small(), backend="cpu", blocks=300, warmup=10, compare=["numpy"])
    assert rep.schedule == "paired"
    proj, base = rep.results
    assert base.paired_project_us and len(proj.raw_us) == 300
    assert rep.ratios()["numpy"]["p99"] == pytest.approx(base.paired_project_us["p99"] / base.latency_us["p99"])
    d = rep.to_dict()
    assert d["schedule"] == "paired"
    assert d["timed_in"] == {"schedule": "paired", "turn_blocks": 10, "untimed_per_turn": 2}
    assert d["results"][1]["paired_project_us"]["p99"] == base.paired_project_us["p99"]
    rounds = run_bench(_small(), backend="cpu", blocks=300, warmup=10, compare=["numpy"], schedule="rounds")
    assert not rounds.results[1].paired_project_us
    assert rounds.to_dict()["timed_in"] == {"schedule": "rounds", "round_blocks": 250}
    from pygpukit_dsp.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown schedule 'pairs'"):
        run_bench(_small(), backend="cpu", blocks=10, schedule="pairs")


def test_missing_baseline_library_is_reported_as_skipped():
    rep = run_bench(_small(), backend="cpu", blocks=20, warmup=0, compare=["torch"])
    r = rep.results[1]
    if r.status == "skipped":
        assert r.reason_code in ("not_installed", "no_gpu") and r.reason  # why, for a program and a reader
        assert rep.to_dict()["results"][1]["reason_code"] == r.reason_code and "torch" not in rep.ratios()
    else:  # a machine with torch and a GPU: it ran and matched
        assert r.status == "ok"


def test_a_baseline_without_one_of_the_stages_is_skipped_with_its_code(monkeypatch):
    from pygpukit_dsp.bench import baselines
    from pygpukit_dsp.bench.baselines import BaselineSkipped

    def no_fir(pipeline, chain):
        raise BaselineSkipped("numpy baseline has no 'fir' stage", "unsupported_stage")

    monkeypatch.setitem(baselines.BASELINES, "numpy", no_fir)
    rep = run_bench(_small(), backend="cpu", blocks=20, warmup=0, compare=["numpy"])
    r = rep.results[1]
    assert (r.status, r.reason_code) == ("skipped", "unsupported_stage") and rep.ratios() == {}


@pytest.mark.gpu
def test_first_block_times_cold_and_warm(monkeypatch):
    from pygpukit_dsp.bench.inputs import first_block_times

    monkeypatch.delenv("GK_JIT_DISK_CACHE", raising=False)  # the warm open reads the disk cache the cold one wrote
    p = _small()
    t = first_block_times(p, p.specs(), np.ones((4, 64), np.float32))
    assert t["first_block_cold_ms"] > 0 and t["first_block_warm_ms"] > 0
    # the cold open loads the wheel's images or compiles with NVRTC (writing the disk cache); the
    # warm one compiles nothing: what the cold one compiled it reads from the disk cache
    assert t["kernels_warm_nvrtc"] == 0 and t["kernels_warm_disk"] == t["kernels_cold_nvrtc"]
    assert t["kernels_warm_shipped"] == t["kernels_cold_shipped"]


@pytest.mark.gpu
def test_cuda_latency_report_breaks_the_projects_latency_into_phases():
    rep = run_bench(_small(), backend="cuda", blocks=600, warmup=10, compare=["numpy"])
    b = rep.breakdown
    assert b is not None and b.blocks == 600  # timed blocks only, not the untimed ones between rounds
    d = json.loads(json.dumps(rep.to_dict()))
    assert d["breakdown"]["blocks"] == 600 and [p["name"] for p in d["breakdown"]["phases"]][0] == "python in"
    assert {"first_block_cold_ms", "kernels_cold_nvrtc", "kernels_warm_disk"} <= set(d["first_block"])
