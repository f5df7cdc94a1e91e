"""Admission's policy (pygpukit_dsp/admission/policy.py): every tunable in one documented object."""

from dataclasses import FrozenInstanceError, fields, replace

import pytest

from pygpukit_dsp import Pipeline, Session, stages
from pygpukit_dsp.admission import DEFAULT_POLICY, DEFAULT_U_MAX, AdmissionPolicy, admit
from pygpukit_dsp.io import NullSink, NullSource


def test_every_tunable_has_a_meaning_and_a_unit():
    meanings = AdmissionPolicy.meanings()
    assert set(meanings) == {f.name for f in fields(AdmissionPolicy)}
    for name, text in meanings.items():
        assert text.rstrip(".").endswith(")") and "(" in text, f"{name}: its unit in parentheses at the end"
    assert DEFAULT_POLICY.to_dict()["dispatcher_busy_cap"] == 0.85 and DEFAULT_U_MAX == 0.9
    with pytest.raises(FrozenInstanceError):
        DEFAULT_POLICY.u_max = 0.5  # type: ignore[misc]


def test_a_policy_checks_its_values_and_u_max_replaces_its_bound():
    with pytest.raises(ValueError, match="u_max must be in"):
        AdmissionPolicy(u_max=1.5)
    with pytest.raises(ValueError, match="dispatcher_busy_cap must be in"):
        AdmissionPolicy(dispatcher_busy_cap=0.0)
    with pytest.raises(ValueError, match="machine_streams must be > 0"):
        AdmissionPolicy(machine_streams=0)
    assert DEFAULT_POLICY.with_u_max(None) is DEFAULT_POLICY
    assert DEFAULT_POLICY.with_u_max(0.5) == replace(DEFAULT_POLICY, u_max=0.5)
    with pytest.raises(ValueError, match=r"Session\(u_max=...\)"):
        DEFAULT_POLICY.with_u_max(2, "Session(u_max=...)")


def _rt(name, cost_us):
    return Pipeline([stages.Gain(db=0)], name=name, sample_rate=48000, channels=1, block_size=480, backend="cpu",
                    qos={"class": "realtime", "cost_us": cost_us}, source=NullSource(duration_s=0.02), sink=NullSink())


def test_a_session_and_admit_take_the_policy():
    tight = replace(DEFAULT_POLICY, u_max=0.5, safety_margin_ns=10_000)
    session = Session([_rt("a", 4000)], policy=tight)
    assert session.policy == tight and session.u_max == 0.5
    assert Session([_rt("a", 4000)], policy=tight, u_max=0.7).policy.u_max == 0.7  # u_max replaces its bound
    session.run()
    config = session.scheduler.config
    assert (config["u_max"], config["safety_margin_ns"]) == (0.5, 10_000)
    # a CPU stream's scheduler has no dispatcher model
    assert (config["dispatcher_busy_cap"], config["dispatcher_hold_ns"]) == (1.0, 0)
    from types import SimpleNamespace

    from pygpukit_dsp.backends import BackendChoice
    from pygpukit_dsp.qos import QoS
    from pygpukit_dsp.signal import SignalSpec

    r = SimpleNamespace(pipeline=SimpleNamespace(name="x", qos=QoS(**{"class": "realtime", "cost_us": 3000}),
                                                 where=None),
                        chain=SimpleNamespace(input=SignalSpec(48000.0, 1, 480)),
                        engine=SimpleNamespace(choice=BackendChoice("cpu", "test")))
    adm = admit([r], policy=tight)
    res = adm.results["x"]
    assert res.admitted and res.cost_ns == 3_000_000 and res.cost_source == "declared (qos.cost_us)"
    assert res.placement.device == "cpu" and res.to_dict()["placement"]["reason"] == "backend cpu"
