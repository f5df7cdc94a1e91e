"""Admission of a session's streams before the first block (pygpukit_dsp/admission.py)."""

import pytest

from pygpukit_dsp import AdmissionError, Pipeline, Session, stages
from pygpukit_dsp.io import NullSink, NullSource


def _rt(name, cost_us=None, block=480, **qos):
    return Pipeline([stages.Gain(db=0)], name=name, sample_rate=48000, channels=1, block_size=block,
                    backend="cpu", qos={"class": "realtime", **({"cost_us": cost_us} if cost_us else {}), **qos},
                    source=NullSource(duration_s=0.05), sink=NullSink())


def test_declared_cost_over_the_bound_is_refused_with_figures():
    with pytest.raises(AdmissionError) as ei:
        Session([_rt("hog", cost_us=9500)]).run()  # 9.5 ms per 10 ms block > U_max 0.9
    e = ei.value
    assert e.stream == "hog"
    assert e.figures["bound"] == pytest.approx(0.9) and e.figures["stream_utilisation"] == pytest.approx(0.95)
    assert e.figures["cost_source"] == "declared (qos.cost_us)"
    assert "U_max" in str(e) and "stream_utilisation=0.95" in str(e)


def test_second_stream_refused_when_the_sum_exceeds_the_bound():
    with pytest.raises(AdmissionError) as ei:
        Session([_rt("a", cost_us=5000), _rt("b", cost_us=5000)]).run()
    assert ei.value.stream == "b"
    assert ei.value.figures["current_total"] == pytest.approx(0.5)


def test_admitted_streams_run_and_measured_cost_is_used_when_none_is_declared():
    a, b = _rt("a"), _rt("b", cost_us=100)
    s = Session([a, b])
    summaries = s.run()
    assert [x.pipeline for x in summaries] == ["a", "b"] and all(x.blocks == 5 for x in summaries)
    stats = {st["name"]: st for st in s.scheduler.stats()["streams"]}
    assert stats["a"]["admitted"] and stats["a"]["declared_cost_ns"] > 0  # measured before the run
    assert stats["b"]["declared_cost_ns"] == 100_000


def test_best_effort_streams_need_no_cost():
    p = Pipeline([stages.Gain(db=0)], sample_rate=1000, channels=1, block_size=10, backend="cpu",
                 source=NullSource(duration_s=0.1), sink=NullSink())
    s = Session([p])
    s.run()
    assert s.scheduler.stats()["streams"][0]["qos"] == "best_effort"

