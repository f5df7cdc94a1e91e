"""The soak (bench/soak.py): blocks at the stream's clock, samples at the interval, the growth fit,
JSON, and `gk-stream bench FILE --soak`. Short soaks on the CPU; one W1 soak on the GPU machine."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from pygpukit_dsp import Pipeline, stages
from pygpukit_dsp.bench.soak import (
    MIB,
    SoakReport,
    SoakSample,
    least_squares_slope,
    run_soak,
)
from pygpukit_dsp.io import NullSink, SynthSource

ROOT = Path(__file__).resolve().parents[2]
RATE, BLOCK = 8000, 256          # 31.25 blocks/s: a block period of 32 ms


def _small(**synth):
    return Pipeline([stages.Fir(taps=np.hanning(16))], name="small", sample_rate=RATE, channels=2,
                    block_size=BLOCK, backend="cpu", qos={"class": "realtime"},
                    source=SynthSource(signal="noise", seed=1, **synth), sink=NullSink())


def _no_cuda(monkeypatch):
    """Make any use of the CUDA device an error: the cpu backend must not touch it."""
    from pygpukit_dsp import _native

    def refuse(*args, **kwargs):
        raise AssertionError("the cpu soak touched the CUDA device")

    monkeypatch.setattr(_native, "Device", refuse)


def test_blocks_are_released_at_the_stream_clock_and_sampled_at_the_interval(monkeypatch):
    _no_cuda(monkeypatch)
    seen = []
    rep = run_soak(_small(), backend="cpu", minutes=0.05, interval_s=0.5, warmup_s=0.6, progress=seen.append)
    period = BLOCK / RATE
    assert rep.backend == "cpu" and rep.ended_by == "duration limit"
    assert rep.blocks == math.ceil(3.0 / period)  # 3 s of the clock, whatever the host's speed
    assert rep.wall_s > 0
    assert seen == rep.samples  # progress got every sample, in order

    phases = [s.phase for s in rep.samples]
    assert phases[0] == "before" and phases[-1] == "after"
    periodic = rep.samples[1:-1]
    assert len(periodic) >= 4  # every 0.5 s over a run of at least 3 s (a sampler late by a tick skips it)
    for k, s in enumerate(periodic, start=1):
        assert s.elapsed_s >= k * 0.5  # never before its tick (a late one may skip ticks after it)
        assert s.phase == ("warm-up" if s.elapsed_s < 0.6 else "steady")
        if s.expected_blocks is not None:
            assert s.blocks <= s.expected_blocks + 1  # never ahead of the clock
        assert s.rss_bytes > 0 and s.hwm_bytes >= s.rss_bytes and s.fds > 0 and s.threads >= 1
        assert s.device_used_bytes is None and s.pool_in_use_bytes is None  # no CUDA on the cpu backend
    assert [s.elapsed_s for s in periodic] == sorted(s.elapsed_s for s in periodic)
    last = rep.steady()[-1]
    assert 0 < last.blocks <= rep.blocks and last.expected_blocks > 0
    assert last.p50_us is not None and last.p50_us <= last.p99_us

    g = rep.growth()
    assert g["steady_samples"] == len(rep.steady()) >= 3
    assert g["rss_start_mib"] == rep.steady()[0].rss_bytes / MIB
    assert g["fds_end"] == last.fds
    assert "device_used_start_mib" not in g and rep.verdict_code() in ("no_growth", "growth")
    assert "| elapsed s | phase | blocks |" in rep.markdown()  # the table renders


def test_a_source_that_ends_is_opened_again_so_the_soak_runs_its_length():
    rep = run_soak(_small(duration_s=0.5), backend="cpu", minutes=0.03, interval_s=0.4, warmup_s=0.2,
                   track_python=True)
    assert rep.ended_by == "duration limit"
    assert rep.blocks == math.ceil(1.8 * RATE / BLOCK)  # 1.8 s although the source holds 0.5 s
    assert rep.source_restarts >= 3
    assert rep.python_tracked and all(s.python_bytes is not None for s in rep.samples)
    assert "python_start_mib" in rep.growth()


def test_least_squares_slope():
    assert least_squares_slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert least_squares_slope([0, 1, 2, 3], [1, 2, 1, 2]) == pytest.approx(0.2)
    assert least_squares_slope([1.0], [5.0]) is None
    assert least_squares_slope([2, 2, 2], [1, 2, 3]) is None  # no spread in x: no line


def _report(rss_mib, *, fds=None, warm=(), interval=10.0, pool=None):
    """A report of 10 s samples: ``warm`` RSS values in the warm-up, then ``rss_mib`` steady."""
    samples = []
    for i, (phase, rss) in enumerate([("warm-up", r) for r in warm] + [("steady", r) for r in rss_mib]):
        samples.append(SoakSample(
            elapsed_s=(i + 1) * interval, phase=phase, stream_s=(i + 1) * interval - 0.1, blocks=100 * i,
            expected_blocks=100.0 * i, rss_bytes=int(rss * MIB), hwm_bytes=int(rss * MIB) + 1,
            fds=(fds or {}).get(i, 7), threads=5, p50_us=100.0, p99_us=300.0, misses=0,
            pool_reserved_bytes=None if pool is None else int(pool[i] * MIB),
            pool_in_use_bytes=None if pool is None else int(pool[i] * MIB),
            device_used_bytes=None if pool is None else int((500 + pool[i]) * MIB)))
    return SoakReport(pipeline="w1", backend="cpu", backend_reason="requested", machine="test", minutes=10,
                      interval_s=interval, warmup_s=len(warm) * interval, sample_rate=48000, block_size=256,
                      samples=samples, blocks=1000, ended_by="duration limit", wall_s=600.0)


def test_growth_fits_the_slope_after_the_warm_up_and_calls_a_steady_rise_growth():
    # 12 MiB/h over 10 minutes: 2 MiB in all, after a warm-up that jumped by 50 MiB (not fitted)
    hours = [i * 10 / 3600 for i in range(61)]
    rep = _report([100 + 12 * h for h in hours], warm=[50.0, 90.0, 99.0])
    g = rep.growth()
    assert g["steady_samples"] == 61 and g["window_s"] == pytest.approx(600.0)
    assert g["rss_slope_mib_h"] == pytest.approx(12.0, rel=1e-3)
    assert g["rss_start_mib"] == pytest.approx(100.0, abs=1e-5)
    assert g["rss_delta_mib"] == pytest.approx(2.0, abs=1e-5)
    assert g["threshold_mib_h"] == pytest.approx(6.0)  # NOISE_MIB (1 MiB) over the 10-minute window
    assert (rep.verdict_code(), rep.grew()) == ("growth", ["rss"])


def test_noise_within_the_threshold_is_no_growth_and_other_growth_is_named():
    wobble = [100 + (0.3 if i % 2 else -0.3) for i in range(61)]
    rep = _report(wobble)
    assert abs(rep.growth()["rss_slope_mib_h"]) < rep.growth()["threshold_mib_h"]
    assert (rep.verdict_code(), rep.grew()) == ("no_growth", [])

    leaky_fds = _report(wobble, fds={60: 9})
    assert (leaky_fds.verdict_code(), leaky_fds.grew()) == ("growth", ["fds"])
    assert (leaky_fds.growth()["fds_start"], leaky_fds.growth()["fds_end"]) == (7, 9)

    pool = [10.0] * 30 + [14.0] * 31  # the engine pool took 4 MiB more half way
    rep = _report(wobble, pool=pool)
    assert rep.grew() == ["device_pool"]
    g = rep.growth()
    assert (g["pool_reserved_start_mib"], g["pool_reserved_end_mib"]) == (pytest.approx(10.0), pytest.approx(14.0))
    assert g["device_used_end_mib"] == pytest.approx(514.0)


def test_too_few_samples_after_the_warm_up_says_so():
    rep = _report([100.0], warm=[90.0])
    assert (rep.verdict_code(), rep.grew()) == ("too_few_samples", None) and rep.growth()["steady_samples"] == 1


def test_report_round_trips_through_json():
    rep = _report([100 + 0.01 * i for i in range(20)], warm=[80.0], pool=[3.0] * 21)
    rep.scheduler_misses, rep.latency_us = 2, {"p50": 101.5, "p99": 350.25}
    d = json.loads(json.dumps(rep.to_dict()))
    assert (d["verdict_code"], d["grew"]) == ("no_growth", []) and d["verdict"] == rep.verdict()
    assert d["growth"] == json.loads(json.dumps(rep.growth()))
    assert d["block_period_s"] == pytest.approx(256 / 48000)
    assert SoakReport.from_dict(d) == rep


@pytest.mark.parametrize("bad", [{"minutes": 0}, {"interval_s": -1}, {"warmup_s": 600}])
def test_bad_soak_settings_are_config_errors(bad):
    from pygpukit_dsp.errors import ConfigError

    kw = {"minutes": 0.05, "interval_s": 1.0, **bad}
    with pytest.raises(ConfigError):
        run_soak(_small(), backend="cpu", **kw)


SOAK_YAML = """\
version: 1
name: tiny
sample_rate: 8000
block_size: 256
channels: 2
dtype: float32
backend: cpu
qos: {class: realtime}
source: {type: synth, signal: noise, seed: 1}
stages:
  - type: fir
    taps: [0.25, 0.5, 0.25]
sink: {type: "null"}
"""


def test_cli_bench_soak_prints_the_table_and_writes_json(gk_process):
    (Path(gk_process.cwd) / "tiny.yaml").write_text(SOAK_YAML)
    proc = gk_process.run("bench", "tiny.yaml", "--soak", "0.03", "--interval", "0.5", "--json", "soak.json")
    assert proc.returncode == 0, proc.stderr_text
    assert "| elapsed s | phase | blocks |" in proc.stdout_text  # the report printed
    data = json.loads((Path(gk_process.cwd) / "soak.json").read_text())
    # one progress line per sample
    assert len([ln for ln in proc.stderr_text.splitlines() if ln.startswith("soak tiny ")]) == len(data["samples"])
    assert data["blocks"] == math.ceil(1.8 * RATE / BLOCK) and data["interval_s"] == 0.5
    assert (data["pipeline"], data["backend"]) == ("tiny", "cpu")
    assert data["samples"][0]["phase"] == "before" and data["verdict_code"] in ("no_growth", "growth",
                                                                                 "too_few_samples")


@pytest.mark.parametrize("flag", [["--compare", "numpy"], ["--mode", "resident"], ["--schedule", "rounds"]])
def test_cli_soak_excludes_the_latency_bench_flags(gk_process, flag):
    (Path(gk_process.cwd) / "tiny.yaml").write_text(SOAK_YAML)
    proc = gk_process.run("bench", "tiny.yaml", "--soak", "1", *flag)
    assert proc.returncode == 2
    assert f"{flag[0]} does not apply to a soak" in proc.stderr_text and "Traceback" not in proc.stderr_text


def test_cli_interval_needs_soak(gk_process):
    (Path(gk_process.cwd) / "tiny.yaml").write_text(SOAK_YAML)
    proc = gk_process.run("bench", "tiny.yaml", "--interval", "2")
    assert proc.returncode == 2 and "--interval applies to a soak only" in proc.stderr_text


@pytest.mark.gpu
def test_w1_soak_on_cuda_samples_device_memory_and_runs_every_block():
    w1 = Pipeline.from_yaml(ROOT / "benchmarks" / "w1.yaml")
    rep = run_soak(w1, backend="cuda", minutes=10 / 60, interval_s=2.0, warmup_s=2.0)
    assert rep.backend == "cuda" and rep.ended_by == "duration limit"
    assert rep.blocks == math.ceil(10 * 48000 / 256)  # 1875: 10 s at 187.5 blocks/s
    assert rep.wall_s > 0
    for s in rep.samples:  # before, every 2 s, after: the GPU's and the engine pool's figures
        assert s.device_used_bytes is not None and s.device_used_bytes > 0
        assert s.pool_reserved_bytes is not None and s.pool_in_use_bytes is not None
    steady = rep.steady()
    assert len(steady) >= 3
    assert all(s.pool_in_use_bytes > 0 for s in steady)  # the engine's buffers while it streams
    last = steady[-1]
    assert 0 < last.blocks <= rep.blocks and last.blocks <= last.expected_blocks + 1  # never ahead of the clock
    g = rep.growth()
    assert "device_used_start_mib" in g and "pool_reserved_end_mib" in g
    assert rep.to_dict()["samples"][0]["device_used_bytes"] > 0
