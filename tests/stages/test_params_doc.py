"""Every stage's constructor is discoverable: a keyword-only signature and a Parameters section in its
docstring, both from its Params model; a ready Params instance still works; reprs show what differs
from the defaults."""

from __future__ import annotations

import inspect
import pydoc

import numpy as np
import pytest

from pygpukit_dsp import stages
from pygpukit_dsp.stages import STAGES
from pygpukit_dsp.stages.params_doc import default_words, type_words

KW = inspect.Parameter.KEYWORD_ONLY


@pytest.mark.parametrize("type_name", sorted(STAGES))
def test_signature_is_the_params_model_then_name_and_base_dir(type_name):
    cls = STAGES[type_name]
    sig = inspect.signature(cls)
    fields = cls.Params.model_fields
    assert list(sig.parameters) == [*fields, "name", "base_dir"]
    assert all(p.kind is KW for p in sig.parameters.values())
    for pname, field in fields.items():
        p = sig.parameters[pname]
        if field.is_required():
            assert p.default is inspect.Parameter.empty
        else:
            default = field.get_default(call_default_factory=True)
            assert p.default == default or (p.default is None and default is None)
    assert sig.parameters["name"].default is None and sig.parameters["base_dir"].default is None


def test_fir_signature_reads_as_python_types():
    text = str(inspect.signature(stages.Fir))
    assert text.startswith("(*, taps: ArrayLike | None = None, taps_file: str | None = None, "
                           "design: FirDesign | Mapping[str, Any] | None = None, "
                           "method: Literal['auto', 'direct', 'matmul', 'overlap_save'] = 'auto', ")
    assert text.endswith("name: str | None = None, base_dir: str | Path | None = None)")
    assert "(*, frames: int, name:" in str(inspect.signature(stages.Average))  # required: no default


@pytest.mark.parametrize("type_name", sorted(STAGES))
def test_help_lists_every_parameter_with_type_and_default(type_name):
    cls = STAGES[type_name]
    text = pydoc.render_doc(cls, renderer=pydoc.plaintext)
    assert "Parameters\n |  ----------" in text
    for pname, field in cls.Params.model_fields.items():
        default = "optional" if default_words(field) == "not set" else default_words(field)
        assert f" |  {pname} : {type_words(field.annotation)}, {default}\n" in text, pname
    assert " |  name : str | None, optional\n" in text


def test_help_lists_nested_fields_indented():
    text = pydoc.render_doc(stages.Fir, renderer=pydoc.plaintext)
    assert " |  design : mapping, optional\n" in text
    assert " |      numtaps : integer, required\n" in text
    assert " |      window : string | list of strings and numbers, default 'hamming'\n" in text


def test_keywords_or_one_params_instance():
    a = stages.Fir(taps=[0.25, 0.5, 0.25])
    b = stages.Fir(stages.Fir.Params(taps=[0.25, 0.5, 0.25]))
    np.testing.assert_array_equal(a.params.taps, b.params.taps)
    with pytest.raises(TypeError, match="not both"):
        stages.Fir(stages.Fir.Params(taps=[1.0]), taps=[2.0])


def test_repr_shows_non_default_parameters_and_shortens_long_arrays():
    assert repr(stages.Fir(design={"numtaps": 63, "cutoff_hz": 1000})) == \
        "Fir(name='fir', design={'numtaps': 63, 'cutoff_hz': 1000.0})"
    assert repr(stages.Gain(db=-6, name="trim")) == "Gain(name='trim', db=-6.0)"
    assert repr(stages.Fir(taps=np.ones(1000))) == "Fir(name='fir', taps=array(shape=(1000,), dtype=float64))"
    assert repr(stages.Db()) == "Db(name='db')"


def test_words_for_types():
    from typing import Literal

    assert type_words(int) == "integer" and type_words(float | None) == "number"
    assert type_words(list[float] | None) == "list of numbers"
    assert type_words(Literal["asap", "realtime"]) == "'asap' | 'realtime'"
    assert type_words(dict) == "mapping"
