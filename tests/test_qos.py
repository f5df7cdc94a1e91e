"""QoS in Python: class_ (YAML's class) or cls, and ConfigErrors naming the field and what it allows."""

from __future__ import annotations

import pytest

from pygpukit_dsp import ConfigError, Pipeline, QoS
from pygpukit_dsp.errors import ConfigErrors


def test_class_spellings():
    for q in (QoS(class_="realtime"), QoS(cls="realtime"), QoS(**{"class": "realtime"})):
        assert q.cls == q.class_ == "realtime"
    assert QoS().cls == "best_effort"
    assert QoS(class_="realtime", deadline_ms=5).to_config() == {"class": "realtime", "deadline_ms": 5.0}


@pytest.mark.parametrize("kwargs, path, allowed", [
    ({"class_": "realtime", "deadline_ms": -1}, ("deadline_ms",), "greater than 0"),
    ({"class_": "rt"}, ("class_",), "'realtime', 'throughput' or 'best_effort'"),
    ({"cls": "rt"}, ("class_",), "'realtime', 'throughput' or 'best_effort'"),
    ({"spin_us": 2_000_000}, ("spin_us",), "less than or equal to 1000000"),
    ({"cpu": "last"}, ("cpu",), "'auto'"),
])
def test_a_bad_value_is_a_config_error_naming_the_field(kwargs, path, allowed):
    with pytest.raises(ConfigError) as info:
        QoS(**kwargs)
    e = info.value
    assert e.path[:1] == path and allowed in e.message and e.message.startswith("QoS: ")


def test_unknown_field_gets_did_you_mean_and_two_problems_are_both_reported():
    with pytest.raises(ConfigError) as info:
        QoS(deadlin_ms=5)
    assert info.value.hint == "did you mean 'deadline_ms'?"
    with pytest.raises(ConfigErrors) as many:
        QoS(class_="realtime", deadline_ms=-1, spin_us=-3)
    assert sorted(e.path for e in many.value.errors) == [("deadline_ms",), ("spin_us",)]
    with pytest.raises(ConfigError, match="give the class once"):
        QoS(cls="realtime", class_="throughput")
    with pytest.raises(ConfigError, match="min_rate applies to class 'throughput' only"):
        QoS(min_rate=1000)


def test_the_pipeline_and_yaml_paths_say_the_same():
    with pytest.raises(ConfigError, match="deadline_ms: Input should be greater than 0"):
        Pipeline([], qos={"class": "realtime", "deadline_ms": -1})
    assert Pipeline([], qos=QoS(cls="throughput", min_rate=1e6)).qos.cls == "throughput"


def test_class_is_documented():
    assert "class_" in QoS.__doc__ and "cls" in QoS.__doc__


def test_signature_reads_as_python_types():
    import inspect

    text = str(inspect.signature(QoS))
    assert text.startswith("(*, class_: Literal['realtime', 'throughput', 'best_effort'] = 'best_effort', "
                           "deadline_ms: float | None = None")
    assert "cpu: int | Literal['auto'] | None = None" in text
